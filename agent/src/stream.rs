//! The raw-stream driver (`tcp:` steps over `tcp://` or `unix://` targets): one framed request,
//! one framed reply. The request is framed once per step; the reply is read into a buffer
//! owned by the connection, so nothing is allocated per request. Lengths from the peer are
//! never trusted: a reply longer than [`MAX_FRAME`] is a `protocol` error, whatever it claims.

use std::ops::Range;
use std::path::Path;

use bytes::{Buf, Bytes, BytesMut};
use stampede_core::extract::MAX_CAPTURED_BODY;
use stampede_core::protocol::{Expect, Framing, PayloadError, TcpRequest, MAX_FRAME};
use stampede_core::stats::error_kind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use crate::net::{self, io_failure, Failure};

const READ_CHUNK: usize = 16 * 1024;

/// How the end of a reply is found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyFraming {
    /// 4-byte big-endian length, then the payload.
    Length,
    /// The payload ends at the first occurrence of these bytes.
    Delimiter(Bytes),
    /// Exactly this many bytes.
    Fixed(usize),
}

/// Why a tcp or udp step cannot be compiled; the message names the field relative to the
/// step's protocol (`send`, `framing.delimiter`, `expect`).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The payload does not decode (a `file:` not inlined, bad hex or base64).
    #[error("send: {0}")]
    Send(PayloadError),
    /// A payload longer than one frame or datagram may be.
    #[error("send: longer than {max} bytes")]
    SendTooLong {
        /// The longest payload the framing allows, in bytes.
        max: usize,
    },
    /// The delimiter does not decode.
    #[error("framing.delimiter: {0}")]
    Delimiter(PayloadError),
    /// An empty delimiter, which would end every reply at its first byte.
    #[error("framing.delimiter: must not be empty")]
    EmptyDelimiter,
    /// The payload holds its own delimiter, so the server would read two requests.
    #[error("send: holds the framing delimiter")]
    DelimiterInSend,
    /// A fixed reply size of 0 or past [`MAX_FRAME`].
    #[error("framing.fixed: must be between 1 and {MAX_FRAME}")]
    FixedSize,
    /// The expected reply does not decode.
    #[error("expect: {0}")]
    Expect(PayloadError),
}

/// A reply check, with its bytes decoded once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyCheck {
    /// The reply must be these bytes.
    Exact(Bytes),
    /// The reply must start with these bytes.
    Prefix(Bytes),
}

impl ReplyCheck {
    /// Decodes the scenario's `expect` once, so a reply is compared to bytes.
    pub fn new(e: &Expect) -> Result<Self, PayloadError> {
        let bytes = Bytes::from(e.payload().bytes()?);
        Ok(match e {
            Expect::Exact(_) => ReplyCheck::Exact(bytes),
            Expect::Prefix(_) => ReplyCheck::Prefix(bytes),
        })
    }

    /// Whether `reply` passes.
    #[inline]
    pub fn accepts(&self, reply: &[u8]) -> bool {
        match self {
            ReplyCheck::Exact(b) => reply == &b[..],
            ReplyCheck::Prefix(b) => reply.starts_with(b),
        }
    }
}

/// A `tcp:` step compiled once: the framed request bytes, the reply framing and check.
#[derive(Debug, Clone)]
pub struct FramedRequest {
    bytes: Bytes,
    framing: ReplyFraming,
    check: Option<ReplyCheck>,
}

