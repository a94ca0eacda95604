//! A target's several addresses (`endpoints:`): which endpoint a connection or a session goes
//! to, by arithmetic, and what the report says about each.
//!
//! A Service behind kube-proxy balances connections, not requests: with long-lived
//! connections whole agents pin to one backend and nothing shows it. Listing the backends
//! makes the split exact instead: the run's connection (closed and constant models) or
//! session (open model) with global index `i` goes to endpoint `i mod n`. The agents own
//! contiguous ranges of connection indexes (an even split) and the open model's arrivals
//! round-robin, so each agent and the run as a whole are within one of an even split.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::hist::SparseHist;

/// Most endpoints a scenario may list (each costs the agent a histogram).
pub const MAX_ENDPOINTS: usize = 1024;

/// Where a target's several addresses come from (`endpoints:`): listed in the scenario, or
/// the ready pods of the Kubernetes Service the target URL names, followed while the run goes
/// on. The word keeps the two apart, so no list can be mistaken for a Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Endpoints {
    /// `["10.0.0.7:8080", "10.0.0.8:8080"]`: these addresses, in this order (each an
    /// ip:port, none twice).
    List(Vec<String>),
    /// `service`: the ready endpoints of the Service the target's host names
    /// (`http://NAME.NAMESPACE.svc:PORT`, or `http://NAME:PORT` in the run's namespace), from
    /// its EndpointSlices; the controller follows them and needs the Kubernetes API.
    Source(EndpointSource),
}

/// A source of endpoints other than a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndpointSource {
    /// The ready pods of a Kubernetes Service.
    Service,
}

impl Default for Endpoints {
    fn default() -> Self {
        Self::List(Vec::new())
    }
}

impl Endpoints {
    /// No list and no source: the target's own address (or its name's addresses).
    pub fn is_empty(&self) -> bool {
        matches!(self, Self::List(l) if l.is_empty())
    }

    /// The listed addresses as written (none for a Service).
    pub fn list(&self) -> &[String] {
        match self {
            Self::List(l) => l,
            Self::Source(_) => &[],
        }
    }

    /// The endpoints are a Service's pods.
    pub fn is_service(&self) -> bool {
        matches!(self, Self::Source(EndpointSource::Service))
    }
}

impl From<Vec<String>> for Endpoints {
    fn from(l: Vec<String>) -> Self {
        Self::List(l)
    }
}

impl<'de> Deserialize<'de> for Endpoints {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Endpoints;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of ip:port addresses, or `service`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Endpoints, E> {
                match v {
                    "service" => Ok(Endpoints::Source(EndpointSource::Service)),
                    _ => Err(E::custom(format!(
                        "`{v}` is not a source of endpoints: write `service` (the pods behind \
                         the target's Kubernetes Service) or a list of ip:port addresses"
                    ))),
                }
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Endpoints, A::Error> {
                let mut l = Vec::with_capacity(a.size_hint().unwrap_or(0).min(MAX_ENDPOINTS));
                while let Some(e) = a.next_element::<String>()? {
                    l.push(e);
                }
                Ok(Endpoints::List(l))
            }
        }
        d.deserialize_any(V)
    }
}

/// The endpoint of the connection or session with global index `index`, among `n`.
pub fn endpoint_of(index: u64, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    (index % n as u64) as usize
}

/// How many of the connections `first .. first + count` go to each of `n` endpoints: what an
/// agent holding that range opens to each (the port budget per endpoint).
pub fn split_range(first: u64, count: u64, n: usize) -> Vec<u64> {
    let n = n.max(1);
    let base = count / n as u64;
    let extra = (count % n as u64) as usize;
    let start = endpoint_of(first, n);
    (0..n)
        .map(|e| {
            // The `extra` connections past the whole rounds go to the `extra` endpoints from
            // `start` on, wrapping.
            let offset = (e + n - start) % n;
            base + u64::from(offset < extra)
        })
        .collect()
}

