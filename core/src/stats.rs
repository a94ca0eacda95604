//! The additive measurement unit: counters and histograms that agents send per interval and
//! per phase, and that the controller adds up. Everything here merges by addition.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::hist::{self, HistError, Recorded, SparseHist};

mod interval;
pub use interval::IntervalStats;

/// Error kinds, as counted in reports (`docs/design.md`, "Port budget and error kinds").
pub mod error_kind {
    /// The target refused the connection (nothing listens on its port, or a UDP port answered
    /// unreachable).
    pub const CONNECT_REFUSED: &str = "connect_refused";
    /// The connect timed out: the request's timeout (or the kernel's) passed before the
    /// connection was established.
    pub const CONNECT_TIMEOUT: &str = "connect_timeout";
    /// A connect that failed for another reason (no route to the host, say).
    pub const CONNECT: &str = "connect";
    /// The agent had no free local port toward the destination (EADDRNOTAVAIL): the generator's
    /// limit, not the target's.
    pub const ADDR_NOT_AVAILABLE: &str = "addr_not_available";
    /// The peer reset or closed the connection before the answer was complete.
    pub const RESET: &str = "reset";
    /// Reading the answer failed for another reason.
    pub const READ: &str = "read";
    /// A read that timed out. The agent times the whole request against its deadline and counts it
    /// `timeout`, so it does not record this kind.
    pub const READ_TIMEOUT: &str = "read_timeout";
    /// Writing the request failed for a reason other than a reset.
    pub const WRITE: &str = "write";
    /// The request's timeout passed after its connect, before the answer was complete (for UDP:
    /// no reply in time).
    pub const TIMEOUT: &str = "timeout";
    /// A reply whose status was not expected, without a code (the wire's old form).
    pub const STATUS: &str = "status";
    /// An answer that breaks its protocol: a malformed HTTP head or frame, a length past the
    /// limits, a WebSocket upgrade not accepted properly.
    pub const PROTOCOL: &str = "protocol";
    /// The TLS handshake failed for a reason none of the `tls_*` kinds names (a server that
    /// does not speak TLS, a malformed record).
    pub const TLS: &str = "tls";
    /// The server's certificate chain leads to no trusted authority (`tls.ca_file` missing, or
    /// a self-signed target).
    pub const TLS_UNKNOWN_ISSUER: &str = "tls_unknown_issuer";
    /// The server's certificate is not valid for the name asked for (`tls.server_name` or the
    /// target's host).
    pub const TLS_NAME_MISMATCH: &str = "tls_name_mismatch";
    /// The server's certificate has expired.
    pub const TLS_EXPIRED: &str = "tls_expired";
    /// The server's certificate is not valid yet (or this machine's clock is behind).
    pub const TLS_NOT_YET_VALID: &str = "tls_not_yet_valid";
    /// The server's certificate is refused for another reason (revoked, a bad signature, an
    /// unsupported algorithm, a malformed certificate).
    pub const TLS_BAD_CERTIFICATE: &str = "tls_bad_certificate";
    /// The server refused the handshake with an alert: a client certificate it wants or does
    /// not trust (with TLS 1.3 the refusal arrives just after the handshake), or a version or
    /// cipher it will not use.
    pub const TLS_REFUSED: &str = "tls_refused";
    /// No TLS version, cipher suite or application protocol (ALPN) both sides accept.
    pub const TLS_INCOMPATIBLE: &str = "tls_incompatible";

    /// Whether `kind` is a TLS failure (`tls` or a `tls_*` reason).
    pub fn is_tls(kind: &str) -> bool {
        kind == TLS || kind.starts_with("tls_")
    }
    /// A rendered template would break the request (a line break in a header value).
    pub const TEMPLATE: &str = "template";
    /// The server closed the WebSocket while a step waited on it.
    pub const WS_CLOSED: &str = "ws_closed";
    /// A WebSocket step found no open WebSocket (before its `connect`, or after a `close`).
    pub const WS_NOT_OPEN: &str = "ws_not_open";
    /// A compressed body (`content-encoding`) that does not decode, or in a coding the agent
    /// does not know.
    pub const DECODE: &str = "decode";
    /// A compressed body that decodes past the agent's cap (a decompression bomb).
    pub const DECODE_LIMIT: &str = "decode_limit";

