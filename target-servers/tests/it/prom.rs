//! A strict reader of the Prometheus text exposition format (version 0.0.4), for assertions.

use std::collections::{BTreeMap, HashMap};

/// Sorted `(name, value)` label pairs.
type Labels = Vec<(String, String)>;

/// Samples keyed by metric name and sorted labels.
#[derive(Debug, Default)]
pub struct Metrics {
    pub samples: BTreeMap<(String, Labels), f64>,
    pub types: HashMap<String, String>,
}

impl Metrics {
    /// Parses and validates `text`; panics (failing the test) on any format violation.
    pub fn parse(text: &str) -> Metrics {
        // An independent parser must accept it too.
        let lines = text.lines().map(|l| Ok(l.to_owned()));
        let other =
            prometheus_parse::Scrape::parse(lines).expect("prometheus-parse rejects the scrape");
        assert!(!other.samples.is_empty() || text.trim().is_empty());

        let mut m = Metrics::default();
        for (n, line) in text.lines().enumerate() {
            let ctx = || format!("line {}: {line:?}", n + 1);
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# ") {
                let mut parts = rest.splitn(3, ' ');
                let kind = parts.next().unwrap_or("");
                let name = parts.next().unwrap_or("");
                assert!(valid_name(name), "{}", ctx());
                match kind {
                    "HELP" => {}
                    "TYPE" => {
                        let t = parts.next().unwrap_or("");
                        assert!(
                            ["counter", "gauge", "histogram", "summary", "untyped"].contains(&t),
                            "{}",
                            ctx()
                        );
                        assert!(
                            m.types.insert(name.to_owned(), t.to_owned()).is_none(),
                            "{}",
                            ctx()
                        );
                    }
                    _ => panic!("unknown comment {}", ctx()),
                }
                continue;
            }
            let (name, labels, value) =
                parse_sample(line).unwrap_or_else(|| panic!("bad sample {}", ctx()));
            let family = family_of(&name, &m.types)
                .unwrap_or_else(|| panic!("sample without TYPE {}", ctx()));
            let _ = family;
            assert!(
                m.samples.insert((name, labels), value).is_none(),
                "duplicate series {}",
                ctx()
            );
        }
        m.check_histograms();
        m
    }

    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut l: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        l.sort();
        self.samples.get(&(name.to_owned(), l)).copied()
    }

    /// Buckets are cumulative and the `+Inf` bucket equals `_count`.
    fn check_histograms(&self) {
        for (name, t) in &self.types {
            if t != "histogram" {
                continue;
            }
            let bucket = format!("{name}_bucket");
            let mut series: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
            for ((n, labels), v) in &self.samples {
                if *n != bucket {
                    continue;
                }
                let le = labels
                    .iter()
                    .find(|(k, _)| k == "le")
                    .expect("bucket without le")
                    .1
                    .clone();
                let le: f64 = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().expect("bad le")
                };
                let rest: Vec<_> = labels.iter().filter(|(k, _)| k != "le").cloned().collect();
                series.entry(rest).or_default().push((le, *v));
            }
            for (labels, mut buckets) in series {
                buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
                assert!(
                    buckets.windows(2).all(|w| w[0].1 <= w[1].1),
                    "{name} buckets not cumulative"
                );
                let inf = buckets.last().expect("no buckets");
                assert!(inf.0.is_infinite(), "{name} has no +Inf bucket");
                let count = self
                    .samples
                    .get(&(format!("{name}_count"), labels.clone()))
                    .expect("histogram without _count");
                assert_eq!(inf.1, *count, "{name}: +Inf bucket != _count");
                assert!(
                    self.samples.contains_key(&(format!("{name}_sum"), labels)),
                    "{name}: no _sum"
                );
            }
        }
    }
}

fn family_of<'a>(name: &str, types: &'a HashMap<String, String>) -> Option<&'a String> {
    if let Some(t) = types.get(name) {
        return Some(t);
    }
    for suffix in ["_bucket", "_count", "_sum"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if let Some(t) = types.get(base) {
                return Some(t);
            }
        }
    }
    None
}

fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn parse_sample(line: &str) -> Option<(String, Labels, f64)> {
    let name_end = line.find(['{', ' '])?;
    let name = &line[..name_end];
    if !valid_name(name) {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        let close = r.find('}')?;
        let inner = &r[..close];
        for pair in inner.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=')?;
            if !valid_name(k) || !v.starts_with('"') || !v.ends_with('"') || v.len() < 2 {
                return None;
            }
            labels.push((k.to_owned(), v[1..v.len() - 1].to_owned()));
        }
        rest = &r[close + 1..];
    }
    let value = rest.strip_prefix(' ')?;
    let value: f64 = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().ok()?,
    };
    labels.sort();
    Some((name.to_owned(), labels, value))
}
