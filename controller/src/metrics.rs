//! Live Prometheus metrics: `GET /metrics` (text exposition format 0.0.4) on its own listener.
//!
//! Registry-wide gauges (agents, runs by state) are read from the controller's state at scrape
//! time. Per-run series carry a `run_id` label; only the [`KEEP_RUNS`] most recent runs that
//! reported data are kept, so cardinality stays bounded. The run driver feeds every accepted
//! agent `Progress` into [`Metrics::progress`] (after de-duplication and validation, already
//! decoded: a Progress is decoded once), so the counters add up to exactly the final report's
//! totals. Latency is a real Prometheus histogram (cumulative
//! buckets, `_sum`, `_count`) filled from the merged HDR interval histograms, so Prometheus can
//! aggregate it and compute any quantile with `histogram_quantile`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use prometheus::{Encoder, TextEncoder};
use stampede_core::hist::SparseHist;
use stampede_core::stats::SparseStats;

use crate::run::RunState;
use crate::{lock, Inner};

mod listen;
pub(crate) use listen::serve;

/// The `Content-Type` of the Prometheus text exposition format.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Per-run series are kept for this many runs (the running one and the last few).
pub(crate) const KEEP_RUNS: usize = 5;

/// Latency histogram upper bounds, in seconds: 50 µs to 60 s.
pub(crate) const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025,
    0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Intervals of completed-request counts kept per run for the throughput gauge.
const KEEP_INTERVALS: usize = 4;

/// Distinct error kinds (the `kind` label) kept per run; further kinds count as `other`.
const MAX_ERROR_KINDS: usize = 32;

#[derive(Debug, Clone, Default)]
struct PromHist {
    /// Non-cumulative counts per bucket of [`LATENCY_BUCKETS`]; the last slot is `+Inf`.
    buckets: Vec<u64>,
    sum_s: f64,
    count: u64,
}

impl PromHist {
    fn add(&mut self, h: &SparseHist) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; LATENCY_BUCKETS.len() + 1];
        }
        for (us, n) in h.iter_medians() {
            let s = us as f64 / 1e6;
            let i = LATENCY_BUCKETS.partition_point(|b| *b < s);
            self.buckets[i] = self.buckets[i].saturating_add(n);
            self.sum_s += s * n as f64;
            self.count = self.count.saturating_add(n);
        }
    }
}

#[derive(Debug, Default)]
struct RunSeries {
    requests_completed: u64,
    requests_failed: u64,
    sessions_started: u64,
    errors: BTreeMap<String, u64>,
    response: PromHist,
    service: PromHist,
    /// Latest open-connection count per agent.
    open_connections: BTreeMap<String, u64>,
    /// Requests completed per interval index (the last few).
    per_interval: BTreeMap<u64, u64>,
}

/// The metrics state of one controller.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    runs: Mutex<VecDeque<(String, RunSeries)>>,
}

impl Metrics {
    /// Adds one accepted agent `Progress` (its samples, decoded by the run driver) to the
    /// run's series.
    pub(crate) fn progress(
        &self,
        run_id: &str,
        agent_id: &str,
        interval: u64,
        open_connections: u64,
        samples: &[(u32, SparseStats)],
    ) {
        let mut runs = lock(&self.runs);
        let idx = match runs.iter().position(|(id, _)| id == run_id) {
            Some(i) => i,
            None => {
                if runs.len() >= KEEP_RUNS {
                    runs.pop_front();
                }
                runs.push_back((run_id.to_string(), RunSeries::default()));
                runs.len() - 1
            }
        };
        let r = &mut runs[idx].1;
        match r.open_connections.get_mut(agent_id) {
            Some(n) => *n = open_connections,
            None => {
                r.open_connections
                    .insert(agent_id.to_string(), open_connections);
            }
        }
        for (_, stats) in samples {
            let c = &stats.counters;
            r.requests_completed = r.requests_completed.saturating_add(c.requests_completed);
            r.requests_failed = r.requests_failed.saturating_add(c.requests_failed);
            r.sessions_started = r.sessions_started.saturating_add(c.sessions_started);
            for (kind, n) in &c.errors {
                let key = if r.errors.contains_key(kind) || r.errors.len() < MAX_ERROR_KINDS {
                    kind.as_str()
                } else {
                    "other"
                };
                let e = r.errors.entry(key.to_string()).or_default();
                *e = e.saturating_add(*n);
            }
            r.response.add(&stats.response);
            r.service.add(&stats.service);
            let i = r.per_interval.entry(interval).or_default();
            *i = i.saturating_add(c.requests_completed);
        }
        while r.per_interval.len() > KEEP_INTERVALS {
            r.per_interval.pop_first();
        }
    }
}

