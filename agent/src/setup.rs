//! Setup steps (`setup:`): HTTP requests run once per run, by the agent the controller names
//! in its `Assign` (`run_setup`), while it prepares its shard, before its `Ready`, so never
//! during the measured run: nothing of them is recorded, and their latencies never reach the
//! report or its thresholds. The values they extract travel in that agent's `Ready`, and the
//! controller hands them to every agent in its `Start`; every session reads them as
//! `${setup.NAME}`. A setup that fails refuses the shard, and so the run, before any load.
//!
//! With `setup_refresh`, the same agent runs the steps again at that period while the load
//! runs ([`refresh`]): new values apply to its own sessions at once and go to the controller,
//! which forwards them to the other agents. A refresh that fails keeps the values before it.
//! If that agent is lost mid-run, the controller names another (`TakeOverSetup`), which
//! refreshes from then on: every agent is ready to, since each holds the scenario and target.

use std::sync::Arc;
use std::time::Duration;

use stampede_core::scenario::{Scenario, StepKind};
use stampede_core::stats::error_kind;
use stampede_proto::v1;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::dynamic::{self, Context, DynamicHttp};
use crate::net::Failure;
use crate::runner::{Endpoint, Link};

/// Longest a whole setup may take: it runs while the controller waits for this agent's
/// `Ready` (15 s by default), and a slow setup should say so itself.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the setup gave no values; the message names the step (its index, and its name once it
/// runs). Any of them refuses the shard before load.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A setup step of another protocol.
    #[error("setup[{index}]: a setup step is an http step")]
    NotHttpStep {
        /// The step's place in `setup`.
        index: usize,
    },
    /// A step whose templates do not compile.
    #[error("setup[{index}].{error}")]
    Compile {
        /// The step's place in `setup`.
        index: usize,
        /// The field whose template does not compile, and why.
        error: dynamic::HttpCompileError,
    },
    /// A step that failed to connect, send or read (the error kind).
    #[error("setup[{index}] ({name}): {kind}")]
    Failed {
        /// The step's place in `setup`.
        index: usize,
        /// The step's `name`, or `step-N` (from 1).
        name: String,
        /// The error kind, as the report counts it (`connect_refused`, `timeout`, ...).
        kind: &'static str,
    },
    /// A target that does not speak HTTP.
    #[error("setup[{index}] ({name}): the target is not http")]
    NotHttpTarget {
        /// The step's place in `setup`.
        index: usize,
        /// The step's `name`, or `step-N` (from 1).
        name: String,
    },
    /// A response the step refused (its status, check or extraction).
    #[error("setup[{index}] ({name}): {kind} (status {status})")]
    Refused {
        /// The step's place in `setup`.
        index: usize,
        /// The step's `name`, or `step-N` (from 1).
        name: String,
        /// What refused it: the status, a check or an extraction.
        kind: String,
        /// The response's HTTP status.
        status: u16,
    },
    /// Values past [`stampede_core::scenario::MAX_SETUP_VALUES_BYTES`] together: refused here,
    /// where they are produced, rather than in a message the controller could not decode.
    #[error("setup: {}", stampede_core::scenario::setup_values_too_large(*bytes))]
    TooLarge {
        /// The values' size together.
        bytes: usize,
    },
    /// The whole setup past [`SETUP_TIMEOUT`].
    #[error("setup: did not finish within {} s", SETUP_TIMEOUT.as_secs())]
    Timeout,
}

/// Where the setup's requests go: the run's target, as its steps see it.
#[derive(Debug, Clone)]
pub struct Target {
    /// The address (and TLS client) the requests connect to.
    pub endpoint: Endpoint,
    /// The `Host` header (HTTP/1.1) or `:authority` (h2).
    pub authority: String,
    /// The target URL's path prefix.
    pub prefix: String,
    /// The target is `https://`, so the requests go over TLS.
    pub https: bool,
}

/// What the agent that runs the setup needs to run it again while the load runs.
#[derive(Debug)]
pub struct Refresh {
    /// The scenario whose `setup` is run again.
    pub scenario: Arc<Scenario>,
    /// Where the setup's requests go.
    pub target: Target,
    /// The scenario's `setup_refresh`.
    pub every: Duration,
}

/// Where a refresh loop starts: the agent that ran the setup starts at generation 0, one
/// `every` after the start; one that takes over from a lost setup agent starts at once (the
/// values it inherits may be near their end) after the newest generation the controller held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshFrom {
    /// The newest generation of values already sent; the loop's first refresh is the next.
    pub generation: u64,
    /// Refresh at once rather than one `every` from now.
    pub at_once: bool,
}

