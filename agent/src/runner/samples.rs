//! The agent's failure samples: the first few failed requests of each step and error kind,
//! built only when the book still wants one (so a run failing a million times builds a few),
//! outside the recorder's lock, and sent with the next Progress.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use stampede_core::samples::{
    excerpt, mask, mask_order, RowRef, Sample, SampleBook, MAX_BODY, MAX_DEBUG_BODY,
    MAX_GRPC_MESSAGE, MAX_HEADERS, MAX_REQUEST, MAX_ROWS, MAX_SENT_BODY, MAX_VALUE, MAX_VALUES,
};
use stampede_core::stats::error_kind;
use stampede_proto::v1;
use tokio::time::Instant;

use super::StepPlan;
use crate::dynamic::{Context, SessionVars};

/// Bytes of each part of a request (line, headers, body) masked before it is cut for a
/// sample: far more than a sample keeps, so that a cut never shows what masking would hide.
const MASK_WINDOW: usize = 16 << 10;

/// The samples of one shard, off unless the run asks for them ([`SampleRecorder::new`]),
/// and its debug exchanges (`stampede run --debug N`): the shard's first requests with their
/// answers, failed or not, shown the way samples are.
#[derive(Debug, Default)]
pub struct SampleRecorder {
    /// T0 of the run, when sampling or debugging is on.
    t0: Option<Instant>,
    /// Whether failures are sampled.
    sampling: bool,
    book: Mutex<SampleBook>,
    /// Values never shown (the scenario's `${env:...}` values), longest first.
    masked: Vec<Vec<u8>>,
    /// Debug exchanges still to take: one atomic read is all a request pays once it is 0.
    debug_left: AtomicU32,
    /// Debug exchanges taken and not yet sent.
    debug: Mutex<Vec<Sample>>,
}

/// What a failed request left for its sample (or any request, for a debug print).
#[derive(Clone, Copy)]
pub(super) struct Failed<'a> {
    pub(super) kind: &'a str,
    /// The HTTP status, 0 when there was none.
    pub(super) status: u16,
    pub(super) done: Instant,
    /// A failed gRPC call's `grpc-message`.
    pub(super) grpc_message: Option<&'a str>,
}

/// A request as sent, in the parts a sample shows, not yet masked.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Sent {
    /// The request line without its version, the gRPC method, or a tcp/udp payload.
    pub line: Vec<u8>,
    /// The headers after the line (`\r\n` apart), or a gRPC call's metadata.
    pub headers: Vec<u8>,
    /// The request's body.
    pub body: Vec<u8>,
}

impl SampleRecorder {
    /// Samples kept from `t0` on, when `on`, and the first `debug` requests whatever their
    /// outcome; `masked` (the scenario's `${env:...}` values) written `***` wherever they
    /// would show.
    pub fn new(t0: Instant, on: bool, masked: &[String], debug: u32) -> Self {
        Self {
            t0: (on || debug > 0).then_some(t0),
            sampling: on,
            book: Mutex::default(),
            masked: mask_order(masked.iter().map(|m| m.as_bytes().to_vec()).collect()),
            debug_left: AtomicU32::new(debug),
            debug: Mutex::default(),
        }
    }

    /// Whether the run samples its failures at all.
    pub fn on(&self) -> bool {
        self.sampling
    }

    fn book(&self) -> std::sync::MutexGuard<'_, SampleBook> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The values a sample masks now: the scenario's `${env:...}` values and the setup values
    /// sessions read (a refresh changes them).
    pub fn secrets(&self, ctx: Option<&Context>) -> Vec<Vec<u8>> {
        let mut all = self.masked.clone();
        if let Some(ctx) = ctx {
            all.extend(ctx.setup_now().iter().map(|v| v.as_bytes().to_vec()));
        }
        mask_order(all)
    }

    /// Takes a sample of a failed request of `step` when the book still wants one of its
    /// kind: what was sent (from the step, or the session's rendered request), the rows its
    /// session used, and the answer, every secret masked.
    pub(super) fn note(
        &self,
        step: &StepPlan,
        on: (Option<&Context>, Option<&SessionVars>),
        failed: Failed<'_>,
    ) {
        let Some(t0) = self.t0.filter(|_| self.sampling) else {
            return;
        };
        let Some(ordinal) = step.ordinal().and_then(|o| u32::try_from(o).ok()) else {
            return;
        };
        if !self.book().wants(ordinal, failed.kind) {
            return;
        }
        let sample = self.build(t0, ordinal, step, on, &failed, MAX_BODY);
        self.book().offer(sample);
    }