    /// The error kind of an unexpected HTTP status: `status_404`, so every report names the
    /// code. Codes are three digits (100 to 999), so there are at most 900 such kinds and
    /// they are made once, not per failed request.
    pub fn status(code: u16) -> &'static str {
        static KINDS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        let kinds = KINDS.get_or_init(|| (100..1000).map(|c| format!("status_{c}")).collect());
        match code {
            100..=999 => &kinds[usize::from(code - 100)],
            _ => STATUS,
        }
    }
}

/// Additive counters of one agent, one interval, one phase.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Arrivals whose intended start time has passed.
    pub sessions_planned: u64,
    /// Sessions that began (their first request started), late or not.
    pub sessions_started: u64,
    /// Sessions whose every request succeeded.
    pub sessions_completed: u64,
    /// Sessions that ended with a failed request.
    pub sessions_failed: u64,
    /// Sessions started and still running when the run stopped (its grace included): neither
    /// completed nor failed, so that started = completed + failed + interrupted.
    #[serde(default)]
    pub sessions_interrupted: u64,
    /// Requests begun (counted before their connect, so one whose connect fails counts too).
    pub requests_started: u64,
    /// Requests answered successfully.
    pub requests_completed: u64,
    /// Requests that failed, each also counted under its kind in `errors`.
    pub requests_failed: u64,
    /// Requests sent and still unanswered when the run stopped and its `graceful_stop` was
    /// over: their outcome is unknown, but the target may have served them.
    #[serde(default)]
    pub requests_interrupted: u64,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
    /// Sessions started more than [`LATE_THRESHOLD_US`] after their intended time.
    pub late_arrivals: u64,
    /// Planned sessions never started (the run was stopped, or the in-flight cap was hit).
    pub dropped_arrivals: u64,
    /// Latencies outside the histogram spec (recorded at the nearest bound).
    pub out_of_range: u64,
    /// Bytes written for requests (for HTTP, head and body).
    pub bytes_sent: u64,
    /// Bytes read for answers, as they came on the wire (for HTTP, head and body).
    pub bytes_received: u64,
    /// Bytes on the wire of the compressed bodies that were decoded (for a step's checks or
    /// extraction), beside [`Counters::bytes_decoded`]: their sizes both ways.
    #[serde(default)]
    pub bytes_compressed: u64,
    /// What those compressed bodies decoded to.
    #[serde(default)]
    pub bytes_decoded: u64,
    /// Connections the agent opened (any transport). An agent counts them, and the one
    /// below, in its phase-0 sample only, since connections are not tied to a phase.
    #[serde(default)]
    pub connections_opened: u64,
    /// Most connections the agent held open at once during the interval. Unlike the other
    /// counters this is a gauge's peak: adding two agents' peaks of the same interval gives an
    /// upper bound of their joint peak (they may peak at different instants), and adding one
    /// agent's peaks of different intervals means nothing, so the report takes the maximum
    /// over intervals (`RunAccumulator`), never a sum over time.
    #[serde(default)]
    pub peak_open_connections: u64,
    /// HTTP responses by status code, expected or not (empty for tcp and udp).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub status_codes: BTreeMap<u16, u64>,
    /// gRPC calls by `grpc-status` code (0 OK to 16): a call's HTTP status is 200 whether it
    /// succeeded or not, so its outcome is counted here and not among `status_codes`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grpc_statuses: BTreeMap<u8, u64>,
    /// Sessions by session type (the run's global type index), counted for weighted mixes
    /// only: the report's planned-against-achieved per type.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub session_types: BTreeMap<u32, TypeCounts>,
}

