//! Connection ramps of a closed or constant-rate load: `stages: [{ connections: N, duration:
//! D }, ...]`, each stage moving the number of open connections linearly from the level before
//! it (0 at T0) to its own. Opening every connection at T0 overflows accept queues (a burst of
//! thousands of SYNs) and measures a stampede, not a load; a ramp paces the connects to its
//! slope. A closed load runs its sessions back to back on each open connection; a
//! constant-rate load keeps its arrivals at the rate and serves them over whichever
//! connections are open, so while the pool is small its slots wait for one (late, or
//! dropped), which `plan` warns of ([`reaches`]).
//!
//! Each connection of the run has a ramp rank; rank `g` is open while the level is above `g`.
//! Ranks are dealt round-robin over the agents (rank `a + n·c` is agent `a`'s `c`-th
//! connection of `n` agents), so at every instant the agents' open connections differ by at
//! most one. All arithmetic: instant for any ramp.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::HumanDuration;

/// Most stages one load may have.
pub const MAX_STAGES: usize = 1_000;

/// One stage of a connection ramp: the level it reaches, and how long it takes to get there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Stage {
    /// Connections open at the end of the stage, all agents together.
    pub connections: u32,
    /// How long the stage lasts; the level moves linearly over it.
    pub duration: HumanDuration,
}

/// The most connections the ramp holds at once.
pub fn peak(stages: &[Stage]) -> u32 {
    stages.iter().map(|s| s.connections).max().unwrap_or(0)
}

/// The ramp's whole length.
pub fn total(stages: &[Stage]) -> Duration {
    stages
        .iter()
        .fold(Duration::ZERO, |a, s| a.saturating_add(s.duration.0))
}

/// The ramp rank of connection `c` of the agent with shard `agent` of `agents`.
pub fn rank(agent: u32, agents: u32, c: u64) -> u64 {
    u64::from(agent) + u64::from(agents.max(1)) * c
}

/// When the connection of ramp rank `rank` is open, as `[from, to)` offsets from T0, in
/// order. On a rising stage from `L0` to `L1`, rank `g` opens at `(g − L0)/(L1 − L0)` of the
/// stage; on a falling one it closes at `(L0 − g)/(L0 − L1)` of it; every open connection
/// closes at the end of the ramp.
pub fn spans(stages: &[Stage], rank: u64) -> Vec<(Duration, Duration)> {
    let mut out = Vec::new();
    let mut open: Option<Duration> = None;
    let (mut from, mut start) = (0u64, Duration::ZERO);
    for s in stages {
        let to = u64::from(s.connections);
        let d = s.duration.0;
        if to > from && (from..to).contains(&rank) && open.is_none() {
            open = Some(start + part(d, rank - from, to - from));
        } else if to < from && (to..from).contains(&rank) {
            if let Some(a) = open.take() {
                out.push((a, start + part(d, from - rank, from - to)));
            }
        }
        from = to;
        start = start.saturating_add(d);
    }
    if let Some(a) = open {
        out.push((a, start));
    }
    out
}

/// When the ramp first holds `connections` connections, all agents together (the opening of
/// rank `connections − 1`); `None` when it never does. Zero connections are held from T0.
pub fn reaches(stages: &[Stage], connections: u32) -> Option<Duration> {
    match connections.checked_sub(1) {
        None => Some(Duration::ZERO),
        Some(g) => spans(stages, u64::from(g)).first().map(|s| s.0),
    }
}

