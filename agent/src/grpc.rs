//! gRPC calls over the HTTP/2 driver. The CLI has already encoded and framed the message
//! (see `stampede_core::grpc`): the agent sends those bytes as the body of
//! `POST /pkg.Service/Method` and never touches a descriptor or decodes protobuf. It reads the
//! response body through a [`FrameScanner`] (counting messages, trusting no length beyond
//! [`MAX_MESSAGE`]) and takes the status from the trailers (or from the head of a
//! trailers-only answer): `grpc-status` other than 0 fails the request with the error kind
//! `grpc_<code name>`.

use bytes::Bytes;
use stampede_core::grpc::{status_kind, FrameScanner, GrpcCall, MAX_MESSAGE};
use stampede_core::stats::error_kind;

use crate::h2::{h2_failure, H2Conn, H2Request};
use crate::net::Failure;

/// A call compiled once per step: the request head and its pre-framed body.
#[derive(Debug, Clone)]
pub struct GrpcRequest {
    request: H2Request,
}

/// What one call brought back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status of the response head.
    pub status: u16,
    pub received: u64,
    /// The error kind of a failed call; `None` for OK.
    pub error: Option<&'static str>,
}

impl GrpcRequest {
    /// Compiles `call` for `authority` (`:scheme` https over TLS); the error names the field.
    pub fn new(call: &GrpcCall, tls: bool, authority: &str) -> Result<Self, String> {
        let frame = call
            .frame_bytes()
            .map_err(|e| format!("frame: {e}"))?
            .ok_or(
            "frame: the message was not encoded: gRPC steps are resolved by the CLI (stampede run)",
        )?;
        let scheme = if tls { "https" } else { "http" };
        let uri: http::Uri = format!("{scheme}://{authority}{}", call.path())
            .parse()
            .map_err(|e| format!("method: {e}"))?;
        let mut headers = http::HeaderMap::new();
        let fixed = [
            (http::header::CONTENT_TYPE, "application/grpc"),
            (http::header::TE, "trailers"),
            (http::header::USER_AGENT, "stampede"),
        ];
        for (k, v) in fixed {
            headers.insert(k, http::HeaderValue::from_static(v));
        }
        for (k, v) in &call.metadata {
            let name = http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("metadata.{k}: not a valid metadata name"))?;
            let value = http::HeaderValue::from_str(v)
                .map_err(|_| format!("metadata.{k}: not a valid metadata value"))?;
            headers.insert(name, value);
        }
        Ok(Self {
            request: H2Request::from_parts(http::Method::POST, uri, headers, Bytes::from(frame)),
        })
    }

    /// Approximate bytes sent (head fields and the frame).
    pub fn len(&self) -> usize {
        self.request.len()
    }

    pub fn is_empty(&self) -> bool {
        self.request.is_empty()
    }

    /// Sends the call on a new stream of `conn` and reads its answer to the end.
    pub async fn call(&self, conn: &mut H2Conn) -> Result<Reply, Failure> {
        let response = conn.open(&self.request).await?;
        let status = response.status().as_u16();
        let (head, mut body) = response.into_parts();
        let mut reply = Reply {
            status,
            received: 0,
            error: None,
        };
        // A trailers-only answer (an error before any message) has its status in the head.
        if let Some(s) = head.headers.get("grpc-status") {
            reply.error = status_error(s.as_bytes(), None);
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
            if scan.feed(&chunk).is_err() {
                // Dropping the stream resets it: nothing more of a hostile body is read.
                reply.error = Some(error_kind::PROTOCOL);
                return Ok(reply);
            }
        }
        let trailers = body.trailers().await.map_err(|e| h2_failure(&e))?;
        reply.error = match trailers.as_ref().and_then(|t| t.get("grpc-status")) {
            Some(s) => status_error(s.as_bytes(), scan.finish().ok()),
            None => Some(error_kind::PROTOCOL),
        };
        Ok(reply)
    }
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

    #[test]
    fn calls_are_compiled_once_with_their_metadata() {
        let mut call = GrpcCall {
            method: "p.S/M".into(),
            ..Default::default()
        };
        assert!(GrpcRequest::new(&call, false, "h:1")
            .unwrap_err()
            .contains("resolved by the CLI"));
        call.frame = Some(stampede_core::protocol::encode_base64(
            &stampede_core::grpc::frame(b"\x08\x01").unwrap(),
        ));
        call.metadata.insert("x-tenant".into(), "blue".into());
        let r = GrpcRequest::new(&call, true, "h:1").unwrap();
        let head = r.request.head();
        assert_eq!(head.uri().to_string(), "https://h:1/p.S/M");
        assert_eq!(head.method(), http::Method::POST);
        assert_eq!(head.headers()["te"], "trailers");
        assert_eq!(head.headers()["content-type"], "application/grpc");
        assert_eq!(head.headers()["x-tenant"], "blue");
        assert_eq!(r.request.body().as_ref(), [0, 0, 0, 0, 2, 8, 1]);
    }
}