/// Sessions of one session type of a mix.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeCounts {
    /// Sessions of the type started.
    pub started: u64,
    /// Sessions of the type whose every request succeeded.
    pub completed: u64,
    /// Sessions of the type that ended with a failed request.
    pub failed: u64,
    /// Still running when the run stopped.
    #[serde(default)]
    pub interrupted: u64,
}

impl TypeCounts {
    fn add(&mut self, o: &TypeCounts) {
        self.started = self.started.saturating_add(o.started);
        self.completed = self.completed.saturating_add(o.completed);
        self.failed = self.failed.saturating_add(o.failed);
        self.interrupted = self.interrupted.saturating_add(o.interrupted);
    }

    fn fits(&self, o: &TypeCounts) -> bool {
        self.started.checked_add(o.started).is_some()
            && self.completed.checked_add(o.completed).is_some()
            && self.failed.checked_add(o.failed).is_some()
            && self.interrupted.checked_add(o.interrupted).is_some()
    }
}

/// A session that starts this late behind its intended time counts as a late arrival.
pub const LATE_THRESHOLD_US: u64 = 10_000;

impl Counters {
    /// Adds `o`. Counters saturate at `u64::MAX` instead of wrapping (they may come from
    /// the network); [`Counters::fits`] lets the controller refuse data that would saturate.
    pub fn add(&mut self, o: &Counters) {
        self.sessions_planned = self.sessions_planned.saturating_add(o.sessions_planned);
        self.sessions_started = self.sessions_started.saturating_add(o.sessions_started);
        self.sessions_completed = self.sessions_completed.saturating_add(o.sessions_completed);
        self.sessions_failed = self.sessions_failed.saturating_add(o.sessions_failed);
        self.sessions_interrupted = self
            .sessions_interrupted
            .saturating_add(o.sessions_interrupted);
        self.requests_started = self.requests_started.saturating_add(o.requests_started);
        self.requests_completed = self.requests_completed.saturating_add(o.requests_completed);
        self.requests_failed = self.requests_failed.saturating_add(o.requests_failed);
        self.requests_interrupted = self
            .requests_interrupted
            .saturating_add(o.requests_interrupted);
        for (k, v) in &o.errors {
            let e = self.errors.entry(k.clone()).or_default();
            *e = e.saturating_add(*v);
        }
        self.late_arrivals = self.late_arrivals.saturating_add(o.late_arrivals);
        self.dropped_arrivals = self.dropped_arrivals.saturating_add(o.dropped_arrivals);
        self.out_of_range = self.out_of_range.saturating_add(o.out_of_range);
        self.bytes_sent = self.bytes_sent.saturating_add(o.bytes_sent);
        self.bytes_received = self.bytes_received.saturating_add(o.bytes_received);
        self.bytes_compressed = self.bytes_compressed.saturating_add(o.bytes_compressed);
        self.bytes_decoded = self.bytes_decoded.saturating_add(o.bytes_decoded);
        self.connections_opened = self.connections_opened.saturating_add(o.connections_opened);
        self.peak_open_connections = self
            .peak_open_connections
            .saturating_add(o.peak_open_connections);
        for (k, v) in &o.status_codes {
            let e = self.status_codes.entry(*k).or_default();
            *e = e.saturating_add(*v);
        }
        for (k, v) in &o.grpc_statuses {
            let e = self.grpc_statuses.entry(*k).or_default();
            *e = e.saturating_add(*v);
        }
        for (k, v) in &o.session_types {
            self.session_types.entry(*k).or_default().add(v);
        }
    }