fn label(name: &str, value: &str) -> LabelPair {
    let mut l = LabelPair::default();
    l.set_name(name.to_string());
    l.set_value(value.to_string());
    l
}

fn family(name: &str, help: &str, t: MetricType, metrics: Vec<Metric>) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_string());
    f.set_help(help.to_string());
    f.set_field_type(t);
    f.set_metric(metrics);
    f
}

fn gauge(labels: Vec<LabelPair>, v: f64) -> Metric {
    let mut g = Gauge::default();
    g.set_value(v);
    let mut m = Metric::from_label(labels);
    m.set_gauge(g);
    m
}

fn counter(labels: Vec<LabelPair>, v: f64) -> Metric {
    let mut c = Counter::default();
    c.set_value(v);
    let mut m = Metric::from_label(labels);
    m.set_counter(c);
    m
}

fn histogram(labels: Vec<LabelPair>, h: &PromHist) -> Metric {
    let mut cumulative = 0;
    let buckets = LATENCY_BUCKETS
        .iter()
        .enumerate()
        .map(|(i, le)| {
            cumulative += h.buckets.get(i).copied().unwrap_or(0);
            let mut b = Bucket::default();
            b.set_upper_bound(*le);
            b.set_cumulative_count(cumulative);
            b
        })
        .collect();
    let mut p = Histogram::default();
    p.set_bucket(buckets);
    p.set_sample_count(h.count);
    p.set_sample_sum(h.sum_s);
    let mut m = Metric::from_label(labels);
    m.set_histogram(p);
    m
}

