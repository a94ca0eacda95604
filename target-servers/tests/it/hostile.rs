//! Hostile input: garbage, truncated frames, oversized lengths, malformed payloads and slow
//! clients. Each server must close the offending connection, count the error, never panic,
//! and keep serving well-behaved clients.

use std::time::Duration;

use bytes::Bytes;
use hyper::StatusCode;
use stampede_target_servers::echo::{EchoConfig, EchoServer, FramedStats};
use stampede_target_servers::frame::Framing;
use stampede_target_servers::http::HttpConfig;
use stampede_target_servers::login::{Client, LoginConfig};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use crate::prom::Metrics;
use crate::support::*;

/// Deterministic pseudo-random bytes.
fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Sends `bytes`, half-closes, and waits for the server to close the connection.
async fn send_and_wait_close<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, bytes: &[u8]) -> Vec<u8> {
    // The server may close before reading everything; a write error is fine.
    let _ = s.write_all(bytes).await;
    let _ = s.shutdown().await;
    read_until_closed(&mut s).await
}

/// The hostile cases for a length-delimited server, as (name, bytes, expected error kind).
fn length_cases(max: usize) -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let mut truncated = 100u32.to_be_bytes().to_vec();
    truncated.extend_from_slice(&[0u8; 10]);
    let mut over = ((max + 1) as u32).to_be_bytes().to_vec();
    over.extend_from_slice(&garbage(1, 64));
    vec![
        (
            "huge length",
            vec![0xff, 0xff, 0xff, 0xff, 1, 2, 3],
            "oversize",
        ),
        ("just over the limit", over, "oversize"),
        ("truncated payload", truncated, "truncated"),
        ("truncated header", vec![0, 0], "truncated"),
    ]
}

async fn check_error(
    stats: impl Fn() -> FramedStats,
    metrics: impl Fn() -> String,
    kind: &str,
    before: f64,
) -> f64 {
    let m = Metrics::parse(&metrics());
    let now = m
        .get(
            &format!("{}_errors_total", prefix(&metrics())),
            &[("kind", kind)],
        )
        .unwrap();
    assert_eq!(now, before + 1.0, "{kind} not counted");
    assert!(stats().errors_total >= 1);
    now
}

fn prefix(text: &str) -> &'static str {
    if text.contains("stampede_target_login_") {
        "stampede_target_login"
    } else {
        "stampede_target_echo"
    }
}