    /// Whether adding `o` keeps every counter exact (no saturation).
    pub fn fits(&self, o: &Counters) -> bool {
        let pairs = [
            (self.sessions_planned, o.sessions_planned),
            (self.sessions_started, o.sessions_started),
            (self.sessions_completed, o.sessions_completed),
            (self.sessions_failed, o.sessions_failed),
            (self.sessions_interrupted, o.sessions_interrupted),
            (self.requests_started, o.requests_started),
            (self.requests_completed, o.requests_completed),
            (self.requests_failed, o.requests_failed),
            (self.requests_interrupted, o.requests_interrupted),
            (self.late_arrivals, o.late_arrivals),
            (self.dropped_arrivals, o.dropped_arrivals),
            (self.out_of_range, o.out_of_range),
            (self.bytes_sent, o.bytes_sent),
            (self.bytes_received, o.bytes_received),
            (self.bytes_compressed, o.bytes_compressed),
            (self.bytes_decoded, o.bytes_decoded),
            (self.connections_opened, o.connections_opened),
            (self.peak_open_connections, o.peak_open_connections),
        ];
        pairs.iter().all(|(a, b)| a.checked_add(*b).is_some())
            && o.errors.iter().all(|(k, v)| {
                self.errors
                    .get(k)
                    .copied()
                    .unwrap_or(0)
                    .checked_add(*v)
                    .is_some()
            })
            && o.status_codes.iter().all(|(k, v)| {
                self.status_codes
                    .get(k)
                    .copied()
                    .unwrap_or(0)
                    .checked_add(*v)
                    .is_some()
            })
            && o.grpc_statuses.iter().all(|(k, v)| {
                self.grpc_statuses
                    .get(k)
                    .copied()
                    .unwrap_or(0)
                    .checked_add(*v)
                    .is_some()
            })
            && o.session_types.iter().all(|(k, v)| {
                self.session_types
                    .get(k)
                    .copied()
                    .unwrap_or_default()
                    .fits(v)
            })
    }

    /// Counts one HTTP response's status code.
    pub fn count_status(&mut self, code: u16) {
        *self.status_codes.entry(code).or_default() += 1;
    }

    /// Counts one gRPC call's `grpc-status` code.
    pub fn count_grpc(&mut self, code: u8) {
        *self.grpc_statuses.entry(code).or_default() += 1;
    }

    /// Failed requests of every kind together (saturating).
    pub fn error_count(&self) -> u64 {
        self.errors.values().fold(0, |a, v| a.saturating_add(*v))
    }

    /// Counts one failure of `kind`.
    pub fn count_error(&mut self, kind: &str) {
        match self.errors.get_mut(kind) {
            Some(v) => *v += 1,
            None => {
                self.errors.insert(kind.to_string(), 1);
            }
        }
    }
}

/// Counters plus the three latency histograms: response time (from the intended send, the
/// headline), service time (from the actual send) and the generator's start lag.
///
/// The run-wide histograms are dense (184 KiB each, cheapest to record into); the steps'
/// are sparse ([`SparseStepStats`]): a step costs about a hundred bytes until it records, then
/// what its latencies fill, so a scenario of many steps (16 session types × 100 steps) holds
/// only what its sessions did, not 368 KiB per step and phase.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// The unit's counters: requests, sessions, errors, bytes and connections.
    pub counters: Counters,
    /// Response times from the intended send, µs: the headline.
    pub response: Histogram<u64>,
    /// Service times from the actual send, µs.
    pub service: Histogram<u64>,
    /// How late sessions started behind their intended time.
    pub lag: Histogram<u64>,
    /// Per request step, indexed by the step's ordinal among request steps.
    pub steps: Vec<SparseStepStats>,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            counters: Counters::default(),
            response: hist::new_histogram(),
            service: hist::new_histogram(),
            lag: hist::new_histogram(),
            steps: Vec::new(),
        }
    }
}

impl Stats {
    /// Stats of `steps` request steps; nothing is allocated for a step until it records.
    pub fn with_steps(steps: usize) -> Self {
        Self {
            steps: vec![SparseStepStats::default(); steps],
            ..Self::default()
        }
    }

    /// Adds another unit into this one.
    pub fn add(&mut self, o: &Stats) -> Result<(), HistError> {
        self.counters.add(&o.counters);
        hist::merge(&mut self.response, &o.response)?;
        hist::merge(&mut self.service, &o.service)?;
        hist::merge(&mut self.lag, &o.lag)?;
        if self.steps.len() < o.steps.len() {
            self.steps
                .resize_with(o.steps.len(), SparseStepStats::default);
        }
        for (mine, theirs) in self.steps.iter_mut().zip(&o.steps) {
            mine.add(theirs);
        }
        Ok(())
    }

