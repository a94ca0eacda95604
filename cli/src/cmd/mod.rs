//! One module per group of commands; [`dispatch`] maps each parsed command to its function.

pub mod demo;
pub mod inspect;
pub mod interrupt;
pub mod run;
pub mod serve;

use anyhow::{Context, Result};

use crate::config::{Cli, Command};
use crate::exit;

/// Runs one parsed command; the result is the process's exit code.
pub async fn dispatch(cli: Cli) -> Result<i32> {
    crate::client::set_tls(cli.tls.load()?);
    match cli.command {
        Command::Run(a) => run::run(a).await,
        Command::Demo(a) => demo::demo(a).await,
        Command::Capacity(a) => crate::capacity::command(a).await,
        Command::Status { conn, output } => inspect::status(conn, output).await,
        Command::Report {
            run_id,
            conn,
            output,
            files,
        } => inspect::report(run_id, conn, output, files).await,
        Command::Compare(a) => crate::compare::command(a),
        Command::Agents { conn, output } => inspect::agents(conn, output).await,
        Command::Abort { run_id, conn } => inspect::abort(run_id, conn).await,
        Command::Plan(a) => inspect::plan(a),
        Command::Validate { scenario } => inspect::validate(scenario),
        Command::Crd => {
            print!("{}", stampede_controller::k8s::crd::crd_yaml());
            Ok(exit::OK)
        }
        Command::Schema => {
            println!(
                "{}",
                serde_json::to_string_pretty(&stampede_core::scenario::json_schema())?
            );
            Ok(exit::OK)
        }
        Command::Completions { shell } => completions(shell),
        Command::Controller(a) => serve::controller(a).await,
        Command::Agent(a) => serve::agent(a, cli.tls).await,
        Command::Target(t) => {
            t.run().await?;
            Ok(exit::OK)
        }
    }
}

fn completions(shell: clap_complete::Shell) -> Result<i32> {
    use clap::CommandFactory as _;
    // Into a buffer first: clap_complete panics on a write error (e.g. `| head`).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "stampede", &mut script);
    use std::io::Write as _;
    match std::io::stdout().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("writing the completion script")
        }
        _ => Ok(exit::OK),
    }
}

/// Resolves on the first SIGINT/SIGTERM; a second one exits at once.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    tracing::info!("shutting down (signal again to force)");
    tokio::spawn(async move {
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        std::process::exit(130);
    });
}
