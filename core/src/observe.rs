//! The target's own resources beside the latency (`observe:`): the standard Prometheus process
//! metrics of the target, scraped every interval by whoever merges the run, turned here into
//! CPU cores used per interval and over the run. A knee at 2,400 req/s says little; 480 req/s
//! per target core, with the CPU saturated, says why.
//!
//! Pure: the scraping (sockets, clocks) lives with the controller; this module parses the text
//! exposition format and does the arithmetic.

pub mod text;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most sources a scenario may observe.
pub const MAX_SOURCES: usize = 64;

/// Most bytes of one scrape read (a process's metrics are a few KiB).
pub const MAX_SCRAPE_BYTES: usize = 4 << 20;

/// One place to read the target's resources from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ObserveSource {
    /// A Prometheus text endpoint (`http://host:port/metrics`) exporting the standard process
    /// metrics `process_cpu_seconds_total` and `process_resident_memory_bytes`.
    pub prometheus: String,
}

/// A Prometheus URL split for a plain HTTP GET.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrapeUrl {
    /// `host:port` to connect to.
    pub authority: String,
    /// The request path, `/metrics` when the URL has none.
    pub path: String,
}

/// Why a source's URL cannot be scraped with a plain HTTP GET.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScrapeUrlError {
    /// Another scheme (https, none): the scraper speaks plain HTTP only.
    #[error("`{url}` is not an http:// URL")]
    NotHttp {
        /// The URL as the scenario gives it.
        url: String,
    },
    /// An empty host, user info, or whitespace in the authority.
    #[error("`{url}` has no usable host")]
    NoHost {
        /// The URL as the scenario gives it.
        url: String,
    },
}

/// Parses an `http://host[:port][/path]` URL (no TLS, no user info): the error says why.
pub fn scrape_url(url: &str) -> Result<ScrapeUrl, ScrapeUrlError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| ScrapeUrlError::NotHttp { url: url.into() })?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/metrics"),
    };
    if authority.is_empty() || authority.contains('@') || authority.contains(char::is_whitespace) {
        return Err(ScrapeUrlError::NoHost { url: url.into() });
    }
    let authority = if authority.ends_with(']') || !authority.contains(':') {
        format!("{authority}:80")
    } else {
        authority.to_string()
    };
    Ok(ScrapeUrl {
        authority,
        path: path.to_string(),
    })
}

/// Checks the `observe:` list; the error is (field path, reason).
pub fn validate(sources: &[ObserveSource]) -> Result<(), (String, String)> {
    if sources.len() > MAX_SOURCES {
        return Err((
            "observe".into(),
            format!("{} sources; at most {MAX_SOURCES}", sources.len()),
        ));
    }
    for (i, s) in sources.iter().enumerate() {
        scrape_url(&s.prometheus)
            .map_err(|why| (format!("observe[{i}].prometheus"), why.to_string()))?;
    }
    Ok(())
}

/// What one scrape of a source found (serialized in the controller's checkpoint, so a
/// restarted controller keeps what was scraped before it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessSample {
    /// `process_cpu_seconds_total`: CPU time the process used since it started.
    pub cpu_seconds: Option<f64>,
    /// `process_resident_memory_bytes`.
    pub resident_bytes: Option<f64>,
}

/// Reads the process metrics from a text exposition. Several series of one name (a metric
/// with labels) add up; comments and other metrics are skipped; a value that is not a finite
/// number is ignored.
pub fn parse_process_metrics(text: &str) -> ProcessSample {
    let mut out = ProcessSample::default();
    for l in text::samples(text) {
        let slot = match l.name {
            "process_cpu_seconds_total" => &mut out.cpu_seconds,
            "process_resident_memory_bytes" => &mut out.resident_bytes,
            _ => continue,
        };
        *slot = Some(slot.unwrap_or(0.0) + l.value);
    }
    out
}

/// One scrape of one source, at `at_s` seconds after the run's T0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scrape {
    /// When it was taken, seconds after T0.
    pub at_s: f64,
    /// The process figures it read.
    pub sample: ProcessSample,
}

