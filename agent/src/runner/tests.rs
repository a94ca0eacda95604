//! The runner's unit tests, and the shards (`one_shard`, `shard`) its other tests run: in a
//! file of their own so `runner.rs` holds only the run.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::models::enqueue;
use super::recorder::InFlight;
use super::{empty_buffers, final_interval, progress, Recorder};
use crate::pool::SlotQueue;

/// The whole of `scenario` prepared as this agent's one shard, as an `Assign` would.
pub(super) async fn one_shard(scenario: String) -> super::ShardRun {
    shard(&scenario, 0, 1).await
}

/// Shard `index` of `count` of `scenario`, as an `Assign` would prepare it.
pub(super) async fn shard(scenario: &str, index: u32, count: u32) -> super::ShardRun {
    let assign = stampede_proto::v1::Assign {
        run_id: "r".into(),
        scenario: scenario.to_string(),
        shard_index: index,
        shard_count: count,
        seed: 1,
        interval_ms: 1000,
        ..Default::default()
    };
    let cfg = crate::AgentConfig::new("http://127.0.0.1:1", "a");
    crate::assign::prepare(&cfg, &assign, Default::default())
        .await
        .unwrap()
}

/// A stop ends a closed, a constant or an open load at once while every request hangs:
/// the connection tasks of the first two, which do not wait on the stop themselves, are
/// aborted, and open-model sessions wait on it once each, rather than being left to the
/// request timeout. The target accepts four connections, reads a request on
/// each and never answers (a blocking thread, which holds the paused clock still).
#[tokio::test(start_paused = true)]
async fn a_stop_ends_hanging_connections_at_once() {
    use super::{execute, RunEnd};
    use stampede_proto::v1;
    use std::io::Read;
    use tokio::time::Instant;
    for load in [
        "load: { model: closed, connections: 4, duration: 30s }",
        "load: { model: constant, rate: 50, connections: 4, duration: 30s }",
        "phases: [{ duration: 30s, arrival_rate: 50 }]",
    ] {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let held = tokio::task::spawn_blocking(move || {
            (0..4)
                .map(|_| {
                    let (mut s, _) = listener.accept().unwrap();
                    let mut request = [0u8; 16];
                    s.read_exact(&mut request).unwrap();
                    s
                })
                .collect::<Vec<_>>()
        });
        let scenario = format!(
            "name: hang\ntarget: http://{addr}\nrequest_timeout: 60s\ngraceful_stop: 0s\n{load}\n\
             session:\n  - http: {{ path: / }}\n"
        );
        let run = one_shard(scenario).await;
        let (out, mut messages) = tokio::sync::mpsc::unbounded_channel();
        let stop = tokio_util::sync::CancellationToken::new();
        let run = tokio::spawn(execute(Arc::new(run), Instant::now(), out, stop.clone()));
        let held = held.await.unwrap();
        let stopped = Instant::now();
        stop.cancel();
        assert_eq!(run.await.unwrap(), RunEnd::Stopped, "{load}");
        assert!(
            stopped.elapsed() < Duration::from_millis(100),
            "{load}: stopped after {:?}",
            stopped.elapsed()
        );
        // Four requests were in flight, and none of them ended: with `graceful_stop: 0s`
        // they are counted interrupted at once.
        let (mut started, mut ended, mut interrupted) = (0, 0, 0);
        while let Ok(m) = messages.try_recv() {
            if let Some(v1::agent_message::Msg::Progress(p)) = m.msg {
                for ph in &p.samples {
                    let c = ph.counters.as_ref().unwrap();
                    started += c.requests_started;
                    ended += c.requests_completed + c.requests_failed;
                    interrupted += c.requests_interrupted;
                }
            }
        }
        // Open-model sessions go on arriving while the target holds the first four.
        assert!(
            started >= 4 && ended == 0 && interrupted == started,
            "{load}: {started} started, {ended} ended, {interrupted} interrupted"
        );
        drop(held);
    }
}

