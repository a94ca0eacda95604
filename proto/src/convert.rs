//! Conversions between wire messages and core values. Nothing from the wire is trusted:
//! histograms are decoded defensively, and sizes of maps and lists are bounded.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use stampede_core::endpoints::EndpointStats;
use stampede_core::hist::SparseHist;
use stampede_core::hist::{self, HistError, HistSpec};
use stampede_core::report::{LiveSnapshot, MergeError, RunAccumulator};
use stampede_core::stats::{Counters, SparseStats, SparseStepStats, Stats};

use crate::path::Path;
use crate::v1;

/// Most distinct error kinds one sample may carry.
pub const MAX_ERROR_KINDS: usize = 64;
/// Longest error-kind name accepted.
pub const MAX_ERROR_KIND_LEN: usize = 64;
/// Most connections one agent can claim to hold open at once. One process cannot hold more
/// sockets than it may open files, and Linux caps that (`fs.nr_open`) at 2^30; a larger
/// claim is garbage that would dominate the report's peak, which is a maximum.
pub const MAX_OPEN_CONNECTIONS: u64 = 1 << 30;

/// A wire message that does not convert; the field path says where.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// A histogram's bytes do not decode or encode against the one histogram spec.
    #[error("{field}: {error}")]
    Hist {
        /// The message path of the histogram (`progress.workloads[1].response`).
        field: String,
        /// What the codec refused.
        error: HistError,
    },
    /// A value is out of its bounds or inconsistent with the rest of the message.
    #[error("{field}: {reason}")]
    Invalid {
        /// The message path of the value, as a reader of the `.proto` would write it.
        field: String,
        /// The bound or rule it breaks, for the peer's log.
        reason: String,
    },
    /// Well formed, but it does not fit the run it was sent for.
    #[error("progress: {0}")]
    Refused(MergeError),
}

// Each cause below is part of its variant's message, so it is not also a `source()`
// (`#[from]` would make it one, and a chain printer would say it twice).
impl From<MergeError> for ConvertError {
    fn from(e: MergeError) -> Self {
        Self::Refused(e)
    }
}

impl ConvertError {
    pub(crate) fn invalid(field: impl std::fmt::Display, reason: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.to_string(),
            reason: reason.into(),
        }
    }
}

impl From<HistSpec> for v1::HistSpec {
    fn from(s: HistSpec) -> Self {
        Self {
            lowest_us: s.lowest_us,
            highest_us: s.highest_us,
            significant_digits: u32::from(s.significant_digits),
        }
    }
}

/// Checks that a peer uses the one histogram spec.
pub fn check_spec(field: &str, spec: Option<&v1::HistSpec>) -> Result<(), ConvertError> {
    let expected = v1::HistSpec::from(hist::SPEC);
    match spec {
        Some(s) if *s == expected => Ok(()),
        Some(s) => Err(ConvertError::invalid(
            field,
            format!("histogram spec {s:?} differs from the required {expected:?}"),
        )),
        None => Err(ConvertError::invalid(field, "missing")),
    }
}

fn errors_from_wire(
    field: Path<'_>,
    m: &std::collections::HashMap<String, u64>,
) -> Result<BTreeMap<String, u64>, ConvertError> {
    if m.len() > MAX_ERROR_KINDS {
        return Err(ConvertError::invalid(
            field,
            format!("more than {MAX_ERROR_KINDS} error kinds"),
        ));
    }
    if let Some(k) = m
        .keys()
        .find(|k| k.is_empty() || k.len() > MAX_ERROR_KIND_LEN)
    {
        return Err(ConvertError::invalid(
            field,
            format!(
                "error kind `{}` is empty or too long",
                k.chars().take(80).collect::<String>()
            ),
        ));
    }
    Ok(m.iter().map(|(k, v)| (k.clone(), *v)).collect())
}

