//! The HTTP/2 driver: h2c with prior knowledge (`http_version: "2"` on an `http://` target) or
//! h2 negotiated by ALPN (on an `https://` target), one stream per request. The request head
//! is parsed once per step. A run whose HTTP/2 requests are all static takes the lean client
//! ([`lean`]); templated steps, checks, extraction and gRPC take the `h2` crate's, whose
//! answers come with their headers and whose streams can stay open.

mod frame;
mod hpack;
mod lean;
#[cfg(test)]
mod lean_tests;

use std::net::SocketAddr;

use bytes::Bytes;
use stampede_core::scenario::HttpRequest;
use stampede_core::stats::error_kind;
use stampede_core::template::Template;

use crate::http1::{Discard, Response, Sink};
use crate::net::{self, io_failure, Failure};

/// A request compiled once per step.
#[derive(Debug, Clone)]
pub struct H2Request {
    method: http::Method,
    uri: http::Uri,
    headers: http::HeaderMap,
    body: Bytes,
    wire_len: u64,
    /// The same request for the lean client, its header block encoded once: built for a
    /// static step's request ([`H2Request::new`]) only, since a gRPC call's parts, rendered
    /// per call, always go to the `h2` crate's client ([`RunSpec::h2_client_for`]).
    ///
    /// [`RunSpec::h2_client_for`]: crate::runner::RunSpec::h2_client_for
    lean: Option<lean::LeanRequest>,
}

/// Which HTTP/2 client a run's connections use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum H2Client {
    /// The `h2` crate's: any step (templates, checks, extraction, gRPC, streams).
    #[default]
    General,
    /// The lean client: static requests only, whose answers are counted, not read.
    Lean,
}

/// Why a static http step cannot be sent over HTTP/2; the message names the field relative
/// to the step's `http`.
#[derive(Debug, thiserror::Error)]
pub enum H2RequestError {
    /// A method HTTP/2 cannot carry.
    #[error("method: `{method}` is not an HTTP method")]
    Method {
        /// The method as the scenario wrote it.
        method: String,
    },
    /// The path does not make a URI with the target's authority.
    #[error("path: {0}")]
    Path(http::uri::InvalidUri),
    /// A header name HTTP/2 cannot carry.
    #[error("headers: `{name}` is not a valid header name")]
    HeaderName {
        /// The name as the scenario wrote it.
        name: String,
    },
    /// A header value with bytes HTTP forbids.
    #[error("headers: the value of `{name}` is not valid")]
    HeaderValue {
        /// The header's name.
        name: String,
    },
}

impl H2Request {
    /// Builds the request for `authority` (`:scheme` is `https` over TLS, else `http`); the
    /// error says which part is not valid HTTP/2.
    pub fn new(
        req: &HttpRequest,
        tls: bool,
        authority: &str,
        prefix: &str,
    ) -> Result<Self, H2RequestError> {
        let text = |t: &Template| t.as_static().unwrap_or_default().to_string();
        let method = http::Method::from_bytes(req.method.as_bytes()).map_err(|_| {
            H2RequestError::Method {
                method: req.method.clone(),
            }
        })?;
        let scheme = if tls { "https" } else { "http" };
        let path = format!("{prefix}{}", text(&req.path));
        let uri: http::Uri = format!("{scheme}://{authority}{path}")
            .parse()
            .map_err(H2RequestError::Path)?;
        let mut headers = http::HeaderMap::new();
        for (k, v) in &req.headers {
            let lower = k.to_ascii_lowercase();
            // Connection-specific headers are not allowed in HTTP/2; `host` is `:authority`.
            if matches!(
                lower.as_str(),
                "host"
                    | "connection"
                    | "keep-alive"
                    | "transfer-encoding"
                    | "upgrade"
                    | "content-length"
            ) {
                continue;
            }
            let name = http::HeaderName::from_bytes(lower.as_bytes())
                .map_err(|_| H2RequestError::HeaderName { name: k.clone() })?;
            let value = http::HeaderValue::from_str(&text(v))
                .map_err(|_| H2RequestError::HeaderValue { name: k.clone() })?;
            headers.append(name, value);
        }
        if !headers.contains_key(http::header::USER_AGENT) {
            headers.insert(
                http::header::USER_AGENT,
                http::HeaderValue::from_static("stampede"),
            );
        }
        let body = Bytes::from(req.body.as_ref().map(text).unwrap_or_default());
        let mut request = Self::from_parts(method, uri, headers, body);
        request.lean = Some(request.lean_request());
        Ok(request)
    }

    /// A request from its parts (a gRPC call's, whose body is binary).
    pub fn from_parts(
        method: http::Method,
        uri: http::Uri,
        headers: http::HeaderMap,
        body: Bytes,
    ) -> Self {
        let authority = uri.authority().map_or(0, |a| a.as_str().len());
        let path = uri.path_and_query().map_or(0, |p| p.as_str().len());
        let wire_len = (method.as_str().len() + path + authority) as u64
            + headers
                .iter()
                .map(|(k, v)| (k.as_str().len() + v.len()) as u64)
                .sum::<u64>()
            + body.len() as u64;
        Self {
            method,
            uri,
            headers,
            body,
            wire_len,
            lean: None,
        }
    }

