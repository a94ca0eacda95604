//! The pods behind a cluster target, beside the latency: CPU in cores, CPU throttling, memory
//! and restarts per pod, and the ready replicas, over the run and per interval. A knee at
//! 2,400 req/s on a Service of 3 pods says more with "pod web-2 throttled 42 % of its CFS
//! periods" beside it.
//!
//! Pure: the controller reads the kubelet's metrics (through the API server's node proxy) and
//! the pods' status; this module picks the pods' series out of the text and does the
//! arithmetic. The kubelet stamps each sample with the time it was taken (cAdvisor's figures
//! are as old as its last housekeeping, about 10 s at most), so rates here are taken between
//! those stamps, never between scrapes: a scrape that finds the same stamp again adds nothing.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::observe::text::samples;
use crate::observe::{latest_rate, rise, CpuCores, ProcessSample, Scrape, TargetResources};

/// Most bytes of one node's metrics text read (the cAdvisor text of a node of 100 pods is a
/// few MiB).
pub const MAX_METRICS_BYTES: usize = 64 << 20;

/// Most pods of one Service followed.
pub const MAX_PODS: usize = 1024;

/// Most counter samples kept per pod: 2.4 hours at 1 Hz. Past it the last sample is replaced,
/// so the run's totals stay right and the intervals stop growing.
pub const MAX_SAMPLES: usize = 8_640;

/// A pod throttled in more than this share of its CFS periods is named by `capacity`.
pub const THROTTLED_NOTABLE: f64 = 0.05;

/// One pod's counters from the kubelet's metrics, its containers added up (the pause
/// container left out, so nothing is counted twice).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PodCounters {
    /// `container_cpu_usage_seconds_total`.
    pub cpu_seconds: Option<f64>,
    /// `container_cpu_cfs_periods_total`: enforcement periods in which the pod had work to run
    /// under a CPU limit (absent without a limit).
    pub cfs_periods: Option<f64>,
    /// `container_cpu_cfs_throttled_periods_total`: the periods in which it hit the limit.
    pub cfs_throttled_periods: Option<f64>,
    /// `container_memory_working_set_bytes`: what the kubelet compares with the memory limit.
    pub working_set_bytes: Option<f64>,
    /// The exporter's stamp of the CPU figure, in ms since the Unix epoch.
    pub stamp_ms: Option<i64>,
}

impl PodCounters {
    /// Each figure from `self` when it has one, else from `other`: the resource metrics' CPU
    /// and memory (fresh, from the container runtime) before cAdvisor's.
    pub fn or(self, other: Self) -> Self {
        let cpu = self.cpu_seconds.is_some();
        Self {
            cpu_seconds: self.cpu_seconds.or(other.cpu_seconds),
            cfs_periods: self.cfs_periods.or(other.cfs_periods),
            cfs_throttled_periods: self.cfs_throttled_periods.or(other.cfs_throttled_periods),
            working_set_bytes: self.working_set_bytes.or(other.working_set_bytes),
            stamp_ms: if cpu { self.stamp_ms } else { other.stamp_ms },
        }
    }

    fn slot(&mut self, name: &str) -> &mut Option<f64> {
        match name {
            "container_cpu_usage_seconds_total" => &mut self.cpu_seconds,
            "container_cpu_cfs_periods_total" => &mut self.cfs_periods,
            "container_cpu_cfs_throttled_periods_total" => &mut self.cfs_throttled_periods,
            _ => &mut self.working_set_bytes,
        }
    }
}

