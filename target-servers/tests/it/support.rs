//! Helpers shared by the integration tests.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use stampede_target_servers::http::{HttpConfig, HttpServer};
use stampede_target_servers::TargetError;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Upper bound for any single test body.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `fut`, failing the test if it takes longer than [`TEST_TIMEOUT`].
pub async fn bounded<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(TEST_TIMEOUT, fut)
        .await
        .expect("test exceeded its time bound")
}

/// A running server task and the means to stop it.
pub struct Running {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), TargetError>>,
}

impl Running {
    pub fn spawn<F>(f: impl FnOnce(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) -> F) -> Self
    where
        F: Future<Output = Result<(), TargetError>> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = Box::pin(async move {
            let _ = stopped.await;
        });
        Self {
            stop: Some(stop),
            task: tokio::spawn(f(shutdown)),
        }
    }

    /// Asks for shutdown and waits for the server to return.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        bounded(&mut self.task)
            .await
            .expect("server task panicked")
            .expect("server returned an error");
    }
}

pub async fn start_http(cfg: HttpConfig) -> (HttpServer, SocketAddr, Running) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = HttpServer::new(cfg).unwrap();
    let s = server.clone();
    let running = Running::spawn(move |shutdown| s.serve(listener, shutdown));
    (server, addr, running)
}

/// An HTTP/1.1 client connection.
pub async fn h1(addr: SocketAddr) -> SendRequest<Full<Bytes>> {
    h1_over(TcpStream::connect(addr).await.unwrap()).await
}

pub async fn h1_over(stream: TcpStream) -> SendRequest<Full<Bytes>> {
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

pub async fn request(
    send: &mut SendRequest<Full<Bytes>>,
    method: &str,
    path: &str,
    body: Bytes,
) -> (StatusCode, Bytes) {
    send.ready().await.unwrap();
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "target")
        .body(Full::new(body))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, body)
}

pub async fn get(send: &mut SendRequest<Full<Bytes>>, path: &str) -> (StatusCode, Bytes) {
    request(send, "GET", path, Bytes::new()).await
}

/// A TCP connection to `addr` from a chosen loopback source address.
pub async fn connect_from(src: &str, addr: SocketAddr) -> TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(format!("{src}:0").parse().unwrap()).unwrap();
    sock.connect(addr).await.unwrap()
}
