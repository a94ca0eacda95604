//! Failure samples on the wire: a Progress's `failure_samples`, bounded and validated like
//! every other field (counts, lengths, the step's ordinal), the error naming the field.

use stampede_core::samples::{
    escaped_len, RowRef, Sample, MAX_BODY, MAX_DEBUG_BODY, MAX_GRPC_MESSAGE, MAX_HEADERS,
    MAX_KINDS, MAX_REQUEST, MAX_ROWS, MAX_SENT_BODY, MAX_VALUE, MAX_VALUES, PER_KIND,
};
use stampede_core::scenario::MAX_DEBUG;

use crate::convert::{ConvertError, MAX_ERROR_KIND_LEN};
use crate::v1;

/// Most samples one Progress may carry: every pair an agent samples, full.
pub const MAX_SAMPLES: usize = MAX_KINDS * PER_KIND;
/// Longest source name accepted (data source names are scenario keys).
const MAX_SOURCE_LEN: usize = 128;

/// Encodes an agent's samples for its Progress.
pub fn samples_to_wire(samples: Vec<Sample>) -> Vec<v1::FailureSample> {
    samples
        .into_iter()
        .map(|s| v1::FailureSample {
            step: s.step,
            kind: s.kind,
            offset_ms: s.offset_ms,
            rows: s
                .rows
                .into_iter()
                .map(|r| v1::SampleRow {
                    source: r.source,
                    row: r.row,
                    values: r.values,
                })
                .collect(),
            request: s.request,
            status: u32::from(s.status),
            body: s.body,
            headers: s.headers,
            sent_body: s.sent_body,
            grpc_message: s.grpc_message,
        })
        .collect()
}

/// Decodes a Progress's samples, refusing more than [`MAX_SAMPLES`], a step past the run's
/// `steps`, and any text longer than its bound allows.
pub fn samples_from_wire(p: &v1::Progress, steps: usize) -> Result<Vec<Sample>, ConvertError> {
    let bounds = Bounds {
        field: "progress.failure_samples",
        most: MAX_SAMPLES,
        body: MAX_BODY,
        kind_required: true,
    };
    decode(&p.failure_samples, steps, &bounds)
}

/// Decodes a Progress's debug exchanges (`stampede run --debug`): like samples, at most
/// [`MAX_DEBUG`] of them, an answer's body up to [`MAX_DEBUG_BODY`], and an empty kind for
/// a request that succeeded.
pub fn debug_from_wire(p: &v1::Progress, steps: usize) -> Result<Vec<Sample>, ConvertError> {
    let bounds = Bounds {
        field: "progress.debug",
        most: MAX_DEBUG as usize,
        body: MAX_DEBUG_BODY,
        kind_required: false,
    };
    decode(&p.debug, steps, &bounds)
}

/// What one list of samples on the wire may hold.
struct Bounds {
    field: &'static str,
    most: usize,
    body: usize,
    kind_required: bool,
}

