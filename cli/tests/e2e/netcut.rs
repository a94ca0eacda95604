//! Network cuts between a real agent process and a real controller process, through a TCP
//! proxy this test owns: it can close every link and refuse new ones for a while (a cut the
//! kernel reports), or hold the links open and forward nothing (a blackhole nobody reports).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use stampede_core::report::{Report, RunOutcome};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::{spawn_agent, spawn_controller_with, Proc, Target};

/// A TCP proxy in front of the controller, with a switch for each kind of cut.
pub(crate) struct CutProxy {
    pub(crate) url: String,
    /// Bumped to close every link open now.
    generation: watch::Sender<u64>,
    /// While set, new links are accepted and closed at once.
    refusing: Arc<AtomicBool>,
    /// While set, links stay open but forward nothing.
    blackhole: watch::Sender<bool>,
    links: Arc<AtomicU64>,
}

impl CutProxy {
    pub(crate) async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (generation, gen_rx) = watch::channel(0u64);
        let (blackhole, hole_rx) = watch::channel(false);
        let refusing = Arc::new(AtomicBool::new(false));
        let links = Arc::new(AtomicU64::new(0));
        let (r, l) = (refusing.clone(), links.clone());
        tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                if r.load(Ordering::SeqCst) {
                    drop(down);
                    continue;
                }
                let Ok(up) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                l.fetch_add(1, Ordering::SeqCst);
                let (mut gen_rx, hole_rx) = (gen_rx.clone(), hole_rx.clone());
                let born = *gen_rx.borrow_and_update();
                tokio::spawn(async move {
                    let (dr, dw) = down.into_split();
                    let (ur, uw) = up.into_split();
                    tokio::select! {
                        _ = pump(dr, uw, hole_rx.clone()) => {}
                        _ = pump(ur, dw, hole_rx) => {}
                        _ = gen_rx.wait_for(|g| *g != born) => {}
                    }
                });
            }
        });
        Self {
            url,
            generation,
            refusing,
            blackhole,
            links,
        }
    }

    /// Closes every link and refuses new ones for `d`.
    async fn cut_for(&self, d: Duration) {
        self.refusing.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
        tokio::time::sleep(d).await;
        self.refusing.store(false, Ordering::SeqCst);
    }

    /// Holds every link open and forwards nothing for `d`.
    async fn blackhole_for(&self, d: Duration) {
        self.set_blackhole(true);
        tokio::time::sleep(d).await;
        self.set_blackhole(false);
    }

    /// Holds every link open and forwards nothing (`true`), or forwards again. What a link
    /// read meanwhile is held, and dropped if the link closes first.
    pub(crate) fn set_blackhole(&self, on: bool) {
        self.blackhole.send_replace(on);
    }
}

/// Copies `from` to `to`, holding the bytes it read while the blackhole is on.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut hole: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if hole.wait_for(|on| !*on).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

const TOKEN: &str = "cut-token";

/// What every cut test starts from: a target, a controller process with lease `lease`, and the
/// proxy in front of it.
struct Rig {
    target: Target,
    url: String,
    proxy: CutProxy,
    _controller: Proc,
    _data: tempfile::TempDir,
}

impl Rig {
    async fn start(lease: &str) -> Self {
        Self::start_with(lease, &[]).await
    }

    /// As [`Rig::start`], with `extra` arguments for the controller.
    async fn start_with(lease: &str, extra: &[&str]) -> Self {
        let target = Target::start(0).await;
        let data = tempfile::tempdir().unwrap();
        // Cuts the kernel reports are ridden out within a restart grace: these tests are
        // about the lease alone.
        let mut args = vec!["--lease", lease, "--restart-grace", "0s"];
        args.extend_from_slice(extra);
        let (controller, url) = spawn_controller_with("127.0.0.1:0", TOKEN, data.path(), &args);
        let proxy = CutProxy::start(url.trim_start_matches("http://").to_string()).await;
        Self {
            target,
            url,
            proxy,
            _controller: controller,
            _data: data,
        }
    }

