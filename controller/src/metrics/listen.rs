//! The plaintext HTTP/1.1 listener of `/metrics` and `/healthz`: a few scrapers and probes,
//! never a crowd, so every connection is bounded in number and in time. Idle or half-open
//! connections (a port scan, a stuck client, a slow sender) are closed on a timer instead of
//! holding a slot, so a probe always finds room.
//!
//! `stampede_target_servers::metrics::serve` accepts in the same way, but the dependency rules
//! keep one copy from serving both (the controller may depend only on `core` and `proto`, which
//! hold no sockets, and `target-servers` on no crate of this workspace), and this one adds the
//! connection timeouts that a controller's long-lived endpoint needs.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::{render, CONTENT_TYPE};
use crate::Inner;

/// Most connections served at once. An idle connection costs a task and a read buffer; past
/// the cap a new connection is closed at once. Scrapers and probes are a handful: the cap is
/// far above them, so a few hundred idle sockets leave room for them.
pub(crate) const MAX_CONNECTIONS: usize = 256;

/// How long a connection may take to send a request's headers, counted from the moment it
/// waits for one: on a new connection, and between keep-alive requests, so it is also the
/// idle timeout. Prometheus scrapes every 15 s or more and reconnects after it.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest life of one connection, whatever it does: a client that reads its answer slowly or
/// trickles a body cannot keep its slot longer.
pub(crate) const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);

/// Serves `GET /metrics` (and `GET /healthz`) on `listener` until `shutdown` resolves.
pub(crate) async fn serve(
    inner: Arc<Inner>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(64 * 1024);
    let builder = Arc::new(builder);
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics accept");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if conns.len() >= MAX_CONNECTIONS {
                    tracing::debug!(max = MAX_CONNECTIONS, "metrics listener full: connection closed");
                    continue;
                }
                let inner = Arc::clone(&inner);
                let builder = Arc::clone(&builder);
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let inner = Arc::clone(&inner);
                        async move { Ok::<_, Infallible>(answer(&req, &inner)) }
                    });
                    let conn = builder.serve_connection(TokioIo::new(stream), svc);
                    let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
                });
            }
        }
    }
    conns.shutdown().await;
}

fn answer(req: &Request<Incoming>, inner: &Inner) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => (StatusCode::OK, CONTENT_TYPE, Bytes::from(render(inner))),
        (&Method::GET, "/healthz" | "/readyz") => {
            (StatusCode::OK, "text/plain", Bytes::from_static(b"ok\n"))
        }
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            Bytes::from_static(b"not found\n"),
        ),
    };
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(ctype),
    );
    resp
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    /// A real listener on port 0 serving a fresh controller, stopped with the returned sender.
    async fn listener() -> (
        std::net::SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tempfile::TempDir,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let c = crate::Controller::new(crate::ControllerConfig::new(dir.path())).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            c.serve_metrics(l, async {
                let _ = rx.await;
            })
            .await;
        });
        (addr, tx, dir)
    }

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn a_hundred_idle_connections_leave_healthz_answering() {
        let (addr, stop, _dir) = listener().await;
        let mut idle = Vec::new();
        for _ in 0..100 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        // Half of them start a request and stop in its headers.
        for s in idle.iter_mut().step_by(2) {
            s.write_all(b"GET /metrics HTTP/1.1\r\nHo").await.unwrap();
        }
        let t = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(1), get(addr, "/healthz"))
            .await
            .expect("/healthz answers within a second beside 100 idle connections");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok\n"), "{answer}");
        assert!(t.elapsed() < Duration::from_secs(1));
        let _ = stop.send(());
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_closed_after_the_header_read_timeout() {
        let (addr, stop, _dir) = listener().await;
        let t = tokio::time::Instant::now();
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 64];
        let n = silent.read(&mut buf).await.unwrap_or(0);
        assert_eq!(n, 0, "closed without an answer");
        let waited = t.elapsed();
        assert!(
            waited >= HEADER_READ_TIMEOUT && waited < CONNECTION_LIFETIME,
            "closed after {waited:?}"
        );
        // After a request, a keep-alive connection that goes quiet is closed the same way.
        let mut kept = TcpStream::connect(addr).await.unwrap();
        kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        while !got.ends_with(b"ok\n") {
            let n = kept.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before the answer");
            got.extend_from_slice(&buf[..n]);
        }
        let t = tokio::time::Instant::now();
        assert_eq!(kept.read(&mut buf).await.unwrap_or(0), 0);
        assert!(
            t.elapsed() >= HEADER_READ_TIMEOUT,
            "idle for {:?}",
            t.elapsed()
        );
        let _ = stop.send(());
    }

    #[tokio::test]
    async fn connections_past_the_cap_are_closed_at_once() {
        let (addr, stop, _dir) = listener().await;
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            held.push(TcpStream::connect(addr).await.unwrap());
        }
        // Accepts are in order: by the time this one is taken, the others hold every slot.
        let mut extra = TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(5), extra.read(&mut buf))
            .await
            .expect("the extra connection is closed, not left waiting")
            .unwrap_or(0);
        assert_eq!(n, 0);
        drop(held);
        let _ = stop.send(());
    }
}
