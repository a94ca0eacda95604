//! Where the controller serves, for agents to refuse as targets. An agent refuses by itself
//! the address it dialled, but that is often a Service's: the controller's pod address (what
//! `endpoints: service` on the controller's own Service would list) and its host's other
//! addresses reach the same listeners, and only the controller knows them.

use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

/// The controller's listeners, each on every address it answers at.
#[derive(Debug, Default)]
pub(crate) struct OwnAddresses {
    listed: Mutex<Vec<SocketAddr>>,
}

impl OwnAddresses {
    /// Adds a listener bound at `bound`: that address, or when it is unspecified (`0.0.0.0`,
    /// `::`), its port on every address of this host's interfaces (a pod's own address among
    /// them).
    pub(crate) fn add_listener(&self, bound: SocketAddr) {
        let ips = if bound.ip().is_unspecified() {
            host_addresses(bound.ip())
        } else {
            vec![bound.ip()]
        };
        let mut listed = crate::lock(&self.listed);
        for ip in ips {
            let a = SocketAddr::new(ip, bound.port());
            if !listed.contains(&a) {
                listed.push(a);
            }
        }
    }

    /// The addresses as `Registered` carries them.
    pub(crate) fn wire(&self) -> Vec<String> {
        crate::lock(&self.listed)
            .iter()
            .map(SocketAddr::to_string)
            .collect()
    }
}

/// This host's interface addresses a socket bound to `unspecified` answers at: IPv4 ones for
/// `0.0.0.0`, both families for `::` (a dual-stack socket). Link-local IPv6 ones need a zone
/// no target names, and are left out; the unspecified address itself stands for the host
/// when the interfaces cannot be read.
fn host_addresses(unspecified: IpAddr) -> Vec<IpAddr> {
    let both = unspecified.is_ipv6();
    let mut ips: Vec<IpAddr> = nix::ifaddrs::getifaddrs()
        .map(|all| {
            all.filter_map(|i| {
                let a = i.address?;
                if let Some(v4) = a.as_sockaddr_in() {
                    return Some(IpAddr::V4(v4.ip()));
                }
                let v6 = a.as_sockaddr_in6()?.ip();
                (both && (v6.segments()[0] & 0xffc0) != 0xfe80).then_some(IpAddr::V6(v6))
            })
            .collect()
        })
        .unwrap_or_default();
    ips.push(unspecified);
    ips.sort();
    ips.dedup();
    ips
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener on every address is listed on each of the host's (loopback included) and on
    /// the unspecified one; one on a given address is listed as itself, once.
    #[test]
    fn listeners_are_listed_on_every_address_they_answer_at() {
        let own = OwnAddresses::default();
        own.add_listener("0.0.0.0:7070".parse().unwrap());
        own.add_listener("127.0.0.5:9090".parse().unwrap());
        own.add_listener("127.0.0.5:9090".parse().unwrap());
        let listed = own.wire();
        assert!(listed.contains(&"127.0.0.1:7070".to_string()), "{listed:?}");
        assert!(listed.contains(&"0.0.0.0:7070".to_string()), "{listed:?}");
        assert_eq!(listed.iter().filter(|a| *a == "127.0.0.5:9090").count(), 1);
        assert!(listed
            .iter()
            .all(|a| a.parse::<SocketAddr>().unwrap().is_ipv4()));
    }
}
