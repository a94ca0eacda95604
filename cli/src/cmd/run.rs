//! `stampede run` (and the demo's run): read the scenario (a file, standard input, or the
//! one-line flags), check every output path before any load, submit and follow the run with a
//! live line, and write every output even when one of them fails.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use stampede_core::report::{Report, RunOutcome};
use stampede_core::Scenario;
use stampede_proto::v1;

use crate::client::{self, Live};
use crate::cmd::interrupt::Interrupts;
use crate::config::{Output, RunArgs};
use crate::export::Artifact;
use crate::local::LocalCluster;
use crate::{exit, render};

/// Reads the scenario a `run` was given: the file (or `-` for standard input), with the
/// target and load flags applied, or the one-line run the flags describe.
pub fn load_scenario(args: &RunArgs) -> Result<(String, Scenario)> {
    let positional;
    let args = match positional_url(args)? {
        Some(a) => {
            positional = a;
            &positional
        }
        None => args,
    };
    let (text, scenario) = match &args.scenario {
        Some(path) => client::read_scenario(path)?,
        None => {
            let text = args.quick.scenario_text()?;
            let s = Scenario::from_yaml(&text).context("the one-line run")?;
            (text, s)
        }
    };
    if args.scenario.is_none() || args.quick.is_empty() {
        return Ok((text, scenario));
    }
    let text = args.quick.override_file(&scenario)?;
    let s = Scenario::from_yaml(&text).context("the scenario with the flags applied")?;
    Ok((text, s))
}

/// `stampede run URL`: a positional argument that parses as a URL and names no existing file
/// is the one-line run's `--url` (the habit of wrk, hey and oha), never a file to read.
fn positional_url(args: &RunArgs) -> Result<Option<RunArgs>> {
    let Some(arg) = args.scenario.as_deref().and_then(Path::to_str) else {
        return Ok(None);
    };
    if !crate::quick::looks_like_url(arg) || Path::new(arg).exists() {
        return Ok(None);
    }
    if let Some(url) = &args.quick.url {
        anyhow::bail!("two URLs: `{arg}` and --url {url}; give one");
    }
    let mut quick = args.quick.clone();
    quick.url = Some(arg.to_string());
    Ok(Some(RunArgs {
        scenario: None,
        quick,
        ..args.clone()
    }))
}