/// `d × num / den`, exact to the nanosecond (rounded down).
fn part(d: Duration, num: u64, den: u64) -> Duration {
    let ns = d.as_nanos() * u128::from(num) / u128::from(den.max(1));
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// Connections of ranks below `ranks` open at `t` (what the spans say, counted).
pub fn open_at(stages: &[Stage], ranks: u64, t: Duration) -> u64 {
    (0..ranks)
        .filter(|&g| spans(stages, g).iter().any(|(a, b)| *a <= t && t < *b))
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(connections: u32, secs: u64) -> Stage {
        Stage {
            connections,
            duration: HumanDuration(Duration::from_secs(secs)),
        }
    }

    /// 0 → 200 over 4 s, then 2 s at 200: one connect every 20 ms, never a burst: in every
    /// 100 ms at most the slope's 5 connects.
    #[test]
    fn a_ramp_opens_its_connections_at_its_slope() {
        let ramp = [stage(200, 4), stage(200, 2)];
        assert_eq!((peak(&ramp), total(&ramp)), (200, Duration::from_secs(6)));
        let opens: Vec<Duration> = (0..200).map(|g| spans(&ramp, g)[0].0).collect();
        assert_eq!(opens[0], Duration::ZERO);
        assert_eq!(opens[100], Duration::from_secs(2));
        assert_eq!(opens[199], Duration::from_millis(3980));
        for w in 0..40u64 {
            let (a, b) = (
                Duration::from_millis(w * 100),
                Duration::from_millis((w + 1) * 100),
            );
            let n = opens.iter().filter(|t| a <= **t && **t < b).count();
            assert_eq!(n, 5, "{n} connects in {a:?}..{b:?}");
        }
        // Every connection stays open to the end.
        assert!((0..200).all(|g| spans(&ramp, g) == vec![(opens[g as usize], total(&ramp))]));
        assert_eq!(open_at(&ramp, 200, Duration::from_secs(1)), 51);
    }

    /// The pool of a constant-rate ramp 0 → 40 over 2 s, then 1 s at 40, over three agents:
    /// it holds 1 connection at T0, 20 at 0.95 s and all 40 at 1.95 s (one connect every
    /// 50 ms, the slope's 2 in any 100 ms); each agent's share opens its own ranks, within one
    /// of the others at every instant, and the shares add up to the pool.
    #[test]
    fn a_constant_rate_pool_grows_on_its_slope() {
        let ramp = [stage(40, 2), stage(40, 1)];
        assert_eq!(reaches(&ramp, 0), Some(Duration::ZERO));
        assert_eq!(reaches(&ramp, 1), Some(Duration::ZERO));
        assert_eq!(reaches(&ramp, 20), Some(Duration::from_millis(950)));
        assert_eq!(reaches(&ramp, 40), Some(Duration::from_millis(1950)));
        assert_eq!(reaches(&ramp, 41), None);
        let shares = [14u64, 13, 13];
        let r = &ramp;
        let opens: Vec<Duration> = (0..3u32)
            .flat_map(|a| (0..shares[a as usize]).map(move |c| spans(r, rank(a, 3, c))[0].0))
            .collect();
        assert_eq!(opens.len(), 40);
        for w in 0..20u64 {
            let a = Duration::from_millis(w * 100);
            let b = a + Duration::from_millis(100);
            let n = opens.iter().filter(|t| a <= **t && **t < b).count();
            assert_eq!(n, 2, "{n} connects in {a:?}..{b:?}");
        }
        for ms in (0..3000).step_by(10) {
            let t = Duration::from_millis(ms);
            let open: Vec<u64> = (0..3u32)
                .map(|a| {
                    (0..shares[a as usize])
                        .filter(|&c| {
                            spans(&ramp, rank(a, 3, c))
                                .iter()
                                .any(|(x, y)| *x <= t && t < *y)
                        })
                        .count() as u64
                })
                .collect();
            assert!(open.iter().max().unwrap() - open.iter().min().unwrap() <= 1);
            assert_eq!(open.iter().sum::<u64>(), open_at(&ramp, 40, t), "{t:?}");
        }
    }

    /// Up, down and up again: a rank above the trough closes on the way down and opens
    /// again on the way up.
    #[test]
    fn ramps_go_down_and_up_again() {
        let ramp = [stage(10, 1), stage(4, 3), stage(10, 1)];
        let s9 = spans(&ramp, 9);
        assert_eq!(s9.len(), 2);
        assert_eq!(
            s9[0],
            (Duration::from_millis(900), Duration::from_millis(1500))
        );
        assert_eq!(s9[1].0, Duration::from_nanos(4_833_333_333));
        assert_eq!(s9[1].1, Duration::from_secs(5));
        // Rank 3 is below the trough: open from 0.3 s to the end.
        assert_eq!(
            spans(&ramp, 3),
            vec![(Duration::from_millis(300), Duration::from_secs(5))]
        );
        // Rank 5 closes at 3.5 s, rank 4 at 4 s (and opens again at once, the ramp rising).
        assert_eq!(open_at(&ramp, 10, Duration::from_millis(3400)), 6);
        assert_eq!(open_at(&ramp, 10, Duration::from_millis(3500)), 5);
    }

    /// Round-robin ranks split every level over the agents within one.
    #[test]
    fn agents_share_every_level_within_one() {
        let ramp = [stage(1000, 10)];
        let agents = 3u32;
        let shares = [334u64, 333, 333];
        for ms in (0..10_000).step_by(37) {
            let t = Duration::from_millis(ms);
            let open: Vec<u64> = (0..agents)
                .map(|a| {
                    (0..shares[a as usize])
                        .filter(|&c| {
                            spans(&ramp, rank(a, agents, c))
                                .iter()
                                .any(|(x, y)| *x <= t && t < *y)
                        })
                        .count() as u64
                })
                .collect();
            let (lo, hi) = (open.iter().min().unwrap(), open.iter().max().unwrap());
            assert!(hi - lo <= 1, "{open:?} at {t:?}");
        }
    }

    /// A closed load given as stages takes its size and length from them; what a ramp
    /// cannot be is refused naming the field.
    #[test]
    fn stages_in_a_scenario() {
        use crate::scenario::Scenario;
        let with = |load: &str| {
            format!("name: r\ntarget: http://h:1\nload: {load}\nsession: [ {{ http: {{ path: / }} }} ]\n")
        };
        let s = Scenario::from_yaml(&with(
            "{ model: closed, stages: [ { connections: 200, duration: 4s }, { connections: 50, duration: 2s } ] }",
        ))
        .unwrap();
        let l = s.load.as_ref().unwrap();
        assert_eq!((l.connections, l.duration.0), (200, Duration::from_secs(6)));
        assert_eq!(s.duration(), Duration::from_secs(6));
        // Its own form, as agents receive it, parses to the same load.
        let again = Scenario::from_yaml(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(again.load, s.load);
        // A constant-rate load ramps its pool the same way, its rate over the whole ramp.
        let c = Scenario::from_yaml(&with(
            "{ model: constant, rate: 50, stages: [ { connections: 20, duration: 2s }, { connections: 20, duration: 1s } ] }",
        ))
        .unwrap();
        let l = c.load.as_ref().unwrap();
        assert_eq!((l.connections, l.duration.0), (20, Duration::from_secs(3)));
        assert_eq!(c.ramp_stages().len(), 2);
        for (load, why) in [
            (
                "{ model: constant, stages: [ { connections: 5, duration: 1s } ] }",
                "load.rate: ",
            ),
            (
                "{ model: constant, rate: 10, streams_per_connection: 2, stages: [ { connections: 5, duration: 1s } ] }",
                "load.stages: a ramp opens one session per connection",
            ),
            (
                "{ model: closed, connections: 5, stages: [ { connections: 5, duration: 1s } ] }",
                "load.stages: give either connections and duration, or stages",
            ),
            (
                "{ model: closed, stages: [ { connections: 5, duration: 0s } ] }",
                "load.stages[0].duration: must be > 0",
            ),
            (
                "{ model: closed, stages: [ { connections: 0, duration: 1s } ] }",
                "load.connections: must be >= 1",
            ),
        ] {
            let e = Scenario::from_yaml(&with(load)).unwrap_err().to_string();
            assert!(e.starts_with(why), "{load}: {e}");
        }
    }
}
