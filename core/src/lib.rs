//! Pure logic of Stampede: the scenario model and validation, the arrival schedule, the
//! sharding plan, the histogram spec/codec/merge, report building and threshold evaluation.
//! No async runtime, no clocks, no sockets.
//!
//! # Layout
//!
//! The scenario and what it asks for:
//! - [`scenario`]: the file model ([`Scenario`], `Step`, `Phase`, `Load`), parsing and the JSON
//!   Schema; `scenario/validate` checks the whole scenario once, every error naming the field
//!   (the run's size bounds in `scenario/validate_bounds`, setup values and data rows in
//!   `scenario/validate_data`);
//!   `scenario/files` resolves what the CLI reads before submission (files, `${env:...}`).
//! - [`target`]: the target URL parsed once (transport, host, port, path prefix, unix path).
//! - [`http`], [`protocol`] (tcp and udp steps), [`grpc`] (unary calls, the response scanner,
//!   the descriptor-free encoding program of a templated message), [`ws`] (WebSocket actions).
//! - [`template`]: `${...}` parsed once into literal segments and typed references;
//!   `template/text` is its text form, `template/render` the filters, times and generators.
//! - [`data`]: CSV and JSON-lines sources, rows bound to a global key; `data/share` says which
//!   agent runs which key and when rows run out.
//! - [`extract`]: extractors and checks on a bounded body; a JSON Pointer read while parsing.
//! - [`duration`], [`yaml_guard`] (YAML aliases bounded before serde expands them).
//!
//! The plan, by arithmetic (no code path walks the whole schedule):
//! - [`schedule`]: uniform and seeded Poisson arrivals, ramps, ticks of `arrival_resolution`.
//! - [`shard`]: which agent owns which arrival. [`workload`]: each workload's schedule, shard
//!   map and start, and the exact weighted session mix.
//! - [`plan`]: planned sessions and requests per agent and phase; the bounds shared by the agent
//!   and the controller (`LATE_START_LIMIT`, `FINISH_MARGIN`).
//! - [`endpoints`]: a target's several addresses, the split over them and their report rows.
//! - [`service`]: `endpoints: service`, the ready pods of a Kubernetes Service from its
//!   EndpointSlices (the Service's name, its port, the ready set and its changes).
//! - [`ports`]: the port budget. [`target_policy`]: which addresses an agent may load.
//!
//! Measuring and reporting:
//! - [`hist`]: the one histogram spec, merge, the V2 codec (`hist/codec`) and `SparseHist`
//!   (`hist/sparse`).
//! - [`stats`]: counters plus histograms, dense for the agent's recorder, sparse for the
//!   controller; `stats/interval` adds the run-wide histograms up from the steps once per interval.
//! - [`report`]: the JSON contract; `report/accumulator` merges intervals in any order
//!   (`RunAccumulator`) and assembles the live and final report.
//! - [`observe`]: the target's own resources from its Prometheus metrics, per interval;
//!   `observe/text` reads the text exposition format.
//! - [`pods`]: the pods behind a cluster target (CPU, throttling, memory, restarts) from the
//!   kubelet's cAdvisor text.
//! - [`samples`]: failure samples (the first few failed requests of each step and error kind),
//!   bounded on the agent and merged by time for the report.
//! - [`threshold`], [`capacity`] (the stair-step search), [`compare`] (two reports, with
//!   bootstrap confidence intervals in `compare/noise`).

#![warn(unreachable_pub, missing_docs)]

pub mod capacity;
pub mod compare;
pub mod data;
pub mod delivery;
pub mod duration;
pub mod endpoints;
pub mod extract;
pub mod grpc;
pub mod hist;
pub mod http;
pub mod multipart;
pub mod observe;
pub mod plan;
pub mod pods;
pub mod ports;
pub mod protocol;
pub mod ramp;
pub mod report;
pub mod samples;
pub mod scenario;
pub mod service;

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
pub mod ws;
pub mod yaml_guard;
