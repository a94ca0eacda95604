//! Prometheus helpers and the stand-alone metrics endpoint used by the TCP and UDP servers.
//!
//! [`serve`] answers `GET /metrics` (Prometheus text exposition format 0.0.4), `GET /healthz` and
//! `GET /readyz` over HTTP/1.1 or h2c. Give it the `metrics_text` method of a server handle, e.g.
//! `move || login_server.metrics_text()`.
//!
//! The controller's `/metrics` listener accepts in the same way, but the dependency rules keep
//! one copy from serving both (`target-servers` depends on no crate of this workspace, and the
//! controller only on `core` and `proto`, which hold no sockets), and this one also speaks h2c.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus::{Encoder, HistogramOpts, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::TargetError;

/// The `Content-Type` of the Prometheus text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Latency histogram buckets, in seconds: 25 µs to 30 s.
pub(crate) const LATENCY_BUCKETS: &[f64] = &[
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

pub(crate) fn histogram_opts(name: &str, help: &str) -> HistogramOpts {
    HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec())
}

/// A registry whose metric names are prefixed with `stampede_target_<kind>_`.
pub(crate) fn registry(kind: &str) -> Result<Registry, TargetError> {
    Ok(Registry::new_custom(
        Some(format!("stampede_target_{kind}")),
        None,
    )?)
}

/// Renders `registry` in the Prometheus text format.
pub(crate) fn render(registry: &Registry) -> String {
    let mut buf = Vec::with_capacity(8 * 1024);
    // Encoding into a Vec only fails on inconsistent metric families, which we never build.
    if let Err(e) = TextEncoder::new().encode(&registry.gather(), &mut buf) {
        tracing::error!(error = %e, "encoding metrics");
    }
    // The standard process metrics too, which every exporter has and `observe:` reads.
    buf.extend_from_slice(crate::process::process_metrics_text().as_bytes());
    String::from_utf8(buf).unwrap_or_default()
}

/// Serves `GET /metrics` from `render()` on `listener` until `shutdown` resolves.
///
/// Also answers `GET /healthz` and `GET /readyz` with `ok`; any other path is 404.
pub async fn serve<F>(
    listener: TcpListener,
    render: F,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), TargetError>
where
    F: Fn() -> String + Send + Sync + 'static,
{
    let render = Arc::new(render);
    let builder = Arc::new(hyper_util::server::conn::auto::Builder::new(
        TokioExecutor::new(),
    ));
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(a) => a,
                    Err(e) => { crate::common::accept_backoff(&e).await; continue; }
                };
                // Bound the number of scrape connections; scrapers are few.
                if conns.len() >= 64 {
                    continue;
                }
                let render = Arc::clone(&render);
                let builder = Arc::clone(&builder);
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let render = Arc::clone(&render);
                        async move { Ok::<_, Infallible>(answer(&req, &*render)) }
                    });
                    let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        }
    }
    conns.shutdown().await;
    Ok(())
}

fn answer(
    req: &Request<Incoming>,
    render: &(dyn Fn() -> String + Send + Sync),
) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => (StatusCode::OK, CONTENT_TYPE, Bytes::from(render())),
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
