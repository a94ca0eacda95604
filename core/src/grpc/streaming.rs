//! Streaming gRPC calls: what a step says about the messages it sends and the messages it
//! expects, and the method's streaming kind the CLI reads from the schema.
//!
//! ```yaml
//! - grpc:                                 # server-streaming: one message, read to the end
//!     method: stampede.target.v1.Target/Stream
//!     message: { count: 5, gap_ms: 100 }
//!     expect: { messages: 5 }
//! - grpc:                                 # client-streaming: one message sent 10 times
//!     method: stampede.target.v1.Target/Collect
//!     message: { text: 'hi ${session.index}' }
//!     send: { count: 10, gap: 20ms }
//! - grpc:                                 # bidirectional: a list of messages
//!     method: stampede.target.v1.Target/Chat
//!     messages: [ { text: a }, { text: b } ]
//! ```
//!
//! Each listed message is encoded by the CLI as a unary call's message is (a frame, or a
//! program when it holds references) into [`EncodedMessage`]s. The agent renders a call's
//! messages when the call starts, then sends them `gap` apart while it reads the server's
//! messages as they come: each one is timed like an SSE event.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::program::{self, MessageProgram};
use super::{frame_from_base64, GrpcCall};
use crate::duration::HumanDuration;

/// Most messages a call sends: the listed ones times `send.count`.
pub const MAX_SENT: u32 = 100_000;
/// Most messages a step may list.
pub const MAX_LISTED: usize = 1_000;

/// A method's streaming kind, as its schema declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Streaming {
    /// `rpc M(A) returns (stream B)`: one message sent, the answers read to the end.
    Server,
    /// `rpc M(stream A) returns (B)`: several messages sent, one answer.
    Client,
    /// `rpc M(stream A) returns (stream B)`: both sides stream at once.
    Bidi,
}

impl Streaming {
    /// The kind of a method whose client and server sides stream as said; `None` for unary.
    pub fn of(client: bool, server: bool) -> Option<Self> {
        match (client, server) {
            (false, false) => None,
            (false, true) => Some(Self::Server),
            (true, false) => Some(Self::Client),
            (true, true) => Some(Self::Bidi),
        }
    }

    /// Whether the client side sends a stream of messages.
    pub fn client_streams(self) -> bool {
        matches!(self, Self::Client | Self::Bidi)
    }
}

/// How a call sends its messages: `count` times the message (or the list), `gap` apart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendPlan {
    /// How many times `message` (or the whole of `messages`) is sent. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// The wait between one message and the next (`20ms`); default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap: Option<HumanDuration>,
}

impl SendPlan {
    /// How many times the messages are sent.
    pub fn count(&self) -> u32 {
        self.count.unwrap_or(1)
    }

    /// The wait between two messages.
    pub fn gap(&self) -> std::time::Duration {
        self.gap.map_or(std::time::Duration::ZERO, |g| g.0)
    }
}

/// What a call's answer must hold, beyond a `grpc-status` of OK.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpcExpect {
    /// Exactly this many messages from the server; another count fails the call with the
    /// kind `grpc_messages`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<u32>,
}

/// One listed message as the CLI encoded it: a frame when it holds no reference, a program
/// otherwise (exactly one of the two).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EncodedMessage {
    /// The 5-byte gRPC prefix and the message, in base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame: Option<String>,
    /// How agents encode a message that holds references.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<MessageProgram>,
}

/// The error kind of a call whose server sent another number of messages than `expect`
/// asked for.
pub const MESSAGES_ERROR: &str = "grpc_messages";