/// Encodes the scenario's gRPC calls once, here (see [`crate::grpc`]); the submitted text
/// then carries their frames.
async fn resolve_grpc(a: &RunArgs, text: String, mut s: Scenario) -> Result<(String, Scenario)> {
    let base = match &a.scenario {
        Some(p) if p.as_os_str() != "-" => p.parent().unwrap_or(Path::new(".")).to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !crate::grpc::resolve(&mut s, &base).await? {
        return Ok((text, s));
    }
    let json = serde_json::to_string(&s)?;
    let max = stampede_core::scenario::MAX_SCENARIO_BYTES;
    if json.len() > max {
        anyhow::bail!(
            "the scenario with its encoded gRPC messages is {} bytes; at most {} MiB",
            json.len(),
            max >> 20
        );
    }
    Ok((json, s))
}

/// `--debug N`: the submitted scenario asks its agents for their first N requests.
fn with_debug(debug: Option<u32>, text: String, mut s: Scenario) -> Result<(String, Scenario)> {
    let Some(n) = debug else {
        return Ok((text, s));
    };
    s.debug = n;
    s.validate().context("--debug")?;
    Ok((serde_json::to_string(&s)?, s))
}

/// The files a run writes, checked before any load so a typo in a path never costs the run.
pub struct Outputs<'a> {
    files: Vec<(Artifact, &'a Path)>,
}

impl<'a> Outputs<'a> {
    /// The files to write, each with the artifact rendered into it.
    pub fn new(files: Vec<(Artifact, &'a Path)>) -> Self {
        Self { files }
    }

    /// The files `run`'s flags name (`--report`, `--hdr-log`, `--csv`, `--html`, ...).
    pub fn of(a: &'a RunArgs) -> Self {
        let files = [
            (Artifact::Json, &a.report),
            (Artifact::HdrLog, &a.hdr_log),
            (Artifact::Csv, &a.csv),
            (Artifact::Html, &a.html),
            (Artifact::Junit, &a.junit),
            (Artifact::SummaryMd, &a.summary_md),
        ]
        .into_iter()
        .filter_map(|(kind, p)| p.as_deref().map(|p| (kind, p)))
        .collect();
        Self { files }
    }

    /// Each path's directory exists and is writable, and the path is not a directory.
    pub fn check(&self) -> Result<()> {
        for (kind, path) in &self.files {
            check_writable(path).with_context(|| format!("{} {}", kind.flag(), path.display()))?;
        }
        Ok(())
    }

    /// Writes every output; a failure is reported and the others are still written.
    /// Returns whether all were written.
    pub fn write(&self, r: &Report) -> bool {
        let mut ok = true;
        for (kind, path) in &self.files {
            let written = kind.render(r).and_then(|b| {
                std::fs::write(path, b).with_context(|| format!("writing {}", path.display()))
            });
            if let Err(e) = written {
                eprintln!("error: {}: {e:#}", kind.flag());
                ok = false;
            }
        }
        ok
    }
}

fn check_writable(path: &Path) -> Result<()> {
    if path.is_dir() {
        anyhow::bail!("is a directory");
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        anyhow::bail!("the directory {} does not exist", dir.display());
    }
    // Probe with a temporary file in the same directory: permissions, read-only mounts.
    tempfile::NamedTempFile::new_in(&dir)
        .map(drop)
        .with_context(|| format!("cannot write in {}", dir.display()))
}

/// `stampede run`.
pub async fn run(a: RunArgs) -> Result<i32> {
    // Before anything else: a signal from here on aborts the run rather than the process.
    let mut signals = Interrupts::register()?;
    let loaded = match load_scenario(&a) {
        Ok((text, scenario)) => resolve_grpc(&a, text, scenario).await,
        Err(e) => Err(e),
    };
    let loaded = loaded.and_then(|(text, s)| with_debug(a.debug, text, s));
    let (text, scenario) = match loaded {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(exit::RUN_FAILED);
        }
    };
    let outputs = Outputs::of(&a);
    if let Err(e) = outputs.check() {
        eprintln!("error: {e:#} (nothing was run)");
        return Ok(exit::RUN_FAILED);
    }
    if let Some(note) = a.quick.connection_note() {
        if scenario.load.is_none() {
            eprintln!("{note}");
        }
    }
    let watch = Watch {
        quiet: a.quiet,
        scenario: &scenario,
    };
    let report = if a.local {
        let n = a.agents.or(scenario.agents).unwrap_or(1);
        let cluster = LocalCluster::start(n, None).await?;
        let metrics = match a.metrics_listen {
            Some(addr) => Some(serve_metrics(&cluster, addr).await?),
            None => None,
        };
        let r = submit_follow(
            &cluster.url(),
            Some(&cluster.token),
            &text,
            Some(n),
            a.agent_wait,
            &watch,
            &mut signals,
        )
        .await;
        if let Some((stop, task)) = metrics {
            stop.cancel();
            let _ = task.await;
        }
        cluster.stop().await;
        r?
    } else {
        let ep = a.conn.endpoint().await?;
        let r = submit_follow(
            &ep.url,
            ep.token.as_deref(),
            &text,
            a.agents,
            a.agent_wait,
            &watch,
            &mut signals,
        )
        .await;
        if let Err(e) = &r {
            if let Some(hint) = local_hint(e, a.conn.controller.is_some()) {
                eprintln!("{hint}");
            }
        }
        r?
    };
    let written = outputs.write(&report);
    if a.wide && a.output == Output::Text {
        print!("{}", render::report_text_width(&report, true));
    } else {
        print_report(&report, a.output)?;
    }
    Ok(if written {
        outcome_code(&report)
    } else {
        exit::RUN_FAILED
    })
}

/// `run --local --metrics-listen ADDR`: the embedded controller's `/metrics` on `addr` until
/// the returned token is cancelled; the bound address goes to standard error (stdout holds
/// the report), so `127.0.0.1:0` works too.
async fn serve_metrics(
    cluster: &LocalCluster,
    addr: std::net::SocketAddr,
) -> Result<(
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<()>,
)> {
    let l = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("--metrics-listen: binding {addr}"))?;
    eprintln!("stampede run: metrics on {}", l.local_addr()?);
    let stop = tokio_util::sync::CancellationToken::new();
    let (c, until) = (cluster.controller.clone(), stop.clone());
    let task = tokio::spawn(async move {
        c.serve_metrics(l, async move { until.cancelled().await })
            .await;
    });
    Ok((stop, task))
}

/// The hint printed when no controller answers: most first runs meant `--local`.
fn local_hint(e: &anyhow::Error, explicit: bool) -> Option<String> {
    let unreachable = e
        .chain()
        .any(|c| c.to_string().contains("cannot reach the controller"));
    if !unreachable {
        return None;
    }
    Some(if explicit {
        "hint: is the controller running there? To run without one, add --local (a controller \
         and agents in this process)"
            .into()
    } else {
        "hint: no controller answers; add --local to run a controller and agents in this \
         process, or give --controller URL"
            .into()
    })
}

