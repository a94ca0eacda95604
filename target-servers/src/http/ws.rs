//! The HTTP target's WebSocket routes: `GET /ws` echoes every text or binary message back to
//! its sender; `GET /ws/broadcast` sends every message to every client connected to that route
//! (the sender included), as a chat or a price feed fans out.
//!
//! The upgrade is answered on the HTTP/1.1 connection by hyper; the frames are tungstenite's. A
//! held WebSocket keeps its connection's admission slot, so `connections_open` and the
//! connection cap count it, and a drain closes it with `1001 going away`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, UPGRADE};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::sync::broadcast;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::body::Body;
use crate::common::{ConnGuard, Phase, PhaseWatch};

/// Messages a broadcast client may fall behind by before it misses some (and is closed: a
/// feed that skips messages would make its client's checks lie).
const BROADCAST_BACKLOG: usize = 1024;

/// The connection's admission slot, handed from the HTTP connection task to the WebSocket
/// task that outlives it.
pub(super) type Slot = Arc<Mutex<Option<ConnGuard>>>;

/// Which WebSocket route a request asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WsRoute {
    Echo,
    Broadcast,
}

/// What the WebSocket routes share: the broadcast channel and the counters.
pub(super) struct WsState {
    feed: broadcast::Sender<Message>,
    open: AtomicU64,
    received: AtomicU64,
    sent: AtomicU64,
    max_message: usize,
}

/// Counters of the WebSocket routes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WsStats {
    /// WebSocket connections open now.
    pub open: u64,
    /// Text and binary messages received from clients.
    pub received: u64,
    /// Text and binary messages sent to clients (echoes and broadcast copies).
    pub sent: u64,
}

impl WsState {
    pub(super) fn new(max_message: u64) -> Self {
        Self {
            feed: broadcast::channel(BROADCAST_BACKLOG).0,
            open: AtomicU64::new(0),
            received: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            max_message: usize::try_from(max_message).unwrap_or(usize::MAX),
        }
    }

    pub(super) fn stats(&self) -> WsStats {
        WsStats {
            open: self.open.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            sent: self.sent.load(Ordering::Relaxed),
        }
    }
}

/// Answers an upgrade request with `101 Switching Protocols` and spawns the WebSocket task;
/// a request that is not a WebSocket upgrade gets `400` (`426` without the upgrade header).
pub(super) fn upgrade(
    state: &Arc<WsState>,
    route: WsRoute,
    mut req: Request<Incoming>,
    slot: &Slot,
    phase: PhaseWatch,
) -> Response<Body> {
    let asks = req
        .headers()
        .get(UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !asks {
        return status(StatusCode::UPGRADE_REQUIRED);
    }
    let Some(key) = req.headers().get(SEC_WEBSOCKET_KEY).cloned() else {
        return status(StatusCode::BAD_REQUEST);
    };
    if req.version() != hyper::Version::HTTP_11 {
        return status(StatusCode::BAD_REQUEST);
    }
    let guard = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
    let state = Arc::clone(state);
    let upgrading = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        // Held until the WebSocket ends: the connection stays counted and admitted.
        let _guard = guard;
        let Ok(upgraded) = upgrading.await else {
            return;
        };
        let config = WebSocketConfig::default()
            .read_buffer_size(16 * 1024)
            .write_buffer_size(0)
            .max_message_size(Some(state.max_message))
            .max_frame_size(Some(state.max_message));
        let ws =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config))
                .await;
        state.open.fetch_add(1, Ordering::Relaxed);
        serve(&state, route, ws, phase).await;
        state.open.fetch_sub(1, Ordering::Relaxed);
    });
    let mut resp = Response::new(Body::full(bytes::Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    if let Ok(accept) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
        h.insert(SEC_WEBSOCKET_ACCEPT, accept);
    }
    resp
}

fn status(code: StatusCode) -> Response<Body> {
    let mut resp = Response::new(Body::full(bytes::Bytes::new()));
    *resp.status_mut() = code;
    resp
}

/// One WebSocket until the client closes it, it fails, or the server drains.
async fn serve<S>(state: &WsState, route: WsRoute, ws: WebSocketStream<S>, mut phase: PhaseWatch)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut tx, mut rx) = ws.split();
    let mut feed = (route == WsRoute::Broadcast).then(|| state.feed.subscribe());
    loop {
        let next_fed = async {
            match feed.as_mut() {
                Some(f) => f.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = phase.reached(Phase::Draining) => {
                let bye = CloseFrame { code: CloseCode::Away, reason: "draining".into() };
                let _ = tx.send(Message::Close(Some(bye))).await;
                return;
            }
            fed = next_fed => match fed {
                Ok(m) => {
                    if tx.send(m).await.is_err() {
                        return;
                    }
                    state.sent.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {
                    let behind = CloseFrame { code: CloseCode::Again, reason: "fell behind".into() };
                    let _ = tx.send(Message::Close(Some(behind))).await;
                    return;
                }
            },
            got = rx.next() => match got {
                Some(Ok(m @ (Message::Text(_) | Message::Binary(_)))) => {
                    state.received.fetch_add(1, Ordering::Relaxed);
                    match route {
                        WsRoute::Echo => {
                            if tx.send(m).await.is_err() {
                                return;
                            }
                            state.sent.fetch_add(1, Ordering::Relaxed);
                        }
                        // Every subscriber (this one too) sends its copy from its own task.
                        WsRoute::Broadcast => {
                            let _ = state.feed.send(m);
                        }
                    }
                }
                // Pings are answered and closes acknowledged by tungstenite as it reads; a
                // flush sends them.
                Some(Ok(_)) => {
                    if tx.flush().await.is_err() {
                        return;
                    }
                }
                Some(Err(_)) | None => return,
            },
        }
    }
}
