//! A fleet of simulated agents, for measuring one controller against a thousand agents
//! (`bench/controller-scale.sh`). Each simulated agent opens its own HTTP/2 connection and
//! agent stream, registers with a distinct id, answers clock pings, answers `Assign` with
//! `Ready`, waits for T0, then sends one `Progress` per interval with non-empty histograms of
//! a realistic request mix, a final `Progress` and `Done` — exactly what a real agent sends,
//! without generating any load. It never connects to the scenario's target.
//!
//! Samples are encoded once at start-up (a pool the agents cycle through), so the fleet
//! itself costs little CPU. At the end it prints what it sent:
//! `fleet agents=N progress=P requests_completed=C requests_failed=F response_count=R
//! service_count=S step_response_count=T lease_max_gap_ms=G`.
//!
//! ```text
//! cargo build --release -p stampede-agent --example fleet
//! fleet --controller http://127.0.0.1:7000 --agents 1000 [--prefix fleet] [--timeout-s 600]
//! ```
//! The token comes from `STAMPEDE_AGENT_TOKEN` (else `STAMPEDE_TOKEN`, for a controller with one
//! shared token), as a real agent's does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use stampede_core::stats::Stats;
use stampede_proto::convert::sample_to_wire;
use stampede_proto::v1::{self, agent_message::Msg as Out, controller_message::Msg as In};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::metadata::MetadataValue;

#[derive(Default)]
struct Totals {
    progress: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    response: AtomicU64,
    service: AtomicU64,
    step_response: AtomicU64,
    registered: AtomicU64,
    done: AtomicU64,
    lease_max_gap_ms: AtomicU64,
}

/// One pre-encoded interval sample and what it counts.
struct Sample {
    wire: v1::PhaseSample,
    completed: u64,
    failed: u64,
    response: u64,
    service: u64,
    step_response: u64,
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 11
    }
    /// Roughly log-normal around 3 ms with a long tail.
    fn latency_us(&mut self) -> u64 {
        let u = (self.next() % 10_000) as f64 / 10_000.0;
        let v = (self.next() % 10_000) as f64 / 10_000.0;
        let z = (u + v - 1.0) * 3.0;
        (3_000.0 * (z * 1.3).exp()).clamp(200.0, 400_000.0) as u64
    }
}

/// A second of one agent: `sessions` sessions of `steps` requests, a few failures.
fn build_sample(rng: &mut Lcg, steps: usize, sessions: u64) -> Sample {
    let mut s = Stats::with_steps(steps);
    s.counters.sessions_planned = sessions;
    for _ in 0..sessions {
        s.record_start(1 + rng.next() % 800);
        let mut ok = true;
        for step in 0..steps {
            s.counters.requests_started += 1;
            if rng.next().is_multiple_of(200) {
                s.record_failure(step, "status");
                ok = false;
            } else {
                let r = rng.latency_us();
                s.record_success(step, r, r * 9 / 10 + 1);
            }
        }
        if ok {
            s.counters.sessions_completed += 1;
        } else {
            s.counters.sessions_failed += 1;
        }
    }
    s.counters.bytes_sent = s.counters.requests_started * 120;
    s.counters.bytes_received = s.counters.requests_completed * 300;
    #[allow(clippy::expect_used)]
    let wire = sample_to_wire(0, &s).expect("encodes");
    Sample {
        completed: s.counters.requests_completed,
        failed: s.counters.requests_failed,
        response: s.response.len(),
        service: s.service.len(),
        step_response: s.steps.iter().map(|st| st.response.len()).sum(),
        wire,
    }
}

fn unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

struct Args {
    controller: String,
    agents: usize,
    prefix: String,
    timeout: Duration,
    steps: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        controller: String::new(),
        agents: 1000,
        prefix: "fleet".into(),
        timeout: Duration::from_secs(600),
        steps: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--controller" => a.controller = v()?,
            "--agents" => a.agents = v()?.parse().map_err(|e| format!("--agents: {e}"))?,
            "--prefix" => a.prefix = v()?,
            "--steps" => a.steps = v()?.parse().map_err(|e| format!("--steps: {e}"))?,
            "--timeout-s" => {
                a.timeout =
                    Duration::from_secs(v()?.parse().map_err(|e| format!("--timeout-s: {e}"))?)
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.controller.is_empty() {
        return Err("--controller URL is required".into());
    }
    Ok(a)
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fleet: {e}");
            std::process::exit(2);
        }
    };
    #[allow(clippy::expect_used)]
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    std::process::exit(rt.block_on(fleet(a)));
}