fn error_count(text: &str, kind: &str) -> f64 {
    Metrics::parse(text)
        .get(&format!("{}_errors_total", prefix(text)), &[("kind", kind)])
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_survives_hostile_frames() {
    bounded(async {
        let cfg = LoginConfig {
            max_frame_bytes: 256,
            ..LoginConfig::default()
        };
        let (server, addr, running) = start_login(cfg).await;
        let mut cases = length_cases(256);
        // Well-framed, but not a request.
        for (name, payload) in [
            ("not json", &b"\xff\xfe garbage"[..]),
            ("wrong shape", &br#"{"username":1}"#[..]),
            ("json array", &b"[1,2,3]"[..]),
            ("deep nesting", &[b'['; 200][..]),
        ] {
            let mut f = (payload.len() as u32).to_be_bytes().to_vec();
            f.extend_from_slice(payload);
            cases.push((name, f, "malformed"));
        }
        let s2 = server.clone();
        for (name, bytes, kind) in cases {
            let before = error_count(&server.metrics_text(), kind);
            let _ = send_and_wait_close(TcpStream::connect(addr).await.unwrap(), &bytes).await;
            server.wait_until(|s| s.connections_open == 0).await;
            let _ = name;
            check_error(|| s2.stats(), || s2.metrics_text(), kind, before).await;
        }
        // Random garbage never panics, and a good client is still served afterwards.
        for seed in 0..40 {
            let _ =
                send_and_wait_close(TcpStream::connect(addr).await.unwrap(), &garbage(seed, 600))
                    .await;
        }
        let mut c = Client::connect(addr).await.unwrap();
        assert!(matches!(
            c.login("alice", "wonderland").await.unwrap(),
            stampede_target_servers::login::LoginAction::Granted { .. }
        ));
        running.stop().await;
    })
    .await;
}

async fn echo_stream_cases<S, F, Fut>(server: &EchoServer, connect: F)
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = S>,
{
    for (name, bytes, kind) in length_cases(128) {
        let before = error_count(&server.metrics_text(), kind);
        let _ = send_and_wait_close(connect().await, &bytes).await;
        server.wait_until(|s| s.connections_open == 0).await;
        let _ = name;
        let s = server.clone();
        let s2 = server.clone();
        check_error(move || s.stats(), move || s2.metrics_text(), kind, before).await;
    }
    for seed in 0..40 {
        let _ = send_and_wait_close(connect().await, &garbage(seed, 500)).await;
    }
    let mut c = FramedClient::new(connect().await, Framing::Length);
    assert_eq!(&c.roundtrip(b"still alive").await[..], b"still alive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_tcp_survives_hostile_frames() {
    bounded(async {
        let (server, addr, running) = start_echo_tcp(EchoConfig {
            max_frame_bytes: 128,
            ..EchoConfig::default()
        })
        .await;
        echo_stream_cases(&server, || async move {
            TcpStream::connect(addr).await.unwrap()
        })
        .await;
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_unix_survives_hostile_frames() {
    bounded(async {
        let (server, path, _dir, running) = start_echo_unix(EchoConfig {
            max_frame_bytes: 128,
            ..EchoConfig::default()
        })
        .await;
        let p = &path;
        echo_stream_cases(
            &server,
            || async move { UnixStream::connect(p).await.unwrap() },
        )
        .await;
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_newline_line_too_long() {
    bounded(async {
        let cfg = EchoConfig {
            framing: Framing::Newline,
            max_frame_bytes: 64,
            ..EchoConfig::default()
        };
        let (server, addr, running) = start_echo_tcp(cfg).await;
        // Endless line without a newline: closed once past the limit, without waiting for EOF.
        let mut s = TcpStream::connect(addr).await.unwrap();
        let _ = s.write_all(&[b'a'; 1000]).await;
        read_until_closed(&mut s).await;
        server.wait_until(|s| s.connections_open == 0).await;
        assert_eq!(error_count(&server.metrics_text(), "oversize"), 1.0);
        // Partial line then EOF.
        let _ = send_and_wait_close(TcpStream::connect(addr).await.unwrap(), b"no newline").await;
        server.wait_until(|s| s.connections_open == 0).await;
        assert_eq!(error_count(&server.metrics_text(), "truncated"), 1.0);
        let mut c = FramedClient::new(TcpStream::connect(addr).await.unwrap(), Framing::Newline);
        assert_eq!(&c.roundtrip(b"ok").await[..], b"ok");
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_timed_out() {
    bounded(async {
        let t = Duration::from_millis(200);
        let (login, laddr, lrun) = start_login(LoginConfig {
            read_timeout: t,
            ..LoginConfig::default()
        })
        .await;
        let (echo, eaddr, erun) = start_echo_tcp(EchoConfig {
            read_timeout: t,
            ..EchoConfig::default()
        })
        .await;
        // Half a header, then silence: the server closes after the read timeout.
        for addr in [laddr, eaddr] {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(&[0, 0]).await.unwrap();
            assert!(read_until_closed(&mut s).await.is_empty());
        }
        login.wait_until(|s| s.connections_open == 0).await;
        echo.wait_until(|s| s.connections_open == 0).await;
        assert_eq!(error_count(&login.metrics_text(), "timeout"), 1.0);
        assert_eq!(error_count(&echo.metrics_text(), "timeout"), 1.0);
        // An idle client is closed too (not an error).
        let mut s = TcpStream::connect(eaddr).await.unwrap();
        assert!(read_until_closed(&mut s).await.is_empty());
        lrun.stop().await;
        erun.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_caps_hold() {
    bounded(async {
        let (login, laddr, lrun) = start_login(LoginConfig {
            max_connections: 1,
            ..LoginConfig::default()
        })
        .await;
        let mut first = Client::connect(laddr).await.unwrap();
        first.login("bob", "builder").await.unwrap();
        let mut second = TcpStream::connect(laddr).await.unwrap();
        read_until_closed(&mut second).await;
        assert_eq!(login.stats().connections_rejected, 1);
        first.login("bob", "builder").await.unwrap();
        lrun.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_survives_hostile_requests() {
    bounded(async {
        let cfg = HttpConfig {
            read_timeout: Duration::from_millis(300),
            max_body_bytes: 1024,
            ..HttpConfig::default()
        };
        let (server, addr, running) = start_http(cfg).await;
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("garbage", garbage(7, 2000)),
            ("bad request line", b"GARBAGE\r\n\r\n".to_vec()),
            ("bad version", b"GET / HTTP/9.9\r\n\r\n".to_vec()),
            (
                "huge header",
                [
                    &b"GET / HTTP/1.1\r\nX: "[..],
                    &vec![b'a'; 200_000],
                    b"\r\n\r\n",
                ]
                .concat(),
            ),
            (
                "bad content-length",
                b"POST /echo HTTP/1.1\r\nContent-Length: zz\r\n\r\n".to_vec(),
            ),
            (
                "bad chunk",
                b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".to_vec(),
            ),
            (
                "truncated body",
                b"POST /echo HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc".to_vec(),
            ),
            (
                "bad h2 preface",
                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\xff\xff\xff\xff\xff".to_vec(),
            ),
        ];
        for (name, bytes) in cases {
            let answer = send_and_wait_close(TcpStream::connect(addr).await.unwrap(), &bytes).await;
            let text = String::from_utf8_lossy(&answer);
            assert!(
                answer.is_empty() || !text.starts_with("HTTP/1.1 200"),
                "{name}: {text}"
            );
        }
        server.wait_until(|s| s.connections_open == 0).await;
        assert!(server.stats().errors_total >= 5, "{:?}", server.stats());

        // Slow headers: closed by the header read timeout.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x").await.unwrap();
        read_until_closed(&mut s).await;

        // Oversized bodies: declared, and chunked without a length.
        let mut c = h1(addr).await;
        let (st, _) = request(&mut c, "POST", "/echo", Bytes::from(vec![1u8; 5000])).await;
        assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE);
        let s = TcpStream::connect(addr).await.unwrap();
        let mut chunked =
            b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..10 {
            chunked.extend_from_slice(b"200\r\n");
            chunked.extend_from_slice(&[b'z'; 0x200]);
            chunked.extend_from_slice(b"\r\n");
        }
        chunked.extend_from_slice(b"0\r\n\r\n");
        let answer = send_and_wait_close(s, &chunked).await;
        assert!(
            answer.starts_with(b"HTTP/1.1 413"),
            "{}",
            String::from_utf8_lossy(&answer)
        );

        // Still serving.
        let mut c = h1(addr).await;
        assert_eq!(get(&mut c, "/").await.0, StatusCode::OK);
        let m = Metrics::parse(&server.metrics_text());
        assert!(
            m.get(
                "stampede_target_http_errors_total",
                &[("kind", "connection")]
            )
            .unwrap()
                >= 1.0
        );
        assert!(
            m.get(
                "stampede_target_http_errors_total",
                &[("kind", "body_too_large")]
            )
            .unwrap()
                >= 2.0
        );
        running.stop().await;
    })
    .await;
}
