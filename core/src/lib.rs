//! Pure logic of Stampede: the scenario model and validation, the arrival schedule, the
//! sharding plan, the histogram spec/codec/merge, report building and threshold evaluation.
//! No async runtime, no clocks, no sockets.

pub mod capacity;
pub mod compare;
pub mod data;
pub mod delivery;
pub mod duration;
pub mod extract;
pub mod grpc;
pub mod hist;
pub mod http;
pub mod plan;
pub mod ports;
pub mod protocol;
pub mod ramp;
pub mod report;
pub mod scenario;

pub use duration::HumanDuration;
pub use scenario::{Scenario, ScenarioError};
pub mod schedule;
pub mod shard;
pub mod stats;
pub mod target;
pub mod target_policy;
pub mod template;
pub mod threshold;
pub mod workload;
pub mod yaml_guard;