/// The exit code of a finished run (the table in `docs/concepts.md`).
pub fn outcome_code(r: &Report) -> i32 {
    match r.outcome {
        RunOutcome::Succeeded if r.thresholds_passed() => exit::OK,
        RunOutcome::Succeeded => exit::THRESHOLD,
        // abort_on_fail stopped the run on a threshold breach: a breach, not a broken run.
        RunOutcome::Aborted if r.threshold_abort.is_some() => exit::THRESHOLD,
        // Less than planned was delivered: never a pass, whatever the numbers say.
        RunOutcome::Failed | RunOutcome::Aborted | RunOutcome::Incomplete => exit::RUN_FAILED,
    }
}

/// Prints `r` on standard output, as text or JSON.
pub fn print_report(r: &Report, output: Output) -> Result<()> {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(r)?),
        Output::Text => print!("{}", render::report_text(r)),
    }
    Ok(())
}

/// How a run is followed: quietly, or with a live line that knows the scenario's phases.
pub struct Watch<'a> {
    /// No live line: only the final report is printed.
    pub quiet: bool,
    /// The submitted scenario, whose phases the live line names.
    pub scenario: &'a Scenario,
}

/// Prints live progress: a rewritten line on a terminal, a line every 5 s otherwise.
struct Progress<'a> {
    tty: bool,
    quiet: bool,
    last_printed: f64,
    scenario: &'a Scenario,
    /// `--debug`: the exchanges printed so far, and the step names they are shown with.
    debugged: u32,
    steps: Vec<String>,
}

impl<'a> Progress<'a> {
    fn new(w: &Watch<'a>) -> Self {
        Self {
            tty: std::io::stderr().is_terminal(),
            quiet: w.quiet,
            last_printed: -10.0,
            scenario: w.scenario,
            debugged: 0,
            steps: if w.scenario.debug > 0 {
                w.scenario.step_names()
            } else {
                Vec::new()
            },
        }
    }
    fn on(&mut self, live: Live<'_>) {
        if let Live::Debug(d) = live {
            // Printed even with --quiet: the user asked for them.
            for x in &d.exchanges {
                if self.debugged >= self.scenario.debug {
                    break;
                }
                self.debugged += 1;
                if self.tty {
                    eprint!("\r\x1b[2K");
                }
                let n = (self.debugged, self.scenario.debug);
                eprint!(
                    "{}",
                    crate::debug_print::exchange(x, &d.agent, &self.steps, n)
                );
            }
            return;
        }
        if self.quiet {
            return;
        }
        match live {
            Live::State(s) => {
                if self.tty {
                    eprint!("\r\x1b[2K");
                }
                if s.message.is_empty() {
                    eprintln!("run {}: {}", s.run_id, s.state);
                } else {
                    eprintln!("run {}: {} — {}", s.run_id, s.state, s.message);
                }
            }
            Live::Snapshot(s) => {
                let line = render::progress_line(s, self.scenario);
                if self.tty {
                    eprint!("\r\x1b[2K{line}");
                } else if s.elapsed_s - self.last_printed >= 5.0 {
                    self.last_printed = s.elapsed_s;
                    eprintln!("{line}");
                }
            }
            Live::Debug(_) => {}
        }
    }
    fn done(&self) {
        if self.tty && !self.quiet {
            eprint!("\r\x1b[2K");
        }
    }
}

/// Submits and follows; on SIGINT or SIGTERM (see [`Interrupts`]) aborts the run but still
/// waits for its final report, which says `aborted`; a second signal quits at once.
pub async fn submit_follow(
    url: &str,
    token: Option<&str>,
    text: &str,
    agents: Option<u32>,
    wait: Option<Duration>,
    w: &Watch<'_>,
    signals: &mut Interrupts,
) -> Result<Report> {
    let mut c = client::connect(url, token).await?;
    let run_id = client::submit(&mut c, text, agents, wait).await?;
    let mut progress = Progress::new(w);
    let mut watcher = c.clone();
    let mut on_live = |l: Live<'_>| progress.on(l);
    let watch = client::watch(&mut watcher, &run_id, &mut on_live);
    tokio::pin!(watch);
    let report = tokio::select! {
        r = &mut watch => r,
        sig = signals.next() => {
            let name = sig.name();
            eprintln!("\ninterrupted ({name}): aborting {run_id}; its report follows ({name} again to quit at once)");
            c.abort_run(v1::AbortRunRequest { run_id: run_id.clone(), reason: format!("interrupted from the CLI ({name})") }).await.map_err(client::status_error)?;
            tokio::select! {
                r = &mut watch => r,
                again = signals.next() => std::process::exit(again.exit_code()),
            }
        }
    };
    Progress::new(w).done();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_paths_are_checked_before_load() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_writable(&dir.path().join("r.json")).is_ok());
        let e = check_writable(&dir.path().join("nope/r.json")).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        let e = check_writable(dir.path()).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        assert!(check_writable(Path::new("r.json")).is_ok());
    }
}