    /// The request's header block for the lean client, encoded once.
    fn lean_request(&self) -> lean::LeanRequest {
        let uri = &self.uri;
        let block = frame::request_block(
            self.method.as_str(),
            uri.scheme_str().unwrap_or("http"),
            uri.authority().map_or("", |a| a.as_str()),
            uri.path_and_query().map_or("/", |p| p.as_str()),
            self.headers.iter().map(|(k, v)| (k.as_str(), v.as_bytes())),
        );
        lean::LeanRequest {
            block: Bytes::from(block),
            body: self.body.clone(),
        }
    }

    pub(crate) fn head(&self) -> http::Request<()> {
        let mut req = http::Request::new(());
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = self.headers.clone();
        req
    }

    #[cfg(test)]
    pub(crate) fn body(&self) -> &Bytes {
        &self.body
    }

    /// Approximate bytes sent (head fields and body, before HPACK).
    /// Bytes the request takes on the wire, for the bytes-sent count.
    pub fn len(&self) -> usize {
        self.wire_len as usize
    }

    /// Whether the request takes no bytes on the wire.
    pub fn is_empty(&self) -> bool {
        self.wire_len == 0
    }
}

/// One HTTP/2 connection; its driver task ends when the last handle on it is dropped. A
/// clone is another handle on the same connection: its requests go on streams of their own
/// (`streams_per_connection`).
#[derive(Debug, Clone)]
pub struct H2Conn {
    client: Client,
    /// The last handle's drop aborts the driver.
    driver: std::sync::Arc<Driver>,
    /// The `grpc-message` of this handle's last failed gRPC call, for its failure sample.
    pub grpc_message: Option<Box<str>>,
}

/// The connection's client: the `h2` crate's, or the lean one's shared state.
#[derive(Debug, Clone)]
enum Client {
    General(h2::client::SendRequest<Bytes>),
    Lean(std::sync::Arc<lean::Shared>),
}

/// The connection's driver task, aborted when the last handle goes.
#[derive(Debug)]
struct Driver(tokio::task::JoinHandle<()>);

impl Drop for Driver {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub(crate) fn h2_failure(e: &h2::Error) -> Failure {
    if let Some(io) = e.get_io() {
        // h2 hands each stream the connection's I/O error again as a kind and a text, so
        // rustls's error type is gone by then. Past the handshake a TLS failure (an alert,
        // such as a client certificate refused after a TLS 1.3 handshake, or a bad record)
        // is `InvalidData`, which a plain socket never returns.
        if io.kind() == std::io::ErrorKind::InvalidData {
            return Failure(crate::tls::tls_kind(io).unwrap_or(error_kind::TLS));
        }
        return io_failure(io, false);
    }
    if e.is_go_away() || (e.is_remote() && e.reason() == Some(h2::Reason::REFUSED_STREAM)) {
        return Failure(error_kind::RESET);
    }
    Failure(error_kind::PROTOCOL)
}

impl H2Conn {
    /// Connects and runs the HTTP/2 handshake: over TLS when `tls` is given (h2 by ALPN),
    /// else h2c with prior knowledge (no upgrade).
    pub async fn connect(
        addr: SocketAddr,
        tls: Option<&crate::tls::TlsClient>,
    ) -> Result<Self, Failure> {
        Self::connect_with(addr, tls, H2Client::General).await
    }

    /// [`H2Conn::connect`] with the client `client`. The lean client sends its preface and
    /// SETTINGS with the first request, as the `h2` crate's does.
    pub async fn connect_with(
        addr: SocketAddr,
        tls: Option<&crate::tls::TlsClient>,
        client: H2Client,
    ) -> Result<Self, Failure> {
        let stream = net::connect_http(&addr, tls).await?;
        let (client, driver) = match client {
            H2Client::Lean => {
                let (shared, driver) = lean::start(stream);
                (Client::Lean(shared), driver)
            }
            H2Client::General => {
                let (send, conn) = h2::client::handshake(stream)
                    .await
                    .map_err(|e| h2_failure(&e))?;
                let driver = tokio::spawn(async move {
                    let _ = conn.await;
                });
                (Client::General(send), driver)
            }
        };
        Ok(Self {
            client,
            driver: std::sync::Arc::new(Driver(driver)),
            grpc_message: None,
        })
    }

    /// Whether the connection has ended (the server closed it, after a GOAWAY or not), seen
    /// without a system call: its driver, which reads it all the time, has returned (or, for
    /// the lean client, has seen a GOAWAY). A request on it would fail.
    pub fn is_closed(&self) -> bool {
        self.driver.0.is_finished()
            || matches!(&self.client, Client::Lean(shared) if shared.is_ended())
    }