/// A closed session is counted as planned and started in the lock its first request's
/// start takes, and as ended in the lock its last result takes: two recorder locks per
/// request, with the same counts as before. The target answers three sessions of two
/// requests (`/a`, then `/b`) on one kept-alive connection, 200 200, 200 500, 500, then
/// holds the fourth session's first request until the run stops.
#[tokio::test(start_paused = true)]
async fn closed_sessions_are_counted_in_the_locks_of_their_requests() {
    use super::execute;
    use stampede_proto::v1;
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let held = tokio::task::spawn_blocking(move || {
        let (s, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(s.try_clone().unwrap());
        let mut out = s;
        for status in [200, 200, 200, 500, 500, 0] {
            // A request without a body: its head ends at the empty line.
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap() > 0 && !line.ends_with("\r\n\r\n") {}
            if status == 0 {
                break;
            }
            write!(out, "HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n").unwrap();
        }
        out
    });
    let scenario = format!(
        "name: count\ntarget: http://{addr}\nrequest_timeout: 60s\n\
         load: {{ model: closed, connections: 1, duration: 30s }}\n\
         session:\n  - http: {{ path: /a }}\n  - http: {{ path: /b }}\n"
    );
    let run = one_shard(scenario).await;
    let (out, mut messages) = tokio::sync::mpsc::unbounded_channel();
    let stop = tokio_util::sync::CancellationToken::new();
    super::recorder::TAKES.with(|t| t.set(0));
    let task = tokio::spawn(execute(
        Arc::new(run),
        tokio::time::Instant::now(),
        out,
        stop.clone(),
    ));
    let held = held.await.unwrap();
    stop.cancel();
    task.await.unwrap();
    let mut c = v1::Counters::default();
    while let Ok(m) = messages.try_recv() {
        if let Some(v1::agent_message::Msg::Progress(p)) = m.msg {
            for s in p.samples {
                let s = s.counters.unwrap();
                c.sessions_planned += s.sessions_planned;
                c.sessions_started += s.sessions_started;
                c.sessions_completed += s.sessions_completed;
                c.sessions_failed += s.sessions_failed;
                c.requests_started += s.requests_started;
                c.requests_completed += s.requests_completed;
                c.requests_failed += s.requests_failed;
                c.requests_interrupted += s.requests_interrupted;
                c.sessions_interrupted += s.sessions_interrupted;
            }
        }
    }
    let counts = [
        c.sessions_planned,
        c.sessions_started,
        c.sessions_completed,
        c.sessions_failed,
        c.requests_started,
        c.requests_completed,
        c.requests_failed,
    ];
    assert_eq!(counts, [4, 4, 1, 2, 6, 3, 2]);
    // The hanging one is interrupted once the graceful stop (the request timeout, at most
    // 5 s) is over, with its session.
    assert_eq!((c.requests_interrupted, c.sessions_interrupted), (1, 1));
    // Five requests ended (two locks each) and one hangs (its start's lock, and its
    // interruption's).
    assert_eq!(super::recorder::TAKES.with(|t| t.get()), 12);
    drop(held);
}

/// A think time drawn from a range depends on the run seed and the arrival index only:
/// a rerun pauses the same, whatever ran before.
#[tokio::test(start_paused = true)]
async fn think_times_are_drawn_from_the_seed_and_the_arrival() {
    use stampede_core::scenario::ThinkTime;
    use stampede_core::HumanDuration;
    let t = ThinkTime::Range {
        min: HumanDuration(Duration::from_secs(1)),
        max: HumanDuration(Duration::from_secs(3)),
    };
    let stop = super::stop::Stop::default();
    let sleep = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
    let mut timer = super::deadline::RequestTimer::new(sleep);
    let mut pauses = Vec::new();
    for (seed, index) in [(7, 3), (7, 3), (7, 4), (8, 3)] {
        let mut draws = 0;
        // The session's second think time continues its stream; each pause is the one drawn.
        let mut pair = [Duration::ZERO; 2];
        for d in &mut pair {
            *d = super::session::think_time(&t, &mut draws, (seed, index));
            let from = tokio::time::Instant::now();
            assert!(timer.pause(from + *d, &stop).await);
            // The timer's resolution is a millisecond.
            let paused = from.elapsed();
            assert!(
                paused >= *d && paused <= *d + Duration::from_millis(1),
                "{paused:?}"
            );
        }
        pauses.push((pair[0], pair[1]));
    }
    assert_eq!(pauses[0], pauses[1]);
    assert_ne!(pauses[0], pauses[2]);
    assert_ne!(pauses[0], pauses[3]);
    assert_ne!(pauses[0].0, pauses[0].1);
    for (a, b) in pauses {
        for d in [a, b] {
            assert!(
                d >= Duration::from_secs(1) && d <= Duration::from_secs(3),
                "{d:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_panicking_session_gives_its_in_flight_slot_back() {
    let rec = Arc::new(Recorder::new(1, 1));
    rec.in_flight.fetch_add(1, Ordering::Relaxed);
    let r = rec.clone();
    let task = tokio::spawn(async move {
        let _slot = InFlight(&r);
        panic!("a session bug");
    });
    assert!(task.await.unwrap_err().is_panic());
    assert_eq!(rec.in_flight.load(Ordering::Relaxed), 0);
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// A run of 100 phases × 20 request steps: only the phases that record hold an `IntervalStats`
/// (each is 43 dense histograms, 7.7 MiB), and they are freed after their last flush,
/// so the recorder holds at most three phases per buffer (the running one, the previous
/// one finishing, one awaiting its freeing flush), not 100 × 2 × 7.7 MiB = 1.5 GiB.
#[test]
fn the_recorder_allocates_only_phases_that_record() {
    let (phases, steps) = (100, 20);
    // Reset the peak RSS so VmHWM measures this test (best effort; other tests are small).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = vm_hwm_kib();
    let rec = Recorder::new(phases, steps);
    let mut spare = empty_buffers(phases);
    let mut most = 0;
    let mut sent = 0u64;
    for phase in 0..phases as u32 {
        for interval in 0..2u64 {
            for i in 0..400u64 {
                rec.with(phase, |s| {
                    s.record_start(50 + i);
                    s.record_success((i % 20) as usize, 1_000 + i * 37, 900 + i * 31);
                });
            }
            if phase > 0 && interval == 0 {
                // A session of the previous phase still finishing.
                rec.with(phase - 1, |s| s.record_success(0, 5_000, 4_000));
            }
            most = most.max(rec.allocated());
            rec.swap(&mut spare);
            let msg = progress("r", u64::from(phase) * 2 + interval, &mut spare, 0, None);
            if let Some(stampede_proto::v1::agent_message::Msg::Progress(p)) = msg.msg {
                sent += p.samples.len() as u64;
            }
        }
    }
    rec.swap(&mut spare);
    let _ = progress("r", 999, &mut spare, 0, None);
    rec.swap(&mut spare);
    let _ = progress("r", 1000, &mut spare, 0, None);
    assert!(most <= 3, "{most} phases allocated at once");
    assert_eq!(rec.allocated(), 0);
    assert!(spare.iter().all(Option::is_none));
    assert_eq!(sent, 100 * 2 + 99);
    let peak_mib = vm_hwm_kib().saturating_sub(before.min(vm_hwm_kib())) / 1024;
    let hwm_mib = vm_hwm_kib() / 1024;
    eprintln!("recorder 100 phases x 20 steps: VmHWM {hwm_mib} MiB (+{peak_mib} MiB)");
    assert!(hwm_mib < 200, "VmHWM {hwm_mib} MiB");
}

/// A full slot queue refuses (the caller counts the slot dropped) and the warning fires
/// once; a closed one refuses too.
#[test]
fn a_refused_slot_is_reported_dropped() {
    let slots = SlotQueue::new(4);
    let mut warned = false;
    let slot = (tokio::time::Instant::now(), 0, 0, 0);
    let taken = (0..10)
        .filter(|_| enqueue(&slots, slot, &mut warned))
        .count();
    assert_eq!(taken, 4);
    assert!(warned);
    slots.close();
    assert!(!enqueue(&slots, slot, &mut warned));
}

/// A request asks the server to close exactly when the request after it on the same
/// session loop opens a new connection (think times in between do not count).
#[test]
fn the_last_request_on_a_connection_is_known() {
    use super::session::last_on_connection;
    use super::StepPlan;
    use stampede_core::scenario::ThinkTime;
    use stampede_core::HumanDuration;
    let req = stampede_core::scenario::HttpRequest::default();
    let http = |new_connection| StepPlan::Http {
        ordinal: 0,
        request: crate::http1::PreparedRequest::new(&req, "h", ""),
        h2: None,
        expect: None,
        repeat: 1,
        new_connection,
        via: None,
    };
    let think = || StepPlan::Think(ThinkTime::Fixed(HumanDuration(Duration::from_secs(1))));
    // One step with a connection per request: every request is the last.
    let steps = [http(true)];
    assert!(last_on_connection(&steps, 0, false));
    assert!(last_on_connection(&steps, 0, true));
    // Kept-alive steps never close.
    let steps = [http(false), think(), http(false)];
    assert!(!last_on_connection(&steps, 0, false));
    assert!(!last_on_connection(&steps, 2, false));
    // A login on a new connection, then a request reusing it: only the second closes,
    // since the next session's login opens its own (across the think time).
    let steps = [http(true), http(false), think()];
    assert!(!last_on_connection(&steps, 0, false));
    assert!(last_on_connection(&steps, 1, false));
    assert!(!last_on_connection(&steps, 1, true));
}

#[test]
fn the_final_flush_goes_to_the_interval_most_of_it_belongs_to() {
    let s = Duration::from_secs(1);
    let ms = Duration::from_millis;
    // Ended 10 ms after the 3 s boundary, before the tick for [2 s, 3 s) ran.
    assert_eq!(final_interval(ms(3010), s, 2), 2);
    // The tick for [2 s, 3 s) ran: what is left belongs to [3 s, 4 s).
    assert_eq!(final_interval(ms(3010), s, 3), 3);
    // Well into an interval.
    assert_eq!(final_interval(ms(3600), s, 3), 3);
    assert_eq!(final_interval(ms(2300), s, 2), 2);
    // A short run that ends before the first tick.
    assert_eq!(final_interval(ms(300), s, 0), 0);
}

mod future_size {
    /// The size of the future `F` that `_f` returns, without running it.
    fn size_of_future<F>(_f: &dyn Fn() -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// The size of a closed connection's future whose session runs HTTP/1.1 by `P`.
    #[allow(unreachable_code)]
    fn closed_task<P: super::super::session::Http1Path>() -> usize {
        size_of_future(&|| {
            super::super::models::closed_connection::<P>(
                unreachable!(),
                unreachable!(),
                unreachable!(),
                unreachable!(),
                unreachable!(),
                unreachable!(),
            )
        })
    }

    /// A closed connection's task is allocated once per connection for the whole run: 10,000
    /// connections are 10,000 of them, so what its future holds across awaits (the connect,
    /// a TLS or h2 handshake, a think-time generator, a chunked body's reader) is boxed or
    /// kept out, and this keeps it that way. tokio aligns a task to 128 bytes and jemalloc
    /// serves 1,024 and then 1,280: a future of at most 912 bytes makes a task of 1,024 (it was
    /// 1,280 while the connection task, `session` and its `exchange` were `async fn`s, which
    /// hold their arguments twice, and again once a think time had a timer of its own). The
    /// connect's future (release: 120 bytes; 376 before it was a block and
    /// 176 while tokio's connect read SO_ERROR on every connection) is boxed, but
    /// all of a run's connections hold one at once while they connect.
    #[test]
    #[allow(unreachable_code)]
    fn a_connection_task_stays_small() {
        let task = closed_task::<super::super::session::Inline>();
        let boxed = closed_task::<super::super::session::Boxed>();
        let connect = size_of_future(&|| {
            super::super::Link::open(unreachable!(), crate::h2::H2Client::General)
        });
        eprintln!(
            "closed connection task {task} B ({boxed} B boxing HTTP/1.1), connect {connect} B"
        );
        // 1,032 bytes in the test profile once an answer also carried a gRPC status and a
        // streamed reply's arrivals, and the endpoint became a followed slot (976 before);
        // 1,056 once a line keeps its connections to steps' own targets (a pointer, and the
        // endpoint picked again when a step's target changes).
        // 872 once a think time and the wait for a server's close run on the request timer,
        // and the session reads its line and arrival in place: the release build's task is
        // then 1,024 bytes (header 32, core 904, trailer 48), where 936 made 1,152 and
        // jemalloc's 1,280-byte class. Anything up to 912 keeps 1,024.
        assert!(task <= 912, "a closed connection's future is {task} bytes");
        // 752 in a run without static HTTP/1.1 steps (a WebSocket's), which boxes that
        // exchange: a task of 896 bytes, jemalloc's class below. Up to 784 keeps it.
        assert!(
            boxed <= 784,
            "a closed connection's future is {boxed} bytes boxing HTTP/1.1"
        );
        // Held by every connection at once while a large closed run connects.
        assert!(connect <= 256, "connecting takes {connect} bytes");
        // Inline in every task, and a WebSocket's framing within it.
        let link = std::mem::size_of::<super::super::Link>();
        assert!(link <= 80, "a link is {link} bytes");
        // Boxed once per session of a dynamic run: jemalloc's next class is 224 bytes.
        let vars = std::mem::size_of::<crate::dynamic::SessionVars>();
        assert!(vars <= 192, "a session's variables are {vars} bytes");
    }
}
