//! `stampede capacity`: the stair-step capacity search (the logic is in
//! `stampede_core::capacity`; this drives it through the ordinary submit/watch path).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use stampede_core::capacity::{self, Search, SearchSpec, StepKind, StepVerdict};
use stampede_core::report::{Report, RunOutcome};
use stampede_core::scenario::{Phase, Scenario};
use stampede_core::threshold::Threshold;
use stampede_core::HumanDuration;
use stampede_proto::v1;

use crate::client;
use crate::cmd::interrupt::Interrupts;
use crate::local::LocalCluster;
use crate::render::us;

/// Arguments of `stampede capacity`.
#[derive(clap::Args, Debug)]
pub struct CapacityArgs {
    /// The scenario file: its target, session and settings are used; it needs no phases or
    /// load (any it has are replaced by the steps of the search).
    pub scenario: PathBuf,
    /// A service-level objective every step must meet, in the threshold syntax
    /// (e.g. "p99 < 50ms", "error_rate < 0.1%"); repeat for more.
    #[arg(long = "slo", required = true)]
    pub slos: Vec<String>,
    /// First stair rate, in arrivals (sessions) per second.
    #[arg(long)]
    pub start: Option<f64>,
    /// Stair increment, in arrivals per second.
    #[arg(long)]
    pub step: Option<f64>,
    /// Highest rate to try (alone: the stair goes from a tenth of it in tenths).
    #[arg(long)]
    pub max: Option<f64>,
    /// Most stair steps when no --max is given.
    #[arg(long, default_value_t = 20)]
    pub max_steps: u32,
    /// Length of each step, e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub step_duration: Duration,
    /// Bisection steps around the knee after the stair.
    #[arg(long, default_value_t = 3)]
    pub bisect: u32,
    /// Least share of the planned requests that must complete within a step, in percent.
    #[arg(long, default_value_t = 95.0)]
    pub min_achieved: f64,
    /// Run embedded: start a controller and agents in this process.
    #[arg(long)]
    pub local: bool,
    /// Controller URL.
    #[arg(
        long,
        env = "STAMPEDE_CONTROLLER",
        default_value = "http://127.0.0.1:7070"
    )]
    pub controller: String,
    /// Shared token of the controller.
    #[arg(long, env = "STAMPEDE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Number of agents (overrides the scenario's `agents`).
    #[arg(long)]
    pub agents: Option<u32>,
    /// Write the combined JSON report (every step as a phase) to this file.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Write the combined HTML report to this file.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// `json` prints the result as JSON.
    #[arg(long, default_value = "text")]
    pub output: String,
    /// No per-step progress on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// With workloads: the one whose rate the search varies. The others run as written in
    /// every step (so give them at least the step's duration), SLOs without a scope apply to
    /// this workload, and a step is judged on its requests.
    #[arg(long)]
    pub vary: Option<String>,
}

fn parse_duration(s: &str) -> Result<Duration, stampede_core::duration::DurationError> {
    stampede_core::duration::parse_duration(s)
}

/// The scenario of one step: the base scenario at one constant rate, with the SLOs as
/// thresholds, evaluated live (`abort_on_fail`) so an overloaded step ends early.
pub fn step_scenario(
    base: &Scenario,
    name: &str,
    rate: f64,
    duration: Duration,
    slos: &[String],
    vary: Option<&str>,
) -> Result<Scenario> {
    let mut s = base.clone();
    let step = vec![Phase {
        name: Some(name.to_string()),
        duration: HumanDuration(duration),
        arrival_rate: rate,
        ramp_to: None,
        warmup: false,
    }];
    match (vary, s.workloads.is_empty()) {
        (None, true) => {
            s.load = None;
            s.phases = step;
            s.thresholds = slos.to_vec();
        }
        (Some(_), true) => bail!("--vary: the scenario has no workloads; leave --vary out"),
        (vary, false) => {
            let names: Vec<&str> = base.workloads.iter().map(|w| w.name.as_str()).collect();
            let Some(w) = vary.and_then(|v| s.workloads.iter_mut().find(|w| w.name == v)) else {
                bail!(
                    "--vary: name the workload whose rate the search varies (one of: {})",
                    names.join(", ")
                );
            };
            w.load = None;
            w.phases = step;
            let scope = w.name.clone();
            s.thresholds = slos
                .iter()
                .map(|slo| match Threshold::parse(slo) {
                    Ok(t) if t.scope == stampede_core::threshold::Scope::Run => {
                        format!("workload({scope}).{}", slo.trim())
                    }
                    _ => slo.clone(),
                })
                .collect();
        }
    }
    // The SLOs given are the verdict; the default error verdict would add one of its own.
    s.max_error_rate = Some("none".into());
    s.abort_on_fail = true;
    s.validate().with_context(|| format!("step {name}"))?;
    Ok(s)
}