impl FramedRequest {
    /// Frames the request; fails on a payload that does not decode (`file:` not inlined) or
    /// does not fit the framing. A templated payload is framed per request ([`Self::frame`]):
    /// this keeps its framing and check.
    pub fn new(t: &TcpRequest) -> Result<Self, RequestError> {
        let payload = match t.send.template() {
            Some(_) => Vec::new(),
            None => t.send.bytes().map_err(RequestError::Send)?,
        };
        if payload.len() > MAX_FRAME {
            return Err(RequestError::SendTooLong { max: MAX_FRAME });
        }
        let mut out = BytesMut::with_capacity(payload.len() + 4);
        let framing = match &t.framing {
            Framing::LengthPrefixed => {
                out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
                out.extend_from_slice(&payload);
                ReplyFraming::Length
            }
            Framing::Delimiter(d) => {
                let d = d.bytes().map_err(RequestError::Delimiter)?;
                if d.is_empty() {
                    return Err(RequestError::EmptyDelimiter);
                }
                if contains(&payload, &d) {
                    return Err(RequestError::DelimiterInSend);
                }
                out.extend_from_slice(&payload);
                out.extend_from_slice(&d);
                ReplyFraming::Delimiter(Bytes::from(d))
            }
            Framing::Fixed(n) => {
                let n = *n as usize;
                if n == 0 || n > MAX_FRAME {
                    return Err(RequestError::FixedSize);
                }
                out.extend_from_slice(&payload);
                ReplyFraming::Fixed(n)
            }
        };
        let check = t
            .expect
            .as_ref()
            .map(ReplyCheck::new)
            .transpose()
            .map_err(RequestError::Expect)?;
        Ok(Self {
            bytes: out.freeze(),
            framing,
            check,
        })
    }

    /// Bytes of the framed request, for the bytes-sent count.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The framed request, when its payload is not a template.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether the framed request has no bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Frames `payload` (a payload rendered for one request) as this step frames its
    /// requests, into `out`. A payload longer than [`MAX_FRAME`], or one holding the
    /// delimiter of delimiter framing (a data row, an extracted value with a line break), is
    /// a `template` error and nothing is sent: the peer would parse two requests, answer
    /// both, and every later reply on the connection would be taken for the wrong request.
    pub fn frame(&self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), Failure> {
        if payload.len() > MAX_FRAME {
            return Err(Failure(error_kind::TEMPLATE));
        }
        if let ReplyFraming::Delimiter(d) = &self.framing {
            if contains(payload, d) {
                return Err(Failure(error_kind::TEMPLATE));
            }
        }
        out.clear();
        if self.framing == ReplyFraming::Length {
            out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        }
        out.extend_from_slice(payload);
        if let ReplyFraming::Delimiter(d) = &self.framing {
            out.extend_from_slice(d);
        }
        Ok(())
    }
}

/// Whether `needle` (not empty) occurs in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    match needle {
        [] => false,
        [b] => hay.contains(b),
        _ => hay.windows(needle.len()).any(|w| w == needle),
    }
}

/// Finds one reply at the start of `buf`: the payload's range and the bytes it takes, or
/// `None` if more bytes are needed. `scanned` remembers how far a delimiter search got, so a
/// long reply is not rescanned from the start on every read. Never trusts a length: anything
/// that would exceed [`MAX_FRAME`] is a `protocol` error.
pub fn decode(
    framing: &ReplyFraming,
    buf: &[u8],
    scanned: &mut usize,
) -> Result<Option<(Range<usize>, usize)>, Failure> {
    match framing {
        ReplyFraming::Length => {
            let Some(head) = buf.get(..4) else {
                return Ok(None);
            };
            let n = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
            if n > MAX_FRAME {
                return Err(Failure(error_kind::PROTOCOL));
            }
            if buf.len() - 4 < n {
                return Ok(None);
            }
            Ok(Some((4..4 + n, 4 + n)))
        }
        ReplyFraming::Delimiter(d) => {
            let from = (*scanned).min(buf.len());
            if let Some(pos) = buf[from..].windows(d.len()).position(|w| w == &d[..]) {
                let end = from + pos;
                *scanned = 0;
                return Ok(Some((0..end, end + d.len())));
            }
            // Keep the last len-1 bytes: a delimiter may straddle the next read.
            *scanned = buf.len().saturating_sub(d.len() - 1);
            if buf.len() > MAX_FRAME + d.len() {
                return Err(Failure(error_kind::PROTOCOL));
            }
            Ok(None)
        }
        ReplyFraming::Fixed(n) => {
            if buf.len() < *n {
                return Ok(None);
            }
            Ok(Some((0..*n, *n)))
        }
    }
}

#[derive(Debug)]
enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// One stream connection (TCP or Unix) with its reusable read buffer.
#[derive(Debug)]
pub struct StreamConn {
    socket: Socket,
    buf: BytesMut,
}

