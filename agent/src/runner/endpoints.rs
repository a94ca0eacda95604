//! What each of the scenario's `endpoints:` got in one interval: requests completed and
//! failed, their response times, connections opened. Kept apart from the phase stats (one
//! lock per endpoint, a sparse histogram each) and sent in the same Progress, so a run
//! without `endpoints:` pays nothing.

use std::sync::{Mutex, MutexGuard};

use stampede_core::endpoints::EndpointStats;
use stampede_proto::v1;

/// One interval's figures per endpoint; empty (and never locked) without `endpoints:`.
#[derive(Debug, Default)]
pub struct EndpointRecorder {
    by_endpoint: Box<[Mutex<EndpointStats>]>,
}

impl EndpointRecorder {
    /// A recorder for `n` endpoints (0: records nothing).
    pub fn new(n: usize) -> Self {
        Self {
            by_endpoint: (0..n)
                .map(|_| Mutex::new(EndpointStats::default()))
                .collect(),
        }
    }

    fn lock(&self, i: usize) -> Option<MutexGuard<'_, EndpointStats>> {
        self.by_endpoint
            .get(i)
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Counts a connection opened to endpoint `i`.
    pub fn opened(&self, i: usize) {
        if let Some(mut s) = self.lock(i) {
            s.connections += 1;
        }
    }

    /// Records a request to endpoint `i`: completed in `response_us`, or failed (`None`).
    pub fn record(&self, i: usize, response_us: Option<u64>) {
        if let Some(mut s) = self.lock(i) {
            match response_us {
                Some(us) => {
                    s.completed += 1;
                    s.response.record_n(us, 1);
                }
                None => s.failed += 1,
            }
        }
    }

    /// Takes the interval's figures, leaving every endpoint empty.
    pub fn take(&self) -> Vec<(usize, EndpointStats)> {
        (0..self.by_endpoint.len())
            .filter_map(|i| Some((i, std::mem::take(&mut *self.lock(i)?))))
            .collect()
    }

    /// Takes the interval's figures into a Progress message (nothing without endpoints).
    pub fn attach(&self, msg: &mut v1::AgentMessage) {
        if self.by_endpoint.is_empty() {
            return;
        }
        let rows = self.take();
        if let Some(v1::agent_message::Msg::Progress(p)) = msg.msg.as_mut() {
            match stampede_proto::convert::endpoints_to_wire(&rows) {
                Ok(w) => p.endpoints = w,
                Err(e) => {
                    tracing::error!(error = %e, "dropping an interval's endpoint figures that cannot be encoded")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_is_taken_whole_and_attached() {
        let rec = EndpointRecorder::new(2);
        rec.opened(1);
        rec.record(1, Some(2_000));
        rec.record(1, None);
        rec.record(7, Some(1)); // not an endpoint of the run: ignored
        let mut msg = v1::AgentMessage {
            msg: Some(v1::agent_message::Msg::Progress(v1::Progress::default())),
        };
        rec.attach(&mut msg);
        let Some(v1::agent_message::Msg::Progress(p)) = msg.msg else {
            panic!("not a progress")
        };
        assert_eq!(p.endpoints.len(), 1);
        let e = &p.endpoints[0];
        assert_eq!(
            (e.endpoint, e.completed, e.failed, e.connections_opened),
            (1, 1, 1, 1)
        );
        assert!(rec.take().iter().all(|(_, s)| s.is_empty()), "taken whole");
    }

    /// A closed load of 7 connections, this agent the second of two (connections 4, 5 and
    /// 6 of the run), over two real targets on 127.0.0.1 and 127.0.0.2: the targets accept 2
    /// and 1 connections (global index mod 2), and the agent's per-endpoint figures say the
    /// same. The targets serve from blocking threads, which hold the paused clock still.
    #[tokio::test(start_paused = true)]
    async fn connections_go_to_endpoints_by_global_index() {
        use std::io::{BufRead, BufReader, Write};
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::Arc;
        let listeners =
            ["127.0.0.1:0", "127.0.0.2:0"].map(|a| std::net::TcpListener::bind(a).unwrap());
        let addrs: Vec<String> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().to_string())
            .collect();
        let served: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let accepted = {
            let served = served.clone();
            tokio::task::spawn_blocking(move || {
                let mut counts = [0u64; 2];
                let mut threads = Vec::new();
                for l in &listeners {
                    l.set_nonblocking(true).unwrap();
                }
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
                while counts.iter().sum::<u64>() < 3 && std::time::Instant::now() < deadline {
                    for (i, l) in listeners.iter().enumerate() {
                        if let Ok((s, _)) = l.accept() {
                            s.set_nonblocking(false).unwrap();
                            counts[i] += 1;
                            let served = served.clone();
                            threads.push(std::thread::spawn(move || {
                                let mut reader = BufReader::new(s.try_clone().unwrap());
                                let mut out = s;
                                loop {
                                    let mut line = String::new();
                                    while reader.read_line(&mut line).unwrap_or(0) > 0
                                        && !line.ends_with("\r\n\r\n")
                                    {
                                    }
                                    if !line.ends_with("\r\n\r\n") {
                                        break;
                                    }
                                    served[i].fetch_add(1, Ordering::Relaxed);
                                    if out
                                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                                        .is_err()
                                    {
                                        break;
                                    }
                                }
                            }));
                        }
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                // Every connection answers a few requests before the run is stopped.
                while served
                    .iter()
                    .map(|s| s.load(Ordering::Relaxed))
                    .sum::<u64>()
                    < 9
                    && std::time::Instant::now() < deadline
                {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                counts
            })
        };
        let scenario = format!(
            "name: ep\ntarget: http://{}\nendpoints: [\"{}\", \"{}\"]\nrequest_timeout: 60s\n\
             load: {{ model: closed, connections: 7, duration: 30s }}\n\
             session:\n  - http: {{ path: / }}\n",
            addrs[0], addrs[0], addrs[1]
        );
        let assign = v1::Assign {
            run_id: "r".into(),
            scenario,
            shard_index: 1,
            shard_count: 2,
            seed: 1,
            interval_ms: 1000,
            ..Default::default()
        };
        let cfg = crate::AgentConfig::new("http://127.0.0.1:1", "a");
        let run = crate::assign::prepare(&cfg, &assign, Default::default())
            .await
            .unwrap();
        let (out, mut messages) = tokio::sync::mpsc::unbounded_channel();
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(super::super::execute(
            Arc::new(run),
            tokio::time::Instant::now(),
            out,
            stop.clone(),
        ));
        let counts = accepted.await.unwrap();
        stop.cancel();
        task.await.unwrap();
        assert_eq!(
            counts,
            [2, 1],
            "connections 4 and 6 to the first, 5 to the second"
        );
        let mut acc = stampede_core::endpoints::EndpointAccumulator::default();
        while let Ok(m) = messages.try_recv() {
            if let Some(v1::agent_message::Msg::Progress(p)) = m.msg {
                for (i, s) in stampede_proto::convert::endpoints_from_wire(&p, 2).unwrap() {
                    acc.add(i, &s);
                }
            }
        }
        let rows = acc.report(&addrs);
        assert_eq!((rows[0].connections, rows[1].connections), (2, 1));
        assert!(rows[0].completed >= 2 && rows[1].completed >= 1, "{rows:?}");
        let total: u64 = rows.iter().map(|r| r.completed + r.failed).sum();
        let answered: u64 = served.iter().map(|s| s.load(Ordering::Relaxed)).sum();
        assert!(
            total <= answered && rows[0].p50_us > 0,
            "{rows:?}, {answered} answered"
        );
    }
}
