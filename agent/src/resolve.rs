//! A target given by host name loads every address the name has, and follows them while the
//! run goes on.
//!
//! A name with several A or AAAA records (a headless Service, a DNS round robin) is several
//! backends: the run's connections and sessions are split over its addresses exactly, as over
//! a scenario's `endpoints:`. Every agent sorts the addresses, so all agents agree on which
//! connection goes where. The name is looked up again when its TTL runs out, and at least every
//! [`MAX_REFRESH`]: an address that appears gets its share of the connections at their next
//! session, one that leaves gets no new session and its requests in flight finish.
//!
//! The lookups go through hickory's resolver configured like the system's (`resolv.conf`, with
//! its search domains and `ndots`, and the hosts file), because the system's `getaddrinfo`
//! does not say how long an answer holds. Where the system's configuration cannot be read,
//! `getaddrinfo` (tokio's `lookup_host`) is used, looked up again every [`MAX_REFRESH`].
//! `localhost` always goes through `getaddrinfo`, so that it means what it means to the rest
//! of the machine.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::TokioResolver;
use tokio_util::sync::CancellationToken;

use crate::runner::{Endpoint, EndpointSet};

/// Longest time between two lookups of a target name, whatever its TTL.
pub const MAX_REFRESH: Duration = Duration::from_secs(30);
/// Shortest time between two lookups: a TTL of 0 does not make the agent query in a loop.
pub const MIN_REFRESH: Duration = Duration::from_secs(1);
/// After a failed lookup, the last addresses are kept and the name asked again this soon.
const RETRY: Duration = Duration::from_secs(5);

/// Why a target name has no address to load.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The resolver found nothing for the name (no such name, no answer, no name server).
    #[error("cannot resolve `{name}`")]
    Lookup {
        /// The name looked up.
        name: String,
        /// The resolver's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The name exists but has no A or AAAA record.
    #[error("`{0}` resolved to no address")]
    Empty(String),
}

/// Looks a target name up.
#[derive(Clone)]
pub enum DnsResolver {
    /// hickory, knowing each answer's TTL.
    Dns(Arc<TokioResolver>),
    /// The system's `getaddrinfo`, when its configuration cannot be read for hickory.
    System,
}

impl std::fmt::Debug for DnsResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Dns(_) => "DnsResolver::Dns",
            Self::System => "DnsResolver::System",
        })
    }
}

/// A name's addresses (sorted, without repeats) and how long they hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Every address, with the target's port.
    pub addrs: Vec<SocketAddr>,
    /// When to look the name up again: its TTL, within [`MIN_REFRESH`] and [`MAX_REFRESH`].
    pub refresh: Duration,
}

