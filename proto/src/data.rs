//! Data shares on the wire. The controller cuts an agent's share of each data source (the
//! rows of the keys it runs, `stampede_core::data::share`) into `DataRows` messages of about
//! [`CHUNK_BYTES`] and sends them before the `Assign`; the agent keeps them, bounded, and
//! checks them against its `Assign` and the scenario. Nothing from the wire is trusted.

use std::collections::BTreeMap;

use stampede_core::data::share::Share;
use stampede_core::data::{DataSource, Rows};
use stampede_core::scenario::Scenario;

use crate::{v1, ConvertError};

/// Bytes of values one `DataRows` message carries before the next one starts (a row is never
/// split, and one row is at most a data file, far below the agents' message limit).
pub const CHUNK_BYTES: usize = 1 << 20;
/// Most bytes of rows an agent keeps before its Assign: every share together is at most the
/// data the scenario carried.
pub const MAX_RECEIVED_BYTES: usize = stampede_core::scenario::MAX_AGENT_DATA_BYTES;

/// The messages of one agent's share of source `name`: the rows at `positions` (ascending)
/// of the pass `pass` (`DataSource::pass`), made as they are sent, their values packed
/// (`cells` and `ends`). A message's budget counts what it costs on the wire and decoded:
/// the values' text, 4 bytes an offset and 4 a position.
pub fn chunks<'a>(
    run_id: &'a str,
    name: &'a str,
    source: &'a DataSource,
    pass: &'a [u32],
    positions: &'a [u32],
) -> impl Iterator<Item = v1::DataRows> + 'a {
    let mut rest = positions;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut m = v1::DataRows {
            run_id: run_id.to_string(),
            source: name.to_string(),
            ..v1::DataRows::default()
        };
        let mut bytes = 0;
        while let Some((&p, tail)) = rest.split_first() {
            if bytes >= CHUNK_BYTES {
                break;
            }
            rest = tail;
            let row = pass
                .get(p as usize)
                .and_then(|&r| source.rows.row(r as usize));
            let Some(row) = row else {
                // Positions come from the pass itself; none is out of range.
                continue;
            };
            let before = m.cells.len();
            for v in row.iter() {
                m.cells.push_str(v);
                // A message is far below 4 GiB: its budget stops it at about CHUNK_BYTES.
                m.ends
                    .push(u32::try_from(m.cells.len()).unwrap_or(u32::MAX));
            }
            bytes += m.cells.len() - before + 4 * row.len() + 4;
            m.positions.push(p);
        }
        Some(m)
    })
}

/// The bytes a received message holds, as [`Received`] counts them against its bound.
fn held_bytes(m: &v1::DataRows) -> usize {
    m.positions.len() * 4
        + m.values.iter().map(|v| v.len() + 8).sum::<usize>()
        + m.cells.len()
        + m.ends.len() * 4
}

/// The rows of `m`, `width` values to a row: its packed `cells` and `ends`, taken out of it and
/// read by [`Rows::from_packed`], which trusts no offset, or, from a controller that sends them
/// apart, its `values`.
fn rows_of(m: &mut v1::DataRows, width: usize, field: &str) -> Result<Rows, ConvertError> {
    let want = m.positions.len().checked_mul(width);
    if !m.values.is_empty() {
        if !m.cells.is_empty() || !m.ends.is_empty() {
            return Err(ConvertError::invalid(
                field,
                "gives values both apart and packed",
            ));
        }
        if want != Some(m.values.len()) {
            return Err(ConvertError::invalid(
                field,
                format!(
                    "{} values for {} rows of {width} columns",
                    m.values.len(),
                    m.positions.len()
                ),
            ));
        }
        // As many values as the rows hold (so `width` is not 0): whole rows only.
        return Rows::from_rows(m.values.chunks(width.max(1)))
            .map_err(|why| ConvertError::invalid(field, why.to_string()));
    }
    if want != Some(m.ends.len()) {
        return Err(ConvertError::invalid(
            field,
            format!(
                "{} values for {} rows of {width} columns",
                m.ends.len(),
                m.positions.len()
            ),
        ));
    }
    let (cells, ends) = (std::mem::take(&mut m.cells), std::mem::take(&mut m.ends));
    Rows::from_packed(cells, ends, width)
        .map_err(|why| ConvertError::invalid(format!("{field}.{}", why.part()), why.to_string()))
}

