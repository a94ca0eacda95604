//! `endpoints: service`: the ready pods behind a Kubernetes Service as the target's endpoints.
//!
//! A ClusterIP Service is one virtual address, and kube-proxy balances connections, not
//! requests: long-lived connections pin to whichever pods they landed on and the report cannot
//! say which pod is slow. The controller reads the Service's EndpointSlices instead (through
//! the Kubernetes API, in the controller crate) and hands the ready pod addresses to the
//! agents, which split their connections over them exactly as over a listed `endpoints:`.
//!
//! This module is the pure part: which Service and namespace the target URL names, which
//! EndpointSlice port the URL's port is, the ready set the slices add up to, and what changed
//! between two sets. The slices come in as plain values, so the logic is tested without a
//! cluster.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use crate::endpoints::MAX_ENDPOINTS;
use crate::protocol::Transport;
use crate::target::Target;

/// The label every EndpointSlice of a Service carries, with the Service's name.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A Service the target URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRef {
    /// The Service's name (a DNS label).
    pub name: String,
    /// Its namespace when the URL gives one (`NAME.NAMESPACE.svc`); otherwise the run's.
    pub namespace: Option<String>,
    /// The Service port the URL connects to (not the pods' port).
    pub port: u16,
}

/// Why `endpoints: service` cannot follow the target; each says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// A host that is not `NAME`, `NAME.NAMESPACE.svc` or `NAME.NAMESPACE.svc.cluster.local`.
    #[error(
        "`{0}` does not name a Service: write the target's host as NAME, NAME.NAMESPACE.svc or \
         NAME.NAMESPACE.svc.cluster.local"
    )]
    Host(String),
    /// A name that is not a DNS label.
    #[error(
        "`{0}` is not a Service or namespace name (a DNS label: at most 63 lower-case letters, \
         digits and `-`, starting with a letter and ending with a letter or digit)"
    )]
    Label(String),
    /// A `unix://` target: a socket path, no Service.
    #[error("a unix:// target is a socket path, not a Service")]
    Unix,
    /// The Service has no port with the URL's number.
    #[error("the Service {service} has no port {port} (its ports: {ports})")]
    NoPort {
        /// The Service's name.
        service: String,
        /// The port the target's URL gives.
        port: u16,
        /// The ports the Service has, for the message (`none` when it has none).
        ports: String,
    },
}

impl ServiceRef {
    /// The Service the target's host names, with the URL's port.
    pub fn from_target(target: &Target) -> Result<Self, ServiceError> {
        let port = target.port().ok_or(ServiceError::Unix)?;
        if target.transport() == Transport::Unix {
            return Err(ServiceError::Unix);
        }
        let host = target.host().trim_end_matches('.');
        let labels: Vec<&str> = host.split('.').collect();
        let (name, namespace) = match labels.as_slice() {
            [name] => (*name, None),
            [name, ns, "svc"] | [name, ns, "svc", "cluster", "local"] => (*name, Some(*ns)),
            _ => return Err(ServiceError::Host(target.host().to_string())),
        };
        for l in [Some(name), namespace].into_iter().flatten() {
            if !is_dns_label(l) {
                return Err(ServiceError::Label(l.to_string()));
            }
        }
        Ok(Self {
            name: name.to_string(),
            namespace: namespace.map(str::to_string),
            port,
        })
    }

    /// The Service's namespace: the URL's, or else `run_namespace`.
    pub fn namespace_or<'a>(&'a self, run_namespace: &'a str) -> &'a str {
        self.namespace.as_deref().unwrap_or(run_namespace)
    }

    /// The label selector of the Service's EndpointSlices.
    pub fn slice_selector(&self) -> String {
        format!("{SERVICE_NAME_LABEL}={}", self.name)
    }
}

/// RFC 1123 label, lower case (what Kubernetes accepts for Service and namespace names).
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// One port of a Service (`spec.ports[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    /// Required when the Service has several ports; EndpointSlices name their ports by it.
    pub name: Option<String>,
    /// The port the Service exposes (`port`, not `targetPort`).
    pub port: u16,
}

