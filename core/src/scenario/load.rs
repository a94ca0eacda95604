//! The load a scenario asks for: arrival phases (open model) or a held pool of connections
//! (closed and constant-rate models).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::HumanDuration;

/// The arrival process within a phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalProcess {
    /// Evenly spaced arrivals following the (possibly ramping) rate.
    #[default]
    Uniform,
    /// A (non-homogeneous) Poisson process with the phase's rate.
    Poisson,
}

/// One arrival phase: a duration and a rate, optionally ramping linearly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// Names the phase in the report and in thresholds (`phase(NAME).p99 < 50ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// How long the phase's arrivals go on; phases run back to back from T0.
    pub duration: HumanDuration,
    /// New sessions per second, for the whole test (all agents together), at the phase start.
    pub arrival_rate: f64,
    /// If set, the rate ramps linearly to this value by the end of the phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_to: Option<f64>,
    /// A warm-up: the phase runs and is reported in its own row, but is left out of the
    /// headline figures, the default error verdict, thresholds without a `phase()` scope and
    /// `compare` (caches, JITs and connection pools warming up are not the service's
    /// steady state).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warmup: bool,
}

impl Phase {
    /// Rate at the end of the phase.
    pub fn end_rate(&self) -> f64 {
        self.ramp_to.unwrap_or(self.arrival_rate)
    }
    /// Expected number of arrivals: the integral of the rate over the phase.
    pub fn expected_arrivals(&self) -> f64 {
        (self.arrival_rate + self.end_rate()) / 2.0 * self.duration.as_secs_f64()
    }
    /// The phase's display name: its `name`, or `phase-N` (1-based).
    pub fn display_name(&self, index: usize) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("phase-{}", index + 1))
    }
}

/// Which load model a [`Load`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LoadModel {
    /// `connections` connections, each running the session's steps back to back in a loop
    /// for `duration` (wrk `-c`). There is no schedule: the planned count is what was started.
    Closed,
    /// `rate` sessions per second in total, on a uniform schedule, over a pool of
    /// `connections` connections (wrk2 `-R`). Each slot runs the whole session over a pooled
    /// connection; a one-request session is one request per slot. When every connection is
    /// busy a due slot waits, and the wait counts in its response time.
    Constant,
}

/// A closed or constant-rate load: `{ model: closed, connections: N, duration: D }` or
/// `{ model: constant, rate: R, connections: N, duration: D }`, or either with a ramp of
/// connections: `{ model: closed, stages: [{ connections: N, duration: D }, ...] }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Load {
    /// Closed (a pool of connections looping sessions) or constant-rate over a pool.
    pub model: LoadModel,
    /// Connections, all agents together (split across agents, counts differing by at most 1).
    /// With `stages`, the most the ramp holds (filled in from them).
    #[serde(default)]
    pub connections: u32,
    /// With `stages`, their total (filled in from them).
    #[serde(default)]
    pub duration: HumanDuration,
    /// A ramp of connections instead of `connections` and `duration`, each stage moving the
    /// open connections linearly from the level before it (0 at T0) to its own over its
    /// duration; connects are paced to the slope and dealt round-robin over the agents (see
    /// `ramp`). A constant-rate load keeps its rate over the whole ramp: its slots are
    /// served by whichever connections are open, and wait (late) while the pool is small.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<crate::ramp::Stage>,
    /// Constant model only: sessions (slots) per second, all agents together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// HTTP/2 and gRPC targets: sessions in flight at once on each connection, each on its
    /// own streams (default 1), as real gRPC clients load a server: `connections: 10,
    /// streams_per_connection: 8` keeps 80 sessions going over 10 connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams_per_connection: Option<u32>,
}

/// Most streams per connection a load may ask for.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 1_000;

impl Load {
    /// Sessions in flight at once on each connection (1 unless `streams_per_connection`).
    pub fn streams(&self) -> u32 {
        self.streams_per_connection.unwrap_or(1).max(1)
    }
}

impl Load {
    /// The single synthetic phase the schedule, the plan and the report use for this load:
    /// named after the model; rate 0 (no schedule) for closed, `rate` for constant.
    pub fn as_phase(&self) -> Phase {
        let (name, rate) = match self.model {
            LoadModel::Closed => ("closed", 0.0),
            LoadModel::Constant => ("constant", self.rate.unwrap_or(0.0)),
        };
        Phase {
            name: Some(name.to_string()),
            duration: self.duration,
            arrival_rate: rate,
            ramp_to: None,
            warmup: false,
        }
    }
}