/// The `target_resources` of the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetResources {
    /// The observed sources, as the scenario listed them.
    pub sources: Vec<String>,
    /// CPU cores the observed processes used together (a rate of their CPU counters).
    pub cpu_cores: CpuCores,
    /// The largest resident memory seen, all sources together, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_resident_bytes: Option<u64>,
    /// Scrapes that failed (a source down, a reply without the metrics).
    #[serde(default)]
    pub failed_scrapes: u64,
    /// The pods behind a cluster target (`endpoints: service`), each with its CPU, throttling,
    /// memory and restarts (see [`crate::pods`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<crate::pods::PodResources>,
    /// The Service's ready replicas each time their count changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ready_replicas: Vec<crate::pods::ReadyReplicas>,
    /// Why the pods' figures could not be read (forbidden, not found), when they could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_unavailable: Option<String>,
}

/// CPU cores used, over the run and per interval between scrapes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuCores {
    /// CPU seconds used between the first and the last scrape, over the seconds between them.
    pub total: f64,
    /// Each interval's cores: `[{ start_s, interval_s, cpu_cores }]`.
    pub intervals: Vec<CpuInterval>,
}

/// CPU cores used between two consecutive scrapes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuInterval {
    /// Start of the interval, seconds after T0.
    pub start_s: f64,
    /// Its length, seconds.
    pub interval_s: f64,
    /// CPU seconds used over it, per second of it.
    pub cpu_cores: f64,
}

/// Builds `target_resources` from each source's scrapes (in time order, failed ones
/// already left out), adding the sources up. An interval is the span between consecutive
/// scrapes of the first source with two or more; a source's rate is spread over the same
/// spans by its own scrapes. A counter that went down (the process restarted) counts from
/// zero again.
pub fn resources(sources: &[(String, Vec<Scrape>)], failed_scrapes: u64) -> TargetResources {
    let cpu_series: Vec<Vec<(f64, f64)>> = sources
        .iter()
        .map(|(_, s)| {
            s.iter()
                .filter_map(|x| Some((x.at_s, x.sample.cpu_seconds?)))
                .collect()
        })
        .collect();
    let used =
        |series: &[(f64, f64)]| -> f64 { series.windows(2).map(|w| rise(w[0].1, w[1].1)).sum() };
    let mut total = 0.0;
    for s in &cpu_series {
        if let (Some(a), Some(b)) = (s.first(), s.last()) {
            if b.0 > a.0 {
                total += used(s) / (b.0 - a.0);
            }
        }
    }
    let mut intervals = Vec::new();
    if let Some(spans) = cpu_series.iter().find(|s| s.len() >= 2) {
        for w in spans.windows(2) {
            let (start, end) = (w[0].0, w[1].0);
            if end <= start {
                continue;
            }
            let cores: f64 = cpu_series.iter().map(|s| rate_within(s, start, end)).sum();
            intervals.push(CpuInterval {
                start_s: start,
                interval_s: end - start,
                cpu_cores: cores,
            });
        }
    }
    let max_resident = sources
        .iter()
        .map(|(_, s)| {
            s.iter()
                .filter_map(|x| x.sample.resident_bytes)
                .fold(0.0f64, f64::max)
        })
        .sum::<f64>();
    TargetResources {
        sources: sources.iter().map(|(n, _)| n.clone()).collect(),
        cpu_cores: CpuCores { total, intervals },
        max_resident_bytes: (max_resident > 0.0).then_some(max_resident as u64),
        failed_scrapes,
        ..TargetResources::default()
    }
}

/// How much a counter rose from `a` to `b`; one that went down (its process restarted)
/// counts from zero again.
pub fn rise(a: f64, b: f64) -> f64 {
    if b >= a {
        b - a
    } else {
        b
    }
}

/// A counter's rate between its last two readings `(at_s, value)`, given in time order;
/// `None` before two, or when they are not in time order. The live view's "cores now".
pub fn latest_rate(readings: impl DoubleEndedIterator<Item = (f64, f64)>) -> Option<f64> {
    let mut last = readings.rev();
    let (b, a) = (last.next()?, last.next()?);
    (b.0 > a.0).then(|| rise(a.1, b.1) / (b.0 - a.0))
}

/// The cores the sources used between each one's last two scrapes with a CPU figure, added
/// up; `None` before any source has two.
pub fn latest_cores<'a>(sources: impl IntoIterator<Item = &'a [Scrape]>) -> Option<f64> {
    sources
        .into_iter()
        .filter_map(|scrapes| {
            latest_rate(
                scrapes
                    .iter()
                    .filter_map(|x| Some((x.at_s, x.sample.cpu_seconds?))),
            )
        })
        .reduce(|a, b| a + b)
}

