//! Where a response's parts go: nowhere on the hot path ([`Discard`]), kept for checks and
//! extraction ([`Capture`]), or the body's start of an unexpected answer ([`Excerpt`]).

use stampede_core::scenario::status_error;

/// Where the parts of a response go.
pub trait Sink {
    /// Whether anything is kept (chunk boundaries are then observed).
    const KEEP: bool;
    /// Whether the headers are kept (the final head is then parsed into [`Sink::header`]).
    const HEADERS: bool = Self::KEEP;
    /// The final answer's status, before its headers and body.
    #[inline(always)]
    fn status(&mut self, _status: u16) {}
    /// One header of the final head, its name lowercased; called only when `HEADERS`.
    fn header(&mut self, name: &str, value: &[u8]);
    /// The next piece of the body, de-chunked, in the order read.
    fn body(&mut self, chunk: &[u8]);
    /// A chunk of a chunked body begins (its size line was just read): a stream reader
    /// times its chunks by it.
    #[inline(always)]
    fn chunk(&mut self) {}
}

impl<S: Sink> Sink for &mut S {
    const KEEP: bool = S::KEEP;
    const HEADERS: bool = S::HEADERS;
    #[inline(always)]
    fn status(&mut self, status: u16) {
        (**self).status(status)
    }
    #[inline(always)]
    fn header(&mut self, name: &str, value: &[u8]) {
        (**self).header(name, value)
    }
    #[inline(always)]
    fn body(&mut self, chunk: &[u8]) {
        (**self).body(chunk)
    }
    #[inline(always)]
    fn chunk(&mut self) {
        (**self).chunk()
    }
}

/// Keeps nothing: the discard path.
pub struct Discard;

impl Sink for Discard {
    const KEEP: bool = false;
    #[inline(always)]
    fn header(&mut self, _: &str, _: &[u8]) {}
    #[inline(always)]
    fn body(&mut self, _: &[u8]) {}
}

/// Keeps the headers (names lowercased) and the body up to `limit` bytes, for extraction and
/// checks. Reused from one request to the next of a session.
#[derive(Debug, Default)]
pub struct Capture {
    /// The final head's headers, names lowercased, in the order received.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body's first `limit` bytes.
    pub body: Vec<u8>,
    /// Most body bytes kept; the rest is read and dropped.
    pub limit: usize,
}

impl Capture {
    /// Empties the capture for the next request, keeping its buffers' memory.
    pub fn clear(&mut self, limit: usize) {
        self.headers.clear();
        self.body.clear();
        self.limit = limit;
    }
}

impl Sink for Capture {
    const KEEP: bool = true;
    fn header(&mut self, name: &str, value: &[u8]) {
        self.headers
            .push((name.to_ascii_lowercase(), value.to_vec()));
    }
    fn body(&mut self, chunk: &[u8]) {
        let room = self.limit.saturating_sub(self.body.len());
        self.body.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }
}

/// Keeps the start of the body of an answer whose status was not expected, for a failure
/// sample: nothing (and no allocation) for an expected one, nor when off. The headers are
/// never kept.
#[derive(Debug, Default)]
pub struct Excerpt<'e> {
    /// The step's expected statuses; `None` when off.
    expect: Option<&'e Option<Vec<u16>>>,
    /// The body's start, allocated once the status is found unexpected.
    pub body: Option<Box<Vec<u8>>>,
}

impl<'e> Excerpt<'e> {
    /// An excerpt of answers whose status is not one of `expect` (the step's expected
    /// statuses), when `on`.
    pub fn new(on: bool, expect: &'e Option<Vec<u16>>) -> Self {
        Self {
            expect: on.then_some(expect),
            body: None,
        }
    }

    /// The body's start kept (empty for an expected answer).
    pub fn kept(&self) -> &[u8] {
        self.body.as_deref().map_or(&[], Vec::as_slice)
    }
}

impl Sink for Excerpt<'_> {
    const KEEP: bool = true;
    const HEADERS: bool = false;
    #[inline(always)]
    fn status(&mut self, status: u16) {
        if let Some(expect) = self.expect {
            if status_error(expect.as_deref(), status).is_some() {
                self.body = Some(Box::default());
            }
        }
    }
    #[inline(always)]
    fn header(&mut self, _: &str, _: &[u8]) {}
    #[inline(always)]
    fn body(&mut self, chunk: &[u8]) {
        if let Some(body) = self.body.as_mut() {
            // One byte past the limit marks the cut.
            let room = (stampede_core::samples::MAX_BODY + 1).saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
    }
}
