//! Data sources: rows of a CSV (with a header) or JSON-lines file, bound to sessions by the
//! GLOBAL arrival index of the whole-test schedule.
//!
//! Because every arrival index is owned by exactly one agent (`shard`), binding rows by that
//! index splits a file exactly across agents with no coordination: each row is used once per
//! pass, none is skipped, and arrival `i` gets the same row whatever the number of agents.
//! `shuffle` is a permutation seeded from the run seed, so it too is independent of the agent
//! count. The CLI reads the file and inlines its rows into the submitted scenario.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Largest data file accepted: the rows travel inside the submitted scenario, and a gRPC
/// message is at most 4 MiB.
pub const MAX_DATA_BYTES: usize = 3 << 20;
/// Most rows one source may hold (row indexes are `u32`).
pub const MAX_ROWS: usize = 10_000_000;

/// A data source: `{ file, order, per, on_exhausted }`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DataSource {
    /// A CSV file with a header row (`.csv`) or JSON lines, one object per line (`.jsonl`,
    /// `.ndjson`), relative to the scenario file. The CLI reads it into `columns` and `rows`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Which row arrival `i` gets: `sequence` (row `i`) or `shuffle` (a permutation seeded
    /// from the run seed).
    #[serde(default)]
    pub order: DataOrder,
    /// What a row is bound to: `session` (one row per arrival).
    #[serde(default)]
    pub per: DataScope,
    /// When arrivals outnumber rows: `fail` (refuse the run before any load), `wrap` (start
    /// over), or `stop` (arrivals past the last row are not started; they count as dropped).
    #[serde(default)]
    pub on_exhausted: OnExhausted,
    /// The column names (what `file` becomes once read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<String>,
    /// The rows, one value per column (what `file` becomes once read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rows: Vec<Vec<String>>,
}

/// Which row an arrival gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DataOrder {
    /// Arrival `i` gets row `i`.
    #[default]
    Sequence,
    /// Arrival `i` gets row `π(i)`, `π` a permutation seeded from the run seed.
    Shuffle,
}

/// What a row is bound to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DataScope {
    /// One row per session (arrival or constant-rate slot).
    #[default]
    Session,
}

/// What happens when the arrivals outnumber the rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnExhausted {
    /// Refuse the run before any load.
    #[default]
    Fail,
    /// Start over from the first row (of the same order).
    Wrap,
    /// Do not start arrivals past the last row.
    Stop,
}

/// Why a data file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataError {
    #[error("{0}")]
    Format(String),
}

impl DataSource {
    /// Checks the inlined rows; `Err(reason)`.
    pub fn check(&self) -> Result<(), String> {
        if self.file.is_some() && !self.rows.is_empty() {
            return Err("give either file or rows, not both".into());
        }
        if self.file.is_none() && self.rows.is_empty() {
            return Err("needs a file (or inlined rows)".into());
        }
        if self.rows.len() > MAX_ROWS {
            return Err(format!("{} rows; at most {MAX_ROWS}", self.rows.len()));
        }
        if let Some((i, r)) = self
            .rows
            .iter()
            .enumerate()
            .find(|(_, r)| r.len() != self.columns.len())
        {
            return Err(format!(
                "row {i} has {} values for {} columns",
                r.len(),
                self.columns.len()
            ));
        }
        Ok(())
    }

    /// The index of `column`, if it exists.
    pub fn column(&self, column: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == column)
    }

    /// Reads `bytes` (CSV with a header, or JSON lines when `jsonl` is true) into `columns`
    /// and `rows`, dropping `file`.
    pub fn load(&mut self, bytes: &[u8], jsonl: bool) -> Result<(), DataError> {
        let (columns, rows) = if jsonl {
            parse_jsonl(bytes)?
        } else {
            parse_csv(bytes)?
        };
        if rows.is_empty() {
            return Err(DataError::Format("holds no row".into()));
        }
        self.columns = columns;
        self.rows = rows;
        self.file = None;
        Ok(())
    }
}

type Table = (Vec<String>, Vec<Vec<String>>);

fn parse_csv(bytes: &[u8]) -> Result<Table, DataError> {
    let mut r = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(bytes);
    let columns: Vec<String> = r
        .headers()
        .map_err(|e| DataError::Format(format!("header: {e}")))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    if columns.iter().any(String::is_empty) {
        return Err(DataError::Format(
            "the header has an empty column name".into(),
        ));
    }
    let mut rows = Vec::new();
    for (i, rec) in r.records().enumerate() {
        let rec = rec.map_err(|e| DataError::Format(format!("row {}: {e}", i + 1)))?;
        rows.push(rec.iter().map(str::to_string).collect());
        if rows.len() > MAX_ROWS {
            return Err(DataError::Format(format!("more than {MAX_ROWS} rows")));
        }
    }
    Ok((columns, rows))
}

