//! The run driver against scripted agents, under tokio's paused clock: every wait the driver
//! makes (for agents, for Ready, for a stream to come back) is checked to the millisecond,
//! whatever the machine's speed. The agents are channels the test answers by hand, as the
//! agent service would relay a real agent's messages.

use tokio::time::Instant;

use super::*;
use crate::agents::AgentEntry;
use crate::renew::Heard;

type Stream = mpsc::Receiver<Result<v1::ControllerMessage, tonic::Status>>;

const LEASE: Duration = Duration::from_secs(1);
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// A controller with a 1 s lease and 1 s intervals over a data directory of its own.
fn controller() -> (tempfile::TempDir, crate::Controller) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = crate::ControllerConfig::new(dir.path());
    cfg.lease = LEASE;
    // Agents that drop out are given their lease and the rejoin margin, no restart grace.
    cfg.restart_grace = Duration::ZERO;
    cfg.ready_timeout = READY_TIMEOUT;
    cfg.interval = Duration::from_secs(1);
    cfg.start_delay = Duration::from_millis(100);
    let c = crate::Controller::new(cfg).unwrap();
    (dir, c)
}

/// A scenario of 2 s at 1 arrival a second, with `extra` top-level lines.
fn scenario(extra: &str) -> ReadyScenario {
    ready(&format!(
        "name: d\ntarget: http://127.0.0.1:1\n{extra}phases:\n  - {{ duration: 2s, arrival_rate: 1 }}\n\
         session:\n  - http: {{ path: / }}\n"
    ))
}

/// `yaml` parsed and made ready, as a submission makes it.
fn ready(yaml: &str) -> ReadyScenario {
    ReadyScenario::new(Scenario::from_yaml(yaml).unwrap()).unwrap()
}

/// An idle agent `id` on stream `conn_id`, as registration leaves it.
fn join(inner: &Inner, conn_id: u64, id: &str) -> Stream {
    let (tx, rx) = mpsc::channel(256);
    lock(&inner.agents).insert(
        conn_id,
        AgentEntry {
            conn_id,
            info: v1::AgentInfo {
                agent_id: id.into(),
                state: "idle".into(),
                ..Default::default()
            },
            tx,
            clock: Default::default(),
            run: None,
            kick: CancellationToken::new(),
            heard: Heard::new(),
        },
    );
    inner.agents_changed.notify_waiters();
    rx
}

/// The next message on an agent's stream that is not a lease renewal, an ack or a ping.
async fn next(rx: &mut Stream) -> Out {
    loop {
        let m = rx.recv().await.expect("the stream is open").unwrap();
        match m.msg {
            Some(Out::Lease(_) | Out::Ack(_) | Out::ClockPing(_)) | None => continue,
            Some(other) => return other,
        }
    }
}

/// Answers each agent's Assign with Ready, then waits for each one's Start (sent once all
/// are ready).
async fn ready_and_started(h: &RunHandle, agents: &mut [(&mut Stream, &str)]) {
    for (rx, id) in agents.iter_mut() {
        let Out::Assign(a) = next(rx).await else {
            panic!("{id}: no Assign first")
        };
        h.send(RunInput::Ready {
            agent_id: id.to_string(),
            planned: a.planned_sessions,
            setup_values: Vec::new(),
        });
    }
    for (rx, id) in agents.iter_mut() {
        assert!(matches!(next(rx).await, Out::Start(_)), "{id}: no Start");
    }
}

fn done(h: &RunHandle, id: &str) {
    h.send(RunInput::Done {
        agent_id: id.into(),
        done: v1::Done {
            run_id: h.run_id.clone(),
            ..Default::default()
        },
    });
}

#[tokio::test(start_paused = true)]
async fn a_run_without_agents_fails_once_the_agent_wait_is_over() {
    let (_dir, c) = controller();
    let t = Instant::now();
    let h = start(c.inner.clone(), scenario(""), 2, Duration::from_secs(30));
    h.finished().await;
    assert_eq!(t.elapsed(), Duration::from_secs(30));
    let s = h.state();
    assert_eq!(s.state, RunState::Failed);
    assert!(s.message.contains("needs 2 agents"), "{}", s.message);
}