/// Runs the setup again every `r.every` until `stop`: each success replaces the values of
/// this agent's sessions (`ctx`) and is sent to the controller as the next generation after
/// `from.generation`; a failure is logged and changes nothing.
pub async fn refresh(
    r: Arc<Refresh>,
    ctx: Arc<Context>,
    run_id: String,
    out: mpsc::UnboundedSender<v1::AgentMessage>,
    stop: CancellationToken,
    from: RefreshFrom,
) {
    let mut generation = from.generation;
    let mut next = Instant::now()
        + if from.at_once {
            Duration::ZERO
        } else {
            r.every
        };
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = stop.cancelled() => return,
        }
        next += r.every;
        let ran = tokio::select! {
            ran = run(&r.scenario, &ctx, &r.target, r.scenario.request_timeout.0) => ran,
            _ = stop.cancelled() => return,
        };
        match ran {
            Ok(values) => {
                generation += 1;
                ctx.set_setup(values.clone());
                tracing::info!(run = %run_id, generation, "setup values refreshed");
                let msg = v1::AgentMessage {
                    msg: Some(v1::agent_message::Msg::SetupValues(v1::SetupValues {
                        run_id: run_id.clone(),
                        generation,
                        values,
                    })),
                };
                if out.send(msg).is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(run = %run_id, error = %e, "setup refresh failed; the values before it stay")
            }
        }
    }
}

/// Runs `scenario`'s setup steps in order over one connection (a step's `new_connection`
/// opens another); returns the values they extracted, in the order of
/// [`Scenario::setup_names`]. The error names the step.
pub async fn run(
    scenario: &Scenario,
    ctx: &Context,
    target: &Target,
    request_timeout: Duration,
) -> Result<Vec<String>, SetupError> {
    if scenario.setup.is_empty() {
        return Ok(Vec::new());
    }
    let slots = dynamic::setup_slots(scenario);
    let mut steps = Vec::with_capacity(scenario.setup.len());
    for (i, s) in scenario.setup.iter().enumerate() {
        let StepKind::Http(h) = &s.kind else {
            return Err(SetupError::NotHttpStep { index: i });
        };
        let step = DynamicHttp::new(
            h,
            &s.extract,
            s.check.as_ref(),
            scenario,
            &slots,
            &target.authority,
            &target.prefix,
            target.https,
        )
        .map_err(|error| SetupError::Compile { index: i, error })?;
        steps.push(step);
    }
    let all = async {
        let mut vars = ctx.setup_vars();
        let mut conn: Option<Link> = None;
        for (i, (step, def)) in steps.iter().zip(&scenario.setup).enumerate() {
            let name = def.display_name(i);
            for _ in 0..def.repeat() {
                let deadline = Instant::now() + request_timeout;
                if def.new_connection {
                    conn = None;
                }
                let failed = |Failure(kind)| SetupError::Failed {
                    index: i,
                    name: name.to_string(),
                    kind,
                };
                let c = match conn.as_mut() {
                    Some(c) => c,
                    None => {
                        let opened = tokio::time::timeout_at(
                            deadline,
                            Link::open(&target.endpoint, crate::h2::H2Client::General),
                        )
                        .await
                        .map_err(|_| failed(Failure(error_kind::CONNECT_TIMEOUT)))?
                        .map_err(failed)?;
                        conn.insert(opened)
                    }
                };
                let sent = match c {
                    Link::Http1(c) => {
                        tokio::time::timeout_at(deadline, step.http1(c, ctx, &mut vars)).await
                    }
                    Link::H2(c) => {
                        tokio::time::timeout_at(deadline, step.h2(c, ctx, &mut vars)).await
                    }
                    _ => {
                        return Err(SetupError::NotHttpTarget {
                            index: i,
                            name: name.to_string(),
                        })
                    }
                };
                let outcome = match sent {
                    Err(_) => return Err(failed(Failure(error_kind::TIMEOUT))),
                    Ok(r) => r.map_err(failed)?,
                };
                if let Some(kind) = outcome.error {
                    return Err(SetupError::Refused {
                        index: i,
                        name: name.to_string(),
                        kind: kind.to_string(),
                        status: outcome.status,
                    });
                }
                if !outcome.keep_alive {
                    conn = None;
                }
                vars.keep_setup();
            }
        }
        let values = vars.setup_values();
        let bytes = values.iter().map(String::len).sum();
        if bytes > stampede_core::scenario::MAX_SETUP_VALUES_BYTES {
            return Err(SetupError::TooLarge { bytes });
        }
        Ok(values)
    };
    tokio::time::timeout(SETUP_TIMEOUT, all)
        .await
        .map_err(|_| SetupError::Timeout)?
}