/// JSON lines: the columns are the first object's keys; string values are taken as they
/// are, other values as JSON text; a missing key is an empty value.
fn parse_jsonl(bytes: &[u8]) -> Result<Table, DataError> {
    let text = std::str::from_utf8(bytes).map_err(|_| DataError::Format("not UTF-8".into()))?;
    let mut columns: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let obj: BTreeMap<String, serde_json::Value> = serde_json::from_str(line)
            .map_err(|e| DataError::Format(format!("line {}: {e}", i + 1)))?;
        if columns.is_empty() {
            columns = obj.keys().cloned().collect();
        }
        rows.push(
            columns
                .iter()
                .map(|c| match obj.get(c) {
                    None => String::new(),
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                })
                .collect(),
        );
        if rows.len() > MAX_ROWS {
            return Err(DataError::Format(format!("more than {MAX_ROWS} rows")));
        }
    }
    Ok((columns, rows))
}

/// A source ready for the hot path: the row of arrival `i` is one lookup.
#[derive(Debug, Clone)]
pub struct Binding {
    /// `order[i]` is the row of arrival `i` (for `i` below the row count).
    order: Vec<u32>,
    on_exhausted: OnExhausted,
}

impl Binding {
    /// Binds `source` for a run seeded with `seed`; `name` keys the shuffle so two sources of
    /// one run are shuffled differently.
    pub fn new(name: &str, source: &DataSource, seed: u64) -> Self {
        let n = source.rows.len() as u32;
        let mut order: Vec<u32> = (0..n).collect();
        if source.order == DataOrder::Shuffle {
            use rand::seq::SliceRandom;
            use rand::SeedableRng;
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&seed.to_le_bytes());
            key[8..16].copy_from_slice(&fnv1a(name.as_bytes()).to_le_bytes());
            key[16..24].copy_from_slice(b"shuffle!");
            order.shuffle(&mut rand_chacha::ChaCha8Rng::from_seed(key));
        }
        Self {
            order,
            on_exhausted: source.on_exhausted,
        }
    }

    /// The row of arrival `index`, or `None` when the rows ran out (`fail`, `stop`).
    #[inline]
    pub fn row(&self, index: u64) -> Option<usize> {
        let n = self.order.len() as u64;
        if n == 0 {
            return None;
        }
        let i = if index < n {
            index
        } else if self.on_exhausted == OnExhausted::Wrap {
            index % n
        } else {
            return None;
        };
        Some(self.order[i as usize] as usize)
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// With `on_exhausted: fail`, refuses a run whose planned arrivals outnumber a source's
/// rows, naming the counts; `total` is the whole-test arrival count (by arithmetic).
pub fn check_supply(
    data: &BTreeMap<String, DataSource>,
    total: u64,
) -> Result<(), (String, String)> {
    for (name, d) in data {
        if d.on_exhausted == OnExhausted::Fail && d.file.is_none() && (d.rows.len() as u64) < total
        {
            return Err((
                format!("data.{name}"),
                format!(
                    "{} rows, {total} planned arrivals: the rows are exhausted before the run ends; add rows, or use on_exhausted: wrap or stop",
                    d.rows.len()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_and_jsonl_load() {
        let mut d = DataSource::default();
        d.load(b"id,name\n1,\"a, b\"\n2,c\n", false).unwrap();
        assert_eq!(d.columns, ["id", "name"]);
        assert_eq!(d.rows, [vec!["1", "a, b"], vec!["2", "c"]]);
        d.check().unwrap();
        let mut j = DataSource::default();
        j.load(b"{\"id\":1,\"name\":\"x\"}\n\n{\"name\":\"y\"}\n", true)
            .unwrap();
        assert_eq!(j.columns, ["id", "name"]);
        assert_eq!(j.rows, [vec!["1", "x"], vec!["", "y"]]);
        assert!(DataSource::default().load(b"id\n", false).is_err());
        assert!(DataSource::default().load(b"a,b\n1\n", false).is_err());
        assert!(DataSource::default().load(b"{nope\n", true).is_err());
    }

    #[test]
    fn shuffle_is_a_seeded_permutation() {
        let d = DataSource {
            order: DataOrder::Shuffle,
            columns: vec!["x".into()],
            rows: (0..100).map(|i| vec![i.to_string()]).collect(),
            ..Default::default()
        };
        let a = Binding::new("u", &d, 1);
        let mut seen: Vec<usize> = (0..100).map(|i| a.row(i).unwrap()).collect();
        assert_ne!(seen, (0..100).collect::<Vec<_>>());
        assert_eq!(
            seen,
            (0..100)
                .map(|i| Binding::new("u", &d, 1).row(i).unwrap())
                .collect::<Vec<_>>()
        );
        seen.sort_unstable();
        assert_eq!(seen, (0..100).collect::<Vec<_>>());
        assert_eq!(a.row(100), None);
        let wrap = Binding::new(
            "u",
            &DataSource {
                on_exhausted: OnExhausted::Wrap,
                ..d.clone()
            },
            1,
        );
        assert_eq!(wrap.row(100), wrap.row(0));
    }

    #[test]
    fn supply_is_checked_with_the_counts() {
        let mut m = BTreeMap::new();
        m.insert(
            "users".to_string(),
            DataSource {
                columns: vec!["x".into()],
                rows: vec![vec!["1".into()]; 200],
                ..Default::default()
            },
        );
        check_supply(&m, 200).unwrap();
        let (path, why) = check_supply(&m, 300).unwrap_err();
        assert_eq!(path, "data.users");
        assert!(why.starts_with("200 rows, 300 planned arrivals"), "{why}");
    }
}