/// Parses the scenario's `endpoints:` list: each an `ip:port` (`[v6]:port` for IPv6), no
/// duplicates. The error is (field path, reason).
pub fn parse(list: &[String]) -> Result<Vec<SocketAddr>, (String, String)> {
    if list.len() > MAX_ENDPOINTS {
        return Err((
            "endpoints".into(),
            format!("{} endpoints; at most {MAX_ENDPOINTS}", list.len()),
        ));
    }
    let mut out: Vec<SocketAddr> = Vec::with_capacity(list.len());
    for (i, e) in list.iter().enumerate() {
        let addr: SocketAddr = e.trim().parse().map_err(|_| {
            (
                format!("endpoints[{i}]"),
                format!("`{e}` is not an ip:port address (write `10.0.0.7:8080` or `[::1]:8080`)"),
            )
        })?;
        if addr.port() == 0 {
            return Err((format!("endpoints[{i}]"), format!("`{e}` has port 0")));
        }
        if let Some(j) = out.iter().position(|a| *a == addr) {
            return Err((
                format!("endpoints[{i}]"),
                format!("`{e}` is listed twice (also endpoints[{j}])"),
            ));
        }
        out.push(addr);
    }
    Ok(out)
}

/// The scenario's `endpoints:` as addresses (empty when the list is empty or invalid: a
/// scenario is validated before it runs).
pub fn listed(list: &[String]) -> Vec<SocketAddr> {
    parse(list).unwrap_or_default()
}

/// One endpoint's figures for one interval or a whole run, as agents send them and the
/// controller adds them up.
#[derive(Debug, Clone, Default)]
pub struct EndpointStats {
    /// Its requests answered successfully.
    pub completed: u64,
    /// Its failed requests.
    pub failed: u64,
    /// Connections opened to it.
    pub connections: u64,
    /// Response times of its completed requests, in microseconds.
    pub response: SparseHist,
}

impl EndpointStats {
    /// Adds `o` into this one (counters saturate).
    pub fn add(&mut self, o: &EndpointStats) {
        self.completed = self.completed.saturating_add(o.completed);
        self.failed = self.failed.saturating_add(o.failed);
        self.connections = self.connections.saturating_add(o.connections);
        self.response.add(&o.response);
    }

    /// Nothing recorded.
    pub fn is_empty(&self) -> bool {
        self.completed == 0 && self.failed == 0 && self.connections == 0
    }
}

/// Most endpoints whose figures are kept interval by interval (every endpoint is in the
/// run's totals): a timeline row per endpoint is for reading, and beyond this many it is not.
pub const MAX_INTERVAL_ENDPOINTS: usize = 64;

/// The run's figures per endpoint, merged from every agent's intervals: the whole run, and
/// each interval apart.
#[derive(Debug, Clone, Default)]
pub struct EndpointAccumulator {
    total: BTreeMap<SocketAddr, EndpointStats>,
    intervals: BTreeMap<u64, BTreeMap<SocketAddr, EndpointStats>>,
}

impl EndpointAccumulator {
    /// Adds one agent's figures for endpoint `address` in `interval`. A new address past
    /// [`MAX_ENDPOINTS`] is refused (false).
    pub fn add(&mut self, interval: u64, address: SocketAddr, stats: &EndpointStats) -> bool {
        if !self.total.contains_key(&address) && self.total.len() >= MAX_ENDPOINTS {
            return false;
        }
        self.total.entry(address).or_default().add(stats);
        if self.total.len() <= MAX_INTERVAL_ENDPOINTS {
            self.intervals
                .entry(interval)
                .or_default()
                .entry(address)
                .or_default()
                .add(stats);
        }
        true
    }

    /// Nothing was recorded for any endpoint.
    pub fn is_empty(&self) -> bool {
        self.total.is_empty()
    }

    /// The report's rows: the scenario's `listed` endpoints in its order (one nothing was
    /// recorded for has zeros), then every other address that was loaded, in address order.
    pub fn report(&self, listed: &[SocketAddr]) -> Vec<EndpointReport> {
        rows(&self.total, listed)
    }

    /// The rows of one interval (in the order of [`Self::report`]); empty when the interval
    /// recorded nothing per endpoint or the run has too many endpoints to keep them.
    pub fn interval(&self, interval: u64, listed: &[SocketAddr]) -> Vec<EndpointReport> {
        match (
            self.total.len() <= MAX_INTERVAL_ENDPOINTS,
            self.intervals.get(&interval),
        ) {
            (true, Some(by)) => {
                let order: Vec<SocketAddr> = self.total.keys().copied().collect();
                let listed: Vec<SocketAddr> = listed.iter().chain(&order).copied().collect();
                rows(by, &listed)
                    .into_iter()
                    .filter(|r| r.completed + r.failed + r.connections > 0)
                    .collect()
            }
            _ => Vec::new(),
        }
    }
}

