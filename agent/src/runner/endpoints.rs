//! The endpoints a run loads and what each got in one interval: requests completed and
//! failed, their response times, connections opened.
//!
//! The set is fixed by the scenario's `endpoints:`, or follows a host name's addresses as
//! they are re-resolved (`crate::resolve`). Every address the run has loaded keeps its
//! [`EndpointSlot`] for the whole run, so a request still in flight on an address that left
//! the set is recorded where it was sent. The connection or session with global index `i`
//! goes to the `i mod n`-th current endpoint, in address order, the same on every agent.
//! Figures are kept apart from the phase stats (one lock per endpoint, a sparse histogram
//! each) and sent in the same Progress, keyed by address; a run with one address pays one
//! atomic read per session and per request.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use stampede_core::endpoints::{EndpointStats, MAX_ENDPOINTS};
use stampede_proto::v1;

use super::plan::Endpoint;

/// One address of the run: where to connect, and its figures for the current interval.
#[derive(Debug)]
pub struct EndpointSlot {
    /// Its place among the run's slots (in order of first appearance): what a connection
    /// remembers to notice that the set moved it elsewhere.
    pub id: u32,
    /// The endpoint's address, which a new set is matched against to keep its slot.
    pub address: SocketAddr,
    /// How to open a connection to it.
    pub endpoint: Endpoint,
    stats: Mutex<EndpointStats>,
    /// Its set's `measured` flag: a slot is recorded into wherever it is picked, whichever of
    /// the run's sets (one per target) it belongs to.
    measured: Arc<AtomicBool>,
}

impl EndpointSlot {
    fn lock(&self) -> MutexGuard<'_, EndpointStats> {
        self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn measured(&self) -> bool {
        self.measured.load(Ordering::Relaxed)
    }
}

/// The endpoint a session goes to: `None` sends it to the target's one address.
pub(crate) type Pick = Option<Arc<EndpointSlot>>;

/// The run's endpoints: every slot it has had, and the current ones.
#[derive(Debug, Default)]
pub struct EndpointSet {
    slots: RwLock<Vec<Arc<EndpointSlot>>>,
    current: RwLock<Arc<[Arc<EndpointSlot>]>>,
    /// How many endpoints are current: 0 (nothing to pick, and no lock taken) for a target
    /// that is one address.
    live: AtomicUsize,
    /// Figures are kept per endpoint: the scenario lists its endpoints, or the name has had
    /// several addresses. One address of a name is the target itself, and costs no lock.
    measured: Arc<AtomicBool>,
}

impl EndpointSet {
    /// A fixed set: the scenario's `endpoints:`, in its order (empty: none).
    pub fn fixed(endpoints: Vec<(SocketAddr, Endpoint)>) -> Self {
        let set = Self::default();
        let listed = !endpoints.is_empty();
        set.replace(endpoints, false);
        set.measured.store(listed, Ordering::Relaxed);
        set
    }

    /// Makes `endpoints` the current set, in the order given (the caller sorts resolved
    /// addresses, so every agent agrees). Addresses seen before keep their slot; an empty
    /// list leaves the set as it was. Past [`MAX_ENDPOINTS`] slots, new addresses are left
    /// out (false).
    pub fn replace(&self, endpoints: Vec<(SocketAddr, Endpoint)>, several: bool) -> bool {
        if endpoints.is_empty() {
            return true;
        }
        let mut all = true;
        let mut slots = self.slots.write().unwrap_or_else(|p| p.into_inner());
        let mut current = Vec::with_capacity(endpoints.len());
        for (address, endpoint) in endpoints {
            if let Some(s) = slots.iter().find(|s| s.address == address) {
                current.push(s.clone());
            } else if slots.len() < MAX_ENDPOINTS {
                let s = Arc::new(EndpointSlot {
                    id: slots.len() as u32,
                    address,
                    endpoint,
                    stats: Mutex::new(EndpointStats::default()),
                    measured: self.measured.clone(),
                });
                slots.push(s.clone());
                current.push(s);
            } else {
                all = false;
            }
        }
        drop(slots);
        if several && current.len() > 1 {
            self.measured.store(true, Ordering::Relaxed);
        }
        let n = current.len();
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = current.into();
        self.live.store(n, Ordering::Relaxed);
        all
    }

    /// The current endpoints' addresses, in their order.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|s| s.address)
            .collect()
    }

    /// How many endpoints are current (0 for a target that is one address).
    pub fn len(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// No endpoint is current: sessions go to the target's one address.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The endpoint of the connection or session with global index `index`: the
    /// `index mod n`-th current one.
    pub fn pick(&self, index: u64) -> Pick {
        if self.live.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let current = self.current.read().unwrap_or_else(|p| p.into_inner());
        let i = stampede_core::endpoints::endpoint_of(index, current.len());
        current.get(i).cloned()
    }

    /// Keeps figures per address from now on, even while the set holds one address: a run
    /// with several targets reports each target's addresses, and a Service's pods are rows
    /// of the report even when there is one.
    pub fn measure(&self) {
        self.measured.store(true, Ordering::Relaxed);
    }

    /// Counts a connection opened to `to`.
    pub fn opened(&self, to: &Pick) {
        count_open(to);
    }

    /// Records a request sent to `to`: completed in `response_us`, or failed (`None`).
    pub fn record(&self, to: &Pick, response_us: Option<u64>) {
        count_request(to, response_us);
    }

    fn measured(&self) -> bool {
        self.measured.load(Ordering::Relaxed)
    }

    /// Takes the interval's figures, leaving every endpoint empty.
    pub fn take(&self) -> Vec<(SocketAddr, EndpointStats)> {
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        slots
            .iter()
            .map(|s| (s.address, std::mem::take(&mut *s.lock())))
            .collect()
    }

    /// Takes the interval's figures into a Progress message (nothing when no figures are
    /// kept).
    pub fn attach(&self, msg: &mut v1::AgentMessage) {
        attach([self], msg);
    }
}

