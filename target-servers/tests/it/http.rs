//! The HTTP target over real loopback sockets.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use stampede_target_servers::http::{AccessLog, HttpConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::prom::Metrics;
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers() {
    bounded(async {
        let cfg = HttpConfig {
            bytes: 333,
            max_body_bytes: 4096,
            ..HttpConfig::default()
        };
        let (_server, addr, running) = start_http(cfg).await;
        let mut c = h1(addr).await;

        let (s, b) = get(&mut c, "/").await;
        assert_eq!((s, &b[..]), (StatusCode::OK, &b"hello from stampede\n"[..]));
        let (s, b) = get(&mut c, "/bytes?n=200000").await;
        assert_eq!((s, b.len()), (StatusCode::OK, 200_000));
        let (s, b) = get(&mut c, "/bytes?n=0").await;
        assert_eq!((s, b.len()), (StatusCode::OK, 0));
        let (s, _) = get(&mut c, "/delay?ms=5").await;
        assert_eq!(s, StatusCode::OK);
        let (s, b) = get(&mut c, "/work?ms=1&clock=wall").await;
        assert_eq!(s, StatusCode::OK);
        assert!(b.starts_with(b"worked 1 ms"));
        let (s, b) = get(&mut c, "/data").await;
        assert_eq!((s, b.len()), (StatusCode::OK, 333));
        let (s, b) = get(&mut c, "/any/unknown/path").await;
        assert_eq!((s, b.len()), (StatusCode::OK, 333));
        let (s, b) = get(&mut c, "/data?bytes=7&delay_ms=1&work_ms=1").await;
        assert_eq!((s, &b[..]), (StatusCode::OK, &b"abcdefg"[..]));
        let payload = Bytes::from(vec![7u8; 3000]);
        let (s, b) = request(&mut c, "POST", "/echo", payload.clone()).await;
        assert_eq!((s, b), (StatusCode::OK, payload));
        for p in ["/healthz", "/readyz"] {
            let (s, b) = get(&mut c, p).await;
            assert_eq!((s, &b[..]), (StatusCode::OK, &b"ok\n"[..]));
        }
        let (s, b) = get(&mut c, "/metrics").await;
        assert_eq!(s, StatusCode::OK);
        Metrics::parse(std::str::from_utf8(&b).unwrap());

        // Bad input answers 4xx and the connection stays usable.
        for (m, p, want) in [
            ("GET", "/work?ms=abc", StatusCode::BAD_REQUEST),
            ("GET", "/work?ms=10001", StatusCode::BAD_REQUEST),
            ("GET", "/work?ms=1&clock=sundial", StatusCode::BAD_REQUEST),
            ("GET", "/delay?ms=-3", StatusCode::BAD_REQUEST),
            (
                "GET",
                "/bytes?n=99999999999999999999",
                StatusCode::BAD_REQUEST,
            ),
            ("GET", "/echo", StatusCode::METHOD_NOT_ALLOWED),
            ("DELETE", "/", StatusCode::METHOD_NOT_ALLOWED),
            ("POST", "/nowhere", StatusCode::NOT_FOUND),
        ] {
            let (s, _) = request(&mut c, m, p, Bytes::new()).await;
            assert_eq!(s, want, "{m} {p}");
        }
        let (s, _) = request(&mut c, "POST", "/echo", Bytes::from(vec![0u8; 5000])).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_keep_alive_clients() {
    bounded(async {
        let (server, addr, running) = start_http(HttpConfig::default()).await;
        let clients = 8;
        let per_client = 50;
        let mut tasks = Vec::new();
        for _ in 0..clients {
            tasks.push(tokio::spawn(async move {
                let mut c = h1(addr).await;
                for i in 0..per_client {
                    let (s, b) = get(&mut c, &format!("/bytes?n={i}")).await;
                    assert_eq!((s, b.len()), (StatusCode::OK, i));
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let stats = server.stats();
        assert_eq!(stats.requests_total, (clients * per_client) as u64);
        assert_eq!(stats.connections_total, clients as u64);
        assert_eq!(stats.distinct_source_ips, 1);
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_per_request() {
    bounded(async {
        let (server, addr, running) = start_http(HttpConfig {
            delay_ms: 1,
            ..HttpConfig::default()
        })
        .await;
        for _ in 0..40 {
            let mut c = h1(addr).await;
            let (s, b) = get(&mut c, "/data").await;
            assert_eq!((s, b.len()), (StatusCode::OK, 1024));
        }
        server.wait_until(|s| s.connections_open == 0).await;
        let stats = server.stats();
        assert_eq!((stats.connections_total, stats.requests_total), (40, 40));
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_close_is_honoured() {
    bounded(async {
        let (server, addr, running) = start_http(HttpConfig::default()).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).await.unwrap(); // returns only because the server closes
        let resp = String::from_utf8(resp).unwrap().to_ascii_lowercase();
        assert!(resp.starts_with("http/1.1 200 ok"), "{resp}");
        assert!(resp.contains("connection: close"), "{resp}");
        assert!(resp.ends_with("hello from stampede\n"), "{resp}");

        // HTTP/1.0 without keep-alive also closes.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).await.unwrap();
        assert!(resp.starts_with(b"HTTP/1.0 200 OK"));

        // Pipelined keep-alive requests on one connection are all answered.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).await.unwrap();
        let n = String::from_utf8(resp).unwrap().matches("hello from stampede").count();
        assert_eq!(n, 3);
        server.wait_until(|s| s.connections_open == 0).await;
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_on_the_same_port() {
    bounded(async {
        let (server, addr, running) = start_http(HttpConfig::default()).await;
        let stream = TcpStream::connect(addr).await.unwrap();
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut tasks = Vec::new();
        for i in 0..32usize {
            let mut send = send.clone();
            tasks.push(tokio::spawn(async move {
                send.ready().await.unwrap();
                let req = Request::builder()
                    .uri(format!("http://target/bytes?n={i}"))
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                let resp = send.send_request(req).await.unwrap();
                assert_eq!(resp.version(), hyper::Version::HTTP_2);
                assert_eq!(resp.status(), StatusCode::OK);
                let b = resp.into_body().collect().await.unwrap().to_bytes();
                assert_eq!(b.len(), i);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let stats = server.stats();
        assert_eq!((stats.requests_total, stats.connections_total), (32, 1));
        running.stop().await;
    })
    .await;
}

/// `/work?ms=4` costs at least 4 ms of CPU per request, measured from the process's CPU time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_burns_cpu_time() {
    bounded(async {
        let (_server, addr, running) = start_http(HttpConfig::default()).await;
        let mut c = h1(addr).await;
        let requests = 50u32;
        let before = cpu_time::ProcessTime::try_now().unwrap();
        for _ in 0..requests {
            let (s, _) = get(&mut c, "/work?ms=4").await;
            assert_eq!(s, StatusCode::OK);
        }
        let used = before.try_elapsed().unwrap();
        assert!(
            used >= Duration::from_millis(4) * requests,
            "{requests} requests used only {used:?} of CPU"
        );
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_track_connections_requests_and_sources() {
    bounded(async {
        let (server, addr, running) = start_http(HttpConfig::default()).await;
        let scrape = |addr| async move {
            let mut c = h1(addr).await;
            let (s, b) = get(&mut c, "/metrics").await;
            assert_eq!(s, StatusCode::OK);
            Metrics::parse(std::str::from_utf8(&b).unwrap())
        };
        const OPEN: &str = "stampede_target_http_connections_open";

        // Five open keep-alive connections from three source addresses, 4 requests each.
        let sources = [
            "127.0.0.1",
            "127.0.0.2",
            "127.0.0.3",
            "127.0.0.2",
            "127.0.0.3",
        ];
        let mut clients = Vec::new();
        for src in sources {
            let mut c = h1_over(connect_from(src, addr).await).await;
            for _ in 0..4 {
                assert_eq!(get(&mut c, "/").await.0, StatusCode::OK);
            }
            clients.push(c);
        }
        let m = scrape(addr).await;
        assert_eq!(m.get(OPEN, &[]), Some(6.0)); // the five, and the scraper's own
        assert_eq!(
            m.get("stampede_target_http_distinct_source_ips", &[]),
            Some(3.0)
        );
        assert_eq!(
            m.get(
                "stampede_target_http_request_duration_seconds_count",
                &[("route", "root")]
            ),
            Some(20.0)
        );
        assert_eq!(
            m.get(
                "stampede_target_http_requests_total",
                &[("route", "root"), ("status", "200")]
            ),
            Some(20.0)
        );
        assert_eq!(
            m.types
                .get("stampede_target_http_request_duration_seconds")
                .map(String::as_str),
            Some("histogram")
        );
        assert_eq!(m.types.get(OPEN).map(String::as_str), Some("gauge"));

        // Close them: the gauge falls back.
        drop(clients);
        server.wait_until(|s| s.connections_open == 0).await;
        let m = scrape(addr).await;
        assert_eq!(m.get(OPEN, &[]), Some(1.0));
        assert_eq!(
            m.get("stampede_target_http_connections_total", &[]),
            Some(7.0)
        );
        // The first scrape is counted now, under its own route.
        assert_eq!(
            m.get(
                "stampede_target_http_request_duration_seconds_count",
                &[("route", "metrics")]
            ),
            Some(1.0)
        );
        assert_eq!(server.stats().distinct_source_ips, 3);
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_requests_in_flight() {
    bounded(async {
        let (server, addr, running) = start_http(HttpConfig {
            shutdown_grace: Duration::from_secs(30),
            ..HttpConfig::default()
        })
        .await;
        let mut c = h1(addr).await;
        let in_flight = tokio::spawn(async move { get(&mut c, "/delay?ms=300").await });
        // Poll (yielding, no sleep) until the server is handling the request.
        while server.stats().requests_in_flight == 0 {
            tokio::task::yield_now().await;
        }
        running.stop().await;
        let (s, b) = in_flight.await.unwrap();
        assert_eq!((s, &b[..]), (StatusCode::OK, &b"delayed 300 ms\n"[..]));
        // The listener is closed.
        assert!(TcpStream::connect(addr).await.is_err());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cap_rejects_extra_connections() {
    bounded(async {
        let (server, addr, running) = start_http(HttpConfig {
            max_connections: 2,
            ..HttpConfig::default()
        })
        .await;
        let mut a = h1(addr).await;
        let mut b = h1(addr).await;
        assert_eq!(get(&mut a, "/").await.0, StatusCode::OK);
        assert_eq!(get(&mut b, "/").await.0, StatusCode::OK);
        let mut third = TcpStream::connect(addr).await.unwrap();
        let _ = third.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
        let mut buf = Vec::new();
        // Closed by the server without an answer (EOF or reset).
        match third.read_to_end(&mut buf).await {
            Ok(_) => assert!(buf.is_empty()),
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
        }
        assert_eq!(server.stats().connections_rejected, 1);
        drop(a);
        server.wait_until(|s| s.connections_open == 1).await;
        let mut c = h1(addr).await;
        assert_eq!(get(&mut c, "/").await.0, StatusCode::OK);
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_log_to_file() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let cfg = HttpConfig {
            access_log: AccessLog::File(path.clone()),
            access_log_buffer: 1 << 16,
            ..HttpConfig::default()
        };
        let (_server, addr, running) = start_http(cfg).await;
        let mut c = h1(addr).await;
        for p in ["/", "/bytes?n=5", "/a\"b"] {
            get(&mut c, p).await;
        }
        running.stop().await; // flushes
        let log = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines.len(), 3, "{log}");
        assert!(
            lines[0].contains(" 127.0.0.1 \"GET / HTTP/1.1\" 200 20 "),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].contains("\"GET /bytes?n=5 HTTP/1.1\" 200 5 "),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].contains("\"GET /a%22b HTTP/1.1\" 200 1024 "),
            "{}",
            lines[2]
        );
    })
    .await;
}

/// `--strict`: a path that is no route is 404 (a scenario's typo fails), routes still answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_answers_404_to_unknown_paths() {
    bounded(async {
        let cfg = HttpConfig {
            strict: true,
            ..HttpConfig::default()
        };
        let (_server, addr, running) = start_http(cfg).await;
        let mut c = h1(addr).await;
        let (s, b) = get(&mut c, "/api/v1/mee").await;
        assert_eq!((s, &b[..]), (StatusCode::NOT_FOUND, &b"no such path\n"[..]));
        let (s, b) = get(&mut c, "/data?bytes=10").await;
        assert_eq!((s, b.len()), (StatusCode::OK, 10));
        let (s, _) = get(&mut c, "/").await;
        assert_eq!(s, StatusCode::OK);
        drop(c);
        running.stop().await;
    })
    .await;
}