    /// Records one successful request of request-step `step`.
    #[inline]
    pub fn record_success(&mut self, step: usize, response_us: u64, service_us: u64) {
        self.record_success_in(step, response_us, service_us, true);
    }

    /// Records one successful request into its step's histograms and, when `run_wide` (or
    /// when `step` is not one of the run's), into the run-wide ones: [`IntervalStats`] leaves
    /// those to its settle. Out-of-range values are counted once per histogram pair.
    #[inline]
    pub(crate) fn record_success_in(
        &mut self,
        step: usize,
        response_us: u64,
        service_us: u64,
        run_wide: bool,
    ) {
        let out = |r: Recorded| u64::from(r == Recorded::OutOfRange);
        self.counters.requests_completed += 1;
        let mut oor = None;
        if let Some(s) = self.steps.get_mut(step) {
            s.requests_completed += 1;
            oor = Some(
                out(s.response.record_n(response_us, 1)) + out(s.service.record_n(service_us, 1)),
            );
        }
        if run_wide || oor.is_none() {
            oor = Some(
                out(hist::record(&mut self.response, response_us))
                    + out(hist::record(&mut self.service, service_us)),
            );
        }
        self.counters.out_of_range += oor.unwrap_or(0);
    }

    /// Records the arrivals of one streamed reply of request-step `step`: the time to its
    /// first event from the intended send, and the gaps between its events (all µs). Counted
    /// apart from the request itself, which [`Stats::record_success`] records whole.
    pub fn record_stream(&mut self, step: usize, ttfb_us: Option<u64>, gaps_us: &[u64]) {
        let Some(s) = self.steps.get_mut(step) else {
            return;
        };
        let mut oor = 0;
        if let Some(t) = ttfb_us {
            oor += u64::from(s.ttfb.record_n(t.max(1), 1) == Recorded::OutOfRange);
        }
        for g in gaps_us {
            oor += u64::from(s.gap.record_n((*g).max(1), 1) == Recorded::OutOfRange);
        }
        self.counters.out_of_range += oor;
    }

    /// Records one failed request of request-step `step`.
    #[inline]
    pub fn record_failure(&mut self, step: usize, kind: &str) {
        self.counters.requests_failed += 1;
        self.counters.count_error(kind);
        if let Some(s) = self.steps.get_mut(step) {
            s.requests_failed += 1;
            match s.errors.get_mut(kind) {
                Some(v) => *v += 1,
                None => {
                    s.errors.insert(kind.to_string(), 1);
                }
            }
        }
    }

    /// Records one request of request-step `step` that was sent and never answered: the run
    /// stopped, and its grace ended, first.
    pub fn record_interrupted(&mut self, step: usize) {
        self.counters.requests_interrupted += 1;
        if let Some(s) = self.steps.get_mut(step) {
            s.requests_interrupted += 1;
        }
    }

    /// Records the start of a session `lag_us` behind its intended time.
    #[inline]
    pub fn record_start(&mut self, lag_us: u64) {
        self.counters.sessions_started += 1;
        if lag_us > crate::stats::LATE_THRESHOLD_US {
            self.counters.late_arrivals += 1;
        }
        if hist::record(&mut self.lag, lag_us.max(1)) == Recorded::OutOfRange {
            self.counters.out_of_range += 1;
        }
    }

    /// Clears all counts (for the agent's interval recorder), keeping the run-wide histograms'
    /// allocations and freeing the steps': a step holds memory only in the intervals it
    /// records in.
    pub fn reset(&mut self) {
        self.counters = Counters::default();
        self.response.reset();
        self.service.reset();
        self.lag.reset();
        for s in &mut self.steps {
            *s = SparseStepStats::default();
        }
    }