    /// Runs `phases` (and `extra`) against the target on `agents` agents, in the background.
    fn run(&self, phases: &str, extra: &str, agents: u32) -> JoinHandle<Report> {
        let text = crate::scenario(&self.target.url, phases, extra);
        let url = self.url.clone();
        tokio::spawn(async move { crate::run(&url, TOKEN, &text, agents).await })
    }
}

/// Waits (bounded) until the target has served `n` requests.
async fn until_served(target: &Target, n: u64) {
    for _ in 0..400 {
        if target.requests() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the target served only {} of {n}", target.requests());
}

/// Cuts shorter than the lease (3 s) — every link closed and refused for 1 s, then every link
/// held open forwarding nothing for 1.5 s — and the agent resumes: the run succeeds, every
/// planned request was sent, and the report counts exactly what the target served, no
/// interval lost or merged twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cuts_shorter_than_the_lease_resume_and_lose_nothing() {
    let rig = Rig::start("3s").await;
    let _agent = spawn_agent(&rig.proxy.url, TOKEN, "cut-short");
    let run = rig.run("  - { duration: 8s, arrival_rate: 100 }\n", "", 1);

    until_served(&rig.target, 150).await;
    let before = rig.proxy.links.load(Ordering::SeqCst);
    rig.proxy.cut_for(Duration::from_secs(1)).await;
    until_served(&rig.target, 400).await;
    assert!(
        rig.proxy.links.load(Ordering::SeqCst) > before,
        "the agent reconnected"
    );
    rig.proxy.blackhole_for(Duration::from_millis(1500)).await;

    let r = run.await.unwrap();
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert_eq!(r.totals.started, 800, "every planned request was sent");
    assert_eq!(r.totals.failed, 0);
    assert_eq!(
        r.totals.completed,
        rig.target.requests(),
        "the report counts exactly what the target served"
    );
}

/// A cut longer than the lease (1 s): the agent stops its load within the lease, and the run
/// applies its agent-loss policy (`fail`), naming the agent and the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_longer_than_the_lease_stops_the_load_and_applies_the_policy() {
    let rig = Rig::start("1s").await;
    let _agent = spawn_agent(&rig.proxy.url, TOKEN, "cut-long");
    let run = rig.run("  - { duration: 30s, arrival_rate: 100 }\n", "", 1);

    until_served(&rig.target, 150).await;
    // Within the lease (plus the one in flight), the load stops and stays stopped.
    let stays_stopped = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let stopped_at = rig.target.requests();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            rig.target.requests(),
            stopped_at,
            "the agent went on loading after its lease lapsed"
        );
    };
    tokio::join!(rig.proxy.cut_for(Duration::from_secs(6)), stays_stopped);
    let r = run.await.unwrap();
    assert_eq!(r.outcome, RunOutcome::Failed, "{:?}", r.message);
    let message = r.message.unwrap_or_default();
    assert!(
        message.contains("cut-long") && message.contains("lost"),
        "{message}"
    );
    assert!(r.duration_s < 15.0, "the run did not wait out its 30 s");
}

/// A cut longer than the lease under `tolerate`, with a second agent keeping the run going:
/// the cut agent stops within its lease and is counted lost, then comes back and replays what
/// it had not delivered; the replay is merged exactly once, so the report counts what the
/// target served, and the run ends `incomplete`, naming the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_cut_under_tolerate_merges_the_replay_once() {
    let rig = Rig::start("1s").await;
    let _cut = spawn_agent(&rig.proxy.url, TOKEN, "cut-away");
    let _steady = spawn_agent(&rig.url, TOKEN, "cut-steady");
    let run = rig.run(
        "  - { duration: 12s, arrival_rate: 100 }\n",
        "on_agent_loss: { tolerate: 60 }\n",
        2,
    );

    until_served(&rig.target, 200).await;
    let before = rig.proxy.links.load(Ordering::SeqCst);
    rig.proxy.cut_for(Duration::from_secs(5)).await;
    let r = run.await.unwrap();
    assert!(
        rig.proxy.links.load(Ordering::SeqCst) > before,
        "the cut agent came back"
    );
    assert_eq!(r.outcome, RunOutcome::Incomplete, "{:?}", r.message);
    let message = r.message.clone().unwrap_or_default();
    assert!(message.contains("cut-away"), "{message}");
    // Nothing twice, nothing lost: every request the target answered is in the report, once,
    // besides the few in flight when the lease lapsed (started, abandoned by the stop).
    crate::assert_counts_what_was_served(&r, rig.target.requests(), 5);
    let away = r.agents.iter().find(|a| a.id == "cut-away").unwrap();
    assert!(
        away.completed > 0 && away.completed < 600,
        "the cut agent delivered what it sent before its lease lapsed: {}",
        away.completed
    );
}

