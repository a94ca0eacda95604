//! `stampede capacity`: the stair-step capacity search (the logic is in
//! `stampede_core::capacity`; this drives it through the ordinary submit/watch path).

mod vary;
pub use vary::{resolve, step_scenario, Varied};

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use stampede_core::capacity::{self, Axis, Search, SearchSpec, StepContext, StepKind, StepVerdict};
use stampede_core::report::{Report, RunOutcome};
use stampede_core::scenario::Scenario;
use stampede_core::threshold::Threshold;
use stampede_proto::v1;

use crate::client;
use crate::cmd::interrupt::Interrupts;
use crate::config::parse_duration;
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
    /// First stair level: arrivals (sessions) per second, or connections with
    /// `--vary connections`.
    #[arg(long)]
    pub start: Option<f64>,
    /// Stair increment: arrivals per second, or connections.
    #[arg(long)]
    pub step: Option<f64>,
    /// Highest level to try (alone: the stair goes from a tenth of it in tenths).
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
    /// What the search varies: `rate` (arrivals per second, the default) or `connections`
    /// (a closed load of N connections: the largest concurrency that meets the SLOs). A
    /// workload's name is read as `--vary rate --workload NAME`.
    #[arg(long)]
    pub vary: Option<String>,
    /// With workloads: the one the search varies. The others run as written in every step
    /// (so give them at least the step's duration), SLOs without a scope apply to this
    /// workload, and a step is judged on its requests.
    #[arg(long)]
    pub workload: Option<String>,
}

