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

/// Most distinct values the setup steps may extract. The agent that runs the setup sends
/// them all in its `Ready` (and each refresh), and every agent receives them in its `Start`:
/// at [`crate::extract::MAX_VALUE`] bytes each they stay within [`MAX_SETUP_VALUES_BYTES`],
/// far inside the agent stream's decode limit, so a setup can never lose its agent to an
/// oversized message.
pub const MAX_SETUP_VALUES: usize = 32;

/// Most bytes of setup values, all together: what [`MAX_SETUP_VALUES`] values of the longest
/// extracted length add up to. The agent refuses a setup past it with this limit's name.
pub const MAX_SETUP_VALUES_BYTES: usize = MAX_SETUP_VALUES * crate::extract::MAX_VALUE;

const _: () = assert!(MAX_SETUP_VALUES_BYTES * 2 <= MAX_AGENT_MESSAGE_BYTES);

/// Most requests and answers `stampede run --debug N` prints: the first few of a run say
/// what the target does with them; more is a log, and every one travels through the
/// controller's stream.
pub const MAX_DEBUG: u32 = 100;

/// The refusal of setup values past [`MAX_SETUP_VALUES_BYTES`], the same text where the values
/// are produced and wherever they are received.
pub fn setup_values_too_large(bytes: usize) -> String {
    format!(
        "the values extracted are {bytes} bytes, more than the {} KiB all setup values may hold \
         together (MAX_SETUP_VALUES_BYTES); extract less",
        MAX_SETUP_VALUES_BYTES >> 10
    )
}

/// Most bytes of data rows an agent holds before its Assign, counted as the wire packs them
/// (text, 4 bytes a value and 4 a row): an `order: random` source goes whole to every agent,
/// and a lone agent receives every row, so `validate` counts every source whole.
pub const MAX_AGENT_DATA_BYTES: usize = super::MAX_SCENARIO_BYTES;

/// The refusal of data rows past [`MAX_AGENT_DATA_BYTES`]: the same text from `validate` and
/// from an agent that received them.
pub fn data_rows_too_large() -> String {
    format!(
        "more than {} MiB of rows for one agent (MAX_AGENT_DATA_BYTES: the values, plus 4 bytes \
         a value and 4 a row)",
        MAX_AGENT_DATA_BYTES >> 20
    )
}

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
