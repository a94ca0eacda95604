//! Scraping the target's own resources while a run goes on (`observe:`): each source's
//! Prometheus text endpoint at T0, every interval, and once more at the end, with a plain
//! HTTP/1.0 GET (a few KiB, one connection each time). The arithmetic is
//! `stampede_core::observe`'s.

use std::time::Duration;

use stampede_core::observe::{
    parse_process_metrics, resources, scrape_url, ObserveSource, Scrape, TargetResources,
    MAX_SCRAPE_BYTES,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Most a scrape may take: a source that hangs costs one failed scrape, not the interval.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// The scraping task of one run.
pub(crate) struct Observer {
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<TargetResources>>,
}

impl Observer {
    /// Starts scraping `sources` at `t0`, then every `interval`; nothing without sources.
    pub(crate) fn start(sources: &[ObserveSource], t0: Instant, interval: Duration) -> Self {
        let stop = CancellationToken::new();
        let task = (!sources.is_empty()).then(|| {
            let sources = sources.to_vec();
            let stop = stop.clone();
            tokio::spawn(observe(
                sources,
                t0,
                interval.max(Duration::from_millis(100)),
                stop,
            ))
        });
        Self { stop, task }
    }

    /// Stops scraping after one last scrape and returns what was seen (`None` without
    /// sources).
    pub(crate) async fn finish(self) -> Option<TargetResources> {
        self.stop.cancel();
        self.task?.await.ok()
    }
}

async fn observe(
    sources: Vec<ObserveSource>,
    t0: Instant,
    interval: Duration,
    stop: CancellationToken,
) -> TargetResources {
    let mut seen: Vec<(String, Vec<Scrape>)> = sources
        .iter()
        .map(|s| (s.prometheus.clone(), Vec::new()))
        .collect();
    let mut failed = 0u64;
    tokio::select! {
        _ = tokio::time::sleep_until(t0) => {}
        _ = stop.cancelled() => {}
    }
    let mut tick = tokio::time::interval_at(t0.max(Instant::now()), interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let last = tokio::select! {
            _ = tick.tick() => false,
            _ = stop.cancelled() => true,
        };
        for (url, scrapes) in &mut seen {
            let at_s = Instant::now().saturating_duration_since(t0).as_secs_f64();
            match scrape(url).await {
                Some(text) => {
                    let sample = parse_process_metrics(&text);
                    if sample.cpu_seconds.is_none() {
                        failed += 1;
                    }
                    scrapes.push(Scrape { at_s, sample });
                }
                None => failed += 1,
            }
        }
        if last {
            break;
        }
    }
    resources(&seen, failed)
}

/// One GET of `url`'s text, `None` when it cannot be read in time.
pub(crate) async fn scrape(url: &str) -> Option<String> {
    let u = scrape_url(url).ok()?;
    let get = async {
        let mut s = tokio::net::TcpStream::connect(&u.authority).await.ok()?;
        let host = u.authority.clone();
        let req = format!(
            "GET {} HTTP/1.0\r\nHost: {host}\r\nAccept: text/plain\r\nConnection: close\r\n\r\n",
            u.path
        );
        s.write_all(req.as_bytes()).await.ok()?;
        let mut body = Vec::new();
        (&mut s)
            .take(MAX_SCRAPE_BYTES as u64)
            .read_to_end(&mut body)
            .await
            .ok()?;
        let text = String::from_utf8_lossy(&body);
        let (head, rest) = text.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.")
            .then(|| head.split_whitespace().nth(1) == Some("200"))
            .filter(|ok| *ok)?;
        Some(rest.to_string())
    };
    tokio::time::timeout(SCRAPE_TIMEOUT, get).await.ok()?
}
