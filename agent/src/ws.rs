//! The WebSocket driver: the upgrade written and read here, over the agent's own connection
//! (`net::connect_http`: source addresses, TLS, error kinds), then frames ([`frames`]:
//! client frames masked, pings answered as they are read, nothing buffered while idle). Each
//! operation is one step's exchange; the session times it from the step's intended send.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Poll};

use bytes::Bytes;
use stampede_core::stats::error_kind;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio_tungstenite::tungstenite::handshake::client::generate_key;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use crate::net::{self, io_failure, Failure};
use crate::tls::{Io, TlsClient};

mod frames;

use frames::{Kind, Taken};

/// Largest upgrade response head accepted.
const MAX_HEAD: usize = 16 * 1024;
/// Headers of an upgrade response read.
const MAX_HEADERS: usize = 64;

/// An open WebSocket, client side: the connection, and the bytes the server sent past the
/// last frame read (no allocation when there are none, as between a step's exchanges).
pub struct WsConn {
    io: Io,
    ahead: Vec<u8>,
    /// A close was sent (a step's `close`): the connection carries nothing more.
    closing: bool,
}

impl std::fmt::Debug for WsConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsConn").finish_non_exhaustive()
    }
}

/// What an upgrade brought back.
#[derive(Debug)]
pub struct Upgrade {
    /// The HTTP status of the answer (101 when upgraded).
    pub status: u16,
    /// The upgraded connection; `None` when the server answered anything but a valid 101.
    pub conn: Option<WsConn>,
    /// Bytes of the request written.
    pub sent: u64,
    /// Bytes of the answer's head read.
    pub received: u64,
}

/// A message received: its payload, and whether it was text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The message's bytes, its fragments joined.
    pub payload: Bytes,
    /// A text message (UTF-8) rather than a binary one.
    pub text: bool,
    /// Bytes on the wire, its frame header included.
    pub wire: u64,
}

/// Bytes read at once while no frame's length is known (into the stack, so nothing is held
/// while the connection waits); a frame known to be longer is read straight into its buffer.
const READ_CHUNK: usize = 4096;

/// Bytes of a frame of `len` payload bytes: its header (with the client's mask when
/// `masked`) and payload.
pub fn frame_bytes(len: usize, masked: bool) -> u64 {
    let ext = match len {
        0..=125 => 0,
        126..=65_535 => 2,
        _ => 8,
    };
    (2 + ext + if masked { 4 } else { 0 } + len) as u64
}

/// Writes the upgrade request: `GET target` with the upgrade headers, `headers` (rendered,
/// each `name: value\r\n`) and the end of the head.
pub fn upgrade_request(target: &[u8], authority: &str, key: &str, headers: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(160 + target.len() + headers.len());
    out.extend_from_slice(b"GET ");
    out.extend_from_slice(target);
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(authority.as_bytes());
    out.extend_from_slice(b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ");
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\r\nSec-WebSocket-Version: 13\r\n");
    out.extend_from_slice(headers);
    out.extend_from_slice(b"\r\n");
    out
}

/// A new `Sec-WebSocket-Key` (16 random bytes, base64).
pub fn new_key() -> String {
    generate_key()
}

/// What an upgrade answer's head says, checked against the key sent.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// The head is not complete yet.
    Partial,
    /// A valid `101` upgrade; the head's length.
    Upgraded {
        /// Bytes of the head; what follows is already WebSocket frames.
        len: usize,
    },
    /// Another status (the server refused the upgrade); the head's length.
    Refused {
        /// The status the server answered.
        status: u16,
        /// Bytes of the head.
        len: usize,
    },
}

/// Parses an upgrade answer's head from `buf` (never trusting its lengths: a head is bounded
/// by [`MAX_HEAD`] and [`MAX_HEADERS`]); a 101 without the right `Sec-WebSocket-Accept` or
/// `Upgrade: websocket` is a protocol error.
pub fn parse_answer(buf: &[u8], key: &str) -> Result<Answer, Failure> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Ok(Answer::Partial),
        _ => return Err(Failure(error_kind::PROTOCOL)),
    };
    let status = resp.code.unwrap_or(0);
    if status != 101 {
        return Ok(Answer::Refused { status, len });
    }
    let value = |name: &str| {
        resp.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let upgrade_ok = value("upgrade").is_some_and(|v| v.eq_ignore_ascii_case(b"websocket"));
    let accept_ok = value("sec-websocket-accept")
        .is_some_and(|v| v == derive_accept_key(key.as_bytes()).as_bytes());
    if !(upgrade_ok && accept_ok) {
        return Err(Failure(error_kind::PROTOCOL));
    }
    Ok(Answer::Upgraded { len })
}