/// The name of the EndpointSlice port that the Service port `port` forwards to: EndpointSlice
/// ports carry the Service port's name (empty for a Service's one unnamed port) and the pods'
/// number, whatever the `targetPort` (a number or a container port's name) was.
pub fn slice_port_name(
    service: &str,
    ports: &[ServicePort],
    port: u16,
) -> Result<String, ServiceError> {
    ports
        .iter()
        .find(|p| p.port == port)
        .map(|p| p.name.clone().unwrap_or_default())
        .ok_or_else(|| ServiceError::NoPort {
            service: service.to_string(),
            port,
            ports: if ports.is_empty() {
                "none".into()
            } else {
                ports
                    .iter()
                    .map(|p| match &p.name {
                        Some(n) if !n.is_empty() => format!("{} ({n})", p.port),
                        _ => p.port.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        })
}

/// An EndpointSlice, reduced to what the set needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Slice {
    /// Its endpoints, ready or not.
    pub endpoints: Vec<SliceEndpoint>,
    /// Its ports, with the pods' numbers.
    pub ports: Vec<SlicePort>,
}

/// One endpoint of a slice: usually one pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SliceEndpoint {
    /// As the slice writes them (FQDN slices' names are not addresses and are skipped).
    pub addresses: Vec<String>,
    /// `conditions.ready`; unset means ready (the API's own reading).
    pub ready: Option<bool>,
    /// The pod it is (`targetRef` of kind Pod).
    pub pod: Option<String>,
}

/// One port of a slice.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlicePort {
    /// The Service port's name, which the slice's ports carry (empty or unset for a Service's one
    /// unnamed port).
    pub name: Option<String>,
    /// The pods' port number; unset when the slice gives none.
    pub port: Option<i32>,
}

/// A ready backend of the Service: where to connect and which pod answers there.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServiceEndpoint {
    /// The pod's address and port, where agents connect.
    pub address: SocketAddr,
    /// The pod behind it, when the slice names one.
    pub pod: Option<String>,
}

/// The ready endpoints of one Service port, slice by slice (a Service's endpoints are spread
/// over several slices that change one at a time).
#[derive(Debug, Clone, Default)]
pub struct ServiceSlices {
    port_name: String,
    slices: BTreeMap<String, Vec<ServiceEndpoint>>,
}

impl ServiceSlices {
    /// Follows the EndpointSlice port named `port_name` (see [`slice_port_name`]).
    pub fn new(port_name: impl Into<String>) -> Self {
        Self {
            port_name: port_name.into(),
            slices: BTreeMap::new(),
        }
    }

    /// The slice `name` was created or changed.
    pub fn apply(&mut self, name: &str, slice: &Slice) {
        let port = slice
            .ports
            .iter()
            .find(|p| p.name.as_deref().unwrap_or("") == self.port_name)
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0);
        let ready = match port {
            None => Vec::new(),
            Some(port) => slice
                .endpoints
                .iter()
                .filter(|e| e.ready != Some(false))
                .flat_map(|e| {
                    e.addresses.iter().filter_map(move |a| {
                        let ip: IpAddr = a.parse().ok()?;
                        Some(ServiceEndpoint {
                            address: SocketAddr::new(ip, port),
                            pod: e.pod.clone(),
                        })
                    })
                })
                .collect(),
        };
        self.slices.insert(name.to_string(), ready);
    }

    /// The slice `name` was deleted.
    pub fn delete(&mut self, name: &str) {
        self.slices.remove(name);
    }

    /// Forgets every slice (a watch that starts over lists them all again).
    pub fn clear(&mut self) {
        self.slices.clear();
    }

    /// The ready endpoints of every slice, sorted by address (every agent splits the same
    /// way), each address once, at most [`MAX_ENDPOINTS`].
    pub fn ready(&self) -> Vec<ServiceEndpoint> {
        let mut by: BTreeMap<SocketAddr, Option<String>> = BTreeMap::new();
        for e in self.slices.values().flatten() {
            let pod = by.entry(e.address).or_default();
            if pod.is_none() {
                pod.clone_from(&e.pod);
            }
        }
        by.into_iter()
            .take(MAX_ENDPOINTS)
            .map(|(address, pod)| ServiceEndpoint { address, pod })
            .collect()
    }
}

