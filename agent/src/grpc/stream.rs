//! Streaming gRPC calls (server-, client- and bidirectional-streaming methods) over the
//! HTTP/2 driver. The call's messages are rendered when it starts (each listed message from
//! its frame or its program), then sent on the open stream `gap` apart while the answer is
//! read at the same time: a bidirectional echo answers each message before the next is sent.
//! Each whole server message is an arrival, timed like an SSE event (the time to the first
//! from the intended send, the gaps between them), and the call's `grpc-status` is read from
//! the trailers as for a unary call.
//!
//! Sending waits for HTTP/2 flow-control capacity, so a slow server holds the sender back
//! instead of letting it buffer the whole stream.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use stampede_core::grpc::program::{Encoder, VALUE_ERROR};
use stampede_core::grpc::streaming::MESSAGES_ERROR;
use stampede_core::grpc::{
    frame_from_base64, status_code, status_kind, FrameScanner, GrpcCall, Streaming, MAX_MESSAGE,
};
use stampede_core::scenario::{Scenario, Step};
use stampede_core::stats::error_kind;
use tokio::time::Instant;

use super::{grpc_message, GrpcRequest, GrpcStepError, Reply};
use crate::dynamic::{Context, DynamicFields, ReplyJudge, SessionVars};
use crate::h2::{h2_failure, H2Conn};
use crate::http1::stream::Arrivals;
use crate::net::Failure;

/// One message of a call's list, as the agent makes it.
#[derive(Debug)]
enum Part {
    /// Encoded by the CLI: sent as it is.
    Frame(Bytes),
    /// Rendered per call; its templates start at `offset` among the call's.
    Program { encoder: Encoder, offset: usize },
}

/// A streaming call compiled once per run.
#[derive(Debug)]
pub struct StreamCall {
    kind: Streaming,
    /// The messages of one round, in order.
    parts: Vec<Part>,
    /// How many times the parts are sent.
    rounds: u32,
    gap: Duration,
    /// Exactly this many server messages, when given.
    expect: Option<u32>,
    /// Templated metadata: the name and the index of its template in `fields`.
    metadata: Vec<(http::HeaderName, usize)>,
    /// The parts' templates, then the metadata's; `None` when there are none.
    fields: Option<DynamicFields>,
    /// The step's extraction and checks on the last server message, when it has any.
    judge: Option<ReplyJudge>,
}

/// What a streamed call brought back: bytes sent, the reply and its messages' arrivals.
pub(crate) type Streamed = (u64, Reply, Option<Box<Arrivals>>);

