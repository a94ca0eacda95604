//! An agent lost mid-run: how long one that went away may take to come back, how long its
//! books are awaited, and what the run's agent-loss policy makes of the loss.

use std::time::Duration;

use stampede_core::report::RunAccumulator;
use stampede_core::scenario::AgentLossPolicy;
use tokio::time::Instant;

use super::member::{Books, Member, MemberState};
use super::{Driver, Failure, RunState};

/// Beyond the lease, how long an agent whose stream closed has to reconnect before it counts
/// as lost: its backoff's first retries and a registration.
const REJOIN_MARGIN: Duration = Duration::from_secs(2);

/// How long an agent whose stream closed may take to come back: its lease and restart grace
/// (its load goes on until then) plus time for its backoff and registration.
pub(super) fn away_grace(cfg: &crate::ControllerConfig) -> Duration {
    cfg.lease + cfg.restart_grace + REJOIN_MARGIN
}

/// How long a run waits for the books of an agent lost while its load may still run: the
/// configured wait, else the longest its load can go on and it can take to come back.
pub(super) fn lost_agent_wait(cfg: &crate::ControllerConfig) -> Duration {
    cfg.lost_agent_wait.unwrap_or_else(|| away_grace(cfg))
}

impl Driver {
    /// The run is decided, and waits for a lost agent's last data: its status says so.
    fn await_books_of(&self, m: &Member, msg: &str) {
        if let Some(until) = m.books_awaited() {
            let wait = until
                .saturating_duration_since(Instant::now())
                .as_secs_f64();
            self.h.set_state(
                RunState::Finishing,
                format!("{msg}; waiting up to {wait:.1} s for its last data"),
            );
        }
    }

    /// Counts a member lost, saying why and whether its load may still be running (then its
    /// books are awaited a bounded while), and applies the scenario's `on_agent_loss`: the run
    /// fails and every agent is stopped, or it goes on without that share of the load.
    pub(super) async fn agent_lost(
        &mut self,
        members: &mut [Member],
        acc: &mut RunAccumulator,
        agent_id: &str,
        (why, may_run): (&str, bool),
        failure: &mut Option<Failure>,
        deadline: &mut Instant,
    ) {
        let Some(i) = members.iter().position(|m| m.agent_id == agent_id) else {
            return;
        };
        // An agent whose load may still run keeps the run open for its books, a bounded
        // while; one that said it stopped has delivered them.
        let books = if may_run {
            Books::Awaited {
                until: Instant::now() + lost_agent_wait(&self.inner.cfg),
            }
        } else {
            Books::Complete
        };
        if !members[i].move_to(MemberState::Lost {
            why: why.to_string(),
            books,
        }) {
            return;
        }
        acc.mark_lost(i);
        let share = acc.lost_share() * 100.0;
        tracing::warn!(run = %self.h.run_id, agent = %agent_id, why, share, "agent lost");
        if failure.is_some() {
            return;
        }
        let msg = match self.scenario.on_agent_loss {
            AgentLossPolicy::Fail => {
                format!("agent {agent_id} was lost mid-run ({why}); on_agent_loss is fail")
            }
            AgentLossPolicy::Tolerate(pct) if share > pct => format!("agent {agent_id} was lost mid-run ({why}); {share:.1}% of the load is lost, more than the tolerated {pct}%"),
            AgentLossPolicy::Tolerate(pct) => {
                self.h.set_state(RunState::Running, format!("agent {agent_id} lost ({why}); {share:.1}% of the load lost, within the tolerated {pct}%"));
                self.hand_over_setup(members, i);
                return;
            }
        };
        self.await_books_of(&members[i], &msg);
        self.stop_all(members, Failure::Failed(msg), failure, deadline)
            .await;
    }
}