/// Checks a call's streaming fields; the error is `(field suffix, reason)`.
pub(super) fn check(call: &GrpcCall) -> Result<(), (String, String)> {
    let field = |f: &str, why: &str| Err((f.to_string(), why.to_string()));
    if !call.messages.is_empty() && !call.message.is_null() {
        return field("messages", "give message or messages, not both");
    }
    if call.messages.len() > MAX_LISTED {
        return Err((
            "messages".into(),
            format!("at most {} messages", MAX_LISTED),
        ));
    }
    for (i, m) in call.messages.iter().enumerate() {
        m.check().map_err(|(f, why)| {
            let at = if f.is_empty() {
                format!("messages[{i}]")
            } else {
                format!("messages[{i}].{f}")
            };
            (at, why)
        })?;
    }
    let listed = call.messages.len().max(1) as u64;
    if let Some(send) = &call.send {
        if send.count == Some(0) {
            return field("send.count", "sends at least one message: give 1 or more");
        }
        if listed * u64::from(send.count()) > u64::from(MAX_SENT) {
            return Err((
                "send.count".into(),
                format!(
                    "a call sends at most {} messages (the listed ones times count)",
                    MAX_SENT
                ),
            ));
        }
    }
    let sends_many = call.messages.len() > 1 || call.send.as_ref().is_some_and(|s| s.count() > 1);
    if call.encoded.len() > MAX_LISTED {
        return field(
            "encoded",
            "more encoded messages than messages may be listed",
        );
    }
    for (i, e) in call.encoded.iter().enumerate() {
        let at = |f: &str| format!("encoded[{i}].{f}");
        match (&e.frame, &e.program) {
            (Some(_), Some(_)) | (None, None) => {
                return Err((at("frame"), "give a frame or a program".into()))
            }
            (Some(b64), None) => {
                frame_from_base64(b64).map_err(|e| (at("frame"), e.to_string()))?;
            }
            (None, Some(p)) => {
                program::Encoder::new(p).map_err(|e| (at("program"), e.to_string()))?;
            }
        }
    }
    if !call.encoded.is_empty() && call.encoded.len() != call.messages.len() {
        return field("encoded", "one encoded message for each of messages");
    }
    // Before the CLI has read the method's kind from the schema, there is nothing to check
    // it against (the CLI checks it there, with the method's name).
    let kind = match call.streaming {
        None if !call.is_resolved() => return Ok(()),
        kind => kind,
    };
    match kind {
        Some(k) if k.client_streams() => {}
        _ if sends_many || !call.messages.is_empty() => {
            return field(
                if call.messages.is_empty() { "send.count" } else { "messages" },
                "the method takes one message (it is not client- or bidirectional-streaming): give message",
            );
        }
        _ if call.send.as_ref().is_some_and(|s| s.gap.is_some()) => {
            return field(
                "send.gap",
                "the method takes one message: a gap applies to streamed messages",
            );
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_two_sides() {
        assert_eq!(Streaming::of(false, false), None);
        assert_eq!(Streaming::of(false, true), Some(Streaming::Server));
        assert_eq!(Streaming::of(true, false), Some(Streaming::Client));
        assert_eq!(Streaming::of(true, true), Some(Streaming::Bidi));
        assert!(!Streaming::Server.client_streams());
        assert!(Streaming::Bidi.client_streams());
        let p: SendPlan = serde_json::from_str(r#"{"count": 3, "gap": "20ms"}"#).unwrap();
        assert_eq!((p.count(), p.gap().as_millis()), (3, 20));
        assert_eq!(SendPlan::default().count(), 1);
    }

    fn call(json: serde_json::Value) -> GrpcCall {
        serde_json::from_value(json).unwrap()
    }

    /// What a hand-written or hostile step gets wrong is named by its field; the kind is
    /// checked once the CLI has written it.
    #[test]
    fn streaming_fields_are_checked_by_name() {
        let frame = crate::protocol::encode_base64(&[0, 0, 0, 0, 0]);
        let two = crate::protocol::encode_base64(&[0; 10]);
        for (json, field, why) in [
            (
                serde_json::json!({"method": "p.S/M", "message": {"a": 1}, "messages": [{}]}),
                "messages",
                "not both",
            ),
            (
                serde_json::json!({"method": "p.S/M", "send": {"count": 0}}),
                "send.count",
                "at least one",
            ),
            (
                serde_json::json!({"method": "p.S/M", "messages": [{}, {}], "send": {"count": 100000}}),
                "send.count",
                "at most 100000",
            ),
            (
                serde_json::json!({"method": "p.S/M", "messages": [{}], "encoded": [{}]}),
                "encoded[0].frame",
                "a frame or a program",
            ),
            (
                serde_json::json!({"method": "p.S/M", "messages": [{}], "encoded": [{"frame": two}]}),
                "encoded[0].frame",
                "",
            ),
            (
                serde_json::json!({"method": "p.S/M", "messages": [{}, {}], "encoded": [{"frame": frame}]}),
                "encoded",
                "one encoded message for each",
            ),
            (
                serde_json::json!({"method": "p.S/M", "messages": [{}], "encoded": [{"frame": frame}], "streaming": "server"}),
                "messages",
                "takes one message",
            ),
            (
                serde_json::json!({"method": "p.S/M", "frame": frame, "send": {"count": 2}}),
                "send.count",
                "takes one message",
            ),
            (
                serde_json::json!({"method": "p.S/M", "frame": frame, "send": {"gap": "5ms"}}),
                "send.gap",
                "takes one message",
            ),
        ] {
            let (f, e) = call(json.clone()).check().unwrap_err();
            assert_eq!(f, field, "{json}");
            assert!(e.contains(why), "{json}: {e}");
        }
        // Before the CLI wrote the kind, a list is taken as written.
        call(serde_json::json!({"method": "p.S/M", "messages": [{}, {"a": 1}], "send": {"count": 3, "gap": "1ms"}}))
            .check()
            .unwrap();
        let bidi = call(serde_json::json!({
            "method": "p.S/M", "messages": [{}], "encoded": [{"frame": frame}],
            "streaming": "bidi", "send": {"count": 3}, "expect": {"messages": 3}
        }));
        bidi.check().unwrap();
        assert!(bidi.is_resolved());
    }
}