impl StreamCall {
    /// The streaming call of `call`, or `None` for a unary method. The error names the
    /// field.
    pub fn new(
        call: &GrpcCall,
        step: &Step,
        scenario: &Scenario,
        slots: &BTreeMap<String, usize>,
    ) -> Result<Option<Self>, GrpcStepError> {
        let Some(kind) = call.streaming else {
            return Ok(None);
        };
        let judge = ReplyJudge::new(call, &step.extract, step.check.as_ref(), slots);
        let mut parts = Vec::new();
        let mut templates = Vec::new();
        let mut add = |frame: Option<&str>,
                       program: Option<&stampede_core::grpc::MessageProgram>,
                       index: Option<usize>|
         -> Result<(), GrpcStepError> {
            match (frame, program) {
                (Some(b64), _) => {
                    let bytes = frame_from_base64(b64).map_err(|error| match index {
                        Some(index) => GrpcStepError::ListedFrame { index, error },
                        None => GrpcStepError::Frame(error),
                    })?;
                    parts.push(Part::Frame(Bytes::from(bytes)));
                }
                (None, Some(p)) => {
                    let encoder = Encoder::new(p).map_err(GrpcStepError::Program)?;
                    if encoder.templates().is_empty() {
                        // Nothing to render: encoded once.
                        let mut out = Vec::with_capacity(encoder.size_hint());
                        encoder
                            .encode_frame(&mut out, &mut Vec::new(), &mut |_, _| {})
                            .map_err(|_| GrpcStepError::NotEncoded)?;
                        parts.push(Part::Frame(Bytes::from(out)));
                        return Ok(());
                    }
                    let offset = templates.len();
                    templates.extend(encoder.templates().iter().cloned());
                    parts.push(Part::Program { encoder, offset });
                }
                (None, None) => return Err(GrpcStepError::NotEncoded),
            }
            Ok(())
        };
        if call.messages.is_empty() {
            add(call.frame.as_deref(), call.program.as_ref(), None)?;
        } else {
            if call.encoded.len() != call.messages.len() {
                return Err(GrpcStepError::NotEncoded);
            }
            for (i, e) in call.encoded.iter().enumerate() {
                add(e.frame.as_deref(), e.program.as_ref(), Some(i))?;
            }
        }
        let mut metadata = Vec::new();
        for (k, t) in call
            .metadata
            .iter()
            .filter(|(_, t)| t.as_static().is_none())
        {
            let name = http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| GrpcStepError::MetadataName { name: k.clone() })?;
            metadata.push((name, templates.len()));
            templates.push(t.clone());
        }
        let fields = if templates.is_empty() {
            None
        } else {
            let refs: Vec<_> = templates.iter().collect();
            Some(
                DynamicFields::new(&refs, scenario, slots).map_err(|(i, error)| match metadata
                    .iter()
                    .find(|(_, slot)| *slot == i)
                {
                    Some((name, _)) => GrpcStepError::MetadataTemplate {
                        name: name.to_string(),
                        error,
                    },
                    None => GrpcStepError::MessageTemplate(error),
                })?,
            )
        };
        let send = call.send.clone().unwrap_or_default();
        Ok(Some(Self {
            kind,
            parts,
            rounds: send.count(),
            gap: send.gap(),
            expect: call.expect.and_then(|e| e.messages),
            metadata,
            fields,
            judge,
        }))
    }

    /// Whether the call renders templates or reads its reply, and so needs the run's
    /// dynamic context.
    pub fn is_dynamic(&self) -> bool {
        self.fields.is_some() || self.judge.is_some()
    }

    /// The call's error kind: its reply's, else the first failed check or missing value of
    /// the last server message (the values go into the session's slots).
    pub fn verdict<'s>(&'s self, reply: &Reply, vars: Option<&mut SessionVars>) -> Option<&'s str> {
        ReplyJudge::verdict(self.judge.as_ref(), reply.error, vars)
    }

    /// Runs one call on a new stream of `conn`: renders its messages and metadata (a value
    /// that is not one of its field is the call's error, sent nowhere), sends them while
    /// reading the answer, and times each server message.
    pub async fn call(
        &self,
        conn: &mut H2Conn,
        base: &GrpcRequest,
        mut dynamic: Option<(&Context, &mut SessionVars)>,
    ) -> Result<Streamed, Failure> {
        let mut headers = base.headers.clone();
        let frames = match (&self.fields, dynamic.as_mut()) {
            (None, _) => Ok(self
                .parts
                .iter()
                .map(|p| match p {
                    Part::Frame(b) => b.clone(),
                    // A program with templates sets fields; one without is a frame.
                    Part::Program { .. } => Bytes::new(),
                })
                .collect::<Vec<_>>()),
            (Some(fields), Some((ctx, vars))) => {
                fields.render_with(ctx, vars, |render, scratch| {
                    self.render(&mut headers, render, scratch)
                })
            }
            (Some(_), None) => return Err(Failure(error_kind::PROTOCOL)),
        };
        let frames = match frames {
            Ok(f) => f,
            Err(kind) => {
                let reply = Reply {
                    status: 0,
                    received: 0,
                    error: Some(kind),
                    grpc_status: None,
                };
                return Ok((0, reply, None));
            }
        };
        let head_len = (base.request.len() - base.frame.len()) as u64;
        let sent =
            head_len + u64::from(self.rounds) * frames.iter().map(|f| f.len() as u64).sum::<u64>();
        let mut req = http::Request::new(());
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = base.uri.clone();
        *req.headers_mut() = headers;
        conn.grpc_message = None;
        let (response, mut stream) = conn.open_stream(req).await?;
        let sending = send_all(&mut stream, &frames, self.rounds, self.gap);
        let keep = match (&self.judge, dynamic) {
            (Some(_), Some((_, vars))) => Some(ReplyJudge::buffer(vars)),
            _ => None,
        };
        let receiving = self.receive(response, keep);
        tokio::pin!(sending, receiving);
        let mut sent_all = false;
        let (reply, arrivals, message) = loop {
            tokio::select! {
                r = &mut receiving => break r?,
                // A failed send shows in the answer too (a reset stream, or the server's
                // status): the answer says what happened.
                _ = &mut sending, if !sent_all => sent_all = true,
            }
        };
        if reply.error.is_some() {
            conn.grpc_message = message;
        }
        Ok((sent, reply, arrivals))
    }

    /// Renders each part and the templated metadata into `headers`: the frames of one round.
    fn render(
        &self,
        headers: &mut http::HeaderMap,
        render: &mut dyn FnMut(usize, &mut Vec<u8>),
        scratch: &mut Vec<u8>,
    ) -> Result<Vec<Bytes>, &'static str> {
        let mut frames = Vec::with_capacity(self.parts.len());
        for p in &self.parts {
            frames.push(match p {
                Part::Frame(b) => b.clone(),
                Part::Program { encoder, offset } => {
                    let mut out = Vec::with_capacity(encoder.size_hint());
                    encoder
                        .encode_frame(&mut out, scratch, &mut |i, buf| render(offset + i, buf))
                        .map_err(|_| VALUE_ERROR)?;
                    Bytes::from(out)
                }
            });
        }
        for (name, slot) in &self.metadata {
            scratch.clear();
            render(*slot, scratch);
            let value = http::HeaderValue::from_bytes(scratch).map_err(|_| error_kind::TEMPLATE)?;
            headers.insert(name.clone(), value);
        }
        Ok(frames)
    }

    /// Reads the answer to its trailers, timing each whole message as it arrives.
    async fn receive(
        &self,
        response: h2::client::ResponseFuture,
        mut keep: Option<&mut Vec<u8>>,
    ) -> Result<(Reply, Option<Box<Arrivals>>, Option<Box<str>>), Failure> {
        let response = response.await.map_err(|e| h2_failure(&e))?;
        let status = response.status().as_u16();
        let (head, mut body) = response.into_parts();
        let mut reply = Reply {
            status,
            received: 0,
            error: None,
            grpc_status: None,
        };
        // A trailers-only answer: an error (or an empty stream) before any message.
        if let Some(s) = head.headers.get("grpc-status") {
            reply.grpc_status = status_code(s.as_bytes());
            reply.error = self.judge(s.as_bytes(), Some(0));
            let message = reply.error.and(grpc_message(&head.headers));
            return Ok((reply, None, message));
        }
        if status != 200 {
            reply.error = Some(error_kind::status(status));
            return Ok((reply, None, None));
        }
        let mut scan = FrameScanner::new(MAX_MESSAGE);
        let mut arrivals = Arrivals::default();
        let mut last = None;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|e| h2_failure(&e))?;
            let at = Instant::now();
            reply.received += chunk.len() as u64;
            let _ = body.flow_control().release_capacity(chunk.len());
            let before = scan.messages();
            if scan.feed_keeping(&chunk, keep.as_deref_mut()).is_err() {
                // Dropping the stream resets it: nothing more of a hostile body is read.
                reply.error = Some(error_kind::PROTOCOL);
                return Ok((reply, None, None));
            }
            for _ in before..scan.messages() {
                arrivals.arrive(at, &mut last);
            }
        }
        let trailers = body.trailers().await.map_err(|e| h2_failure(&e))?;
        let mut message = None;
        reply.error = match trailers.as_ref().and_then(|t| t.get("grpc-status")) {
            Some(s) => {
                reply.grpc_status = status_code(s.as_bytes());
                self.judge(s.as_bytes(), scan.finish().ok())
            }
            None => Some(error_kind::PROTOCOL),
        };
        if reply.error.is_some() {
            message = trailers.as_ref().and_then(grpc_message);
        }
        let arrivals = (arrivals.events > 0).then(|| Box::new(arrivals));
        Ok((reply, arrivals, message))
    }

    /// The error kind of a `grpc-status` after `messages` whole server messages (`None`
    /// when the body did not end on a message boundary).
    fn judge(&self, status: &[u8], messages: Option<u32>) -> Option<&'static str> {
        match (status_kind(status), messages) {
            (Ok(Some(kind)), _) => Some(kind),
            (Err(()), _) | (Ok(None), None) => Some(error_kind::PROTOCOL),
            (Ok(None), Some(n)) => match self.expect {
                Some(want) if want != n => Some(MESSAGES_ERROR),
                // A client stream is answered with one message, as a unary call is.
                None if self.kind == Streaming::Client && n != 1 => Some(error_kind::PROTOCOL),
                _ => None,
            },
        }
    }
}

