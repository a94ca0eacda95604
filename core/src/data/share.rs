//! Who needs which rows: the keys a run uses, who runs them, the positions of the pass each
//! agent needs, the supply check, and an agent's [`Share`] of a source.
//!
//! Ownership of keys is periodic (the shard map of arrival indexes, or the split of a closed
//! or constant-rate load's connections), so an agent's positions are found by arithmetic over
//! residues, in time that grows with what it receives, never by walking the run's arrivals.

use std::ops::Range;

use super::{DataScope, DataSource, OnExhausted};
use crate::scenario::{LoadModel, Scenario};
use crate::schedule::Schedule;
use crate::shard::{split_evenly, ShardMap};

/// Who runs which key of a source: key `k` is run by the agent whose residue ranges hold
/// `k mod period`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyOwners {
    period: u64,
    /// Per agent, sorted disjoint ranges of residues; together they cover `0..period`.
    ranges: Vec<Vec<Range<u64>>>,
}

impl KeyOwners {
    /// Keys behind arrival (or slot) indexes sharded by `map`, `stride` keys per index (key
    /// `k` belongs to index `k / stride`).
    pub fn shards(map: &ShardMap, stride: u64) -> Self {
        let stride = stride.max(1);
        let base = map.period();
        let mut ranges = vec![Vec::new(); map.count() as usize];
        for r in 0..base {
            push_range(
                &mut ranges[map.owner(r) as usize],
                r * stride..(r + 1) * stride,
            );
        }
        Self {
            period: base * stride,
            ranges,
        }
    }

    /// Keys behind indexes that run on connection `index mod total`, the connections split
    /// over the agents in order (`split[a]` each), `stride` keys per index.
    pub fn connections(split: &[u64], stride: u64) -> Self {
        let stride = stride.max(1);
        let mut first = 0;
        let ranges = split
            .iter()
            .map(|&n| {
                let r = first * stride..(first + n) * stride;
                first += n;
                if n == 0 {
                    Vec::new()
                } else {
                    vec![r]
                }
            })
            .collect();
        Self {
            period: (first * stride).max(1),
            ranges,
        }
    }

    /// The number of agents.
    pub fn agents(&self) -> u32 {
        self.ranges.len() as u32
    }

    /// The agent that runs `key` (`None` when no agent does: a load with no connection).
    pub fn owner(&self, key: u64) -> Option<u32> {
        let r = key % self.period;
        self.ranges
            .iter()
            .position(|rs| rs.iter().any(|x| x.contains(&r)))
            .map(|a| a as u32)
    }
}

