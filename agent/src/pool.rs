//! The constant-rate model's slot queue: the arrival loop pushes each owned slot, the pool's
//! idle connections take them in order, the one idle the shortest time first.
//!
//! One short `std` lock around a `VecDeque` and a [`Notify`] that wakes exactly one idle
//! connection per slot. (A `tokio::sync::Mutex` around an mpsc receiver cost a second task
//! wake-up per slot: the connection that took a slot released the mutex to the next idle one,
//! which then parked on the channel.)
//!
//! Last idle, first woken: a slot goes to the connection that began to wait last, whose socket,
//! task and buffers are the ones still in the caches. A pool of 50 connections at 5,000 slots/s
//! then cycles through the ten or so that one tick's slots keep busy instead of through all
//! fifty, and the generator used 15-26 % less CPU per request in alternated runs
//! (`docs/performance.md`, "Constant rate: wake-ups and ticks"). The connections at the bottom
//! of the stack may then sit idle for long, past a server's keep-alive timeout: the pool's loop
//! checks a connection idle that long before it sends on it
//! (`runner::session::forget_if_gone`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

/// A constant-rate slot waiting for a free connection: intended time, phase, arrival index,
/// session type.
pub(crate) type RateSlot = (Instant, u32, u64, u32);

/// Why a slot was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The queue holds its bound.
    Full,
    /// The pool is gone.
    Closed,
}

#[derive(Debug)]
struct Inner {
    slots: VecDeque<RateSlot>,
    closed: bool,
}

/// A bounded FIFO of slots shared by the arrival loop and a pool of connection tasks.
#[derive(Debug)]
pub(crate) struct SlotQueue {
    inner: Mutex<Inner>,
    ready: Notify,
    bound: usize,
}

impl SlotQueue {
    /// A queue that holds at most `bound` slots.
    pub(crate) fn new(bound: usize) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner {
                slots: VecDeque::new(),
                closed: false,
            }),
            ready: Notify::new(),
            bound,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing here is left half-done by a panic: keep going.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most slots it holds.
    pub(crate) fn bound(&self) -> usize {
        self.bound
    }

    /// Queues `slot` and wakes the connection that began to wait last.
    pub(crate) fn push(&self, slot: RateSlot) -> Result<(), Refused> {
        {
            let mut q = self.lock();
            if q.closed {
                return Err(Refused::Closed);
            }
            if q.slots.len() >= self.bound {
                return Err(Refused::Full);
            }
            q.slots.push_back(slot);
        }
        self.ready.notify_last();
        Ok(())
    }

    /// The oldest slot, waiting for one; `None` once the queue is closed and empty. A slot
    /// already queued is taken without registering as a waiter, so a connection woken for a
    /// slot takes it with one lock; only one that finds the queue empty registers with the
    /// `Notify` (which takes the `Notify`'s own lock to register and again to unregister).
    pub(crate) async fn pop(&self) -> Option<RateSlot> {
        loop {
            if let Some(taken) = self.take() {
                return taken;
            }
            let notified = self.ready.notified();
            tokio::pin!(notified);
            // Registered before looking again, so a push or close in between is not missed.
            notified.as_mut().enable();
            if let Some(taken) = self.take() {
                return taken;
            }
            notified.await;
        }
    }

    /// What the queue gives now: `Some(Some(slot))`, `Some(None)` once it is closed and
    /// empty, `None` when the caller must wait.
    fn take(&self) -> Option<Option<RateSlot>> {
        let mut q = self.lock();
        match q.slots.pop_front() {
            Some(s) => Some(Some(s)),
            None if q.closed => Some(None),
            None => None,
        }
    }

    /// No more slots: idle connections see the end once the queue is empty.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_waiters();
    }

    /// Closes the queue and takes the slots never started.
    pub(crate) fn close_and_take(&self) -> Vec<RateSlot> {
        let taken = {
            let mut q = self.lock();
            q.closed = true;
            q.slots.drain(..).collect()
        };
        self.ready.notify_waiters();
        taken
    }
}

/// The arrival side's handle: closes the queue when dropped, however the arrival thread ends.
#[derive(Debug)]
pub(crate) struct Closer(pub Arc<SlotQueue>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use super::{Closer, Refused, SlotQueue};
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn the_queue_is_bounded_and_refuses_once_closed() {
        let q = SlotQueue::new(4);
        let slot = (Instant::now(), 0, 0, 0);
        let taken = (0..10).filter(|_| q.push(slot).is_ok()).count();
        assert_eq!(taken, 4);
        assert_eq!(q.push(slot), Err(Refused::Full));
        assert_eq!(q.close_and_take().len(), 4);
        assert_eq!(q.push(slot), Err(Refused::Closed));
    }

    /// A slot pushed while no connection waits leaves a permit in the `Notify`; a connection
    /// that then takes the slot without waiting leaves that permit behind. The next connection
    /// to wait is woken by it at once, finds nothing, waits again, and still gets the next slot.
    #[tokio::test(start_paused = true)]
    async fn a_slot_taken_without_waiting_loses_no_later_slot() {
        let q = SlotQueue::new(8);
        let t = Instant::now();
        q.push((t, 0, 1, 0)).unwrap();
        assert_eq!(q.pop().await.map(|s| s.2), Some(1));
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.pop().await.map(|s| s.2) }
        });
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(
            !waiter.is_finished(),
            "a left-over permit must not end a wait on an empty queue"
        );
        q.push((t, 0, 2, 0)).unwrap();
        assert_eq!(waiter.await.unwrap(), Some(2));
        drop(Closer(q.clone()));
        assert_eq!(q.pop().await, None);
    }

    /// A slot goes to the connection that began to wait last (its socket and task are the
    /// ones still in the caches), the next to the one before it.
    #[tokio::test(start_paused = true)]
    async fn the_connection_idle_the_shortest_time_takes_the_slot() {
        let q = SlotQueue::new(8);
        let t = Instant::now();
        let mut waiters = Vec::new();
        for _ in 0..3 {
            let q = q.clone();
            waiters.push(tokio::spawn(async move { q.pop().await.map(|s| s.2) }));
            // Each registers before the next is spawned.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        q.push((t, 0, 7, 0)).unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let done: Vec<bool> = waiters.iter().map(|w| w.is_finished()).collect();
        assert_eq!(done, [false, false, true]);
        q.push((t, 0, 8, 0)).unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(waiters[1].is_finished() && !waiters[0].is_finished());
        q.close();
        let got: Vec<Option<u64>> = futures::future::join_all(waiters)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(got, [None, Some(8), Some(7)]);
    }

    /// Slots go out oldest first, each to exactly one waiting connection, and every waiter
    /// ends once the arrival side is gone.
    #[tokio::test(start_paused = true)]
    async fn waiting_connections_take_each_slot_once_then_end() {
        let q = SlotQueue::new(100);
        let mut pool = Vec::new();
        for _ in 0..3 {
            let q = q.clone();
            pool.push(tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some((_, _, index, _)) = q.pop().await {
                    got.push(index);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                got
            }));
        }
        let closer = Closer(q.clone());
        let t = Instant::now();
        for i in 0..30u64 {
            q.push((t, 0, i, 0)).unwrap();
            if i % 7 == 0 {
                tokio::time::sleep(Duration::from_micros(300)).await;
            }
        }
        drop(closer);
        let mut all = Vec::new();
        for p in pool {
            let got = p.await.unwrap();
            assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
            all.extend(got);
        }
        all.sort_unstable();
        assert_eq!(all, (0..30).collect::<Vec<_>>());
    }
}
