//! A run's stop as its load paths read it. Every session looks before each request, and every
//! arrival before it is dispatched, whether the run has stopped: with the token's own check
//! that look takes the token's lock, one lock that every connection of every core shares,
//! once per request. Here the look is an atomic load of a flag that whoever waits on the
//! stop sets as it wakes (the run's aborter does, at once), so the flag may read "running"
//! for the few polls between the cancel and that wake-up: a request started then is on the
//! books like one started just before the stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// The stop token and the flag beside it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stop {
    token: CancellationToken,
    seen: Arc<AtomicBool>,
}

impl Stop {
    /// The stop of a run that `token` stops.
    pub(crate) fn new(token: CancellationToken) -> Self {
        Self {
            token,
            seen: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether the stop has fired, as far as anyone waiting on it has seen.
    pub(crate) fn is_stopped(&self) -> bool {
        self.seen.load(Ordering::Acquire)
    }

    /// Completes when the stop fires, and sets the flag that [`Self::is_stopped`] reads.
    pub(crate) async fn fired(&self) {
        self.token.cancelled().await;
        self.seen.store(true, Ordering::Release);
    }

    /// Stops the run from inside (an arrival loop that failed).
    pub(crate) fn stop(&self) {
        self.seen.store(true, Ordering::Release);
        self.token.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flag reads the stop once a waiter has woken, and not before the token fires.
    #[tokio::test(start_paused = true)]
    async fn the_flag_follows_the_token_through_its_waiter() {
        let token = CancellationToken::new();
        let stop = Stop::new(token.clone());
        let waiter = tokio::spawn({
            let stop = stop.clone();
            async move { stop.fired().await }
        });
        tokio::task::yield_now().await;
        assert!(!stop.is_stopped());
        token.cancel();
        waiter.await.unwrap();
        assert!(stop.is_stopped());
        let token = CancellationToken::new();
        let inside = Stop::new(token.clone());
        inside.stop();
        assert!(inside.is_stopped() && token.is_cancelled());
    }
}