/// The result of a search.
pub struct Outcome {
    pub search: Search,
    pub report: Report,
    /// Each step's target side (CPU, slow endpoint, generator), in the search's order.
    pub sides: Vec<capacity::TargetSide>,
}

/// Runs the search; returns the exit code (0: a sustainable rate was found, 1: not even the
/// first step held, 2: a step could not run).
pub async fn command(a: CapacityArgs) -> Result<i32> {
    // Before any load: a signal from here on ends the search with the steps it ran.
    let mut signals = crate::cmd::interrupt::Interrupts::register()?;
    let (_, mut base) = client::read_scenario_with(&a.scenario, Scenario::from_yaml_loadless)?;
    // gRPC calls are encoded once, here, as for `run`: every step submits them as they are.
    let dir = a.scenario.parent().unwrap_or(std::path::Path::new("."));
    crate::grpc::resolve(&mut base, dir)
        .await
        .with_context(|| format!("{}", a.scenario.display()))?;
    for (i, slo) in a.slos.iter().enumerate() {
        Threshold::parse(slo).map_err(|e| anyhow::anyhow!("--slo[{i}]: {e}"))?;
    }
    let spec = SearchSpec::new(
        a.start,
        a.step,
        a.max,
        a.max_steps,
        a.bisect,
        a.min_achieved / 100.0,
    )
    .map_err(anyhow::Error::msg)?;
    let agents = a.agents.or(base.agents).unwrap_or(1);
    let outcome = if a.local {
        let cluster = LocalCluster::start(agents, None).await?;
        let r = search(
            &cluster.url(),
            Some(&cluster.token),
            &base,
            spec,
            agents,
            (&a, &mut signals),
        )
        .await;
        cluster.stop().await;
        r?
    } else {
        let conn = (&a, &mut signals);
        search(&a.controller, a.token.as_deref(), &base, spec, agents, conn).await?
    };
    if let Some(path) = &a.report {
        std::fs::write(path, serde_json::to_string_pretty(&outcome.report)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &a.html {
        let page = crate::html::html(&outcome.report)
            .map_err(|e| anyhow::anyhow!("rendering the HTML report: {e}"))?;
        std::fs::write(path, page).with_context(|| format!("writing {}", path.display()))?;
    }
    if a.output == "json" {
        println!(
            "{}",
            serde_json::to_string_pretty(&json(&outcome.search, &outcome.sides))?
        );
    } else {
        print!(
            "{}",
            text(
                &base.name,
                &a.slos,
                agents,
                a.step_duration,
                &outcome.search
            )
        );
        for line in capacity::findings(&outcome.search, &outcome.sides) {
            println!("Finding: {line}");
        }
    }
    Ok(if outcome.report.outcome == RunOutcome::Aborted {
        crate::exit::RUN_FAILED
    } else if outcome.search.sustainable().is_some() {
        crate::exit::OK
    } else {
        crate::exit::THRESHOLD
    })
}

async fn search(
    url: &str,
    token: Option<&str>,
    base: &Scenario,
    spec: SearchSpec,
    agents: u32,
    (a, signals): (&CapacityArgs, &mut Interrupts),
) -> Result<Outcome> {
    let mut c = client::connect(url, token).await?;
    let min_achieved = spec.min_achieved;
    let mut search = Search::new(spec);
    let mut parts: Vec<(String, Report)> = Vec::new();
    let mut sides = Vec::new();
    // The signal that stopped the search, and the report of the step it aborted.
    let mut interrupted = None;
    while let Some((name, kind, rate)) = search.next_step() {
        let s = step_scenario(
            base,
            &name,
            rate,
            a.step_duration,
            &a.slos,
            a.vary.as_deref(),
        )?;
        let text = serde_json::to_string(&s)?;
        if !a.quiet {
            eprintln!(
                "step {name}: {} arrivals/s for {:.0}s",
                capacity::fmt_rate(rate),
                a.step_duration.as_secs_f64()
            );
        }
        let run_id = client::submit(&mut c, &text, Some(agents), None).await?;
        let mut watcher = c.clone();
        let mut quiet = |_: client::Live<'_>| {};
        let watch = client::watch(&mut watcher, &run_id, &mut quiet);
        tokio::pin!(watch);
        let report = tokio::select! {
            r = &mut watch => r?,
            sig = signals.next() => {
                let signal = sig.name();
                eprintln!("\ninterrupted ({signal}): aborting step {name}; the report of the steps so far follows ({signal} again to quit at once)");
                c.abort_run(v1::AbortRunRequest { run_id: run_id.clone(), reason: format!("interrupted from the CLI ({signal})") }).await.map_err(client::status_error)?;
                let r = tokio::select! {
                    r = &mut watch => r?,
                    again = signals.next() => std::process::exit(again.exit_code()),
                };
                interrupted = Some((signal, name, r));
                break;
            }
        };
        if matches!(report.outcome, RunOutcome::Failed | RunOutcome::Incomplete)
            || (report.outcome == RunOutcome::Aborted && report.threshold_abort.is_none())
        {
            bail!(
                "step {name} ({}) could not complete: {}",
                report.run_id,
                report.message.clone().unwrap_or_default()
            );
        }
        // Judged on the varied workload alone, or on the whole run (no copy of the report).
        let narrowed = match &a.vary {
            Some(w) => Some(
                capacity::narrow_to_workload(&report, w)
                    .with_context(|| format!("step {name}: the report has no workload `{w}`"))?,
            ),
            None => None,
        };
        let v = capacity::judge(
            &name,
            kind,
            rate,
            a.step_duration.as_secs_f64(),
            narrowed.as_ref().unwrap_or(&report),
            min_achieved,
        );
        if !a.quiet {
            eprintln!("  {}", row(&v));
        }
        sides.push(capacity::TargetSide::of(
            narrowed.as_ref().unwrap_or(&report),
        ));
        search.record(v);
        parts.push((name, report));
    }
    let stopped_at = interrupted.map(|(signal, step, r)| {
        let why = format!("aborted ({signal}) during step {step}");
        parts.push((step, r));
        why
    });
    let mut report = capacity::merge_steps(&base.name, &parts)?;
    report.message = Some(summary(&search));
    if let Some(why) = stopped_at {
        // What the steps before it found still stands; the search itself did not finish.
        report.outcome = RunOutcome::Aborted;
        report.message = Some(format!("{why}; {}", summary(&search)));
    }
    Ok(Outcome {
        search,
        report,
        sides,
    })
}

fn verdict_text(v: &StepVerdict) -> String {
    match &v.reason {
        None => "holds".into(),
        Some(r) => format!("FAILS: {r}"),
    }
}

fn row(v: &StepVerdict) -> String {
    format!(
        "{:<14} {:>8} {:>10.1} {:>10.1} {:>9} {:>7} {:>9} {:>9}  {}",
        v.name,
        capacity::fmt_rate(v.rate),
        v.planned_rps,
        v.achieved_rps,
        v.completed,
        v.failed,
        us(v.p50_us),
        us(v.p99_us),
        verdict_text(v)
    )
}

fn summary(s: &Search) -> String {
    let sustainable = s.sustainable().map_or_else(
        || "no step held".to_string(),
        |v| {
            format!(
                "sustainable rate {}/s ({})",
                capacity::fmt_rate(v.rate),
                v.name
            )
        },
    );
    match s.first_failing() {
        Some(f) => format!(
            "{sustainable}; first failing rate {}/s ({}): {}",
            capacity::fmt_rate(f.rate),
            f.name,
            f.reason.clone().unwrap_or_default()
        ),
        None => format!("{sustainable}; no step failed up to the highest rate tried"),
    }
}

/// The result as text: the per-step table, the sustainable rate and the first failing one.
pub fn text(name: &str, slos: &[String], agents: u32, step: Duration, s: &Search) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Capacity search ({name}), {agents} agent(s), {:.0}s steps, SLO: {}",
        step.as_secs_f64(),
        slos.join(", ")
    );
    let _ = writeln!(
        o,
        "{:<14} {:>8} {:>10} {:>10} {:>9} {:>7} {:>9} {:>9}  verdict",
        "step", "rate/s", "planned/s", "achieved/s", "completed", "failed", "p50", "p99"
    );
    for v in &s.verdicts {
        let _ = writeln!(o, "{}", row(v));
    }
    match s.sustainable() {
        Some(v) => {
            let _ = writeln!(
                o,
                "Sustainable rate: {}/s  (step {}: p99 {}, achieved {:.1}/s)",
                capacity::fmt_rate(v.rate),
                v.name,
                us(v.p99_us),
                v.achieved_rps
            );
        }
        None => {
            let _ = writeln!(
                o,
                "Sustainable rate: none — the first step already failed; try a lower --start"
            );
        }
    }
    match s.first_failing() {
        Some(f) => {
            let _ = writeln!(
                o,
                "First failing rate: {}/s  (step {}): {}",
                capacity::fmt_rate(f.rate),
                f.name,
                f.reason.clone().unwrap_or_default()
            );
        }
        None => {
            let _ = writeln!(o, "First failing rate: none up to the highest rate tried");
        }
    }
    o
}

