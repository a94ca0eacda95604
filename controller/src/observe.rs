//! Scraping the target's own resources while a run goes on (`observe:`): each source's
//! Prometheus text endpoint at T0, every interval, and once more at the end, with a plain
//! HTTP/1.0 GET (a few KiB, one connection each time). The arithmetic is
//! `stampede_core::observe`'s.

use std::sync::{Arc, Mutex};
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

/// One scrape's outcome for the checkpoint: the source's index and what it found, `None` when
/// it could not be read at all.
pub(crate) type Observation = (usize, Option<Scrape>);

/// What a run's scrapes found so far, shared by the scraping task and the run's driver.
#[derive(Default)]
struct Observed {
    seen: Vec<(String, Vec<Scrape>)>,
    failed: u64,
    /// Scrapes not yet handed to the checkpoint.
    fresh: Vec<Observation>,
}

impl Observed {
    fn add(&mut self, (i, scrape): Observation) {
        match scrape {
            Some(s) => {
                if s.sample.cpu_seconds.is_none() {
                    self.failed += 1;
                }
                if let Some((_, scrapes)) = self.seen.get_mut(i) {
                    scrapes.push(s);
                }
            }
            None => self.failed += 1,
        }
    }
}

/// The scraping task of one run.
pub(crate) struct Observer {
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
    observed: Arc<Mutex<Observed>>,
}

impl Observer {
    /// Starts scraping `sources` at `t0`, then every `interval`, after what a previous
    /// controller scraped (`before`, a re-adopted run's checkpoint); nothing without sources.
    pub(crate) fn start(
        sources: &[ObserveSource],
        t0: Instant,
        interval: Duration,
        before: Vec<Observation>,
    ) -> Self {
        let stop = CancellationToken::new();
        let mut observed = Observed {
            seen: sources
                .iter()
                .map(|s| (s.prometheus.clone(), Vec::new()))
                .collect(),
            ..Observed::default()
        };
        for o in before {
            observed.add(o);
        }
        let observed = Arc::new(Mutex::new(observed));
        let task = (!sources.is_empty()).then(|| {
            let urls = sources.iter().map(|s| s.prometheus.clone()).collect();
            tokio::spawn(observe(
                urls,
                t0,
                interval.max(Duration::from_millis(100)),
                stop.clone(),
                observed.clone(),
            ))
        });
        Self {
            stop,
            task,
            observed,
        }
    }

    /// The scrapes since the last call, for the checkpoint.
    pub(crate) fn take_fresh(&self) -> Vec<Observation> {
        std::mem::take(&mut crate::lock(&self.observed).fresh)
    }

    /// The cores the sources used between their last two scrapes (`None` before two).
    pub(crate) fn latest_cores(&self) -> Option<f64> {
        let o = crate::lock(&self.observed);
        stampede_core::observe::latest_cores(o.seen.iter().map(|(_, s)| s.as_slice()))
    }

    /// Stops scraping after one last scrape and returns what was seen (`None` without
    /// sources).
    pub(crate) async fn finish(self) -> Option<TargetResources> {
        self.stop.cancel();
        self.task?.await.ok()?;
        let o = crate::lock(&self.observed);
        Some(resources(&o.seen, o.failed))
    }
}

async fn observe(
    urls: Vec<String>,
    t0: Instant,
    interval: Duration,
    stop: CancellationToken,
    observed: Arc<Mutex<Observed>>,
) {
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
        for (i, url) in urls.iter().enumerate() {
            let at_s = Instant::now().saturating_duration_since(t0).as_secs_f64();
            let scrape = scrape(url).await.map(|text| Scrape {
                at_s,
                sample: parse_process_metrics(&text),
            });
            let mut o = crate::lock(&observed);
            o.add((i, scrape));
            o.fresh.push((i, scrape));
        }
        if last {
            break;
        }
    }
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