async fn fleet(a: Args) -> i32 {
    let mut rng = Lcg(7);
    let pool: Arc<Vec<Sample>> = Arc::new(
        (0..32)
            .map(|k| build_sample(&mut rng, a.steps, 10 + k % 7))
            .collect(),
    );
    let token = std::env::var("STAMPEDE_AGENT_TOKEN")
        .or_else(|_| std::env::var("STAMPEDE_TOKEN"))
        .ok();
    let totals = Arc::new(Totals::default());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..a.agents {
        let (pool, totals, token) = (pool.clone(), totals.clone(), token.clone());
        let (url, id) = (a.controller.clone(), format!("{}-{i:05}", a.prefix));
        tasks.spawn(async move {
            let r = agent(&url, &id, i, token.as_deref(), pool, totals).await;
            if let Err(e) = &r {
                eprintln!("fleet: agent {id}: {e}");
            }
            r
        });
        // Do not open a thousand connections in the same millisecond.
        if i % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let deadline = Instant::now() + a.timeout;
    let mut announced = false;
    let mut failed = 0;
    loop {
        if !announced && totals.registered.load(Ordering::Relaxed) == a.agents as u64 {
            println!("fleet registered {}", a.agents);
            announced = true;
        }
        tokio::select! {
            r = tasks.join_next() => match r {
                None => break,
                Some(Ok(Ok(()))) => {}
                Some(_) => failed += 1,
            },
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = tokio::time::sleep_until(deadline) => {
                eprintln!("fleet: timed out");
                return 1;
            }
        }
    }
    let t = &totals;
    println!(
        "fleet agents={} progress={} requests_completed={} requests_failed={} response_count={} service_count={} step_response_count={} lease_max_gap_ms={}",
        t.done.load(Ordering::Relaxed),
        t.progress.load(Ordering::Relaxed),
        t.completed.load(Ordering::Relaxed),
        t.failed.load(Ordering::Relaxed),
        t.response.load(Ordering::Relaxed),
        t.service.load(Ordering::Relaxed),
        t.step_response.load(Ordering::Relaxed),
        t.lease_max_gap_ms.load(Ordering::Relaxed),
    );
    i32::from(failed > 0)
}

fn msg(m: Out) -> v1::AgentMessage {
    v1::AgentMessage { msg: Some(m) }
}

/// One simulated agent: a real agent stream, no load.
async fn agent(
    url: &str,
    id: &str,
    n: usize,
    token: Option<&str>,
    pool: Arc<Vec<Sample>>,
    totals: Arc<Totals>,
) -> Result<(), String> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(5))
        .keep_alive_timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (tx, rx) = mpsc::channel::<v1::AgentMessage>(64);
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    if let Some(t) = token {
        let v = MetadataValue::try_from(format!("Bearer {t}")).map_err(|e| e.to_string())?;
        request.metadata_mut().insert("authorization", v);
    }
    let register = v1::Register {
        agent_id: id.to_string(),
        version: "fleet".into(),
        capacity: 100_000,
        hist_spec: Some(stampede_core::hist::SPEC.into()),
        ephemeral_ports: Some(v1::PortRange {
            low: 32768,
            high: 60999,
        }),
        source_addresses: 1,
        ..v1::Register::default()
    };
    tx.send(msg(Out::Register(register)))
        .await
        .map_err(|_| "stream closed")?;
    let mut inbound = v1::agent_service_client::AgentServiceClient::new(channel)
        .attach(request)
        .await
        .map_err(|e| format!("attach: {e}"))?
        .into_inner();
    let mut interval = Duration::from_secs(1);
    let mut duration = Duration::from_secs(60);
    let mut last_lease: Option<Instant> = None;
    let mut sender: Option<tokio::task::JoinHandle<()>> = None;
    let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
    loop {
        let m = tokio::select! {
            m = inbound.next() => m,
            _ = done_rx.recv() => {
                totals.done.fetch_add(1, Ordering::Relaxed);
                // Let the controller read Done before the stream closes.
                tokio::time::sleep(Duration::from_millis(500)).await;
                return Ok(());
            }
        };
        let m = match m {
            Some(Ok(m)) => m,
            Some(Err(s)) => return Err(format!("stream: {s}")),
            None => return Err("controller closed the stream".into()),
        };
        let Some(m) = m.msg else { continue };
        match m {
            In::Registered(_) => {
                totals.registered.fetch_add(1, Ordering::Relaxed);
            }
            // The fleet keeps no replay buffer: acknowledgements need no answer; its
            // scenarios read no data.
            In::Ack(_)
            | In::DataRows(_)
            | In::SetupValues(_)
            | In::TakeOverSetup(_)
            | In::ServiceEndpoints(_) => {}
            In::ClockPing(p) => {
                let now = unix_ns();
                let _ = tx
                    .send(msg(Out::ClockPong(v1::ClockPong {
                        seq: p.seq,
                        t1_unix_ns: p.t1_unix_ns,
                        t2_unix_ns: now,
                        t3_unix_ns: now,
                    })))
                    .await;
            }
            In::Assign(asg) => {
                interval = Duration::from_millis(asg.interval_ms.max(1));
                duration = scenario_duration(&asg.scenario).unwrap_or(duration);
                let _ = tx
                    .send(msg(Out::Ready(v1::Ready {
                        run_id: asg.run_id.clone(),
                        planned_sessions: asg.planned_sessions,
                        // The fleet's scenarios have no setup steps.
                        setup_values: Vec::new(),
                    })))
                    .await;
                last_lease = None;
            }
            In::Start(st) => {
                let (tx, pool, totals, done_tx) =
                    (tx.clone(), pool.clone(), totals.clone(), done_tx.clone());
                let delay =
                    Duration::from_nanos(u64::try_from(st.t0_unix_ns - unix_ns()).unwrap_or(0));
                let t0 = Instant::now() + delay;
                sender = Some(tokio::spawn(async move {
                    send_run(st.run_id, t0, interval, duration, n, &tx, &pool, &totals).await;
                    let _ = done_tx.send(()).await;
                }));
            }
            In::Lease(_) => {
                let now = Instant::now();
                if let Some(prev) = last_lease {
                    let gap =
                        u64::try_from(now.duration_since(prev).as_millis()).unwrap_or(u64::MAX);
                    totals.lease_max_gap_ms.fetch_max(gap, Ordering::Relaxed);
                }
                last_lease = Some(now);
            }
            In::Abort(a) => {
                if let Some(s) = sender.take() {
                    s.abort();
                }
                return Err(format!("run aborted: {}", a.reason));
            }
        }
    }
}