/// Picks the pods named in `pods` of `namespace` out of a kubelet's metrics text: its
/// resource metrics (`/metrics/resource`: CPU and working set per container) or its cAdvisor
/// text (`/metrics/cadvisor`: the same, and the CFS periods). The containers' series are added
/// up; a figure no container has is taken from the pod's own cgroup (`container=""`), which is
/// where some nodes keep the CFS counters. Other pods, other metrics and malformed lines are
/// skipped.
pub fn parse_kubelet(
    text: &str,
    namespace: &str,
    pods: &BTreeSet<String>,
) -> BTreeMap<String, PodCounters> {
    // (containers added up, the pod's own cgroup) per pod.
    let mut found: BTreeMap<String, (PodCounters, PodCounters)> = BTreeMap::new();
    for line in text.lines() {
        // The name first: most of a node's text is other metrics, not worth parsing.
        let name = line
            .split(|c: char| c == '{' || c.is_whitespace())
            .next()
            .unwrap_or("");
        if !matches!(
            name,
            "container_cpu_usage_seconds_total"
                | "container_cpu_cfs_periods_total"
                | "container_cpu_cfs_throttled_periods_total"
                | "container_memory_working_set_bytes"
        ) {
            continue;
        }
        let Some(l) = samples(line).next() else {
            continue;
        };
        if l.label("namespace") != Some(namespace) {
            continue;
        }
        let Some(pod) = l.label("pod").filter(|p| pods.contains(*p)) else {
            continue;
        };
        let (containers, own) = found.entry(pod.to_string()).or_default();
        let c = match l.label("container") {
            Some("POD") => continue,
            None | Some("") => own,
            Some(_) => containers,
        };
        if l.name == "container_cpu_usage_seconds_total" {
            c.stamp_ms = c.stamp_ms.max(l.timestamp_ms);
        }
        let slot = c.slot(l.name);
        *slot = Some(slot.unwrap_or(0.0) + l.value);
    }
    found
        .into_iter()
        .map(|(pod, (containers, own))| (pod, containers.or(own)))
        .collect()
}

/// One look at a pod: its counters (when the kubelet's metrics could be read) at `at_s`
/// seconds after the run's T0, and its status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PodSample {
    /// When the controller looked, seconds after T0.
    pub at_s: f64,
    /// The kubelet's figures for the pod; all `None` when they could not be read.
    pub counters: PodCounters,
    /// Its containers' restarts since the pod was created.
    pub restarts: u32,
    /// The pod's `Ready` condition when it looked.
    pub ready: bool,
}

/// What the controller saw of a Service's pods during a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodsObserved {
    /// Each pod's samples in time order, one per stamp of its CPU figure.
    pub pods: BTreeMap<String, Vec<PodSample>>,
    /// The ready replicas each time their count changed.
    pub ready_replicas: Vec<ReadyReplicas>,
    /// Why the pods' figures could not be read, when they could not (forbidden, not found).
    pub unavailable: Option<String>,
}

impl PodsObserved {
    /// Adds one look at a pod: a new sample when the CPU figure's stamp moved on (or there is
    /// no stamp), otherwise the last sample's status is brought up to date.
    pub fn add(&mut self, pod: &str, sample: PodSample) {
        if !self.pods.contains_key(pod) && self.pods.len() >= MAX_PODS {
            return;
        }
        let series = self.pods.entry(pod.to_string()).or_default();
        let full = series.len() >= MAX_SAMPLES;
        match series.last_mut() {
            Some(last)
                if sample.counters.stamp_ms.is_some()
                    && last.counters.stamp_ms == sample.counters.stamp_ms =>
            {
                last.restarts = sample.restarts;
                last.ready = sample.ready;
            }
            Some(last) if full => *last = sample,
            _ => series.push(sample),
        }
    }

    /// Records the count of ready replicas at `at_s`, kept only when it changed.
    pub fn ready_count(&mut self, at_s: f64, ready: u32, pods: u32) {
        if self
            .ready_replicas
            .last()
            .is_some_and(|r| r.ready == ready && r.pods == pods)
        {
            return;
        }
        if self.ready_replicas.len() < MAX_SAMPLES {
            self.ready_replicas
                .push(ReadyReplicas { at_s, ready, pods });
        }
    }
}

impl PodsObserved {
    /// The cores the pods used between each one's last two samples with a CPU figure, added
    /// up; `None` before any pod has two.
    pub fn latest_cores(&self) -> Option<f64> {
        self.pods
            .values()
            .filter_map(|samples| {
                latest_rate(
                    samples
                        .iter()
                        .filter_map(|s| Some((s.at_s, s.counters.cpu_seconds?))),
                )
            })
            .reduce(|a, b| a + b)
    }
}

