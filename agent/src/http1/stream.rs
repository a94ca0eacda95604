//! A streamed reply read as it arrives (`stream: sse | chunks`): a [`Sink`] that notes when
//! each event (or chunk) arrived, and passes the bytes on to the step's own sink. The clock
//! is read when the bytes are handed over, right after the read that brought them; the
//! session turns the first arrival into the time to first event from the intended send.

use stampede_core::http::StreamMode;
use tokio::time::Instant;

use super::Sink;

/// Most gaps one reply keeps: a server that sends millions of tiny events costs the agent 8
/// bytes each, bounded here (the count of events goes on).
const MAX_GAPS: usize = 1 << 20;

/// When a streamed reply's events arrived.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Arrivals {
    /// The first event (or body byte).
    pub first: Option<Instant>,
    /// Microseconds between each event and the one before it.
    pub gaps_us: Vec<u64>,
    /// Events seen, the first included (more than the gaps when [`MAX_GAPS`] was reached).
    pub events: u64,
}

impl Arrivals {
    /// Notes one event arrived `at`; `last` is when the one before it did.
    pub(crate) fn arrive(&mut self, at: Instant, last: &mut Option<Instant>) {
        self.events += 1;
        if self.first.is_none() {
            self.first = Some(at);
        }
        if let Some(before) = last.replace(at) {
            if self.gaps_us.len() < MAX_GAPS {
                let us = u64::try_from(at.saturating_duration_since(before).as_micros());
                self.gaps_us.push(us.unwrap_or(u64::MAX));
            }
        }
    }
}

/// Where an SSE parser is within a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// At the start of a line.
    Start,
    /// Within a comment line (`:` first): keep-alives, never an event.
    Comment,
    /// Within a field line: the block is an event when it ends.
    Field,
}

/// Times a streamed reply while `inner` keeps what the step's checks need.
#[derive(Debug)]
pub struct Streamed<S> {
    inner: S,
    mode: StreamMode,
    line: Line,
    /// The byte before was a CR (a CRLF's LF ends no second line).
    after_cr: bool,
    /// The current block has a field line: a blank line dispatches it.
    has_field: bool,
    /// The body is chunked: in `chunks` mode, arrivals are its chunks, not its reads.
    chunked: bool,
    last: Option<Instant>,
    /// The events timed so far (their count and the gaps between them).
    pub arrivals: Arrivals,
}

impl<S: Sink> Streamed<S> {
    /// Wraps `inner`, timing the events `mode` names.
    pub fn new(inner: S, mode: StreamMode) -> Self {
        Self {
            inner,
            mode,
            line: Line::Start,
            after_cr: false,
            has_field: false,
            chunked: false,
            last: None,
            arrivals: Arrivals::default(),
        }
    }

    /// Feeds SSE bytes that arrived `at`: an event arrives with the blank line that ends it.
    fn sse(&mut self, bytes: &[u8], at: Instant) {
        for &b in bytes {
            let after_cr = std::mem::replace(&mut self.after_cr, b == b'\r');
            match b {
                b'\n' if after_cr => {}
                b'\r' | b'\n' => {
                    if self.line == Line::Start {
                        if std::mem::take(&mut self.has_field) {
                            self.arrivals.arrive(at, &mut self.last);
                        }
                    } else {
                        self.has_field |= self.line == Line::Field;
                    }
                    self.line = Line::Start;
                }
                b':' if self.line == Line::Start => self.line = Line::Comment,
                _ if self.line == Line::Start => self.line = Line::Field,
                _ => {}
            }
        }
    }
}

impl<S: Sink> Sink for Streamed<S> {
    // Chunk boundaries and every read are observed.
    const KEEP: bool = true;

    fn header(&mut self, name: &str, value: &[u8]) {
        if S::KEEP {
            self.inner.header(name, value);
        }
    }

