//! The connection tasks of the closed and constant models: each runs its sessions back to
//! back on one connection (closed) or takes the next due slot from the pool's queue
//! (constant), alone or as several HTTP/2 streams on one shared connection, for the whole run
//! or, on a ramp, over the spans its rank is open. They live for the whole run and do not
//! wait on the stop: `execute` aborts them.
//!
//! The closed model's tasks are in `closed`, the constant model's in `constant`, and its slot
//! queue's bound and cutoff in `queue`; here is the connection several streams share, which
//! both models open.

use tokio::time::Instant;

use super::{Link, Recorder, RunSpec, Tracked};
use crate::net::NO_ENDPOINT;

mod closed;
mod constant;
mod queue;
#[cfg(test)]
mod tests;

pub(super) use closed::{closed_connection, closed_streams};
pub(super) use constant::{
    pooled_connection, pooled_streams, ramped_pooled_connection, ticked_pool,
};
pub(super) use queue::{drop_queued, end_queue_at, enqueue, late_start_cutoff, MAX_QUEUED_SLOTS};

/// Opens the connection that several streams share, counted once; `None` when it cannot be
/// opened now (each stream then opens its own, and its session records why).
async fn open_shared<'a>(
    spec: &RunSpec,
    rec: &'a Recorder,
    connection: u64,
) -> Option<Tracked<'a>> {
    let endpoint = spec.endpoint_index(connection);
    let target = spec.endpoint(&endpoint);
    let began = Instant::now();
    let link = tokio::time::timeout(spec.request_timeout, Box::pin(Link::open(target, spec.h2)))
        .await
        .ok()?
        .ok()?;
    rec.connects.record(began, Instant::now());
    rec.endpoints.opened(&endpoint);
    let mut tracked = rec.connections.track(link);
    tracked.endpoint = endpoint.as_ref().map_or(NO_ENDPOINT, |s| s.id);
    Some(tracked)
}

/// A handle for one stream on the shared connection `link` (not counted again); `None`
/// when there is none, and the stream then opens a connection of its own.
fn stream_handle<'a>(link: Option<&Tracked<'a>>, rec: &'a Recorder) -> Option<Tracked<'a>> {
    link.and_then(|l| Some((l.conn.share()?, l.endpoint)))
        .map(|(l, endpoint)| {
            let mut handle = rec.connections.shared(l);
            handle.endpoint = endpoint;
            handle
        })
}