fn decode(
    list: &[v1::FailureSample],
    steps: usize,
    bounds: &Bounds,
) -> Result<Vec<Sample>, ConvertError> {
    let field = bounds.field;
    if list.len() > bounds.most {
        return Err(ConvertError::invalid(
            field,
            format!(
                "{} samples, more than the {} an agent keeps",
                list.len(),
                bounds.most
            ),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(k, w)| {
            let at = |name: &str| format!("{field}[{k}].{name}");
            if w.step as usize >= steps {
                return Err(ConvertError::invalid(
                    at("step"),
                    format!("step {} is not one of the run's {steps}", w.step),
                ));
            }
            bounded(&at("kind"), &w.kind, MAX_ERROR_KIND_LEN)?;
            if w.kind.is_empty() && bounds.kind_required {
                return Err(ConvertError::invalid(at("kind"), "empty"));
            }
            bounded(&at("request"), &w.request, escaped_len(MAX_REQUEST))?;
            bounded(&at("body"), &w.body, escaped_len(bounds.body))?;
            bounded(&at("headers"), &w.headers, escaped_len(MAX_HEADERS))?;
            bounded(&at("sent_body"), &w.sent_body, escaped_len(MAX_SENT_BODY))?;
            bounded(
                &at("grpc_message"),
                &w.grpc_message,
                escaped_len(MAX_GRPC_MESSAGE),
            )?;
            let status = u16::try_from(w.status)
                .ok()
                .filter(|s| *s == 0 || (100..1000).contains(s))
                .ok_or_else(|| {
                    ConvertError::invalid(at("status"), format!("{} is no HTTP status", w.status))
                })?;
            if w.rows.len() > MAX_ROWS {
                return Err(ConvertError::invalid(
                    at("rows"),
                    format!("{} rows, more than {MAX_ROWS}", w.rows.len()),
                ));
            }
            let rows = w
                .rows
                .iter()
                .enumerate()
                .map(|(j, r)| {
                    let at = |name: &str| format!("{field}[{k}].rows[{j}].{name}");
                    bounded(&at("source"), &r.source, MAX_SOURCE_LEN)?;
                    if r.values.len() > MAX_VALUES {
                        return Err(ConvertError::invalid(
                            at("values"),
                            format!("{} values, more than {MAX_VALUES}", r.values.len()),
                        ));
                    }
                    for v in &r.values {
                        bounded(&at("values"), v, escaped_len(MAX_VALUE))?;
                    }
                    Ok(RowRef {
                        source: r.source.clone(),
                        row: r.row,
                        values: r.values.clone(),
                    })
                })
                .collect::<Result<_, _>>()?;
            Ok(Sample {
                offset_ms: w.offset_ms,
                step: w.step,
                kind: w.kind.clone(),
                rows,
                request: w.request.clone(),
                headers: w.headers.clone(),
                sent_body: w.sent_body.clone(),
                status,
                body: w.body.clone(),
                grpc_message: w.grpc_message.clone(),
            })
        })
        .collect()
}

fn bounded(field: &str, text: &str, max: usize) -> Result<(), ConvertError> {
    if text.len() > max {
        return Err(ConvertError::invalid(
            field,
            format!("{} bytes, more than {max}", text.len()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one() -> Sample {
        Sample {
            offset_ms: 1_200,
            step: 1,
            kind: "status_401".into(),
            rows: vec![RowRef {
                source: "users".into(),
                row: 11,
                values: vec!["u11".into()],
            }],
            request: "GET /login?user=u11".into(),
            headers: "host: h\\r\\nauthorization: ***".into(),
            sent_body: "k=***".into(),
            status: 401,
            body: r#"{"error":"bad password for u11"}"#.into(),
            grpc_message: String::new(),
        }
    }

    fn progress(samples: Vec<v1::FailureSample>) -> v1::Progress {
        v1::Progress {
            failure_samples: samples,
            debug: Vec::new(),
            ..Default::default()
        }
    }

    #[test]
    fn samples_round_trip() {
        let p = progress(samples_to_wire(vec![one()]));
        assert_eq!(samples_from_wire(&p, 2).unwrap(), vec![one()]);
    }

    #[test]
    fn hostile_samples_name_the_field() {
        let err = |mut f: Box<dyn FnMut(&mut v1::FailureSample)>| {
            let mut w = samples_to_wire(vec![one()]);
            f(&mut w[0]);
            samples_from_wire(&progress(w), 2).unwrap_err().to_string()
        };
        let e = err(Box::new(|w| w.step = 2));
        assert!(e.starts_with("progress.failure_samples[0].step: "), "{e}");
        let e = err(Box::new(|w| w.body = "x".repeat(100_000)));
        assert!(e.starts_with("progress.failure_samples[0].body: "), "{e}");
        let e = err(Box::new(|w| w.headers = "x".repeat(100_000)));
        assert!(
            e.starts_with("progress.failure_samples[0].headers: "),
            "{e}"
        );
        let e = err(Box::new(|w| w.grpc_message = "x".repeat(100_000)));
        assert!(
            e.starts_with("progress.failure_samples[0].grpc_message: "),
            "{e}"
        );
        let e = err(Box::new(|w| w.status = 70_000));
        assert!(e.starts_with("progress.failure_samples[0].status: "), "{e}");
        let e = err(Box::new(|w| w.kind.clear()));
        assert!(e.starts_with("progress.failure_samples[0].kind: "), "{e}");
        let e = err(Box::new(|w| w.rows[0].values = vec![String::new(); 1000]));
        assert!(
            e.starts_with("progress.failure_samples[0].rows[0].values: "),
            "{e}"
        );
        let many = progress(samples_to_wire(vec![one(); MAX_SAMPLES + 1]));
        let e = samples_from_wire(&many, 2).unwrap_err().to_string();
        assert!(e.starts_with("progress.failure_samples: "), "{e}");
    }
}