impl From<&Counters> for v1::Counters {
    fn from(c: &Counters) -> Self {
        Self {
            sessions_planned: c.sessions_planned,
            sessions_started: c.sessions_started,
            sessions_completed: c.sessions_completed,
            sessions_failed: c.sessions_failed,
            sessions_interrupted: c.sessions_interrupted,
            requests_started: c.requests_started,
            requests_completed: c.requests_completed,
            requests_failed: c.requests_failed,
            requests_interrupted: c.requests_interrupted,
            errors: c.errors.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            late_arrivals: c.late_arrivals,
            dropped_arrivals: c.dropped_arrivals,
            out_of_range: c.out_of_range,
            bytes_sent: c.bytes_sent,
            bytes_received: c.bytes_received,
            bytes_compressed: c.bytes_compressed,
            bytes_decoded: c.bytes_decoded,
            connections_opened: c.connections_opened,
            peak_open_connections: c.peak_open_connections,
            status_codes: c
                .status_codes
                .iter()
                .map(|(k, v)| (u32::from(*k), *v))
                .collect(),
            grpc_statuses: c
                .grpc_statuses
                .iter()
                .map(|(k, v)| (u32::from(*k), *v))
                .collect(),
            session_types: c
                .session_types
                .iter()
                .map(|(k, v)| {
                    (
                        *k,
                        v1::SessionTypeCounts {
                            started: v.started,
                            completed: v.completed,
                            failed: v.failed,
                            interrupted: v.interrupted,
                        },
                    )
                })
                .collect(),
        }
    }
}

/// Session type indexes are bounded by the most workloads times the most types in each;
/// beyond that the map is refused, so it stays small. The run's own bound is checked when
/// the sample is merged.
fn session_types_from_wire(
    field: Path<'_>,
    m: &std::collections::HashMap<u32, v1::SessionTypeCounts>,
) -> Result<BTreeMap<u32, stampede_core::stats::TypeCounts>, ConvertError> {
    const MAX: u32 = (stampede_core::workload::MAX_WORKLOADS
        * stampede_core::workload::MAX_SESSION_TYPES) as u32;
    m.iter()
        .map(|(k, v)| {
            if *k >= MAX {
                return Err(ConvertError::invalid(
                    field,
                    format!("session type {k} is out of range (at most {MAX} types)"),
                ));
            }
            Ok((
                *k,
                stampede_core::stats::TypeCounts {
                    started: v.started,
                    completed: v.completed,
                    failed: v.failed,
                    interrupted: v.interrupted,
                },
            ))
        })
        .collect()
}

/// Status codes are three digits; anything else is refused, so the map stays small.
fn status_codes_from_wire(
    field: Path<'_>,
    m: &std::collections::HashMap<u32, u64>,
) -> Result<BTreeMap<u16, u64>, ConvertError> {
    m.iter()
        .map(|(k, v)| match u16::try_from(*k) {
            Ok(code) if (100..=999).contains(&code) => Ok((code, *v)),
            _ => Err(ConvertError::invalid(
                field,
                format!("status code {k} is not between 100 and 999"),
            )),
        })
        .collect()
}

/// gRPC status codes are 0 to 16; anything else is refused, so the map stays small.
fn grpc_statuses_from_wire(
    field: Path<'_>,
    m: &std::collections::HashMap<u32, u64>,
) -> Result<BTreeMap<u8, u64>, ConvertError> {
    m.iter()
        .map(|(k, v)| match u8::try_from(*k) {
            Ok(code) if code <= 16 => Ok((code, *v)),
            _ => Err(ConvertError::invalid(
                field,
                format!("grpc-status {k} is not between 0 and 16"),
            )),
        })
        .collect()
}

