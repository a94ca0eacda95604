//! The agent's failure samples: the first few failed requests of each step and error kind,
//! built only when the book still wants one (so a run failing a million times builds a few),
//! outside the recorder's lock, and sent with the next Progress.

use std::sync::Mutex;

use stampede_core::samples::{
    excerpt, RowRef, Sample, SampleBook, MAX_BODY, MAX_REQUEST, MAX_ROWS, MAX_VALUE, MAX_VALUES,
};
use stampede_proto::v1;
use tokio::time::Instant;

use super::StepPlan;
use crate::dynamic::{Context, SessionVars};

/// The samples of one shard, off unless the run asks for them ([`SampleRecorder::new`]).
#[derive(Debug, Default)]
pub struct SampleRecorder {
    /// T0 of the run, when sampling is on.
    t0: Option<Instant>,
    book: Mutex<SampleBook>,
}

/// What a failed request left for its sample.
pub(super) struct Failed<'a> {
    pub(super) kind: &'a str,
    /// The HTTP status, 0 when there was none.
    pub(super) status: u16,
    pub(super) done: Instant,
}

impl SampleRecorder {
    /// Samples kept from `t0` on, when `on`.
    pub fn new(t0: Instant, on: bool) -> Self {
        Self {
            t0: on.then_some(t0),
            book: Mutex::default(),
        }
    }

    /// Whether the run samples its failures at all.
    pub fn on(&self) -> bool {
        self.t0.is_some()
    }

    fn book(&self) -> std::sync::MutexGuard<'_, SampleBook> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a sample of a failed request of `step` when the book still wants one of its
    /// kind: what was sent (from the step, or the session's rendered request), the rows its
    /// session used, and the answer.
    pub(super) fn note(
        &self,
        step: &StepPlan,
        (ctx, vars): (Option<&Context>, Option<&SessionVars>),
        failed: Failed<'_>,
    ) {
        let Some(t0) = self.t0 else { return };
        let Some(ordinal) = step.ordinal().and_then(|o| u32::try_from(o).ok()) else {
            return;
        };
        if !self.book().wants(ordinal, failed.kind) {
            return;
        }
        // A dynamic step keeps the start of a failed answer's body in the session's buffers
        // (more than MAX_BODY bytes marks a cut). A static step keeps none: its request
        // is not rendered per session, and its answer is read without a buffer, so that a
        // connection's task stays as small as it is.
        let body = match step {
            StepPlan::HttpDynamic { .. } => {
                vars.map(SessionVars::captured_body).unwrap_or_default()
            }
            _ => &[],
        };
        let offset = failed.done.saturating_duration_since(t0);
        let sample = Sample {
            offset_ms: u64::try_from(offset.as_millis()).unwrap_or(u64::MAX),
            step: ordinal,
            kind: failed.kind.to_string(),
            rows: ctx.zip(vars).map(rows).unwrap_or_default(),
            request: excerpt(&sent(step, vars), MAX_REQUEST),
            status: failed.status,
            body: excerpt(body, MAX_BODY),
        };
        self.book().offer(sample);
    }

    /// Moves the samples taken since the last Progress into `msg` (a Progress).
    pub fn attach(&self, msg: &mut v1::AgentMessage) {
        if self.t0.is_none() {
            return;
        }
        if let Some(v1::agent_message::Msg::Progress(p)) = msg.msg.as_mut() {
            p.failure_samples = stampede_proto::samples::samples_to_wire(self.book().take());
        }
    }
}

/// What a step sent: the request line (without its version), the gRPC method, or the start
/// of a tcp or udp payload.
fn sent(step: &StepPlan, vars: Option<&SessionVars>) -> Vec<u8> {
    match step {
        StepPlan::Http { request, .. } => request_line(request.bytes(false)).to_vec(),
        StepPlan::HttpDynamic { step, .. } => {
            let out = vars.map(SessionVars::rendered).unwrap_or_default();
            let method = step.method().as_bytes();
            // HTTP/1.1 renders the whole request, h2 the path alone.
            if out.starts_with(method) && out.get(method.len()) == Some(&b' ') {
                request_line(out).to_vec()
            } else {
                [method, b" ", out].concat()
            }
        }
        StepPlan::Tcp { request, send, .. } => match (send, vars) {
            (Some(_), Some(v)) if !v.payload().is_empty() => v.payload().to_vec(),
            _ => request.bytes().to_vec(),
        },
        StepPlan::Udp { request, send, .. } => match (send, vars) {
            (Some(_), Some(v)) if !v.payload().is_empty() => v.payload().to_vec(),
            _ => request.bytes().to_vec(),
        },
        StepPlan::Grpc { request, .. } => request.method_path().as_bytes().to_vec(),
        // A connect's request line; a message is not kept.
        StepPlan::Ws { step, .. } => match vars {
            Some(v) if step.connects() => [b"GET ".as_slice(), v.rendered()].concat(),
            _ => Vec::new(),
        },
        StepPlan::Think(_) => Vec::new(),
    }
    .into_iter()
    .take(MAX_REQUEST + 1)
    .collect()
}

/// An HTTP/1.1 request's first line without its version: `GET /login?user=u11`.
fn request_line(request: &[u8]) -> &[u8] {
    let line = request
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .map_or(request, |end| &request[..end]);
    line.strip_suffix(b" HTTP/1.1").unwrap_or(line)
}

/// The rows the session has bound, with their first values (none from a secret source).
fn rows((ctx, vars): (&Context, &SessionVars)) -> Vec<RowRef> {
    ctx.bound_rows(vars)
        .take(MAX_ROWS)
        .map(|(source, row, values)| RowRef {
            source: source.to_string(),
            row,
            values: values
                .into_iter()
                .take(MAX_VALUES)
                .map(|v| excerpt(v.as_bytes(), MAX_VALUE))
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::request_line;

    #[test]
    fn the_request_line_drops_the_version_and_the_head() {
        assert_eq!(
            request_line(b"GET /login?user=u11 HTTP/1.1\r\nHost: h\r\n\r\n"),
            b"GET /login?user=u11"
        );
        assert_eq!(request_line(b"GET /x"), b"GET /x");
    }
}