impl DnsResolver {
    /// The system's resolver configuration, through hickory when it can be read.
    pub fn system() -> Self {
        match TokioResolver::builder_tokio() {
            Ok(mut b) => {
                // An answer is never cached longer than a refresh: a lookup after
                // MAX_REFRESH asks the name server again.
                b.options_mut().positive_max_ttl = Some(MAX_REFRESH);
                match b.build() {
                    Ok(r) => Self::Dns(Arc::new(r)),
                    Err(e) => {
                        tracing::warn!(error = %e, "the system's resolver configuration cannot be used; target names resolve through getaddrinfo, every 30 s");
                        Self::System
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "the system's resolver configuration cannot be read; target names resolve through getaddrinfo, every 30 s");
                Self::System
            }
        }
    }

    /// A resolver that asks only the name server at `server` (UDP), with no hosts file and no
    /// search domains: a test's own name server on loopback.
    pub fn at(server: SocketAddr) -> Self {
        use hickory_resolver::config::{
            ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig,
        };
        let mut conn = ConnectionConfig::udp();
        conn.port = server.port();
        let mut ns = NameServerConfig::udp(server.ip());
        ns.connections = vec![conn];
        let mut b = TokioResolver::builder_with_config(
            ResolverConfig::from_name_servers(vec![ns]),
            TokioRuntimeProvider::default(),
        );
        let opts = b.options_mut();
        opts.use_hosts_file = ResolveHosts::Never;
        opts.positive_max_ttl = Some(MAX_REFRESH);
        opts.cache_size = 0;
        opts.attempts = 1;
        opts.timeout = Duration::from_secs(2);
        match b.build() {
            Ok(r) => Self::Dns(Arc::new(r)),
            Err(_) => Self::System,
        }
    }

    /// Every address of `host` at `port`, sorted, and when to ask again.
    pub async fn lookup(&self, host: &str, port: u16) -> Result<Resolved, ResolveError> {
        let failed = |source: Box<dyn std::error::Error + Send + Sync>| ResolveError::Lookup {
            name: host.to_string(),
            source,
        };
        // `localhost` through the system: hickory answers its AAAA question with ::1 itself
        // (RFC 6761) where the hosts file may list 127.0.0.1 only, and a server listening on
        // 127.0.0.1 would see half the connections go to an address it does not serve.
        let system = matches!(self, Self::System) || is_localhost(host);
        let (mut addrs, refresh): (Vec<SocketAddr>, Duration) = match self {
            Self::Dns(r) if !system => {
                let answer = r.lookup_ip(host).await.map_err(|e| failed(Box::new(e)))?;
                let ttl = answer
                    .valid_until()
                    .saturating_duration_since(std::time::Instant::now());
                (
                    answer.iter().map(|ip| SocketAddr::new(ip, port)).collect(),
                    ttl,
                )
            }
            _ => (
                tokio::net::lookup_host((host, port))
                    .await
                    .map_err(|e| failed(Box::new(e)))?
                    .collect(),
                MAX_REFRESH,
            ),
        };
        addrs.sort_unstable();
        addrs.dedup();
        if addrs.is_empty() {
            return Err(ResolveError::Empty(host.to_string()));
        }
        Ok(Resolved {
            addrs,
            refresh: refresh.clamp(MIN_REFRESH, MAX_REFRESH),
        })
    }
}

/// `localhost`, or a name under it.
fn is_localhost(host: &str) -> bool {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    h == "localhost" || h.ends_with(".localhost")
}

/// A host name of a target URL, or `None` for an IP address (which is looked up nowhere).
pub fn host_name(host: &str) -> Option<&str> {
    (host.parse::<IpAddr>().is_err()).then_some(host)
}

/// The target's endpoint (its transport and TLS client) at another address; `None` for a
/// `unix://` target, which has no address.
pub fn at_address(target: &Endpoint, addr: SocketAddr) -> Option<Endpoint> {
    Some(match target {
        Endpoint::Http(_, tls) => Endpoint::Http(addr, tls.clone()),
        Endpoint::H2(_, tls) => Endpoint::H2(addr, tls.clone()),
        Endpoint::Ws(_, tls) => Endpoint::Ws(addr, tls.clone()),
        Endpoint::Tcp(_) => Endpoint::Tcp(addr),
        Endpoint::Udp(_) => Endpoint::Udp(addr),
        Endpoint::Unix(_) => return None,
    })
}

/// What following a target name needs during the run.
#[derive(Debug)]
pub struct Follow {
    /// The resolver the run looks the name up with.
    pub resolver: DnsResolver,
    /// The target's name.
    pub host: String,
    /// The target's port, given to every address found.
    pub port: u16,
    /// The run's endpoints, replaced at each lookup that finds addresses.
    pub set: Arc<EndpointSet>,
    /// The target's endpoint, re-addressed for each address.
    pub template: Endpoint,
    /// Addresses the agent may not load are left out (and logged).
    pub policy: stampede_core::target_policy::TargetPolicy,
    /// When to look the name up for the first time after the run starts.
    pub first_refresh: Duration,
}

impl Follow {
    /// The endpoints for `addrs`, those the target policy refuses left out and logged.
    pub fn endpoints(&self, addrs: &[SocketAddr]) -> Vec<(SocketAddr, Endpoint)> {
        addrs
            .iter()
            .filter(|a| match self.policy.check(**a) {
                Ok(()) => true,
                Err(why) => {
                    tracing::warn!(host = %self.host, address = %a, %why, "leaving out an address the target policy refuses");
                    false
                }
            })
            .filter_map(|a| Some((*a, at_address(&self.template, *a)?)))
            .collect()
    }
}

/// Looks the name up whenever its answer expires, until `stop`, and replaces the run's
/// endpoints with what it finds. A failed lookup keeps the last addresses.
pub async fn follow(f: Arc<Follow>, stop: CancellationToken) {
    let mut wait = f.first_refresh;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
        match f.resolver.lookup(&f.host, f.port).await {
            Ok(r) => {
                let endpoints = f.endpoints(&r.addrs);
                let before = f.set.addresses();
                if endpoints.iter().map(|(a, _)| *a).ne(before.iter().copied()) {
                    tracing::info!(host = %f.host, addresses = ?r.addrs, "the target's addresses changed");
                }
                if !f.set.replace(endpoints, true) {
                    tracing::warn!(host = %f.host, "more addresses than the run can keep apart; the newest are left out");
                }
                wait = r.refresh;
            }
            Err(e) => {
                tracing::warn!(error = %e, source = ?std::error::Error::source(&e), "keeping the target's last addresses");
                wait = RETRY;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, UdpSocket};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Mutex;

    use hickory_proto::op::{Message, MessageType};
    use hickory_proto::rr::{rdata::A, RData, Record, RecordType};

    /// A name server on loopback, on a thread of its own: every A question gets the current
    /// addresses with `ttl`; AAAA questions get none. Stops when the test drops it.
    struct NameServer {
        addr: SocketAddr,
        answer: Arc<Mutex<Vec<Ipv4Addr>>>,
        done: Arc<AtomicBool>,
    }

    impl NameServer {
        fn start(ips: &[Ipv4Addr], ttl: u32) -> Self {
            let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
            socket
                .set_read_timeout(Some(std::time::Duration::from_millis(50)))
                .unwrap();
            let addr = socket.local_addr().unwrap();
            let answer = Arc::new(Mutex::new(ips.to_vec()));
            let done = Arc::new(AtomicBool::new(false));
            let (a, d) = (answer.clone(), done.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 1500];
                while !d.load(Ordering::Relaxed) {
                    let Ok((n, from)) = socket.recv_from(&mut buf) else {
                        continue;
                    };
                    let Ok(q) = Message::from_vec(&buf[..n]) else {
                        continue;
                    };
                    let mut r = Message::response(q.metadata.id, q.metadata.op_code);
                    r.metadata.recursion_desired = q.metadata.recursion_desired;
                    r.metadata.recursion_available = true;
                    r.metadata.message_type = MessageType::Response;
                    for query in &q.queries {
                        r.add_query(query.clone());
                        if query.query_type() == RecordType::A {
                            for ip in a.lock().unwrap().iter() {
                                r.add_answer(Record::from_rdata(
                                    query.name().clone(),
                                    ttl,
                                    RData::A(A(*ip)),
                                ));
                            }
                        }
                    }
                    let _ = socket.send_to(&r.to_vec().unwrap(), from);
                }
            });
            Self { addr, answer, done }
        }
    }

