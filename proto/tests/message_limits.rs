//! Every message between an agent and the controller, built with the real encoders from
//! what a scenario at its validated limits produces, against the decode limit of the stream
//! that carries it: [`MAX_AGENT_MESSAGE_BYTES`] from an agent, the scenario's bound plus
//! [`MESSAGE_OVERHEAD`] to an agent. A message past its limit is refused by the peer's
//! decoder and loses the agent, so each bounded field must fit at its bound, all at once.

use prost::Message;
use stampede_core::endpoints::MAX_INTERVAL_ENDPOINTS;
use stampede_core::extract::MAX_VALUE as MAX_SETUP_VALUE;
use stampede_core::ramp::MAX_STAGES;
use stampede_core::report::MAX_DESTINATIONS;
use stampede_core::samples::{
    escaped_len, RowRef, Sample, MAX_BODY, MAX_DEBUG_BODY, MAX_GRPC_MESSAGE, MAX_HEADERS,
    MAX_REQUEST, MAX_ROWS, MAX_SENT_BODY, MAX_VALUE, MAX_VALUES,
};
use stampede_core::scenario::{
    MAX_AGENT_MESSAGE_BYTES, MAX_DEBUG, MAX_REQUEST_STEPS, MAX_SCENARIO_BYTES, MAX_SETUP_VALUES,
    MESSAGE_OVERHEAD,
};
use stampede_core::stats::IntervalStats;
use stampede_proto::convert::{
    progress_from_wire, sample_to_wire, MAX_ERROR_KINDS, MAX_ERROR_KIND_LEN,
};
use stampede_proto::parts::{split, MAX_PARTS, PART_BYTES};
use stampede_proto::samples::{samples_to_wire, MAX_SAMPLES};
use stampede_proto::v1;

/// A run id as long as the controller makes them, and then some.
const RUN_ID: &str = "run-0123456789abcdef0123456789abcdef";

/// Text of `n` bytes that encodes as `n` bytes (no escapes).
fn text(n: usize) -> String {
    "x".repeat(n)
}

/// Setup values at their bounds: [`MAX_SETUP_VALUES`] values of the longest extracted length.
fn setup_values() -> Vec<String> {
    vec![text(MAX_SETUP_VALUE); MAX_SETUP_VALUES]
}

/// A failure sample with every field at its longest escaped length.
fn full_sample(kind: usize, body: usize) -> Sample {
    Sample {
        offset_ms: u64::MAX,
        step: u32::MAX,
        kind: format!("{kind:0>width$}", width = MAX_ERROR_KIND_LEN),
        rows: (0..MAX_ROWS)
            .map(|r| RowRef {
                source: text(128),
                row: u64::MAX - r as u64,
                values: vec![text(escaped_len(MAX_VALUE)); MAX_VALUES],
            })
            .collect(),
        request: text(escaped_len(MAX_REQUEST)),
        headers: text(escaped_len(MAX_HEADERS)),
        sent_body: text(escaped_len(MAX_SENT_BODY)),
        status: 599,
        body: text(escaped_len(body)),
        grpc_message: text(escaped_len(MAX_GRPC_MESSAGE)),
    }
}

/// A histogram's encoding holding `distinct` different latencies, spread from 1 ms to 60 s:
/// what one step's interval histogram carries under a wide latency spread.
fn wide_hist(distinct: u64) -> Vec<u8> {
    let mut s = IntervalStats::with_steps(1);
    for i in 0..distinct {
        let us = 1_000 + i * (60_000_000 / distinct.max(1));
        s.record_success(0, us, us);
    }
    let phase = sample_to_wire(0, s.settle().unwrap()).unwrap();
    phase.response_hist
}