    /// The `h2` crate's handle: a run with steps beyond static requests never takes the lean
    /// client ([`H2Client`]), so the error is not reached.
    fn general(&mut self) -> Result<&mut h2::client::SendRequest<Bytes>, Failure> {
        match &mut self.client {
            Client::General(send) => Ok(send),
            Client::Lean(_) => Err(Failure(error_kind::PROTOCOL)),
        }
    }

    /// Waits until the connection may open one more stream. Polled in place rather than by
    /// `SendRequest::ready`, which takes the handle by value: the clone that needs costs two
    /// locks of the connection's shared state per request (one to count the clone, one to
    /// drop it), on a path that takes a few more.
    async fn ready(&mut self) -> Result<(), Failure> {
        let send = self.general()?;
        std::future::poll_fn(|cx| send.poll_ready(cx))
            .await
            .map_err(|e| h2_failure(&e))
    }

    /// Sends one request on a new stream and reads the whole response.
    pub async fn request(&mut self, r: &H2Request) -> Result<Response, Failure> {
        match &self.client {
            Client::Lean(shared) => match &r.lean {
                Some(lean) => lean::request(shared, lean).await,
                // Not reached: a run with gRPC steps never takes the lean client.
                None => Err(Failure(error_kind::PROTOCOL)),
            },
            Client::General(_) => self.send(r.head(), r.body.clone(), &mut Discard).await,
        }
    }

    /// Sends one request on a new stream and returns the response head, its body (and
    /// trailers) still to read: gRPC reads its status from the trailers.
    pub async fn open(&mut self, r: &H2Request) -> Result<http::Response<h2::RecvStream>, Failure> {
        self.start(r.head(), r.body.clone()).await
    }

    /// Opens a new stream with `req`'s head and leaves its request body open: a streaming
    /// gRPC call sends its messages on the stream while it reads the answer.
    pub async fn open_stream(
        &mut self,
        req: http::Request<()>,
    ) -> Result<(h2::client::ResponseFuture, h2::SendStream<Bytes>), Failure> {
        self.ready().await?;
        self.general()?
            .send_request(req, false)
            .map_err(|e| h2_failure(&e))
    }

    /// Sends `req` with `body` on a new stream and returns the response head.
    async fn start(
        &mut self,
        req: http::Request<()>,
        body: Bytes,
    ) -> Result<http::Response<h2::RecvStream>, Failure> {
        self.ready().await?;
        let end = body.is_empty();
        let (response, mut stream) = self
            .general()?
            .send_request(req, end)
            .map_err(|e| h2_failure(&e))?;
        if !end {
            stream.send_data(body, true).map_err(|e| h2_failure(&e))?;
        }
        response.await.map_err(|e| h2_failure(&e))
    }

    /// Sends `req` with `body` on a new stream and reads the whole response into `sink`.
    pub async fn send<S: Sink>(
        &mut self,
        req: http::Request<()>,
        body: Bytes,
        sink: &mut S,
    ) -> Result<Response, Failure> {
        let response = self.start(req, body).await?;
        let status = response.status().as_u16();
        sink.status(status);
        if S::HEADERS {
            for (k, v) in response.headers() {
                sink.header(k.as_str(), v.as_bytes());
            }
        }
        let mut body = response.into_body();
        let mut received = 0u64;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|e| h2_failure(&e))?;
            received += chunk.len() as u64;
            sink.body(&chunk);
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        Ok(Response {
            status,
            keep_alive: true,
            bytes_received: received,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn speaks_http2_with_prior_knowledge() {
        // A listener that is not an HTTP/2 server: it reads the client preface and closes.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut preface = [0u8; 24];
            s.read_exact(&mut preface).await.unwrap();
            preface
        });
        let e = H2Conn::connect(addr, None).await.err();
        let preface = server.await.unwrap();
        assert_eq!(&preface, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        // The peer closed without a SETTINGS frame: the handshake or the first request fails.
        if let Some(e) = e {
            assert!(
                matches!(e.0, error_kind::RESET | error_kind::PROTOCOL),
                "{e:?}"
            );
        }
    }

    #[test]
    fn requests_are_checked_once() {
        let mut req = HttpRequest {
            path: Template::literal("/x"),
            ..Default::default()
        };
        req.headers
            .insert("Connection".into(), Template::literal("close"));
        req.headers.insert("X-Id".into(), Template::literal("7"));
        let r = H2Request::new(&req, false, "h:1", "").unwrap();
        assert_eq!(r.uri.to_string(), "http://h:1/x");
        let prefixed = H2Request::new(&req, false, "h:1", "/api").unwrap();
        assert_eq!(prefixed.uri.to_string(), "http://h:1/api/x");
        let over_tls = H2Request::new(&req, true, "h:1", "").unwrap();
        assert_eq!(over_tls.uri.to_string(), "https://h:1/x");
        assert!(r.headers.get("connection").is_none());
        assert_eq!(r.headers.get("x-id").unwrap(), "7");
        req.headers
            .insert("X-Bad".into(), Template::literal("a\nb"));
        assert!(H2Request::new(&req, false, "h:1", "").is_err());
    }
}
