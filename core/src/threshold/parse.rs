//! Reading a threshold expression: its scope, window, metric, operator and limit, each
//! mistake refused with what to write instead.

use super::{
    LatencyStat, Metric, Op, Problem, Scope, StreamFigure, Threshold, ThresholdError,
    ALL_ENDPOINTS, MAX_WINDOW_S,
};

fn bad(expr: &str, problem: Problem) -> ThresholdError {
    ThresholdError {
        expr: expr.to_string(),
        problem,
    }
}

fn parse_latency_stat(s: &str) -> Option<LatencyStat> {
    match s {
        "min" => Some(LatencyStat::Min),
        "mean" | "avg" => Some(LatencyStat::Mean),
        "max" => Some(LatencyStat::Max),
        "median" => Some(LatencyStat::Quantile(0.5)),
        _ => {
            let n: f64 = s.strip_prefix('p')?.parse().ok()?;
            (n > 0.0 && n < 100.0).then_some(LatencyStat::Quantile(n / 100.0))
        }
    }
}

/// Takes a leading `window(D).` off `text`: the window in whole seconds, and the rest.
fn strip_window<'t>(expr: &str, text: &'t str) -> Result<(Option<u64>, &'t str), ThresholdError> {
    let Some(rest) = text.strip_prefix("window(") else {
        return Ok((None, text));
    };
    let (d, tail) = rest
        .split_once(").")
        .ok_or_else(|| bad(expr, Problem::WindowSyntax))?;
    let us = parse_duration_us(d.trim()).ok_or_else(|| bad(expr, Problem::WindowUnit))?;
    let secs = us / 1e6;
    if secs < 1.0 || secs.fract() != 0.0 || secs > MAX_WINDOW_S as f64 {
        return Err(bad(
            expr,
            Problem::WindowLength {
                given: d.to_string(),
            },
        ));
    }
    Ok((Some(secs as u64), tail))
}

fn parse_duration_us(s: &str) -> Option<f64> {
    let (num, mult) = if let Some(n) = s.strip_suffix("us").or_else(|| s.strip_suffix("µs")) {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e6)
    } else {
        return None;
    };
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v * mult)
}

/// A percentage (`0.1%`) or a fraction below 1 (`0.001`). A bare `1` (or more) is refused:
/// users who write `error_rate < 1` mean 1 %, and reading it as 100 % passes every run.
pub(crate) fn parse_fraction(s: &str) -> Option<f64> {
    let v = match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().ok()? / 100.0,
        None => {
            let v = s.parse::<f64>().ok()?;
            if v >= 1.0 {
                return None;
            }
            v
        }
    };
    (v.is_finite() && (0.0..=1.0).contains(&v)).then_some(v)
}

