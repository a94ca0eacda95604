//! The books balance at every stop: whatever the load model, the steps, the target's delay,
//! the request timeout, the graceful stop and the moment of the stop, a shard's Progress
//! messages add up to started = completed + failed + interrupted, for requests (in total and
//! over the steps) and for sessions (in total and per session type), and every request the
//! target read is among them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use stampede_proto::v1;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::tests::one_shard;
use super::{execute, RunEnd};

/// An HTTP/1.1 keep-alive target on loopback that answers each request `delay` after it has
/// read it (on tokio's clock, paused in the tests), counting the requests it read.
async fn slow_target(delay: Duration) -> (std::net::SocketAddr, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let read = Arc::new(AtomicU64::new(0));
    let counted = read.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let read = counted.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // A request has no body here: its head ends at the empty line.
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        read.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(delay).await;
                        if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    (addr, read)
}

/// The load shapes a stop may meet.
const LOADS: [&str; 4] = [
    "phases: [{ duration: 4s, arrival_rate: 40 }]",
    "load: { model: closed, connections: 3, duration: 4s }",
    "load: { model: constant, rate: 40, connections: 3, duration: 4s }",
    "arrival: poisson\nphases: [{ duration: 2s, arrival_rate: 20 }, { duration: 2s, arrival_rate: 60 }]",
];

/// The sessions a stop may cut: one request, two, a think time between, a weighted mix.
const SESSIONS: [&str; 4] = [
    "session:\n  - http: { path: /a }\n",
    "session:\n  - http: { path: /a }\n  - http: { path: /b }\n    repeat: 2\n",
    "session:\n  - http: { path: /a }\n  - think_time: 300ms\n  - http: { path: /b }\n",
    "sessions:\n  - { name: one, weight: 2, steps: [ { http: { path: /a } } ] }\n  - { name: two, weight: 1, steps: [ { http: { path: /a } }, { http: { path: /b } } ] }\n",
];

/// Counts of a shard's Progress messages added up.
#[derive(Debug, Default)]
struct Books {
    requests: [u64; 4],
    sessions: [u64; 4],
    /// Completed + failed + interrupted over the steps.
    steps: u64,
    /// Started and completed + failed + interrupted per session type, over the types.
    types: [u64; 2],
}

fn add_up(messages: &mut tokio::sync::mpsc::UnboundedReceiver<v1::AgentMessage>) -> Books {
    let mut b = Books::default();
    while let Ok(m) = messages.try_recv() {
        let Some(v1::agent_message::Msg::Progress(p)) = m.msg else {
            continue;
        };
        for s in p.samples {
            let c = s.counters.unwrap();
            for (into, v) in b.requests.iter_mut().zip([
                c.requests_started,
                c.requests_completed,
                c.requests_failed,
                c.requests_interrupted,
            ]) {
                *into += v;
            }
            for (into, v) in b.sessions.iter_mut().zip([
                c.sessions_started,
                c.sessions_completed,
                c.sessions_failed,
                c.sessions_interrupted,
            ]) {
                *into += v;
            }
            for t in c.session_types.values() {
                b.types[0] += t.started;
                b.types[1] += t.completed + t.failed + t.interrupted;
            }
            for st in s.steps {
                b.steps += st.requests_completed + st.requests_failed + st.requests_interrupted;
            }
        }
    }
    b
}

/// Runs `scenario` on loopback against a target answering after `delay`, stops it `stop_at`
/// after T0 (or lets it end), and returns its books and the requests the target read.
async fn run_and_stop(
    scenario: String,
    delay: Duration,
    stop_at: Option<Duration>,
) -> (Books, u64, RunEnd) {
    let (addr, read) = slow_target(delay).await;
    let run = one_shard(scenario.replace("TARGET", &addr.to_string())).await;
    let (out, mut messages) = tokio::sync::mpsc::unbounded_channel();
    let stop = tokio_util::sync::CancellationToken::new();
    let t0 = tokio::time::Instant::now();
    let task = tokio::spawn(execute(Arc::new(run), t0, out, stop.clone()));
    if let Some(at) = stop_at {
        tokio::time::sleep_until(t0 + at).await;
        stop.cancel();
    }
    let end = tokio::time::timeout(Duration::from_secs(600), task)
        .await
        .expect("the shard ends")
        .unwrap();
    (add_up(&mut messages), read.load(Ordering::Relaxed), end)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn every_stop_balances_the_books(
        load in 0..LOADS.len(),
        session in 0..SESSIONS.len(),
        // At least 1 ms: on the paused clock a target that answers at once lets a closed
        // loop run without time passing, so a 4 s run would never end.
        delay_ms in prop_oneof![Just(1u64), 2u64..80, Just(700), Just(30_000)],
        timeout_ms in prop_oneof![Just(150u64), Just(1_000), Just(60_000)],
        grace in prop_oneof![Just(None), Just(Some(0u64)), (1u64..400).prop_map(Some), Just(Some(2_000))],
        stop_ms in prop_oneof![Just(None), (0u64..4_500).prop_map(Some)],
    ) {
        let grace_line = grace.map(|g| format!("graceful_stop: {g}ms\n")).unwrap_or_default();
        let scenario = format!(
            "name: books\ntarget: http://TARGET\nrequest_timeout: {timeout_ms}ms\n{grace_line}{}\n{}",
            LOADS[load], SESSIONS[session]
        );
        crate::arrivals::TOKIO_PACED.with(|p| p.set(true));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let (b, read, end) = rt.block_on(run_and_stop(
            scenario.clone(),
            Duration::from_millis(delay_ms),
            stop_ms.map(Duration::from_millis),
        ));
        let [started, completed, failed, interrupted] = b.requests;
        prop_assert_eq!(started, completed + failed + interrupted, "requests {:?}\n{}", b, scenario);
        prop_assert_eq!(b.steps, started, "steps {:?}\n{}", b, scenario);
        let [s_started, s_completed, s_failed, s_interrupted] = b.sessions;
        prop_assert_eq!(s_started, s_completed + s_failed + s_interrupted, "sessions {:?}\n{}", b, scenario);
        prop_assert_eq!(b.types[0], b.types[1], "session types {:?}\n{}", b, scenario);
        if stop_ms.is_none_or(|ms| ms >= 500) {
            prop_assert!(started > 0 && read > 0, "no load: {:?}, the target read {}\n{}", b, read, scenario);
        }
        prop_assert!(read <= started, "the target read {} requests, {:?}\n{}", read, b, scenario);
        if end == RunEnd::Completed {
            prop_assert_eq!(interrupted, 0, "a run that ended on its own interrupts nothing: {:?}", b);
        }
    }
}