/// One row per address of `listed`, then per other address of `by`, without repeats.
fn rows(by: &BTreeMap<SocketAddr, EndpointStats>, listed: &[SocketAddr]) -> Vec<EndpointReport> {
    let mut order: Vec<SocketAddr> = Vec::with_capacity(listed.len() + by.len());
    for a in listed.iter().chain(by.keys()) {
        if !order.contains(a) {
            order.push(*a);
        }
    }
    order
        .into_iter()
        .map(|address| {
            let s = by.get(&address).cloned().unwrap_or_default();
            let [p50, p99] = if s.response.is_empty() {
                [0, 0]
            } else {
                s.response.values_at_quantiles([0.5, 0.99])
            };
            EndpointReport {
                address: address.to_string(),
                pod: None,
                completed: s.completed,
                failed: s.failed,
                p50_us: p50,
                p99_us: p99,
                connections: s.connections,
            }
        })
        .collect()
}

/// One endpoint of the report (`endpoints:` in the JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointReport {
    /// `ip:port` (`[v6]:port`).
    pub address: String,
    /// The pod behind it, when the endpoints are a Kubernetes Service's (`endpoints: service`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Its requests answered successfully, all agents together.
    pub completed: u64,
    /// Its failed requests, all agents together.
    pub failed: u64,
    /// Response-time percentiles of its completed requests, in microseconds.
    pub p50_us: u64,
    /// The 99th percentile of the same response times.
    pub p99_us: u64,
    /// Connections opened to it, all agents together.
    pub connections: u64,
}

/// The fewest completed requests an endpoint needs before its p99 is compared: below it the
/// p99 is one of the top two samples, and one scheduler hiccup on a busy generator doubles
/// it (100-request rows were named slow at 3.9 ms against 1.85 ms with nothing wrong).
pub const SLOW_ENDPOINT_MIN_COMPLETED: u64 = 200;

