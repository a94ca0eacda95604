//! `stampede`: the CLI, and the controller, agent and target servers, in one binary. This
//! file only parses the command line, sets up logging and the runtime, and hands over to
//! [`stampede_cli::cmd::dispatch`]; every setting is defined in `config.rs`.

use std::process::ExitCode;

use clap::Parser;
use stampede_cli::config::{Cli, Command, LogFormat};
use stampede_cli::exit;

fn init_logging(format: LogFormat, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colour only on a terminal: logs redirected to a file or a pipe carry no escape codes.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// The process's runtime: `threads` workers (by default one per CPU it may use), and with
/// one a current-thread runtime. A multi-thread runtime's one worker still pays for what
/// only several can use (run queues shared across threads, wake-up notifications,
/// work-stealing bookkeeping), and in `run --local` and `agent` every request of the load
/// goes through it: on one pinned core the closed model's user time per request was lower
/// on the current-thread runtime in nine of ten alternated pairs (docs/performance.md).
fn runtime(threads: Option<u16>) -> std::io::Result<tokio::runtime::Runtime> {
    let workers = threads
        .map(usize::from)
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1);
    let mut builder = if workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    };
    builder.enable_all().build()
}

/// jemalloc, not glibc's malloc: every connection a run opens registers its socket with
/// tokio's reactor, which allocates a 128-byte aligned record for it, and glibc serves aligned
/// requests outside its thread cache (about 750 instructions each, with the free; jemalloc's
/// size classes are aligned and cached). A connection per request spends about 11 % fewer
/// user instructions per connection (`bench/instructions.sh newconn`); the closed and
/// constant-rate models, which allocate nothing per request, the same; and the peak RSS of
/// 10,000 connections is unchanged (mimalloc doubled it: docs/performance.md). Without the
/// `jemalloc` feature the system's allocator stays, for heap profilers that follow it.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let server = matches!(
        cli.command,
        Command::Controller(_) | Command::Agent(_) | Command::Target(_)
    );
    // Servers log at info; the CLI's own output is the report, so it logs only errors (an
    // embedded controller's or agent's warnings are already in the report, said plainly).
    init_logging(cli.log_format, if server { "info" } else { "error" });
    let rt = match runtime(cli.threads) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(exit::RUN_FAILED as u8);
        }
    };
    match rt.block_on(stampede_cli::cmd::dispatch(cli)) {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("error: {}", stampede_cli::causes(e.as_ref()));
            ExitCode::from(exit::RUN_FAILED as u8)
        }
    }
}
