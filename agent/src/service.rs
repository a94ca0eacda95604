//! `endpoints: service`: the run's endpoints are the ready pods of a Kubernetes Service, which
//! the controller watches and sends: at assign time, then each time they change. The agent
//! never looks the Service's name up (a ClusterIP is one virtual address); it feeds each set
//! into the same endpoint set a followed host name uses, so a pod that appears gets its share
//! of the next sessions and one that leaves gets none, its requests in flight finishing.

use std::net::SocketAddr;
use std::sync::Arc;

use stampede_core::target_policy::TargetPolicy;

use crate::resolve::at_address;
use crate::runner::{Endpoint, EndpointSet};

/// What taking a new set of the Service's endpoints needs during the run.
#[derive(Debug)]
pub struct ServiceSet {
    /// The run's endpoints (every workload shares them).
    pub set: Arc<EndpointSet>,
    /// The target's transport and TLS client, re-addressed for each endpoint.
    pub template: Endpoint,
    /// Addresses the agent may not load are left out (and logged).
    pub policy: TargetPolicy,
}

impl ServiceSet {
    /// Makes `addrs` (sorted by the controller, so every agent splits alike) the current
    /// endpoints, those the target policy refuses left out. An empty set (every pod gone, or
    /// refused) keeps the last one: load goes on where it went, and fails there if the pods
    /// are really gone. Returns how many endpoints are current.
    pub fn replace(&self, addrs: &[SocketAddr]) -> usize {
        let endpoints: Vec<(SocketAddr, Endpoint)> = addrs
            .iter()
            .filter(|a| match self.policy.check(**a) {
                Ok(()) => true,
                Err(why) => {
                    tracing::warn!(address = %a, %why, "leaving out a Service endpoint the target policy refuses");
                    false
                }
            })
            .filter_map(|a| Some((*a, at_address(&self.template, *a)?)))
            .collect();
        if endpoints.is_empty() {
            tracing::warn!(
                "the Service has no ready endpoint this agent may load; keeping the last ones"
            );
        } else if !self.set.replace(endpoints, true) {
            tracing::warn!(
                "more Service endpoints than the run can keep apart; the newest are left out"
            );
        }
        self.set.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_set_replaces_the_endpoints_and_an_empty_one_keeps_them() {
        let first: Vec<SocketAddr> = ["127.0.0.1:81", "127.0.0.2:81"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let s = ServiceSet {
            set: Arc::new(EndpointSet::fixed(Vec::new())),
            template: Endpoint::Tcp(first[0]),
            policy: TargetPolicy::default(),
        };
        assert_eq!(s.replace(&first), 2);
        assert_eq!(s.set.addresses(), first);
        let second: Vec<SocketAddr> = vec!["127.0.0.2:81".parse().unwrap()];
        assert_eq!(s.replace(&second), 1);
        assert_eq!(s.set.addresses(), second);
        assert_eq!(s.replace(&[]), 1, "an empty set keeps the last one");
    }
}
