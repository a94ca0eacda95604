//! `stampede demo`: a local HTTP target, a controller and agents in this process, and the
//! demo scenario against them.

use std::time::Duration;

use anyhow::{Context, Result};
use stampede_core::Scenario;

use crate::cmd::run::{outcome_code, print_report, submit_follow, Outputs, Watch};
use crate::config::DemoArgs;
use crate::local::LocalCluster;

/// The demo scenario aimed at `target`, with its phases scaled to `duration` (the same
/// overrides as `run FILE --url U --duration D`).
pub fn demo_scenario(target: &str, duration: Option<Duration>) -> Result<(String, Scenario)> {
    let file = Scenario::from_yaml(include_str!("../../../examples/demo.yaml"))?;
    let flags = crate::quick::QuickArgs {
        url: Some(target.to_string()),
        duration,
        ..Default::default()
    };
    let text = flags.override_file(&file)?;
    let s = Scenario::from_yaml(&text)?;
    Ok((text, s))
}

/// `stampede demo`.
pub async fn demo(a: DemoArgs) -> Result<i32> {
    // A signal from here on aborts the demo's run, whose report is still written.
    let mut signals = crate::cmd::interrupt::Interrupts::register()?;
    use stampede_target_servers::http::{HttpConfig, HttpServer};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the demo target")?;
    let target_addr = listener.local_addr()?;
    let server = HttpServer::new(HttpConfig {
        delay_ms: 2,
        bytes: 512,
        ..HttpConfig::default()
    })?;
    let stop = tokio_util::sync::CancellationToken::new();
    let s = stop.clone();
    let target = tokio::spawn(
        server
            .clone()
            .serve(listener, async move { s.cancelled().await }),
    );
    let (text, scenario) = demo_scenario(&format!("http://{target_addr}"), a.duration)?;
    eprintln!(
        "demo: HTTP target on {target_addr} (GET /data answers after 2 ms), controller and {} agents in-process; {:.0}s of load",
        a.agents,
        scenario.duration().as_secs_f64()
    );
    let cluster = LocalCluster::start(a.agents, None).await?;
    let report = submit_follow(
        &cluster.url(),
        Some(&cluster.token),
        &text,
        Some(a.agents),
        None,
        &Watch {
            quiet: false,
            scenario: &scenario,
        },
        &mut signals,
    )
    .await;
    cluster.stop().await;
    stop.cancel();
    let _ = target.await;
    let report = report?;
    let html = a.report.with_extension("html");
    let written = Outputs::new(vec![
        (crate::export::Artifact::Json, &a.report),
        (crate::export::Artifact::Html, &html),
    ])
    .write(&report);
    print_report(&report, a.output)?;
    eprintln!(
        "target saw {} requests; report written to {} and {}",
        server.stats().requests_total,
        a.report.display(),
        html.display()
    );
    Ok(if written {
        outcome_code(&report)
    } else {
        crate::exit::RUN_FAILED
    })
}
