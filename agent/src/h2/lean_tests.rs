//! The lean client against a real HTTP/2 server (the `h2` crate's, on loopback) and against
//! a socket that writes what no server should.

use std::net::SocketAddr;

use bytes::Bytes;
use stampede_core::scenario::HttpRequest;
use stampede_core::stats::error_kind;
use stampede_core::template::Template;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{H2Client, H2Conn, H2Request};

/// An h2c server answering by path: `/bytes/N` with N bytes, `/len` with the length of the
/// request body it read, `/refuse` with RST_STREAM(REFUSED_STREAM), `/hold` never (it sends
/// `None` on `held` when the request is there, then the reset's error code it sees), `/bye`
/// with a GOAWAY after its answer.
async fn server(
    held: Option<tokio::sync::mpsc::UnboundedSender<Option<h2::Reason>>>,
) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let held = held.clone();
            tokio::spawn(async move {
                tcp.set_nodelay(true).unwrap();
                let mut conn = h2::server::handshake(tcp).await.unwrap();
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    let path = req.uri().path().to_string();
                    if path == "/bye" {
                        let _ = respond.send_response(http::Response::new(()), true);
                        conn.graceful_shutdown();
                        continue;
                    }
                    let held = held.clone();
                    tokio::spawn(async move {
                        let mut body = req.into_body();
                        let mut len = 0usize;
                        while let Some(Ok(chunk)) = body.data().await {
                            len += chunk.len();
                            let _ = body.flow_control().release_capacity(chunk.len());
                        }
                        let answer = match path.as_str() {
                            "/refuse" => return respond.send_reset(h2::Reason::REFUSED_STREAM),
                            "/hold" => {
                                let _ = held.as_ref().unwrap().send(None);
                                let reset = std::future::poll_fn(|cx| respond.poll_reset(cx)).await;
                                let _ = held.unwrap().send(reset.ok());
                                return;
                            }
                            "/len" => Bytes::from(len.to_string()),
                            p => {
                                let n: usize = p.trim_start_matches("/bytes/").parse().unwrap_or(0);
                                Bytes::from(vec![b'x'; n])
                            }
                        };
                        let head = http::Response::builder().status(201).body(()).unwrap();
                        let mut send = respond.send_response(head, answer.is_empty()).unwrap();
                        // In frames the size of the window the client gives: the client's
                        // WINDOW_UPDATEs are what let a large answer through.
                        let mut rest = answer;
                        while !rest.is_empty() {
                            send.reserve_capacity(rest.len());
                            let Some(Ok(room)) =
                                std::future::poll_fn(|cx| send.poll_capacity(cx)).await
                            else {
                                return;
                            };
                            let part = rest.split_to(room.min(rest.len()));
                            send.send_data(part, rest.is_empty()).unwrap();
                        }
                    });
                }
            });
        }
    });
    addr
}

fn get(path: &str, addr: SocketAddr) -> H2Request {
    let req = HttpRequest {
        path: Template::literal(path),
        ..Default::default()
    };
    H2Request::new(&req, false, &addr.to_string(), "").unwrap()
}

fn post(path: &str, body: &str, addr: SocketAddr) -> H2Request {
    let req = HttpRequest {
        method: "POST".into(),
        path: Template::literal(path),
        body: Some(Template::literal(body)),
        ..Default::default()
    };
    H2Request::new(&req, false, &addr.to_string(), "").unwrap()
}

#[tokio::test]
async fn answers_on_many_streams_of_one_connection_are_counted_whole() {
    let addr = server(None).await;
    let conn = H2Conn::connect_with(addr, None, H2Client::Lean)
        .await
        .unwrap();
    // 40 streams at once, answers of 0 to 39,000 bytes.
    let calls = (0..40).map(|i| {
        let mut c = conn.clone();
        async move {
            let r = c
                .request(&get(&format!("/bytes/{}", i * 1000), addr))
                .await
                .unwrap();
            (r.status, r.bytes_received, i * 1000)
        }
    });
    for (status, got, want) in futures::future::join_all(calls).await {
        assert_eq!((status, got), (201, want as u64));
    }
    // An answer past the stream's window (16 MiB) and past the server's frame size: it
    // arrives only if the client gives the window back as it reads.
    let mut c = conn.clone();
    let big = c.request(&get("/bytes/20000000", addr)).await.unwrap();
    assert_eq!(big.bytes_received, 20_000_000);
    // A request body past the server's initial window (65,535 bytes) leaves as the server's
    // WINDOW_UPDATEs allow.
    let body = "y".repeat(300_000);
    let r = c.request(&post("/len", &body, addr)).await.unwrap();
    assert_eq!((r.status, r.bytes_received), (201, 6));
    assert!(!conn.is_closed());
}