/// What an agent was told about each source: `DataShare`s of its Assign.
pub fn shares_to_wire(counts: &BTreeMap<String, u64>) -> Vec<v1::DataShare> {
    counts
        .iter()
        .map(|(source, &rows)| v1::DataShare {
            source: source.clone(),
            rows,
        })
        .collect()
}

/// The `DataRows` an agent received for the run it is about to be assigned, bounded.
#[derive(Debug, Default)]
pub struct Received {
    run_id: String,
    chunks: Vec<v1::DataRows>,
    bytes: usize,
    overflow: bool,
}

impl Received {
    /// Keeps `m`; rows of another run than the previous ones start over (a run that was
    /// never assigned leaves nothing behind).
    pub fn add(&mut self, m: v1::DataRows) {
        if m.run_id != self.run_id {
            *self = Self {
                run_id: m.run_id.clone(),
                ..Self::default()
            };
        }
        if self.overflow {
            return;
        }
        self.bytes += held_bytes(&m);
        if self.bytes > MAX_RECEIVED_BYTES {
            self.overflow = true;
            self.chunks = Vec::new();
            return;
        }
        self.chunks.push(m);
    }

    /// The shares of `scenario`'s sources for run `run_id`, checked against the Assign's
    /// counts (`expected`); consumes what was received.
    pub fn take(
        &mut self,
        run_id: &str,
        scenario: &Scenario,
        expected: &[v1::DataShare],
    ) -> Result<BTreeMap<String, Share>, ConvertError> {
        let got = std::mem::take(self);
        if got.overflow && got.run_id == run_id {
            return Err(ConvertError::invalid(
                "data_rows",
                stampede_core::scenario::data_rows_too_large(),
            ));
        }
        let chunks = if got.run_id == run_id {
            got.chunks
        } else {
            Vec::new()
        };
        let mut counts = BTreeMap::new();
        for e in expected {
            if !scenario.data.contains_key(&e.source) {
                return Err(ConvertError::invalid(
                    "assign.data",
                    format!("`{}` is not a data source of the scenario", e.source),
                ));
            }
            if counts.insert(e.source.as_str(), e.rows).is_some() {
                return Err(ConvertError::invalid(
                    "assign.data",
                    format!("`{}` is given twice", e.source),
                ));
            }
        }
        let mut shares: BTreeMap<String, Share> = BTreeMap::new();
        for (name, d) in &scenario.data {
            if !counts.contains_key(name.as_str()) {
                return Err(ConvertError::invalid(
                    "assign.data",
                    format!("no row count for data.{name}"),
                ));
            }
            shares.insert(name.clone(), Share::new(d));
        }
        for mut m in chunks {
            let field = format!("data_rows.{}", m.source);
            let (Some(share), Some(d)) = (shares.get_mut(&m.source), scenario.data.get(&m.source))
            else {
                return Err(ConvertError::invalid(
                    "data_rows",
                    format!("`{}` is not a data source of the scenario", m.source),
                ));
            };
            let width = d.columns.len();
            let rows = rows_of(&mut m, width, &field)?;
            for (p, row) in m.positions.iter().zip(rows.iter()) {
                share
                    .push(*p, row.iter())
                    .map_err(|why| ConvertError::invalid(&field, why.to_string()))?;
            }
        }
        for (name, share) in &shares {
            let want = counts.get(name.as_str()).copied().unwrap_or(0);
            if share.len() as u64 != want {
                return Err(ConvertError::invalid(
                    format!("data_rows.{name}"),
                    format!("{} rows received, the Assign announced {want}", share.len()),
                ));
            }
        }
        Ok(shares)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario() -> Scenario {
        Scenario::from_yaml(
            r#"
name: t
target: http://127.0.0.1:1
phases: [ { duration: 1s, arrival_rate: 1 } ]
data: { users: { on_exhausted: wrap, columns: [a, b], rows: [["x", "y"]] } }
session: [ { http: { path: '/${users.a}' } } ]
"#,
        )
        .unwrap()
    }

    #[test]
    fn a_share_crosses_in_chunks_and_is_checked() {
        let full = scenario();
        let mut source = full.data["users"].clone();
        let big = "v".repeat(400_000);
        source.rows =
            stampede_core::data::Rows::from_rows((0..10).map(|i| [format!("a{i}"), big.clone()]))
                .unwrap();
        let pass = source.pass("users", 1);
        let positions = [1u32, 4, 5, 9];
        let msgs: Vec<_> = chunks("r", "users", &source, &pass, &positions).collect();
        assert_eq!(msgs.len(), 2, "about 1 MiB each");
        assert_eq!(
            msgs[0].positions,
            [1, 4, 5, 9][..4 - msgs[1].positions.len()]
        );
        let mut form = full.clone();
        form.data.insert("users".into(), source.clone());
        let form = form.agent_form();
        let expected = shares_to_wire(&BTreeMap::from([("users".to_string(), 4)]));
        let mut rx = Received::default();
        rx.add(v1::DataRows {
            run_id: "old".into(),
            source: "users".into(),
            positions: vec![0],
            values: vec!["stale".into(), "x".into()],
            ..v1::DataRows::default()
        });
        for m in msgs.iter().cloned() {
            rx.add(m);
        }
        let shares = rx.take("r", &form, &expected).unwrap();
        let s = &shares["users"];
        assert_eq!(s.len(), 4);
        let row = s.row(4).unwrap();
        assert_eq!(
            Some(s.cell(row, 0)),
            source.rows.row(pass[4] as usize).unwrap().get(0)
        );

        // A missing chunk, a wrong count, a foreign source, a bad width: errors naming the field.
        let mut rx = Received::default();
        rx.add(msgs[0].clone());
        let e = rx.take("r", &form, &expected).unwrap_err().to_string();
        assert!(e.starts_with("data_rows.users: "), "{e}");
        let mut rx = Received::default();
        let mut bad = msgs[0].clone();
        bad.ends.pop();
        rx.add(bad);
        let e = rx.take("r", &form, &expected).unwrap_err().to_string();
        assert!(e.contains("values for"), "{e}");
        let e = Received::default()
            .take(
                "r",
                &form,
                &shares_to_wire(&BTreeMap::from([("x".into(), 1)])),
            )
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("assign.data: "), "{e}");
        let mut rx = Received::default();
        let mut back = msgs[1].clone();
        back.positions[0] = 0;
        rx.add(msgs[0].clone());
        rx.add(back);
        let e = rx.take("r", &form, &expected).unwrap_err().to_string();
        assert!(e.contains("does not ascend"), "{e}");
    }

