//! A small HTTP/1.1 client for the hot path: a static request is rendered once per step, the
//! response is parsed with `httparse` into a buffer owned by the connection, and bodies are
//! read and discarded. Nothing is allocated per request. Lengths from the server are never
//! trusted beyond what is actually read.
//!
//! Steps that extract or check pass a [`Capture`] [`Sink`] that keeps the headers and the
//! first [`stampede_core::extract::MAX_CAPTURED_BODY`] bytes of the body; every other step
//! passes [`Discard`], whose calls compile to nothing, so the discard path is unchanged.

use std::net::SocketAddr;

use bytes::{Buf, BytesMut};
use stampede_core::stats::error_kind;

mod head;
mod request;
mod sink;
pub mod stream;

pub use crate::net::Failure;
use crate::net::{self, io_failure};
use crate::tls::{Io, TlsClient};
use head::{Body, Head};
pub use request::PreparedRequest;
pub use sink::{Capture, Discard, Excerpt, Sink};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest response head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// A read buffer starts this small and doubles when a response needs more, up to
/// [`READ_CHUNK`] a step.
const INITIAL_BUF: usize = 1024;
const READ_CHUNK: usize = 16 * 1024;
/// Read buffers kept per thread between responses, and the largest kept.
const MAX_SPARE: usize = 256;
const MAX_SPARE_CAPACITY: usize = 64 * 1024;

std::thread_local! {
    /// Read buffers not in use. A connection holds one only while it reads a response, and
    /// gives it back when the response is complete: 10,000 connections waiting for their
    /// answers hold none (at 1 KiB each, that was a quarter of their memory), and taking one
    /// from here allocates nothing once a few exist.
    static SPARE: std::cell::RefCell<Vec<BytesMut>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A read buffer from this thread's spares, or a new one.
fn take_buffer() -> BytesMut {
    SPARE
        .with(|s| s.borrow_mut().pop())
        .unwrap_or_else(|| BytesMut::with_capacity(INITIAL_BUF))
}

/// Gives a read buffer back to this thread's spares (or frees it when they are full, or it
/// grew large for one big response).
fn give_buffer(mut b: BytesMut) {
    if b.capacity() == 0 || b.capacity() > MAX_SPARE_CAPACITY {
        return;
    }
    b.clear();
    SPARE.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < MAX_SPARE {
            s.push(b);
        }
    });
}

/// What came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// The final status (after any `1xx`).
    pub status: u16,
    /// The server allows another request on this connection.
    pub keep_alive: bool,
    /// Bytes read for the response, head and body as framed on the wire.
    pub bytes_received: u64,
}

/// One client connection with its reusable read buffer. The agent's connections are TCP or
/// TLS sockets ([`Io`]); any other byte stream works the same way (the fuzz target and the
/// property tests drive the parser from memory through [`Conn::over`]).
#[derive(Debug)]
pub struct Conn<T = Io> {
    stream: T,
    buf: BytesMut,
}

