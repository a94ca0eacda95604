//! A closed load's ramp of connections over real loopback sockets, under the paused clock:
//! the target, in the same runtime, notes when it accepted each connection.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use stampede_proto::v1;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// An HTTP/1.1 keep-alive target answering every request after 50 ms, noting the (paused)
/// clock at each accept. It stops with the runtime.
async fn target(t0: Instant) -> (String, Arc<Mutex<Vec<Duration>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let opened = Arc::new(Mutex::new(Vec::new()));
    let seen = opened.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            seen.lock().unwrap().push(Instant::now() - t0);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut held = Vec::new();
                loop {
                    let Ok(n) = s.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    held.extend_from_slice(&buf[..n]);
                    while let Some(end) = held.windows(4).position(|w| w == b"\r\n\r\n") {
                        held.drain(..end + 4);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if s.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, opened)
}

/// The scenario sharded over two agents, each run started at `t0`: its task and the messages
/// it sends.
async fn two_agents(
    scenario: &str,
    t0: Instant,
) -> Vec<(
    tokio::task::JoinHandle<super::RunEnd>,
    tokio::sync::mpsc::UnboundedReceiver<v1::AgentMessage>,
)> {
    let mut runs = Vec::new();
    for i in 0..2 {
        let run = Arc::new(super::tests::shard(scenario, i, 2).await);
        let (out, messages) = tokio::sync::mpsc::unbounded_channel();
        let stop = tokio_util::sync::CancellationToken::new();
        runs.push((tokio::spawn(super::execute(run, t0, out, stop)), messages));
    }
    runs
}

/// 0 → 200 connections over 4 s, then 2 s at 200, over two agents: the target sees one connect
/// every 20 ms, at most the slope's 5 in any 100 ms (none at T0 in a burst), each agent
/// opens 100, every connect is timed in the stage it began in, and every connection serves
/// sessions until the end.
#[tokio::test(start_paused = true)]
async fn a_closed_ramp_opens_its_connections_at_its_slope() {
    let t0 = Instant::now() + Duration::from_millis(100);
    let (addr, opened) = target(t0).await;
    let scenario = format!(
        "name: ramp\ntarget: http://{addr}\nload: {{ model: closed, stages: [ {{ connections: 200, duration: 4s }}, {{ connections: 200, duration: 2s }} ] }}\nsession: [ {{ http: {{ path: / }} }} ]\n"
    );
    let runs = two_agents(&scenario, t0).await;
    let mut completed = 0u64;
    let mut opened_by = Vec::new();
    // Connects timed, per stage: every connect begins in the rising stage.
    let mut connects = [0u64; 2];
    for (run, mut messages) in runs {
        let end = tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .expect("the run ended")
            .unwrap();
        assert_eq!(end, super::RunEnd::Completed);
        let mut agent_opened = 0;
        while let Ok(m) = messages.try_recv() {
            if let Some(v1::agent_message::Msg::Progress(p)) = m.msg {
                for w in &p.samples {
                    let (_, s) = stampede_proto::convert::sample_from_wire(
                        stampede_proto::path::Path::root("s"),
                        w,
                        1,
                    )
                    .unwrap();
                    completed += s.counters.requests_completed;
                    assert_eq!(s.counters.requests_failed, 0, "{:?}", s.counters.errors);
                    agent_opened += s.counters.connections_opened;
                }
                for (stage, h) in stampede_proto::connects::stage_connects_from_wire(&p, 2).unwrap()
                {
                    connects[stage as usize] += h.len();
                }
            }
        }
        opened_by.push(agent_opened);
    }
    let mut at = opened.lock().unwrap().clone();
    at.sort();
    assert_eq!(at.len(), 200, "connections accepted");
    assert_eq!(opened_by, [100, 100]);
    assert_eq!(connects, [200, 0], "connect times per stage");
    let per_100ms: Vec<usize> = (0..40)
        .map(|w| {
            let (a, b) = (
                Duration::from_millis(w * 100),
                Duration::from_millis(w * 100 + 100),
            );
            at.iter().filter(|t| a <= **t && **t < b).count()
        })
        .collect();
    eprintln!("connects per 100 ms over the ramp: {per_100ms:?}");
    assert!(per_100ms.iter().all(|n| *n <= 5), "{per_100ms:?}");
    assert_eq!(per_100ms.iter().sum::<usize>(), 200);
    assert!(
        at[199] >= Duration::from_millis(3980),
        "last connect at {:?}",
        at[199]
    );
    // Connection g is open from g × 20 ms to 6 s and answers every 50 ms: 120 − 0.4·g
    // requests, 16,040 in all, and at most one more each (a session started before the end
    // finishes after it).
    assert!(
        (16_040..=16_240).contains(&completed),
        "{completed} requests"
    );
}

/// A constant-rate load of 100/s whose pool ramps 0 → 20 connections over 2 s, then holds
/// 20 for 2 s, over two agents, against a target answering after 50 ms (so 5 connections
/// carry the rate, held from 0.4 s): the target sees one connect every 100 ms, the slope's
/// 1 in any 100 ms; each agent opens 10, each timed in the rising stage; every one of the 400
/// slots is served (the first ones late, queued for the few connections open then), none is
/// dropped.
#[tokio::test(start_paused = true)]
async fn a_constant_rate_pool_ramps_and_serves_every_slot() {
    let t0 = Instant::now() + Duration::from_millis(100);
    let (addr, opened) = target(t0).await;
    let scenario = format!(
        "name: ramp\ntarget: http://{addr}\nload: {{ model: constant, rate: 100, stages: [ {{ connections: 20, duration: 2s }}, {{ connections: 20, duration: 2s }} ] }}\nsession: [ {{ http: {{ path: / }} }} ]\n"
    );
    let runs = two_agents(&scenario, t0).await;
    let (mut opened_by, mut connects) = (Vec::new(), [0u64; 2]);
    let (mut completed, mut dropped) = (0u64, 0u64);
    for (run, mut messages) in runs {
        let end = tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .expect("the run ended")
            .unwrap();
        assert_eq!(end, super::RunEnd::Completed);
        let mut agent_opened = 0;
        while let Ok(m) = messages.try_recv() {
            if let Some(v1::agent_message::Msg::Progress(p)) = m.msg {
                for w in &p.samples {
                    let (_, s) = stampede_proto::convert::sample_from_wire(
                        stampede_proto::path::Path::root("s"),
                        w,
                        1,
                    )
                    .unwrap();
                    let c = &s.counters;
                    assert_eq!(c.requests_failed, 0, "{:?}", c.errors);
                    completed += c.requests_completed;
                    dropped += c.dropped_arrivals;
                    agent_opened += c.connections_opened;
                }
                for (stage, h) in stampede_proto::connects::stage_connects_from_wire(&p, 2).unwrap()
                {
                    connects[stage as usize] += h.len();
                }
            }
        }
        opened_by.push(agent_opened);
    }
    let mut at = opened.lock().unwrap().clone();
    at.sort();
    eprintln!("connects at {at:?}");
    assert_eq!(at.len(), 20, "connections accepted");
    assert_eq!(opened_by, [10, 10]);
    assert_eq!(connects, [20, 0], "connect times per stage");
    for w in 0..20u64 {
        let (a, b) = (
            Duration::from_millis(w * 100),
            Duration::from_millis(w * 100 + 100),
        );
        let n = at.iter().filter(|t| a <= **t && **t < b).count();
        assert_eq!(n, 1, "{n} connects in {a:?}..{b:?}: {at:?}");
    }
    // The rate served second by second is asserted on real sockets by the e2e ramp test.
    assert_eq!((completed, dropped), (400, 0));
}