    fn body(&mut self, chunk: &[u8]) {
        if chunk.is_empty() {
            return;
        }
        let now = Instant::now();
        match self.mode {
            StreamMode::Sse => self.sse(chunk, now),
            StreamMode::Chunks if !self.chunked => self.arrivals.arrive(now, &mut self.last),
            StreamMode::Chunks => {}
        }
        if S::KEEP {
            self.inner.body(chunk);
        }
    }

    fn chunk(&mut self) {
        if self.mode == StreamMode::Chunks {
            self.chunked = true;
            self.arrivals.arrive(Instant::now(), &mut self.last);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::http1::Discard;

    fn events_in<T: AsRef<[u8]>>(pieces: &[T]) -> u64 {
        let mut s = Streamed::new(Discard, StreamMode::Sse);
        for p in pieces {
            s.body(p.as_ref());
        }
        s.arrivals.events
    }

    #[test]
    fn an_event_ends_at_a_blank_line_whatever_the_line_ends() {
        assert_eq!(events_in(&["data: a\n\n"]), 1);
        assert_eq!(events_in(&["data: a\r\n\r\n"]), 1);
        assert_eq!(events_in(&["data: a\r\rdata: b\n\n"]), 2);
        assert_eq!(events_in(&["id: 1\ndata: a\ndata: b\n\n"]), 1);
        // A comment (a keep-alive) is no event; nor is a blank line alone.
        assert_eq!(events_in(&[": ping\n\n\n\n"]), 0);
        // Split anywhere, even between a CR and its LF.
        assert_eq!(events_in(&["data: a\r", "\n\r", "\n"]), 1);
        // Unfinished: no event yet.
        assert_eq!(events_in(&["data: a\n"]), 0);
    }

    /// Gaps are the time between arrivals, under the paused clock.
    #[tokio::test(start_paused = true)]
    async fn gaps_are_timed_between_events() {
        let mut s = Streamed::new(Discard, StreamMode::Sse);
        let t0 = Instant::now();
        s.body(b"data: 0\n\n");
        tokio::time::advance(Duration::from_millis(100)).await;
        s.body(b"data: 1\n");
        tokio::time::advance(Duration::from_millis(5)).await;
        s.body(b"\n");
        assert_eq!(s.arrivals.first, Some(t0));
        assert_eq!(s.arrivals.gaps_us, vec![105_000]);
        assert_eq!(s.arrivals.events, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn chunks_arrive_by_chunk_when_chunked_and_by_read_otherwise() {
        let mut s = Streamed::new(Discard, StreamMode::Chunks);
        s.chunk();
        s.body(b"abc");
        s.body(b"def");
        s.chunk();
        s.body(b"g");
        assert_eq!(s.arrivals.events, 2);
        let mut s = Streamed::new(Discard, StreamMode::Chunks);
        s.body(b"abc");
        s.body(b"");
        s.body(b"def");
        assert_eq!(s.arrivals.events, 2);
    }

    proptest! {
        /// However the stream is cut into reads, the same events are found.
        #[test]
        fn cuts_never_change_the_events(
            events in proptest::collection::vec(("[a-z ]{0,8}", 0usize..3), 0..8),
            cuts in proptest::collection::vec(0usize..64, 0..8),
        ) {
            let ends: [&str; 3] = ["\n", "\r\n", "\r"];
            let mut text = String::new();
            for (data, e) in &events {
                text.push_str("data:");
                text.push_str(data);
                text.push_str(ends[*e]);
                text.push_str(ends[*e]);
            }
            let bytes = text.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().filter(|c| *c < bytes.len()).collect();
            cuts.sort_unstable();
            cuts.dedup();
            let mut pieces = Vec::new();
            let mut from = 0;
            for c in cuts {
                pieces.push(&bytes[from..c]);
                from = c;
            }
            pieces.push(&bytes[from..]);
            prop_assert_eq!(events_in(&pieces), events.len() as u64);
        }
    }
}
