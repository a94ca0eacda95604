//! The WebSocket step (`ws:`) of `ws://` and `wss://` targets: one action per step over the
//! session's WebSocket, from the upgrade to the close. Its file form is a map with one action
//! (`send` may come with `receive`), read into [`WsAction`], which cannot hold two.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::protocol::Payload;
use crate::template::Template;

/// Most messages one step may wait for.
pub const MAX_RECEIVE: u32 = 10_000;
/// Largest message a step sends or receives (and the agent's frame limit).
pub const MAX_MESSAGE: usize = 16 << 20;

/// One step over the session's WebSocket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "WsStepRepr", into = "WsStepRepr")]
pub enum WsAction {
    /// Opens a new connection and upgrades it (any open one is closed first); timed to the
    /// server's `101`.
    Connect(WsConnect),
    /// Sends a message (text, or binary from hex, base64 or a file) and then waits for
    /// `receive` messages; timed from the intended send to the last of them (the round trip),
    /// or to the send's end when `receive` is 0.
    Send {
        /// What to send.
        message: Payload,
        /// Messages to wait for after it; 0 to wait for none.
        receive: u32,
    },
    /// Waits for `receive` messages the server sends unasked (a feed, a broadcast).
    Receive(u32),
    /// Sends a ping and waits for its pong.
    Ping,
    /// Sends a close and waits for the server's (or its end of the connection).
    Close(WsClose),
}

/// The upgrade request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WsConnect {
    /// The path and query, appended to the target's path prefix; a template.
    #[serde(default = "root")]
    pub path: Template,
    /// Headers of the upgrade request (an `Authorization`, a cookie); values are templates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, Template>,
}

fn root() -> Template {
    Template::literal("/")
}

/// The close frame sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WsClose {
    /// The status code (1000, normal closure, unless told otherwise).
    #[serde(default = "normal")]
    pub code: u16,
    /// A short reason, at most 123 bytes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

fn normal() -> u16 {
    1000
}

/// The file form of a [`WsAction`].
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a ws action: { connect: {..} }, { send: {..}, receive: N }, { receive: N }, { ping: true } or { close: {..} }"
)]
struct WsStepRepr {
    /// The upgrade: `{ path: /chat, headers: { authorization: 'Bearer ${token}' } }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    connect: Option<WsConnect>,
    /// A message: `{ text: 'hello ${session.index}' }` (a text frame), or `{ hex: .. }`,
    /// `{ base64: .. }`, `{ file: .. }` (a binary frame).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    send: Option<Payload>,
    /// Messages to wait for: after `send`, its replies (the round trip); alone, messages the
    /// server sends unasked. The step's `check` and `extract` read each of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    receive: Option<u32>,
    /// `true`: a ping, timed to its pong.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    ping: bool,
    /// The close handshake: `{ code: 1000, reason: bye }` (both optional: `close: {}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    close: Option<WsClose>,
}

/// Why a ws step's fields make no one action; serde puts the message after the step's path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WsStepError {
    /// None, or more than one, of the action fields.
    #[error("give one action: connect, send (with or without receive), receive, ping or close")]
    OneAction,
    /// More messages awaited than a step may wait for.
    #[error("receive: {0} messages, at most {MAX_RECEIVE}")]
    TooManyReceives(u32),
    /// `receive: 0` alone, which would wait for nothing.
    #[error("receive: 0 messages waits for nothing; give at least 1")]
    ReceiveNothing,
}

impl TryFrom<WsStepRepr> for WsAction {
    type Error = WsStepError;
    fn try_from(r: WsStepRepr) -> Result<Self, WsStepError> {
        let actions = [
            r.connect.is_some(),
            r.send.is_some() || r.receive.is_some(),
            r.ping,
            r.close.is_some(),
        ];
        if actions.iter().filter(|a| **a).count() != 1 {
            return Err(WsStepError::OneAction);
        }
        if let Some(n) = r.receive {
            if n > MAX_RECEIVE {
                return Err(WsStepError::TooManyReceives(n));
            }
        }
        Ok(match r {
            WsStepRepr {
                connect: Some(c), ..
            } => WsAction::Connect(c),
            WsStepRepr {
                send: Some(message),
                receive,
                ..
            } => WsAction::Send {
                message,
                receive: receive.unwrap_or(0),
            },
            WsStepRepr {
                receive: Some(0), ..
            } => return Err(WsStepError::ReceiveNothing),
            WsStepRepr {
                receive: Some(n), ..
            } => WsAction::Receive(n),
            WsStepRepr { close: Some(c), .. } => WsAction::Close(c),
            _ => WsAction::Ping,
        })
    }
}

impl From<WsAction> for WsStepRepr {
    fn from(a: WsAction) -> Self {
        match a {
            WsAction::Connect(c) => Self {
                connect: Some(c),
                ..Self::default()
            },
            WsAction::Send { message, receive } => Self {
                send: Some(message),
                receive: (receive > 0).then_some(receive),
                ..Self::default()
            },
            WsAction::Receive(n) => Self {
                receive: Some(n),
                ..Self::default()
            },
            WsAction::Ping => Self {
                ping: true,
                ..Self::default()
            },
            WsAction::Close(c) => Self {
                close: Some(c),
                ..Self::default()
            },
        }
    }
}

impl JsonSchema for WsAction {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "WsAction".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        WsStepRepr::json_schema(g)
    }
}

impl WsAction {
    /// Messages the step waits for.
    pub fn receives(&self) -> u32 {
        match self {
            WsAction::Send { receive, .. } => *receive,
            WsAction::Receive(n) => *n,
            _ => 0,
        }
    }

