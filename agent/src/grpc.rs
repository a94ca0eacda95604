//! gRPC calls over the HTTP/2 driver. The CLI has already encoded and framed the message
//! (see `stampede_core::grpc`): the agent sends those bytes as the body of
//! `POST /pkg.Service/Method` and never touches a descriptor or decodes protobuf. It reads the
//! response body through a [`FrameScanner`] (counting messages, trusting no length beyond
//! [`MAX_MESSAGE`]) and takes the status from the trailers (or from the head of a
//! trailers-only answer): `grpc-status` other than 0 fails the request with the error kind
//! `grpc_<code name>`.
//!
//! A call whose message or metadata holds templates is a [`DynamicCall`]: its message
//! rendered per call from the CLI's encoding program (`stampede_core::grpc::program`) into a
//! buffer sized once, its templated metadata values rendered beside the fixed head. A call
//! without templates never comes there and sends its frame as it always has.

use std::collections::BTreeMap;

use bytes::Bytes;
use stampede_core::grpc::program::{Encoder, ProgramError, VALUE_ERROR};
use stampede_core::grpc::{
    status_code, status_kind, FrameBytesError, FrameScanner, GrpcCall, MAX_MESSAGE,
};
use stampede_core::scenario::{Scenario, Step};
use stampede_core::stats::error_kind;

mod stream;

pub use stream::StreamCall;

use crate::dynamic::{CompileError, Context, DynamicFields, ReplyJudge, SessionVars};
use crate::h2::{h2_failure, H2Conn, H2Request};
use crate::net::Failure;

/// A call compiled once per step: the request head and its pre-framed body.
#[derive(Debug, Clone)]
pub struct GrpcRequest {
    request: H2Request,
    /// The parts a [`DynamicCall`] builds its requests from (the fixed metadata only).
    uri: http::Uri,
    headers: http::HeaderMap,
    frame: Bytes,
}

/// What one call brought back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status of the response head.
    pub status: u16,
    /// Bytes read for the reply: head, frames and trailers.
    pub received: u64,
    /// The error kind of a failed call; `None` for OK.
    pub error: Option<&'static str>,
    /// The call's `grpc-status` code, when the answer had one.
    pub grpc_status: Option<u8>,
}

/// The templated parts of a call, compiled once per run.
#[derive(Debug)]
pub struct DynamicCall {
    /// The message's program; `None` when only metadata is templated (the frame is sent).
    encoder: Option<Encoder>,
    /// Templated metadata: the name and the index of its template in `fields`.
    metadata: Vec<(http::HeaderName, usize)>,
    /// The program's templates, then the metadata's.
    fields: DynamicFields,
    /// The step's extraction and checks on the reply, when it has any.
    judge: Option<ReplyJudge>,
}

/// Why a gRPC step cannot be compiled; the message names the field relative to the step's
/// `grpc`.
#[derive(Debug, thiserror::Error)]
pub enum GrpcStepError {
    /// The encoding program does not decode.
    #[error("program: {0}")]
    Program(ProgramError),
    /// A metadata name HTTP/2 cannot carry.
    #[error("metadata.{name}: not a valid metadata name")]
    MetadataName {
        /// The name as the scenario wrote it.
        name: String,
    },
    /// A static metadata value with bytes HTTP forbids.
    #[error("metadata.{name}: not a valid metadata value")]
    MetadataValue {
        /// The metadata's name.
        name: String,
    },
    /// A templated metadata value that does not compile.
    #[error("metadata.{name}: {error}")]
    MetadataTemplate {
        /// The metadata's name.
        name: String,
        /// Why its value does not compile.
        error: CompileError,
    },
    /// A templated message field that does not compile.
    #[error("message: {0}")]
    MessageTemplate(CompileError),
    /// The stored frame cannot be sent as it is.
    #[error("frame: {0}")]
    Frame(FrameBytesError),
    /// A listed message's stored frame cannot be sent as it is.
    #[error("encoded[{index}].frame: {error}")]
    ListedFrame {
        /// The message's place in `messages`.
        index: usize,
        /// Why its frame is refused.
        error: FrameBytesError,
    },
    /// Neither a frame nor a program: the scenario skipped the CLI's resolution.
    #[error(
        "frame: the message was not encoded: gRPC steps are resolved by the CLI (stampede run)"
    )]
    NotEncoded,
    /// The method does not make a URI with the target's authority.
    #[error("method: {0}")]
    Method(http::uri::InvalidUri),
}