/// An endpoint whose p99 is more than twice the median of the others' p99 (one slow pod
/// hides in a merged percentile): (its row, the others' median p99 in µs). Endpoints with
/// fewer than [`SLOW_ENDPOINT_MIN_COMPLETED`] completed are left out; with fewer than two
/// measured endpoints there is nothing to compare. The slowest such endpoint is named.
pub fn slow_endpoint(rows: &[EndpointReport]) -> Option<(&EndpointReport, u64)> {
    let measured: Vec<&EndpointReport> = rows
        .iter()
        .filter(|r| r.completed >= SLOW_ENDPOINT_MIN_COMPLETED)
        .collect();
    if measured.len() < 2 {
        return None;
    }
    measured
        .iter()
        .filter_map(|r| {
            let mut others: Vec<u64> = measured
                .iter()
                .filter(|o| o.address != r.address)
                .map(|o| o.p99_us)
                .collect();
            others.sort_unstable();
            let median = others[(others.len() - 1) / 2];
            (r.p99_us > median.saturating_mul(2)).then_some((*r, median))
        })
        .max_by_key(|(r, _)| r.p99_us)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every range of connections, split over `n` endpoints by index, is within one of even,
    /// and the counts agree with walking the range.
    #[test]
    fn ranges_split_within_one_and_match_a_walk() {
        for n in 1..6usize {
            for first in 0..12u64 {
                for count in 0..20u64 {
                    let split = split_range(first, count, n);
                    let mut walked = vec![0u64; n];
                    for i in first..first + count {
                        walked[endpoint_of(i, n)] += 1;
                    }
                    assert_eq!(split, walked, "n={n} first={first} count={count}");
                    let (lo, hi) = (split.iter().min().unwrap(), split.iter().max().unwrap());
                    assert!(hi - lo <= 1);
                }
            }
        }
    }

    /// 30 connections over 2 agents (15 each, contiguous) and 3 endpoints: 10 on each in all,
    /// each agent 5 ± 1.
    #[test]
    fn thirty_connections_two_agents_three_endpoints() {
        let a = split_range(0, 15, 3);
        let b = split_range(15, 15, 3);
        assert_eq!(a, vec![5, 5, 5]);
        let total: Vec<u64> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        assert_eq!(total, vec![10, 10, 10]);
        let c = split_range(0, 16, 3);
        let d = split_range(16, 15, 3);
        let total: Vec<u64> = c.iter().zip(&d).map(|(x, y)| x + y).collect();
        assert_eq!(c, vec![6, 5, 5]);
        assert_eq!(total, vec![11, 10, 10]);
    }

    #[test]
    fn bad_endpoints_name_the_field() {
        let e = |l: &[&str]| parse(&l.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(e(&["127.0.0.1:80", "[::1]:81"]).unwrap().len(), 2);
        let (path, why) = e(&["127.0.0.1:80", "localhost:80"]).unwrap_err();
        assert_eq!(path, "endpoints[1]");
        assert!(why.contains("not an ip:port"), "{why}");
        let (path, why) = e(&["127.0.0.1:80", "127.0.0.1:80"]).unwrap_err();
        assert_eq!(
            (path.as_str(), why.contains("twice")),
            ("endpoints[1]", true)
        );
        assert_eq!(e(&["127.0.0.1:0"]).unwrap_err().0, "endpoints[0]");
    }

    fn row(address: &str, p99_us: u64) -> EndpointReport {
        EndpointReport {
            address: address.into(),
            completed: SLOW_ENDPOINT_MIN_COMPLETED,
            p99_us,
            ..Default::default()
        }
    }

    #[test]
    fn the_slow_endpoint_is_named_against_the_others_median() {
        let rows = [row("a", 2_000), row("b", 41_000), row("c", 2_100)];
        let (slow, median) = slow_endpoint(&rows).unwrap();
        assert_eq!((slow.address.as_str(), median), ("b", 2_000));
        // Twice the median exactly is not slow; nothing measured is not compared.
        assert!(slow_endpoint(&[row("a", 2_000), row("b", 4_000)]).is_none());
        let mut idle = row("b", 0);
        idle.completed = 0;
        assert!(slow_endpoint(&[row("a", 9_000), idle]).is_none());
        // A row too small for its p99 to mean anything is left out of the comparison.
        let mut few = row("b", 41_000);
        few.completed = SLOW_ENDPOINT_MIN_COMPLETED - 1;
        assert!(slow_endpoint(&[row("a", 2_000), few, row("c", 2_100)]).is_none());
    }

    #[test]
    fn the_accumulator_adds_agents_and_keeps_the_scenario_order() {
        let mut acc = EndpointAccumulator::default();
        let mut s = EndpointStats {
            completed: 3,
            connections: 1,
            ..Default::default()
        };
        for us in [1_000, 2_000, 3_000] {
            s.response.record_n(us, 1);
        }
        let [x, y, z]: [SocketAddr; 3] =
            ["10.0.0.9:1", "10.0.0.2:2", "10.0.0.1:3"].map(|a| a.parse().unwrap());
        assert!(acc.add(0, y, &s));
        assert!(acc.add(1, y, &s));
        assert!(acc.add(1, z, &s));
        let rows = acc.report(&[x, y]);
        assert_eq!(
            rows[0],
            EndpointReport {
                address: "10.0.0.9:1".into(),
                ..Default::default()
            }
        );
        assert_eq!((rows[1].completed, rows[1].connections), (6, 2));
        assert!(
            rows[1].p50_us >= 1_990 && rows[1].p50_us <= 2_010,
            "{}",
            rows[1].p50_us
        );
        assert_eq!(rows[2].address, "10.0.0.1:3", "one not listed comes after");
        // Interval 1 has y and z, in the same order; interval 0 only y; 2 nothing.
        let one: Vec<String> = acc
            .interval(1, &[x, y])
            .into_iter()
            .map(|r| r.address)
            .collect();
        assert_eq!(one, ["10.0.0.2:2", "10.0.0.1:3"]);
        assert_eq!(acc.interval(0, &[x, y])[0].completed, 3);
        assert!(acc.interval(2, &[x, y]).is_empty());
        // New addresses past the cap are refused; known ones still count.
        for i in 0..MAX_ENDPOINTS as u32 {
            acc.add(0, SocketAddr::from((std::net::Ipv4Addr::from(i), 9)), &s);
        }
        assert!(!acc.add(0, "192.0.2.1:1".parse().unwrap(), &s));
        assert!(acc.add(0, y, &s));
        assert!(
            acc.interval(1, &[]).is_empty(),
            "too many for interval rows"
        );
    }
}