fn counters_from_wire(field: Path<'_>, c: &v1::Counters) -> Result<Counters, ConvertError> {
    if c.peak_open_connections > MAX_OPEN_CONNECTIONS {
        return Err(ConvertError::invalid(
            field.field("peak_open_connections"),
            format!(
                "{} is more connections than one agent can hold (at most {MAX_OPEN_CONNECTIONS})",
                c.peak_open_connections
            ),
        ));
    }
    Ok(Counters {
        sessions_planned: c.sessions_planned,
        sessions_started: c.sessions_started,
        sessions_completed: c.sessions_completed,
        sessions_failed: c.sessions_failed,
        sessions_interrupted: c.sessions_interrupted,
        requests_started: c.requests_started,
        requests_completed: c.requests_completed,
        requests_failed: c.requests_failed,
        requests_interrupted: c.requests_interrupted,
        errors: errors_from_wire(field.field("errors"), &c.errors)?,
        late_arrivals: c.late_arrivals,
        dropped_arrivals: c.dropped_arrivals,
        out_of_range: c.out_of_range,
        bytes_sent: c.bytes_sent,
        bytes_received: c.bytes_received,
        bytes_compressed: c.bytes_compressed,
        bytes_decoded: c.bytes_decoded,
        connections_opened: c.connections_opened,
        peak_open_connections: c.peak_open_connections,
        status_codes: status_codes_from_wire(field.field("status_codes"), &c.status_codes)?,
        grpc_statuses: grpc_statuses_from_wire(field.field("grpc_statuses"), &c.grpc_statuses)?,
        session_types: session_types_from_wire(field.field("session_types"), &c.session_types)?,
    })
}

/// Wire form: small histograms uncompressed ([`hist::encode_wire`]).
fn enc(field: &str, h: &hdrhistogram::Histogram<u64>) -> Result<Vec<u8>, ConvertError> {
    hist::encode_wire(h).map_err(|error| ConvertError::Hist {
        field: field.to_string(),
        error,
    })
}

fn enc_sparse(field: &str, h: &SparseHist) -> Result<Vec<u8>, ConvertError> {
    hist::encode_wire_sparse(h).map_err(|error| ConvertError::Hist {
        field: field.to_string(),
        error,
    })
}

/// A histogram most steps leave empty (the stream ones): sent as no bytes at all when empty.
fn enc_sparse_opt(field: &str, h: &SparseHist) -> Result<Vec<u8>, ConvertError> {
    if h.is_empty() {
        return Ok(Vec::new());
    }
    enc_sparse(field, h)
}

/// The reverse of [`enc_sparse_opt`]: no bytes is an empty histogram.
fn dec_opt(field: Path<'_>, bytes: &[u8]) -> Result<SparseHist, ConvertError> {
    if bytes.is_empty() {
        return Ok(SparseHist::default());
    }
    dec(field, bytes)
}

fn dec(field: Path<'_>, bytes: &[u8]) -> Result<SparseHist, ConvertError> {
    hist::decode_sparse(bytes).map_err(|error| ConvertError::Hist {
        field: field.to_string(),
        error,
    })
}

/// Encodes one phase's interval stats for the wire.
pub fn sample_to_wire(phase: u32, s: &Stats) -> Result<v1::PhaseSample, ConvertError> {
    Ok(v1::PhaseSample {
        phase,
        counters: Some(v1::Counters::from(&s.counters)),
        response_hist: enc("response_hist", &s.response)?,
        service_hist: enc("service_hist", &s.service)?,
        lag_hist: enc("lag_hist", &s.lag)?,
        steps: s
            .steps
            .iter()
            .map(|st| {
                Ok(v1::StepSample {
                    requests_completed: st.requests_completed,
                    requests_failed: st.requests_failed,
                    requests_interrupted: st.requests_interrupted,
                    errors: st.errors.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                    response_hist: enc_sparse("steps.response_hist", &st.response)?,
                    service_hist: enc_sparse("steps.service_hist", &st.service)?,
                    ttfb_hist: enc_sparse_opt("steps.ttfb_hist", &st.ttfb)?,
                    gap_hist: enc_sparse_opt("steps.gap_hist", &st.gap)?,
                })
            })
            .collect::<Result<_, ConvertError>>()?,
        first_step: 0,
    })
}

/// A sample's steps, from its `first_step` on, within the scenario's `max_steps`.
fn check_steps(field: Path<'_>, w: &v1::PhaseSample, max_steps: usize) -> Result<(), ConvertError> {
    let last = (w.first_step as usize).saturating_add(w.steps.len());
    if last > max_steps {
        return Err(ConvertError::invalid(
            field.field("steps"),
            format!(
                "{} steps from step {}, but the scenario has {max_steps} request steps",
                w.steps.len(),
                w.first_step
            ),
        ));
    }
    Ok(())
}