fn json(s: &Search, sides: &[capacity::TargetSide]) -> serde_json::Value {
    let step = |v: &StepVerdict| {
        serde_json::json!({
            "name": v.name,
            "kind": if v.kind == StepKind::Stair { "stair" } else { "bisect" },
            "rate": v.rate,
            "planned_rps": v.planned_rps,
            "achieved_rps": v.achieved_rps,
            "completed": v.completed,
            "failed": v.failed,
            "p50_us": v.p50_us,
            "p99_us": v.p99_us,
            "holds": v.holds,
            "reason": v.reason,
        })
    };
    serde_json::json!({
        "sustainable_rate": s.sustainable().map(|v| v.rate),
        "first_failing_rate": s.first_failing().map(|v| v.rate),
        "first_failing_reason": s.first_failing().and_then(|v| v.reason.clone()),
        "findings": capacity::findings(s, sides),
        "target_cpu_cores": sides.iter().map(|t| t.cpu_cores).collect::<Vec<_>>(),
        "steps": s.verdicts.iter().map(step).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "name: v\ntarget: http://127.0.0.1:1\nworkloads:\n  - name: background\n    load: { model: constant, rate: 20, connections: 2, duration: 30s }\n    session: [ { http: { method: GET, path: / } } ]\n  - name: checkout\n    session: [ { http: { method: GET, path: /pay } } ]\n";

    /// `--vary` replaces one workload's load with the step and scopes unscoped SLOs to it;
    /// the others run as written.
    #[test]
    fn a_step_varies_one_workload_and_scopes_its_slos() {
        let base = Scenario::from_yaml_loadless(TWO).unwrap();
        let slos = [
            "p99 < 50ms".to_string(),
            "step(checkout/step-1).p99 < 9ms".to_string(),
        ];
        let d = Duration::from_secs(5);
        let s = step_scenario(&base, "s1", 40.0, d, &slos, Some("checkout")).unwrap();
        assert_eq!(s.workloads[1].phases[0].arrival_rate, 40.0);
        assert!(s.workloads[1].load.is_none());
        assert_eq!(s.workloads[0], base.workloads[0]);
        assert_eq!(
            s.thresholds,
            [
                "workload(checkout).p99 < 50ms",
                "step(checkout/step-1).p99 < 9ms"
            ]
        );
        let e = step_scenario(&base, "s1", 40.0, d, &slos, None).unwrap_err();
        assert!(e.to_string().contains("background, checkout"), "{e}");
        let one = Scenario::from_yaml_loadless(
            "name: o\ntarget: http://127.0.0.1:1\nsession: [ { http: { path: / } } ]\n",
        )
        .unwrap();
        // One workload: its steps are named without a workload prefix.
        let slos = [
            "p99 < 50ms".to_string(),
            "step(step-1).p99 < 9ms".to_string(),
        ];
        assert!(step_scenario(&one, "s1", 40.0, d, &slos, Some("x")).is_err());
        assert_eq!(
            step_scenario(&one, "s1", 40.0, d, &slos, None)
                .unwrap()
                .thresholds,
            slos
        );
    }
}
