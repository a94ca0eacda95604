//! Integration tests: real servers on loopback sockets bound to port 0.
//!
//! Every test is bounded by [`support::bounded`]; none sleeps to wait for readiness (a listener
//! is bound before the server starts, so connecting right away is always fine).

mod cli;
mod echo;
mod hostile;
mod http;
mod login;
mod prom;
mod streams;
mod support;
