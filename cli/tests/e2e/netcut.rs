//! Network cuts between a real agent process and a real controller process, through a TCP
//! proxy this test owns: it can close every link and refuse new ones for a while (a cut the
//! kernel reports), or hold the links open and forward nothing (a blackhole nobody reports).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use stampede_core::report::RunOutcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::{spawn_agent, Proc, Target, BIN, QUIET};

/// A TCP proxy in front of the controller, with a switch for each kind of cut.
struct CutProxy {
    url: String,
    /// Bumped to close every link open now.
    generation: watch::Sender<u64>,
    /// While set, new links are accepted and closed at once.
    refusing: Arc<AtomicBool>,
    /// While set, links stay open but forward nothing.
    blackhole: watch::Sender<bool>,
    links: Arc<AtomicU64>,
}

impl CutProxy {
    async fn start(upstream: String) -> Self {
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
        self.blackhole.send_replace(true);
        tokio::time::sleep(d).await;
        self.blackhole.send_replace(false);
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

/// `stampede controller` on an ephemeral port with a lease of `lease`.
fn controller_with_lease(token: &str, dir: &std::path::Path, lease: &str) -> (Proc, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(BIN)
        .args([
            "controller",
            "--listen",
            "127.0.0.1:0",
            "--token",
            token,
            "--lease",
            lease,
            "--data-dir",
        ])
        .arg(dir)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn controller");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();
    (Proc(child), format!("http://{addr}"))
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
    let _q = QUIET.read().await;
    let target = Target::start(0).await;
    let data = tempfile::tempdir().unwrap();
    let token = "cut-token";
    let (_controller, url) = controller_with_lease(token, data.path(), "3s");
    let proxy = CutProxy::start(url.trim_start_matches("http://").to_string()).await;
    let _agent = spawn_agent(&proxy.url, token, "cut-short");
    let text = crate::scenario(&target.url, "  - { duration: 8s, arrival_rate: 100 }\n", "");
    let (u, t) = (url.clone(), token.to_string());
    let run = tokio::spawn(async move { crate::run(&u, &t, &text, 1).await });

    until_served(&target, 150).await;
    let before = proxy.links.load(Ordering::SeqCst);
    proxy.cut_for(Duration::from_secs(1)).await;
    until_served(&target, 400).await;
    assert!(
        proxy.links.load(Ordering::SeqCst) > before,
        "the agent reconnected"
    );
    proxy.blackhole_for(Duration::from_millis(1500)).await;

    let r = run.await.unwrap();
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert_eq!(r.totals.started, 800, "every planned request was sent");
    assert_eq!(r.totals.failed, 0);
    assert_eq!(
        r.totals.completed,
        target.requests(),
        "the report counts exactly what the target served"
    );
}

/// A cut longer than the lease (1 s): the agent stops its load within the lease, and the run
/// applies its agent-loss policy (`fail`), naming the agent and the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_longer_than_the_lease_stops_the_load_and_applies_the_policy() {
    let _q = QUIET.read().await;
    let target = Target::start(0).await;
    let data = tempfile::tempdir().unwrap();
    let token = "cut-token";
    let (_controller, url) = controller_with_lease(token, data.path(), "1s");
    let proxy = CutProxy::start(url.trim_start_matches("http://").to_string()).await;
    let _agent = spawn_agent(&proxy.url, token, "cut-long");
    let text = crate::scenario(
        &target.url,
        "  - { duration: 30s, arrival_rate: 100 }\n",
        "",
    );
    let (u, t) = (url.clone(), token.to_string());
    let run = tokio::spawn(async move { crate::run(&u, &t, &text, 1).await });

    until_served(&target, 150).await;
    let cut = tokio::spawn(async move {
        proxy.cut_for(Duration::from_secs(6)).await;
        proxy
    });
    // Within the lease (plus the one in flight), the load stops and stays stopped.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let stopped_at = target.requests();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        target.requests(),
        stopped_at,
        "the agent went on loading after its lease lapsed"
    );
    let r = run.await.unwrap();
    assert_eq!(r.outcome, RunOutcome::Failed, "{:?}", r.message);
    let message = r.message.unwrap_or_default();
    assert!(
        message.contains("cut-long") && message.contains("lost"),
        "{message}"
    );
    assert!(r.duration_s < 15.0, "the run did not wait out its 30 s");
    cut.await.unwrap();
}

/// A cut longer than the lease under `tolerate`, with a second agent keeping the run going:
/// the cut agent stops within its lease and is counted lost, then comes back and replays what
/// it had not delivered; the replay is merged exactly once, so the report counts what the
/// target served, and the run ends `incomplete`, naming the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_cut_under_tolerate_merges_the_replay_once() {
    let _q = QUIET.read().await;
    let target = Target::start(0).await;
    let data = tempfile::tempdir().unwrap();
    let token = "cut-token";
    let (_controller, url) = controller_with_lease(token, data.path(), "1s");
    let proxy = CutProxy::start(url.trim_start_matches("http://").to_string()).await;
    let _cut = spawn_agent(&proxy.url, token, "cut-away");
    let _steady = spawn_agent(&url, token, "cut-steady");
    let text = crate::scenario(
        &target.url,
        "  - { duration: 12s, arrival_rate: 100 }\n",
        "on_agent_loss: { tolerate: 60 }\n",
    );
    let (u, t) = (url.clone(), token.to_string());
    let run = tokio::spawn(async move { crate::run(&u, &t, &text, 2).await });

    until_served(&target, 200).await;
    let before = proxy.links.load(Ordering::SeqCst);
    proxy.cut_for(Duration::from_secs(5)).await;
    let r = run.await.unwrap();
    assert!(
        proxy.links.load(Ordering::SeqCst) > before,
        "the cut agent came back"
    );
    assert_eq!(r.outcome, RunOutcome::Incomplete, "{:?}", r.message);
    let message = r.message.clone().unwrap_or_default();
    assert!(message.contains("cut-away"), "{message}");
    // Nothing twice, nothing lost: every request the target answered is in the report, once,
    // besides the few in flight when the lease lapsed (started, abandoned by the stop).
    let served = target.requests();
    let finished = r.totals.completed + r.totals.failed;
    assert!(
        finished <= served && served <= r.totals.started && r.totals.started - finished <= 5,
        "served {served}, report: started {} finished {finished}",
        r.totals.started
    );
    let away = r.agents.iter().find(|a| a.id == "cut-away").unwrap();
    assert!(
        away.completed > 0 && away.completed < 600,
        "the cut agent delivered what it sent before its lease lapsed: {}",
        away.completed
    );
}