/// Decodes one phase sample from the wire, straight into sparse histograms (the controller
/// never builds the 184 KiB dense form). `max_steps` bounds the per-step list.
pub fn sample_from_wire(
    field: Path<'_>,
    w: &v1::PhaseSample,
    max_steps: usize,
) -> Result<(u32, SparseStats), ConvertError> {
    check_steps(field, w, max_steps)?;
    let counters = w
        .counters
        .as_ref()
        .ok_or_else(|| ConvertError::invalid(field.field("counters"), "missing"))?;
    let steps = w
        .steps
        .iter()
        .enumerate()
        .map(|(i, st)| {
            let step = field.at("steps", i);
            Ok(SparseStepStats {
                requests_completed: st.requests_completed,
                requests_failed: st.requests_failed,
                requests_interrupted: st.requests_interrupted,
                errors: errors_from_wire(step.field("errors"), &st.errors)?,
                response: dec(step.field("response_hist"), &st.response_hist)?,
                service: dec(step.field("service_hist"), &st.service_hist)?,
                ttfb: dec_opt(step.field("ttfb_hist"), &st.ttfb_hist)?,
                gap: dec_opt(step.field("gap_hist"), &st.gap_hist)?,
            })
        })
        .collect::<Result<Vec<_>, ConvertError>>()?;
    // A later share of a split sample: the steps before it are empty here.
    let steps = std::iter::repeat_with(SparseStepStats::default)
        .take(w.first_step as usize)
        .chain(steps)
        .collect();
    Ok((
        w.phase,
        SparseStats {
            counters: counters_from_wire(field.field("counters"), counters)?,
            response: dec(field.field("response_hist"), &w.response_hist)?,
            service: dec(field.field("service_hist"), &w.service_hist)?,
            lag: dec(field.field("lag_hist"), &w.lag_hist)?,
            steps,
        },
    ))
}

/// Validates a whole Progress before decoding anything, then decodes every sample once.
///
/// An agent sends at most one sample per phase, each with at most the scenario's request
/// steps, for an interval the run can have; anything else is refused whole, so a hostile or
/// broken agent cannot make the controller decode thousands of histograms.
pub fn progress_from_wire(
    p: &v1::Progress,
    phases: usize,
    max_steps: usize,
    max_interval: u64,
) -> Result<Vec<(u32, SparseStats)>, ConvertError> {
    if p.samples.len() > phases {
        return Err(ConvertError::invalid(
            "progress.samples",
            format!(
                "{} samples, but the run has {phases} phases",
                p.samples.len()
            ),
        ));
    }
    if p.interval > max_interval {
        return Err(ConvertError::invalid(
            "progress.interval",
            format!(
                "interval {} is past the run's last possible interval {max_interval}",
                p.interval
            ),
        ));
    }
    if crate::parts::part_count(p.part, p.parts).is_none() {
        return Err(ConvertError::invalid(
            "progress.part",
            format!(
                "part {} of {}: at most {} parts, numbered from 0",
                p.part,
                p.parts,
                crate::parts::MAX_PARTS
            ),
        ));
    }
    let progress = Path::root("progress");
    // One sample per phase: a second one for the same phase would be merged twice.
    let mut seen: Vec<u32> = p.samples.iter().map(|w| w.phase).collect();
    seen.sort_unstable();
    if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
        return Err(ConvertError::invalid(
            "progress.samples",
            format!("two samples for phase {}", w[0]),
        ));
    }
    for (k, w) in p.samples.iter().enumerate() {
        if w.phase as usize >= phases {
            return Err(ConvertError::invalid(
                format!("progress.samples[{k}].phase"),
                format!("phase {} is not one of the run's {phases}", w.phase),
            ));
        }
        check_steps(progress.at("samples", k), w, max_steps)?;
    }
    p.samples
        .iter()
        .enumerate()
        .map(|(k, w)| sample_from_wire(progress.at("samples", k), w, max_steps))
        .collect()
}