    /// Offsets that point outside the cells, run backwards or split a character are errors
    /// naming the offset; values given apart (as older controllers send them) are still read.
    #[test]
    fn packed_values_are_checked_and_values_apart_still_read() {
        let form = scenario().agent_form();
        let expected = shares_to_wire(&BTreeMap::from([("users".to_string(), 1)]));
        let take = |m: v1::DataRows| {
            let mut rx = Received::default();
            rx.add(m);
            rx.take("r", &form, &expected).map_err(|e| e.to_string())
        };
        let packed = |cells: &str, ends: Vec<u32>| v1::DataRows {
            run_id: "r".into(),
            source: "users".into(),
            positions: vec![0],
            cells: cells.into(),
            ends,
            ..v1::DataRows::default()
        };
        let s = take(packed("xyé", vec![2, 4])).unwrap();
        assert_eq!((s["users"].cell(0, 0), s["users"].cell(0, 1)), ("xy", "é"));
        assert_eq!(
            take(packed("xy", vec![1, 9])).unwrap_err(),
            "data_rows.users.ends[1]: 9 is not the end of a value: the values before end at 1, \
             the cells hold 2 bytes"
        );
        assert!(take(packed("xy", vec![2, 1]))
            .unwrap_err()
            .starts_with("data_rows.users.ends[1]: 1 is not the end"));
        assert!(take(packed("xé", vec![2, 3]))
            .unwrap_err()
            .starts_with("data_rows.users.ends[0]: 2 is not the end"));
        assert_eq!(
            take(packed("xyz", vec![1, 2])).unwrap_err(),
            "data_rows.users.cells: 3 bytes, of which the values take 2"
        );
        assert_eq!(
            take(packed("xy", vec![1, 2, 2])).unwrap_err(),
            "data_rows.users: 3 values for 1 rows of 2 columns"
        );
        let apart = v1::DataRows {
            values: vec!["a".into(), "b".into()],
            ..packed("", vec![])
        };
        let s = take(apart.clone()).unwrap();
        assert_eq!((s["users"].cell(0, 0), s["users"].cell(0, 1)), ("a", "b"));
        let both = v1::DataRows {
            cells: "ab".into(),
            ends: vec![1, 2],
            ..apart
        };
        assert_eq!(
            take(both).unwrap_err(),
            "data_rows.users: gives values both apart and packed"
        );
    }
}