/// The socket's descriptor, for the idle check (`Link::gone_while_idle`).
impl std::os::fd::AsRawFd for StreamConn {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match &self.socket {
            Socket::Tcp(s) => s.as_raw_fd(),
            Socket::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl StreamConn {
    /// A new TCP connection to `addr`.
    pub async fn connect_tcp(addr: std::net::SocketAddr) -> Result<Self, Failure> {
        Ok(Self::new(Socket::Tcp(net::connect_tcp(&addr).await?)))
    }

    /// A new Unix stream connection to `path`.
    pub async fn connect_unix(path: &Path) -> Result<Self, Failure> {
        Ok(Self::new(Socket::Unix(net::connect_unix(path).await?)))
    }

    fn new(socket: Socket) -> Self {
        Self {
            socket,
            buf: BytesMut::with_capacity(READ_CHUNK),
        }
    }

    /// Sends one request and reads its reply; returns the reply's size on the wire. A reply
    /// that fails the check, or bytes beyond the reply (an answer nobody asked for), are
    /// `protocol` errors; the caller then drops the connection.
    pub async fn request(&mut self, req: &FramedRequest) -> Result<u64, Failure> {
        self.exchange(&req.bytes, req, None).await
    }

    /// [`Self::request`] with the request's bytes framed elsewhere ([`FramedRequest::frame`]),
    /// and the reply's payload (framing removed, at most [`MAX_CAPTURED_BODY`] bytes) copied
    /// into `reply` when a step extracts from it or checks it.
    pub async fn exchange(
        &mut self,
        bytes: &[u8],
        req: &FramedRequest,
        reply: Option<&mut Vec<u8>>,
    ) -> Result<u64, Failure> {
        let written = match &mut self.socket {
            Socket::Tcp(s) => s.write_all(bytes).await,
            Socket::Unix(s) => s.write_all(bytes).await,
        };
        written.map_err(|e| io_failure(&e, true))?;
        let mut scanned = 0;
        let (payload, used) = loop {
            if let Some(found) = decode(&req.framing, &self.buf, &mut scanned)? {
                break found;
            }
            self.fill().await?;
        };
        if let Some(check) = &req.check {
            if !check.accepts(&self.buf[payload.clone()]) {
                return Err(Failure(error_kind::PROTOCOL));
            }
        }
        if let Some(reply) = reply {
            reply.clear();
            let end = payload.end.min(payload.start + MAX_CAPTURED_BODY);
            reply.extend_from_slice(&self.buf[payload.start..end]);
        }
        self.buf.advance(used);
        if !self.buf.is_empty() {
            return Err(Failure(error_kind::PROTOCOL));
        }
        Ok(used as u64)
    }

    async fn fill(&mut self) -> Result<usize, Failure> {
        if self.buf.capacity() - self.buf.len() < 1024 {
            self.buf.reserve(READ_CHUNK);
        }
        let read = match &mut self.socket {
            Socket::Tcp(s) => s.read_buf(&mut self.buf).await,
            Socket::Unix(s) => s.read_buf(&mut self.buf).await,
        };
        match read {
            // The peer closed before the reply was complete.
            Ok(0) => Err(Failure(error_kind::RESET)),
            Ok(n) => Ok(n),
            Err(e) => Err(io_failure(&e, false)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use stampede_core::protocol::Payload;

    fn dec(f: &ReplyFraming, buf: &[u8]) -> Result<Option<(Range<usize>, usize)>, Failure> {
        decode(f, buf, &mut 0)
    }

    #[test]
    fn length_prefix_is_never_trusted() {
        let f = ReplyFraming::Length;
        assert_eq!(dec(&f, b"").unwrap(), None);
        assert_eq!(dec(&f, b"\0\0").unwrap(), None);
        assert_eq!(dec(&f, b"\0\0\0\x03ab").unwrap(), None);
        assert_eq!(dec(&f, b"\0\0\0\x03abcX").unwrap(), Some((4..7, 7)));
        assert_eq!(dec(&f, b"\0\0\0\0").unwrap(), Some((4..4, 4)));
        // A claimed 4 GiB (or anything over the cap) is refused at once, not waited for.
        for head in [[0xff; 4], (MAX_FRAME as u32 + 1).to_be_bytes()] {
            assert_eq!(dec(&f, &head), Err(Failure(error_kind::PROTOCOL)));
        }
        let at_cap = (MAX_FRAME as u32).to_be_bytes();
        assert_eq!(dec(&f, &at_cap).unwrap(), None);
    }

    #[test]
    fn delimiter_search_is_bounded_and_resumes() {
        let f = ReplyFraming::Delimiter(Bytes::from_static(b"\r\n"));
        let mut scanned = 0;
        assert_eq!(decode(&f, b"abc\r", &mut scanned).unwrap(), None);
        // The delimiter straddles two reads.
        assert_eq!(
            decode(&f, b"abc\r\nrest", &mut scanned).unwrap(),
            Some((0..3, 5))
        );
        let huge = vec![b'x'; MAX_FRAME + 3];
        assert_eq!(dec(&f, &huge), Err(Failure(error_kind::PROTOCOL)));
    }

    #[test]
    fn fixed_waits_for_exactly_n() {
        let f = ReplyFraming::Fixed(3);
        assert_eq!(dec(&f, b"ab").unwrap(), None);
        assert_eq!(dec(&f, b"abcd").unwrap(), Some((0..3, 3)));
    }

    proptest! {
        #[test]
        fn hostile_bytes_never_panic_or_overrun(buf in proptest::collection::vec(any::<u8>(), 0..64), d in 1usize..4, n in 1usize..80) {
            let delim = Bytes::from(vec![0u8; d]);
            for f in [ReplyFraming::Length, ReplyFraming::Delimiter(delim), ReplyFraming::Fixed(n)] {
                let mut scanned = 0;
                if let Ok(Some((range, used))) = decode(&f, &buf, &mut scanned) {
                    prop_assert!(range.end <= used && used <= buf.len());
                }
            }
        }
    }

    #[test]
    fn requests_are_framed_once() {
        let t = |framing| TcpRequest {
            send: Payload::text("hi"),
            framing,
            expect: None,
        };
        let r = FramedRequest::new(&t(Framing::LengthPrefixed)).unwrap();
        assert_eq!(&r.bytes[..], b"\0\0\0\x02hi");
        let r = FramedRequest::new(&t(Framing::Delimiter(Payload::Hex("0a".into())))).unwrap();
        assert_eq!(&r.bytes[..], b"hi\n");
        let mut out = Vec::new();
        r.frame(b"abc", &mut out).unwrap();
        assert_eq!(out, b"abc\n");
        // A rendered payload holding the delimiter would be two frames: refused, nothing framed.
        out.clear();
        assert_eq!(
            r.frame(b"a\nb", &mut out),
            Err(Failure(error_kind::TEMPLATE))
        );
        assert!(out.is_empty());
        let crlf = FramedRequest::new(&t(Framing::Delimiter(Payload::Hex("0d0a".into())))).unwrap();
        crlf.frame(b"a\rb\n", &mut out).unwrap();
        assert!(crlf.frame(b"a\r\nb", &mut out).is_err());
        assert!(FramedRequest::new(&TcpRequest {
            send: Payload::text("x\r\n"),
            framing: Framing::Delimiter(Payload::Hex("0d0a".into())),
            expect: None
        })
        .is_err());
        let r = FramedRequest::new(&t(Framing::LengthPrefixed)).unwrap();
        r.frame(b"abc", &mut out).unwrap();
        assert_eq!(out, b"\0\0\0\x03abc");
        let r = FramedRequest::new(&t(Framing::Fixed(2))).unwrap();
        assert_eq!(
            (&r.bytes[..], &r.framing),
            (&b"hi"[..], &ReplyFraming::Fixed(2))
        );
        assert!(FramedRequest::new(&TcpRequest {
            send: Payload::File("x".into()),
            framing: Framing::LengthPrefixed,
            expect: None
        })
        .is_err());
    }

    #[test]
    fn checks() {
        let c = ReplyCheck::Prefix(Bytes::from_static(b"ab"));
        assert!(c.accepts(b"abc") && !c.accepts(b"a") && !c.accepts(b"xbc"));
        let c = ReplyCheck::Exact(Bytes::from_static(b"ab"));
        assert!(c.accepts(b"ab") && !c.accepts(b"abc"));
    }
}