/// Renders the controller's metrics in the Prometheus text format.
pub(crate) fn render(inner: &Inner) -> String {
    let (connected, busy_by_run) = {
        let agents = lock(&inner.agents);
        let mut busy: BTreeMap<String, u64> = BTreeMap::new();
        for a in agents.values() {
            if let Some(r) = &a.run {
                *busy.entry(r.clone()).or_default() += 1;
            }
        }
        (agents.len(), busy)
    };
    let busy: u64 = busy_by_run.values().sum();
    let states: BTreeMap<String, RunState> = lock(&inner.runs)
        .iter()
        .map(|(id, h)| (id.clone(), h.state().state))
        .collect();
    let mut by_state: BTreeMap<RunState, u64> = RunState::ALL.into_iter().map(|s| (s, 0)).collect();
    for s in states.values() {
        *by_state.entry(*s).or_default() += 1;
    }
    let interval_s = inner.cfg.interval.as_secs_f64().max(1e-3);

    let mut fams = vec![
        family(
            "stampede_agents_connected",
            "Agents attached to the controller.",
            MetricType::GAUGE,
            vec![gauge(vec![], connected as f64)],
        ),
        family(
            "stampede_agents_busy",
            "Agents assigned to a run.",
            MetricType::GAUGE,
            vec![gauge(vec![], busy as f64)],
        ),
        family(
            "stampede_runs",
            "Runs known to the controller, by state.",
            MetricType::GAUGE,
            by_state
                .iter()
                .map(|(s, n)| gauge(vec![label("state", s.as_str())], *n as f64))
                .collect(),
        ),
    ];

    let runs = lock(&inner.metrics.runs);
    let mut state = Vec::new();
    let (mut completed, mut failed, mut started, mut errors) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut rps, mut active, mut conns, mut resp, mut serv) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (id, r) in runs.iter() {
        let l = || vec![label("run_id", id)];
        let st = states.get(id).map_or("unknown", |s| s.as_str());
        let over = states.get(id).is_some_and(|s| s.is_terminal());
        state.push(gauge(vec![label("run_id", id), label("state", st)], 1.0));
        completed.push(counter(l(), r.requests_completed as f64));
        failed.push(counter(l(), r.requests_failed as f64));
        started.push(counter(l(), r.sessions_started as f64));
        for (kind, n) in &r.errors {
            errors.push(counter(
                vec![label("run_id", id), label("kind", kind)],
                *n as f64,
            ));
        }
        // The newest interval may still miss some agents; use the one before it when there is.
        let last = r
            .per_interval
            .iter()
            .rev()
            .nth(1)
            .or(r.per_interval.iter().next_back());
        let tput = match (over, last) {
            (false, Some((_, n))) => *n as f64 / interval_s,
            _ => 0.0,
        };
        rps.push(gauge(l(), tput));
        active.push(gauge(l(), busy_by_run.get(id).copied().unwrap_or(0) as f64));
        let open: u64 = if over {
            0
        } else {
            r.open_connections.values().sum()
        };
        conns.push(gauge(l(), open as f64));
        resp.push(histogram(l(), &r.response));
        serv.push(histogram(l(), &r.service));
    }
    drop(runs);
    let per_run = [
        ("stampede_run_state", "The state of a recent run (value 1).", MetricType::GAUGE, state),
        ("stampede_run_requests_completed_total", "Requests completed, merged over the run's agents.", MetricType::COUNTER, completed),
        ("stampede_run_requests_failed_total", "Requests failed, merged over the run's agents.", MetricType::COUNTER, failed),
        ("stampede_run_sessions_started_total", "Virtual-client sessions started.", MetricType::COUNTER, started),
        ("stampede_run_errors_total", "Errors by kind (connect, reset, timeout, status, ...).", MetricType::COUNTER, errors),
        ("stampede_run_throughput_rps", "Requests completed per second in the last complete interval (prefer rate() over the counter).", MetricType::GAUGE, rps),
        ("stampede_run_active_agents", "Agents generating load for the run.", MetricType::GAUGE, active),
        ("stampede_run_open_connections", "Connections the run's agents hold open, as last reported.", MetricType::GAUGE, conns),
        ("stampede_run_response_time_seconds", "Response time from the intended send time (no coordinated omission), merged.", MetricType::HISTOGRAM, resp),
        ("stampede_run_service_time_seconds", "Service time from the actual send, merged.", MetricType::HISTOGRAM, serv),
    ];
    for (name, help, t, ms) in per_run {
        if !ms.is_empty() {
            fams.push(family(name, help, t, ms));
        }
    }
    let mut buf = Vec::with_capacity(16 * 1024);
    if let Err(e) = TextEncoder::new().encode(&fams, &mut buf) {
        tracing::error!(error = %e, "encoding metrics");
    }
    String::from_utf8(buf).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_run_series_are_bounded_to_the_last_runs() {
        let dir = tempfile::tempdir().unwrap();
        let c = crate::Controller::new(crate::ControllerConfig::new(dir.path())).unwrap();
        for i in 0..(KEEP_RUNS + 3) {
            c.inner
                .metrics
                .progress(&format!("run-{i}"), "a", 0, 7, &[]);
        }
        let text = c.metrics_text();
        for i in 0..3 {
            assert!(!text.contains(&format!("run_id=\"run-{i}\"")), "{text}");
        }
        for i in 3..(KEEP_RUNS + 3) {
            assert!(
                text.contains(&format!(
                    "stampede_run_open_connections{{run_id=\"run-{i}\"}} 7"
                )),
                "{text}"
            );
        }
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_at_the_count() {
        let mut h = SparseHist::default();
        for us in [40, 900, 1_500, 20_000, 90_000_000] {
            h.record_n(us, 1);
        }
        let mut p = PromHist::default();
        p.add(&h);
        let m = histogram(vec![], &p);
        let b = m.get_histogram().get_bucket();
        let counts: Vec<u64> = b.iter().map(|b| b.cumulative_count()).collect();
        assert!(counts.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(counts[0], 1); // 40 µs <= 50 µs
        assert_eq!(*counts.last().unwrap(), 4); // 90 s is above the last bound (60 s)
        assert_eq!(m.get_histogram().get_sample_count(), 5);
    }
}
