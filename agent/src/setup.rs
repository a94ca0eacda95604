//! Setup steps (`setup:`): HTTP requests run once on each agent while it prepares its shard,
//! before its `Ready`, so never during the measured run: nothing of them is recorded, and
//! their latencies never reach the report or its thresholds. The values they extract are read
//! by every session as `${setup.NAME}`. A setup that fails refuses the shard, and so the run,
//! before any load.

use std::time::Duration;

use stampede_core::scenario::Scenario;
use stampede_core::stats::error_kind;
use tokio::time::Instant;

use crate::dynamic::{self, Context, DynamicHttp};
use crate::net::Failure;
use crate::runner::{Endpoint, Link};

/// Longest a whole setup may take: it runs while the controller waits for this agent's
/// `Ready` (15 s by default), and a slow setup should say so itself.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the setup's requests go: the run's target, as its steps see it.
pub struct Target<'a> {
    pub endpoint: &'a Endpoint,
    /// The `Host` header (HTTP/1.1) or `:authority` (h2).
    pub authority: &'a str,
    /// The target URL's path prefix.
    pub prefix: &'a str,
    pub https: bool,
}

/// Runs `scenario`'s setup steps in order over one connection (a step's `new_connection`
/// opens another) and keeps their extracted values in `ctx`. The error names the step.
pub async fn run(
    scenario: &Scenario,
    ctx: &mut Context,
    target: &Target<'_>,
    request_timeout: Duration,
) -> Result<(), String> {
    if scenario.setup.is_empty() {
        return Ok(());
    }
    let slots = dynamic::setup_slots(scenario);
    let mut steps = Vec::with_capacity(scenario.setup.len());
    for (i, s) in scenario.setup.iter().enumerate() {
        let h = s
            .http
            .as_ref()
            .ok_or_else(|| format!("setup[{i}]: a setup step is an http step"))?;
        let step = DynamicHttp::new(
            h,
            &s.extract,
            s.check.as_ref(),
            scenario,
            &slots,
            target.authority,
            target.prefix,
            target.https,
        )
        .map_err(|e| format!("setup[{i}].{e}"))?;
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
                let failed = |Failure(kind)| format!("setup[{i}] ({name}): {kind}");
                let c = match conn.as_mut() {
                    Some(c) => c,
                    None => {
                        let opened = tokio::time::timeout_at(deadline, Link::open(target.endpoint))
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
                    _ => return Err(format!("setup[{i}] ({name}): the target is not http")),
                };
                let outcome = match sent {
                    Err(_) => return Err(failed(Failure(error_kind::TIMEOUT))),
                    Ok(r) => r.map_err(failed)?,
                };
                if let Some(kind) = outcome.error {
                    return Err(format!(
                        "setup[{i}] ({name}): {kind} (status {})",
                        outcome.status
                    ));
                }
                if !outcome.keep_alive {
                    conn = None;
                }
                ctx.keep_setup(&vars);
            }
        }
        Ok(())
    };
    tokio::time::timeout(SETUP_TIMEOUT, all)
        .await
        .map_err(|_| format!("setup: did not finish within {} s", SETUP_TIMEOUT.as_secs()))?
}
