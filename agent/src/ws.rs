//! The WebSocket driver: the upgrade written and read here, over the agent's own connection
//! (`net::connect_http`: source addresses, TLS, error kinds), then tungstenite's framing
//! (client frames masked, control frames answered as they are read). Each operation is one
//! step's exchange; the session times it from the step's intended send.

use std::net::SocketAddr;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use stampede_core::stats::error_kind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::handshake::client::generate_key;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use crate::net::{self, io_failure, Failure};
use crate::tls::{Io, TlsClient};

/// Largest upgrade response head accepted.
const MAX_HEAD: usize = 16 * 1024;
/// Headers of an upgrade response read.
const MAX_HEADERS: usize = 64;

/// An open WebSocket, client side.
pub struct WsConn {
    ws: WebSocketStream<Io>,
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

/// The frame limits: a message the scenario may send or expect, with a small read buffer
/// and writes flushed as they are made. The read buffer stays allocated while a connection
/// idles, and held connections are what WebSocket loads have most of: at 4 KiB it was half
/// of an agent's memory per held connection. A larger message reserves its whole length
/// and is read in reads of this size.
fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(0)
        .max_message_size(Some(stampede_core::ws::MAX_MESSAGE))
        .max_frame_size(Some(stampede_core::ws::MAX_MESSAGE))
}

/// A connection's read buffer (see [`config`]).
const READ_BUFFER: usize = 1024;

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

fn ws_failure(e: &WsError) -> Failure {
    match e {
        WsError::ConnectionClosed | WsError::AlreadyClosed => Failure(error_kind::WS_CLOSED),
        WsError::Io(io) => io_failure(io, false),
        WsError::Tls(_) => Failure(error_kind::TLS),
        _ => Failure(error_kind::PROTOCOL),
    }
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
        let mut buf = Vec::with_capacity(512);
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
                    let rest = buf.split_off(len);
                    let ws = WebSocketStream::from_partially_read(
                        io,
                        rest,
                        Role::Client,
                        Some(config()),
                    )
                    .await;
                    return Ok(Upgrade {
                        status: 101,
                        conn: Some(Self { ws }),
                        sent: request.len() as u64,
                        received: len as u64,
                    });
                }
            }
            let mut chunk = [0u8; 2048];
            let n = io
                .read(&mut chunk)
                .await
                .map_err(|e| io_failure(&e, false))?;
            if n == 0 {
                return Err(Failure(error_kind::RESET));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends one message: text when `text`, else binary. Bytes on the wire.
    pub async fn send(&mut self, payload: Vec<u8>, text: bool) -> Result<u64, Failure> {
        let wire = frame_bytes(payload.len(), true);
        let msg = if text {
            let s = String::from_utf8(payload).map_err(|_| Failure(error_kind::TEMPLATE))?;
            Message::text(s)
        } else {
            Message::binary(payload)
        };
        self.ws.send(msg).await.map_err(|e| ws_failure(&e))?;
        Ok(wire)
    }

    /// The next message of any kind; the connection's end is `ws_closed`.
    async fn next_message(&mut self) -> Result<Message, Failure> {
        self.ws
            .next()
            .await
            .ok_or(Failure(error_kind::WS_CLOSED))?
            .map_err(|e| ws_failure(&e))
    }

    /// The next text or binary message (pings are answered, pongs skipped, on the way). A
    /// close from the server, or the connection's end, is `ws_closed`.
    pub async fn receive(&mut self) -> Result<Received, Failure> {
        loop {
            let m = self.next_message().await?;
            match m {
                Message::Text(t) => {
                    let payload = Bytes::from(t);
                    let wire = frame_bytes(payload.len(), false);
                    return Ok(Received {
                        payload,
                        text: true,
                        wire,
                    });
                }
                Message::Binary(payload) => {
                    let wire = frame_bytes(payload.len(), false);
                    return Ok(Received {
                        payload,
                        text: false,
                        wire,
                    });
                }
                Message::Close(_) => return Err(Failure(error_kind::WS_CLOSED)),
                // A ping's pong is queued by tungstenite as it reads; sent with the next
                // write or flush.
                Message::Ping(_) => {
                    self.ws.flush().await.map_err(|e| ws_failure(&e))?;
                }
                Message::Pong(_) | Message::Frame(_) => {}
            }
        }
    }

    /// Sends a ping and waits for its pong (messages that come first are read and dropped:
    /// a step that pings measures the round trip, not a feed). Bytes sent and received.
    pub async fn ping(&mut self, payload: &[u8]) -> Result<(u64, u64), Failure> {
        let sent = frame_bytes(payload.len(), true);
        self.ws
            .send(Message::Ping(Bytes::copy_from_slice(payload)))
            .await
            .map_err(|e| ws_failure(&e))?;
        let mut received = 0;
        loop {
            let m = self.next_message().await?;
            match m {
                Message::Pong(p) if p.as_ref() == payload => {
                    return Ok((sent, received + frame_bytes(p.len(), false)))
                }
                Message::Close(_) => return Err(Failure(error_kind::WS_CLOSED)),
                Message::Text(t) => received += frame_bytes(t.len(), false),
                Message::Binary(b) | Message::Ping(b) | Message::Pong(b) => {
                    received += frame_bytes(b.len(), false)
                }
                Message::Frame(_) => {}
            }
        }
    }

    /// The close handshake: sends a close with `code` and `reason`, then reads until the
    /// server's close (or its end of the connection). Bytes sent.
    pub async fn close(&mut self, code: u16, reason: &str) -> Result<u64, Failure> {
        let sent = frame_bytes(2 + reason.len(), true);
        let frame = CloseFrame {
            code: CloseCode::from(code),
            reason: reason.to_string().into(),
        };
        match self.ws.close(Some(frame)).await {
            Ok(()) | Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => {}
            Err(e) => return Err(ws_failure(&e)),
        }
        loop {
            match self.ws.next().await {
                None | Some(Err(WsError::ConnectionClosed | WsError::AlreadyClosed)) => {
                    return Ok(sent)
                }
                Some(Err(e)) => return Err(ws_failure(&e)),
                Some(Ok(_)) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
}
