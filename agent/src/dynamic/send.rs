//! A dynamic tcp or udp step: its `send` payload rendered per request when it is a template,
//! its reply's payload captured for the judge when it extracts or checks.

use std::collections::BTreeMap;

use stampede_core::extract::{Check, Extract, Response as Seen};
use stampede_core::protocol::Payload;
use stampede_core::scenario::Scenario;

use super::{compile, request_sources, CompileError, Compiled, Context, Outcome, SessionVars};
use crate::net::Failure;

use super::judge::Judge;

/// A tcp or udp step that is not the same bytes every time, or whose reply is read: its
/// `send` payload rendered per request when it is a template, its reply's payload captured
/// when it extracts or checks. The framing, timeout and `expect` stay in the step's
/// `FramedRequest` or `DatagramRequest`.
#[derive(Debug)]
pub struct DynamicSend {
    /// `None`: the payload is static, already framed in the request.
    send: Option<Compiled>,
    per_request: Vec<usize>,
    judge: Judge,
}

/// A tcp or udp step's `send` template that does not compile.
#[derive(Debug, thiserror::Error)]
#[error("send: {0}")]
pub struct SendCompileError(pub CompileError);

impl DynamicSend {
    /// Compiles a `tcp` or `udp` step's `send` (when a template), `extract` and `check`;
    /// `None` when it has none of them and so stays on the static path.
    pub fn new(
        send: &Payload,
        extract: &BTreeMap<String, Extract>,
        check: Option<&Check>,
        scenario: &Scenario,
        slots: &BTreeMap<String, usize>,
    ) -> Result<Option<Self>, SendCompileError> {
        let template = send.template();
        if template.is_none() && extract.is_empty() && check.is_none() {
            return Ok(None);
        }
        Ok(Some(Self {
            send: template
                .map(|t| compile(t, scenario, slots))
                .transpose()
                .map_err(SendCompileError)?,
            per_request: request_sources(scenario, template.into_iter()),
            judge: Judge::new(extract, check, slots),
        }))
    }

    /// Renders the payload into `vars.body` (binding the next rows of `per: request`
    /// sources); `false` when it is static.
    fn render(&self, ctx: &Context, vars: &mut SessionVars) -> bool {
        let Some(send) = &self.send else {
            return false;
        };
        ctx.bind_request(&self.per_request, vars);
        let mut body = std::mem::take(&mut vars.body);
        body.clear();
        send.render(ctx, vars, &mut body);
        vars.body = body;
        true
    }

    /// The captured reply's verdict: checks, then extraction into the session's values.
    fn verdict<'s>(&'s self, vars: &mut SessionVars) -> Option<&'s str> {
        let seen = Seen {
            status: 0,
            headers: &[],
            body: super::captured(&vars.capture),
            protobuf: None,
        };
        self.judge.verdict(&seen, &mut vars.values)
    }

    fn outcome(&self, sent: u64, received: u64, vars: &mut SessionVars) -> Outcome<'_> {
        Outcome {
            sent,
            received,
            keep_alive: true,
            error: if self.judge.is_empty() {
                None
            } else {
                self.verdict(vars)
            },
            status: 0,
            arrivals: None,
        }
    }

    /// One framed request over a tcp or unix stream.
    pub async fn tcp<'s>(
        &'s self,
        conn: &mut crate::stream::StreamConn,
        req: &crate::stream::FramedRequest,
        ctx: &Context,
        vars: &mut SessionVars,
    ) -> Result<Outcome<'s>, Failure> {
        let capture = !self.judge.is_empty();
        let mut out = std::mem::take(&mut vars.out);
        let mut reply = vars.take_reply(capture);
        // A static payload goes out as the step framed it once; only a template is framed here.
        let framed = if self.render(ctx, vars) {
            req.frame(&vars.body, &mut out).map(|()| true)
        } else {
            Ok(false)
        };
        let exchanged = match framed {
            Ok(rendered) => {
                let bytes = if rendered { &out[..] } else { req.bytes() };
                conn.exchange(bytes, req, capture.then_some(&mut reply))
                    .await
                    .map(|received| (bytes.len() as u64, received))
            }
            Err(f) => Err(f),
        };
        vars.out = out;
        vars.put_reply(reply, capture);
        let (sent, received) = exchanged?;
        Ok(self.outcome(sent, received, vars))
    }

    /// One datagram.
    pub async fn udp<'s>(
        &'s self,
        conn: &mut crate::udp::UdpConn,
        req: &crate::udp::DatagramRequest,
        deadline: tokio::time::Instant,
        ctx: &Context,
        vars: &mut SessionVars,
    ) -> Result<Outcome<'s>, Failure> {
        let capture = !self.judge.is_empty();
        let mut reply = vars.take_reply(capture);
        let received = if self.render(ctx, vars) {
            conn.exchange(&vars.body, req, deadline, capture.then_some(&mut reply))
                .await
        } else {
            conn.exchange(req.bytes(), req, deadline, capture.then_some(&mut reply))
                .await
        };
        vars.put_reply(reply, capture);
        let sent = if self.send.is_some() {
            vars.body.len()
        } else {
            req.len()
        } as u64;
        Ok(self.outcome(sent, received?, vars))
    }
}