/// Reads what has come (at most [`READ_CHUNK`] bytes) and appends it to `into`. The read
/// goes to the stack inside the poll, so a connection waiting for bytes (every one of a
/// run's connections at once while they upgrade, or while they wait for a message) holds no
/// buffer; only what came is kept.
fn read_some<'a>(
    io: &'a mut Io,
    into: &'a mut Vec<u8>,
) -> impl std::future::Future<Output = std::io::Result<usize>> + 'a {
    std::future::poll_fn(move |cx| {
        let mut chunk = [0u8; READ_CHUNK];
        let mut read = ReadBuf::new(&mut chunk);
        ready!(Pin::new(&mut *io).poll_read(cx, &mut read))?;
        into.extend_from_slice(read.filled());
        Poll::Ready(Ok(read.filled().len()))
    })
}

impl WsConn {
    /// Connects to `addr` (over TLS when `tls`), sends `request` (from [`upgrade_request`]
    /// with `key`) and reads the answer. Bytes after the head (frames the server sent at
    /// once) go to the WebSocket.
    pub async fn connect(
        addr: &SocketAddr,
        tls: Option<&TlsClient>,
        request: &[u8],
        key: &str,
    ) -> Result<Upgrade, Failure> {
        let io = net::connect_http(addr, tls).await?;
        Self::upgrade(io, request, key).await
    }

    /// The upgrade over an open connection.
    pub async fn upgrade(mut io: Io, request: &[u8], key: &str) -> Result<Upgrade, Failure> {
        io.write_all(request)
            .await
            .map_err(|e| io_failure(&e, true))?;
        let mut buf = Vec::new();
        loop {
            match parse_answer(&buf, key)? {
                Answer::Partial => {}
                Answer::Refused { status, len } => {
                    return Ok(Upgrade {
                        status,
                        conn: None,
                        sent: request.len() as u64,
                        received: len as u64,
                    })
                }
                Answer::Upgraded { len } => {
                    let ahead = buf.split_off(len);
                    return Ok(Upgrade {
                        status: 101,
                        conn: Some(Self {
                            io,
                            ahead,
                            closing: false,
                        }),
                        sent: request.len() as u64,
                        received: len as u64,
                    });
                }
            }
            let n = read_some(&mut io, &mut buf)
                .await
                .map_err(|e| io_failure(&e, false))?;
            if n == 0 {
                return Err(Failure(error_kind::RESET));
            }
        }
    }

    /// Writes one frame of `kind` with `payload`, masked. Bytes on the wire.
    async fn write(&mut self, kind: Kind, payload: &[u8]) -> Result<u64, Failure> {
        let frame = frames::encode(kind, payload, rand::random());
        self.io
            .write_all(&frame)
            .await
            .map_err(|e| io_failure(&e, true))?;
        Ok(frame.len() as u64)
    }

    /// Sends one message: text when `text`, else binary. Bytes on the wire.
    pub async fn send(&mut self, payload: Vec<u8>, text: bool) -> Result<u64, Failure> {
        if self.closing {
            return Err(Failure(error_kind::WS_CLOSED));
        }
        if text && std::str::from_utf8(&payload).is_err() {
            return Err(Failure(error_kind::TEMPLATE));
        }
        let kind = if text { Kind::Text } else { Kind::Binary };
        self.write(kind, &payload).await
    }

    /// Reads until one whole frame is buffered, and takes it. While no frame's length is
    /// known the read goes to the stack and only what came is kept; a longer frame is read
    /// straight into its place. The connection's end is `ws_closed`.
    async fn frame(&mut self) -> Result<frames::Frame, Failure> {
        loop {
            let need = match frames::take(&mut self.ahead, stampede_core::ws::MAX_MESSAGE)? {
                Taken::Frame(f) => return Ok(f),
                Taken::Need(n) => n,
            };
            let n = if need > READ_CHUNK {
                self.ahead.reserve_exact(need);
                self.io.read_buf(&mut self.ahead).await
            } else {
                read_some(&mut self.io, &mut self.ahead).await
            }
            .map_err(|e| io_failure(&e, false))?;
            if n == 0 {
                return Err(Failure(error_kind::WS_CLOSED));
            }
        }
    }

    /// The next frame that is not a ping: a ping is answered with a pong carrying its
    /// payload as soon as it is read. A close from the server is answered (unless this side
    /// closed first) and is `ws_closed`. Bytes of the pings read are added to `received`.
    async fn next_frame(&mut self, received: &mut u64) -> Result<frames::Frame, Failure> {
        loop {
            let f = self.frame().await?;
            match f.kind {
                Kind::Ping => {
                    *received += f.wire;
                    self.write(Kind::Pong, &f.payload).await?;
                }
                Kind::Close => {
                    if !self.closing {
                        self.closing = true;
                        let code = f.payload.get(..2).unwrap_or_default().to_vec();
                        let _ = self.write(Kind::Close, &code).await;
                    }
                    return Err(Failure(error_kind::WS_CLOSED));
                }
                _ => return Ok(f),
            }
        }
    }