    /// Whether nothing was counted or recorded: every counter at zero, no response time and no
    /// start lag.
    pub fn is_empty(&self) -> bool {
        self.counters == Counters::default() && self.response.is_empty() && self.lag.is_empty()
    }
}

/// Latency of one request step (the per-step breakdown), in sparse histograms: what an
/// agent records into and the controller merges.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SparseStepStats {
    /// The step's requests answered successfully.
    pub requests_completed: u64,
    /// The step's failed requests.
    pub requests_failed: u64,
    /// The step's requests sent and unanswered when the run's graceful stop ended.
    pub requests_interrupted: u64,
    /// The step's failed requests by kind.
    pub errors: BTreeMap<String, u64>,
    /// Response times of its successful requests from the intended send, µs.
    pub response: SparseHist,
    /// Service times of its successful requests from the actual send, µs.
    pub service: SparseHist,
    /// Streamed replies: from the intended send to the first event (or body byte).
    pub ttfb: SparseHist,
    /// Streamed replies: between one event (or read of body bytes) and the next.
    pub gap: SparseHist,
}

impl SparseStepStats {
    /// Adds another step's figures into these (exact, saturating).
    pub fn add(&mut self, o: &SparseStepStats) {
        self.requests_completed = self.requests_completed.saturating_add(o.requests_completed);
        self.requests_failed = self.requests_failed.saturating_add(o.requests_failed);
        self.requests_interrupted = self
            .requests_interrupted
            .saturating_add(o.requests_interrupted);
        for (k, v) in &o.errors {
            let e = self.errors.entry(k.clone()).or_default();
            *e = e.saturating_add(*v);
        }
        self.response.add(&o.response);
        self.service.add(&o.service);
        self.ttfb.add(&o.ttfb);
        self.gap.add(&o.gap);
    }

    fn heap_bytes(&self) -> usize {
        self.response.heap_bytes()
            + self.service.heap_bytes()
            + self.ttfb.heap_bytes()
            + self.gap.heap_bytes()
            + self.errors.len() * 64
    }
}

/// [`Stats`] as the controller stores and merges it: the same counters, sparse histograms,
/// so memory follows what was recorded (design: bounded by data, not by scenario size).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SparseStats {
    /// The counters, as in [`Stats`].
    pub counters: Counters,
    /// Response times from the intended send, µs.
    pub response: SparseHist,
    /// Service times from the actual send, µs.
    pub service: SparseHist,
    /// Session start lags behind their intended time, µs.
    pub lag: SparseHist,
    /// Per request step, indexed by the step's ordinal among request steps.
    pub steps: Vec<SparseStepStats>,
}

impl SparseStats {
    /// Adds another unit into this one (exact, saturating).
    pub fn add(&mut self, o: &SparseStats) {
        self.counters.add(&o.counters);
        self.response.add(&o.response);
        self.service.add(&o.service);
        self.lag.add(&o.lag);
        if self.steps.len() < o.steps.len() {
            self.steps
                .resize_with(o.steps.len(), SparseStepStats::default);
        }
        for (mine, theirs) in self.steps.iter_mut().zip(&o.steps) {
            mine.add(theirs);
        }
    }

    /// Approximate heap bytes held (histogram buckets exactly, maps estimated).
    pub fn heap_bytes(&self) -> usize {
        self.response.heap_bytes()
            + self.service.heap_bytes()
            + self.lag.heap_bytes()
            + self.counters.errors.len() * 64
            + self.steps.capacity() * std::mem::size_of::<SparseStepStats>()
            + self
                .steps
                .iter()
                .map(SparseStepStats::heap_bytes)
                .sum::<usize>()
    }
}

impl From<&Stats> for SparseStats {
    fn from(s: &Stats) -> Self {
        Self {
            counters: s.counters.clone(),
            response: SparseHist::from_dense(&s.response),
            service: SparseHist::from_dense(&s.service),
            lag: SparseHist::from_dense(&s.lag),
            steps: s.steps.clone(),
        }
    }
}