/// One change to what is seen of a Service's pods, in the order it happened. The controller
/// keeps these in its checkpoint: replayed through [`PodsObserved::apply`] they rebuild what a
/// previous controller saw, so a re-adopted run keeps its target's samples from before the
/// restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PodEvent {
    /// One look at a pod ([`PodsObserved::add`]).
    Sample {
        /// The pod's name.
        pod: String,
        /// What the look found.
        sample: PodSample,
    },
    /// The count of ready replicas at one look ([`PodsObserved::ready_count`]).
    Ready(ReadyReplicas),
    /// Why the pods' figures cannot be read; the first reason is kept.
    Unavailable(String),
}

impl PodsObserved {
    /// Applies one change; applying a run's events in order gives what was seen. Returns
    /// whether it changed anything (a count of ready replicas seen again, or a second reason,
    /// does not), so only changes need keeping.
    pub fn apply(&mut self, event: PodEvent) -> bool {
        match event {
            PodEvent::Sample { pod, sample } => {
                self.add(&pod, sample);
                true
            }
            PodEvent::Ready(r) => {
                let before = self.ready_replicas.len();
                self.ready_count(r.at_s, r.ready, r.pods);
                self.ready_replicas.len() != before
            }
            PodEvent::Unavailable(why) => {
                let first = self.unavailable.is_none();
                self.unavailable.get_or_insert(why);
                first
            }
        }
    }
}

/// The count of a Service's pods that were ready, from `at_s` on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ReadyReplicas {
    /// From when this count held, seconds after T0.
    pub at_s: f64,
    /// Pods the Service's selector matched that were ready.
    pub ready: u32,
    /// Pods the Service's selector matched, ready or not.
    pub pods: u32,
}

/// One pod in the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodResources {
    /// The pod's name.
    pub pod: String,
    /// Mean CPU cores between its first and last sample.
    pub cpu_cores: f64,
    /// Share of its CFS periods throttled over the run; absent without a CPU limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled: Option<f64>,
    /// The largest working set seen, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_working_set_bytes: Option<u64>,
    /// Restarts during the run (its containers' restart count at the end less at the start).
    pub restarts: u32,
    /// Each span between two of its samples.
    pub intervals: Vec<PodInterval>,
}

/// One pod between two of its samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodInterval {
    /// Start of the span, seconds after T0.
    pub start_s: f64,
    /// Its length, seconds.
    pub interval_s: f64,
    /// Mean CPU cores the pod used over it (a counter that went down counts from zero again).
    pub cpu_cores: f64,
    /// Share of its CFS periods throttled over the span; absent without a CPU limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled: Option<f64>,
    /// Its working set at the span's end, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    /// The restart count at the end of the span.
    pub restarts: u32,
    /// Whether it was ready at the span's end.
    pub ready: bool,
}

/// A counter's rise between two samples; a counter that went down (the container restarted)
/// counts from zero again.
/// Throttled periods over periods between two samples; `None` when no period was counted
/// (no CPU limit, or a node whose cAdvisor does not see the pod's cgroup).
fn throttled_between(a: &PodCounters, b: &PodCounters) -> Option<f64> {
    let periods = rise(a.cfs_periods?, b.cfs_periods?);
    let throttled = rise(a.cfs_throttled_periods?, b.cfs_throttled_periods?);
    (periods > 0.0).then(|| (throttled / periods).clamp(0.0, 1.0))
}