/// Everything in a Progress but its phase samples, each list at its bound and each entry at
/// its longest.
fn progress_without_samples() -> v1::Progress {
    let hist = wide_hist(10_000);
    v1::Progress {
        run_id: RUN_ID.into(),
        interval: u64::MAX,
        samples: Vec::new(),
        open_connections: u64::MAX,
        resources: Some(v1::AgentResources {
            cpu_share: 1.0,
            rss_bytes: u64::MAX,
            open_files: u64::MAX,
            cores: 4096.0,
            usable_ports: u64::MAX,
            destinations: (0..MAX_DESTINATIONS)
                .map(|_| v1::DestinationPorts {
                    address: "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535".into(),
                    in_use: u64::MAX,
                    time_wait: u64::MAX,
                    addr_not_available: u64::MAX,
                })
                .collect(),
        }),
        endpoints: (0..MAX_INTERVAL_ENDPOINTS)
            .map(|i| v1::EndpointSample {
                endpoint: i as u32,
                completed: u64::MAX,
                failed: u64::MAX,
                connections_opened: u64::MAX,
                response_hist: hist.clone(),
                address: "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535".into(),
            })
            .collect(),
        failure_samples: samples_to_wire(
            (0..MAX_SAMPLES).map(|k| full_sample(k, MAX_BODY)).collect(),
        ),
        debug: samples_to_wire(
            (0..MAX_DEBUG as usize)
                .map(|k| full_sample(k, MAX_DEBUG_BODY))
                .collect(),
        ),
        stage_connects: (0..MAX_STAGES)
            .map(|stage| v1::StageConnects {
                stage: stage as u32,
                hist: wide_hist(64),
            })
            .collect(),
        part: 0,
        parts: 0,
    }
}

/// One phase's sample with `steps` request steps, each with `distinct` latencies and every
/// error kind the controller accepts.
fn phase_sample(steps: usize, distinct: u64) -> v1::PhaseSample {
    let mut s = IntervalStats::with_steps(steps);
    for step in 0..steps {
        for i in 0..distinct {
            let us = 1_000 + i * (60_000_000 / distinct.max(1));
            s.record_success(step, us, us);
        }
    }
    for k in 0..MAX_ERROR_KINDS {
        s.record_failure(0, &format!("{k:0>width$}", width = MAX_ERROR_KIND_LEN));
    }
    sample_to_wire(0, s.settle().unwrap()).unwrap()
}

fn agent_message(m: v1::agent_message::Msg) -> usize {
    v1::AgentMessage { msg: Some(m) }.encoded_len()
}

fn controller_message(m: v1::controller_message::Msg) -> usize {
    v1::ControllerMessage { msg: Some(m) }.encoded_len()
}

#[test]
fn setup_values_at_their_bounds_fit_every_message_that_carries_them() {
    let ready = agent_message(v1::agent_message::Msg::Ready(v1::Ready {
        run_id: RUN_ID.into(),
        planned_sessions: u64::MAX,
        setup_values: setup_values(),
    }));
    let refresh = agent_message(v1::agent_message::Msg::SetupValues(v1::SetupValues {
        run_id: RUN_ID.into(),
        generation: u64::MAX,
        values: setup_values(),
    }));
    // The setup values' cap is half the limit, so these come to just over half of it
    // (2,097,334 bytes on 2026-12-01): inside the limit, whatever else the message holds.
    for (what, len) in [("Ready", ready), ("SetupValues", refresh)] {
        assert!(
            len <= MAX_AGENT_MESSAGE_BYTES,
            "{what}: {len} bytes, over {MAX_AGENT_MESSAGE_BYTES}"
        );
    }
    let start = controller_message(v1::controller_message::Msg::Start(v1::Start {
        run_id: RUN_ID.into(),
        setup_values: setup_values(),
        ..Default::default()
    }));
    assert!(
        start <= MESSAGE_OVERHEAD + MAX_SCENARIO_BYTES,
        "Start: {start} bytes"
    );
    assert!(start <= MAX_AGENT_MESSAGE_BYTES, "Start: {start} bytes");
}

#[test]
fn a_progress_at_every_bound_but_its_step_histograms_fits() {
    let p = progress_without_samples();
    let len = agent_message(v1::agent_message::Msg::Progress(p));
    // The failure samples, debug exchanges, endpoints, destinations and stage connects, all
    // full at once, fit, but they take most of the limit (3,614,283 bytes on 2026-12-01),
    // leaving little to the phase samples: the agent sends such an interval in parts (the
    // next test).
    assert!(
        len <= MAX_AGENT_MESSAGE_BYTES,
        "{len} bytes without phase samples; the limit is {MAX_AGENT_MESSAGE_BYTES}"
    );
}

