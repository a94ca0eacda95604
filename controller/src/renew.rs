//! Lease renewals for a run's agents, from a task that does nothing else.
//!
//! The dead-man switch (design.md §3.5) stops an agent when its lease lapses. If renewals
//! shared the run driver's loop, a slow merge or a backlog of Progress would delay them past
//! the lease and stop every agent (a false trip, finding 11c). So the driver only tells this
//! task which agents still get renewals; the task sends them on its own clock, with
//! `try_send`, so one stuck agent stream cannot hold up the others either.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use stampede_proto::v1::{self, controller_message::Msg as Out};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

type AgentTx = mpsc::Sender<Result<v1::ControllerMessage, tonic::Status>>;

/// Renewals per lease. The agent's deadline is "lease after the last renewal it read", so a
/// renewal may arrive up to two periods (2/3 of the lease) late, or one may be lost outright,
/// before a live controller's agent stops. Three rather than four: with a thousand agents
/// every renewal is a frame and a write on its own connection, and a quarter fewer of them
/// was the largest single saving in the controller's CPU (bench/controller-scale.sh), while
/// the largest gap measured there stays under half the lease.
pub(crate) const RENEWALS_PER_LEASE: u32 = 3;

/// The driver's handle on the renewal task of one run. Dropping it stops the renewals.
pub(crate) struct Renewals {
    live: Arc<[AtomicBool]>,
    /// Per member: every interval below this has been received (sent along as the ack).
    acked: Arc<[AtomicU64]>,
    stop: CancellationToken,
}

impl Renewals {
    /// Starts renewing `lease` every `lease / RENEWALS_PER_LEASE` for every agent in `txs`
    /// (in member order).
    pub(crate) fn start(txs: Vec<AgentTx>, lease: Duration) -> Self {
        let live: Arc<[AtomicBool]> = txs.iter().map(|_| AtomicBool::new(true)).collect();
        let acked: Arc<[AtomicU64]> = txs.iter().map(|_| AtomicU64::new(0)).collect();
        let stop = CancellationToken::new();
        let (task_live, task_acked, task_stop) = (live.clone(), acked.clone(), stop.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(lease / RENEWALS_PER_LEASE);
            let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = task_stop.cancelled() => break,
                }
                for ((tx, live), acked) in txs.iter().zip(task_live.iter()).zip(task_acked.iter()) {
                    if live.load(Ordering::Relaxed) {
                        let acked_below = acked.load(Ordering::Relaxed);
                        let msg = v1::ControllerMessage {
                            msg: Some(Out::Lease(v1::LeaseRenewal {
                                lease_ms,
                                acked_below,
                            })),
                        };
                        let _ = tx.try_send(Ok(msg));
                    }
                }
            }
        });
        Self { live, acked, stop }
    }

    /// Member `i` has delivered every interval below `below`.
    pub(crate) fn ack(&self, i: usize, below: u64) {
        if let Some(a) = self.acked.get(i) {
            a.fetch_max(below, Ordering::Relaxed);
        }
    }

    /// No more renewals for member `i` (it is done or lost).
    pub(crate) fn retire(&self, i: usize) {
        if let Some(l) = self.live.get(i) {
            l.store(false, Ordering::Relaxed);
        }
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
    use tokio::time::Instant;

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
        let renewals = Renewals::start(txs, lease);
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
}
