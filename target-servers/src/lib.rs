//! Target servers that Stampede capacity tests run against.
//!
//! * [`http`]: an HTTP/1.1 and HTTP/2 server (h2c, or over TLS with [`tls`]) with CPU-work, delay,
//!   payload-size and echo routes, Prometheus metrics on `/metrics`, and `/healthz` / `/readyz`.
//! * [`login`]: a raw-TCP request/response login service (length-delimited JSON frames, see the crate
//!   README for the wire format).
//! * [`echo`]: ping-pong servers over TCP (length- or newline-delimited), UDP and Unix sockets.
//! * [`grpc`]: a gRPC server (unary `Echo`, with chosen failures, and a CPU-cost `Work`) with
//!   server reflection.
//! * [`metrics`]: the stand-alone `/metrics` endpoint used by the TCP and UDP servers.
//! * [`cli`]: the `stampede target <kind>` subcommands ([`TargetCommand`]).
//!
//! Every server takes an already bound listener and a shutdown future, so tests bind `127.0.0.1:0`.
//! On shutdown a server stops accepting, lets open connections finish their current request for a
//! bounded grace period, then drops whatever is left. No input read from the network can make a
//! server panic: malformed or oversized input closes that connection (or answers 4xx over HTTP)
//! and increments an error counter.

#![warn(unreachable_pub, missing_docs)]

pub mod cli;
mod common;
pub mod echo;
mod error;
pub mod frame;
mod framed;
#[doc(hidden)]
pub mod fuzzing;
pub mod grpc;
pub mod http;
pub mod login;
pub mod metrics;
mod precise;
mod process;
pub mod tls;
mod work;

pub use cli::TargetCommand;
pub use error::TargetError;
