//! Data sources: rows of a CSV (with a header) or JSON-lines file, bound to sessions,
//! requests or connections by a global *key* that does not depend on the number of agents.
//!
//! A source's key is the session's global arrival index (`per: session`), the `r`-th of the
//! `R` requests of session `i` that read the source, `i × R + r` (`per: request`), or the
//! connection's global index (`per: connection`). Key `k` takes the row at position `k` of the
//! *pass* (`k mod N` with `wrap`): the file in `sequence` order, or a permutation of it seeded
//! from the run seed (`shuffle`). Every key is run by exactly one agent (`shard`), so binding
//! rows by key splits a file exactly across agents with no coordination: each row is used at
//! most once per pass, and key `k` gets the same row whatever the number of agents.
//!
//! The CLI reads the file and inlines its rows into the submitted scenario; the controller
//! sends each agent only the rows of the keys it runs ([`share`]), and the agent looks a key's
//! row up in its [`share::Share`].

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod object;
pub mod rows;
pub mod share;

pub use object::{DataFormat, ObjectData, ObjectError, ObjectKey, ObjectKind};
pub use rows::{PackedError, Row, Rows, RowsError};
pub use share::{positions, KeyOwners, Keys, Supply};

/// Largest data file accepted: the file travels whole once, from the CLI to the controller
/// (inside the scenario, at most [`crate::scenario::MAX_SCENARIO_BYTES`]); agents receive only
/// their share, in chunks.
pub const MAX_DATA_BYTES: usize = 16 << 20;
/// Most rows one source may hold (positions are `u32`).
pub const MAX_ROWS: usize = 10_000_000;

/// A data source: `{ file, order, per, on_exhausted }`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DataSource {
    /// A CSV file with a header row (`.csv`) or JSON lines, one object per line (`.jsonl`,
    /// `.ndjson`), relative to the scenario file. The CLI reads it into `columns` and `rows`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Only in a `LoadTest`: a key of a ConfigMap in its namespace, read by the controller
    /// into `columns` and `rows` (format from the key's extension, as for `file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ObjectKey>,
    /// Only in a `LoadTest`: a key of a Secret in its namespace, read like `config_map`; its
    /// values are never logged nor written to a status or report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<ObjectKey>,
    /// Which row key `k` gets: `sequence` (row `k`) or `shuffle` (a permutation seeded from
    /// the run seed).
    #[serde(default)]
    pub order: DataOrder,
    /// What a row is bound to: `session` (one row per arrival), `request` (one row per
    /// request that reads the source) or `connection` (one row per connection, kept by the
    /// sessions that reuse it).
    #[serde(default)]
    pub per: DataScope,
    /// When keys outnumber rows: `fail` (refuse the run before any load), `wrap` (start
    /// over), or `stop` (sessions past the last row are not started; they count as dropped).
    #[serde(default)]
    pub on_exhausted: OnExhausted,
    /// The column names (what `file` becomes once read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<String>,
    /// The rows, one value per column (what `file` becomes once read).
    #[serde(default, skip_serializing_if = "Rows::is_empty")]
    pub rows: Rows,
    /// Only in the form an agent receives ([`crate::scenario::Scenario::agent_form`]): the
    /// source's row count, its `rows` left out. The agent's share of them arrives apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub rows_in_all: Option<u32>,
}

/// Which row a key gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DataOrder {
    /// Key `k` gets row `k`.
    #[default]
    Sequence,
    /// Key `k` gets row `π(k)`, `π` a permutation seeded from the run seed.
    Shuffle,
    /// Key `k` gets a row drawn from the run seed, the source's name and `k`: rows repeat
    /// and never run out (`on_exhausted` does not apply), and a rerun draws the same rows.
    /// Any agent may need any row, so each gets the whole source.
    Random,
}

/// The row a key draws with `order: random`, from the source's salt
/// ([`DataSource::random_salt`]): a splitmix64 finish of `salt + key`, reduced to `rows`.
#[inline]
pub fn random_row(salt: u64, key: u64, rows: u64) -> u64 {
    let mut z = salt.wrapping_add(key.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    // Lemire's reduction: unbiased enough for row picking, no division.
    ((u128::from(z) * u128::from(rows)) >> 64) as u64
}

/// What a row is bound to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DataScope {
    /// One row per session (arrival, constant-rate slot, or closed-model iteration).
    #[default]
    Session,
    /// One row per request that reads the source: the `r`-th such request of session `i`
    /// has key `i × R + r`, `R` the requests per session that read it (counting repeats).
    Request,
    /// One row per connection: the global index of a closed or constant-rate load's
    /// connection, kept by every session that runs on it; with arrival phases each session
    /// has its own connection, so the session's index.
    Connection,
}