#[tokio::test(start_paused = true)]
async fn an_agent_that_comes_late_within_the_wait_is_taken() {
    let (_dir, c) = controller();
    let h = start(c.inner.clone(), scenario(""), 1, Duration::from_secs(30));
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(h.state().state, RunState::Pending);
    let mut rx = join(&c.inner, 1, "a1");
    assert!(matches!(next(&mut rx).await, Out::Assign(_)));
    assert_eq!(h.state().state, RunState::Assigning);
}

#[tokio::test(start_paused = true)]
async fn an_agent_that_never_acknowledges_fails_the_run_at_the_ready_timeout() {
    let (_dir, c) = controller();
    let mut a1 = join(&c.inner, 1, "a1");
    let mut a2 = join(&c.inner, 2, "a2");
    let h = start(c.inner.clone(), scenario(""), 2, Duration::from_secs(30));
    let Out::Assign(_) = next(&mut a1).await else {
        panic!("no Assign")
    };
    let t = Instant::now();
    let Out::Assign(a) = next(&mut a2).await else {
        panic!("no Assign")
    };
    h.send(RunInput::Ready {
        agent_id: "a2".into(),
        planned: a.planned_sessions,
        setup_values: Vec::new(),
    });
    h.finished().await;
    assert_eq!(t.elapsed(), READY_TIMEOUT);
    let s = h.state();
    assert_eq!(s.state, RunState::Failed);
    assert!(
        s.message.ends_with("in time: a1"),
        "only a1 is named: {}",
        s.message
    );
    // Both agents are free for the next run.
    assert!(lock(&c.inner.agents).values().all(|a| a.run.is_none()));
}

#[tokio::test(start_paused = true)]
async fn a_failure_named_by_an_agent_outside_the_run_changes_nothing() {
    let (_dir, c) = controller();
    let mut a1 = join(&c.inner, 1, "a1");
    let h = start(c.inner.clone(), scenario(""), 1, Duration::from_secs(30));
    let Out::Assign(a) = next(&mut a1).await else {
        panic!("no Assign first")
    };
    h.send(RunInput::Failed {
        agent_id: "intruder".into(),
        reason: "x".repeat(100_000),
    });
    h.send(RunInput::Disconnected {
        agent_id: "intruder".into(),
        conn_id: 99,
    });
    h.send(RunInput::Ready {
        agent_id: "a1".into(),
        planned: a.planned_sessions,
        setup_values: Vec::new(),
    });
    assert!(matches!(next(&mut a1).await, Out::Start(_)));
    done(&h, "a1");
    h.finished().await;
    // It started, and ended on its own figures (no request was sent), not on the intruder's.
    let s = h.state();
    assert!(!s.message.contains("intruder"), "{}", s.message);
    assert!(s.message.contains("no request was sent"), "{}", s.message);
}

#[tokio::test(start_paused = true)]
async fn an_agent_that_refuses_its_shard_fails_the_run_and_stops_the_others() {
    let (_dir, c) = controller();
    let mut a1 = join(&c.inner, 1, "a1");
    let mut a2 = join(&c.inner, 2, "a2");
    let h = start(c.inner.clone(), scenario(""), 2, Duration::from_secs(30));
    assert!(matches!(next(&mut a1).await, Out::Assign(_)));
    assert!(matches!(next(&mut a2).await, Out::Assign(_)));
    h.send(RunInput::Failed {
        agent_id: "a2".into(),
        reason: "no route".into(),
    });
    assert!(matches!(next(&mut a1).await, Out::Abort(_)));
    h.finished().await;
    let s = h.state();
    assert_eq!(s.state, RunState::Failed);
    assert!(
        s.message.contains("a2 refused its shard: no route"),
        "{}",
        s.message
    );
}

