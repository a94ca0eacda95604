//! Lease renewals for a run's agents, from a task that does nothing else.
//!
//! The dead-man switch (`docs/design.md`) stops an agent when its lease lapses. If renewals
//! shared the run driver's loop, a slow merge or a backlog of Progress would delay them past
//! the lease and stop every agent though the controller is alive. So the driver only tells this
//! task which agents still get renewals; the task sends them on its own clock, with
//! `try_send`, so one stuck agent stream cannot hold up the others either.
//!
//! Renewals also depend on hearing from the agent: an agent whose Progress has
//! not arrived for [`silence_limit`] gets none until it is heard again, so its load stops
//! within its lease even when the link still carries renewals to it but nothing back (a proxy
//! or sidecar that answers keepalives, a stuck agent). Silence is taken from when its stream
//! task read the message ([`Heard`]), not from when the driver merged it: a busy driver is not
//! a silent agent.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stampede_proto::v1::{self, controller_message::Msg as Out};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

type AgentTx = mpsc::Sender<Result<v1::ControllerMessage, tonic::Status>>;

/// Renewals per lease. The agent's deadline is "lease after the last renewal it read", so a
/// renewal may arrive up to two periods (2/3 of the lease) late, or one may be lost outright,
/// before a live controller's agent stops. Three rather than four: with a thousand agents
/// every renewal is a frame and a write on its own connection, and a quarter fewer of them
/// was the largest single saving in the controller's CPU (bench/controller-scale.sh), while
/// the largest gap measured there stays under half the lease.
pub(crate) const RENEWALS_PER_LEASE: u32 = 3;

/// How long an agent may go without a Progress before its renewals are withheld: it sends one
/// every interval, so several intervals missed plus a lease is not a slow agent.
pub(crate) fn silence_limit(lease: Duration, interval: Duration) -> Duration {
    lease.saturating_add(interval.saturating_mul(5))
}

/// When an agent's stream last brought a Progress: set by the stream's task as it reads one,
/// read by the renewal task.
#[derive(Debug)]
pub struct Heard(Mutex<Instant>);

impl Heard {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self(Mutex::new(Instant::now())))
    }

    /// Heard now.
    pub(crate) fn mark(&self) {
        self.mark_at(Instant::now());
    }

    /// Counts silence from `at` at the earliest (a run's T0: no Progress is due before it).
    pub(crate) fn mark_at(&self, at: Instant) {
        let mut last = crate::lock(&self.0);
        *last = (*last).max(at);
    }

    /// How long since it was last heard from.
    pub(crate) fn silent_for(&self) -> Duration {
        Instant::now().saturating_duration_since(*crate::lock(&self.0))
    }
}

/// The driver's handle on the renewal task of one run. Dropping it stops the renewals.
pub(crate) struct Renewals {
    shared: Arc<Shared>,
    stop: CancellationToken,
}

/// What the driver and the renewal task both see, per member in member order.
struct Shared {
    /// The stream renewals go to, replaced when the agent reconnects.
    txs: Box<[Mutex<AgentTx>]>,
    /// Whether the member still gets renewals.
    live: Box<[AtomicBool]>,
    /// Every interval below this has been received (sent along as the ack).
    acked: Box<[AtomicU64]>,
    /// When each member was last heard from, and whether its silence was already reported.
    heard: Box<[Mutex<Arc<Heard>>]>,
    silent: Box<[AtomicBool]>,
    silence: Duration,
    lease_ms: u64,
}

impl Shared {
    /// Sends member `i` one renewal now, if it still gets them. `try_send`: a stream that is
    /// full (its agent stalled, or the link is cut) is skipped, never waited for.
    fn renew(&self, i: usize) {
        if !self.live[i].load(Ordering::Relaxed) {
            return;
        }
        let quiet = crate::lock(&self.heard[i]).silent_for();
        if quiet > self.silence {
            if !self.silent[i].swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    member = i,
                    silent_s = quiet.as_secs_f64(),
                    "no Progress from this agent: renewals withheld, its load stops within its lease"
                );
            }
            return;
        }
        self.silent[i].store(false, Ordering::Relaxed);
        let msg = v1::ControllerMessage {
            msg: Some(Out::Lease(v1::LeaseRenewal {
                lease_ms: self.lease_ms,
                acked_below: self.acked[i].load(Ordering::Relaxed),
            })),
        };
        let _ = crate::lock(&self.txs[i]).try_send(Ok(msg));
    }
}