impl DynamicCall {
    /// The templated parts of `call` and the reply reading of its `step`, or `None` when it
    /// has neither (it is sent as compiled by [`GrpcRequest::new`]). The error names the
    /// field.
    pub fn new(
        call: &GrpcCall,
        step: &Step,
        scenario: &Scenario,
        slots: &BTreeMap<String, usize>,
    ) -> Result<Option<Self>, GrpcStepError> {
        let judge = ReplyJudge::new(call, &step.extract, step.check.as_ref(), slots);
        let encoder = call
            .program
            .as_ref()
            .map(Encoder::new)
            .transpose()
            .map_err(GrpcStepError::Program)?;
        let templated: Vec<(&String, &stampede_core::template::Template)> = call
            .metadata
            .iter()
            .filter(|(_, t)| t.as_static().is_none())
            .collect();
        if encoder.is_none() && templated.is_empty() && judge.is_none() {
            return Ok(None);
        }
        let program = encoder.as_ref().map_or(&[][..], Encoder::templates);
        let mut templates: Vec<_> = program.iter().collect();
        let mut metadata = Vec::new();
        for (k, t) in templated {
            let name = http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| GrpcStepError::MetadataName { name: k.clone() })?;
            metadata.push((name, templates.len()));
            templates.push(t);
        }
        let fields =
            DynamicFields::new(&templates, scenario, slots).map_err(|(i, error)| match metadata
                .iter()
                .find(|(_, slot)| *slot == i)
            {
                Some((name, _)) => GrpcStepError::MetadataTemplate {
                    name: name.to_string(),
                    error,
                },
                None => GrpcStepError::MessageTemplate(error),
            })?;
        Ok(Some(Self {
            encoder,
            metadata,
            fields,
            judge,
        }))
    }

    /// The call's error kind: its reply's, else the first failed check or missing value of
    /// the message it kept (the values go into the session's slots).
    pub fn verdict<'s>(&'s self, reply: &Reply, vars: &mut SessionVars) -> Option<&'s str> {
        ReplyJudge::verdict(self.judge.as_ref(), reply.error, Some(vars))
    }

    /// Renders and sends one call on a new stream of `conn`: (bytes sent, its reply). A
    /// rendered value that is not a value of its field is the call's error
    /// ([`VALUE_ERROR`]; a metadata value that is not one is `template`), sent nowhere, the
    /// connection kept.
    pub async fn call(
        &self,
        conn: &mut H2Conn,
        base: &GrpcRequest,
        ctx: &Context,
        vars: &mut SessionVars,
    ) -> Result<(u64, Reply), Failure> {
        let rendered = self.fields.render_with(ctx, vars, |render, scratch| {
            let body = match &self.encoder {
                Some(e) => {
                    let mut out = Vec::with_capacity(e.size_hint());
                    e.encode_frame(&mut out, scratch, render)
                        .map_err(|_| VALUE_ERROR)?;
                    Bytes::from(out)
                }
                None => base.frame.clone(),
            };
            let mut headers = base.headers.clone();
            for (name, slot) in &self.metadata {
                scratch.clear();
                render(*slot, scratch);
                let value =
                    http::HeaderValue::from_bytes(scratch).map_err(|_| error_kind::TEMPLATE)?;
                headers.insert(name.clone(), value);
            }
            Ok::<_, &'static str>(H2Request::from_parts(
                http::Method::POST,
                base.uri.clone(),
                headers,
                body,
            ))
        });
        let request = match rendered {
            Ok(r) => r,
            Err(kind) => {
                let reply = Reply {
                    status: 0,
                    received: 0,
                    error: Some(kind),
                    grpc_status: None,
                };
                return Ok((0, reply));
            }
        };
        let keep = self.judge.as_ref().map(|_| ReplyJudge::buffer(vars));
        let reply = exchange(conn, &request, keep).await?;
        Ok((request.len() as u64, reply))
    }
}