    /// The next text or binary message, its fragments joined (pings are answered, pongs
    /// skipped, on the way). A close from the server, or the connection's end, is
    /// `ws_closed`; a message longer than the frame limit, fragments out of order, or text
    /// that is not UTF-8 is a protocol error.
    pub async fn receive(&mut self) -> Result<Received, Failure> {
        let protocol = Failure(error_kind::PROTOCOL);
        let mut wire = 0;
        let mut message: Option<(bool, Vec<u8>)> = None;
        loop {
            let f = self.next_frame(&mut wire).await?;
            wire += f.wire;
            match (f.kind, &mut message) {
                (Kind::Pong, _) => continue,
                (Kind::Text | Kind::Binary, None) => {
                    message = Some((f.kind == Kind::Text, f.payload))
                }
                (Kind::Continue, Some((_, joined))) => {
                    if joined.len() + f.payload.len() > stampede_core::ws::MAX_MESSAGE {
                        return Err(protocol);
                    }
                    joined.extend_from_slice(&f.payload);
                }
                _ => return Err(protocol),
            }
            if f.fin {
                let Some((text, payload)) = message else {
                    return Err(protocol);
                };
                if text && std::str::from_utf8(&payload).is_err() {
                    return Err(protocol);
                }
                return Ok(Received {
                    payload: Bytes::from(payload),
                    text,
                    wire,
                });
            }
        }
    }

    /// Sends a ping and waits for its pong (messages that come first are read and dropped:
    /// a step that pings measures the round trip, not a feed). Bytes sent and received.
    pub async fn ping(&mut self, payload: &[u8]) -> Result<(u64, u64), Failure> {
        if self.closing {
            return Err(Failure(error_kind::WS_CLOSED));
        }
        let sent = self.write(Kind::Ping, payload).await?;
        let mut received = 0;
        loop {
            let f = self.next_frame(&mut received).await?;
            received += f.wire;
            if f.kind == Kind::Pong && f.payload == payload {
                return Ok((sent, received));
            }
        }
    }

