//! A stand-alone runner for the target servers, equivalent to `stampede target <kind> …`,
//! used by `bench/vs-nginx.sh` and handy for poking at a target without the full CLI.
//!
//! ```text
//! cargo run --release -p stampede-target-servers --example target -- http --listen 127.0.0.1:8080
//! ```
//!
//! Set `STAMPEDE_TARGET_RUNTIME=current-thread` for a single-threaded runtime.

use clap::Parser;
use stampede_target_servers::TargetCommand;

#[derive(Parser)]
#[command(about = "Run a Stampede target server")]
struct Cli {
    #[command(subcommand)]
    target: TargetCommand,
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let current = std::env::var("STAMPEDE_TARGET_RUNTIME").as_deref() == Ok("current-thread");
    let runtime = if current {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli.target.run()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            eprintln!("error: {msg}");
            std::process::ExitCode::FAILURE
        }
    }
}