/// The run's planned duration from the scenario text the controller assigned.
fn scenario_duration(text: &str) -> Option<Duration> {
    let s = stampede_core::scenario::Scenario::from_yaml(text).ok()?;
    Some(s.duration())
}

#[allow(clippy::too_many_arguments)]
async fn send_run(
    run_id: String,
    t0: Instant,
    interval: Duration,
    duration: Duration,
    n: usize,
    tx: &mpsc::Sender<v1::AgentMessage>,
    pool: &[Sample],
    totals: &Totals,
) {
    let intervals = (duration.as_nanos() / interval.as_nanos().max(1)) as u64;
    let send = |k: u64| {
        let s = &pool[(n * 7 + k as usize) % pool.len()];
        totals.progress.fetch_add(1, Ordering::Relaxed);
        totals.completed.fetch_add(s.completed, Ordering::Relaxed);
        totals.failed.fetch_add(s.failed, Ordering::Relaxed);
        totals.response.fetch_add(s.response, Ordering::Relaxed);
        totals.service.fetch_add(s.service, Ordering::Relaxed);
        totals
            .step_response
            .fetch_add(s.step_response, Ordering::Relaxed);
        msg(Out::Progress(v1::Progress {
            run_id: run_id.clone(),
            interval: k,
            samples: vec![s.wire.clone()],
            open_connections: 1,
            resources: None,
            endpoints: Vec::new(),
            failure_samples: Vec::new(),
            stage_connects: Vec::new(),
            debug: Vec::new(),
            ..Default::default()
        }))
    };
    // Spread the agents over the interval like real ones (their clocks and T0 differ a bit).
    let skew = interval.mul_f64((n % 97) as f64 / 97.0 * 0.2);
    for k in 0..intervals {
        tokio::time::sleep_until(t0 + interval * (k as u32 + 1) + skew).await;
        if tx.send(send(k)).await.is_err() {
            return;
        }
    }
    // The final flush, then Done.
    let _ = tx.send(send(intervals)).await;
    let _ = tx
        .send(msg(Out::Done(v1::Done {
            run_id,
            last_interval: intervals,
            stopped_early: false,
            reason: String::new(),
        })))
        .await;
}