    /// Every template with its field relative to the action (`connect.path`,
    /// `connect.headers.NAME`, `send.text`).
    pub fn templates(&self) -> Vec<(String, &Template)> {
        match self {
            WsAction::Connect(c) => std::iter::once(("connect.path".to_string(), &c.path))
                .chain(
                    c.headers
                        .iter()
                        .map(|(k, v)| (format!("connect.headers.{k}"), v)),
                )
                .collect(),
            WsAction::Send { message, .. } => message
                .template()
                .map(|t| ("send.text".to_string(), t))
                .into_iter()
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Mutable access to every template (the CLI's `${env:...}` resolution).
    pub fn templates_mut(&mut self) -> Vec<(String, &mut Template)> {
        match self {
            WsAction::Connect(c) => std::iter::once(("connect.path".to_string(), &mut c.path))
                .chain(
                    c.headers
                        .iter_mut()
                        .map(|(k, v)| (format!("connect.headers.{k}"), v)),
                )
                .collect(),
            WsAction::Send {
                message: Payload::Text(t),
                ..
            } => vec![("send.text".to_string(), t)],
            _ => Vec::new(),
        }
    }

    /// Checks what the types cannot; `Err((field, reason))`, the field relative to the action.
    pub fn check(&self) -> Result<(), (String, String)> {
        match self {
            WsAction::Connect(c) => {
                let path_ok = match c.path.segments().first() {
                    Some(crate::template::Segment::Literal(l)) => l.starts_with('/'),
                    _ => false,
                };
                if !path_ok || c.path.to_string().contains(char::is_whitespace) {
                    return Err((
                        "connect.path".into(),
                        format!("`{}` must start with / and hold no spaces", c.path),
                    ));
                }
                for k in c.headers.keys() {
                    let reserved = [
                        "host",
                        "upgrade",
                        "connection",
                        "sec-websocket-key",
                        "sec-websocket-version",
                    ];
                    if reserved.iter().any(|r| k.eq_ignore_ascii_case(r)) {
                        return Err((
                            format!("connect.headers.{k}"),
                            "is set by the upgrade itself".into(),
                        ));
                    }
                    if k.is_empty() || !k.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                        return Err((
                            format!("connect.headers.{k}"),
                            "is not a header name".into(),
                        ));
                    }
                }
                Ok(())
            }
            WsAction::Send { message, .. } => match message.template() {
                Some(_) => Ok(()),
                None => crate::protocol::check_payload(message, MAX_MESSAGE)
                    .map(|_| ())
                    .map_err(|why| ("send".into(), why.to_string())),
            },
            WsAction::Close(c) => {
                // RFC 6455 §7.4: codes an endpoint may send.
                let sendable = matches!(c.code, 1000..=1003 | 1007..=1014 | 3000..=4999);
                if !sendable {
                    return Err((
                        "close.code".into(),
                        format!(
                            "{} cannot be sent (1000 to 1003, 1007 to 1014, or 3000 to 4999)",
                            c.code
                        ),
                    ));
                }
                if c.reason.len() > 123 {
                    return Err((
                        "close.reason".into(),
                        format!("{} bytes, at most 123", c.reason.len()),
                    ));
                }
                Ok(())
            }
            WsAction::Receive(_) | WsAction::Ping => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<WsAction, String> {
        serde_norway::from_str::<WsAction>(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn every_action_parses_and_writes_back() {
        for (yaml, want) in [
            ("{ connect: { path: /echo } }", "connect"),
            (
                "{ send: { text: 'msg-${session.index}' }, receive: 1 }",
                "send",
            ),
            ("{ send: { hex: '00ff' } }", "send"),
            ("{ receive: 3 }", "receive"),
            ("{ ping: true }", "ping"),
            ("{ close: { code: 1000 } }", "close"),
            ("{ close: {} }", "close"),
        ] {
            let a = parse(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
            a.check().unwrap();
            let back = serde_norway::to_string(&a).unwrap();
            assert_eq!(parse(&back).unwrap(), a, "{yaml} -> {back}");
            assert!(back.contains(want), "{back}");
        }
        assert_eq!(
            parse("{ close: {} }").unwrap(),
            WsAction::Close(WsClose {
                code: 1000,
                reason: String::new()
            })
        );
        assert_eq!(parse("{ receive: 2 }").unwrap().receives(), 2);
    }

    #[test]
    fn wrong_forms_say_what_is_accepted() {
        for (yaml, says) in [
            ("{ connect: { path: /a }, ping: true }", "give one action"),
            ("{}", "give one action"),
            ("{ receive: 0 }", "at least 1"),
            ("{ receive: 10001 }", "at most 10000"),
            ("{ pong: true }", "unknown field"),
        ] {
            let e = parse(yaml).unwrap_err();
            assert!(e.contains(says), "{yaml}: {e}");
        }
        let bad_code = parse("{ close: { code: 1005 } }").unwrap();
        assert_eq!(bad_code.check().unwrap_err().0, "close.code");
        let bad_path = parse("{ connect: { path: echo } }").unwrap();
        assert_eq!(bad_path.check().unwrap_err().0, "connect.path");
        let reserved = parse("{ connect: { headers: { Upgrade: x } } }").unwrap();
        assert_eq!(reserved.check().unwrap_err().0, "connect.headers.Upgrade");
    }

    #[test]
    fn templates_are_listed_by_field() {
        let a = parse(
            "{ connect: { path: '/c/${session.index}', headers: { x-id: '${session.index}' } } }",
        )
        .unwrap();
        let fields: Vec<String> = a.templates().into_iter().map(|(f, _)| f).collect();
        assert_eq!(fields, ["connect.path", "connect.headers.x-id"]);
        let s = parse("{ send: { text: 'a ${session.index}' } }").unwrap();
        assert_eq!(s.templates().len(), 1);
    }
}
