//! Which addresses an agent may load. A load generator inside a cluster can flood anything its
//! pods reach, so some addresses are refused unless the operator opens them: link-local and
//! cloud metadata addresses, the controller itself, and (in a cluster) the Kubernetes API and
//! the kubelet ports. Operators narrow it with an allow list and widen the deny list with
//! their own CIDRs. The agent checks the address it really connects to (after name
//! resolution), so a name that resolves to a refused address is refused too.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

/// The kubelet's ports (authenticated and read-only), refused on every address in a cluster.
pub const KUBELET_PORTS: [u16; 2] = [10250, 10255];

/// One deny rule: a network (and optionally one port), with the reason the refusal names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenyRule {
    /// The network refused; `None` refuses the port on every address.
    pub net: Option<IpNet>,
    /// The one port refused; `None` refuses every port of `net`.
    pub port: Option<u16>,
    /// Why, in the refusal's message (`cloud metadata (fd00:ec2::254)`).
    pub why: String,
}

/// The target policy of an agent (and the controller's early check of literal addresses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetPolicy {
    /// Empty: any address not denied. Otherwise only these networks.
    pub allow: Vec<IpNet>,
    /// Refused whatever the allow list says; the defaults first, then the controller's and the
    /// operator's rules.
    pub deny: Vec<DenyRule>,
    /// `unix://` targets: only for agents on the same machine as the CLI (`--local`).
    pub allow_unix: bool,
}

impl Default for TargetPolicy {
    /// Link-local (169.254.0.0/16, fe80::/10, which hold most cloud metadata services) and
    /// the metadata and host addresses clouds put elsewhere are refused: fd00:ec2::254 (AWS,
    /// IPv6), fd20:ce::254 (Google Cloud, IPv6), 100.100.100.200 (Alibaba Cloud) and
    /// 168.63.129.16 (Azure's host: DNS, DHCP, health probes, the VM agent's wire server).
    fn default() -> Self {
        let rule = |cidr: &str, why: &str| DenyRule {
            net: cidr.parse().ok(),
            port: None,
            why: why.to_string(),
        };
        Self {
            allow: Vec::new(),
            deny: vec![
                rule(
                    "169.254.0.0/16",
                    "link-local and cloud metadata (169.254.0.0/16)",
                ),
                rule("fe80::/10", "link-local (fe80::/10)"),
                rule("fd00:ec2::254/128", "cloud metadata (fd00:ec2::254)"),
                rule("fd20:ce::254/128", "cloud metadata (fd20:ce::254)"),
                rule("100.100.100.200/32", "cloud metadata (100.100.100.200)"),
                rule("168.63.129.16/32", "cloud host address (168.63.129.16)"),
            ],
            allow_unix: false,
        }
    }
}

impl TargetPolicy {
    /// Also refuses `addr` exactly (the controller's own address, the Kubernetes API).
    pub fn deny_endpoint(&mut self, addr: SocketAddr, why: impl Into<String>) {
        self.deny.push(DenyRule {
            net: Some(IpNet::from(addr.ip())),
            port: Some(addr.port()),
            why: why.into(),
        });
    }

    /// Also refuses the port of `addr`, a server on this host (the controller), on every
    /// address that reaches it from here: `addr` itself, and when it is a loopback or
    /// unspecified address, that port on every loopback and unspecified address of both
    /// families (a server bound to `0.0.0.0:P` answers on `127.0.0.2:P` and `[::1]:P` too).
    pub fn deny_local_server(&mut self, addr: SocketAddr, why: impl Into<String>) {
        let why = why.into();
        self.deny_endpoint(addr, why.clone());
        let ip = canonical(addr.ip());
        if !(ip.is_loopback() || ip.is_unspecified()) {
            return;
        }
        let local = ["127.0.0.0/8", "0.0.0.0/32", "::1/128", "::/128"];
        for net in local.iter().filter_map(|n| n.parse::<IpNet>().ok()) {
            self.deny.push(DenyRule {
                net: Some(net),
                port: Some(addr.port()),
                why: why.clone(),
            });
        }
    }

