//! The echo targets (TCP, UDP, Unix) over real loopback sockets.

use stampede_target_servers::echo::EchoConfig;
use stampede_target_servers::frame::Framing;
use tokio::net::{TcpStream, UdpSocket, UnixStream};

use crate::support::*;

fn payload(seed: usize, len: usize, newline: bool) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let b = ((seed * 31 + i * 7) % 251) as u8;
            if newline && b == b'\n' {
                b'x'
            } else {
                b
            }
        })
        .collect()
}

async fn exercise_tcp(framing: Framing) {
    let (server, addr, running) = start_echo_tcp(EchoConfig {
        framing,
        ..EchoConfig::default()
    })
    .await;
    let newline = framing == Framing::Newline;
    let mut tasks = Vec::new();
    for c in 0..6usize {
        tasks.push(tokio::spawn(async move {
            let mut client = FramedClient::new(TcpStream::connect(addr).await.unwrap(), framing);
            for i in 0..100usize {
                let p = payload(c * 1000 + i, (i * 37) % 3000, newline);
                assert_eq!(&client.roundtrip(&p).await[..], &p[..]);
            }
            // Empty and maximal frames.
            assert!(client.roundtrip(b"").await.is_empty());
            let big = payload(c, 64 * 1024, newline);
            assert_eq!(&client.roundtrip(&big).await[..], &big[..]);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // One connection per request.
    for i in 0..20 {
        let mut client = FramedClient::new(TcpStream::connect(addr).await.unwrap(), framing);
        let p = payload(i, 10, newline);
        assert_eq!(&client.roundtrip(&p).await[..], &p[..]);
    }
    server.wait_until(|s| s.connections_open == 0).await;
    let s = server.stats();
    assert_eq!(
        (s.connections_total, s.frames_total, s.errors_total),
        (26, 6 * 102 + 20, 0)
    );
    assert_eq!(s.bytes_received, s.bytes_sent);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_length_delimited() {
    bounded(exercise_tcp(Framing::Length)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_newline_delimited() {
    bounded(exercise_tcp(Framing::Newline)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket() {
    bounded(async {
        let (server, path, _dir, running) = start_echo_unix(EchoConfig::default()).await;
        let mut tasks = Vec::new();
        for c in 0..4usize {
            let path = path.clone();
            tasks.push(tokio::spawn(async move {
                let mut client =
                    FramedClient::new(UnixStream::connect(&path).await.unwrap(), Framing::Length);
                for i in 0..100usize {
                    let p = payload(c + i, i * 11, false);
                    assert_eq!(&client.roundtrip(&p).await[..], &p[..]);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        for i in 0..10 {
            let mut client =
                FramedClient::new(UnixStream::connect(&path).await.unwrap(), Framing::Length);
            assert_eq!(
                &client.roundtrip(&payload(i, 5, false)).await[..],
                &payload(i, 5, false)[..]
            );
        }
        server.wait_until(|s| s.connections_open == 0).await;
        let s = server.stats();
        assert_eq!((s.connections_total, s.frames_total), (14, 410));
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_datagrams_and_metrics() {
    bounded(async {
        let (server, addr, running) = start_echo_udp(EchoConfig {
            max_frame_bytes: 2000,
            ..EchoConfig::default()
        })
        .await;
        let (maddr, metrics) = {
            let s = server.clone();
            start_metrics(move || s.metrics_text()).await
        };
        let mut tasks = Vec::new();
        for c in 0..4usize {
            tasks.push(tokio::spawn(async move {
                let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                sock.connect(addr).await.unwrap();
                let mut buf = vec![0u8; 4096];
                for i in 0..100usize {
                    let p = payload(c * 100 + i, i * 13 % 2000, false);
                    sock.send(&p).await.unwrap();
                    let n = sock.recv(&mut buf).await.unwrap();
                    assert_eq!(&buf[..n], &p[..]);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        // An oversize datagram is dropped; the next one is answered (loopback keeps order).
        let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        sock.connect(addr).await.unwrap();
        sock.send(&[1u8; 2001]).await.unwrap();
        sock.send(b"small").await.unwrap();
        let mut buf = [0u8; 4096];
        let n = sock.recv(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"small");

        // The server counts a frame once its reply is sent, so the reply can arrive a moment
        // before the count: scrape until it lands (bounded).
        let mut m = scrape(maddr).await;
        for _ in 0..200 {
            if m.get("stampede_target_echo_frames_total", &[]) == Some(401.0) {
                break;
            }
            tokio::task::yield_now().await;
            m = scrape(maddr).await;
        }
        assert_eq!(m.get("stampede_target_echo_frames_total", &[]), Some(401.0));
        assert_eq!(
            m.get("stampede_target_echo_request_duration_seconds_count", &[]),
            Some(401.0)
        );
        assert_eq!(
            m.get("stampede_target_echo_errors_total", &[("kind", "oversize")]),
            Some(1.0)
        );
        assert_eq!(server.stats().errors_total, 1);
        running.stop().await;
        metrics.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_metrics_gauge_follows_connections() {
    bounded(async {
        let (server, addr, running) = start_echo_tcp(EchoConfig::default()).await;
        let (maddr, metrics) = {
            let s = server.clone();
            start_metrics(move || s.metrics_text()).await
        };
        let mut clients = Vec::new();
        for i in 0..5usize {
            let mut c = FramedClient::new(TcpStream::connect(addr).await.unwrap(), Framing::Length);
            c.roundtrip(&payload(i, 3, false)).await;
            clients.push(c);
        }
        let m = scrape(maddr).await;
        assert_eq!(
            m.get("stampede_target_echo_connections_open", &[]),
            Some(5.0)
        );
        assert_eq!(
            m.get("stampede_target_echo_request_duration_seconds_count", &[]),
            Some(5.0)
        );
        clients.truncate(2);
        server.wait_until(|s| s.connections_open == 2).await;
        let m = scrape(maddr).await;
        assert_eq!(
            m.get("stampede_target_echo_connections_open", &[]),
            Some(2.0)
        );
        let (s, b) = get(&mut h1(maddr).await, "/healthz").await;
        assert_eq!((s.as_u16(), &b[..]), (200, &b"ok\n"[..]));
        drop(clients);
        running.stop().await;
        metrics.stop().await;
    })
    .await;
}