#[test]
fn a_progress_of_every_request_step_at_a_narrow_spread_fits() {
    // Every request step the run may have, in one interval, each with a few latencies and
    // every error kind on one step: the common case at the step cap.
    let mut p = progress_without_samples();
    p.samples = vec![phase_sample(MAX_REQUEST_STEPS, 4)];
    let len = agent_message(v1::agent_message::Msg::Progress(p));
    assert!(
        len <= MAX_AGENT_MESSAGE_BYTES,
        "{len} bytes; the limit is {MAX_AGENT_MESSAGE_BYTES}"
    );
}

#[test]
fn a_wide_spread_step_is_measured_against_the_limit() {
    // One step's interval histograms under a wide spread: each encoding stays within what the
    // controller decodes, and the figure says how many such steps one Progress holds.
    let one = phase_sample(1, 2_000);
    let step = one.steps[0].encoded_len() + 2;
    assert!(one.steps[0].response_hist.len() <= stampede_core::hist::MAX_ENCODED_BYTES);
    let fixed = agent_message(v1::agent_message::Msg::Progress(progress_without_samples()));
    let room = (MAX_AGENT_MESSAGE_BYTES - fixed) / step;
    eprintln!(
        "a step of 2,000 distinct latencies: {step} bytes; {room} such steps fit beside a full \
         rest of the Progress ({fixed} bytes); MAX_REQUEST_STEPS is {MAX_REQUEST_STEPS}"
    );
    assert!(room >= 1, "not even one wide step fits: {step} bytes");
}

#[test]
fn an_interval_at_every_bound_goes_in_parts_that_each_fit() {
    // Every list at its bound and every request step the run may have, each step with a
    // wide spread: several times the limit, sent in parts that each fit and together hold
    // every entry.
    let mut p = progress_without_samples();
    p.interval = 7;
    p.samples = vec![phase_sample(MAX_REQUEST_STEPS, 2_000)];
    let whole = p.encoded_len();
    let steps = p.samples[0].encoded_len();
    let parts = split(p.clone(), PART_BYTES);
    let n = parts.len();
    assert!(n > 1 && n <= MAX_PARTS as usize, "{n} parts");
    let mut completed = vec![0u64; MAX_REQUEST_STEPS];
    let (mut endpoints, mut failures, mut debug, mut connects) = (0, 0, 0, 0);
    for part in &parts {
        let len = agent_message(v1::agent_message::Msg::Progress(part.clone()));
        assert!(
            len <= MAX_AGENT_MESSAGE_BYTES,
            "part {}: {len} bytes",
            part.part
        );
        let samples = progress_from_wire(part, 1, MAX_REQUEST_STEPS, u64::MAX).unwrap();
        for (_, s) in samples {
            for (k, step) in s.steps.iter().enumerate() {
                completed[k] += step.requests_completed;
            }
        }
        endpoints += part.endpoints.len();
        failures += part.failure_samples.len();
        debug += part.debug.len();
        connects += part.stage_connects.len();
    }
    let wrong: Vec<_> = completed
        .iter()
        .enumerate()
        .filter(|(_, &c)| c != 2_000)
        .take(5)
        .collect();
    assert!(
        wrong.is_empty(),
        "every step's requests, once: {wrong:?} of {n} parts"
    );
    assert_eq!(
        (endpoints, failures, debug, connects),
        (
            p.endpoints.len(),
            p.failure_samples.len(),
            p.debug.len(),
            p.stage_connects.len()
        )
    );
    // 5,344,066 bytes (1,729,793 of them the steps) in 2 parts on 2026-12-02.
    eprintln!(
        "an interval of {whole} bytes at every bound ({steps} of them the steps): {n} parts of \
         at most {PART_BYTES}"
    );
}
