//! The refreshed setup values of a run (`setup_refresh`): one member refreshes them, the
//! controller checks and checkpoints them, then hands them to every other member, and another
//! member takes the refresh over when that one is lost.

use stampede_proto::v1::{self, controller_message::Msg as Out};

use super::member::Member;
use super::Driver;

impl Driver {
    /// Refreshed setup values: taken only from the agent that refreshes the setup (the first
    /// member, or the one that took over from it), newer than the ones held and fitting the
    /// scenario. Returns whether they were taken; values are never logged.
    pub(super) fn take_setup(
        &mut self,
        members: &[Member],
        from: &str,
        v: v1::SetupValues,
    ) -> bool {
        if members
            .get(self.setup_agent)
            .is_none_or(|m| m.agent_id != from)
        {
            tracing::warn!(run = %self.h.run_id, agent = %from, "setup values from an agent that does not run the setup; ignored");
            return false;
        }
        if v.generation <= self.setup.generation {
            return false;
        }
        if let Err(why) = self.check_setup_values(&v.values) {
            tracing::warn!(run = %self.h.run_id, agent = %from, "refreshed setup values refused: {why}");
            return false;
        }
        self.setup = v;
        tracing::info!(run = %self.h.run_id, generation = self.setup.generation, "setup values refreshed");
        true
    }

    /// Hands the setup values held to every agent still running but the one that refreshes
    /// them. Called once they are in the checkpoint: no agent may hold a generation that a
    /// controller restarted on the data directory does not know (it would hand an older one
    /// on, and a take-over would reuse the generation number for other values).
    pub(super) fn pass_on_setup(&self, members: &[Member]) {
        let others = members
            .iter()
            .enumerate()
            .filter(|(i, m)| *i != self.setup_agent && m.pending());
        for (_, m) in others {
            let msg = v1::ControllerMessage {
                msg: Some(Out::SetupValues(self.setup.clone())),
            };
            if m.tx.try_send(Ok(msg)).is_err() {
                tracing::warn!(run = %self.h.run_id, agent = %m.agent_id, "could not pass on refreshed setup values");
            }
        }
    }

    /// The agent that refreshes the setup is lost or away and the run goes on: another member still
    /// running (one whose stream is up, if any) takes the refresh over, so the others' values
    /// (tokens that expire) do not go stale for the rest of the run.
    pub(super) fn hand_over_setup(&mut self, members: &[Member], lost: usize) {
        if lost != self.setup_agent || self.scenario.setup_refresh.is_none() {
            return;
        }
        let Some(next) = members
            .iter()
            .position(|m| m.pending() && m.away_until().is_none())
            .or_else(|| members.iter().position(Member::pending))
        else {
            return;
        };
        let take = v1::TakeOverSetup {
            run_id: self.h.run_id.clone(),
            generation: self.setup.generation,
        };
        let msg = v1::ControllerMessage {
            msg: Some(Out::TakeOverSetup(take)),
        };
        if members[next].tx.try_send(Ok(msg)).is_err() {
            tracing::warn!(run = %self.h.run_id, agent = %members[next].agent_id, "could not hand the setup refresh over");
            return;
        }
        self.setup_agent = next;
        tracing::warn!(run = %self.h.run_id, agent = %members[next].agent_id, "the setup agent is lost or away; this agent refreshes the setup now");
    }
}