#[tokio::test]
async fn a_refused_stream_fails_as_reset_and_the_connection_carries_on() {
    let addr = server(None).await;
    let mut conn = H2Conn::connect_with(addr, None, H2Client::Lean)
        .await
        .unwrap();
    let e = conn.request(&get("/refuse", addr)).await.unwrap_err();
    assert_eq!(e.0, error_kind::RESET);
    let r = conn.request(&get("/bytes/3", addr)).await.unwrap();
    assert_eq!((r.status, r.bytes_received), (201, 3));
}

#[tokio::test]
async fn after_a_goaway_the_connection_is_closed_and_starts_no_stream() {
    let addr = server(None).await;
    let mut conn = H2Conn::connect_with(addr, None, H2Client::Lean)
        .await
        .unwrap();
    let r = conn.request(&get("/bye", addr)).await.unwrap();
    assert_eq!(r.status, 200);
    // The GOAWAY follows the answer; the driver (on this thread) sees it, or the end of
    // the connection, as soon as the socket has it.
    let mut turns = 0u32;
    while !conn.is_closed() {
        assert!(turns < 1_000_000, "no GOAWAY seen");
        tokio::task::yield_now().await;
        turns += 1;
    }
    let e = conn.request(&get("/bytes/1", addr)).await.unwrap_err();
    assert_eq!(e.0, error_kind::RESET);
}

#[tokio::test]
async fn a_request_given_up_resets_its_stream_and_the_next_one_is_answered() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let addr = server(Some(tx)).await;
    let mut conn = H2Conn::connect_with(addr, None, H2Client::Lean)
        .await
        .unwrap();
    let hold = get("/hold", addr);
    {
        let mut call = Box::pin(conn.request(&hold));
        // Sent, not answered: dropped once the server has it, as a timeout or a stop drops
        // it.
        assert!(futures::poll!(call.as_mut()).is_pending());
        assert_eq!(rx.recv().await.unwrap(), None);
        assert!(futures::poll!(call.as_mut()).is_pending());
    }
    assert_eq!(rx.recv().await.unwrap(), Some(h2::Reason::CANCEL));
    let r = conn.request(&get("/bytes/2", addr)).await.unwrap();
    assert_eq!((r.status, r.bytes_received), (201, 2));
}

/// A peer that takes the preface and then writes `bytes`.
async fn raw_peer(bytes: Vec<u8>) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut preface = [0u8; 24];
        s.read_exact(&mut preface).await.unwrap();
        s.write_all(&bytes).await.unwrap();
        // Held open: only the client may end it.
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink).await;
    });
    addr
}

#[tokio::test]
async fn a_frame_longer_than_allowed_or_a_bad_header_block_ends_the_connection() {
    let empty_settings = [0, 0, 0, 4, 0, 0, 0, 0, 0];
    // A 16 MiB DATA frame announced: refused from its header, nothing waited for.
    let mut long = empty_settings.to_vec();
    long.extend_from_slice(&[0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 1]);
    // A HEADERS frame for stream 1 whose block indexes past both tables.
    let mut bad_block = empty_settings.to_vec();
    bad_block.extend_from_slice(&[0, 0, 1, 1, 0x5, 0, 0, 0, 1, 0xff]);
    // A PING of 7 bytes.
    let mut short_ping = empty_settings.to_vec();
    short_ping.extend_from_slice(&[0, 0, 7, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7]);
    for bytes in [long, bad_block, short_ping] {
        let addr = raw_peer(bytes).await;
        let mut conn = H2Conn::connect_with(addr, None, H2Client::Lean)
            .await
            .unwrap();
        let e = conn.request(&get("/", addr)).await.unwrap_err();
        assert_eq!(e.0, error_kind::PROTOCOL);
        assert!(conn.is_closed());
    }
}