impl DataScope {
    /// The scope as the scenario's `per:` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Session => "session",
            Self::Request => "request",
            Self::Connection => "connection",
        }
    }
}

/// What happens when the keys outnumber the rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnExhausted {
    /// Refuse the run before any load.
    #[default]
    Fail,
    /// Start over from the first row (of the same order).
    Wrap,
    /// Do not start sessions past the last row.
    Stop,
}

/// Why a data file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataError {
    /// The text does not parse as its format (CSV with a header, or JSON lines); the message says
    /// where and why.
    #[error("{0}")]
    Format(String),
}

/// Why a data source, as written or inlined, cannot be used; the caller names the source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// `rows_in_all` belongs to the form the controller sends agents, which has no rows and
    /// no origin to read them from.
    #[error("rows_in_all is only for the form agents receive, without rows")]
    AgentFormWithRows,
    /// The agents' form still names the columns templates read.
    #[error("has no column")]
    NoColumn,
    /// Positions are `u32`, and a share is bounded by [`MAX_ROWS`].
    #[error("{rows} rows; at most {MAX_ROWS}")]
    TooManyRows {
        /// The rows the source holds.
        rows: u64,
    },
    /// A row does not give one value per column.
    #[error("row {row} has {values} values for {columns} columns")]
    Width {
        /// The row's index, from 0.
        row: usize,
        /// How many values it gives.
        values: usize,
        /// How many columns the source has.
        columns: usize,
    },
    /// Nothing says where the rows come from.
    #[error("needs a file, a config_map or a secret (or inlined rows)")]
    NoOrigin,
    /// A ConfigMap or Secret reference misses its object's name or key.
    #[error("{field}: needs a name and a key")]
    NoObjectName {
        /// `config_map` or `secret`.
        field: &'static str,
    },
    /// A ConfigMap or Secret key whose extension names no format.
    #[error(
        "{field}: key {key}: the format is taken from the key's extension: name it .csv, \
         .jsonl or .ndjson"
    )]
    ObjectFormat {
        /// `config_map` or `secret`.
        field: &'static str,
        /// The key as the scenario gives it.
        key: String,
    },
    /// More than one origin is given.
    #[error("give one of {}, not both", given.join(" or "))]
    Origins {
        /// The fields given, in the order `file`, `config_map`, `secret`, `rows`.
        given: Vec<&'static str>,
    },
}

impl DataSource {
    /// Checks the inlined rows.
    pub fn check(&self) -> Result<(), SourceError> {
        if self.rows_in_all.is_some() {
            if self.is_unread() || !self.rows.is_empty() {
                return Err(SourceError::AgentFormWithRows);
            }
            if self.columns.is_empty() {
                return Err(SourceError::NoColumn);
            }
        } else {
            self.check_origin()?;
        }
        if self.len() > MAX_ROWS as u64 {
            return Err(SourceError::TooManyRows { rows: self.len() });
        }
        // Rows are of one width (`Rows` refuses a ragged table): the first one speaks for all.
        if !self.rows.is_empty() && self.rows.width() != self.columns.len() {
            return Err(SourceError::Width {
                row: 0,
                values: self.rows.width(),
                columns: self.columns.len(),
            });
        }
        Ok(())
    }

    /// The number of rows: those inlined, or `rows_in_all` in an agent's form.
    pub fn len(&self) -> u64 {
        self.rows_in_all.map_or(self.rows.len() as u64, u64::from)
    }

    /// True when the source holds no row (yet: `file` or its object is still to be read).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    /// The salt of `order: random` draws for this source in a run seeded with `seed`: two
    /// sources of one run draw differently.
    pub fn random_salt(name: &str, seed: u64) -> u64 {
        seed ^ fnv1a(name.as_bytes()).rotate_left(17)
    }