/// A series' mean rate between `start` and `end`: its CPU seconds over the span of its own
/// scrapes that overlap the window, weighted by the overlap.
fn rate_within(series: &[(f64, f64)], start: f64, end: f64) -> f64 {
    let mut cpu = 0.0;
    for w in series.windows(2) {
        let (a, b) = (w[0].0, w[1].0);
        if b <= a {
            continue;
        }
        let overlap = (b.min(end) - a.max(start)).max(0.0);
        if overlap > 0.0 {
            cpu += rise(w[0].1, w[1].1) * overlap / (b - a);
        }
    }
    cpu / (end - start)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP process_cpu_seconds_total Total user and system CPU time.\n\
        # TYPE process_cpu_seconds_total counter\n\
        process_cpu_seconds_total 12.5\n\
        process_resident_memory_bytes 1.048576e+07\n\
        process_cpu_seconds_total_other 99\n\
        http_requests_total{path=\"/a b\"} 7\n";

    #[test]
    fn the_process_metrics_are_read_and_others_skipped() {
        let s = parse_process_metrics(TEXT);
        assert_eq!(s.cpu_seconds, Some(12.5));
        assert_eq!(s.resident_bytes, Some(10_485_760.0));
        let labelled = parse_process_metrics(
            "process_cpu_seconds_total{pod=\"a b\"} 1.5 1700000000\nprocess_cpu_seconds_total{pod=\"c\"} 2\n",
        );
        assert_eq!(labelled.cpu_seconds, Some(3.5));
        assert_eq!(
            parse_process_metrics("process_cpu_seconds_total NaN\n").cpu_seconds,
            None
        );
        assert_eq!(parse_process_metrics("").cpu_seconds, None);
    }

    #[test]
    fn urls_are_split_and_bad_ones_named() {
        let u = scrape_url("http://127.0.0.1:9102/metrics").unwrap();
        assert_eq!(
            (u.authority.as_str(), u.path.as_str()),
            ("127.0.0.1:9102", "/metrics")
        );
        assert_eq!(scrape_url("http://[::1]").unwrap().authority, "[::1]:80");
        let bad = [ObserveSource {
            prometheus: "https://x/metrics".into(),
        }];
        let (path, why) = validate(&bad).unwrap_err();
        assert_eq!(path, "observe[0].prometheus");
        assert!(why.contains("http://"), "{why}");
    }

    fn scrape(at_s: f64, cpu: f64) -> Scrape {
        Scrape {
            at_s,
            sample: ProcessSample {
                cpu_seconds: Some(cpu),
                resident_bytes: Some(1000.0),
            },
        }
    }

    /// Two sources, one at half a core and one at a quarter: 0.75 cores in total and in each
    /// interval; a restart (the counter going down) counts from zero.
    #[test]
    fn the_latest_cores_are_each_sources_last_two_scrapes_added() {
        let failed = Scrape {
            at_s: 3.0,
            sample: ProcessSample::default(),
        };
        let a = [scrape(0.0, 1.0), scrape(1.0, 1.5), scrape(2.0, 2.5), failed];
        let b = [scrape(0.0, 4.0), scrape(2.0, 1.0)];
        assert_eq!(
            latest_cores([&a[..], &b[..]]),
            Some(1.5),
            "1 core, and 0.5 after a restart"
        );
        assert_eq!(latest_cores([&a[..1]]), None);
        assert_eq!(
            latest_cores([&[scrape(1.0, 1.0), scrape(1.0, 2.0)][..]]),
            None
        );
    }

    #[test]
    fn cores_are_a_rate_of_the_counters_added_over_sources() {
        let a = vec![scrape(0.0, 10.0), scrape(1.0, 10.5), scrape(2.0, 11.0)];
        let b = vec![scrape(0.0, 4.0), scrape(1.0, 4.25), scrape(2.0, 0.25)];
        let r = resources(&[("a".into(), a), ("b".into(), b)], 1);
        assert!(
            (r.cpu_cores.total - 0.75).abs() < 1e-9,
            "{}",
            r.cpu_cores.total
        );
        assert_eq!(r.cpu_cores.intervals.len(), 2);
        for i in &r.cpu_cores.intervals {
            assert!((i.cpu_cores - 0.75).abs() < 1e-9, "{i:?}");
            assert_eq!(i.interval_s, 1.0);
        }
        assert_eq!((r.max_resident_bytes, r.failed_scrapes), (Some(2000), 1));
        let empty = resources(&[("a".into(), vec![])], 3);
        assert_eq!(empty.cpu_cores.total, 0.0);
        assert!(empty.cpu_cores.intervals.is_empty());
    }
}
