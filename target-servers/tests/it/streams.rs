//! The HTTP target's streamed replies (`/sse`, `/chunks`) and WebSocket routes (`/ws`,
//! `/ws/broadcast`) over real loopback sockets.

use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use stampede_target_servers::http::HttpConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use crate::support::*;

/// Sends a GET and returns each read's arrival time (since the request) and bytes, until the
/// server closes.
async fn timed_reads(addr: std::net::SocketAddr, path: &str) -> Vec<(Duration, Vec<u8>)> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n");
    let t0 = Instant::now();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = s.read(&mut buf).await.unwrap();
        if n == 0 {
            return out;
        }
        out.push((t0.elapsed(), buf[..n].to_vec()));
    }
}

/// Events leave on the server's schedule (the first at once, then a gap apart), each in its
/// own chunk of a `text/event-stream` reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_sends_its_events_a_gap_apart() {
    bounded(async {
        let (_server, addr, running) = start_http(HttpConfig::default()).await;
        let reads = timed_reads(addr, "/sse?events=4&gap_ms=60").await;
        let all: Vec<u8> = reads.iter().flat_map(|(_, b)| b.clone()).collect();
        let text = String::from_utf8(all).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(
            text.contains("content-type: text/event-stream\r\n"),
            "{text}"
        );
        assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
        for i in 0..4 {
            assert!(
                text.contains(&format!("id: {i}\ndata: event-{i}\n\n")),
                "{text}"
            );
        }
        assert!(text.ends_with("0\r\n\r\n"), "{text}");
        // The last event leaves 3 gaps after the first: at least 180 ms, on any machine.
        let event_reads: Vec<Duration> = reads
            .iter()
            .filter(|(_, b)| b.windows(6).any(|w| w == b"data: "))
            .map(|(t, _)| *t)
            .collect();
        let last = *event_reads.last().unwrap();
        assert!(last >= Duration::from_millis(180), "{event_reads:?}");
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_come_in_the_asked_number_and_size() {
    bounded(async {
        let (_server, addr, running) = start_http(HttpConfig::default()).await;
        let reads = timed_reads(addr, "/chunks?n=3&gap_ms=0&size=10").await;
        let all: Vec<u8> = reads.iter().flat_map(|(_, b)| b.clone()).collect();
        let text = String::from_utf8(all).unwrap();
        // Each chunk is its own `a` (10 bytes) chunk of the chunked coding.
        assert_eq!(
            text.to_ascii_lowercase()
                .matches("a\r\nabcdefghij\r\n")
                .count(),
            3,
            "{text}"
        );
        assert!(text.ends_with("0\r\n\r\n"), "{text}");
        // Bad parameters name themselves.
        let reads = timed_reads(addr, "/sse?events=many").await;
        let text = String::from_utf8(reads.into_iter().flat_map(|(_, b)| b).collect()).unwrap();
        assert!(text.starts_with("HTTP/1.1 400"), "{text}");
        assert!(
            text.contains("events must be a non-negative integer"),
            "{text}"
        );
        running.stop().await;
    })
    .await;
}

async fn ws_client(
    addr: std::net::SocketAddr,
    path: &str,
) -> tokio_tungstenite::WebSocketStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let url = format!("ws://{addr}{path}");
    let (ws, resp) = tokio_tungstenite::client_async(url, tcp).await.unwrap();
    assert_eq!(resp.status(), 101);
    ws
}

/// `/ws` echoes text and binary messages, answers a ping, counts what it received and sent,
/// and holds its connection in `connections_open` while the WebSocket is open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ws_echoes_and_counts() {
    bounded(async {
        let (server, addr, running) = start_http(HttpConfig::default()).await;
        let mut ws = ws_client(addr, "/ws").await;
        for i in 0..10 {
            ws.send(Message::text(format!("m-{i}"))).await.unwrap();
            let got = ws.next().await.unwrap().unwrap();
            assert_eq!(got, Message::text(format!("m-{i}")));
        }
        ws.send(Message::binary(vec![0u8, 1, 2, 255]))
            .await
            .unwrap();
        assert_eq!(
            ws.next().await.unwrap().unwrap(),
            Message::binary(vec![0u8, 1, 2, 255])
        );
        ws.send(Message::Ping(b"p".to_vec().into())).await.unwrap();
        assert_eq!(
            ws.next().await.unwrap().unwrap(),
            Message::Pong(b"p".to_vec().into())
        );
        let stats = server.stats();
        assert_eq!(
            (stats.ws.received, stats.ws.sent, stats.ws.open),
            (11, 11, 1)
        );
        assert_eq!(stats.connections_open, 1);
        ws.close(None).await.unwrap();
        // The server acknowledges the close, then the connection ends.
        while let Some(Ok(_)) = ws.next().await {}
        server.wait_until(|s| s.connections_open == 0).await;
        assert_eq!(server.stats().ws.open, 0);
        running.stop().await;
    })
    .await;
}

/// `/ws/broadcast` sends each message to every client of the route, the sender included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_reaches_every_client() {
    bounded(async {
        let (server, addr, running) = start_http(HttpConfig::default()).await;
        let mut a = ws_client(addr, "/ws/broadcast").await;
        let mut b = ws_client(addr, "/ws/broadcast").await;
        // Both subscribed: the server counts a WebSocket open once its task runs.
        while server.stats().ws.open < 2 {
            tokio::task::yield_now().await;
        }
        a.send(Message::text("hello all")).await.unwrap();
        assert_eq!(a.next().await.unwrap().unwrap(), Message::text("hello all"));
        assert_eq!(b.next().await.unwrap().unwrap(), Message::text("hello all"));
        let stats = server.stats();
        assert_eq!((stats.ws.received, stats.ws.sent), (1, 2));
        // A stop closes held WebSockets with 1001 (going away) and returns.
        let stopping = tokio::spawn(running.stop());
        match a.next().await.unwrap().unwrap() {
            Message::Close(Some(f)) => assert_eq!(u16::from(f.code), 1001),
            other => panic!("{other:?}"),
        }
        stopping.await.unwrap();
    })
    .await;
}

/// A plain GET of a WebSocket route is refused with 426 (upgrade required).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ws_without_an_upgrade_is_426() {
    bounded(async {
        let (_server, addr, running) = start_http(HttpConfig::default()).await;
        let mut c = h1(addr).await;
        let (s, _) = get(&mut c, "/ws").await;
        assert_eq!(s.as_u16(), 426);
        running.stop().await;
    })
    .await;
}
