//! Replies sent a frame at a time at fixed times: `GET /sse?events=N&gap_ms=M` (server-sent
//! events) and `GET /chunks?n=N&gap_ms=M&size=B` (a chunked body). Frame `i` leaves at
//! `start + i × gap`, so a slow write does not push the frames after it: a client that
//! measures the gaps sees the server's schedule, not its own drift.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::{Instant, Sleep};

/// Most frames one paced reply may ask for.
pub(crate) const MAX_FRAMES: u64 = 100_000;
/// Largest chunk a `/chunks` reply may ask for.
pub(crate) const MAX_CHUNK: u64 = 1 << 20;

/// What each frame holds.
#[derive(Debug)]
pub(crate) enum Framing {
    /// `id: I\ndata: event-I\n\n`.
    Sse,
    /// `size` bytes of the server's pattern.
    Chunks { pattern: Bytes, size: usize },
}

/// A paced reply in progress.
#[derive(Debug)]
pub(crate) struct Paced {
    framing: Framing,
    frames: u64,
    next: u64,
    gap: Duration,
    start: Instant,
    sleep: Pin<Box<Sleep>>,
}

impl Paced {
    /// `frames` frames `gap` apart, the first at once. A `Chunks` pattern must not be empty.
    pub(crate) fn new(framing: Framing, frames: u64, gap: Duration) -> Self {
        let start = Instant::now();
        Self {
            framing,
            frames,
            next: 0,
            gap,
            start,
            sleep: Box::pin(tokio::time::sleep_until(start)),
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.next >= self.frames
    }

    /// Bytes of the frames not sent yet.
    pub(crate) fn remaining_bytes(&self) -> u64 {
        match &self.framing {
            Framing::Chunks { size, .. } => (self.frames - self.next) * *size as u64,
            Framing::Sse => (self.next..self.frames).map(sse_len).sum(),
        }
    }

    fn frame(&self, i: u64) -> Bytes {
        match &self.framing {
            Framing::Sse => Bytes::from(format!("id: {i}\ndata: event-{i}\n\n")),
            Framing::Chunks { pattern, size } => {
                let mut out = Vec::with_capacity(*size);
                while out.len() < *size {
                    let take = (*size - out.len()).min(pattern.len());
                    out.extend_from_slice(&pattern[..take]);
                }
                Bytes::from(out)
            }
        }
    }

    /// The next frame when its time has come; `None` after the last.
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if self.is_done() {
            return Poll::Ready(None);
        }
        if self.next > 0 {
            let offset =
                u32::try_from(self.next).map_or(Duration::MAX, |n| self.gap.saturating_mul(n));
            let due = self.start.checked_add(offset).unwrap_or(self.start);
            if self.sleep.deadline() != due {
                self.sleep.as_mut().reset(due);
            }
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        let frame = self.frame(self.next);
        self.next += 1;
        Poll::Ready(Some(frame))
    }
}

/// The length of SSE frame `i`: `id: ` I `\ndata: event-` I `\n\n`.
fn sse_len(i: u64) -> u64 {
    let digits = u64::from(i.checked_ilog10().unwrap_or(0) + 1);
    4 + digits + 13 + digits + 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn sse_frame_lengths_match_the_frames() {
        let p = Paced::new(Framing::Sse, 12, Duration::ZERO);
        let by_len: u64 = (0..12).map(|i| p.frame(i).len() as u64).sum();
        assert_eq!(p.remaining_bytes(), by_len);
    }

    /// Frames leave on the schedule from the start: the first at once, then one per gap.
    #[tokio::test(start_paused = true)]
    async fn frames_leave_a_gap_apart_from_the_start() {
        let mut p = Paced::new(Framing::Sse, 3, Duration::from_millis(100));
        let t0 = Instant::now();
        let mut at = Vec::new();
        while let Some(f) = std::future::poll_fn(|cx| p.poll_next(cx)).await {
            at.push((t0.elapsed().as_millis(), f));
        }
        let times: Vec<u128> = at.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, vec![0, 100, 200]);
        assert_eq!(&at[2].1[..], b"id: 2\ndata: event-2\n\n");
    }

    #[tokio::test(start_paused = true)]
    async fn chunks_have_the_asked_size() {
        let pattern = Bytes::from_static(b"abc");
        let mut p = Paced::new(Framing::Chunks { pattern, size: 7 }, 2, Duration::ZERO);
        assert_eq!(p.remaining_bytes(), 14);
        let f = std::future::poll_fn(|cx| p.poll_next(cx)).await.unwrap();
        assert_eq!(&f[..], b"abcabca");
    }
}
