//! Conversions between wire messages and core values. Nothing from the wire is trusted:
//! histograms are decoded defensively, and sizes of maps and lists are bounded.

use std::collections::BTreeMap;

use stampede_core::hist::{self, HistError, HistSpec};
use stampede_core::report::LiveSnapshot;
use stampede_core::stats::{Counters, Stats, StepStats};

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
    #[error("{field}: {source}")]
    Hist {
        field: String,
        #[source]
        source: HistError,
    },
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
}

impl ConvertError {
    fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.into(),
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
    field: &str,
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
            requests_started: c.requests_started,
            requests_completed: c.requests_completed,
            requests_failed: c.requests_failed,
            errors: c.errors.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            late_arrivals: c.late_arrivals,
            dropped_arrivals: c.dropped_arrivals,
            out_of_range: c.out_of_range,
            bytes_sent: c.bytes_sent,
            bytes_received: c.bytes_received,
            connections_opened: c.connections_opened,
            peak_open_connections: c.peak_open_connections,
        }
    }
}

fn counters_from_wire(field: &str, c: &v1::Counters) -> Result<Counters, ConvertError> {
    if c.peak_open_connections > MAX_OPEN_CONNECTIONS {
        return Err(ConvertError::invalid(
            format!("{field}.peak_open_connections"),
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
        requests_started: c.requests_started,
        requests_completed: c.requests_completed,
        requests_failed: c.requests_failed,
        errors: errors_from_wire(&format!("{field}.errors"), &c.errors)?,
        late_arrivals: c.late_arrivals,
        dropped_arrivals: c.dropped_arrivals,
        out_of_range: c.out_of_range,
        bytes_sent: c.bytes_sent,
        bytes_received: c.bytes_received,
        connections_opened: c.connections_opened,
        peak_open_connections: c.peak_open_connections,
    })
}

fn enc(field: &str, h: &hdrhistogram::Histogram<u64>) -> Result<Vec<u8>, ConvertError> {
    hist::encode(h).map_err(|source| ConvertError::Hist {
        field: field.to_string(),
        source,
    })
}

fn dec(field: &str, bytes: &[u8]) -> Result<hdrhistogram::Histogram<u64>, ConvertError> {
    hist::decode(bytes).map_err(|source| ConvertError::Hist {
        field: field.to_string(),
        source,
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
                    errors: st.errors.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                    response_hist: enc("steps.response_hist", &st.response)?,
                    service_hist: enc("steps.service_hist", &st.service)?,
                })
            })
            .collect::<Result<_, ConvertError>>()?,
    })
}

/// Decodes one phase sample from the wire. `max_steps` bounds the per-step list.
pub fn sample_from_wire(
    field: &str,
    w: &v1::PhaseSample,
    max_steps: usize,
) -> Result<(u32, Stats), ConvertError> {
    if w.steps.len() > max_steps {
        return Err(ConvertError::invalid(
            format!("{field}.steps"),
            format!(
                "{} steps, but the scenario has {max_steps} request steps",
                w.steps.len()
            ),
        ));
    }
    let counters = w
        .counters
        .as_ref()
        .ok_or_else(|| ConvertError::invalid(format!("{field}.counters"), "missing"))?;
    let steps = w
        .steps
        .iter()
        .enumerate()
        .map(|(i, st)| {
            Ok(StepStats {
                requests_completed: st.requests_completed,
                requests_failed: st.requests_failed,
                errors: errors_from_wire(&format!("{field}.steps[{i}].errors"), &st.errors)?,
                response: dec(
                    &format!("{field}.steps[{i}].response_hist"),
                    &st.response_hist,
                )?,
                service: dec(
                    &format!("{field}.steps[{i}].service_hist"),
                    &st.service_hist,
                )?,
            })
        })
        .collect::<Result<Vec<_>, ConvertError>>()?;
    Ok((
        w.phase,
        Stats {
            counters: counters_from_wire(&format!("{field}.counters"), counters)?,
            response: dec(&format!("{field}.response_hist"), &w.response_hist)?,
            service: dec(&format!("{field}.service_hist"), &w.service_hist)?,
            lag: dec(&format!("{field}.lag_hist"), &w.lag_hist)?,
            steps,
        },
    ))
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
        let (phase, back) = sample_from_wire("progress.samples[0]", &w, 2).unwrap();
        assert_eq!(phase, 1);
        assert_eq!(back, s);
    }

    #[test]
    fn hostile_samples_name_the_field() {
        let s = Stats::with_steps(1);
        let mut w = sample_to_wire(0, &s).unwrap();
        w.service_hist = vec![1, 2, 3];
        let e = sample_from_wire("samples[3]", &w, 1).unwrap_err();
        assert!(
            e.to_string().starts_with("samples[3].service_hist: "),
            "{e}"
        );

        let mut w = sample_to_wire(0, &s).unwrap();
        assert!(sample_from_wire("s", &w, 0)
            .unwrap_err()
            .to_string()
            .starts_with("s.steps: "));
        w.counters = None;
        assert!(sample_from_wire("s", &w, 1)
            .unwrap_err()
            .to_string()
            .contains("s.counters: missing"));

        let mut w = sample_to_wire(0, &s).unwrap();
        if let Some(c) = w.counters.as_mut() {
            for i in 0..100 {
                c.errors.insert(format!("kind{i}"), 1);
            }
        }
        assert!(sample_from_wire("s", &w, 1).is_err());

        let mut w = sample_to_wire(0, &s).unwrap();
        if let Some(c) = w.counters.as_mut() {
            c.peak_open_connections = MAX_OPEN_CONNECTIONS;
        }
        assert!(sample_from_wire("s", &w, 1).is_ok());
        if let Some(c) = w.counters.as_mut() {
            c.peak_open_connections = u64::MAX;
        }
        let e = sample_from_wire("s", &w, 1).unwrap_err().to_string();
        assert!(e.starts_with("s.counters.peak_open_connections: "), "{e}");
    }

    #[test]
    fn spec_check() {
        assert!(check_spec("register.hist_spec", Some(&hist::SPEC.into())).is_ok());
        let mut other = v1::HistSpec::from(hist::SPEC);
        other.significant_digits = 2;
        assert!(check_spec("register.hist_spec", Some(&other)).is_err());
        assert!(check_spec("register.hist_spec", None).is_err());
    }
}