/// One pod's figures from its samples.
pub fn pod_resources(pod: &str, samples: &[PodSample]) -> PodResources {
    let mut intervals = Vec::new();
    let mut cpu = 0.0;
    for w in samples.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        let span = b.at_s - a.at_s;
        if span <= 0.0 {
            continue;
        }
        let used = match (a.counters.cpu_seconds, b.counters.cpu_seconds) {
            (Some(x), Some(y)) => rise(x, y),
            _ => 0.0,
        };
        cpu += used;
        intervals.push(PodInterval {
            start_s: a.at_s,
            interval_s: span,
            cpu_cores: used / span,
            throttled: throttled_between(&a.counters, &b.counters),
            working_set_bytes: b.counters.working_set_bytes.map(|v| v as u64),
            restarts: b.restarts,
            ready: b.ready,
        });
    }
    let span = match (samples.first(), samples.last()) {
        (Some(a), Some(b)) => b.at_s - a.at_s,
        _ => 0.0,
    };
    let (periods, throttled) = samples
        .windows(2)
        .filter_map(|w| {
            let (a, b) = (&w[0].counters, &w[1].counters);
            Some((
                rise(a.cfs_periods?, b.cfs_periods?),
                rise(a.cfs_throttled_periods?, b.cfs_throttled_periods?),
            ))
        })
        .fold((None, 0.0), |(p, t), (dp, dt)| {
            (Some(p.unwrap_or(0.0) + dp), t + dt)
        });
    PodResources {
        pod: pod.to_string(),
        cpu_cores: if span > 0.0 { cpu / span } else { 0.0 },
        throttled: periods
            .filter(|p| *p > 0.0)
            .map(|p| (throttled / p).clamp(0.0, 1.0)),
        max_working_set_bytes: samples
            .iter()
            .filter_map(|s| s.counters.working_set_bytes)
            .reduce(f64::max)
            .map(|v| v as u64),
        restarts: match (samples.first(), samples.last()) {
            (Some(a), Some(b)) => b.restarts.saturating_sub(a.restarts),
            _ => 0,
        },
        intervals,
    }
}

/// The pods' CPU added up over the run and per interval, as `observe:` sources would be: the
/// target's cores when no Prometheus source is observed.
pub fn cpu_cores(observed: &PodsObserved) -> (CpuCores, Option<u64>) {
    let series: Vec<(String, Vec<Scrape>)> = observed
        .pods
        .iter()
        .map(|(pod, s)| {
            let scrapes = s
                .iter()
                .filter(|x| x.counters.cpu_seconds.is_some())
                .map(|x| Scrape {
                    at_s: x.at_s,
                    sample: ProcessSample {
                        cpu_seconds: x.counters.cpu_seconds,
                        resident_bytes: x.counters.working_set_bytes,
                    },
                })
                .collect();
            (pod.clone(), scrapes)
        })
        .collect();
    let r = crate::observe::resources(&series, 0);
    (r.cpu_cores, r.max_resident_bytes)
}

/// `target_resources` with the pods in: their rows, the ready replicas and why they could not
/// be read. Without a Prometheus source (`observe:`) the pods' CPU added up is the target's
/// CPU, so req/s per target core works for a Service target as it does for a process.
pub fn with_pods(observed: Option<TargetResources>, pods: &PodsObserved) -> TargetResources {
    let mut r = observed.unwrap_or_default();
    if r.sources.is_empty() {
        let (cores, memory) = cpu_cores(pods);
        r.cpu_cores = cores;
        r.max_resident_bytes = memory;
    }
    r.pods = pods.pods.iter().map(|(p, s)| pod_resources(p, s)).collect();
    r.ready_replicas = pods.ready_replicas.clone();
    r.pods_unavailable = pods.unavailable.clone();
    r
}