    impl Drop for NameServer {
        fn drop(&mut self) {
            self.done.store(true, Ordering::Relaxed);
        }
    }

    fn ip(last: u8) -> Ipv4Addr {
        Ipv4Addr::new(127, 0, 0, last)
    }

    /// Every A record of the answer, sorted, at the URL's port; the TTL sets the next lookup
    /// within 1 and 30 s; an empty answer is an error naming the name.
    #[tokio::test]
    async fn a_name_gives_every_address_sorted_with_its_ttl() {
        let ns = NameServer::start(&[ip(3), ip(1), ip(2)], 7);
        let r = DnsResolver::at(ns.addr);
        let got = r.lookup("svc.test", 8080).await.unwrap();
        let want: Vec<SocketAddr> = [1, 2, 3].map(|i| SocketAddr::from((ip(i), 8080))).to_vec();
        assert_eq!(got.addrs, want);
        assert!(
            got.refresh > Duration::from_secs(5) && got.refresh <= Duration::from_secs(7),
            "{:?}",
            got.refresh
        );
        *ns.answer.lock().unwrap() = vec![ip(1)];
        let long = NameServer::start(&[ip(1)], 3_600);
        let got = DnsResolver::at(long.addr)
            .lookup("svc.test", 1)
            .await
            .unwrap();
        assert!(
            got.refresh > Duration::from_secs(29) && got.refresh <= MAX_REFRESH,
            "a long TTL is looked up again after 30 s: {:?}",
            got.refresh
        );
        *long.answer.lock().unwrap() = Vec::new();
        let e = DnsResolver::at(long.addr)
            .lookup("empty.test", 1)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("empty.test"), "{e}");
        // `localhost` is what the system says (here the hosts file), whatever the server.
        let system = DnsResolver::System.lookup("localhost", 9).await.unwrap();
        assert_eq!(
            DnsResolver::at(long.addr)
                .lookup("localhost", 9)
                .await
                .unwrap(),
            system
        );
    }

    /// Real HTTP servers on 127.0.0.1-3 at one port, each counting the connections it
    /// accepts and the requests it answers, until `done`.
    fn serve(port: u16, done: Arc<AtomicBool>) -> (u16, Arc<[AtomicU64; 6]>) {
        use std::io::{BufRead, BufReader, Write};
        let first = std::net::TcpListener::bind((ip(1), port)).unwrap();
        let port = first.local_addr().unwrap().port();
        let listeners = [
            first,
            std::net::TcpListener::bind((ip(2), port)).unwrap(),
            std::net::TcpListener::bind((ip(3), port)).unwrap(),
        ];
        // accepted[0..3], served[3..6]
        let counts: Arc<[AtomicU64; 6]> = Arc::new(Default::default());
        for (i, l) in listeners.into_iter().enumerate() {
            let (counts, done) = (counts.clone(), done.clone());
            l.set_nonblocking(true).unwrap();
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    let Ok((s, _)) = l.accept() else {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                        continue;
                    };
                    s.set_nonblocking(false).unwrap();
                    counts[i].fetch_add(1, Ordering::Relaxed);
                    let counts = counts.clone();
                    std::thread::spawn(move || {
                        let mut reader = BufReader::new(s.try_clone().unwrap());
                        let mut out = s;
                        loop {
                            let mut head = String::new();
                            while reader.read_line(&mut head).unwrap_or(0) > 0
                                && !head.ends_with("\r\n\r\n")
                            {}
                            if !head.ends_with("\r\n\r\n") {
                                break;
                            }
                            counts[3 + i].fetch_add(1, Ordering::Relaxed);
                            if out
                                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                                .is_err()
                            {
                                break;
                            }
                        }
                    });
                }
            });
        }
        (port, counts)
    }

    /// Waits (on a blocking thread, which also holds the paused clock still) until `cond`
    /// holds, for at most 20 s of real time.
    async fn until(cond: impl Fn() -> bool + Send + 'static) -> bool {
        tokio::task::spawn_blocking(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !cond() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            cond()
        })
        .await
        .unwrap()
    }

    /// A closed load of 6 connections at `http://svc.test:P`, whose name first has two
    /// addresses (TTL 1 s), then three. The six connections split 3/3 over the first two;
    /// once the name is looked up again, connection `i` goes to address `i mod 3`: one
    /// connection moves to each of the first two and two open to the third (accepted
    /// 4/4/2), and the endpoint figures name all three addresses. A blocking thread runs
    /// for the whole test, so the paused clock moves only when the test advances it.
    #[tokio::test(start_paused = true)]
    async fn a_run_follows_the_names_addresses() {
        let done = Arc::new(AtomicBool::new(false));
        let hold = {
            let done = done.clone();
            tokio::task::spawn_blocking(move || {
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            })
        };
        let (port, counts) = serve(0, done.clone());
        let ns = NameServer::start(&[ip(2), ip(1)], 1);
        let scenario = format!(
            "name: dns\ntarget: http://svc.test:{port}\nrequest_timeout: 60s\n\
             load: {{ model: closed, connections: 6, duration: 60s }}\n\
             session:\n  - http: {{ path: / }}\n"
        );
        let assign = stampede_proto::v1::Assign {
            run_id: "r".into(),
            scenario,
            shard_index: 0,
            shard_count: 1,
            seed: 1,
            interval_ms: 1000,
            ..Default::default()
        };
        let mut cfg = crate::AgentConfig::new("http://127.0.0.1:1", "a");
        cfg.resolver = Some(DnsResolver::at(ns.addr));
        let run = crate::assign::prepare(&cfg, &assign, Default::default())
            .await
            .unwrap();
        let (out, mut messages) = tokio::sync::mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let task = tokio::spawn(crate::runner::execute(
            Arc::new(run),
            tokio::time::Instant::now(),
            out,
            stop.clone(),
        ));
        let c = counts.clone();
        let both = move || c[3].load(Ordering::Relaxed) >= 30 && c[4].load(Ordering::Relaxed) >= 30;
        assert!(until(both).await, "both addresses answer");
        let accepted = |c: &[AtomicU64; 6]| [0, 1, 2].map(|i| c[i].load(Ordering::Relaxed));
        assert_eq!(accepted(&counts), [3, 3, 0]);
        *ns.answer.lock().unwrap() = vec![ip(3), ip(1), ip(2)];
        tokio::time::advance(Duration::from_millis(1_500)).await;
        let c = counts.clone();
        assert!(
            until(move || c[5].load(Ordering::Relaxed) >= 30).await,
            "the third address gets load"
        );
        stop.cancel();
        task.await.unwrap();
        assert_eq!(accepted(&counts), [4, 4, 2]);
        done.store(true, Ordering::Relaxed);
        hold.await.unwrap();
        let mut acc = stampede_core::endpoints::EndpointAccumulator::default();
        while let Ok(m) = messages.try_recv() {
            if let Some(stampede_proto::v1::agent_message::Msg::Progress(p)) = m.msg {
                for (a, s) in stampede_proto::convert::endpoints_from_wire(&p, &[]).unwrap() {
                    acc.add(p.interval, a, &s);
                }
            }
        }
        let rows = acc.report(&[]);
        let names: Vec<&str> = rows.iter().map(|r| r.address.as_str()).collect();
        let want = [1, 2, 3].map(|i| format!("127.0.0.{i}:{port}"));
        assert_eq!(names, want);
        assert_eq!(
            rows.iter().map(|r| r.connections).collect::<Vec<_>>(),
            [4, 4, 2]
        );
        assert!(
            rows.iter().all(|r| r.completed > 0 && r.failed == 0),
            "{rows:?}"
        );
    }
}