impl GrpcRequest {
    /// Compiles `call` for `authority` (`:scheme` https over TLS); `timeout` (the scenario's
    /// `request_timeout`) is sent as `grpc-timeout`, so the server gives up when the agent
    /// does. The error names the field.
    pub fn new(
        call: &GrpcCall,
        tls: bool,
        authority: &str,
        timeout: std::time::Duration,
    ) -> Result<Self, GrpcStepError> {
        // A call with a program has no frame: its `DynamicCall` renders one per call.
        let frame = match call.frame_bytes().map_err(GrpcStepError::Frame)? {
            Some(frame) => frame,
            // A call with a program, or with listed messages, renders its frames per call.
            None if call.program.is_some() || !call.encoded.is_empty() => Vec::new(),
            None => return Err(GrpcStepError::NotEncoded),
        };
        let scheme = if tls { "https" } else { "http" };
        let uri: http::Uri = format!("{scheme}://{authority}{}", call.path())
            .parse()
            .map_err(GrpcStepError::Method)?;
        let mut headers = http::HeaderMap::new();
        let fixed = [
            (http::header::CONTENT_TYPE, "application/grpc"),
            (http::header::TE, "trailers"),
            (http::header::USER_AGENT, "stampede"),
        ];
        for (k, v) in fixed {
            headers.insert(k, http::HeaderValue::from_static(v));
        }
        headers.insert("grpc-timeout", grpc_timeout(timeout));
        for (k, v) in &call.metadata {
            // A templated value is rendered per call by the step's `DynamicCall`.
            let Some(v) = v.as_static() else {
                continue;
            };
            let name = http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| GrpcStepError::MetadataName { name: k.clone() })?;
            let value = http::HeaderValue::from_str(v)
                .map_err(|_| GrpcStepError::MetadataValue { name: k.clone() })?;
            headers.insert(name, value);
        }
        let frame = Bytes::from(frame);
        Ok(Self {
            request: H2Request::from_parts(
                http::Method::POST,
                uri.clone(),
                headers.clone(),
                frame.clone(),
            ),
            uri,
            headers,
            frame,
        })
    }

    /// Approximate bytes sent (head fields and the frame).
    /// Bytes of the encoded call, as the per-step bytes-sent count takes them.
    pub fn len(&self) -> usize {
        self.request.len()
    }

    /// Whether the encoded call has no bytes.
    pub fn is_empty(&self) -> bool {
        self.request.is_empty()
    }

    /// Sends the call on a new stream of `conn` and reads its answer to the end.
    pub async fn call(&self, conn: &mut H2Conn) -> Result<Reply, Failure> {
        exchange(conn, &self.request, None).await
    }

    /// The call's method path (`/pkg.Service/Method`), for a failure sample.
    pub fn method_path(&self) -> &str {
        self.uri.path()
    }

    /// The call's fixed metadata, `name: value` a line, for a failure sample.
    pub fn metadata_text(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, value) in &self.headers {
            if !out.is_empty() {
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
        }
        out
    }
}