impl Threshold {
    /// Parses one expression; the error says what is wrong with it.
    pub fn parse(expr: &str) -> Result<Self, ThresholdError> {
        let text = expr.trim();
        let (lhs, op, rhs) = ["<=", ">=", "<", ">"]
            .iter()
            .find_map(|op| text.split_once(op).map(|(l, r)| (l.trim(), *op, r.trim())))
            .ok_or_else(|| bad(expr, Problem::NoOperator))?;
        let op = match op {
            "<" => Op::Lt,
            "<=" => Op::Le,
            ">" => Op::Gt,
            _ => Op::Ge,
        };
        let (mut window_s, lhs) = strip_window(expr, lhs)?;
        let scoped = [
            "phase(",
            "step(",
            "workload(",
            "session(",
            "endpoint(",
            "target(",
        ]
        .iter()
        .find_map(|p| lhs.strip_prefix(p).map(|rest| (*p, rest)));
        let (scope, metric_text) = if let Some((kind, rest)) = scoped {
            let (name, tail) = rest
                .split_once(").")
                .ok_or_else(|| bad(expr, Problem::ScopeSyntax))?;
            if name.is_empty() {
                return Err(bad(expr, Problem::EmptyScopeName));
            }
            let name = name.to_string();
            let scope = match kind {
                "phase(" => Scope::Phase(name),
                "step(" => Scope::Step(name),
                "workload(" => Scope::Workload(name),
                "target(" => Scope::Target(name),
                "endpoint(" if name == ALL_ENDPOINTS => Scope::Endpoint(name),
                "endpoint(" => Scope::Endpoint(
                    name.parse::<std::net::SocketAddr>()
                        .map_err(|_| bad(expr, Problem::EndpointAddress))?
                        .to_string(),
                ),
                _ => Scope::Session(name),
            };
            (scope, tail)
        } else {
            (Scope::Run, lhs)
        };
        // `phase(x).window(2s).p99` as well as `window(2s).phase(x).p99`.
        let (inner, metric_text) = strip_window(expr, metric_text)?;
        if inner.is_some() {
            if window_s.is_some() {
                return Err(bad(expr, Problem::TwoWindows));
            }
            window_s = inner;
        }
        let (metric, limit) = match metric_text {
            "error_rate" => (
                Metric::ErrorRate,
                parse_fraction(rhs).ok_or_else(|| bad(expr, Problem::ErrorRateLimit))?,
            ),
            "throughput" | "rps" => {
                if let Some(pct) = rhs.strip_suffix("planned") {
                    (
                        Metric::ThroughputOfPlanned,
                        parse_fraction(pct.trim())
                            .ok_or_else(|| bad(expr, Problem::PlannedShare))?,
                    )
                } else {
                    let v: f64 = rhs
                        .trim_end_matches("/s")
                        .trim()
                        .parse()
                        .map_err(|_| bad(expr, Problem::ThroughputLimit))?;
                    if !v.is_finite() || v < 0.0 {
                        return Err(bad(expr, Problem::NegativeThroughput));
                    }
                    (Metric::Throughput, v)
                }
            }
            m if m.starts_with("ttfb.") || m.starts_with("gap.") => {
                let (figure, stat) = match m.split_once('.') {
                    Some(("ttfb", s)) => (StreamFigure::Ttfb, s),
                    Some((_, s)) => (StreamFigure::Gap, s),
                    None => (StreamFigure::Gap, m),
                };
                if !matches!(scope, Scope::Step(_)) {
                    return Err(bad(expr, Problem::StreamOutsideStep));
                }
                if window_s.is_some() {
                    return Err(bad(expr, Problem::StreamWindow));
                }
                let stat = parse_latency_stat(stat).ok_or_else(|| {
                    bad(
                        expr,
                        Problem::UnknownStreamStat {
                            metric: m.to_string(),
                        },
                    )
                })?;
                let limit =
                    parse_duration_us(rhs).ok_or_else(|| bad(expr, Problem::LatencyUnit))?;
                (Metric::Stream { figure, stat }, limit)
            }
            m => {
                let (service, stat) = match m.strip_prefix("service.") {
                    Some(s) => (true, s),
                    None => (false, m.strip_prefix("response.").unwrap_or(m)),
                };
                let stat = parse_latency_stat(stat).ok_or_else(|| {
                    bad(
                        expr,
                        Problem::UnknownMetric {
                            metric: m.to_string(),
                        },
                    )
                })?;
                let limit =
                    parse_duration_us(rhs).ok_or_else(|| bad(expr, Problem::LatencyUnit))?;
                (Metric::Latency { service, stat }, limit)
            }
        };
        if matches!(scope, Scope::Step(_) | Scope::Session(_))
            && matches!(metric, Metric::Throughput | Metric::ThroughputOfPlanned)
        {
            return Err(bad(expr, Problem::ThroughputScope));
        }
        if matches!(scope, Scope::Endpoint(_)) {
            if window_s.is_some() {
                return Err(bad(expr, Problem::EndpointWindow));
            }
            let ok = match metric {
                Metric::Latency { service, stat } => {
                    !service && matches!(stat, LatencyStat::Quantile(q) if q == 0.5 || q == 0.99)
                }
                Metric::ErrorRate | Metric::Throughput => true,
                Metric::ThroughputOfPlanned | Metric::Stream { .. } => false,
            };
            if !ok {
                return Err(bad(expr, Problem::EndpointMetric));
            }
        }
        Ok(Self {
            expr: expr.to_string(),
            scope,
            metric,
            op,
            limit,
            window_s,
        })
    }
}