    /// The pass: `pass[p]` is the row at position `p` (the identity for `sequence`, a
    /// permutation seeded from `seed` and the source's `name` for `shuffle`, so two sources
    /// of one run are shuffled differently).
    pub fn pass(&self, name: &str, seed: u64) -> Vec<u32> {
        let n = u32::try_from(self.len()).unwrap_or(u32::MAX);
        let mut order: Vec<u32> = (0..n).collect();
        if self.order == DataOrder::Shuffle {
            use rand::seq::SliceRandom;
            use rand::SeedableRng;
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&seed.to_le_bytes());
            key[8..16].copy_from_slice(&fnv1a(name.as_bytes()).to_le_bytes());
            key[16..24].copy_from_slice(b"shuffle!");
            order.shuffle(&mut rand_chacha::ChaCha8Rng::from_seed(key));
        }
        order
    }
}

type Table = (Vec<String>, Rows);

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
    let mut rows = Rows::default();
    // One record read into again and again: a row's only lasting cost is its arena's.
    let mut rec = csv::StringRecord::new();
    for i in 1.. {
        let more = r
            .read_record(&mut rec)
            .map_err(|e| DataError::Format(format!("row {i}: {e}")))?;
        if !more {
            break;
        }
        rows.push(rec.iter())
            .map_err(|e| DataError::Format(format!("row {i}: {e}")))?;
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
    let mut rows = Rows::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let obj: BTreeMap<String, serde_json::Value> = serde_json::from_str(line)
            .map_err(|e| DataError::Format(format!("line {}: {e}", i + 1)))?;
        if columns.is_empty() {
            columns = obj.keys().cloned().collect();
        }
        let cells = columns.iter().map(|c| match obj.get(c) {
            None => std::borrow::Cow::Borrowed(""),
            Some(serde_json::Value::String(s)) => std::borrow::Cow::Borrowed(s.as_str()),
            Some(v) => std::borrow::Cow::Owned(v.to_string()),
        });
        rows.push(cells)
            .map_err(|e| DataError::Format(format!("line {}: {e}", i + 1)))?;
        if rows.len() > MAX_ROWS {
            return Err(DataError::Format(format!("more than {MAX_ROWS} rows")));
        }
    }
    Ok((columns, rows))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_and_jsonl_load() {
        let mut d = DataSource::default();
        d.load(b"id,name\n1,\"a, b\"\n2,c\n", false).unwrap();
        assert_eq!(d.columns, ["id", "name"]);
        assert_eq!(d.rows.to_vec(), [vec!["1", "a, b"], vec!["2", "c"]]);
        d.check().unwrap();
        let mut j = DataSource::default();
        j.load(b"{\"id\":1,\"name\":\"x\"}\n\n{\"name\":\"y\"}\n", true)
            .unwrap();
        assert_eq!(j.columns, ["id", "name"]);
        assert_eq!(j.rows.to_vec(), [vec!["1", "x"], vec!["", "y"]]);
        assert!(DataSource::default().load(b"id\n", false).is_err());
        assert!(DataSource::default().load(b"a,b\n1\n", false).is_err());
        assert!(DataSource::default().load(b"{nope\n", true).is_err());
    }

    #[test]
    fn shuffle_is_a_seeded_permutation() {
        let d = DataSource {
            order: DataOrder::Shuffle,
            columns: vec!["x".into()],
            rows: Rows::from_rows((0..100).map(|i| [i.to_string()])).unwrap(),
            ..Default::default()
        };
        let mut a = d.pass("u", 1);
        assert_ne!(a, (0..100).collect::<Vec<_>>());
        assert_eq!(a, d.pass("u", 1));
        assert_ne!(a, d.pass("v", 1));
        assert_ne!(a, d.pass("u", 2));
        a.sort_unstable();
        assert_eq!(a, (0..100).collect::<Vec<_>>());
        let seq = DataSource {
            order: DataOrder::Sequence,
            ..d
        };
        assert_eq!(seq.pass("u", 1), (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn the_agent_form_has_a_count_and_no_rows() {
        let d = DataSource {
            columns: vec!["x".into()],
            rows_in_all: Some(7),
            ..Default::default()
        };
        d.check().unwrap();
        assert_eq!(d.len(), 7);
        let both = DataSource {
            rows: Rows::from_rows([["1"]]).unwrap(),
            ..d.clone()
        };
        assert_eq!(both.check(), Err(SourceError::AgentFormWithRows));
        assert!(both
            .check()
            .unwrap_err()
            .to_string()
            .contains("rows_in_all"));
        let none = DataSource {
            columns: vec![],
            ..d
        };
        assert!(none.check().is_err());
    }
}