    /// Also refuses a port on every address (the kubelet's).
    pub fn deny_port(&mut self, port: u16, why: impl Into<String>) {
        self.deny.push(DenyRule {
            net: None,
            port: Some(port),
            why: why.into(),
        });
    }

    /// Also refuses a network (`--deny-target`).
    pub fn deny_net(&mut self, net: IpNet) {
        self.deny.push(DenyRule {
            net: Some(net),
            port: None,
            why: format!("denied by --deny-target {net}"),
        });
    }

    /// Opens a network that the default rules refuse, and (with any allow entry) limits
    /// targets to the allowed networks (`--allow-target`).
    pub fn allow_net(&mut self, net: IpNet) {
        self.deny.retain(|r| {
            r.port.is_some()
                || r.net
                    .is_none_or(|d| !(net.contains(&d) || d.contains(&net.network())))
        });
        self.allow.push(net);
    }

    /// Checks the address a run will really connect to; the error names it and the rule.
    pub fn check(&self, addr: SocketAddr) -> Result<(), TargetPolicyError> {
        let ip = canonical(addr.ip());
        if let Some(r) = self.deny.iter().find(|r| {
            r.net.is_none_or(|n| n.contains(&ip)) && r.port.is_none_or(|p| p == addr.port())
        }) {
            return Err(TargetPolicyError::Denied {
                addr,
                why: r.why.clone(),
            });
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|n| n.contains(&ip)) {
            return Err(TargetPolicyError::NotAllowed {
                addr,
                allowed: self.allow.clone(),
            });
        }
        Ok(())
    }
}

/// Why an address may not be loaded; the message names the address and the rule, and how to
/// open it, because the operator who reads it is rarely the one who wrote the policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetPolicyError {
    /// A deny rule covers the address.
    #[error("target {addr} is refused by the target policy: {why} (open it with --allow-target on the agents)")]
    Denied {
        /// The address refused.
        addr: SocketAddr,
        /// The reason of the deny rule that covers it (`link-local (fe80::/10)`).
        why: String,
    },
    /// An allow list is set and the address is outside it.
    #[error("target {addr} is refused by the target policy: not in the allowed networks ({})", join(.allowed))]
    NotAllowed {
        /// The address refused.
        addr: SocketAddr,
        /// The networks the allow list holds.
        allowed: Vec<IpNet>,
    },
}