/// A link held cut (open, forwarding nothing) past the lease and lifted only after the run's
/// decision: the agent's load stops within its lease, the run fails under `fail` naming the
/// agent, and stays open for the lost agent's books; once the link is back the agent replays
/// what it sent after the cut and its Done, and the report counts every request the target
/// served, each started one completed, failed or interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_cut_lifted_after_the_decision_keeps_every_request_on_the_books() {
    let rig = Rig::start_with("1s", &["--lost-agent-wait", "30s"]).await;
    let _agent = spawn_agent(&rig.proxy.url, TOKEN, "cut-held");
    let run = rig.run("  - { duration: 30s, arrival_rate: 100 }\n", "", 1);

    until_served(&rig.target, 150).await;
    rig.proxy.set_blackhole(true);
    // Silent past its silence limit and lease (7 s with a 1 s lease and interval), the agent
    // is lost and the policy decides; without the wait for its books the run would end there.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        !run.is_finished(),
        "the run waits for the lost agent's books"
    );
    rig.proxy.set_blackhole(false);

    let r = run.await.unwrap();
    assert_eq!(r.outcome, RunOutcome::Failed, "{:?}", r.message);
    let message = r.message.clone().unwrap_or_default();
    assert!(
        message.contains("cut-held") && message.contains("lost"),
        "{message}"
    );
    let t = &r.totals;
    let accounted = t.completed + t.failed + t.interrupted;
    assert_eq!(t.started, accounted, "{t:?}");
    let served = rig.target.requests();
    assert!(
        served <= accounted,
        "the target served {served}, the report accounts for {accounted}"
    );
    let agent = r.agents.iter().find(|a| a.id == "cut-held").unwrap();
    assert!(agent.lost && agent.unreported.is_none(), "{agent:?}");
    assert!(r.duration_s < 25.0, "the run did not wait out its 30 s");
}

/// The same held cut, never lifted, with no wait for the lost agent's books: the report is
/// written at the decision and names the gap, where the agent's books end and at most how
/// many requests it may have sent after them, which covers what the target served beyond
/// the books.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_cut_never_lifted_names_the_gap_on_the_report() {
    let rig = Rig::start_with("1s", &["--lost-agent-wait", "0s"]).await;
    let _agent = spawn_agent(&rig.proxy.url, TOKEN, "cut-gone");
    let run = rig.run("  - { duration: 30s, arrival_rate: 100 }\n", "", 1);

    until_served(&rig.target, 150).await;
    rig.proxy.set_blackhole(true);
    let r = run.await.unwrap();
    assert_eq!(r.outcome, RunOutcome::Failed, "{:?}", r.message);
    let agent = r.agents.iter().find(|a| a.id == "cut-gone").unwrap();
    let gap = agent.unreported.expect("the gap is on the report");
    let most = gap.requests_max.expect("an open load's bound");
    let served = rig.target.requests();
    let t = &r.totals;
    let accounted = t.completed + t.failed + t.interrupted;
    assert!(
        served > accounted && served <= accounted + most,
        "served {served}, on the books {accounted}, named as possibly missing {most}"
    );
    assert!(gap.books_end_s > 0.0 && gap.window_s > 0.0, "{gap:?}");
    let message = r.message.unwrap_or_default();
    assert!(
        message.contains("cut-gone") && message.contains("its books end at"),
        "{message}"
    );
}
