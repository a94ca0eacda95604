//! Each agent's share of the scenario's data sources (`stampede_core::data::share`): the rows
//! of the keys it runs, computed from the exact sharding and sent as `DataRows` messages of
//! about 1 MiB before its Assign. No agent receives the whole file (unless `wrap` makes it
//! meet every row).

use std::collections::BTreeMap;
use std::sync::Arc;

use stampede_core::data::{DataSource, Keys};
use stampede_core::scenario::Scenario;
use stampede_core::shard::{ShardError, ShardMap};
use stampede_proto::v1;
use tokio::sync::mpsc;

type AgentTx = mpsc::Sender<Result<v1::ControllerMessage, tonic::Status>>;

/// Why a run's data cannot be cut into shares.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SharesError {
    /// The run's agents admit no shard map (the planner refuses the same run first).
    #[error("plan: {0}")]
    Plan(ShardError),
    /// A source arrived without its rows: only a scenario as the CLI or the LoadTest
    /// reconciler submits it carries them.
    #[error("data.{name}: has no rows (the CLI inlines the file's rows when it submits)")]
    NoRows {
        /// The source's name.
        name: String,
    },
}

/// The run's data sources, ready to be cut into shares. Cloning shares them; their rows are
/// an arena shared with the run's scenario (`stampede_core::data::Rows`), never copied.
#[derive(Clone)]
pub(crate) struct Shares(Arc<Inner>);

struct Inner {
    sources: BTreeMap<String, DataSource>,
    /// Per source: its keys and its pass (the row at each position).
    plans: Vec<(String, Keys, Vec<u32>)>,
}

impl Shares {
    /// The sources of `scenario` for a run of `agents` agents seeded with `seed`. A source
    /// without its rows (a scenario in the agents' form) is refused.
    pub(crate) fn new(scenario: &Scenario, agents: u32, seed: u64) -> Result<Self, SharesError> {
        let map = ShardMap::new(agents, &[]).map_err(SharesError::Plan)?;
        let mut plans = Vec::with_capacity(scenario.data.len());
        for (name, d) in &scenario.data {
            if d.rows.is_empty() {
                return Err(SharesError::NoRows { name: name.clone() });
            }
            plans.push((
                name.clone(),
                Keys::new(scenario, name, d, seed, &map),
                d.pass(name, seed),
            ));
        }
        Ok(Self(Arc::new(Inner {
            sources: scenario.data.clone(),
            plans,
        })))
    }

    /// Sends agent `agent`'s rows of every source over `tx` and returns the row counts its
    /// Assign announces. A stream that is gone is noticed by the caller, which waits for the
    /// agent's Ready.
    pub(crate) async fn send(&self, run_id: &str, agent: u32, tx: &AgentTx) -> Vec<v1::DataShare> {
        if self.0.plans.is_empty() {
            return Vec::new();
        }
        // Computing the positions costs time in proportion to the agent's rows, so it runs on a
        // blocking thread rather than holding a runtime worker.
        let inner = self.0.clone();
        let positions: Vec<Vec<u32>> = tokio::task::spawn_blocking(move || {
            inner
                .plans
                .iter()
                .map(|(name, keys, _)| keys.positions(&inner.sources[name], agent))
                .collect()
        })
        .await
        .unwrap_or_default();
        let mut counts = BTreeMap::new();
        for ((name, _, pass), positions) in self.0.plans.iter().zip(&positions) {
            counts.insert(name.clone(), positions.len() as u64);
            let source = &self.0.sources[name];
            for m in stampede_proto::data::chunks(run_id, name, source, pass, positions) {
                let msg = v1::ControllerMessage {
                    msg: Some(v1::controller_message::Msg::DataRows(m)),
                };
                if tx.send(Ok(msg)).await.is_err() {
                    break;
                }
            }
        }
        stampede_proto::data::shares_to_wire(&counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// What each of three agents is sent: disjoint shares whose union is every row once, in
    /// messages of at most about 1 MiB, announced by the counts of its Assign.
    #[tokio::test]
    async fn each_agent_is_sent_only_its_rows() {
        let rows: String = (0..3000)
            .map(|i| format!("[\"{i}\", \"{}\"],", "x".repeat(1100)))
            .collect();
        let scenario = Scenario::from_yaml(&format!(
            r#"
name: t
target: http://127.0.0.1:1
seed: 5
phases: [ {{ duration: 10s, arrival_rate: 300 }} ]
data: {{ users: {{ order: shuffle, columns: [id, pad], rows: [{}] }} }}
session: [ {{ http: {{ path: '/${{users.id}}' }} }} ]
"#,
            rows.trim_end_matches(',')
        ))
        .unwrap();
        let shares = Shares::new(&scenario, 3, 5).unwrap();
        let mut seen = BTreeSet::new();
        for agent in 0..3 {
            let (tx, mut rx) = mpsc::channel(64);
            let counts = tokio::spawn({
                let shares = shares.clone();
                async move { shares.send("r", agent, &tx).await }
            });
            let mut got = 0;
            let mut messages = 0;
            while let Some(Ok(m)) = rx.recv().await {
                let Some(v1::controller_message::Msg::DataRows(d)) = m.msg else {
                    panic!("not rows");
                };
                assert!(d.values.is_empty(), "values are sent packed");
                let bytes = d.cells.len() + d.ends.len() * 4;
                assert!(bytes < 1_100_000, "{bytes} bytes in one message");
                assert!(d.positions.iter().all(|p| *p < 3000));
                let positions = d.positions.len();
                let rows = stampede_core::data::Rows::from_packed(d.cells, d.ends, 2).unwrap();
                assert_eq!(rows.len(), positions);
                for row in rows.iter() {
                    let id = row.get(0).unwrap();
                    assert!(seen.insert(id.to_string()), "row {id} sent twice");
                }
                got += positions as u64;
                messages += 1;
            }
            let counts = counts.await.unwrap();
            assert_eq!(counts.len(), 1);
            assert_eq!((counts[0].source.as_str(), counts[0].rows), ("users", got));
            assert_eq!(got, 1000);
            assert!(messages >= 2, "a 1 MiB share needs more than one message");
        }
        assert_eq!(seen.len(), 3000);
        let form = scenario.agent_form();
        let Err(e) = Shares::new(&form, 3, 5) else {
            panic!("the agents' form was taken");
        };
        assert_eq!(
            e,
            SharesError::NoRows {
                name: "users".into()
            }
        );
        assert!(e.to_string().starts_with("data.users: has no rows"), "{e}");
        assert_eq!(
            Shares::new(&scenario, 0, 5).err().map(|e| e.to_string()),
            Some(format!("plan: {}", ShardError::NoShards))
        );
    }
}
