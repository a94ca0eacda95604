//! A WebSocket step: its upgrade or message rendered per session (templates, rows, extracted
//! values), run over the session's WebSocket, and every message it receives judged by the
//! step's `check`, the last one by its `extract`.

use std::collections::BTreeMap;

use stampede_core::extract::{Check, Extract, Response as Seen};
use stampede_core::protocol::Payload;
use stampede_core::scenario::Scenario;
use stampede_core::stats::error_kind;
use stampede_core::ws::WsAction;

use super::judge::Judge;
use super::{compile, request_sources, CompileError, Compiled, Context, Outcome, SessionVars};
use crate::net::Failure;
use crate::ws::{upgrade_request, WsConn};

/// What a WebSocket step does, compiled once per run.
#[derive(Debug)]
enum Action {
    Connect {
        path: Compiled,
        headers: Vec<(String, Compiled)>,
    },
    Send {
        /// A template (a text frame) or fixed bytes (a binary frame).
        message: Message,
        receive: u32,
    },
    Receive(u32),
    Ping,
    Close {
        code: u16,
        reason: String,
    },
}

#[derive(Debug)]
enum Message {
    Text(Compiled),
    Binary(Vec<u8>),
}

/// A WebSocket step, compiled once per run.
#[derive(Debug)]
pub struct DynamicWs {
    action: Action,
    judge: Judge,
    /// The `Host` header of the upgrade.
    authority: String,
    pub(super) per_request: Vec<usize>,
}

/// What a WebSocket step leaves the session's connection as.
#[derive(Debug)]
pub enum After {
    /// As it was (open, or none).
    Same,
    /// A new WebSocket, from a `connect`.
    Opened(WsConn),
    /// Closed: the session has no WebSocket any more.
    Closed,
}

/// Why a ws step cannot be compiled; the message names the field relative to the step.
#[derive(Debug, thiserror::Error)]
pub enum WsCompileError {
    /// The upgrade request's path template.
    #[error("ws.connect.path: {0}")]
    Path(CompileError),
    /// An upgrade header's value template.
    #[error("ws.connect.headers.{name}: {error}")]
    Header {
        /// The header's name.
        name: String,
        /// Why its value does not compile.
        error: CompileError,
    },
    /// A text message's template.
    #[error("ws.send.text: {0}")]
    Text(CompileError),
    /// A binary message that does not decode (a `file:` not inlined by the CLI).
    #[error("ws.send: {0}")]
    Binary(stampede_core::protocol::PayloadError),
}

impl DynamicWs {
    /// Compiles `action` of a step with `extract` and `check`; the error names the field
    /// relative to the step. A binary message from a file is read by the CLI before.
    pub fn new(
        source: &WsAction,
        extract: &BTreeMap<String, Extract>,
        check: Option<&Check>,
        scenario: &Scenario,
        slots: &BTreeMap<String, usize>,
        authority: &str,
        prefix: &str,
    ) -> Result<Self, WsCompileError> {
        let action = match source {
            WsAction::Connect(c) => {
                let mut path = c.path.clone();
                path.prepend(prefix);
                let path = compile(&path, scenario, slots).map_err(WsCompileError::Path)?;
                let headers = c
                    .headers
                    .iter()
                    .map(|(k, v)| {
                        compile(v, scenario, slots)
                            .map(|c| (k.clone(), c))
                            .map_err(|error| WsCompileError::Header {
                                name: k.clone(),
                                error,
                            })
                    })
                    .collect::<Result<_, _>>()?;
                Action::Connect { path, headers }
            }
            WsAction::Send { message, receive } => {
                let message = match message {
                    Payload::Text(t) => {
                        Message::Text(compile(t, scenario, slots).map_err(WsCompileError::Text)?)
                    }
                    p => Message::Binary(p.bytes().map_err(WsCompileError::Binary)?),
                };
                Action::Send {
                    message,
                    receive: *receive,
                }
            }
            WsAction::Receive(n) => Action::Receive(*n),
            WsAction::Ping => Action::Ping,
            WsAction::Close(c) => Action::Close {
                code: c.code,
                reason: c.reason.clone(),
            },
        };
        let per_request = request_sources(scenario, source.templates().into_iter().map(|(_, t)| t));
        Ok(Self {
            action,
            judge: Judge::new(extract, check, slots),
            authority: authority.to_string(),
            per_request,
        })
    }