    /// Keeps `step`'s request and its answer for a debug print while the run's `debug` count
    /// lasts; `done.kind` is empty for a request that succeeded.
    pub(super) fn debug(
        &self,
        step: &StepPlan,
        on: (Option<&Context>, Option<&SessionVars>),
        done: Failed<'_>,
    ) {
        if self.debug_left.load(Ordering::Relaxed) == 0 {
            return;
        }
        let Some(t0) = self.t0 else { return };
        let Some(ordinal) = step.ordinal().and_then(|o| u32::try_from(o).ok()) else {
            return;
        };
        let took = self
            .debug_left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if took.is_err() {
            return;
        }
        let sample = self.build(t0, ordinal, step, on, &done, MAX_DEBUG_BODY);
        self.debug
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(sample);
    }

    /// A request of `step` as sent and answered, secrets masked, the answer's body cut to
    /// `body_max` bytes.
    fn build(
        &self,
        t0: Instant,
        ordinal: u32,
        step: &StepPlan,
        (ctx, vars): (Option<&Context>, Option<&SessionVars>),
        failed: &Failed<'_>,
        body_max: usize,
    ) -> Sample {
        // A dynamic step keeps the start of a failed answer's body in the session's buffers
        // (more than MAX_BODY bytes marks a cut), and all of it under `--debug`. A static
        // step keeps none: its answer is read without a buffer, so that a connection's task
        // stays as small as it is.
        let body = match step {
            StepPlan::HttpDynamic { .. } => {
                vars.map(SessionVars::captured_body).unwrap_or_default()
            }
            _ => &[],
        };
        // A failed connect sent nothing, and a rendered step has not rendered this request
        // yet: what its session rendered last was another one.
        let connect =
            failed.kind.starts_with(error_kind::CONNECT) || error_kind::is_tls(failed.kind);
        let request = match step {
            StepPlan::HttpDynamic { .. } | StepPlan::Ws { .. } if connect => Sent::default(),
            _ => sent(step, vars),
        };
        let secrets = self.secrets(ctx);
        let shown = |bytes: &[u8], max: usize| excerpt(&masked(bytes, &secrets), max);
        let offset = failed.done.saturating_duration_since(t0);
        Sample {
            offset_ms: u64::try_from(offset.as_millis()).unwrap_or(u64::MAX),
            step: ordinal,
            kind: failed.kind.to_string(),
            rows: ctx.zip(vars).map(rows).unwrap_or_default(),
            request: shown(&request.line, MAX_REQUEST),
            headers: shown(&request.headers, MAX_HEADERS),
            sent_body: shown(&request.body, MAX_SENT_BODY),
            status: failed.status,
            body: shown(body, body_max),
            grpc_message: shown(
                failed.grpc_message.unwrap_or_default().as_bytes(),
                MAX_GRPC_MESSAGE,
            ),
        }
    }

    /// Moves the samples and debug exchanges taken since the last Progress into `msg` (a
    /// Progress).
    pub fn attach(&self, msg: &mut v1::AgentMessage) {
        if self.t0.is_none() {
            return;
        }
        if let Some(v1::agent_message::Msg::Progress(p)) = msg.msg.as_mut() {
            p.failure_samples = stampede_proto::samples::samples_to_wire(self.book().take());
            let debug = std::mem::take(&mut *self.debug.lock().unwrap_or_else(|e| e.into_inner()));
            p.debug = stampede_proto::samples::samples_to_wire(debug);
        }
    }
}

/// `bytes` with every secret written `***`: masked over [`MASK_WINDOW`] bytes, and when that
/// cut the text, without the last bytes that may start a secret the cut split.
pub(crate) fn masked(bytes: &[u8], secrets: &[Vec<u8>]) -> Vec<u8> {
    if secrets.is_empty() {
        return bytes.iter().copied().take(MASK_WINDOW).collect();
    }
    let window = &bytes[..bytes.len().min(MASK_WINDOW)];
    let mut out = mask(window, secrets);
    if bytes.len() > MASK_WINDOW {
        // Percent-encoding makes a secret up to three times longer.
        let longest = secrets.iter().map(Vec::len).max().unwrap_or(0) * 3;
        out.truncate(out.len().saturating_sub(longest));
    }
    out
}