/// Sends `request` on a new stream of `conn` and reads its answer to the end, keeping its
/// last message in `keep` when given (for extraction and checks).
async fn exchange(
    conn: &mut H2Conn,
    request: &H2Request,
    mut keep: Option<&mut Vec<u8>>,
) -> Result<Reply, Failure> {
    conn.grpc_message = None;
    {
        let response = conn.open(request).await?;
        let status = response.status().as_u16();
        let (head, mut body) = response.into_parts();
        let mut reply = Reply {
            status,
            received: 0,
            error: None,
            grpc_status: None,
        };
        // A trailers-only answer (an error before any message) has its status in the head.
        if let Some(s) = head.headers.get("grpc-status") {
            reply.grpc_status = status_code(s.as_bytes());
            reply.error = status_error(s.as_bytes(), None);
            if reply.error.is_some() {
                conn.grpc_message = grpc_message(&head.headers);
            }
            return Ok(reply);
        }
        if status != 200 {
            reply.error = Some(error_kind::status(status));
            return Ok(reply);
        }
        let mut scan = FrameScanner::new(MAX_MESSAGE);
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|e| h2_failure(&e))?;
            reply.received += chunk.len() as u64;
            let _ = body.flow_control().release_capacity(chunk.len());
            if scan.feed_keeping(&chunk, keep.as_deref_mut()).is_err() {
                // Dropping the stream resets it: nothing more of a hostile body is read.
                reply.error = Some(error_kind::PROTOCOL);
                return Ok(reply);
            }
        }
        let trailers = body.trailers().await.map_err(|e| h2_failure(&e))?;
        reply.error = match trailers.as_ref().and_then(|t| t.get("grpc-status")) {
            Some(s) => {
                reply.grpc_status = status_code(s.as_bytes());
                status_error(s.as_bytes(), scan.finish().ok())
            }
            None => Some(error_kind::PROTOCOL),
        };
        if reply.error.is_some() {
            conn.grpc_message = trailers.as_ref().and_then(grpc_message);
        }
        Ok(reply)
    }
}

/// A `grpc-message`, percent-decoded as the gRPC spec encodes it; `None` when absent or
/// empty. At most a few hundred bytes are kept: it is shown in a failure sample only.
fn grpc_message(headers: &http::HeaderMap) -> Option<Box<str>> {
    let raw = headers.get("grpc-message")?.as_bytes();
    let raw = &raw[..raw.len().min(4 * stampede_core::samples::MAX_GRPC_MESSAGE)];
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            raw[i],
            raw.get(i + 1).copied().and_then(hex),
            raw.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    (!out.is_empty()).then(|| String::from_utf8_lossy(&out).into())
}

/// A `grpc-timeout` value: at most 8 digits and a unit, in the finest unit that fits.
fn grpc_timeout(t: std::time::Duration) -> http::HeaderValue {
    const MAX: u128 = 99_999_999;
    let (n, unit) = [
        (t.as_micros(), "u"),
        (t.as_millis(), "m"),
        (u128::from(t.as_secs()), "S"),
        (u128::from(t.as_secs() / 3600), "H"),
    ]
    .into_iter()
    .find(|(n, _)| *n <= MAX)
    .unwrap_or((MAX, "H"));
    // Digits and a letter: always a valid header value.
    http::HeaderValue::from_str(&format!("{n}{unit}"))
        .unwrap_or(http::HeaderValue::from_static("99999999H"))
}