/// Sends `rounds` times each of `frames`, `gap` apart, then ends the request stream. Each
/// frame waits for flow-control capacity, so at most a window is ever buffered.
async fn send_all(
    stream: &mut h2::SendStream<Bytes>,
    frames: &[Bytes],
    rounds: u32,
    gap: Duration,
) -> Result<(), Failure> {
    let total = frames.len() * rounds as usize;
    let mut n = 0;
    for _ in 0..rounds {
        for f in frames {
            if n > 0 && !gap.is_zero() {
                tokio::time::sleep(gap).await;
            }
            n += 1;
            send_frame(stream, f.clone(), n == total).await?;
        }
    }
    if total == 0 {
        stream
            .send_data(Bytes::new(), true)
            .map_err(|e| h2_failure(&e))?;
    }
    Ok(())
}

/// Sends one frame as flow control lets it go, ending the stream after it when `end`.
async fn send_frame(
    stream: &mut h2::SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
) -> Result<(), Failure> {
    while !data.is_empty() {
        stream.reserve_capacity(data.len());
        let granted = match std::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(c) => c.map_err(|e| h2_failure(&e))?,
            // The stream was closed (the server answered, or reset it).
            None => return Err(Failure(error_kind::RESET)),
        };
        if granted == 0 {
            continue;
        }
        let chunk = data.split_to(granted.min(data.len()));
        stream
            .send_data(chunk, end && data.is_empty())
            .map_err(|e| h2_failure(&e))?;
    }
    Ok(())
}
