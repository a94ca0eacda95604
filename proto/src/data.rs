//! Data shares on the wire. The controller cuts an agent's share of each data source (the
//! rows of the keys it runs, `stampede_core::data::share`) into `DataRows` messages of about
//! [`CHUNK_BYTES`] and sends them before the `Assign`; the agent keeps them, bounded, and
//! checks them against its `Assign` and the scenario. Nothing from the wire is trusted.

use std::collections::BTreeMap;

use stampede_core::data::share::Share;
use stampede_core::data::DataSource;
use stampede_core::scenario::{Scenario, MAX_SCENARIO_BYTES};

use crate::{v1, ConvertError};

/// Bytes of values one `DataRows` message carries before the next one starts (a row is never
/// split, and one row is at most a data file, far below the agents' message limit).
pub const CHUNK_BYTES: usize = 1 << 20;
/// Most bytes of rows an agent keeps before its Assign: every share together is at most the
/// data the scenario carried.
pub const MAX_RECEIVED_BYTES: usize = MAX_SCENARIO_BYTES;

/// The messages of one agent's share of source `name`: the rows at `positions` (ascending)
/// of the pass `pass` (`DataSource::pass`), made as they are sent.
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
            positions: Vec::new(),
            values: Vec::new(),
        };
        let mut bytes = 0;
        while let Some((&p, tail)) = rest.split_first() {
            if bytes >= CHUNK_BYTES {
                break;
            }
            let row = pass
                .get(p as usize)
                .and_then(|&r| source.rows.get(r as usize));
            let Some(row) = row else {
                // Positions come from the pass itself; none is out of range.
                rest = tail;
                continue;
            };
            bytes += row.iter().map(String::len).sum::<usize>() + 4;
            m.positions.push(p);
            m.values.extend(row.iter().cloned());
            rest = tail;
        }
        Some(m)
    })
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
        self.bytes += m.positions.len() * 4 + m.values.iter().map(|v| v.len() + 8).sum::<usize>();
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
                format!("more than {} MiB of rows", MAX_RECEIVED_BYTES >> 20),
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
        for m in chunks {
            let field = format!("data_rows.{}", m.source);
            let (Some(share), Some(d)) = (shares.get_mut(&m.source), scenario.data.get(&m.source))
            else {
                return Err(ConvertError::invalid(
                    "data_rows",
                    format!("`{}` is not a data source of the scenario", m.source),
                ));
            };
            let width = d.columns.len();
            if m.values.len() != m.positions.len() * width {
                return Err(ConvertError::invalid(
                    field,
                    format!(
                        "{} values for {} rows of {width} columns",
                        m.values.len(),
                        m.positions.len()
                    ),
                ));
            }
            for (p, row) in m.positions.iter().zip(m.values.chunks(width.max(1))) {
                share
                    .push(*p, row)
                    .map_err(|why| ConvertError::invalid(&field, why))?;
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
        source.rows = (0..10)
            .map(|i| vec![format!("a{i}"), big.clone()])
            .collect();
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
        });
        for m in msgs.iter().cloned() {
            rx.add(m);
        }
        let shares = rx.take("r", &form, &expected).unwrap();
        let s = &shares["users"];
        assert_eq!(s.len(), 4);
        let row = s.row(4).unwrap();
        assert_eq!(s.cell(row, 0), source.rows[pass[4] as usize][0]);

        // A missing chunk, a wrong count, a foreign source, a bad width: errors naming the field.
        let mut rx = Received::default();
        rx.add(msgs[0].clone());
        let e = rx.take("r", &form, &expected).unwrap_err().to_string();
        assert!(e.starts_with("data_rows.users: "), "{e}");
        let mut rx = Received::default();
        let mut bad = msgs[0].clone();
        bad.values.pop();
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
}
