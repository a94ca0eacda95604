//! `stampede run --debug N`: one request and its answer as a block of text, the way an agent
//! reported it (escaped, secrets already masked by the agent), for standard error while the
//! run goes on.

use std::fmt::Write as _;

use stampede_proto::v1;

/// The block for exchange `n.0` of `n.1`: a header line (agent, step, time), the request
/// (`> ` lines: line, headers, body) and the answer (`< ` lines: status or error, body).
pub fn exchange(x: &v1::FailureSample, agent: &str, steps: &[String], n: (u32, u32)) -> String {
    let mut o = String::new();
    let step = steps
        .get(x.step as usize)
        .map_or_else(|| format!("#{}", x.step), Clone::clone);
    let _ = write!(
        o,
        "-- debug {}/{}  agent {agent}  step {step}  at {:.3}s",
        n.0,
        n.1,
        x.offset_ms as f64 / 1000.0
    );
    for r in &x.rows {
        let _ = write!(o, "  row {}#{}", r.source, r.row);
    }
    o.push('\n');
    if !x.request.is_empty() {
        let _ = writeln!(o, "> {}", x.request);
    }
    // Headers travel escaped, `\r\n` apart.
    for h in x.headers.split("\\r\\n").filter(|h| !h.is_empty()) {
        let _ = writeln!(o, "> {h}");
    }
    if !x.sent_body.is_empty() {
        let _ = writeln!(o, ">\n> {}", x.sent_body);
    }
    let _ = writeln!(o, "< {}", outcome(x));
    if !x.body.is_empty() {
        let _ = writeln!(o, "< {}", x.body);
    }
    o
}

/// The answer's status line: the HTTP status and the error kind, or the gRPC status and its
/// message, or `ok` for a tcp or udp answer.
fn outcome(x: &v1::FailureSample) -> String {
    let mut parts = Vec::new();
    if x.kind.starts_with("grpc_") {
        parts.push(format!(
            "grpc-status {}",
            x.kind.trim_start_matches("grpc_")
        ));
    } else {
        if x.status != 0 {
            parts.push(x.status.to_string());
        }
        if !x.kind.is_empty() {
            parts.push(format!("error {}", x.kind));
        } else if x.status == 0 {
            parts.push("ok".into());
        }
    }
    if !x.grpc_message.is_empty() {
        parts.push(format!("grpc-message {}", x.grpc_message));
    }
    parts.join("  ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exchange_shows_request_and_answer() {
        let x = v1::FailureSample {
            step: 0,
            kind: "status_401".into(),
            offset_ms: 1_250,
            rows: vec![v1::SampleRow {
                source: "users".into(),
                row: 3,
                values: vec!["u3".into()],
            }],
            request: "POST /login".into(),
            status: 401,
            body: "{\"error\":\"bad\"}".into(),
            headers: "host: h\\r\\nx-key: ***".into(),
            sent_body: "{\"pw\":\"***\"}".into(),
            grpc_message: String::new(),
        };
        let text = exchange(&x, "a-0", &["login".into()], (1, 5));
        assert_eq!(
            text,
            "-- debug 1/5  agent a-0  step login  at 1.250s  row users#3\n\
             > POST /login\n> host: h\n> x-key: ***\n>\n> {\"pw\":\"***\"}\n\
             < 401  error status_401\n< {\"error\":\"bad\"}\n"
        );
        let grpc = v1::FailureSample {
            kind: "grpc_unauthenticated".into(),
            grpc_message: "no token".into(),
            request: "/pkg.Svc/Get".into(),
            ..Default::default()
        };
        let text = exchange(&grpc, "a-0", &[], (2, 5));
        assert!(
            text.contains("< grpc-status unauthenticated  grpc-message no token\n"),
            "{text}"
        );
        assert!(text.contains("step #0"), "{text}");
    }
}