    /// The close handshake: sends a close with `code` and `reason`, then reads until the
    /// server's close (or its end of the connection). Bytes sent.
    pub async fn close(&mut self, code: u16, reason: &str) -> Result<u64, Failure> {
        if self.closing {
            return Err(Failure(error_kind::WS_CLOSED));
        }
        self.closing = true;
        let mut payload = code.to_be_bytes().to_vec();
        payload.extend_from_slice(reason.as_bytes());
        let sent = match self.write(Kind::Close, &payload).await {
            Ok(n) => n,
            // The server closed first: the close is done.
            Err(Failure(error_kind::RESET)) => return Ok(frame_bytes(payload.len(), true)),
            Err(e) => return Err(e),
        };
        let mut ignored = 0;
        loop {
            match self.next_frame(&mut ignored).await {
                Ok(_) => {}
                Err(Failure(error_kind::WS_CLOSED | error_kind::RESET)) => return Ok(sent),
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::{SinkExt, StreamExt};
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn frame_sizes_follow_the_length_forms() {
        assert_eq!(frame_bytes(0, true), 6);
        assert_eq!(frame_bytes(125, false), 127);
        assert_eq!(frame_bytes(126, false), 130);
        assert_eq!(frame_bytes(65_536, true), 65_536 + 14);
    }

    #[test]
    fn an_upgrade_answer_is_checked_against_the_key() {
        let key = "dGhlIHNhbXBsZSBub25jZQ==";
        let good =
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                     Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n\x81\x02hi";
        assert_eq!(
            parse_answer(good, key).unwrap(),
            Answer::Upgraded {
                len: good.len() - 4
            }
        );
        let wrong = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                      Sec-WebSocket-Accept: AAAA\r\n\r\n";
        assert_eq!(parse_answer(wrong, key), Err(Failure(error_kind::PROTOCOL)));
        let refused = b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(
            parse_answer(refused, key).unwrap(),
            Answer::Refused {
                status: 403,
                len: refused.len()
            }
        );
        assert_eq!(
            parse_answer(b"HTTP/1.1 101 Swi", key).unwrap(),
            Answer::Partial
        );
    }

    proptest! {
        /// No answer, however hostile or cut, panics; a head longer than the bound is an
        /// error, never a wait for more.
        #[test]
        fn hostile_answers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = parse_answer(&bytes, "k");
        }

        #[test]
        fn an_endless_head_is_refused(n in MAX_HEAD..MAX_HEAD + 64) {
            let mut head = b"HTTP/1.1 101 OK\r\n".to_vec();
            while head.len() < n {
                head.extend_from_slice(b"x-pad: y\r\n");
            }
            prop_assert!(!matches!(parse_answer(&head, "k"), Ok(Answer::Partial)));
        }
    }

    /// A whole exchange against a real server of the tungstenite's own: upgrade, echo, ping,
    /// close.
    #[tokio::test]
    async fn upgrade_echo_ping_and_close_against_a_real_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
            while let Some(Ok(m)) = ws.next().await {
                if m.is_text() || m.is_binary() {
                    ws.send(m).await.unwrap();
                }
            }
        });
        let key = new_key();
        let req = upgrade_request(b"/echo", &addr.to_string(), &key, b"x-id: 7\r\n");
        let up = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            WsConn::connect(&addr, None, &req, &key),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(up.status, 101);
        let mut c = up.conn.unwrap();
        assert_eq!(c.send(b"hello".to_vec(), true).await.unwrap(), 11);
        let r = c.receive().await.unwrap();
        assert_eq!((&r.payload[..], r.text, r.wire), (&b"hello"[..], true, 7));
        c.send(vec![0, 255], false).await.unwrap();
        assert!(!c.receive().await.unwrap().text);
        c.ping(b"p").await.unwrap();
        c.close(1000, "bye").await.unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), server)
            .await
            .unwrap()
            .unwrap();
    }

    /// A server of raw frames: a text message in two fragments with a ping between them, a
    /// binary message longer than a read, then a close. The client joins the fragments,
    /// answers the ping with a masked pong of its payload, reads the long frame whole, and
    /// answers the close.
    #[tokio::test]
    async fn fragments_pings_long_frames_and_a_server_close() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let mut b = [0u8; 1];
                tcp.read_exact(&mut b).await.unwrap();
                head.push(b[0]);
            }
            let head = String::from_utf8(head).unwrap();
            let key = head
                .lines()
                .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
                .unwrap();
            let accept = derive_accept_key(key.trim().as_bytes());
            let mut out = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                 Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
            )
            .into_bytes();
            out.extend_from_slice(&[0x01, 3, b'h', b'e', b'l']);
            out.extend_from_slice(&[0x89, 2, b'p', b'!']);
            out.extend_from_slice(&[0x80, 2, b'l', b'o']);
            out.extend_from_slice(&[0x82, 127]);
            out.extend_from_slice(&(100_000u64).to_be_bytes());
            out.extend(std::iter::repeat_n(9u8, 100_000));
            out.extend_from_slice(&[0x88, 2, 0x03, 0xe8]);
            tcp.write_all(&out).await.unwrap();
            // The pong, masked, then the close's answer.
            let mut pong = [0u8; 8];
            tcp.read_exact(&mut pong).await.unwrap();
            let mut close = [0u8; 8];
            tcp.read_exact(&mut close).await.unwrap();
            (pong, close)
        });
        let key = new_key();
        let req = upgrade_request(b"/", &addr.to_string(), &key, b"");
        let mut c = WsConn::connect(&addr, None, &req, &key)
            .await
            .unwrap()
            .conn
            .unwrap();
        let r = c.receive().await.unwrap();
        assert_eq!((&r.payload[..], r.text), (&b"hello"[..], true));
        // Both fragments and the ping between them.
        assert_eq!(r.wire, 5 + 4 + 4);
        let r = c.receive().await.unwrap();
        assert_eq!((r.payload.len(), r.text, r.wire), (100_000, false, 100_010));
        assert!(r.payload.iter().all(|&b| b == 9));
        assert_eq!(c.receive().await, Err(Failure(error_kind::WS_CLOSED)));
        assert!(
            c.ahead.capacity() == 0,
            "nothing is held after the last frame"
        );
        let (pong, close) = server.await.unwrap();
        assert_eq!(&pong[..2], &[0x8A, 0x82]);
        let clear: Vec<u8> = (0..2).map(|i| pong[6 + i] ^ pong[2 + i]).collect();
        assert_eq!(clear, b"p!");
        assert_eq!(&close[..2], &[0x88, 0x82]);
        let code: Vec<u8> = (0..2).map(|i| close[6 + i] ^ close[2 + i]).collect();
        assert_eq!(code, [0x03, 0xe8]);
        // A closed connection carries nothing more.
        assert_eq!(
            c.send(b"x".to_vec(), true).await,
            Err(Failure(error_kind::WS_CLOSED))
        );
    }
}
