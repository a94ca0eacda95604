//! The closed model's connection tasks: sessions back to back, each due when the one before
//! it ended. Apart from the constant model's, as nothing here waits on a rate or a queue.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;

use tokio::time::Instant;

use super::{open_shared, stream_handle};
use crate::runner::session::{session, At, Ended, Http1Path, Inline, Line};
use crate::runner::stop::Stop;
use crate::runner::{Recorder, RunSpec, Tracked};

/// One connection of a closed load: runs the session back to back, keeping the connection
/// between sessions, until `end` (a session running at `end` finishes). `stripe` is the
/// connection's global index and the stride between its sessions' indexes (the number of
/// connections); with a mix, the connection's `k`-th session runs the type at `k` plus the
/// connection's own offset in the table. `P` runs its static HTTP/1.1 exchanges
/// ([`Http1Path`]): boxed in a run without them, so that its held connections are smaller.
#[allow(clippy::manual_async_fn)] // the arguments held once: see the body
pub(in crate::runner) fn closed_connection<P: Http1Path>(
    spec: Arc<RunSpec>,
    rec: Arc<Recorder>,
    t0: Instant,
    end: Instant,
    (index, stride): (u64, u64),
    stop: Stop,
) -> impl Future<Output = ()> {
    // An async block, not an `async fn`: an async fn's future holds its arguments twice (as
    // passed and as moved into its body), and this future exists once per connection for
    // the whole run.
    async move {
        // A stop before `t0` aborts this task like any other time (`execute`).
        let mut sleep = pin!(tokio::time::sleep_until(t0));
        sleep.as_mut().await;
        // The loop inline, not through `closed_loop`: nesting would hold the arguments twice.
        let mut line = Line::new(None, sleep);
        let offset = spec.mix.offset(index, stride);
        let mut own = 0u64;
        let mut now = Instant::now();
        while let Some(at) = next_closed(
            &spec,
            (now, end),
            (index, stride),
            index,
            (offset, own),
            &stop,
        ) {
            match session::<P>(&spec, &rec, at, &stop, &mut line).await {
                Ended::Ran(t) => now = t,
                Ended::Exhausted => break,
            }
            own += 1;
        }
        drop(line);
    }
}

/// The next session of a closed stripe (its `own`-th, with index `first + own × stride`),
/// due `now` (when the one before it ended) and counted as planned when it starts; `None`
/// once `end` has passed or the run stopped.
fn next_closed(
    spec: &RunSpec,
    (now, end): (Instant, Instant),
    (first, stride): (u64, u64),
    connection: u64,
    (offset, own): (u64, u64),
    stop: &Stop,
) -> Option<At> {
    if now >= end || stop.is_stopped() {
        return None;
    }
    Some(At {
        intended: now,
        plan: true,
        phase: spec.phase_base,
        index: first + own * stride,
        connection,
        kind: spec.mix.pick(offset.wrapping_add(own)),
        fresh: true,
    })
}

/// One connection of a closed load carrying `streams` sessions at once (HTTP/2): opened
/// once and counted once; stream `s` of connection `c` of `C` runs the sessions of the
/// virtual stripe `c·streams + s` of `C·streams` (its indexes and its place in the mix),
/// with connection `c`'s data rows. A stream whose connection fails opens one of its own.
pub(in crate::runner) async fn closed_streams(
    spec: Arc<RunSpec>,
    rec: Arc<Recorder>,
    (t0, end): (Instant, Instant),
    (connection, total): (u64, u64),
    streams: u64,
    stop: Stop,
) {
    // A stop before `t0` aborts this task like any other time (`execute`).
    tokio::time::sleep_until(t0).await;
    let link = open_shared(&spec, &rec, connection).await;
    let loops = (0..streams).map(|s| {
        let conn = stream_handle(link.as_ref(), &rec);
        let stripe = (connection * streams + s, total * streams);
        closed_loop(&spec, &rec, (t0, end), stripe, connection, conn, &stop)
    });
    futures::future::join_all(loops).await;
    drop(link);
}