/// What changed between two ready sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    /// Endpoints now ready that were not.
    pub added: Vec<ServiceEndpoint>,
    /// Endpoints no longer ready.
    pub removed: Vec<ServiceEndpoint>,
}

impl Diff {
    /// The same set: nothing to send.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }
}

/// The endpoints of `new` not in `old`, and of `old` not in `new` (an address whose pod
/// changed is both).
pub fn diff(old: &[ServiceEndpoint], new: &[ServiceEndpoint]) -> Diff {
    Diff {
        added: new.iter().filter(|e| !old.contains(e)).cloned().collect(),
        removed: old.iter().filter(|e| !new.contains(e)).cloned().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(url: &str) -> Result<ServiceRef, ServiceError> {
        ServiceRef::from_target(&Target::parse(url).unwrap())
    }

    #[test]
    fn the_target_host_names_the_service() {
        let s = svc("http://web:8080/api").unwrap();
        assert_eq!(
            (s.name.as_str(), s.namespace.as_deref(), s.port),
            ("web", None, 8080)
        );
        assert_eq!(s.namespace_or("load"), "load");
        assert_eq!(s.slice_selector(), "kubernetes.io/service-name=web");
        let s = svc("http://web.shop.svc:80").unwrap();
        assert_eq!((s.namespace.as_deref(), s.port), (Some("shop"), 80));
        assert_eq!(s.namespace_or("load"), "shop");
        let s = svc("grpc://api.shop.svc.cluster.local:9000").unwrap();
        assert_eq!((s.name.as_str(), s.namespace_or("x")), ("api", "shop"));
        assert_eq!(svc("http://web").unwrap().port, 80, "the scheme's default");
        for bad in [
            "http://web.shop:80",
            "http://web.shop.svc.example:80",
            "http://10.0.0.1:80",
        ] {
            assert!(
                matches!(svc(bad), Err(ServiceError::Host(_))),
                "{bad}: {:?}",
                svc(bad)
            );
        }
        assert!(matches!(svc("http://Web:80"), Err(ServiceError::Label(l)) if l == "Web"));
        assert!(matches!(
            svc("http://web.-x.svc:80"),
            Err(ServiceError::Label(_))
        ));
        assert_eq!(svc("unix:///tmp/s"), Err(ServiceError::Unix));
        let why = svc("http://a.b:1").unwrap_err().to_string();
        assert!(why.contains("NAME.NAMESPACE.svc"), "{why}");
    }

    #[test]
    fn the_url_port_is_the_service_port_and_names_the_slice_port() {
        let ports = [
            ServicePort {
                name: Some("http".into()),
                port: 80,
            },
            ServicePort {
                name: Some("admin".into()),
                port: 9000,
            },
        ];
        assert_eq!(slice_port_name("web", &ports, 80).unwrap(), "http");
        assert_eq!(slice_port_name("web", &ports, 9000).unwrap(), "admin");
        let e = slice_port_name("web", &ports, 8080)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "the Service web has no port 8080 (its ports: 80 (http), 9000 (admin))"
        );
        let one = [ServicePort {
            name: None,
            port: 80,
        }];
        assert_eq!(slice_port_name("web", &one, 80).unwrap(), "");
    }

    fn ep(addr: &str, ready: Option<bool>, pod: &str) -> SliceEndpoint {
        SliceEndpoint {
            addresses: vec![addr.into()],
            ready,
            pod: Some(pod.into()),
        }
    }

    fn port(name: Option<&str>, port: i32) -> SlicePort {
        SlicePort {
            name: name.map(str::to_string),
            port: Some(port),
        }
    }

    fn addrs(set: &[ServiceEndpoint]) -> Vec<String> {
        set.iter()
            .map(|e| format!("{}={}", e.address, e.pod.as_deref().unwrap_or("-")))
            .collect()
    }

    /// Ready and unknown count, not-ready does not; the port is the named one's; several
    /// slices add up, sorted by address; a deleted slice takes its endpoints away.
    #[test]
    fn slices_add_up_to_the_ready_set() {
        let mut s = ServiceSlices::new("http");
        s.apply(
            "web-abc",
            &Slice {
                endpoints: vec![
                    ep("10.0.0.9", Some(true), "web-1"),
                    ep("10.0.0.3", None, "web-2"),
                    ep("10.0.0.4", Some(false), "web-3"),
                ],
                ports: vec![port(Some("admin"), 9001), port(Some("http"), 8080)],
            },
        );
        s.apply(
            "web-def",
            &Slice {
                endpoints: vec![
                    ep("10.0.0.5", Some(true), "web-4"),
                    ep("web.example", Some(true), "fqdn"),
                ],
                ports: vec![port(Some("http"), 8080)],
            },
        );
        let first = s.ready();
        assert_eq!(
            addrs(&first),
            [
                "10.0.0.3:8080=web-2",
                "10.0.0.5:8080=web-4",
                "10.0.0.9:8080=web-1"
            ]
        );
        // The not-ready pod becomes ready, the other slice goes away.
        s.apply(
            "web-abc",
            &Slice {
                endpoints: vec![
                    ep("10.0.0.9", Some(true), "web-1"),
                    ep("10.0.0.3", None, "web-2"),
                    ep("10.0.0.4", Some(true), "web-3"),
                ],
                ports: vec![port(Some("http"), 8080)],
            },
        );
        s.delete("web-def");
        let second = s.ready();
        let d = diff(&first, &second);
        assert_eq!(addrs(&d.added), ["10.0.0.4:8080=web-3"]);
        assert_eq!(addrs(&d.removed), ["10.0.0.5:8080=web-4"]);
        assert!(diff(&second, &s.ready()).is_empty());
        // A slice without the port contributes nothing; an unnamed port is "".
        let mut other = ServiceSlices::new("grpc");
        other.apply(
            "x",
            &Slice {
                endpoints: vec![ep("10.0.0.1", None, "p")],
                ports: vec![port(Some("http"), 80)],
            },
        );
        assert!(other.ready().is_empty());
        let mut unnamed = ServiceSlices::new("");
        unnamed.apply(
            "x",
            &Slice {
                endpoints: vec![ep("fd00::1", None, "p")],
                ports: vec![port(None, 80), port(Some("x"), 0)],
            },
        );
        assert_eq!(addrs(&unnamed.ready()), ["[fd00::1]:80=p"]);
        unnamed.clear();
        assert!(unnamed.ready().is_empty());
    }

    /// `endpoints: service` parses beside the list form, and its errors name the field.
    #[test]
    fn the_scenario_takes_a_service_or_a_list() {
        let yaml = |target: &str, endpoints: &str| {
            format!(
                "name: t\ntarget: {target}\nendpoints: {endpoints}\nload: {{ model: closed, connections: 3, duration: 1s }}\nsession:\n  - http: {{ path: / }}\n"
            )
        };
        let s = crate::Scenario::from_yaml(&yaml("http://web.shop.svc:80", "service")).unwrap();
        assert!(s.endpoints.is_service() && s.endpoints.list().is_empty());
        assert!(serde_json::to_string(&s)
            .unwrap()
            .contains("\"endpoints\":\"service\""));
        let l = crate::Scenario::from_yaml(&yaml("http://x:80", "[\"127.0.0.1:80\"]")).unwrap();
        assert_eq!(l.endpoints.list(), ["127.0.0.1:80"]);
        let e = crate::Scenario::from_yaml(&yaml("http://web:80", "pods"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("endpoints") && e.contains("`pods` is not a source"),
            "{e}"
        );
        let e = crate::Scenario::from_yaml(&yaml("http://web.shop:80", "service"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("target") && e.contains("does not name a Service"),
            "{e}"
        );
        let e = crate::Scenario::from_yaml(&yaml("unix:///tmp/x", "service"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("endpoints"), "{e}");
    }

    /// The same address in two slices (a slice being replaced) is one endpoint.
    #[test]
    fn an_address_in_two_slices_counts_once() {
        let mut s = ServiceSlices::new("");
        let slice = Slice {
            endpoints: vec![ep("10.0.0.1", None, "a")],
            ports: vec![port(None, 80)],
        };
        s.apply("one", &slice);
        s.apply("two", &slice);
        assert_eq!(addrs(&s.ready()), ["10.0.0.1:80=a"]);
    }
}
