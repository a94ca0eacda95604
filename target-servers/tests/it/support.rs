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

pub async fn start_login(
    cfg: stampede_target_servers::login::LoginConfig,
) -> (
    stampede_target_servers::login::LoginServer,
    SocketAddr,
    Running,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = stampede_target_servers::login::LoginServer::new(cfg).unwrap();
    let s = server.clone();
    let running = Running::spawn(move |shutdown| s.serve(listener, shutdown));
    (server, addr, running)
}

pub async fn start_echo_tcp(
    cfg: stampede_target_servers::echo::EchoConfig,
) -> (
    stampede_target_servers::echo::EchoServer,
    SocketAddr,
    Running,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = stampede_target_servers::echo::EchoServer::new(cfg).unwrap();
    let s = server.clone();
    let running = Running::spawn(move |shutdown| s.serve_tcp(listener, shutdown));
    (server, addr, running)
}

pub async fn start_echo_udp(
    cfg: stampede_target_servers::echo::EchoConfig,
) -> (
    stampede_target_servers::echo::EchoServer,
    SocketAddr,
    Running,
) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let server = stampede_target_servers::echo::EchoServer::new(cfg).unwrap();
    let s = server.clone();
    let running = Running::spawn(move |shutdown| s.serve_udp(socket, shutdown));
    (server, addr, running)
}

/// A Unix echo server on a socket in a fresh temporary directory (kept alive by the guard).
pub async fn start_echo_unix(
    cfg: stampede_target_servers::echo::EchoConfig,
) -> (
    stampede_target_servers::echo::EchoServer,
    std::path::PathBuf,
    tempfile::TempDir,
    Running,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("echo.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let server = stampede_target_servers::echo::EchoServer::new(cfg).unwrap();
    let s = server.clone();
    let running = Running::spawn(move |shutdown| s.serve_unix(listener, shutdown));
    (server, path, dir, running)
}

/// Serves `render()` as `/metrics` on a fresh loopback port.
pub async fn start_metrics(
    render: impl Fn() -> String + Send + Sync + 'static,
) -> (SocketAddr, Running) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let running = Running::spawn(move |shutdown| {
        stampede_target_servers::metrics::serve(listener, render, shutdown)
    });
    (addr, running)
}

/// Scrapes and strictly parses `/metrics` at `addr`.
pub async fn scrape(addr: SocketAddr) -> crate::prom::Metrics {
    let mut c = h1(addr).await;
    let (s, b) = get(&mut c, "/metrics").await;
    assert_eq!(s, StatusCode::OK);
    crate::prom::Metrics::parse(std::str::from_utf8(&b).unwrap())
}

/// A framed echo client over any stream.
pub struct FramedClient<S> {
    pub stream: S,
    framing: stampede_target_servers::frame::Framing,
    decoder: stampede_target_servers::frame::Decoder,
    rbuf: bytes::BytesMut,
}

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> FramedClient<S> {
    pub fn new(stream: S, framing: stampede_target_servers::frame::Framing) -> Self {
        Self {
            stream,
            framing,
            decoder: stampede_target_servers::frame::Decoder::new(framing, 1 << 24),
            rbuf: bytes::BytesMut::new(),
        }
    }

    pub async fn send(&mut self, payload: &[u8]) {
        use tokio::io::AsyncWriteExt;
        let mut out = bytes::BytesMut::new();
        stampede_target_servers::frame::encode(self.framing, payload, &mut out).unwrap();
        self.stream.write_all(&out).await.unwrap();
    }

    /// The next frame, or `None` when the server closed the connection.
    pub async fn recv(&mut self) -> Option<Bytes> {
        use tokio::io::AsyncReadExt;
        loop {
            if let Some(f) = self.decoder.decode(&mut self.rbuf).unwrap() {
                return Some(f);
            }
            match self.stream.read_buf(&mut self.rbuf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    pub async fn roundtrip(&mut self, payload: &[u8]) -> Bytes {
        self.send(payload).await;
        self.recv().await.expect("server closed the connection")
    }
}

/// Reads until the peer closes (EOF or reset); returns what was read.
pub async fn read_until_closed<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}