/// One agent's Progress, checked against the run it was sent for and decoded once: what
/// [`progress_from_wire`] refuses, then what [`RunAccumulator::check_progress`] refuses (data
/// the accumulator would not add whole). The controller's run driver merges the result with
/// [`RunAccumulator::add_progress`]; a refused Progress counts for nothing.
pub fn check_progress(
    acc: &RunAccumulator,
    agent: usize,
    p: &v1::Progress,
) -> Result<Vec<(u32, SparseStats)>, ConvertError> {
    let samples = progress_from_wire(p, acc.phase_count(), acc.step_count(), acc.max_interval())?;
    acc.check_progress(agent, p.interval, &samples)?;
    Ok(samples)
}

/// Encodes one interval's per-endpoint figures (address, figures) for a Progress;
/// endpoints with nothing recorded are left out.
pub fn endpoints_to_wire(
    rows: &[(SocketAddr, EndpointStats)],
) -> Result<Vec<v1::EndpointSample>, ConvertError> {
    rows.iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(a, s)| {
            Ok(v1::EndpointSample {
                endpoint: 0,
                address: a.to_string(),
                completed: s.completed,
                failed: s.failed,
                connections_opened: s.connections,
                response_hist: enc("endpoints.response_hist", &s.response.to_dense())?,
            })
        })
        .collect()
}

/// Longest `ip:port` text (a full IPv6 address with a zone and a port is shorter).
const MAX_ADDRESS_LEN: usize = 64;

/// Decodes a Progress's per-endpoint figures, each named by its address, or (without one)
/// by its index among the scenario's `listed` endpoints. Refuses an address that is not
/// `ip:port`, an index past the list, a second sample for one endpoint, or more samples
/// than [`stampede_core::endpoints::MAX_ENDPOINTS`].
pub fn endpoints_from_wire(
    p: &v1::Progress,
    listed: &[SocketAddr],
) -> Result<Vec<(SocketAddr, EndpointStats)>, ConvertError> {
    let max = stampede_core::endpoints::MAX_ENDPOINTS;
    if p.endpoints.len() > max {
        return Err(ConvertError::invalid(
            "progress.endpoints",
            format!("{} samples; at most {max}", p.endpoints.len()),
        ));
    }
    let mut seen = std::collections::HashSet::with_capacity(p.endpoints.len());
    let progress = Path::root("progress");
    p.endpoints
        .iter()
        .enumerate()
        .map(|(k, w)| {
            let field = progress.at("endpoints", k);
            let address = if w.address.is_empty() {
                let i = w.endpoint as usize;
                *listed.get(i).ok_or_else(|| {
                    ConvertError::invalid(
                        field.field("endpoint"),
                        format!("endpoint {i} is not one of the scenario's {}", listed.len()),
                    )
                })?
            } else {
                let text = w.address.get(..MAX_ADDRESS_LEN.min(w.address.len()));
                match (w.address.len() <= MAX_ADDRESS_LEN, text.map(str::parse)) {
                    (true, Some(Ok(a))) => a,
                    _ => {
                        return Err(ConvertError::invalid(
                            field.field("address"),
                            "not an ip:port address".to_string(),
                        ))
                    }
                }
            };
            if !seen.insert(address) {
                return Err(ConvertError::invalid(
                    field.field("address"),
                    format!("two samples for endpoint {address}"),
                ));
            }
            Ok((
                address,
                EndpointStats {
                    completed: w.completed,
                    failed: w.failed,
                    connections: w.connections_opened,
                    response: dec(field.field("response_hist"), &w.response_hist)?,
                },
            ))
        })
        .collect()
}