fn push_range(v: &mut Vec<Range<u64>>, r: Range<u64>) {
    match v.last_mut() {
        Some(last) if last.end == r.start => last.end = r.end,
        _ => v.push(r),
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The positions, ascending, of the pass of `rows` rows that `agent` needs: those of the keys
/// `0..reach` it runs (every key when `reach` is `None`), key `k` at position `k`, or `k mod
/// rows` with `wrap` (without, keys from `rows` on have no row).
///
/// Without wrapping (or while the keys do not outnumber the rows) the agents' positions are
/// pairwise disjoint and together exactly `0..min(rows, reach)`. With wrapping, an agent needs
/// the positions its keys meet in every pass, and they overlap.
pub fn positions(
    rows: u32,
    wrap: bool,
    reach: Option<u64>,
    owners: &KeyOwners,
    agent: u32,
) -> Vec<u32> {
    let n = u64::from(rows);
    let Some(mine) = owners.ranges.get(agent as usize) else {
        return Vec::new();
    };
    let reach = reach.unwrap_or(u64::MAX);
    let p = owners.period;
    let mut out = Vec::new();
    if n == 0 || mine.is_empty() {
        return out;
    }
    if !wrap || reach <= n {
        // One pass: the keys below min(rows, reach) whose residue is the agent's.
        each_in(n.min(reach), mine, p, |q| out.push(q as u32));
        return out;
    }
    // Pass m holds the keys m·n + q. Their residues mod p are (q + m·n) mod p; as m runs over
    // p/g passes (g = gcd(n, p)) they run over every residue ≡ q (mod g).
    let g = gcd(n, p);
    let classes = p / g;
    if reach / n >= classes {
        // Every position meets every residue of its class: position q is needed when one of
        // the agent's residues is ≡ q (mod g).
        let mut class = vec![false; g as usize];
        for r in mine {
            if r.end - r.start >= g {
                class.iter_mut().for_each(|c| *c = true);
                break;
            }
            for x in r.clone() {
                class[(x % g) as usize] = true;
            }
        }
        if class.iter().all(|&c| c) {
            return (0..rows).collect();
        }
        let marked: Vec<u64> = (0..g).filter(|&c| class[c as usize]).collect();
        let mut base = 0;
        while base < n {
            for &c in &marked {
                if base + c < n {
                    out.push((base + c) as u32);
                }
            }
            base += g;
        }
        return out;
    }
    // Fewer passes than residue classes: mark the positions pass by pass.
    let mut bits = vec![0u64; n.div_ceil(64) as usize];
    let passes = reach.div_ceil(n);
    for m in 0..passes {
        let end = (reach - m * n).min(n);
        let shift = (m % p) * (n % p) % p;
        // (q + shift) mod p ∈ [lo, hi)  ⇔  q mod p ∈ [lo − shift, hi − shift) (mod p).
        let shifted: Vec<Range<u64>> = mine
            .iter()
            .flat_map(|r| {
                let lo = (r.start + p - shift) % p;
                let hi = lo + (r.end - r.start);
                if hi <= p {
                    [Some(lo..hi), None]
                } else {
                    [Some(lo..p), Some(0..hi - p)]
                }
            })
            .flatten()
            .collect();
        each_in(end, &shifted, p, |q| {
            bits[(q / 64) as usize] |= 1 << (q % 64)
        });
    }
    for (w, &word) in bits.iter().enumerate() {
        let mut word = word;
        while word != 0 {
            let b = word.trailing_zeros() as u64;
            out.push((w as u64 * 64 + b) as u32);
            word &= word - 1;
        }
    }
    out
}

/// Calls `f` with every `q` in `0..end` whose residue mod `p` lies in one of `ranges`
/// (ranges within `0..p`), ascending when the ranges are sorted and disjoint.
fn each_in(end: u64, ranges: &[Range<u64>], p: u64, mut f: impl FnMut(u64)) {
    let mut base = 0;
    while base < end {
        for r in ranges {
            let lo = base + r.start;
            let hi = (base + r.end).min(end);
            for q in lo..hi {
                f(q);
            }
        }
        base += p;
    }
}

/// How a run uses a source's keys: how many there are, how many per session, who runs them.
#[derive(Debug, Clone)]
pub struct Keys {
    /// Keys the run uses in all; `None` when unbounded (the sessions of a closed load).
    pub reach: Option<u64>,
    /// Keys per session: for `per: request`, the requests of a session that read the source.
    pub per_session: u64,
    /// Which agent runs which key, and when.
    pub owners: KeyOwners,
}

impl Keys {
    /// The keys of `source` (named `name`) in `scenario`, seeded with `seed`, over the agents
    /// of `map`.
    pub fn new(
        scenario: &Scenario,
        name: &str,
        source: &DataSource,
        seed: u64,
        map: &ShardMap,
    ) -> Self {
        let (reach, per_session) = reach(scenario, name, source, seed);
        let split = || {
            let c = scenario
                .load
                .as_ref()
                .map_or(0, |l| u64::from(l.connections));
            split_evenly(c, map.count())
        };
        let owners = match (source.per, scenario.load.as_ref().map(|l| l.model)) {
            (DataScope::Connection, Some(_)) => KeyOwners::connections(&split(), 1),
            (_, Some(LoadModel::Closed)) => KeyOwners::connections(&split(), per_session),
            _ => KeyOwners::shards(map, per_session),
        };
        Self {
            reach,
            per_session,
            owners,
        }
    }

    /// The positions of the pass `agent` needs: with `order: random`, every one (a key may
    /// draw any row).
    pub fn positions(&self, source: &DataSource, agent: u32) -> Vec<u32> {
        if source.order == crate::data::DataOrder::Random {
            return (0..u32::try_from(source.len()).unwrap_or(u32::MAX)).collect();
        }
        positions(
            u32::try_from(source.len()).unwrap_or(u32::MAX),
            source.on_exhausted == OnExhausted::Wrap,
            self.reach,
            &self.owners,
            agent,
        )
    }
}

/// The keys the run uses in all (`None`: unbounded), and the keys per session.
fn reach(scenario: &Scenario, name: &str, source: &DataSource, seed: u64) -> (Option<u64>, u64) {
    let per_session = match source.per {
        DataScope::Request => scenario.requests_reading(name),
        _ => 1,
    };
    let arrivals =
        || Schedule::new(&scenario.effective_phases(), scenario.arrival, seed).total_arrivals();
    let reach = match (source.per, scenario.load.as_ref()) {
        // Read by no request: no key at all.
        (DataScope::Request, _) if per_session == 0 => Some(0),
        (DataScope::Connection, Some(l)) => Some(u64::from(l.connections)),
        (_, Some(l)) if l.model == LoadModel::Closed => None,
        (DataScope::Request, _) => Some(arrivals().saturating_mul(per_session)),
        _ => Some(arrivals()),
    };
    (reach, per_session)
}

/// What a source needs and has: the figures of the supply check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supply {
    /// Rows the source holds.
    pub rows: u64,
    /// Keys the run uses; `None`: unbounded.
    pub keys: Option<u64>,
}

/// With `on_exhausted: fail`, refuses a run (seeded with `seed`) in which a source's keys
/// outnumber its rows, saying when they would run out: `Err((field, reason))`. The counts
/// and the time are arithmetic, never a walk of the schedule.
pub fn check_supply(scenario: &Scenario, seed: u64) -> Result<(), (String, String)> {
    for (name, d) in &scenario.data {
        if d.on_exhausted != OnExhausted::Fail
            || d.is_unread()
            || d.order == crate::data::DataOrder::Random
        {
            continue;
        }
        let (Some(keys), per_session) = reach(scenario, name, d, seed) else {
            continue; // refused by validation: a closed load's sessions are unbounded
        };
        let rows = d.len();
        if keys <= rows {
            continue;
        }
        let schedule = || Schedule::new(&scenario.effective_phases(), scenario.arrival, seed);
        let when = |session: u64| match schedule().time_of(session) {
            Some((t, p)) => {
                let phase = scenario
                    .effective_phases()
                    .get(p)
                    .map(|ph| ph.display_name(p))
                    .unwrap_or_default();
                format!("rows run out at t={t:.1} s in phase {phase}")
            }
            None => "rows run out before the run ends".into(),
        };
        let what = if scenario.load.is_some() {
            "slots"
        } else {
            "arrivals"
        };
        let why = match (d.per, scenario.load.is_some()) {
            (DataScope::Connection, true) => format!(
                "{} rows, {} connections: rows run out at connection {} of {}",
                count(rows),
                count(keys),
                count(rows + 1),
                count(keys)
            ),
            (DataScope::Request, _) => format!(
                "{} rows, {} requests read it ({per_session} per session): {}",
                count(rows),
                count(keys),
                when(rows / per_session.max(1))
            ),
            _ => format!(
                "{} rows, {} {what}: {}",
                count(rows),
                count(keys),
                when(rows)
            ),
        };
        return Err((
            format!("data.{name}"),
            format!("{why}; add rows, or use on_exhausted: wrap or stop"),
        ));
    }
    Ok(())
}

/// `1234567` as `1,234,567`.
fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Why a row cannot join a [`Share`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareError {
    /// The pass has no row at this position.
    #[error("position {position} has no row")]
    NoRow {
        /// The position, in the source's rows.
        position: u32,
    },
    /// The position is past the source's last row.
    #[error("position {position} is past the source's {rows} rows")]
    PastEnd {
        /// The position, in the source's rows.
        position: u32,
        /// Rows the source holds.
        rows: u64,
    },
    /// Positions arrive ascending, each once.
    #[error("position {position} does not ascend")]
    NotAscending {
        /// The position that came after a higher or equal one.
        position: u32,
    },
    /// A row gives one value per column.
    #[error("position {position} has {values} values for {columns} columns")]
    Width {
        /// The row's position in the source.
        position: u32,
        /// How many values it gives.
        values: usize,
        /// How many columns the source has.
        columns: usize,
    },
    /// Offsets are `u32`: a share's text stops at 4 GiB.
    #[error("the share is larger than 4 GiB")]
    TooLarge,
}

/// An agent's share of one source: the rows at the positions of the pass its keys need, and
/// the lookup from a key to one of them. The cells live in one arena.
#[derive(Debug, Clone, Default)]
pub struct Share {
    /// Rows in the whole pass.
    pass: u64,
    wrap: bool,
    /// `order: random`: the salt keys draw their rows with ([`crate::data::random_row`]).
    random: Option<u64>,
    columns: usize,
    /// Ascending.
    positions: Vec<u32>,
    text: String,
    /// The end of each cell in `text`, row after row.
    ends: Vec<u32>,
}

impl Share {
    /// An empty share of `source` (its row count, columns and `on_exhausted`).
    pub fn new(source: &DataSource) -> Self {
        Self {
            pass: source.len(),
            wrap: source.on_exhausted == OnExhausted::Wrap,
            columns: source.columns.len(),
            ..Self::default()
        }
    }

    /// The share of the positions `positions` (ascending) of `source`'s inlined rows in the
    /// order of `pass` ([`DataSource::pass`]).
    pub fn of(source: &DataSource, pass: &[u32], positions: &[u32]) -> Result<Self, ShareError> {
        let mut s = Self::new(source);
        for &p in positions {
            let row = pass
                .get(p as usize)
                .and_then(|&r| source.rows.row(r as usize))
                .ok_or(ShareError::NoRow { position: p })?;
            s.push(p, row.iter())?;
        }
        Ok(s)
    }

    /// Appends the row at `position`, which must be above every position already there.
    pub fn push<S: AsRef<str>>(
        &mut self,
        position: u32,
        cells: impl ExactSizeIterator<Item = S>,
    ) -> Result<(), ShareError> {
        if u64::from(position) >= self.pass {
            return Err(ShareError::PastEnd {
                position,
                rows: self.pass,
            });
        }
        if self.positions.last().is_some_and(|&l| l >= position) {
            return Err(ShareError::NotAscending { position });
        }
        if cells.len() != self.columns {
            return Err(ShareError::Width {
                position,
                values: cells.len(),
                columns: self.columns,
            });
        }
        let start = (self.text.len(), self.ends.len());
        for c in cells {
            self.text.push_str(c.as_ref());
            let Ok(end) = u32::try_from(self.text.len()) else {
                self.text.truncate(start.0);
                self.ends.truncate(start.1);
                return Err(ShareError::TooLarge);
            };
            self.ends.push(end);
        }
        self.positions.push(position);
        Ok(())
    }

    /// Makes keys draw their rows at random (`order: random`) with `salt`.
    pub fn draw_at_random(&mut self, salt: u64) {
        self.random = Some(salt);
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// Whether no row is held.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// The positions held, ascending.
    pub fn positions(&self) -> &[u32] {
        &self.positions
    }

    /// The row (of this share) of `key`, or `None` when the rows ran out (`fail`, `stop`)
    /// or the key is not one this share was made for.
    #[inline]
    pub fn row(&self, key: u64) -> Option<u32> {
        let p = if let Some(salt) = self.random {
            if self.pass == 0 {
                return None;
            }
            crate::data::random_row(salt, key, self.pass)
        } else if key < self.pass {
            key
        } else if self.wrap && self.pass > 0 {
            key % self.pass
        } else {
            return None;
        };
        let p = u32::try_from(p).ok()?;
        self.positions.binary_search(&p).ok().map(|i| i as u32)
    }

    /// The value of `column` in `row` (a row from [`Share::row`]); empty when out of range.
    #[inline]
    pub fn cell(&self, row: u32, column: usize) -> &str {
        let i = row as usize * self.columns + column;
        let start = match i.checked_sub(1) {
            Some(j) => self.ends.get(j).copied().unwrap_or(0) as usize,
            None => 0,
        };
        let end = self.ends.get(i).copied().unwrap_or(0) as usize;
        self.text.get(start..end).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Rows;

    fn equal(agents: u32, stride: u64) -> KeyOwners {
        KeyOwners::shards(&ShardMap::new(agents, &[]).unwrap(), stride)
    }

    /// The positions by walking every key: what `positions` must equal.
    fn walk(rows: u32, wrap: bool, reach: u64, owners: &KeyOwners, agent: u32) -> Vec<u32> {
        let n = u64::from(rows);
        let mut v: Vec<u32> = (0..reach)
            .filter(|&k| owners.owner(k) == Some(agent))
            .filter_map(|k| {
                if k < n {
                    Some(k as u32)
                } else if wrap {
                    Some((k % n) as u32)
                } else {
                    None
                }
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    #[test]
    fn owners_of_shards_and_connections() {
        let o = equal(3, 2);
        assert_eq!(
            (0..8).map(|k| o.owner(k).unwrap()).collect::<Vec<_>>(),
            [0, 0, 1, 1, 2, 2, 0, 0]
        );
        let w = KeyOwners::shards(&ShardMap::new(2, &[2, 1]).unwrap(), 1);
        assert_eq!(
            (0..6).map(|k| w.owner(k).unwrap()).collect::<Vec<_>>(),
            [0, 1, 0, 0, 1, 0]
        );
        let c = KeyOwners::connections(&[2, 1, 0], 3);
        assert_eq!(
            (0..10).map(|k| c.owner(k).unwrap()).collect::<Vec<_>>(),
            [0, 0, 0, 0, 0, 0, 1, 1, 1, 0]
        );
        assert!(positions(10, true, None, &c, 2).is_empty());
    }

    #[test]
    fn positions_match_the_walk() {
        let mut all = Vec::new();
        for (agents, stride) in [(1u32, 1u64), (2, 1), (3, 2), (4, 3), (6, 1)] {
            all.push(equal(agents, stride));
        }
        all.push(KeyOwners::shards(&ShardMap::new(3, &[3, 1, 2]).unwrap(), 2));
        all.push(KeyOwners::connections(&[3, 2, 2], 1));
        all.push(KeyOwners::connections(&[2, 1, 0], 2));
        for owners in &all {
            for rows in [1u32, 2, 5, 6, 12, 13] {
                for wrap in [false, true] {
                    for reach in [0u64, 1, 7, 13, 40, 200] {
                        for a in 0..owners.agents() {
                            assert_eq!(
                                positions(rows, wrap, Some(reach), owners, a),
                                walk(rows, wrap, reach, owners, a),
                                "rows {rows} {owners:?} wrap {wrap} reach {reach} agent {a}"
                            );
                        }
                    }
                }
                // Unbounded: every pass up to a full cycle of residues.
                for a in 0..owners.agents() {
                    let cycle = u64::from(rows) * owners.period * 2;
                    assert_eq!(
                        positions(rows, true, None, owners, a),
                        walk(rows, true, cycle, owners, a)
                    );
                }
            }
        }
    }

    /// The work follows what an agent receives, not the run's keys: ten million rows, a
    /// thousand agents, a year of arrivals.
    #[test]
    fn large_runs_are_arithmetic() {
        let owners = equal(1000, 1);
        let mine = positions(10_000_000, false, Some(u64::MAX / 2), &owners, 7);
        assert_eq!(mine.len(), 10_000);
        assert_eq!(mine[..2], [7, 1007]);
        let wrapped = positions(10_000_000, true, Some(1 << 50), &owners, 7);
        assert_eq!(wrapped.len(), 10_000); // gcd(1e7, 1000) = 1000: the same residues
        let coprime = positions(9_999_999, true, Some(1 << 50), &owners, 7);
        assert_eq!(coprime.len(), 9_999_999); // every row, in some pass
        let partial = positions(10_001, true, Some(30_000), &owners, 7);
        assert_eq!(partial, walk(10_001, true, 30_000, &owners, 7));
    }

    #[test]
    fn supply_counts_and_times() {
        let s = Scenario::from_yaml(
            r#"
name: t
target: http://127.0.0.1:1
phases: [ { name: warm, duration: 10s, arrival_rate: 10 }, { name: ramp, duration: 10s, arrival_rate: 10, ramp_to: 30 } ]
data:
  users: { on_exhausted: wrap, columns: [id], rows: [["1"]] }
session: [ { http: { path: '/${users.id}' } } ]
"#,
        )
        .unwrap();
        let mut t = s.clone();
        let users = t.data.get_mut("users").unwrap();
        users.on_exhausted = OnExhausted::Fail;
        users.rows = Rows::from_rows(vec![["x"]; 150]).unwrap();
        let (field, why) = check_supply(&t, 0).unwrap_err();
        assert_eq!(field, "data.users");
        assert_eq!(
            why,
            "150 rows, 300 arrivals: rows run out at t=13.7 s in phase ramp; add rows, or use on_exhausted: wrap or stop"
        );
        let users = t.data.get_mut("users").unwrap();
        users.rows = Rows::from_rows(vec![["x"]; 300]).unwrap();
        check_supply(&t, 0).unwrap();
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(count(999), "999");
    }

    #[test]
    fn random_order_draws_any_row_for_any_key_and_never_runs_out() {
        let d = DataSource {
            order: crate::data::DataOrder::Random,
            columns: vec!["a".into()],
            rows: Rows::from_rows((0..7).map(|i| [i.to_string()])).unwrap(),
            ..DataSource::default()
        };
        let keys = Keys::new(
            &Scenario::from_yaml("name: r\ntarget: http://h:1\nphases: [ { duration: 1s, arrival_rate: 100 } ]\nsession: [ { http: { path: / } } ]\n").unwrap(),
            "u",
            &d,
            0,
            &ShardMap::new(3, &[]).unwrap(),
        );
        assert_eq!(
            keys.positions(&d, 2),
            (0..7).collect::<Vec<u32>>(),
            "every row"
        );
        let mut share = Share::of(&d, &d.pass("u", 0), &keys.positions(&d, 1)).unwrap();
        let salt = DataSource::random_salt("u", 5);
        share.draw_at_random(salt);
        let drawn: Vec<u32> = (0..1000).map(|k| share.row(k).unwrap()).collect();
        for (k, r) in drawn.iter().enumerate() {
            assert_eq!(u64::from(*r), crate::data::random_row(salt, k as u64, 7));
        }
        let hits = (0..7).map(|r| drawn.iter().filter(|&&x| x == r).count());
        assert!(
            hits.clone().all(|h| (90..200).contains(&h)),
            "{:?}",
            hits.collect::<Vec<_>>()
        );
        assert_ne!(salt, DataSource::random_salt("v", 5));
    }

    #[test]
    fn a_share_looks_keys_up() {
        let d = DataSource {
            columns: vec!["a".into(), "b".into()],
            rows: Rows::from_rows((0..5).map(|i| [format!("a{i}"), format!("b{i}")])).unwrap(),
            on_exhausted: OnExhausted::Wrap,
            ..Default::default()
        };
        let pass = d.pass("u", 0);
        let s = Share::of(&d, &pass, &[1, 3]).unwrap();
        assert_eq!(s.row(1), Some(0));
        assert_eq!(s.row(8), Some(1));
        assert_eq!(s.row(2), None);
        assert_eq!(s.cell(1, 1), "b3");
        assert_eq!(s.cell(0, 0), "a1");
        assert_eq!(s.cell(9, 0), "");
        let mut bad = Share::new(&d);
        assert_eq!(
            bad.push(5, ["x", "y"].iter()),
            Err(ShareError::PastEnd {
                position: 5,
                rows: 5
            })
        );
        bad.push(2, ["x", "y"].iter()).unwrap();
        assert_eq!(
            bad.push(2, ["x", "y"].iter()).unwrap_err().to_string(),
            "position 2 does not ascend"
        );
        assert_eq!(
            bad.push(3, ["x"].iter()).unwrap_err().to_string(),
            "position 3 has 1 values for 2 columns"
        );
        assert_eq!(
            Share::of(&d, &pass, &[7]).unwrap_err(),
            ShareError::NoRow { position: 7 }
        );
    }
}