/// The most throttled pod, when its share is notable: (pod, share).
pub fn most_throttled(pods: &[PodResources]) -> Option<(&str, f64)> {
    pods.iter()
        .filter_map(|p| Some((p.pod.as_str(), p.throttled?)))
        .filter(|(_, t)| *t > THROTTLED_NOTABLE)
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: &str = "e2e-capture-b0d426f2";
    const BUSY: &str = "web-78d7d87767-dz7v7";
    const IDLE: &str = "web-78d7d87767-p2lvr";
    const CADVISOR: &str = include_str!("../tests/fixtures/kubelet/cadvisor.txt");
    const RESOURCE_1: &str = include_str!("../tests/fixtures/kubelet/resource-1.txt");
    const RESOURCE_2: &str = include_str!("../tests/fixtures/kubelet/resource-2.txt");

    fn both() -> BTreeSet<String> {
        [BUSY, IDLE].into_iter().map(String::from).collect()
    }

    /// The resource metrics captured from the test cluster: each container's CPU and working
    /// set, stamped; the other namespace's CoreDNS and the node's own series are left out.
    #[test]
    fn the_resource_metrics_of_a_real_kubelet_are_read() {
        let r = parse_kubelet(RESOURCE_2, NS, &both());
        assert_eq!(r.len(), 2);
        let busy = r[BUSY];
        assert_eq!(busy.cpu_seconds, Some(0.299685022));
        assert_eq!(busy.working_set_bytes, Some(2_781_184.0));
        assert_eq!(busy.stamp_ms, Some(1_795_952_494_861));
        assert_eq!((busy.cfs_periods, busy.cfs_throttled_periods), (None, None));
        let only_busy: BTreeSet<String> = [BUSY.to_string()].into();
        assert_eq!(parse_kubelet(RESOURCE_2, NS, &only_busy).len(), 1);
        assert!(parse_kubelet(RESOURCE_2, "kube-system", &both()).is_empty());
    }

    /// The cAdvisor text of the same node: 744 lines, only the pods' own cgroups for these
    /// pods, as cAdvisor first saw them at their start (all zero). The CFS counters come from
    /// the pod's cgroup; merged with the resource metrics, CPU and memory are the runtime's.
    #[test]
    fn the_cadvisor_text_of_a_real_kubelet_is_read() {
        let c = parse_kubelet(CADVISOR, NS, &both());
        let busy = c[BUSY];
        assert_eq!(
            (busy.cfs_periods, busy.cfs_throttled_periods),
            (Some(0.0), Some(0.0))
        );
        assert_eq!(busy.working_set_bytes, Some(0.0));
        let merged = parse_kubelet(RESOURCE_2, NS, &both())[BUSY].or(busy);
        assert_eq!(merged.cpu_seconds, Some(0.299685022));
        assert_eq!(merged.cfs_periods, Some(0.0));
        assert_eq!(merged.stamp_ms, Some(1_795_952_494_861));
    }

    /// Two real samples 2.973 s apart: 0.0516 cores; no CFS period counted, so no throttling
    /// is claimed.
    #[test]
    fn cores_are_a_rate_between_the_kubelet_stamps() {
        let t0_ms = 1_795_952_490_000_i64;
        let mut seen = PodsObserved::default();
        for text in [RESOURCE_1, RESOURCE_2, RESOURCE_2] {
            let c = parse_kubelet(text, NS, &both())[BUSY]
                .or(parse_kubelet(CADVISOR, NS, &both())[BUSY]);
            let at_s = (c.stamp_ms.unwrap() - t0_ms) as f64 / 1000.0;
            seen.add(
                BUSY,
                PodSample {
                    at_s,
                    counters: c,
                    restarts: 0,
                    ready: true,
                },
            );
        }
        assert_eq!(
            seen.pods[BUSY].len(),
            2,
            "the same stamp twice is one sample"
        );
        let r = pod_resources(BUSY, &seen.pods[BUSY]);
        let want = (0.299685022 - 0.146278178) / 2.973;
        assert!(
            (r.cpu_cores - want).abs() < 1e-6,
            "{} against {want}",
            r.cpu_cores
        );
        assert_eq!(r.intervals.len(), 1);
        assert_eq!(r.throttled, None);
        assert_eq!(r.intervals[0].throttled, None);
        assert_eq!(r.max_working_set_bytes, Some(2_781_184));
        let t = with_pods(None, &seen);
        assert!((t.cpu_cores.total - want).abs() < 1e-6, "{:?}", t.cpu_cores);
        assert_eq!(t.pods.len(), 1);
    }

    fn counters(cpu: f64, periods: f64, throttled: f64, stamp: i64) -> PodCounters {
        PodCounters {
            cpu_seconds: Some(cpu),
            cfs_periods: Some(periods),
            cfs_throttled_periods: Some(throttled),
            working_set_bytes: Some(1e6),
            stamp_ms: Some(stamp),
        }
    }

    /// A pod at its limit: 42 of 100 periods throttled, then a restart resets its counters
    /// (counted from zero) and its restart count rises; the ready count is kept on change.
    #[test]
    fn throttling_restarts_and_ready_replicas() {
        let mut seen = PodsObserved::default();
        let s = |at_s, c, restarts| PodSample {
            at_s,
            counters: c,
            restarts,
            ready: true,
        };
        seen.add("web-2", s(0.0, counters(10.0, 1000.0, 100.0, 0), 1));
        seen.add("web-2", s(1.0, counters(10.2, 1010.0, 104.2, 1000), 1));
        seen.add("web-2", s(2.0, counters(0.2, 90.0, 37.8, 2000), 2));
        let r = pod_resources("web-2", &seen.pods["web-2"]);
        assert!((r.cpu_cores - 0.2).abs() < 1e-9, "{}", r.cpu_cores);
        assert!(
            (r.throttled.unwrap() - 0.42).abs() < 1e-9,
            "{:?}",
            r.throttled
        );
        assert!((r.intervals[0].throttled.unwrap() - 0.42).abs() < 1e-9);
        assert_eq!((r.restarts, r.intervals[1].restarts), (1, 2));
        assert_eq!(
            most_throttled(std::slice::from_ref(&r)),
            Some(("web-2", r.throttled.unwrap()))
        );
        seen.ready_count(0.0, 3, 3);
        seen.ready_count(1.0, 3, 3);
        seen.ready_count(2.0, 2, 3);
        assert_eq!(seen.ready_replicas.len(), 2);
        assert_eq!(
            seen.ready_replicas[1],
            ReadyReplicas {
                at_s: 2.0,
                ready: 2,
                pods: 3
            }
        );
    }

    #[test]
    fn events_replayed_rebuild_what_was_seen() {
        let sample = |at_s: f64, stamp: i64, ready: bool| PodSample {
            at_s,
            counters: PodCounters {
                cpu_seconds: Some(at_s * 0.5),
                stamp_ms: Some(stamp),
                ..PodCounters::default()
            },
            restarts: 0,
            ready,
        };
        let events = [
            PodEvent::Ready(ReadyReplicas {
                at_s: 0.0,
                ready: 1,
                pods: 2,
            }),
            PodEvent::Sample {
                pod: "a".into(),
                sample: sample(0.0, 10, true),
            },
            PodEvent::Sample {
                pod: "a".into(),
                sample: sample(1.0, 10, false),
            },
            PodEvent::Sample {
                pod: "a".into(),
                sample: sample(2.0, 20, true),
            },
            PodEvent::Ready(ReadyReplicas {
                at_s: 1.0,
                ready: 1,
                pods: 2,
            }),
            PodEvent::Unavailable("forbidden".into()),
            PodEvent::Unavailable("later".into()),
        ];
        let mut direct = PodsObserved::default();
        direct.ready_count(0.0, 1, 2);
        direct.add("a", sample(0.0, 10, true));
        direct.add("a", sample(1.0, 10, false));
        direct.add("a", sample(2.0, 20, true));
        direct.ready_count(1.0, 1, 2);
        direct.unavailable = Some("forbidden".into());
        let json: Vec<String> = events
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect();
        let mut replayed = PodsObserved::default();
        let changed: Vec<bool> = json
            .iter()
            .map(|line| replayed.apply(serde_json::from_str(line).unwrap()))
            .collect();
        assert_eq!(changed, [true, true, true, true, false, true, false]);
        assert_eq!(replayed, direct);
        assert_eq!(
            replayed.pods["a"].len(),
            2,
            "the same stamp updates, not adds"
        );
        assert_eq!(
            replayed.ready_replicas.len(),
            1,
            "an unchanged count is kept once"
        );
    }
}