/// What a step sent: the request line (without its version) with its headers and body, the
/// gRPC method with its metadata, or a tcp or udp payload.
pub(crate) fn sent(step: &StepPlan, vars: Option<&SessionVars>) -> Sent {
    match step {
        StepPlan::Http { request, .. } => http1_parts(request.bytes(false)),
        StepPlan::HttpDynamic { step, .. } => {
            let out = vars.map(SessionVars::rendered).unwrap_or_default();
            let method = step.method().as_bytes();
            // HTTP/1.1 renders the whole request, h2 the path alone (and its body apart).
            if out.starts_with(method) && out.get(method.len()) == Some(&b' ') {
                http1_parts(out)
            } else {
                Sent {
                    line: [method, b" ", out].concat(),
                    headers: Vec::new(),
                    body: vars.map(SessionVars::payload).unwrap_or_default().to_vec(),
                }
            }
        }
        StepPlan::Tcp { request, send, .. } => payload(match (send, vars) {
            (Some(_), Some(v)) if !v.payload().is_empty() => v.payload(),
            _ => request.bytes(),
        }),
        StepPlan::Udp { request, send, .. } => payload(match (send, vars) {
            (Some(_), Some(v)) if !v.payload().is_empty() => v.payload(),
            _ => request.bytes(),
        }),
        StepPlan::Grpc { request, .. } => Sent {
            line: request.method_path().as_bytes().to_vec(),
            headers: request.metadata_text(),
            body: Vec::new(),
        },
        // A connect's request line; a message is not kept.
        StepPlan::Ws { step, .. } => match vars {
            Some(v) if step.connects() => payload(&[b"GET ".as_slice(), v.rendered()].concat()),
            _ => Sent::default(),
        },
        StepPlan::Think(_) => Sent::default(),
    }
}

fn payload(bytes: &[u8]) -> Sent {
    Sent {
        line: bytes[..bytes.len().min(MASK_WINDOW + 1)].to_vec(),
        ..Sent::default()
    }
}

/// An HTTP/1.1 request split for a sample: its first line without the version, the header
/// lines, and the body (each at most [`MASK_WINDOW`] and one bytes).
fn http1_parts(request: &[u8]) -> Sent {
    let head_end = find(request, b"\r\n\r\n");
    let (head, body) = match head_end {
        Some(at) => (&request[..at], &request[at + 4..]),
        None => (request, &[][..]),
    };
    let (line, headers) = match find(head, b"\r\n") {
        Some(at) => (&head[..at], &head[at + 2..]),
        None => (head, &[][..]),
    };
    let line = line.strip_suffix(b" HTTP/1.1").unwrap_or(line);
    let cap = |b: &[u8]| b[..b.len().min(MASK_WINDOW + 1)].to_vec();
    Sent {
        line: cap(line),
        headers: cap(headers),
        body: cap(body),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
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
    use super::*;

    #[test]
    fn a_request_splits_into_line_headers_and_body() {
        let sent = http1_parts(b"POST /login?user=u11 HTTP/1.1\r\nHost: h\r\nX-Key: k\r\n\r\na=1");
        assert_eq!(sent.line, b"POST /login?user=u11");
        assert_eq!(sent.headers, b"Host: h\r\nX-Key: k");
        assert_eq!(sent.body, b"a=1");
        assert_eq!(http1_parts(b"GET /x").line, b"GET /x");
    }

    #[test]
    fn a_cut_never_shows_part_of_a_secret() {
        let secrets = vec![b"topsecret".to_vec()];
        let mut long = vec![b'a'; MASK_WINDOW - 4];
        long.extend_from_slice(b"topsecret and more");
        let out = masked(&long, &secrets);
        assert!(
            !out.windows(4).any(|w| w == b"tops"),
            "a split secret shows"
        );
        assert_eq!(masked(b"k=topsecret", &secrets), b"k=***");
    }
}
