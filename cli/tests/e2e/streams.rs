//! Streamed replies end to end: `stream: sse` and `stream: chunks` steps against the HTTP
//! target's paced routes, timed from the intended send (time to first event) and between
//! events, with bounds that hold on a loaded machine.

use stampede_cli::local::LocalCluster;

use crate::{run, Target};

/// 10 sessions each read 5 events 100 ms apart: every event is counted, the first comes
/// soon after the send, and the gaps are the server's 100 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_times_the_first_event_and_the_gaps() {
    let target = Target::start(0).await;
    let cluster = LocalCluster::start(1, None).await.unwrap();
    let text = format!(
        "name: sse\ntarget: {}\nphases: [ {{ duration: 1s, arrival_rate: 10 }} ]\n\
         thresholds: [ 'step(events).ttfb.p99 < 2s', 'step(events).gap.p50 < 1s' ]\n\
         session:\n  - name: events\n    http: {{ path: '/sse?events=5&gap_ms=100', stream: sse }}\n",
        target.url
    );
    let r = run(&cluster.url(), &cluster.token, &text, 1).await;
    cluster.stop().await;
    let step = r.steps.iter().find(|s| s.name == "events").unwrap();
    assert_eq!((step.completed, step.failed), (10, 0), "{step:?}");
    let s = step
        .stream
        .as_ref()
        .expect("a streamed step reports its arrivals");
    assert_eq!(s.events, 50);
    assert_eq!((s.ttfb.count, s.gap.count), (10, 40));
    // The first event leaves with the reply's head: far below one gap.
    assert!(s.ttfb.p50_us < 50_000, "{s:?}");
    // Frames leave on the server's schedule: a late one makes the gap after it shorter, so
    // the median sits at 100 ms within the timer's and the scheduler's noise.
    assert!((85_000..=115_000).contains(&s.gap.p50_us), "{s:?}");
    // The whole reply takes the 4 gaps at least.
    assert!(step.latency.response_time.min_us >= 400_000, "{step:?}");
    assert!(r.thresholds.iter().all(|t| t.passed), "{:?}", r.thresholds);
}

/// A chunked reply is timed chunk by chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_are_timed_chunk_by_chunk() {
    let target = Target::start(0).await;
    let cluster = LocalCluster::start(1, None).await.unwrap();
    let text = format!(
        "name: chunks\ntarget: {}\nphases: [ {{ duration: 1s, arrival_rate: 5 }} ]\n\
         session:\n  - name: body\n    http: {{ path: '/chunks?n=3&gap_ms=50&size=100', stream: chunks }}\n",
        target.url
    );
    let r = run(&cluster.url(), &cluster.token, &text, 1).await;
    cluster.stop().await;
    let step = r.steps.iter().find(|s| s.name == "body").unwrap();
    assert_eq!((step.completed, step.failed), (5, 0), "{step:?}");
    let s = step.stream.as_ref().unwrap();
    assert_eq!((s.events, s.gap.count), (15, 10));
    assert!(s.gap.p50_us >= 30_000 && s.gap.p50_us <= 80_000, "{s:?}");
}
