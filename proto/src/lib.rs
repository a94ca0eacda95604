//! Stampede's gRPC protocol (`package stampede.v1`): generated code, plus the conversions
//! between wire messages and core values. Validation happens here and names the field.

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    tonic::include_proto!("stampede.v1");
}

/// Encoded `FileDescriptorSet` for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/stampede_descriptor.bin"));

pub mod convert;
pub mod data;
pub mod tls;

pub use convert::ConvertError;