impl Conn {
    /// Connects to `addr`, over TLS when `tls` is given (the handshake is part of connecting).
    #[allow(clippy::manual_async_fn)] // the arguments held once (net::connect_tcp)
    pub fn connect<'a>(
        addr: &'a SocketAddr,
        tls: Option<&'a TlsClient>,
    ) -> impl std::future::Future<Output = Result<Self, Failure>> + use<'a> {
        async move { Ok(Self::over(net::connect_http(addr, tls).await?)) }
    }

    /// Whether the server's FIN has already reached the reactor: a server that closes
    /// right after its response usually gets it into the same readiness event as the
    /// response. Then the socket can be dropped at once, without the read that would only
    /// see the end (a syscall per connection when every request opens one). Never waits.
    pub fn closed_already(&self) -> bool {
        use futures::FutureExt;
        match &self.stream {
            tokio_util::either::Either::Left(tcp) => tcp
                .ready(tokio::io::Interest::READABLE)
                .now_or_never()
                .and_then(Result::ok)
                .is_some_and(|r| r.is_read_closed()),
            // TLS: the close_notify and the FIN are read through rustls.
            tokio_util::either::Either::Right(_) => false,
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> Conn<T> {
    /// A connection over an already open byte stream.
    pub fn over(stream: T) -> Self {
        Self {
            stream,
            // Taken when a response is read (see `SPARE`).
            buf: BytesMut::new(),
        }
    }

    /// The byte stream under the connection.
    pub fn io(&self) -> &T {
        &self.stream
    }

    /// The byte stream under the connection.
    pub fn io_mut(&mut self) -> &mut T {
        &mut self.stream
    }

    /// Sends one request and reads the whole response.
    pub async fn request(&mut self, req: &PreparedRequest) -> Result<Response, Failure> {
        self.exchange(req.bytes(false), req.head, Discard).await
    }

    /// Sends one request, in its closing form when `last` (see [`PreparedRequest`]), and
    /// reads the whole response. The exchange's own future, not one that wraps it: it is
    /// part of every HTTP/1.1 connection task's future. The first `ahead` bytes have already
    /// been sent, with the connect ([`net::connect_tcp_sending`]).
    pub fn request_as<'c>(
        &'c mut self,
        req: &'c PreparedRequest,
        last: bool,
        ahead: usize,
    ) -> impl std::future::Future<Output = Result<Response, Failure>> + use<'c, T> {
        let rest = req.bytes(last).get(ahead..).unwrap_or_default();
        self.exchange(rest, req.head, Discard)
    }

    /// Waits for the server to close after a response that said it would (`Connection:
    /// close`), discarding anything else it sends: the side that closes first keeps the
    /// TIME_WAIT, and a generator's ephemeral ports are the scarce ones. The caller bounds
    /// the wait.
    pub async fn closed_by_server(&mut self) {
        loop {
            self.buf.clear();
            // The end (a read of 0 bytes) or an error: closed either way.
            if self.fill().await.is_err() {
                break;
            }
        }
        give_buffer(std::mem::take(&mut self.buf));
    }

    /// Sends the bytes of one request and reads the whole response into `sink` (a
    /// [`Discard`], or `&mut` a [`Capture`]). An async block, not an `async fn`, whose future
    /// would hold its arguments twice.
    #[allow(clippy::manual_async_fn)] // the arguments held once: see above
    pub fn exchange<'c, S: Sink + 'c>(
        &'c mut self,
        request: &'c [u8],
        head_request: bool,
        mut sink: S,
    ) -> impl std::future::Future<Output = Result<Response, Failure>> + use<'c, S, T> {
        async move {
            self.buf.clear();
            self.stream
                .write_all(request)
                .await
                .map_err(|e| io_failure(&e, true))?;
            let mut received = 0u64;
            let final_head = loop {
                // Nothing is read yet after the write: no head to look for.
                let parsed = if self.buf.is_empty() {
                    None
                } else {
                    head::parse_framing(&self.buf, head_request)?
                };
                match parsed {
                    // An interim answer (100 Continue, 103 Early Hints) precedes the real one on
                    // the same connection: skip it, or the next request would read this one's
                    // answer. 101 would switch protocols, which no step asks for.
                    Some(Head { status: 101, .. }) => return Err(Failure(error_kind::PROTOCOL)),
                    Some(h) if (100..200).contains(&h.status) => {
                        self.buf.advance(h.len);
                        received += h.len as u64;
                        continue;
                    }
                    Some(h) => {
                        sink.status(h.status);
                        // The final head, parsed again into a keeping sink (capturing steps only).
                        if S::HEADERS {
                            head::parse(&self.buf, head_request, &mut sink)?;
                        }
                        break h;
                    }
                    None => {}
                }
                if self.buf.len() >= MAX_HEAD {
                    return Err(Failure(error_kind::PROTOCOL));
                }
                self.fill().await?;
            };
            let Head {
                status,
                keep_alive,
                body,
                len,
            } = final_head;
            received += len as u64;
            self.buf.advance(len);
            received += match body {
                Body::None => 0,
                Body::Length(n) => self.skip_exact(n, &mut sink).await?,
                Body::Chunked => Box::pin(self.skip_chunked(&mut sink)).await?,
                Body::UntilClose => Box::pin(self.skip_to_close(&mut sink)).await?,
            };
            // Anything past the response (a server that answers more than it was asked) is
            // dropped here, as the next request's `clear` did before.
            give_buffer(std::mem::take(&mut self.buf));
            Ok(Response {
                status,
                keep_alive: keep_alive && !matches!(body, Body::UntilClose),
                bytes_received: received,
            })
        }
    }

    /// Reads more of the response. A connection without a buffer takes one only when there is
    /// something to read: while the read is pending it gives it straight back (a pending read
    /// wrote nothing), so a connection waiting for its answer holds no buffer.
    async fn fill(&mut self) -> Result<usize, Failure> {
        let (stream, buf) = (&mut self.stream, &mut self.buf);
        let read = std::future::poll_fn(|cx| {
            let borrowed = buf.capacity() == 0;
            if borrowed {
                *buf = take_buffer();
            }
            if buf.capacity() - buf.len() < 512 {
                let grow = buf.capacity().clamp(INITIAL_BUF, READ_CHUNK);
                buf.reserve(grow);
            }
            let polled = tokio_util::io::poll_read_buf(std::pin::Pin::new(&mut *stream), cx, buf);
            if polled.is_pending() && borrowed {
                give_buffer(std::mem::take(buf));
            }
            polled
        })
        .await;
        match read {
            Ok(0) => Err(Failure(error_kind::RESET)),
            Ok(n) => Ok(n),
            Err(e) => Err(io_failure(&e, false)),
        }
    }

    /// Reads exactly `n` body bytes into `sink`.
    async fn skip_exact<S: Sink>(&mut self, n: u64, sink: &mut S) -> Result<u64, Failure> {
        let mut left = n;
        loop {
            let take = (self.buf.len() as u64).min(left);
            sink.body(&self.buf[..take as usize]);
            self.buf.advance(take as usize);
            left -= take;
            if left == 0 {
                return Ok(n);
            }
            self.buf.clear();
            self.fill().await?;
        }
    }

    async fn skip_to_close<S: Sink>(&mut self, sink: &mut S) -> Result<u64, Failure> {
        let mut total = self.buf.len() as u64;
        sink.body(&self.buf);
        loop {
            self.buf.clear();
            match self.stream.read_buf(&mut self.buf).await {
                Ok(0) => return Ok(total),
                Ok(n) => {
                    total += n as u64;
                    sink.body(&self.buf);
                }
                Err(e) => return Err(io_failure(&e, false)),
            }
        }
    }

    /// Reads a chunked body into `sink`, trailers included.
    async fn skip_chunked<S: Sink>(&mut self, sink: &mut S) -> Result<u64, Failure> {
        let mut total = 0u64;
        loop {
            // Chunk-size line.
            let line_end = loop {
                if let Some(pos) = self.buf.windows(2).position(|w| w == b"\r\n") {
                    break pos;
                }
                if self.buf.len() > 1024 {
                    return Err(Failure(error_kind::PROTOCOL));
                }
                self.fill().await?;
            };
            let size = {
                let line = &self.buf[..line_end];
                let hex_end = line.iter().position(|&b| b == b';').unwrap_or(line.len());
                let text = std::str::from_utf8(&line[..hex_end])
                    .map_err(|_| Failure(error_kind::PROTOCOL))?;
                u64::from_str_radix(text.trim(), 16).map_err(|_| Failure(error_kind::PROTOCOL))?
            };
            total += line_end as u64 + 2;
            self.buf.advance(line_end + 2);
            if size == 0 {
                // Trailers until an empty line.
                loop {
                    let end = loop {
                        if let Some(pos) = self.buf.windows(2).position(|w| w == b"\r\n") {
                            break pos;
                        }
                        if self.buf.len() > MAX_HEAD {
                            return Err(Failure(error_kind::PROTOCOL));
                        }
                        self.fill().await?;
                    };
                    self.buf.advance(end + 2);
                    total += end as u64 + 2;
                    if end == 0 {
                        return Ok(total);
                    }
                }
            }
            // 16 hex digits fit a u64 but not the CRLF after the data: a protocol error, not
            // an overflow.
            let with_crlf = size.checked_add(2).ok_or(Failure(error_kind::PROTOCOL))?;
            sink.chunk();
            if S::KEEP {
                total = total.saturating_add(self.skip_exact(size, sink).await?);
                total = total.saturating_add(self.skip_exact(2, &mut Discard).await?);
            } else {
                total = total.saturating_add(self.skip_exact(with_crlf, sink).await?);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_core::scenario::HttpRequest;
    use stampede_core::template::Template;
    use tokio::net::TcpListener;

    async fn serve_once(reply: &'static [u8]) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(reply).await;
            let _ = s.shutdown().await;
        });
        addr
    }

    fn get() -> PreparedRequest {
        let req = HttpRequest {
            path: Template::literal("/x"),
            ..Default::default()
        };
        PreparedRequest::new(&req, "h", "")
    }

    #[tokio::test]
    async fn reads_content_length_and_chunked_bodies() {
        let addr = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello").await;
        let mut c = Conn::connect(&addr, None).await.unwrap();
        let r = c.request(&get()).await.unwrap();
        assert_eq!((r.status, r.keep_alive), (200, true));

        let addr = serve_once(b"HTTP/1.1 404 NF\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n").await;
        let mut c = Conn::connect(&addr, None).await.unwrap();
        let r = c.request(&get()).await.unwrap();
        assert_eq!((r.status, r.keep_alive), (404, false));
    }

    /// A request that left with the connect is not written again: the server sees it once.
    #[tokio::test]
    async fn a_request_sent_with_the_connect_is_sent_once() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !seen.ends_with(b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0, "the request is complete");
                seen.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                .await
                .unwrap();
            // Anything else the client writes before it closes.
            while let Ok(n @ 1..) = s.read(&mut buf).await {
                seen.extend_from_slice(&buf[..n]);
            }
            seen
        });
        let req = get();
        let o = net::connect_tcp_sending(&addr, req.bytes(true))
            .await
            .unwrap();
        let ahead = o.sent;
        assert_eq!(ahead, req.bytes(true).len());
        let mut c: Conn = Conn::over(tokio_util::either::Either::Left(o.stream));
        let r = c.request_as(&req, true, ahead).await.unwrap();
        assert_eq!((r.status, r.keep_alive), (200, false));
        drop(c);
        assert_eq!(server.await.unwrap(), req.bytes(true));
    }

    #[test]
    fn the_closing_form_adds_one_connection_header() {
        let req = get();
        let written = std::str::from_utf8(req.bytes(false)).unwrap();
        let closing = std::str::from_utf8(req.bytes(true)).unwrap();
        assert_eq!(req.len(), written.len());
        assert!(!written.to_ascii_lowercase().contains("connection:"));
        assert_eq!(
            closing,
            written.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n")
        );
        let own = HttpRequest {
            method: "POST".into(),
            path: Template::literal("/x"),
            headers: [("Connection".to_string(), Template::literal("keep-alive"))].into(),
            body: Some(Template::literal("{}")),
            ..Default::default()
        };
        let own = PreparedRequest::new(&own, "h", "");
        assert_eq!(own.bytes(true), own.bytes(false));
        assert!(own.bytes(false).ends_with(b"\r\n\r\n{}"));
    }

    /// After a response that says `Connection: close`, the client waits for the server's FIN
    /// (the server closes first); a server that sends more is read to its end.
    #[tokio::test]
    async fn the_client_lets_the_server_close_first() {
        for reply in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nokand some more",
        ] {
            let addr = serve_once(reply).await;
            let mut c = Conn::connect(&addr, None).await.unwrap();
            let r = c.request_as(&get(), true, 0).await.unwrap();
            assert_eq!((r.status, r.keep_alive), (200, false));
            tokio::time::timeout(std::time::Duration::from_secs(5), c.closed_by_server())
                .await
                .unwrap();
        }
    }

    /// Once the reactor has seen the server's FIN, `closed_already` says so without a read;
    /// while the server keeps the connection open, it says no and does not wait.
    #[tokio::test]
    async fn a_fin_already_seen_needs_no_read() {
        let addr =
            serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                .await;
        let mut c = Conn::connect(&addr, None).await.unwrap();
        c.request_as(&get(), true, 0).await.unwrap();
        let tokio_util::either::Either::Left(tcp) = &c.stream else {
            panic!("plain TCP")
        };
        let ready = tcp.ready(tokio::io::Interest::READABLE).await.unwrap();
        // What the server sent is read; what is left to see is the end.
        assert!(ready.is_read_closed(), "{ready:?}");
        assert!(c.closed_already());

        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await;
            let _ = done_rx.await;
        });
        let mut c = Conn::connect(&addr, None).await.unwrap();
        c.request_as(&get(), false, 0).await.unwrap();
        assert!(!c.closed_already());
        drop(done_tx);
    }

    /// A connection holds a read buffer only while it reads: not while its request waits
    /// for an answer, nor between requests.
    #[tokio::test]
    async fn a_waiting_connection_holds_no_read_buffer() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (answer_tx, answer_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = answer_rx.await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await;
        });
        let mut c = Conn::connect(&addr, None).await.unwrap();
        assert_eq!(c.buf.capacity(), 0);
        let req = get();
        {
            let pending = c.request(&req);
            tokio::pin!(pending);
            // Polled once: the request is written and the read is pending.
            tokio::select! {
                biased;
                _ = &mut pending => panic!("answered before the server wrote"),
                _ = std::future::ready(()) => {}
            }
        }
        assert_eq!(c.buf.capacity(), 0);
        answer_tx.send(()).unwrap();
        // The first request was abandoned unanswered; the answer it gets is read whole.
        let r = c.request(&req).await.unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(c.buf.capacity(), 0);
    }

    #[tokio::test]
    async fn interim_answers_are_skipped() {
        let addr = serve_once(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
        )
        .await;
        let mut c = Conn::connect(&addr, None).await.unwrap();
        let r = c.request(&get()).await.unwrap();
        assert_eq!(r.status, 201);
        assert_eq!(r.bytes_received, 110);
        let addr = serve_once(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n").await;
        let mut c = Conn::connect(&addr, None).await.unwrap();
        assert_eq!(
            c.request(&get()).await.unwrap_err(),
            Failure(error_kind::PROTOCOL)
        );
    }

    #[tokio::test]
    async fn hostile_responses_are_protocol_errors_or_resets() {
        for reply in [
            &b"garbage\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffe\r\n",
        ] {
            let addr = serve_once(reply).await;
            let mut c = Conn::connect(&addr, None).await.unwrap();
            let e = c.request(&get()).await.unwrap_err();
            assert!(
                matches!(e.0, error_kind::PROTOCOL | error_kind::RESET),
                "{e:?}"
            );
        }
    }

    #[tokio::test]
    async fn refused_connect_is_classified() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        assert_eq!(
            Conn::connect(&addr, None).await.unwrap_err(),
            Failure(error_kind::CONNECT_REFUSED)
        );
    }
}