/// The error kind of a `grpc-status`; `None` for OK with exactly one whole message (a unary
/// answer). `messages` is `None` when no body was read or the body did not end on a message
/// boundary.
fn status_error(value: &[u8], messages: Option<u32>) -> Option<&'static str> {
    match status_kind(value) {
        Ok(None) if messages == Some(1) => None,
        // OK, but not one whole message: not a unary answer.
        Ok(None) | Err(()) => Some(error_kind::PROTOCOL),
        Ok(Some(kind)) => Some(kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_message_counts_make_the_kind() {
        let protocol = Some(error_kind::PROTOCOL);
        assert_eq!(status_error(b"0", Some(1)), None);
        assert_eq!(status_error(b"0", Some(0)), protocol);
        assert_eq!(status_error(b"0", Some(2)), protocol);
        assert_eq!(status_error(b"0", None), protocol);
        assert_eq!(status_error(b"5", Some(0)), Some("grpc_not_found"));
        assert_eq!(status_error(b"x", Some(1)), protocol);
    }

    /// How the test server answers each call of a connection, in order.
    #[derive(Clone, Copy)]
    enum Answer {
        /// HTTP 200, this body, then `grpc-status` trailers (none when `None`).
        Body(&'static [u8], Option<&'static str>),
        /// A trailers-only answer: the status in the head, no body.
        TrailersOnly(&'static str),
    }

    /// A real HTTP/2 server on loopback answering its connection's calls with `answers`.
    async fn server(answers: Vec<Answer>) -> std::net::SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (tcp, _) = l.accept().await.unwrap();
            let mut conn = h2::server::handshake(tcp).await.unwrap();
            for answer in answers {
                let Some(Ok((_req, mut respond))) = conn.accept().await else {
                    return;
                };
                let mut head = http::Response::builder().status(200);
                if let Answer::TrailersOnly(code) = answer {
                    head = head.header("grpc-status", code);
                }
                let only = matches!(answer, Answer::TrailersOnly(_));
                let mut send = respond.send_response(head.body(()).unwrap(), only).unwrap();
                if let Answer::Body(body, status) = answer {
                    let _ = send.send_data(Bytes::from_static(body), status.is_none());
                    if let Some(code) = status {
                        let mut t = http::HeaderMap::new();
                        t.insert("grpc-status", code.parse().unwrap());
                        let _ = send.send_trailers(t);
                    }
                }
            }
            // Keep the connection until the client is done with it.
            while let Some(Ok(_)) = conn.accept().await {}
        });
        addr
    }

    #[tokio::test]
    async fn answers_are_read_from_a_real_h2_server_without_trusting_lengths() {
        let addr = server(vec![
            Answer::Body(&[0, 0, 0, 0, 2, 8, 1], Some("0")),
            Answer::TrailersOnly("14"),
            // A prefix that announces 4 GiB: refused at once, not waited for.
            Answer::Body(&[0, 0xff, 0xff, 0xff, 0xff, 1], Some("0")),
            Answer::Body(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0], Some("0")),
            Answer::Body(&[0, 0, 0, 0, 1, 8], Some("7")),
            Answer::Body(&[0, 0, 0, 0, 0], None),
        ])
        .await;
        let mut call = GrpcCall {
            method: "p.S/M".into(),
            ..Default::default()
        };
        call.frame = Some(stampede_core::protocol::encode_base64(
            &stampede_core::grpc::frame(b"").unwrap(),
        ));
        let timeout = std::time::Duration::from_secs(5);
        let request = GrpcRequest::new(&call, false, &addr.to_string(), timeout).unwrap();
        let mut conn = H2Conn::connect(addr, None).await.unwrap();
        let mut kinds = Vec::new();
        for _ in 0..6 {
            let reply =
                tokio::time::timeout(std::time::Duration::from_secs(5), request.call(&mut conn))
                    .await
                    .expect("answered in time")
                    .unwrap();
            assert_eq!(reply.status, 200);
            kinds.push(reply.error);
        }
        let protocol = Some(error_kind::PROTOCOL);
        assert_eq!(
            kinds,
            [
                None,
                Some("grpc_unavailable"),
                protocol,
                protocol,
                Some("grpc_permission_denied"),
                protocol,
            ]
        );
    }

    #[test]
    fn calls_are_compiled_once_with_their_metadata() {
        let mut call = GrpcCall {
            method: "p.S/M".into(),
            ..Default::default()
        };
        let timeout = std::time::Duration::from_secs(10);
        assert!(GrpcRequest::new(&call, false, "h:1", timeout)
            .unwrap_err()
            .to_string()
            .contains("resolved by the CLI"));
        call.frame = Some(stampede_core::protocol::encode_base64(
            &stampede_core::grpc::frame(b"\x08\x01").unwrap(),
        ));
        call.metadata.insert(
            "x-tenant".into(),
            stampede_core::template::Template::literal("blue"),
        );
        let r = GrpcRequest::new(&call, true, "h:1", timeout).unwrap();
        let head = r.request.head();
        assert_eq!(head.uri().to_string(), "https://h:1/p.S/M");
        assert_eq!(head.method(), http::Method::POST);
        assert_eq!(head.headers()["te"], "trailers");
        assert_eq!(head.headers()["content-type"], "application/grpc");
        assert_eq!(head.headers()["x-tenant"], "blue");
        assert_eq!(head.headers()["grpc-timeout"], "10000000u");
        let secs = |s| grpc_timeout(std::time::Duration::from_secs(s));
        assert_eq!(secs(1000), "1000000m");
        assert_eq!(secs(200_000), "200000S");
        assert_eq!(secs(u64::MAX), "99999999H");
        assert_eq!(r.request.body().as_ref(), [0, 0, 0, 0, 2, 8, 1]);
    }
}
