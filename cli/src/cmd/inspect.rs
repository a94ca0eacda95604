//! The commands that look at a controller or a scenario without running load: `status`,
//! `report RUN_ID`, `agents`, `abort`, `plan` and `validate`.

use anyhow::{Context, Result};
use stampede_proto::v1;

use crate::client;
use crate::cmd::run::{outcome_code, print_report};
use crate::config::{Conn, Output};
use crate::exit;

/// `stampede status`: the runs the controller knows.
pub async fn status(conn: Conn, output: Output) -> Result<i32> {
    let ep = conn.endpoint().await?;
    let mut c = client::connect(&ep.url, ep.token.as_deref()).await?;
    let runs = c
        .list_runs(v1::ListRunsRequest {})
        .await
        .map_err(client::status_error)?
        .into_inner()
        .runs;
    if output == Output::Json {
        let rows: Vec<_> = runs.iter().map(|r| serde_json::json!({"run_id": r.run_id, "scenario": r.scenario, "state": r.state, "submitted_at_unix_ms": r.submitted_at_unix_ms, "agents": r.agents, "message": r.message})).collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!(
            "{:<18} {:<24} {:<10} {:>6}  message",
            "run", "scenario", "state", "agents"
        );
        for r in runs {
            println!(
                "{:<18} {:<24} {:<10} {:>6}  {}",
                r.run_id, r.scenario, r.state, r.agents, r.message
            );
        }
    }
    Ok(exit::OK)
}

/// `stampede report RUN_ID|FILE.json`: a finished run's report, fetched from the controller,
/// or a local report file rendered.
pub async fn report(
    run_id: String,
    conn: Conn,
    output: Output,
    files: crate::report_file::Outputs,
) -> Result<i32> {
    if crate::report_file::is_local(&run_id) {
        return crate::report_file::render(run_id.as_ref(), &files, output == Output::Json);
    }
    let ep = conn.endpoint().await?;
    let mut c = client::connect(&ep.url, ep.token.as_deref()).await?;
    let report = client::get_report(&mut c, &run_id).await?;
    files.write(&report)?;
    print_report(&report, output)?;
    Ok(outcome_code(&report))
}

/// `stampede agents`: the agents attached to the controller.
pub async fn agents(conn: Conn, output: Output) -> Result<i32> {
    let ep = conn.endpoint().await?;
    let mut c = client::connect(&ep.url, ep.token.as_deref()).await?;
    let agents = c
        .list_agents(v1::ListAgentsRequest {})
        .await
        .map_err(client::status_error)?
        .into_inner()
        .agents;
    if output == Output::Json {
        let rows: Vec<_> = agents.iter().map(|a| serde_json::json!({"id": a.agent_id, "version": a.version, "peer": a.peer, "pod": a.pod_name, "node": a.node_name, "ip": a.pod_ip, "pod_status": a.pod_status, "state": a.state, "run_id": a.run_id, "clock_offset_us": a.clock_offset_us, "capacity": a.capacity})).collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!(
            "{:<36} {:<12} {:<36} {:<16} {:<16} {:<9} {:>10}",
            "id", "state", "pod", "node", "ip", "pod", "clock off"
        );
        let dash = |v: &str| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.to_string()
            }
        };
        for a in agents {
            println!(
                "{:<36} {:<12} {:<36} {:<16} {:<16} {:<9} {:>8}µs",
                a.agent_id,
                a.state,
                dash(&a.pod_name),
                dash(&a.node_name),
                dash(&a.pod_ip),
                dash(&a.pod_status),
                a.clock_offset_us
            );
        }
    }
    Ok(exit::OK)
}

/// `stampede abort RUN_ID`.
pub async fn abort(run_id: String, conn: Conn) -> Result<i32> {
    let ep = conn.endpoint().await?;
    let mut c = client::connect(&ep.url, ep.token.as_deref()).await?;
    c.abort_run(v1::AbortRunRequest {
        run_id: run_id.clone(),
        reason: "aborted from the CLI".into(),
    })
    .await
    .map_err(client::status_error)?;
    println!("abort requested for {run_id}");
    Ok(exit::OK)
}

/// `stampede plan`: the dry run.
pub fn plan(a: crate::plan::PlanArgs) -> Result<i32> {
    let s = client::read_scenario_dry(&a.scenario)?;
    let r = crate::plan::plan(&s, &a)?;
    match a.output.as_str() {
        "json" => println!("{}", serde_json::to_string_pretty(&r)?),
        "text" => print!("{}", crate::plan::render(&r, s.is_closed())),
        other => anyhow::bail!("--output: `{other}` is not one of text, json"),
    }
    // Refused by the port budget: 1, like a breached threshold (a verdict, not an error).
    Ok(if r.refusals.is_empty() {
        exit::OK
    } else {
        exit::THRESHOLD
    })
}

/// `stampede validate FILE` (or `-` for standard input).
pub fn validate(scenario: std::path::PathBuf) -> Result<i32> {
    let mut s = client::read_scenario_dry(&scenario)?;
    let base = scenario.parent().unwrap_or(std::path::Path::new("."));
    crate::grpc::resolve_files(&mut s, base).with_context(|| format!("{}", scenario.display()))?;
    let plan = stampede_core::plan::Plan::new(&s, s.agents.unwrap_or(1), &[], s.seed.unwrap_or(0))?;
    let shape = match (&s.load, s.workloads.len()) {
        (_, n) if n > 0 => format!("{n} workload(s), {} phases", s.effective_phases().len()),
        (Some(l), _) => format!("{:?} load, {} connections", l.model, l.connections).to_lowercase(),
        (None, _) => format!("{} phases", s.phases.len()),
    };
    let planned = if s.is_closed() {
        "requests back to back (closed model: nothing planned ahead)".to_string()
    } else {
        format!(
            "{} sessions and {} requests planned",
            plan.total_sessions(),
            plan.total_requests()
        )
    };
    println!(
        "{}: ok — {shape}, {:.1}s, {planned} over {} agent(s)",
        scenario.display(),
        s.duration().as_secs_f64(),
        plan.agents
    );
    if crate::grpc::needs_resolution(&s) {
        println!("  grpc: the schema comes from the target's reflection service, so messages are checked when the run starts");
    }
    // Read by `run` from its environment at submit time; a dry run only names them.
    let env = s.env_names();
    if !env.is_empty() {
        let names: Vec<String> = env
            .iter()
            .map(|n| {
                let set = if std::env::var_os(n).is_some() {
                    "set"
                } else {
                    "not set here"
                };
                format!("{n} ({set})")
            })
            .collect();
        println!("  required at run: {}", names.join(", "));
    }
    Ok(exit::OK)
}
