//! Plumbing shared by all servers: connection admission and counting, graceful draining.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{IntCounter, IntGauge};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};

/// How long connections get after the forced phase begins before `serve` returns anyway.
const FORCE_WAIT: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    Running,
    /// Stop taking new requests; finish the current one.
    Draining,
    /// Drop connections now.
    Forced,
}

/// The server-wide phase, broadcast to every connection task.
pub(crate) struct Lifecycle {
    tx: watch::Sender<Phase>,
}

impl Lifecycle {
    pub(crate) fn new() -> Self {
        Self {
            tx: watch::Sender::new(Phase::Running),
        }
    }

    pub(crate) fn subscribe(&self) -> PhaseWatch {
        PhaseWatch(self.tx.subscribe())
    }

    pub(crate) fn set(&self, phase: Phase) {
        self.tx.send_replace(phase);
    }

    pub(crate) fn phase(&self) -> Phase {
        *self.tx.borrow()
    }
}

/// A connection task's view of the [`Lifecycle`].
#[derive(Clone)]
pub(crate) struct PhaseWatch(watch::Receiver<Phase>);

impl PhaseWatch {
    /// Resolves once the server is at least in `phase` (or the server is gone).
    pub(crate) async fn reached(&mut self, phase: Phase) {
        // An error means the sender is gone: treat it as reached.
        let _ = self.0.wait_for(|p| *p >= phase).await;
    }
}

/// Connection admission (a cap), counting, and change notification.
pub(crate) struct ConnTracker {
    open: IntGauge,
    total: IntCounter,
    rejected: IntCounter,
    limit: Arc<Semaphore>,
    changed: Notify,
}

impl ConnTracker {
    pub(crate) fn new(
        max_connections: usize,
        open: IntGauge,
        total: IntCounter,
        rejected: IntCounter,
    ) -> Self {
        Self {
            open,
            total,
            rejected,
            limit: Arc::new(Semaphore::new(max_connections.min(Semaphore::MAX_PERMITS))),
            changed: Notify::new(),
        }
    }

    /// Admits a connection if under the cap; otherwise counts a rejection and returns `None`.
    pub(crate) fn try_admit(self: &Arc<Self>) -> Option<ConnGuard> {
        match Arc::clone(&self.limit).try_acquire_owned() {
            Ok(permit) => {
                self.open.inc();
                self.total.inc();
                self.changed.notify_waiters();
                Some(ConnGuard {
                    tracker: Arc::clone(self),
                    permit: Some(permit),
                })
            }
            Err(_) => {
                self.rejected.inc();
                None
            }
        }
    }

    pub(crate) fn open(&self) -> u64 {
        u64::try_from(self.open.get()).unwrap_or(0)
    }

    pub(crate) fn total(&self) -> u64 {
        self.total.get()
    }

    pub(crate) fn rejected(&self) -> u64 {
        self.rejected.get()
    }

    /// Waits until `pred(self)` holds; re-checked whenever a connection opens or closes.
    pub(crate) async fn wait_until(&self, mut pred: impl FnMut(&Self) -> bool) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if pred(self) {
                return;
            }
            notified.await;
        }
    }
}

/// Held by a connection task for as long as the connection is open.
pub(crate) struct ConnGuard {
    tracker: Arc<ConnTracker>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        // The slot is free before anyone hears the connection closed: a client that connects
        // as soon as `open` drops must be admitted (fields would drop after this body).
        drop(self.permit.take());
        self.tracker.open.dec();
        self.tracker.changed.notify_waiters();
    }
}

pub(crate) async fn drain(lifecycle: &Lifecycle, tracker: &ConnTracker, grace: Duration) {
    lifecycle.set(Phase::Draining);
    let idle = tracker.wait_until(|t| t.open() == 0);
    if tokio::time::timeout(grace, idle).await.is_err() {
        tracing::warn!(
            open = tracker.open(),
            "grace period over, closing remaining connections"
        );
        lifecycle.set(Phase::Forced);
        let _ = tokio::time::timeout(FORCE_WAIT, tracker.wait_until(|t| t.open() == 0)).await;
    }
}

/// A bounded set of distinct client addresses.
pub(crate) struct SourceIps {
    seen: Mutex<HashSet<IpAddr>>,
    cap: usize,
    gauge: IntGauge,
}

impl SourceIps {
    pub(crate) fn new(cap: usize, gauge: IntGauge) -> Self {
        Self {
            seen: Mutex::new(HashSet::new()),
            cap,
            gauge,
        }
    }

    /// Records `ip`; once `cap` addresses are known, new ones are no longer tracked.
    pub(crate) fn record(&self, ip: IpAddr) {
        let ip = ip.to_canonical();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() < self.cap && seen.insert(ip) {
            self.gauge
                .set(i64::try_from(seen.len()).unwrap_or(i64::MAX));
        }
    }

    pub(crate) fn count(&self) -> u64 {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.len() as u64
    }
}

/// Backoff after a failed `accept` (typically EMFILE), so the loop does not spin.
pub(crate) async fn accept_backoff(err: &std::io::Error) {
    tracing::warn!(error = %err, "accept failed");
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// Why a server flag's duration was refused; clap prints it after the flag's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DurationArgError {
    /// No whole number before the unit.
    #[error("invalid duration {text:?} (expected e.g. 500ms, 30s, 2m)")]
    Number { text: String },
    /// A unit other than ms, s, m or h.
    #[error("unknown duration unit {unit:?} in {text:?}")]
    Unit { unit: String, text: String },
}

/// Parses a duration such as `250ms`, `30s`, `2m`, `1h`; a bare number is seconds.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, DurationArgError> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| DurationArgError::Number { text: s.into() })?;
    let d = match unit.trim() {
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        other => {
            return Err(DurationArgError::Unit {
                unit: other.into(),
                text: s.into(),
            })
        }
    };
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("99999999999999999999999s").is_err());
    }

    #[test]
    fn source_ips_are_capped_and_canonical() {
        let gauge = IntGauge::new("g", "g").unwrap();
        let ips = SourceIps::new(2, gauge.clone());
        ips.record("127.0.0.1".parse().unwrap());
        ips.record("::ffff:127.0.0.1".parse().unwrap());
        assert_eq!(ips.count(), 1);
        ips.record("127.0.0.2".parse().unwrap());
        ips.record("127.0.0.3".parse().unwrap());
        assert_eq!(ips.count(), 2);
        assert_eq!(gauge.get(), 2);
    }
}