fn join(nets: &[IpNet]) -> String {
    nets.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A scenario's literal target that every agent would refuse; the message names the field
/// (`target`, `workloads[1].target`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {error}")]
pub struct LiteralTargetError {
    /// The field that names the target (`target`, `workloads[1].target`).
    pub field: String,
    /// Why every agent would refuse it.
    pub error: TargetPolicyError,
}

/// Checks a target written as a literal address against the default policy, which every
/// agent applies unless its operator opened the address: `validate`, `plan` and the
/// controller's submission call it, so such a target is refused with the same message before
/// anything is sent. A name is left to the agents, which check the address it resolves to.
pub fn check_literal(target: &crate::target::Target) -> Result<(), LiteralTargetError> {
    match crate::ports::endpoint(target).and_then(|e| e.parse::<SocketAddr>().ok()) {
        Some(addr) => TargetPolicy::default()
            .check(addr)
            .map_err(|error| LiteralTargetError {
                field: "target".into(),
                error,
            }),
        None => Ok(()),
    }
}

/// [`check_literal`] for every target a scenario loads (its own and its workloads'); the
/// error names the field: `workloads[1].target: ...`.
pub fn check_literals(scenario: &crate::Scenario) -> Result<(), LiteralTargetError> {
    for (field, t) in scenario.targets() {
        check_literal(t).map_err(|e| LiteralTargetError { field, ..e })?;
    }
    Ok(())
}

/// An IPv6 form of an IPv4 address, checked as the IPv4 address it reaches: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, but `::` and `::1` stay themselves) and
/// the NAT64 well-known prefix (`64:ff9b::a.b.c.d`, RFC 6052), which a NAT64 gateway
/// forwards to the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else {
        return ip;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let embedded = || IpAddr::V4(std::net::Ipv4Addr::from(v6.to_bits() as u32));
    match s {
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => ip,
        [0, 0, 0, 0, 0, 0, _, _] | [0x64, 0xff9b, 0, 0, 0, 0, _, _] => embedded(),
        _ => ip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn metadata_and_link_local_are_refused_by_default() {
        let p = TargetPolicy::default();
        for bad in [
            "169.254.169.254:80",
            "[fd00:ec2::254]:80",
            "[fe80::1]:443",
            "[::ffff:169.254.169.254]:80",
            "[fd20:ce::254]:80",
            "100.100.100.200:80",
            "168.63.129.16:32526",
            // NAT64 and IPv4-compatible forms reach the IPv4 address they embed.
            "[64:ff9b::a9fe:a9fe]:80",
            "[64:ff9b::169.254.169.254]:80",
            "[::a9fe:a9fe]:80",
            "[::100.100.100.200]:80",
        ] {
            let e = p.check(sa(bad)).unwrap_err().to_string();
            assert!(e.contains("refused by the target policy"), "{e}");
        }
        assert!(p.check(sa("127.0.0.1:8080")).is_ok());
        assert!(p.check(sa("198.18.0.1:80")).is_ok());
        for ok in [
            "[::1]:80",
            "[64:ff9b::c612:1]:80",
            "[::c612:1]:80",
            "[2001:db8::1]:80",
        ] {
            assert!(p.check(sa(ok)).is_ok(), "{ok}");
        }
        // A deny rule on an IPv4 network covers its IPv6 forms; an allow list too.
        let mut q = TargetPolicy::default();
        q.deny_net("198.18.0.0/15".parse().unwrap());
        assert!(q.check(sa("[64:ff9b::c612:1]:80")).is_err());
        assert_eq!(
            canonical("::".parse().unwrap()),
            "::".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn the_controller_api_and_kubelet_are_refused_and_lists_apply() {
        let mut p = TargetPolicy::default();
        p.deny_endpoint(sa("10.96.0.1:443"), "the Kubernetes API");
        p.deny_port(10250, "the kubelet");
        assert!(p
            .check(sa("10.96.0.1:443"))
            .unwrap_err()
            .to_string()
            .contains("Kubernetes API"));
        assert!(p.check(sa("10.96.0.1:80")).is_ok());
        assert!(p
            .check(sa("10.1.2.3:10250"))
            .unwrap_err()
            .to_string()
            .contains("kubelet"));
        p.deny_net("10.9.0.0/16".parse().unwrap());
        assert!(p.check(sa("10.9.3.4:80")).is_err());
        p.allow_net("198.18.0.0/15".parse().unwrap());
        assert!(p.check(sa("198.19.0.1:80")).is_ok());
        assert!(p
            .check(sa("10.1.2.3:80"))
            .unwrap_err()
            .to_string()
            .contains("not in the allowed"));
        // A controller on this host is refused at its port on every local address.
        let mut local = TargetPolicy::default();
        local.deny_local_server(sa("0.0.0.0:7070"), "the controller's own address");
        for a in [
            "127.0.0.1:7070",
            "127.0.0.2:7070",
            "0.0.0.0:7070",
            "[::1]:7070",
            "[::]:7070",
            "[::ffff:127.0.0.3]:7070",
        ] {
            let e = local.check(sa(a)).unwrap_err().to_string();
            assert!(e.contains("controller's own address"), "{a}: {e}");
        }
        assert!(local.check(sa("127.0.0.2:7071")).is_ok());
        // Allowing the metadata network opens it.
        let mut q = TargetPolicy::default();
        q.allow_net("169.254.0.0/16".parse().unwrap());
        assert!(q.check(sa("169.254.169.254:80")).is_ok());
    }
}