#[tokio::test(start_paused = true)]
async fn a_run_moves_through_its_states_in_order() {
    let (_dir, c) = controller();
    let mut a1 = join(&c.inner, 1, "a1");
    let h = start(c.inner.clone(), scenario(""), 1, Duration::from_secs(30));
    let mut events = h.events.subscribe();
    ready_and_started(&h, &mut [(&mut a1, "a1")]).await;
    done(&h, "a1");
    h.finished().await;
    let mut seen = vec![RunState::Pending];
    while let Ok(ev) = events.try_recv() {
        if let Some(v1::run_event::Event::State(s)) = ev.event {
            let s = RunState::ALL
                .into_iter()
                .find(|x| x.as_str() == s.state)
                .expect("a known state on the wire");
            let last = *seen.last().unwrap();
            assert!(s == last || last.may_become(s), "{last} -> {s}");
            if s != last {
                seen.push(s);
            }
        }
    }
    use RunState::*;
    assert_eq!(seen[..4], [Pending, Assigning, Ready, Running]);
    // Nothing was sent: the report's verdict fails it, and the state follows the report.
    assert_eq!(seen.last(), Some(&Failed));
    assert_eq!(h.state().message, "no request was sent");
}

#[tokio::test(start_paused = true)]
async fn a_stream_closed_past_its_grace_loses_the_agent_and_fails_the_run() {
    let (_dir, c) = controller();
    let mut a1 = join(&c.inner, 1, "a1");
    let mut a2 = join(&c.inner, 2, "a2");
    let h = start(c.inner.clone(), scenario(""), 2, Duration::from_secs(30));
    ready_and_started(&h, &mut [(&mut a1, "a1"), (&mut a2, "a2")]).await;
    let t = Instant::now();
    h.send(RunInput::Disconnected {
        agent_id: "a2".into(),
        conn_id: 2,
    });
    // The other agent is told to stop once a2's grace (lease + 2 s) is over.
    assert!(matches!(next(&mut a1).await, Out::Abort(_)));
    assert_eq!(t.elapsed(), LEASE + Duration::from_secs(2));
    done(&h, "a1");
    h.finished().await;
    let s = h.state();
    assert_eq!(s.state, RunState::Failed);
    assert!(
        s.message.contains("a2") && s.message.contains("not back within 3.0 s"),
        "{}",
        s.message
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_back_within_its_grace_resumes_the_run() {
    let (_dir, c) = controller();
    let mut a1 = join(&c.inner, 1, "a1");
    let h = start(c.inner.clone(), scenario(""), 1, Duration::from_secs(30));
    ready_and_started(&h, &mut [(&mut a1, "a1")]).await;
    h.send(RunInput::Disconnected {
        agent_id: "a1".into(),
        conn_id: 1,
    });
    tokio::time::sleep(LEASE + Duration::from_secs(1)).await;
    let (tx, mut back) = mpsc::channel(16);
    h.send(RunInput::Reconnected {
        agent_id: "a1".into(),
        conn_id: 9,
        tx,
        heard: Heard::new(),
    });
    // Past the first stream's grace, the run still waits for the agent on its new one.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.state().state, RunState::Running);
    while let Ok(m) = back.try_recv() {
        assert!(!matches!(m.unwrap().msg, Some(Out::Abort(_))), "aborted");
    }
    done(&h, "a1");
    h.finished().await;
    let s = h.state();
    assert!(!s.message.contains("lost"), "{}", s.message);
}

#[tokio::test(start_paused = true)]
async fn a_tolerated_loss_ends_the_run_incomplete_naming_the_agent() {
    let (_dir, c) = controller();
    let mut a1 = join(&c.inner, 1, "a1");
    let mut a2 = join(&c.inner, 2, "a2");
    let h = start(
        c.inner.clone(),
        scenario("on_agent_loss: { tolerate: 50 }\n"),
        2,
        Duration::from_secs(30),
    );
    ready_and_started(&h, &mut [(&mut a1, "a1"), (&mut a2, "a2")]).await;
    h.send(RunInput::Failed {
        agent_id: "a2".into(),
        reason: "out of memory".into(),
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(h.state().state, RunState::Running, "the run goes on");
    done(&h, "a1");
    h.finished().await;
    let s = h.state();
    assert_eq!(s.state, RunState::Incomplete);
    assert!(s.message.contains("agent a2 was lost"), "{}", s.message);
}

#[tokio::test(start_paused = true)]
async fn an_abort_while_pending_ends_the_run_aborted_at_once() {
    let (_dir, c) = controller();
    let h = start(c.inner.clone(), scenario(""), 1, Duration::from_secs(3600));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let t = Instant::now();
    h.request_abort("by the test".into());
    h.finished().await;
    assert_eq!(t.elapsed(), Duration::ZERO);
    let s = h.state();
    assert_eq!(s.state, RunState::Aborted);
    assert_eq!(s.message, "by the test");
}

/// A controller with a restart grace over `dir`: its runs are checkpointed.
fn controller_on(dir: &std::path::Path, grace: Duration) -> crate::Controller {
    let mut cfg = crate::ControllerConfig::new(dir);
    cfg.lease = LEASE;
    cfg.restart_grace = grace;
    cfg.ready_timeout = READY_TIMEOUT;
    cfg.interval = Duration::from_secs(1);
    cfg.start_delay = Duration::from_millis(100);
    crate::Controller::new(cfg).unwrap()
}

/// Starts a one-agent run of `len` on a checkpointing controller over `dir`, then shuts that
/// controller down mid-run; returns the run's id once the run is checkpointed and left.
async fn run_then_shut_down(dir: &std::path::Path, grace: Duration) -> String {
    let c = controller_on(dir, grace);
    let mut a1 = join(&c.inner, 1, "a1");
    let h = start(
        c.inner.clone(),
        ready(
            "name: d\ntarget: http://127.0.0.1:1\nphases:\n  - { duration: 30s, arrival_rate: 1 }\n\
             session:\n  - http: { path: / }\n",
        ),
        1,
        Duration::from_secs(30),
    );
    ready_and_started(&h, &mut [(&mut a1, "a1")]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    c.inner.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        h.state().state,
        RunState::Running,
        "left for the next controller"
    );
    assert!(dir
        .join("checkpoints")
        .join(format!("{}.json", h.run_id))
        .exists());
    h.run_id.clone()
}

/// A controller shut down mid-run leaves the run checkpointed; the next one on the data
/// directory re-adopts it as running, takes the agent back on its new stream, and finishes
/// the run with a stored report (and no checkpoint left).
#[tokio::test(start_paused = true)]
async fn a_restarted_controller_re_adopts_the_run_and_finishes_it() {
    let dir = tempfile::tempdir().unwrap();
    let grace = Duration::from_secs(15);
    let run_id = run_then_shut_down(dir.path(), grace).await;
    let c = controller_on(dir.path(), grace);
    let h = lock(&c.inner.runs)
        .get(&run_id)
        .cloned()
        .expect("re-adopted");
    let s = h.state();
    assert_eq!(s.state, RunState::Running);
    assert!(s.message.contains("re-adopted"), "{}", s.message);
    // The agent comes back within the grace, on a new stream, and finishes.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (tx, mut back) = mpsc::channel(16);
    h.send(RunInput::Reconnected {
        agent_id: "a1".into(),
        conn_id: 7,
        tx,
        heard: Heard::new(),
    });
    done(&h, "a1");
    h.finished().await;
    let s = h.state();
    assert!(!s.message.contains("lost"), "{}", s.message);
    assert!(c.inner.store.load(&run_id).unwrap().is_some(), "stored");
    assert!(!dir
        .path()
        .join("checkpoints")
        .join(format!("{run_id}.json"))
        .exists());
    // Its Done is acknowledged on the new stream once the report is stored.
    let mut acked = false;
    while let Ok(m) = back.try_recv() {
        acked |= matches!(m.unwrap().msg, Some(Out::Ack(_)));
    }
    assert!(acked);
}

/// A re-adopted run whose agent never comes back fails when its lease, restart grace and
/// rejoin margin, counted from the restart, are over, naming the agent.
#[tokio::test(start_paused = true)]
async fn a_re_adopted_run_fails_when_its_agent_is_not_back_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let grace = Duration::from_secs(4);
    let run_id = run_then_shut_down(dir.path(), grace).await;
    let t = Instant::now();
    let c = controller_on(dir.path(), grace);
    let h = lock(&c.inner.runs)
        .get(&run_id)
        .cloned()
        .expect("re-adopted");
    // Lost when its lease, restart grace and rejoin margin are over; then the run waits as
    // long again for the books its load may still hold.
    let window = LEASE + grace + Duration::from_secs(2);
    h.finished().await;
    assert_eq!(t.elapsed(), 2 * window);
    let s = h.state();
    assert_eq!(s.state, RunState::Failed);
    assert!(
        s.message.contains("a1") && s.message.contains("not back within 7.0 s"),
        "{}",
        s.message
    );
    assert!(c.inner.store.load(&run_id).unwrap().is_some());
}

/// Without a restart grace nothing is checkpointed, and a restart fails the run in flight.
#[tokio::test(start_paused = true)]
async fn without_a_restart_grace_a_restart_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller_on(dir.path(), Duration::ZERO);
    let mut a1 = join(&c.inner, 1, "a1");
    let h = start(c.inner.clone(), scenario(""), 1, Duration::from_secs(30));
    ready_and_started(&h, &mut [(&mut a1, "a1")]).await;
    assert!(!dir
        .path()
        .join("checkpoints")
        .join(format!("{}.json", h.run_id))
        .exists());
    let c2 = controller_on(dir.path(), Duration::ZERO);
    assert!(lock(&c2.inner.runs).get(&h.run_id).is_none());
    let json = c2
        .inner
        .store
        .load(&h.run_id)
        .unwrap()
        .expect("a failed report");
    assert!(json.contains("controller restarted"), "{json}");
}

/// A stream that closes while the controller runs (the agent process killed: the kernel
/// closes its connection) is lost once the reconnect window is over, whatever the restart
/// grace: that grace is for a controller that restarts, and this one did not.
#[tokio::test(start_paused = true)]
async fn a_closed_stream_is_lost_without_waiting_for_the_restart_grace() {
    let dir = tempfile::tempdir().unwrap();
    let c = controller_on(dir.path(), Duration::from_secs(15));
    let mut a1 = join(&c.inner, 1, "a1");
    let mut a2 = join(&c.inner, 2, "a2");
    let h = start(c.inner.clone(), scenario(""), 2, Duration::from_secs(30));
    ready_and_started(&h, &mut [(&mut a1, "a1"), (&mut a2, "a2")]).await;
    let t = Instant::now();
    h.send(RunInput::Disconnected {
        agent_id: "a2".into(),
        conn_id: 2,
    });
    assert!(matches!(next(&mut a1).await, Out::Abort(_)));
    assert_eq!(t.elapsed(), running::RECONNECT_WINDOW);
    done(&h, "a1");
    h.finished().await;
    let s = h.state();
    assert_eq!(s.state, RunState::Failed);
    assert!(
        s.message.contains("a2") && s.message.contains("not back within 3.0 s"),
        "{}",
        s.message
    );
}

/// A one-agent run of 60 s at 1 arrival a second.
fn a_minute() -> ReadyScenario {
    ready(
        "name: d\ntarget: http://127.0.0.1:1\nphases:\n  - { duration: 60s, arrival_rate: 1 }\n\
         session:\n  - http: { path: / }\n",
    )
}

/// Waits (on the paused clock) until the run leaves `Running`; returns how long that took.
async fn until_decided(h: &RunHandle) -> Duration {
    let t = Instant::now();
    while h.state().state == RunState::Running {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    t.elapsed()
}

/// An agent whose stream stays up but says nothing (a stopped process, a link that carries
/// nothing) gets no renewals past the silence limit, and is lost one lease later, when its
/// load has surely stopped. The policy decides then; the run waits its lease and a margin
/// (no restart grace here) for what the agent sent, and, as it never comes, ends naming
/// the gap: where its books end and at most how many requests may be missing.
#[tokio::test(start_paused = true)]
async fn a_silent_agent_is_lost_a_lease_after_its_renewals_stop() {
    let (_dir, c) = controller();
    let mut a1 = join(&c.inner, 1, "a1");
    let h = start(c.inner.clone(), a_minute(), 1, Duration::from_secs(30));
    ready_and_started(&h, &mut [(&mut a1, "a1")]).await;
    let t = Instant::now();
    // Silence limit (lease + 5 intervals = 6 s) and a lease, from T0 (100 ms after the Start),
    // seen at the next interval's tick: 7 s, not the run's 60 s.
    let lost_after = until_decided(&h).await;
    assert!(
        lost_after > Duration::from_secs(7) && lost_after <= Duration::from_secs(9),
        "{lost_after:?}"
    );
    let s = h.state();
    assert_eq!(s.state, RunState::Finishing);
    assert!(s.message.contains("waiting up to 3.0 s"), "{}", s.message);
    h.finished().await;
    // `until_decided` sees the decision at its next 100 ms poll.
    let waited = t.elapsed() - (lost_after - Duration::from_millis(100));
    assert!(
        waited >= LEASE + Duration::from_secs(2) && waited <= LEASE + Duration::from_millis(2100),
        "{waited:?}"
    );
    let s = h.state();
    assert_eq!(s.state, RunState::Failed);
    assert!(
        s.message.contains("a1") && s.message.contains("silent for more than 7.0 s"),
        "{}",
        s.message
    );
    // Nothing delivered: its books end at T0, and its planned rate (1/s) over the time its
    // load could go on (silence limit and lease from T0) bounds what may be missing.
    assert!(
        s.message.contains("its books end at 0.0 s")
            && s.message.contains("up to 7 more requests in the 7.0 s"),
        "{}",
        s.message
    );
}

/// The same silent agent comes back while the run waits for its books and delivers its
/// Done: the run ends at once, still failed by the policy, its books complete (no gap
/// named); a second Done changes nothing.
#[tokio::test(start_paused = true)]
async fn a_lost_agent_back_within_the_wait_completes_the_books_and_ends_the_run() {
    let (_dir, c) = controller();
    let mut a1 = join(&c.inner, 1, "a1");
    let h = start(c.inner.clone(), a_minute(), 1, Duration::from_secs(30));
    ready_and_started(&h, &mut [(&mut a1, "a1")]).await;
    until_decided(&h).await;
    let t = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(h.state().state, RunState::Finishing, "still waiting");
    done(&h, "a1");
    done(&h, "a1");
    h.finished().await;
    assert_eq!(
        t.elapsed(),
        Duration::from_millis(1500),
        "ended at its Done"
    );
    let s = h.state();
    assert_eq!(s.state, RunState::Failed);
    assert!(
        s.message.contains("a1") && s.message.contains("lost"),
        "{}",
        s.message
    );
    assert!(!s.message.contains("books end"), "{}", s.message);
}

/// With no wait for lost agents' books, the run ends at the decision, the gap named.
#[tokio::test(start_paused = true)]
async fn with_no_wait_a_lost_agents_books_close_at_the_decision() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = crate::ControllerConfig::new(dir.path());
    cfg.lease = LEASE;
    cfg.restart_grace = Duration::ZERO;
    cfg.interval = Duration::from_secs(1);
    cfg.start_delay = Duration::from_millis(100);
    cfg.lost_agent_wait = Some(Duration::ZERO);
    let c = crate::Controller::new(cfg).unwrap();
    let mut a1 = join(&c.inner, 1, "a1");
    let h = start(c.inner.clone(), a_minute(), 1, Duration::from_secs(30));
    ready_and_started(&h, &mut [(&mut a1, "a1")]).await;
    let t = Instant::now();
    h.finished().await;
    assert!(t.elapsed() <= Duration::from_secs(9), "{:?}", t.elapsed());
    let s = h.state();
    assert_eq!(s.state, RunState::Failed);
    assert!(
        s.message.contains("its books end at 0.0 s"),
        "{}",
        s.message
    );
}

/// A run being aborted when its controller goes (its ending already checkpointed) is
/// re-adopted still ending: the next controller tells the returning agent to stop, and the
/// run ends `aborted` with the user's reason, not `succeeded`.
#[tokio::test(start_paused = true)]
async fn a_re_adopted_run_that_was_aborted_ends_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let grace = Duration::from_secs(15);
    let c = controller_on(dir.path(), grace);
    let mut a1 = join(&c.inner, 1, "a1");
    let h = start(
        c.inner.clone(),
        ready(
            "name: d\ntarget: http://127.0.0.1:1\nphases:\n  - { duration: 30s, arrival_rate: 1 }\n\
             session:\n  - http: { path: / }\n",
        ),
        1,
        Duration::from_secs(30),
    );
    ready_and_started(&h, &mut [(&mut a1, "a1")]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    h.request_abort("stopped by the test".into());
    assert!(matches!(next(&mut a1).await, Out::Abort(_)));
    // The first controller is gone from here on (its driver never hears from a1 again).
    let c2 = controller_on(dir.path(), grace);
    let h2 = lock(&c2.inner.runs)
        .get(&h.run_id)
        .cloned()
        .expect("re-adopted");
    let s = h2.state();
    assert_eq!(s.state, RunState::Finishing);
    assert!(s.message.contains("stopped by the test"), "{}", s.message);
    let (tx, mut back) = mpsc::channel(16);
    h2.send(RunInput::Reconnected {
        agent_id: "a1".into(),
        conn_id: 7,
        tx,
        heard: Heard::new(),
    });
    assert!(matches!(next(&mut back).await, Out::Abort(_)));
    done(&h2, "a1");
    h2.finished().await;
    let s = h2.state();
    assert_eq!(s.state, RunState::Aborted);
    assert_eq!(s.message, "stopped by the test");
}

/// Copies a data directory as a SIGKILL would leave it: what is on disk at this instant.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// Setup values refreshed between two checkpoint intervals reach the checkpoint before any
/// other agent has them: a controller killed right after passing them on, and restarted on
/// what its data directory holds, hands a returning agent those values, not the older ones.
#[tokio::test(start_paused = true)]
async fn refreshed_setup_values_are_checkpointed_before_they_are_passed_on() {
    let dir = tempfile::tempdir().unwrap();
    let grace = Duration::from_secs(15);
    let c = controller_on(dir.path(), grace);
    let mut a1 = join(&c.inner, 1, "a1");
    let mut a2 = join(&c.inner, 2, "a2");
    let h = start(
        c.inner.clone(),
        ready(
            "name: d\ntarget: http://127.0.0.1:1\nsetup_refresh: 10s\nsetup:\n  - name: login\n    \
             http: { method: post, path: /login }\n    extract: { token: { json: /token } }\n\
             phases:\n  - { duration: 30s, arrival_rate: 1 }\n\
             session:\n  - http: { path: /, headers: { authorization: 'Bearer ${setup.token}' } }\n",
        ),
        2,
        Duration::from_secs(30),
    );
    for (rx, id, values) in [
        (&mut a1, "a1", vec!["t-1".to_string()]),
        (&mut a2, "a2", vec![]),
    ] {
        let Out::Assign(a) = next(rx).await else {
            panic!("{id}: no Assign first")
        };
        h.send(RunInput::Ready {
            agent_id: id.into(),
            planned: a.planned_sessions,
            setup_values: values,
        });
    }
    for rx in [&mut a1, &mut a2] {
        let Out::Start(s) = next(rx).await else {
            panic!("no Start")
        };
        assert_eq!(s.setup_values, ["t-1"]);
    }
    // Half-way between two checkpoint intervals, a1 (it ran the setup) refreshes it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    h.send(RunInput::SetupValues {
        agent_id: "a1".into(),
        values: v1::SetupValues {
            run_id: h.run_id.clone(),
            values: vec!["t-2".into()],
            generation: 1,
        },
    });
    let Out::SetupValues(passed) = next(&mut a2).await else {
        panic!("a2 is not passed the refreshed values")
    };
    assert_eq!(
        (passed.generation, passed.values),
        (1, vec!["t-2".to_string()])
    );
    // Killed now: the next controller starts on what is on disk at this instant.
    let killed = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), killed.path());
    let c2 = controller_on(killed.path(), grace);
    let h2 = lock(&c2.inner.runs)
        .get(&h.run_id)
        .cloned()
        .expect("re-adopted");
    let (tx, mut back) = mpsc::channel(16);
    h2.send(RunInput::Reconnected {
        agent_id: "a2".into(),
        conn_id: 9,
        tx,
        heard: Heard::new(),
    });
    let Out::SetupValues(resent) = next(&mut back).await else {
        panic!("a2 is not handed the setup values on its return")
    };
    assert_eq!(
        (resent.generation, resent.values),
        (1, vec!["t-2".to_string()])
    );
}
