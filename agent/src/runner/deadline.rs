//! A connection's request timer: one tokio timer that bounds every request the connection
//! carries, moved only when a request's deadline comes before it.
//!
//! `tokio::time::timeout_at` per request inserts a timer into the wheel when first polled and
//! removes it again when dropped, both under the timer driver's lock: about 1 % of a closed
//! request's CPU over keep-alive loopback. A connection's deadlines only grow (each is its
//! request's send time plus the request timeout), so one timer armed at an earlier request's
//! deadline stays valid for the later ones: when it fires before the current deadline, it
//! is moved to that deadline and waited on again. With a 10 s timeout and requests every
//! few microseconds, it moves once every 10 s instead of twice per request.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use tokio::time::{Instant, Sleep};

/// The request timer of one connection task (or of one open-model session): borrowed by
/// each request the task makes, in turn.
pub(super) struct RequestTimer<'t> {
    sleep: Pin<&'t mut Sleep>,
}

impl<'t> RequestTimer<'t> {
    /// A timer over `sleep`, pinned in the task that owns the connection; its deadline does
    /// not matter (a first request's deadline comes after it, or it is moved).
    pub(super) fn new(sleep: Pin<&'t mut Sleep>) -> Self {
        Self { sleep }
    }

    /// Runs `fut` until it completes (`Some`) or `deadline` passes (`None`), whichever comes
    /// first. Like `timeout_at`, it polls `fut` first: an answer already there when the
    /// deadline passes still counts. `fut` comes pinned by the caller, so that the request's
    /// future is held once in the session's, not twice (as an argument and as a local).
    pub(super) fn within<'s, F: Future>(
        &'s mut self,
        deadline: Instant,
        mut fut: Pin<&'s mut F>,
    ) -> impl Future<Output = Option<F::Output>> + use<'s, 't, F> {
        if self.sleep.deadline() > deadline {
            self.sleep.as_mut().reset(deadline);
        }
        std::future::poll_fn(move |cx| {
            if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                return Poll::Ready(Some(v));
            }
            loop {
                match self.sleep.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    // Armed at this deadline (never after it): the request has run out of time.
                    Poll::Ready(()) if self.sleep.deadline() >= deadline => {
                        return Poll::Ready(None)
                    }
                    // Armed for an earlier request: move it to this one's deadline.
                    Poll::Ready(()) => self.sleep.as_mut().reset(deadline),
                }
            }
        })
    }

    /// Waits until `until` (`true`) or the stop (`false`). Between requests the timer is
    /// free, so a think time needs no timer of its own (one less in the task's future, and
    /// none inserted into the wheel); the next request's [`within`](Self::within) finds it
    /// earlier than its deadline and moves it.
    pub(super) fn pause<'s>(
        &'s mut self,
        until: Instant,
        stop: &'s super::stop::Stop,
    ) -> impl Future<Output = bool> + use<'s, 't> {
        self.sleep.as_mut().reset(until);
        let sleep = self.sleep.as_mut();
        async move {
            tokio::select! {
                () = sleep => true,
                () = stop.fired() => false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use std::pin::pin;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_request_ends_at_its_own_deadline_not_at_an_earlier_requests() {
        let t0 = Instant::now();
        let sleep = pin!(tokio::time::sleep_until(t0));
        let mut timer = RequestTimer::new(sleep);
        // The first request is answered in time: the timer stays armed at its deadline (t0 + 10 s).
        let first = timer
            .within(t0 + Duration::from_secs(10), pin!(async { 1 }))
            .await;
        assert_eq!(first, Some(1));
        // A later request (deadline t0 + 15 s) outlives the first's deadline and still
        // finishes before its own.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let second = timer
            .within(
                t0 + Duration::from_secs(15),
                pin!(tokio::time::sleep_until(t0 + Duration::from_secs(12))),
            )
            .await;
        assert_eq!(second, Some(()));
        assert_eq!(Instant::now(), t0 + Duration::from_secs(12));
        // One that never ends times out at its own deadline, not at the armed one.
        let third = timer
            .within(
                t0 + Duration::from_secs(22),
                pin!(std::future::pending::<()>()),
            )
            .await;
        assert_eq!(third, None);
        assert_eq!(Instant::now(), t0 + Duration::from_secs(22));
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_deadline_moves_the_timer_back() {
        let t0 = Instant::now();
        let sleep = pin!(tokio::time::sleep_until(t0 + Duration::from_secs(60)));
        let mut timer = RequestTimer::new(sleep);
        let r = timer
            .within(
                t0 + Duration::from_secs(2),
                pin!(std::future::pending::<()>()),
            )
            .await;
        assert_eq!(r, None);
        assert_eq!(Instant::now(), t0 + Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_ready_at_a_past_deadline_counts_and_a_pending_one_does_not() {
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let sleep = pin!(tokio::time::sleep_until(t0));
        let mut timer = RequestTimer::new(sleep);
        assert_eq!(timer.within(t0, pin!(async { 7 })).await, Some(7));
        let r = timer.within(t0, pin!(tokio::task::yield_now())).await;
        assert_eq!(r, None);
        assert_eq!(Instant::now(), t0 + Duration::from_secs(1));
    }

    /// A pause waits on the timer until its end or the stop, and a request after it is
    /// still bounded by its own deadline.
    #[tokio::test(start_paused = true)]
    async fn a_pause_ends_at_its_time_or_at_the_stop_and_frees_the_timer() {
        let t0 = Instant::now();
        let sleep = pin!(tokio::time::sleep_until(t0 + Duration::from_secs(60)));
        let mut timer = RequestTimer::new(sleep);
        let token = tokio_util::sync::CancellationToken::new();
        let stop = super::super::stop::Stop::new(token.clone());
        assert!(timer.pause(t0 + Duration::from_secs(3), &stop).await);
        assert_eq!(Instant::now(), t0 + Duration::from_secs(3));
        let r = timer
            .within(
                t0 + Duration::from_secs(8),
                pin!(std::future::pending::<()>()),
            )
            .await;
        assert_eq!(r, None);
        assert_eq!(Instant::now(), t0 + Duration::from_secs(8));
        let stopper = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            stopper.cancel();
        });
        assert!(!timer.pause(t0 + Duration::from_secs(100), &stop).await);
        assert_eq!(Instant::now(), t0 + Duration::from_secs(9));
    }
}