/// Every endpoint set of a run, one per target: what the recorder counts into and sends.
/// A pick carries its slot, so counting never looks the set up.
#[derive(Debug, Default)]
pub struct EndpointSets(pub Vec<Arc<EndpointSet>>);

impl EndpointSets {
    /// Counts a connection opened to `to`.
    pub fn opened(&self, to: &Pick) {
        count_open(to);
    }

    /// Records a request sent to `to`: completed in `response_us`, or failed (`None`).
    pub fn record(&self, to: &Pick, response_us: Option<u64>) {
        count_request(to, response_us);
    }

    /// Takes the interval's figures of every set into a Progress message.
    pub fn attach(&self, msg: &mut v1::AgentMessage) {
        attach(self.0.iter().map(|s| &**s), msg);
    }
}

/// Takes the interval's figures of every set of the run (one per target) into a Progress
/// message: the rows of the sets that keep figures, together.
pub(crate) fn attach<'a>(
    sets: impl IntoIterator<Item = &'a EndpointSet>,
    msg: &mut v1::AgentMessage,
) {
    let mut rows = Vec::new();
    let mut any = false;
    for set in sets.into_iter().filter(|s| s.measured()) {
        any = true;
        rows.extend(set.take());
    }
    if !any {
        return;
    }
    if let Some(v1::agent_message::Msg::Progress(p)) = msg.msg.as_mut() {
        match stampede_proto::convert::endpoints_to_wire(&rows) {
            Ok(w) => p.endpoints = w,
            Err(e) => {
                tracing::error!(error = %e, "dropping an interval's endpoint figures that cannot be encoded")
            }
        }
    }
}

/// Counts a connection opened to `to`, in the slot the pick carries (when its set keeps
/// figures).
fn count_open(to: &Pick) {
    if let Some(s) = to.as_ref().filter(|s| s.measured()) {
        s.lock().connections += 1;
    }
}

/// Counts a request sent to `to`: completed in `response_us`, or failed (`None`).
fn count_request(to: &Pick, response_us: Option<u64>) {
    if let Some(s) = to.as_ref().filter(|s| s.measured()) {
        let mut s = s.lock();
        match response_us {
            Some(us) => {
                s.completed += 1;
                s.response.record_n(us, 1);
            }
            None => s.failed += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(a: &str) -> (SocketAddr, Endpoint) {
        let addr: SocketAddr = a.parse().unwrap();
        (addr, Endpoint::Tcp(addr))
    }

    #[test]
    fn an_interval_is_taken_whole_and_attached() {
        let set = EndpointSet::fixed(vec![at("127.0.0.1:1"), at("127.0.0.2:1")]);
        assert_eq!(set.len(), 2);
        let second = set.pick(1);
        set.opened(&second);
        set.record(&second, Some(2_000));
        set.record(&second, None);
        set.record(&None, Some(1)); // the target's one address: not an endpoint
        let mut msg = v1::AgentMessage {
            msg: Some(v1::agent_message::Msg::Progress(v1::Progress::default())),
        };
        set.attach(&mut msg);
        let Some(v1::agent_message::Msg::Progress(p)) = msg.msg else {
            panic!("not a progress")
        };
        assert_eq!(p.endpoints.len(), 1);
        let e = &p.endpoints[0];
        assert_eq!(
            (
                e.address.as_str(),
                e.completed,
                e.failed,
                e.connections_opened
            ),
            ("127.0.0.2:1", 1, 1, 1)
        );
        assert!(set.take().iter().all(|(_, s)| s.is_empty()), "taken whole");
    }

    /// A name's set: one address keeps no figures; two make the split by index; a set
    /// that drops an address keeps its slot (a request in flight there is still recorded),
    /// and an address that comes back gets its old slot again.
    #[test]
    fn a_followed_set_moves_connections_and_keeps_slots() {
        let set = EndpointSet::default();
        assert!(set.pick(0).is_none(), "nothing current: the target itself");
        set.replace(vec![at("127.0.0.1:1")], true);
        let only = set.pick(5);
        set.record(&only, Some(1));
        assert!(
            set.take().iter().all(|(_, s)| s.is_empty()),
            "one address: no figures"
        );
        set.replace(vec![at("127.0.0.1:1"), at("127.0.0.2:1")], true);
        let ids: Vec<u32> = (0..4).map(|i| set.pick(i).unwrap().id).collect();
        assert_eq!(ids, [0, 1, 0, 1]);
        let leaving = set.pick(1);
        set.replace(vec![at("127.0.0.1:1"), at("127.0.0.3:1")], true);
        set.record(&leaving, Some(7));
        assert_eq!(set.pick(1).unwrap().address, at("127.0.0.3:1").0);
        let rows = set.take();
        assert_eq!(rows.len(), 3, "every address the run had keeps its slot");
        assert_eq!((rows[1].0, rows[1].1.completed), (at("127.0.0.2:1").0, 1));
        set.replace(vec![at("127.0.0.2:1")], true);
        assert_eq!(
            set.pick(9).unwrap().id,
            1,
            "an address back in its old slot"
        );
        set.replace(Vec::new(), true);
        assert_eq!(set.len(), 1, "an empty answer keeps the last set");
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
                for (a, s) in stampede_proto::convert::endpoints_from_wire(&p, &[]).unwrap() {
                    acc.add(p.interval, a, &s);
                }
            }
        }
        let listed: Vec<SocketAddr> = addrs.iter().map(|a| a.parse().unwrap()).collect();
        let rows = acc.report(&listed);
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