/// The result of a search.
pub struct Outcome {
    /// The steps the search ran and the rate it settled on.
    pub search: Search,
    /// The last run's report, which the exit code and `--report` take.
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
    let slos = a
        .slos
        .iter()
        .enumerate()
        .map(|(i, slo)| Threshold::parse(slo).map_err(|e| anyhow::anyhow!("--slo[{i}]: {e}")))
        .collect::<Result<Vec<_>>>()?;
    let names: Vec<&str> = base.workloads.iter().map(|w| w.name.as_str()).collect();
    let varied = resolve(a.vary.as_deref(), a.workload.as_deref(), &names)?;
    let spec = SearchSpec::new(
        a.start,
        a.step,
        a.max,
        a.max_steps,
        a.bisect,
        a.min_achieved / 100.0,
    )
    .and_then(|s| s.with_axis(varied.axis))?;
    let agents = a.agents.or(base.agents).unwrap_or(1);
    let outcome = if a.local {
        let cluster = LocalCluster::start(agents, None).await?;
        let r = search(
            &cluster.url(),
            Some(&cluster.token),
            (&base, &varied),
            spec,
            agents,
            (&a, &slos, &mut signals),
        )
        .await;
        cluster.stop().await;
        r?
    } else {
        let conn = (&a, &slos[..], &mut signals);
        let base = (&base, &varied);
        search(&a.controller, a.token.as_deref(), base, spec, agents, conn).await?
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
                &outcome.search,
                &outcome.sides
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
    (base, varied): (&Scenario, &Varied),
    spec: SearchSpec,
    agents: u32,
    (a, slos, signals): (&CapacityArgs, &[Threshold], &mut Interrupts),
) -> Result<Outcome> {
    let mut c = client::connect(url, token).await?;
    let min_achieved = spec.min_achieved;
    let mut search = Search::new(spec);
    let mut parts: Vec<(String, Report)> = Vec::new();
    let mut sides = Vec::new();
    // The signal that stopped the search, and the report of the step it aborted.
    let mut interrupted = None;
    let axis = varied.axis;
    while let Some((name, kind, level)) = search.next_step() {
        let s = step_scenario(base, &name, level, a.step_duration, &a.slos, varied)?;
        let text = serde_json::to_string(&s)?;
        if !a.quiet {
            let what = match axis {
                Axis::Rate => format!("{} arrivals/s", capacity::fmt_rate(level)),
                Axis::Connections => format!("{level:.0} connections"),
            };
            eprintln!(
                "step {name}: {what} for {:.0}s",
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
        let narrowed = match &varied.workload {
            Some(w) => Some(
                capacity::narrow_to_workload(&report, w)
                    .with_context(|| format!("step {name}: the report has no workload `{w}`"))?,
            ),
            None => None,
        };
        // The agents' CPU per request at the last step that held (over the whole run: the
        // agents' CPU is every workload's) sizes the agents if this step was the generator's.
        let last_good = search.sustainable().and_then(|v| {
            let i = search.verdicts.iter().position(|x| std::ptr::eq(x, v))?;
            Some((&parts.get(i)?.1, v.achieved_rps, v.level))
        });
        let ctx = StepContext {
            axis,
            last_good,
            top: search.top(),
            agents,
        };
        let v = capacity::judge(
            &name,
            kind,
            level,
            a.step_duration.as_secs_f64(),
            narrowed.as_ref().unwrap_or(&report),
            min_achieved,
            ctx,
        );
        if !a.quiet {
            eprintln!("  {}", row(axis, &v));
        }
        // A varied workload's narrowing keeps every target's rows: each is judged.
        let side = capacity::TargetSide::of(narrowed.as_ref().unwrap_or(&report), slos);
        if !a.quiet {
            for t in &side.targets {
                eprintln!("    {}", target_row(t));
            }
        }
        sides.push(side);
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
    match (&v.reason, &v.generator) {
        (None, _) => "holds".into(),
        (Some(r), Some(_)) => format!("GENERATOR LIMITED: {r}"),
        (Some(r), None) => format!("FAILS: {r}"),
    }
}

fn row(axis: Axis, v: &StepVerdict) -> String {
    // A closed load has no plan: its planned column is empty.
    let planned = match axis {
        Axis::Rate => format!("{:.1}", v.planned_rps),
        Axis::Connections => "-".into(),
    };
    format!(
        "{:<14} {:>8} {:>10} {:>10.1} {:>9} {:>7} {:>9} {:>9}  {}",
        v.name,
        capacity::fmt_rate(v.level),
        planned,
        v.achieved_rps,
        v.completed,
        v.failed,
        us(v.p50_us),
        us(v.p99_us),
        verdict_text(v)
    )
}

/// The generator's stop, in one sentence: where, which agent, how many agents are needed.
fn generator_text(s: &Search) -> Option<String> {
    let v = s.generator_stop()?;
    let g = v.generator.as_ref()?;
    let axis = s.spec.axis;
    let mut o = format!(
        "the search stopped at {} (step {}): the generator was the limit, not the target ({}); no knee of the target was found there",
        axis.fmt(v.level),
        v.name,
        g.cause
    );
    match (g.agents_needed, g.cpu_us_per_request) {
        (Some(n), Some(us)) => o.push_str(&format!(
            "; reaching {} needs {n} agents ({us:.0} µs of agent CPU per request)",
            axis.fmt(s.top())
        )),
        _ => o.push_str("; add agents (or give them more CPU) and search again"),
    }
    Some(o)
}

fn summary(s: &Search) -> String {
    let axis = s.spec.axis;
    let sustainable = s.sustainable().map_or_else(
        || "no step held".to_string(),
        |v| match axis {
            Axis::Rate => format!("sustainable rate {} ({})", axis.fmt(v.level), v.name),
            Axis::Connections => {
                format!("largest concurrency {} connections ({})", v.level, v.name)
            }
        },
    );
    let failing = match s.first_failing() {
        Some(f) => format!(
            "{sustainable}; first failing {} ({}): {}",
            axis.fmt(f.level),
            f.name,
            f.reason.clone().unwrap_or_default()
        ),
        None if s.generator_stop().is_some() => sustainable,
        None => format!("{sustainable}; no step failed up to the highest level tried"),
    };
    match generator_text(s) {
        Some(g) => format!("{failing}; {g}"),
        None => failing,
    }
}

/// The result as text: the per-step table, the sustainable level and the first failing one,
/// and where the generator stopped the search.
pub fn text(
    name: &str,
    slos: &[String],
    agents: u32,
    step: Duration,
    s: &Search,
    sides: &[capacity::TargetSide],
) -> String {
    let axis = s.spec.axis;
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
        "step",
        match axis {
            Axis::Rate => "rate/s",
            Axis::Connections => "conns",
        },
        "planned/s",
        "achieved/s",
        "completed",
        "failed",
        "p50",
        "p99"
    );
    for v in &s.verdicts {
        let _ = writeln!(o, "{}", row(axis, v));
    }
    match (axis, s.sustainable()) {
        (Axis::Rate, Some(v)) => {
            let _ = writeln!(
                o,
                "Sustainable rate: {}  (step {}: p99 {}, achieved {:.1}/s)",
                axis.fmt(v.level),
                v.name,
                us(v.p99_us),
                v.achieved_rps
            );
        }
        (Axis::Connections, Some(v)) => {
            let _ = writeln!(
                o,
                "Largest concurrency meeting the SLOs: {} connections ({:.1} req/s, p99 {}; step {})",
                v.level,
                v.achieved_rps,
                us(v.p99_us),
                v.name
            );
        }
        (_, None) if s.generator_stop().is_some() => {
            let _ = writeln!(
                o,
                "Sustainable level: none found before the generator's limit"
            );
        }
        (_, None) => {
            let _ = writeln!(
                o,
                "Sustainable level: none — the first step already failed; try a lower --start"
            );
        }
    }
    let what = match axis {
        Axis::Rate => "rate",
        Axis::Connections => "concurrency",
    };
    match s.first_failing() {
        Some(f) => {
            let _ = writeln!(
                o,
                "First failing {what}: {}  (step {}): {}",
                axis.fmt(f.level),
                f.name,
                f.reason.clone().unwrap_or_default()
            );
        }
        None if s.generator_stop().is_some() => {}
        None => {
            let _ = writeln!(o, "First failing {what}: none up to the highest tried");
        }
    }
    if let Some(g) = generator_text(s) {
        let _ = writeln!(o, "Generator limited: {g}");
    }
    let per_target = capacity::targets::capacities(s, &capacity::per_step_targets(sides));
    if !per_target.is_empty() {
        let _ = writeln!(
            o,
            "Per target (latency and error SLOs on each target's own requests):"
        );
        for c in &per_target {
            let _ = writeln!(o, "  {}", target_capacity_text(axis, c));
        }
    }
    o
}

/// One target's row under a step's: its requests and latency, and the SLOs it failed.
fn target_row(t: &capacity::targets::TargetStep) -> String {
    format!(
        "target {:<24} {:>9} {:>7} {:>9} {:>9}  {}",
        t.name,
        t.completed,
        t.failed,
        us(t.p50_us),
        us(t.p99_us),
        t.failing
            .as_ref()
            .map_or_else(|| "holds".to_string(), |f| format!("FAILS: {f}"))
    )
}

/// What the search found for one target, in a line.
fn target_capacity_text(axis: Axis, c: &capacity::targets::TargetCapacity) -> String {
    let held = match (c.sustainable, c.sustainable_p99_us) {
        (Some(l), Some(p99)) => format!("holds to {} (p99 {})", axis.fmt(l), us(p99)),
        _ => "held at no step".to_string(),
    };
    match &c.first_failing {
        Some((l, why)) => format!("{:<24} {held}; fails at {}: {why}", c.name, axis.fmt(*l)),
        None => format!(
            "{:<24} {held}; met the SLOs at every step, up to {}",
            c.name,
            axis.fmt(c.highest)
        ),
    }
}

fn json(s: &Search, sides: &[capacity::TargetSide]) -> serde_json::Value {
    let axis = s.spec.axis;
    let key = match axis {
        Axis::Rate => "rate",
        Axis::Connections => "connections",
    };
    let step = |v: &StepVerdict| {
        serde_json::json!({
            "name": v.name,
            "kind": if v.kind == StepKind::Stair { "stair" } else { "bisect" },
            key: v.level,
            "planned_rps": v.planned_rps,
            "achieved_rps": v.achieved_rps,
            "completed": v.completed,
            "failed": v.failed,
            "p50_us": v.p50_us,
            "p99_us": v.p99_us,
            "holds": v.holds,
            "reason": v.reason,
            "generator_limited": v.generator.is_some(),
        })
    };
    let target_rows = |i: usize| {
        let rows = sides.get(i).map_or(&[][..], |t| t.targets.as_slice());
        rows.iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.name,
                    "completed": t.completed,
                    "failed": t.failed,
                    "p50_us": t.p50_us,
                    "p99_us": t.p99_us,
                    "holds": t.holds(),
                    "reason": t.failing,
                })
            })
            .collect::<Vec<_>>()
    };
    let targets: Vec<_> = capacity::targets::capacities(s, &capacity::per_step_targets(sides))
        .into_iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name,
                format!("sustainable_{key}"): c.sustainable,
                "sustainable_p99_us": c.sustainable_p99_us,
                format!("first_failing_{key}"): c.first_failing.as_ref().map(|f| f.0),
                "first_failing_reason": c.first_failing.as_ref().map(|f| f.1.clone()),
                format!("highest_{key}"): c.highest,
            })
        })
        .collect();
    let generator = s.generator_stop().and_then(|v| {
        let g = v.generator.as_ref()?;
        let agent = match &g.cause {
            capacity::GeneratorCause::Cpu { agent, .. }
            | capacity::GeneratorCause::Ports { agent, .. } => Some(agent.clone()),
            capacity::GeneratorCause::Behind { agent, .. } => agent.clone(),
        };
        Some(serde_json::json!({
            "step": v.name,
            key: v.level,
            "cause": g.cause.to_string(),
            "agent": agent,
            "cpu_us_per_request": g.cpu_us_per_request,
            "agents_needed": g.agents_needed,
            "to_reach": s.top(),
        }))
    });
    serde_json::json!({
        "vary": key,
        format!("sustainable_{key}"): s.sustainable().map(|v| v.level),
        format!("first_failing_{key}"): s.first_failing().map(|v| v.level),
        "first_failing_reason": s.first_failing().and_then(|v| v.reason.clone()),
        "generator_limited": generator,
        "findings": capacity::findings(s, sides),
        "target_cpu_cores": sides.iter().map(|t| t.cpu_cores).collect::<Vec<_>>(),
        "targets": targets,
        "steps": s
            .verdicts
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let mut row = step(v);
                row["targets"] = target_rows(i).into();
                row
            })
            .collect::<Vec<_>>(),
    })
}
