//! Why an agent refuses an `Assign`: one variant per check, each message naming the field of
//! the scenario (or of the assignment) it is about. The controller shows the message to the
//! user as the run's failure, so the wording is the user's.

use stampede_core::scenario::ScenarioError;
use stampede_core::shard::ShardError;
use stampede_core::target_policy::TargetPolicyError;
use stampede_proto::convert::ConvertError;

use crate::dynamic::{HttpCompileError, SendCompileError, WsCompileError};
use crate::grpc::GrpcStepError;
use crate::h2::H2RequestError;
use crate::resolve::ResolveError;
use crate::setup::SetupError;
use crate::stream::RequestError;
use crate::tls::TlsError;

/// An assignment this agent cannot run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AssignError {
    /// The scenario text does not parse or validate.
    #[error("scenario: {0}")]
    Scenario(ScenarioError),
    /// The data rows received do not match the assignment's counts.
    #[error(transparent)]
    Data(#[from] ConvertError),
    /// More shards than any run may have.
    #[error("shard: {count} shards; at most {max}")]
    TooManyShards { count: u32, max: u32 },
    /// The shard's index or weights make no share.
    #[error("shard: {0}")]
    Shard(ShardError),
    /// Environment references left in the scenario: the CLI resolves them.
    #[error(
        "scenario: ${{env:...}} references must be resolved before submission (the CLI does it)"
    )]
    EnvRefs,
    /// The data sources cannot supply the run with this seed.
    #[error(transparent)]
    DataSupply(ScenarioError),
    /// No target for a workload (`field` is `target` or `workloads[N].target`).
    #[error("{field}: is required")]
    NoTarget { field: String },
    /// A socket path on an agent that may not reach the CLI's machine.
    #[error(
        "{field}: unix:// targets only run on agents on the same machine as the CLI (run --local)"
    )]
    UnixTarget { field: String },
    /// The target's name has no address.
    #[error("{field}: {error}{}", source_suffix(.error))]
    Resolve { field: String, error: ResolveError },
    /// A target that is neither a name nor an address.
    #[error("{field}: `{authority}` is not an address")]
    NotAnAddress { field: String, authority: String },
    /// An address of the scenario's target that the target policy refuses (the policy's
    /// message names the target).
    #[error(transparent)]
    Policy(#[from] TargetPolicyError),
    /// An address of a workload's own target that the target policy refuses.
    #[error("{field}: {error}")]
    WorkloadPolicy {
        field: String,
        error: TargetPolicyError,
    },
    /// The TLS client for the target cannot be built.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// An `endpoints:` entry that is not an address.
    #[error("{field}: {why}")]
    Endpoints { field: String, why: String },
    /// An `endpoints:` address the target policy refuses.
    #[error("endpoints[{index}]: {error}")]
    EndpointPolicy {
        index: usize,
        error: TargetPolicyError,
    },
    /// `endpoints:` beside a socket path.
    #[error("endpoints: a unix:// target has one socket path, no addresses")]
    UnixEndpoints,

    #[error("endpoints: the target's Service has no ready endpoint")]
    ServiceEmpty,

    #[error(
        "endpoints: the target policy refuses every ready endpoint of the Service ({addresses})"
    )]
    ServiceRefused { addresses: String },
    /// Setup steps in a scenario whose workloads each name their own target.
    #[error("target: setup steps need the scenario's target")]
    SetupWithoutTarget,
    /// The setup this agent was asked to run failed.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// A step that cannot be compiled.
    #[error(transparent)]
    Step(#[from] Box<StepError>),
    /// More connections than this agent's capacity.
    #[error("load.connections: this agent's share is {share} connections, more than its capacity of {capacity}")]
    Capacity { share: u64, capacity: u32 },
}

/// `: why` for an error with a source (a resolver's reason), nothing otherwise.
fn source_suffix(e: &ResolveError) -> String {
    std::error::Error::source(e).map_or(String::new(), |s| format!(": {s}"))
}

/// A step of a session type that cannot be compiled; `at` is the step's path
/// (`session[2]`), and the message follows it with the field.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StepError {
    /// A streamed reply over HTTP/2, which the agent reads only over HTTP/1.1.
    #[error("{at}.http.stream: streamed replies are read over HTTP/1.1 (http_version: \"1.1\")")]
    StreamOverH2 { at: String },
    #[error("{at}.{error}")]
    Http { at: String, error: HttpCompileError },
    #[error("{at}.http.{error}")]
    H2 { at: String, error: H2RequestError },
    #[error("{at}.tcp.{error}")]
    TcpSend { at: String, error: SendCompileError },
    #[error("{at}.tcp.{error}")]
    Tcp { at: String, error: RequestError },
    #[error("{at}.grpc.{error}")]
    Grpc { at: String, error: GrpcStepError },
    #[error("{at}.{error}")]
    Ws { at: String, error: WsCompileError },
    #[error("{at}.udp.{error}")]
    UdpSend { at: String, error: SendCompileError },
    #[error("{at}.udp.{error}")]
    Udp { at: String, error: RequestError },
    /// More step targets in one workload than a step can index (the scenario's limit is
    /// far lower, so only a scenario the CLI did not check gets here).
    #[error("{at}.target: a workload's steps name more than 255 targets")]
    TooManyTargets { at: String },
}