/// The loop of [`closed_connection`]: sessions back to back on `conn` (opened on first use
/// when `None`) until `end`, the `k`-th with index `index + k × stride`.
async fn closed_loop<'a>(
    spec: &RunSpec,
    rec: &'a Recorder,
    (t0, end): (Instant, Instant),
    (index, stride): (u64, u64),
    connection: u64,
    conn: Option<Tracked<'a>>,
    stop: &Stop,
) {
    let sleep = pin!(tokio::time::sleep_until(t0));
    let mut line = Line::new(conn, sleep);
    let offset = spec.mix.offset(index, stride);
    let mut own = 0u64;
    let mut now = Instant::now();
    while let Some(at) = next_closed(
        spec,
        (now, end),
        (index, stride),
        connection,
        (offset, own),
        stop,
    ) {
        match session::<Inline>(spec, rec, at, stop, &mut line).await {
            Ended::Ran(t) => now = t,
            Ended::Exhausted => break,
        }
        own += 1;
    }
    drop(line);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::runner::models::tests::{closing_target, run_to_end, HTTP_OK};

    /// An HTTP/2 (h2c) target on a thread of its own that ends each connection with a GOAWAY
    /// once it has been idle for `idle_close` (`None`: never), counting the connections it
    /// accepted (at most 64).
    fn closing_h2_target(
        idle_close: Option<Duration>,
    ) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                for _ in 0..64 {
                    let Ok((tcp, _)) = listener.accept().await else {
                        return;
                    };
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    // Without it, Nagle holds the answer while the SETTINGS ack before it waits
                    // for the client's delayed ACK: 40 ms a request.
                    tcp.set_nodelay(true).unwrap();
                    tokio::spawn(async move {
                        let Ok(mut conn) = h2::server::handshake(tcp).await else {
                            return;
                        };
                        let forever = Duration::from_secs(3600);
                        loop {
                            let next = conn.accept();
                            match tokio::time::timeout(idle_close.unwrap_or(forever), next).await {
                                Ok(Some(Ok((_, mut respond)))) => {
                                    let ok = http::Response::new(());
                                    let _ = respond.send_response(ok, true);
                                }
                                Ok(_) => return,
                                // Idle for its timeout: a GOAWAY, then the end.
                                Err(_) => {
                                    conn.graceful_shutdown();
                                    while let Some(Ok(_)) = conn.accept().await {}
                                    return;
                                }
                            }
                        }
                    });
                }
            });
        });
        (addr, accepted)
    }

    /// A closed connection sits idle through its sessions' think times, here 100 ms against a
    /// keep-alive timeout of 30 ms: after such a pause it is checked before it is used, and one
    /// the server closed is opened again instead of failing the next request (one still open
    /// is kept). HTTP/1.1, HTTP/2 (whose connection is ended by a GOAWAY) and a raw `tcp://`
    /// stream. Two connections, a request and a think time per session; real sockets and the
    /// real clock, 1 s each. What is asserted holds at any speed: every request completed,
    /// none failed, and a connection opened per session exactly when the server closes idle
    /// ones; the count of sessions is bounded, not judged as a rate.
    #[tokio::test]
    async fn a_closed_connection_the_server_closed_during_a_think_time_is_opened_again() {
        use crate::runner::RunEnd;
        use std::sync::atomic::Ordering;
        let ms = Duration::from_millis;
        let http = "  - http: { path: / }\n";
        let tcp = "  - tcp: { send: { text: hi }, framing: { fixed: 2 } }\n";
        let cases = [
            ("http", "", http, Some(ms(30))),
            ("http", "", http, None),
            ("http", "http_version: \"2\"\n", http, Some(ms(30))),
            ("http", "http_version: \"2\"\n", http, None),
            ("tcp", "", tcp, Some(ms(30))),
            ("tcp", "", tcp, None),
        ];
        for (scheme, version, step, idle_close) in cases {
            let (addr, accepted) = match (scheme, version) {
                ("tcp", _) => closing_target(idle_close, b"ok"),
                (_, "") => closing_target(idle_close, HTTP_OK),
                _ => closing_h2_target(idle_close),
            };
            let scenario = format!(
                "name: think\ntarget: {scheme}://{addr}\n{version}request_timeout: 2s\n\
                 load: {{ model: closed, connections: 2, duration: 1s }}\n\
                 session:\n{step}  - think_time: 100ms\n"
            );
            let run = crate::runner::tests::one_shard(scenario).await;
            let (end, t) = run_to_end(run).await;
            let c = &t.counters;
            let case = format!("{scheme} {version}{idle_close:?}: {c:?}");
            assert_eq!(end, RunEnd::Completed, "{case}");
            assert_eq!(c.requests_failed, 0, "{case}");
            // A connection runs a session (a request and a think time of 100 ms) back to back
            // for 1 s: at most eleven whatever the speed, and at least two however slow the
            // machine, so at least one request followed a think time and its check.
            assert!((4..=22).contains(&c.requests_completed), "{case}");
            let accepted = accepted.load(Ordering::SeqCst) as u64;
            match idle_close {
                // A connection per session: each was closed during the think time before it.
                Some(_) => assert_eq!(accepted, c.requests_completed, "{case}"),
                None => assert_eq!(accepted, 2, "{case}"),
            }
        }
    }
}