impl Renewals {
    /// Starts renewing `lease` every `lease / RENEWALS_PER_LEASE` for every agent in
    /// `members` (its stream and when it was heard from, in member order) while it is heard
    /// from within `silence`, counted from `t0` at the earliest.
    pub(crate) fn start(
        members: Vec<(AgentTx, Arc<Heard>)>,
        lease: Duration,
        silence: Duration,
        t0: Instant,
    ) -> Self {
        for (_, h) in &members {
            h.mark_at(t0);
        }
        let shared = Arc::new(Shared {
            live: members.iter().map(|_| AtomicBool::new(true)).collect(),
            acked: members.iter().map(|_| AtomicU64::new(0)).collect(),
            silent: members.iter().map(|_| AtomicBool::new(false)).collect(),
            heard: members.iter().map(|(_, h)| Mutex::new(h.clone())).collect(),
            txs: members.into_iter().map(|(tx, _)| Mutex::new(tx)).collect(),
            silence,
            lease_ms: u64::try_from(lease.as_millis()).unwrap_or(u64::MAX),
        });
        let stop = CancellationToken::new();
        let (task, task_stop) = (shared.clone(), stop.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(lease / RENEWALS_PER_LEASE);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = task_stop.cancelled() => break,
                }
                for i in 0..task.txs.len() {
                    task.renew(i);
                }
            }
        });
        Self { shared, stop }
    }

    /// Member `i` has delivered every interval below `below`.
    pub(crate) fn ack(&self, i: usize, below: u64) {
        if let Some(a) = self.shared.acked.get(i) {
            a.fetch_max(below, Ordering::Relaxed);
        }
    }

    /// No more renewals for member `i`: it is done or lost, or its stream closed (then
    /// [`Renewals::reattach`] resumes them).
    pub(crate) fn retire(&self, i: usize) {
        if let Some(l) = self.shared.live.get(i) {
            l.store(false, Ordering::Relaxed);
        }
    }

    /// Member `i` came back on a new stream `tx` (a reconnect within the lease), heard from
    /// there through `heard`: renewals resume there, the first one at once, since its lease
    /// has been running down meanwhile.
    pub(crate) fn reattach(&self, i: usize, tx: AgentTx, heard: Arc<Heard>) {
        if i >= self.shared.txs.len() || self.stop.is_cancelled() {
            return;
        }
        heard.mark();
        *crate::lock(&self.shared.heard[i]) = heard;
        *crate::lock(&self.shared.txs[i]) = tx;
        self.shared.live[i].store(true, Ordering::Relaxed);
        self.shared.renew(i);
    }

    /// No more renewals for anyone (the run failed or is being aborted: let leases lapse).
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for Renewals {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(txs: Vec<AgentTx>, lease: Duration) -> (Renewals, Vec<Arc<Heard>>) {
        let heard: Vec<_> = txs.iter().map(|_| Heard::new()).collect();
        let members = txs.into_iter().zip(heard.iter().cloned()).collect();
        // Silence never counts here: every member is heard from for the next hour.
        let far = Instant::now() + Duration::from_secs(3600);
        (
            Renewals::start(members, lease, Duration::from_secs(60), far),
            heard,
        )
    }

    fn lease_at(rx: &mut mpsc::Receiver<Result<v1::ControllerMessage, tonic::Status>>) -> usize {
        let mut n = 0;
        while let Ok(Ok(m)) = rx.try_recv() {
            if matches!(m.msg, Some(Out::Lease(_))) {
                n += 1;
            }
        }
        n
    }

    /// Renewals keep their lease/3 cadence while the run driver is stuck in a slow merge
    /// and its inbox is full, and stop for a retired member and on `stop`.
    #[tokio::test(start_paused = true)]
    async fn renewals_keep_their_cadence_while_the_driver_is_busy() {
        let lease = Duration::from_secs(1);
        let (mut txs, mut rxs) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let (tx, rx) = mpsc::channel(256);
            txs.push(tx);
            rxs.push(rx);
        }
        let (renewals, _heard) = start(txs, lease);
        // A driver with a full inbox whose every merge takes 900 ms (longer than a renewal
        // period): it holds the renewal handle the whole time, as the real driver does.
        let (inbox, mut driver_rx) = mpsc::channel::<u32>(16);
        for i in 0..16 {
            inbox.try_send(i).unwrap();
        }
        assert!(inbox.try_send(99).is_err(), "the inbox is full");
        let driver = tokio::spawn(async move {
            let mut merged = 0;
            while driver_rx.recv().await.is_some() {
                tokio::time::sleep(Duration::from_millis(900)).await; // the slow merge
                merged += 1;
                if merged == 4 {
                    break;
                }
            }
            renewals
        });
        let start = Instant::now();
        let mut seen = Vec::new();
        let period = lease / RENEWALS_PER_LEASE;
        // Sample just after each renewal tick for 3 s.
        tokio::time::sleep(Duration::from_millis(1)).await;
        for k in 0..9 {
            assert_eq!(
                rxs.iter_mut().map(lease_at).collect::<Vec<_>>(),
                vec![1, 1, 1],
                "tick {k} at {:?}",
                start.elapsed()
            );
            seen.push(start.elapsed());
            tokio::time::sleep(period).await;
        }
        let renewals = driver.await.unwrap();
        for rx in &mut rxs {
            lease_at(rx);
        }
        renewals.retire(1);
        tokio::time::sleep(period).await;
        assert_eq!(
            rxs.iter_mut().map(lease_at).collect::<Vec<_>>(),
            vec![1, 0, 1]
        );
        renewals.stop();
        tokio::time::sleep(lease).await;
        assert_eq!(
            rxs.iter_mut().map(lease_at).collect::<Vec<_>>(),
            vec![0, 0, 0]
        );
        drop(inbox);
    }

    /// A member whose stream closed gets no renewals; re-attached on a new stream, it gets
    /// one at once (its lease ran down meanwhile) and then the usual cadence there.
    #[tokio::test(start_paused = true)]
    async fn a_reattached_member_gets_a_renewal_at_once_on_its_new_stream() {
        let lease = Duration::from_secs(3);
        let (old_tx, mut old_rx) = mpsc::channel(16);
        let (renewals, _heard) = start(vec![old_tx], lease);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(lease_at(&mut old_rx), 1);
        renewals.retire(0);
        tokio::time::sleep(lease).await;
        assert_eq!(lease_at(&mut old_rx), 0, "no renewals while away");
        let (new_tx, mut new_rx) = mpsc::channel(16);
        renewals.ack(0, 7);
        renewals.reattach(0, new_tx, Heard::new());
        match new_rx.try_recv() {
            Ok(Ok(v1::ControllerMessage {
                msg: Some(Out::Lease(l)),
            })) => assert_eq!((l.lease_ms, l.acked_below), (3000, 7)),
            other => panic!("expected a renewal at once, got {other:?}"),
        }
        tokio::time::sleep(lease).await;
        assert_eq!(lease_at(&mut new_rx), RENEWALS_PER_LEASE as usize);
        assert_eq!(lease_at(&mut old_rx), 0);
    }

    /// An agent that sends no Progress for longer than the silence limit gets no renewals
    /// (its lease lapses), while the others keep theirs; heard again, it gets them again.
    /// Silence counts from T0, not from the Ready before it.
    #[tokio::test(start_paused = true)]
    async fn a_silent_agent_gets_no_renewals() {
        let lease = Duration::from_secs(1);
        let (mut txs, mut rxs, mut heard) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..2 {
            let (tx, rx) = mpsc::channel(256);
            txs.push(tx);
            rxs.push(rx);
            heard.push(Heard::new());
        }
        let silence = silence_limit(lease, Duration::from_secs(1));
        assert_eq!(silence, Duration::from_secs(6));
        let t0 = Instant::now() + Duration::from_secs(2);
        let members = txs.into_iter().zip(heard.iter().cloned()).collect();
        let renewals = Renewals::start(members, lease, silence, t0);
        // Both are heard every second until 4 s after T0; then only member 0.
        for s in 0..12 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            heard[0].mark();
            if s < 6 {
                heard[1].mark();
            }
        }
        // Member 1 was last heard at 6 s (4 s after T0): silent for more than 6 s from 12 s
        // on. (The renewal due at 12 s itself may land either side of this drain.)
        tokio::time::sleep(Duration::from_millis(100)).await;
        for rx in &mut rxs {
            lease_at(rx);
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(lease_at(&mut rxs[0]) >= 4);
        assert_eq!(lease_at(&mut rxs[1]), 0, "no renewals for the silent agent");
        heard[1].mark();
        tokio::time::sleep(lease).await;
        assert!(
            lease_at(&mut rxs[1]) >= 2,
            "renewals again once it is heard from"
        );
        drop(renewals);
    }
}
