//! The response body type: a single buffer, one chunk repeated up to a length, or frames
//! paced in time (server-sent events, chunks) whose length is not known ahead.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};

/// A response body: exact-length ones, or a paced stream (sent chunked over HTTP/1.1).
#[derive(Debug)]
pub(crate) enum Body {
    Full(Option<Bytes>),
    /// `remaining` bytes taken from `chunk` over and over (never allocating per request).
    Repeat {
        chunk: Bytes,
        remaining: u64,
    },
    /// Frames sent at fixed times from the response's start (no drift from slow sends).
    Paced(Box<super::paced::Paced>),
}

impl Body {
    pub(crate) fn from_static(s: &'static [u8]) -> Self {
        Self::full(Bytes::from_static(s))
    }

    pub(crate) fn full(b: Bytes) -> Self {
        if b.is_empty() {
            Self::Full(None)
        } else {
            Self::Full(Some(b))
        }
    }

    /// `n` bytes of `pattern`, repeated. `pattern` must not be empty.
    pub(crate) fn repeat(pattern: &Bytes, n: u64) -> Self {
        match usize::try_from(n) {
            Ok(small) if small <= pattern.len() => Self::full(pattern.slice(..small)),
            _ => Self::Repeat {
                chunk: pattern.clone(),
                remaining: n,
            },
        }
    }

    /// Bytes the body holds (a paced one: what it has left to send).
    pub(crate) fn len(&self) -> u64 {
        match self {
            Self::Full(b) => b.as_ref().map_or(0, |b| b.len() as u64),
            Self::Repeat { remaining, .. } => *remaining,
            Self::Paced(p) => p.remaining_bytes(),
        }
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let frame = match self.get_mut() {
            Self::Paced(p) => return p.poll_next(cx).map(|f| f.map(|b| Ok(Frame::data(b)))),
            Self::Full(b) => b.take().map(Frame::data),
            Self::Repeat { chunk, remaining } => {
                if *remaining == 0 || chunk.is_empty() {
                    None
                } else {
                    let n = usize::try_from(*remaining)
                        .unwrap_or(usize::MAX)
                        .min(chunk.len());
                    *remaining -= n as u64;
                    Some(Frame::data(chunk.slice(..n)))
                }
            }
        };
        Poll::Ready(frame.map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Paced(p) => p.is_done(),
            _ => self.len() == 0,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            // Unknown ahead to hyper, so that HTTP/1.1 sends it chunked, frame by frame.
            Self::Paced(_) => SizeHint::default(),
            _ => SizeHint::with_exact(self.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn repeat_yields_exactly_n_bytes() {
        let pattern = Bytes::from_static(b"abcd");
        for n in [0u64, 1, 3, 4, 5, 8, 9, 1000] {
            let body = Body::repeat(&pattern, n);
            assert_eq!(hyper::body::Body::size_hint(&body).exact(), Some(n));
            let got = body.collect().await.unwrap().to_bytes();
            assert_eq!(got.len() as u64, n);
            assert!(got.iter().zip(pattern.iter().cycle()).all(|(a, b)| a == b));
        }
    }
}
