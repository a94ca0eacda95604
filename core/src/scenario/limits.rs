//! Bounds on how a run is submitted rather than on what it does: the same check, and so the
//! same message, wherever a value enters (a CLI flag, a gRPC submission, the controller's own
//! settings), so a value a controller would refuse is refused before anything is sent.

use std::time::Duration;

use super::ScenarioError;
use crate::duration::HumanDuration;

/// The longest a submitted run may wait for enough idle agents before it fails. A run
/// waiting holds its scenario and data rows in the controller's memory and a place among the
/// pending runs: an hour covers a cluster scaling its agents from zero many times over.
pub const MAX_AGENT_WAIT: Duration = Duration::from_secs(3600);

/// Largest message an agent sends the controller (a Ready with its setup values, a Progress
/// with its interval histograms): the controller's agent service decodes no more, so every
/// bound on what an agent sends must fit in it.
pub const MAX_AGENT_MESSAGE_BYTES: usize = 4 << 20;

/// Refuses an agent wait longer than `max` (at most [`MAX_AGENT_WAIT`]), naming the field
/// and the limit.
pub fn check_agent_wait(wait: Duration, max: Duration) -> Result<(), ScenarioError> {
    let max = max.min(MAX_AGENT_WAIT);
    if wait > max {
        return Err(ScenarioError::invalid(
            "agent_wait",
            format!(
                "{} is longer than the longest wait for agents allowed, {}",
                HumanDuration(wait),
                HumanDuration(max)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_wait_past_the_maximum_is_refused_naming_the_field_and_the_limit() {
        assert!(check_agent_wait(MAX_AGENT_WAIT, MAX_AGENT_WAIT).is_ok());
        let e = check_agent_wait(Duration::from_secs(7200), MAX_AGENT_WAIT).unwrap_err();
        assert_eq!(e.path(), "agent_wait");
        let text = e.to_string();
        assert!(
            text.contains("agent_wait") && text.contains("3600s"),
            "{text}"
        );
        // A controller's lower setting wins; a higher one is still held to the maximum.
        let e = check_agent_wait(Duration::from_secs(120), Duration::from_secs(60)).unwrap_err();
        assert!(e.to_string().contains("60s"), "{e}");
        assert!(check_agent_wait(Duration::from_secs(7200), Duration::MAX).is_err());
    }
}
