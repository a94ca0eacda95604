//! Stampede's gRPC protocol (`package stampede.v1`): generated code, plus the conversions
//! between wire messages and core values. Validation happens here and names the field.
//!
//! # Layout
//!
//! - `v1`: the code generated from `stampede/v1/stampede.proto`.
//! - [`convert`]: wire messages to core values and back, bounded and validated;
//!   `check_progress` checks an agent's Progress against its run before it is merged.
//! - [`samples`]: a Progress's failure samples, bounded and validated.
//! - [`resources`]: an agent's own CPU, memory, files and ports, bounded and validated.
//! - [`connects`]: connect times per stage of a connection ramp.
//! - [`parts`]: an interval too big for one message, split into parts.
//! - [`path`]: a field's path in a message, written out only for an error.
//! - [`service`]: a Kubernetes Service's ready endpoints, sent to agents.
//! - [`data`]: an agent's share of the data sources on the wire.
//! - [`tls`]: the TLS settings the agent and the CLI dial a controller with.

#![warn(unreachable_pub, missing_docs)]

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    tonic::include_proto!("stampede.v1");
}

/// Encoded `FileDescriptorSet` for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/stampede_descriptor.bin"));

pub mod connects;
pub mod convert;
pub mod data;
pub mod parts;
pub mod path;
pub mod resources;
pub mod samples;
pub mod service;
pub mod tls;

pub use convert::ConvertError;