    /// Whether the step opens a new WebSocket (the session's connection is replaced).
    pub fn connects(&self) -> bool {
        matches!(self.action, Action::Connect { .. })
    }

    /// Runs the step over the session's WebSocket `ws` (a `connect` opens a new one to
    /// `addr`). The error kind of a reply that is not the one expected goes in the outcome;
    /// a failure of the connection is the `Err`.
    pub async fn run<'s>(
        &'s self,
        ws: Option<&mut WsConn>,
        (addr, tls): (&std::net::SocketAddr, Option<&crate::tls::TlsClient>),
        ctx: &Context,
        vars: &mut SessionVars,
    ) -> Result<(Outcome<'s>, After), Failure> {
        ctx.bind_request(&self.per_request, vars);
        let mut out = Outcome {
            sent: 0,
            received: 0,
            keep_alive: true,
            error: None,
            status: 0,
            arrivals: None,
        };
        if let Action::Connect { path, headers } = &self.action {
            let mut target = std::mem::take(&mut vars.out);
            target.clear();
            path.render(ctx, vars, &mut target);
            let mut head = std::mem::take(&mut vars.body);
            head.clear();
            let mut bad = target.iter().any(|&b| b <= b' ' || b == 0x7f);
            for (k, v) in headers {
                head.extend_from_slice(k.as_bytes());
                head.extend_from_slice(b": ");
                let start = head.len();
                v.render(ctx, vars, &mut head);
                bad |= head[start..]
                    .iter()
                    .any(|&b| matches!(b, b'\r' | b'\n' | 0));
                head.extend_from_slice(b"\r\n");
            }
            let key = crate::ws::new_key();
            let request = upgrade_request(&target, &self.authority, &key, &head);
            vars.out = target;
            vars.body = head;
            if bad {
                return Err(Failure(error_kind::TEMPLATE));
            }
            let up = WsConn::connect(addr, tls, &request, &key).await?;
            out.sent = up.sent;
            out.received = up.received;
            out.status = up.status;
            return Ok(match up.conn {
                Some(c) => (out, After::Opened(c)),
                None => {
                    out.error = stampede_core::scenario::status_error(Some(&[101]), up.status);
                    out.keep_alive = false;
                    (out, After::Closed)
                }
            });
        }
        let ws = ws.ok_or(Failure(error_kind::WS_NOT_OPEN))?;
        let receive = match &self.action {
            Action::Connect { .. } => 0,
            Action::Send { message, receive } => {
                let (payload, text) = match message {
                    Message::Text(t) => {
                        let mut body = std::mem::take(&mut vars.body);
                        body.clear();
                        t.render(ctx, vars, &mut body);
                        let payload = body.clone();
                        vars.body = body;
                        (payload, true)
                    }
                    Message::Binary(b) => (b.clone(), false),
                };
                out.sent = ws.send(payload, text).await?;
                *receive
            }
            Action::Receive(n) => *n,
            Action::Ping => {
                let (sent, received) = ws.ping(b"stampede").await?;
                out.sent = sent;
                out.received = received;
                0
            }
            Action::Close { code, reason } => {
                out.sent = ws.close(*code, reason).await?;
                out.keep_alive = false;
                return Ok((out, After::Closed));
            }
        };
        for i in 0..receive {
            let m = ws.receive().await?;
            out.received += m.wire;
            if self.judge.is_empty() {
                continue;
            }
            let seen = Seen {
                status: 0,
                headers: &[],
                body: &m.payload,
                protobuf: None,
            };
            if let Some(kind) = self.judge.check(&seen) {
                out.error = Some(kind);
                return Ok((out, After::Same));
            }
            if i + 1 == receive {
                out.error = self.judge.extract(&seen, &mut vars.values);
            }
        }
        Ok((out, After::Same))
    }
}
