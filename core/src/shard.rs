//! Sharding: which agent runs which arrival.
//!
//! Every agent walks the same whole-test schedule and keeps the arrivals its shard owns, so
//! the union of the shards is the single-agent schedule by construction. With equal weights
//! arrival `i` goes to agent `i mod n`: any contiguous run of arrivals (a phase) is split
//! with sizes differing by at most one. With weights, a smooth weighted round-robin over one
//! period of `sum(weights)` arrivals gives every agent exactly its weight per period.

use serde::{Deserialize, Serialize};

/// Most total weight a weighted plan may have (the period of its table).
pub const MAX_TOTAL_WEIGHT: u32 = 65_536;

/// An agent's part of the schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// This agent's position, 0-based.
    pub index: u32,
    /// Number of shards in the run.
    pub count: u32,
    /// Optional relative weights, one per shard; empty means equal.
    #[serde(default)]
    pub weights: Vec<u32>,
}

/// A shard description that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// A shard count of 0.
    #[error("shard count must be >= 1")]
    NoShards,
    /// A shard index not below the shard count.
    #[error("shard index {index} is out of range for {count} shards")]
    IndexOutOfRange {
        /// The shard index given.
        index: u32,
        /// The shard count.
        count: u32,
    },
    /// Weights given, but not one per shard.
    #[error("weights: expected {count} weights, got {got}")]
    WeightCount {
        /// The shard count.
        count: u32,
        /// The weights given.
        got: usize,
    },
    /// A weight of 0, or weights whose sum is past [`MAX_TOTAL_WEIGHT`].
    #[error("weights: must be >= 1 each and sum to at most {MAX_TOTAL_WEIGHT}")]
    BadWeights,
}

/// Maps every arrival index to the shard that owns it.
#[derive(Debug, Clone)]
pub struct ShardMap {
    count: u32,
    /// For weighted plans: owner of each position within one period.
    table: Vec<u32>,
}

impl ShardMap {
    /// Equal shares over `count` shards, or weighted shares when `weights` is not empty.
    pub fn new(count: u32, weights: &[u32]) -> Result<Self, ShardError> {
        if count == 0 {
            return Err(ShardError::NoShards);
        }
        let table = if weights.is_empty() {
            Vec::new()
        } else {
            if weights.len() != count as usize {
                return Err(ShardError::WeightCount {
                    count,
                    got: weights.len(),
                });
            }
            weighted_table(weights)?
        };
        Ok(Self { count, table })
    }

    /// The shard that runs arrival `i` of the whole-test schedule.
    #[inline]
    pub fn owner(&self, i: u64) -> u32 {
        if self.table.is_empty() {
            (i % u64::from(self.count)) as u32
        } else {
            self.table[(i % self.table.len() as u64) as usize]
        }
    }

    /// The number of shards.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The period of the ownership: arrival `i` has the owner of `i mod period`.
    pub fn period(&self) -> u64 {
        if self.table.is_empty() {
            u64::from(self.count)
        } else {
            self.table.len() as u64
        }
    }

    /// For every shard, how many of the arrival indices `0..x` it owns: arithmetic for equal
    /// shares, whole periods plus one partial scan of the table for weighted ones.
    pub fn owned_below(&self, x: u64) -> Vec<u64> {
        let n = u64::from(self.count);
        if self.table.is_empty() {
            return (0..n).map(|j| (x + n - 1 - j) / n).collect();
        }
        let period = self.table.len() as u64;
        let mut owned = vec![0u64; self.count as usize];
        for &o in &self.table {
            owned[o as usize] += x / period;
        }
        for &o in &self.table[..(x % period) as usize] {
            owned[o as usize] += 1;
        }
        owned
    }
}

/// Decides ownership of arrival indices for one shard.
#[derive(Debug, Clone)]
pub struct ShardFilter {
    index: u32,
    map: ShardMap,
}

impl Shard {
    /// Shard `index` of `count`, with equal weights.
    pub fn new(index: u32, count: u32) -> Self {
        Self {
            index,
            count,
            weights: Vec::new(),
        }
    }

    /// Checks the description and builds the ownership test.
    pub fn filter(&self) -> Result<ShardFilter, ShardError> {
        let map = ShardMap::new(self.count, &self.weights)?;
        if self.index >= self.count {
            return Err(ShardError::IndexOutOfRange {
                index: self.index,
                count: self.count,
            });
        }
        Ok(ShardFilter {
            index: self.index,
            map,
        })
    }
}

impl ShardFilter {
    /// Whether arrival `i` of the whole-test schedule belongs to this shard.
    #[inline]
    pub fn owns(&self, i: u64) -> bool {
        self.map.owner(i) == self.index
    }
}

/// Smooth weighted round-robin over one period: deterministic, exact per period, and
/// interleaved so that any window is close to proportional.
pub(crate) fn weighted_table(weights: &[u32]) -> Result<Vec<u32>, ShardError> {
    let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
    if weights.contains(&0) || total > u64::from(MAX_TOTAL_WEIGHT) {
        return Err(ShardError::BadWeights);
    }
    let total = total as i64;
    let mut current = vec![0i64; weights.len()];
    let mut table = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best = 0;
        for (j, &w) in weights.iter().enumerate() {
            current[j] += i64::from(w);
            if current[j] > current[best] {
                best = j;
            }
        }
        current[best] -= total;
        table.push(best as u32);
    }
    Ok(table)
}

/// Splits a count (e.g. closed-model connections) over `n` shards, sizes differing by at most
/// one, the larger ones first.
pub fn split_evenly(total: u64, n: u32) -> Vec<u64> {
    let n64 = u64::from(n.max(1));
    (0..n64)
        .map(|i| total / n64 + u64::from(i < total % n64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_table_is_exact_per_period() {
        let t = weighted_table(&[5, 1, 1]).unwrap();
        assert_eq!(t.len(), 7);
        assert_eq!(t.iter().filter(|&&o| o == 0).count(), 5);
        assert_eq!(t, vec![0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn bad_shards_are_errors() {
        assert_eq!(Shard::new(0, 0).filter().unwrap_err(), ShardError::NoShards);
        assert!(Shard::new(3, 3).filter().is_err());
        let mut s = Shard::new(0, 2);
        s.weights = vec![1];
        assert!(s.filter().is_err());
        s.weights = vec![1, 0];
        assert_eq!(s.filter().unwrap_err(), ShardError::BadWeights);
    }

    #[test]
    fn split_evenly_adds_up() {
        assert_eq!(split_evenly(10, 3), vec![4, 3, 3]);
        assert_eq!(split_evenly(2, 4), vec![1, 1, 0, 0]);
    }
}
