//! The HTTP target's Prometheus series, with label lookups cached per route and status.

use std::sync::OnceLock;
use std::time::Duration;

use hyper::StatusCode;
use prometheus::{Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, Registry};

use super::route::Route;
use crate::TargetError;

/// Statuses this server produces; each gets a cached counter per route.
const STATUSES: [StatusCode; 9] = [
    StatusCode::OK,
    StatusCode::SWITCHING_PROTOCOLS,
    StatusCode::UPGRADE_REQUIRED,
    StatusCode::BAD_REQUEST,
    StatusCode::NOT_FOUND,
    StatusCode::METHOD_NOT_ALLOWED,
    StatusCode::REQUEST_TIMEOUT,
    StatusCode::PAYLOAD_TOO_LARGE,
    StatusCode::SERVICE_UNAVAILABLE,
];

const N_ROUTES: usize = Route::ALL.len();
const N_STATUSES: usize = STATUSES.len();

pub(super) struct HttpMetrics {
    pub(super) registry: Registry,
    pub(super) requests: IntCounterVec,
    pub(super) durations: HistogramVec,
    pub(super) errors: IntCounterVec,
    pub(super) conn_open: IntGauge,
    pub(super) conn_total: IntCounter,
    pub(super) conn_rejected: IntCounter,
    pub(super) tls_resumed: IntCounter,
    pub(super) source_ips: IntGauge,
    pub(super) in_flight: IntGauge,
    /// Label lookups done once, on first use (so unused series are not exported as zeros).
    request_cells: [[OnceLock<IntCounter>; N_STATUSES]; N_ROUTES],
    duration_cells: [OnceLock<Histogram>; N_ROUTES],
}

impl HttpMetrics {
    pub(super) fn new() -> Result<Self, TargetError> {
        let registry = crate::metrics::registry("http")?;
        let requests = IntCounterVec::new(
            prometheus::Opts::new(
                "requests_total",
                "HTTP requests answered, by route and status.",
            ),
            &["route", "status"],
        )?;
        let durations = HistogramVec::new(
            crate::metrics::histogram_opts(
                "request_duration_seconds",
                "Time from request head received to response head ready, by route.",
            ),
            &["route"],
        )?;
        let errors = IntCounterVec::new(
            prometheus::Opts::new(
                "errors_total",
                "Errors by kind (connection, tls, body_timeout, body_too_large, bad_request).",
            ),
            &["kind"],
        )?;
        let conn_open = IntGauge::new("connections_open", "Connected clients (open connections).")?;
        let conn_total = IntCounter::new("connections_total", "Connections accepted.")?;
        let conn_rejected = IntCounter::new(
            "connections_rejected_total",
            "Connections closed at accept because the connection cap was reached.",
        )?;
        let tls_resumed = IntCounter::new(
            "tls_resumed_total",
            "TLS handshakes that resumed an earlier session (the rest of the connections were full handshakes).",
        )?;
        let source_ips = IntGauge::new(
            "distinct_source_ips",
            "Distinct client source IP addresses seen since start (tracking is capped).",
        )?;
        let in_flight = IntGauge::new("requests_in_flight", "Requests being handled now.")?;
        registry.register(Box::new(in_flight.clone()))?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(durations.clone()))?;
        registry.register(Box::new(errors.clone()))?;
        registry.register(Box::new(conn_open.clone()))?;
        registry.register(Box::new(conn_total.clone()))?;
        registry.register(Box::new(conn_rejected.clone()))?;
        registry.register(Box::new(tls_resumed.clone()))?;
        registry.register(Box::new(source_ips.clone()))?;
        Ok(Self {
            registry,
            requests,
            durations,
            errors,
            conn_open,
            conn_total,
            conn_rejected,
            tls_resumed,
            source_ips,
            in_flight,
            request_cells: Default::default(),
            duration_cells: Default::default(),
        })
    }

    pub(super) fn observe(&self, route: Route, status: StatusCode, elapsed: Duration) {
        let r = route.index();
        self.duration_cells[r]
            .get_or_init(|| self.durations.with_label_values(&[route.as_str()]))
            .observe(elapsed.as_secs_f64());
        match STATUSES.iter().position(|s| *s == status) {
            Some(s) => self.request_cells[r][s]
                .get_or_init(|| {
                    self.requests
                        .with_label_values(&[route.as_str(), status.as_str()])
                })
                .inc(),
            None => self
                .requests
                .with_label_values(&[route.as_str(), status.as_str()])
                .inc(),
        }
    }

    pub(super) fn error(&self, kind: &str) {
        self.errors.with_label_values(&[kind]).inc();
    }

    pub(super) fn errors_sum(&self) -> u64 {
        [
            "connection",
            "tls",
            "body_timeout",
            "body_too_large",
            "bad_request",
        ]
        .iter()
        .map(|k| self.errors.with_label_values(&[*k]).get())
        .sum()
    }

    pub(super) fn render(&self) -> String {
        crate::metrics::render(&self.registry)
    }
}