impl From<&LiveSnapshot> for v1::LiveSnapshot {
    fn from(s: &LiveSnapshot) -> Self {
        Self {
            elapsed_s: s.elapsed_s,
            planned_so_far: s.planned_so_far,
            completed: s.completed,
            failed: s.failed,
            rps: s.rps,
            p50_us: s.p50_us,
            p99_us: s.p99_us,
            active_agents: s.active_agents,
            planned_duration_s: 0.0,
            errors: s.errors.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            busiest_agent: s
                .busiest_agent
                .as_ref()
                .map(|a| a.agent.clone())
                .unwrap_or_default(),
            busiest_agent_cpu_pct: s.busiest_agent.as_ref().map(|a| a.cpu_pct),
            target_cpu_cores: s.target_cpu_cores,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_round_trips() {
        let mut s = Stats::with_steps(2);
        s.record_start(120);
        s.record_success(0, 5_000, 4_000);
        s.record_success(1, 7_000, 6_500);
        s.record_failure(1, "reset");
        s.counters.connections_opened = 3;
        s.counters.peak_open_connections = 2;
        let w = sample_to_wire(1, &s).unwrap();
        let (phase, back) = sample_from_wire(Path::root("progress.samples[0]"), &w, 2).unwrap();
        assert_eq!(phase, 1);
        assert_eq!(back, SparseStats::from(&s));
    }

    #[test]
    fn hostile_samples_name_the_field() {
        let s = Stats::with_steps(1);
        let mut w = sample_to_wire(0, &s).unwrap();
        w.service_hist = vec![1, 2, 3];
        let e = sample_from_wire(Path::root("samples[3]"), &w, 1).unwrap_err();
        assert!(
            e.to_string().starts_with("samples[3].service_hist: "),
            "{e}"
        );

        let mut w = sample_to_wire(0, &s).unwrap();
        assert!(sample_from_wire(Path::root("s"), &w, 0)
            .unwrap_err()
            .to_string()
            .starts_with("s.steps: "));
        w.counters = None;
        assert!(sample_from_wire(Path::root("s"), &w, 1)
            .unwrap_err()
            .to_string()
            .contains("s.counters: missing"));

        let mut w = sample_to_wire(0, &s).unwrap();
        if let Some(c) = w.counters.as_mut() {
            for i in 0..100 {
                c.errors.insert(format!("kind{i}"), 1);
            }
        }
        assert!(sample_from_wire(Path::root("s"), &w, 1).is_err());

        let mut w = sample_to_wire(0, &s).unwrap();
        if let Some(c) = w.counters.as_mut() {
            c.peak_open_connections = MAX_OPEN_CONNECTIONS;
        }
        assert!(sample_from_wire(Path::root("s"), &w, 1).is_ok());
        if let Some(c) = w.counters.as_mut() {
            c.peak_open_connections = u64::MAX;
        }
        let e = sample_from_wire(Path::root("s"), &w, 1)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("s.counters.peak_open_connections: "), "{e}");
    }

    #[test]
    fn progress_is_validated_before_decoding() {
        let s = Stats::with_steps(1);
        let sample = sample_to_wire(0, &s).unwrap();
        let mut p = v1::Progress {
            run_id: "r".into(),
            interval: 3,
            samples: vec![sample.clone()],
            open_connections: 0,
            resources: None,
            endpoints: Vec::new(),
            failure_samples: Vec::new(),
            stage_connects: Vec::new(),
            debug: Vec::new(),
            ..Default::default()
        };
        assert_eq!(progress_from_wire(&p, 1, 1, 10).unwrap().len(), 1);
        let too_far = progress_from_wire(&p, 1, 1, 2).unwrap_err().to_string();
        assert!(too_far.starts_with("progress.interval: "), "{too_far}");
        // Thousands of samples are refused on their count, before any is decoded.
        let mut garbage = sample.clone();
        garbage.response_hist = vec![0xff; 64];
        p.samples = vec![garbage; 10_000];
        let many = progress_from_wire(&p, 2, 1, 10).unwrap_err().to_string();
        assert!(many.starts_with("progress.samples: "), "{many}");
        p.samples = vec![sample.clone()];
        p.samples[0].phase = 5;
        assert!(progress_from_wire(&p, 2, 1, 10).is_err());
        // Two samples for one phase would be merged twice.
        p.samples = vec![sample.clone(), sample.clone()];
        let twice = progress_from_wire(&p, 2, 1, 10).unwrap_err().to_string();
        assert_eq!(twice, "progress.samples: two samples for phase 0");
    }

    #[test]
    fn progress_is_checked_against_its_run() {
        let scenario = stampede_core::Scenario::from_yaml(
            "name: p\ntarget: http://h:1\nphases: [{ duration: 2s, arrival_rate: 1 }]\nsession: [{ http: { path: / } }]\n",
        )
        .unwrap();
        let plan = stampede_core::plan::Plan::new(&scenario, 1, &[], 0).unwrap();
        let acc = RunAccumulator::new(&scenario, plan, vec!["a".into()], 1.0);
        let mut s = Stats::with_steps(1);
        s.record_success(0, 5_000, 4_000);
        let p = v1::Progress {
            run_id: "r".into(),
            interval: 1,
            samples: vec![sample_to_wire(0, &s).unwrap()],
            open_connections: 0,
            resources: None,
            endpoints: Vec::new(),
            failure_samples: Vec::new(),
            stage_connects: Vec::new(),
            debug: Vec::new(),
            ..Default::default()
        };
        assert_eq!(check_progress(&acc, 0, &p).unwrap().len(), 1);
        let e = check_progress(&acc, 1, &p).unwrap_err();
        assert!(
            matches!(e, ConvertError::Refused(MergeError::UnknownAgent(1))),
            "{e}"
        );
        let mut two_steps = p.clone();
        two_steps.samples = vec![sample_to_wire(0, &Stats::with_steps(2)).unwrap()];
        let e = check_progress(&acc, 0, &two_steps).unwrap_err().to_string();
        assert!(e.starts_with("progress.samples[0].steps: "), "{e}");
    }

    #[test]
    fn spec_check() {
        assert!(check_spec("register.hist_spec", Some(&hist::SPEC.into())).is_ok());
        let mut other = v1::HistSpec::from(hist::SPEC);
        other.significant_digits = 2;
        assert!(check_spec("register.hist_spec", Some(&other)).is_err());
        assert!(check_spec("register.hist_spec", None).is_err());
    }

    /// Per-endpoint figures cross the wire whole, named by address; an index past the
    /// scenario's endpoints, an address that is not one, or a second sample for one endpoint
    /// is refused, naming the field.
    #[test]
    fn endpoint_samples_round_trip_and_are_bounded() {
        let mut s = EndpointStats {
            completed: 5,
            failed: 1,
            connections: 2,
            ..Default::default()
        };
        s.response.record_n(1_500, 5);
        let (a, b): (SocketAddr, SocketAddr) =
            ("127.0.0.2:80".parse().unwrap(), "[::1]:80".parse().unwrap());
        let wire = endpoints_to_wire(&[(a, s.clone()), (b, EndpointStats::default())]).unwrap();
        assert_eq!(wire.len(), 1, "an empty endpoint is left out");
        let mut p = v1::Progress {
            endpoints: wire,
            failure_samples: Vec::new(),
            debug: Vec::new(),
            ..Default::default()
        };
        let back = endpoints_from_wire(&p, &[]).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].0, a);
        assert_eq!(
            (back[0].1.completed, back[0].1.failed, back[0].1.connections),
            (5, 1, 2)
        );
        assert_eq!(back[0].1.response.len(), 5);
        p.endpoints.push(p.endpoints[0].clone());
        let e = endpoints_from_wire(&p, &[]).unwrap_err().to_string();
        assert!(e.contains("two samples"), "{e}");
        // Without an address, the index names one of the scenario's endpoints.
        p.endpoints[1].address.clear();
        p.endpoints[1].endpoint = 1;
        let back = endpoints_from_wire(&p, &[a, b]).unwrap();
        assert_eq!(back[1].0, b);
        let e = endpoints_from_wire(&p, &[a]).unwrap_err().to_string();
        assert!(e.starts_with("progress.endpoints[1].endpoint"), "{e}");
        p.endpoints[1].address = "x".repeat(10_000);
        let e = endpoints_from_wire(&p, &[a]).unwrap_err().to_string();
        assert!(e.starts_with("progress.endpoints[1].address"), "{e}");
    }
}
