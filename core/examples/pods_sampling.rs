//! What sampling a Service's pods costs the controller per interval, parsing aside from the
//! network: one node's kubelet texts (resource metrics and cAdvisor) holding 50 pods, parsed
//! for the 50 pods and merged into their samples, as the controller does at each interval.
//!
//! The texts are the ones captured from the test cluster (`tests/fixtures/kubelet/`): the
//! node's whole cAdvisor text as it was, plus each pod's captured series repeated under 50 pod
//! names, with a container's series beside the pod's own cgroup (as a node whose cAdvisor sees
//! the containers exports them).
//!
//! `cargo run -p stampede-core --example pods_sampling [PODS] [ROUNDS]`

use std::collections::BTreeSet;
use std::time::Instant;

use stampede_core::pods::{parse_kubelet, PodSample, PodsObserved};

const CADVISOR: &str = include_str!("../tests/fixtures/kubelet/cadvisor.txt");
const RESOURCE: &str = include_str!("../tests/fixtures/kubelet/resource-2.txt");
const POD: &str = "web-78d7d87767-dz7v7";
const NS: &str = "e2e-capture-b0d426f2";

/// The node's text with `pods` copies of the captured pod's series; with `container`, each
/// pod-level series is repeated once more for a container named `http`.
fn node_text(base: &str, pods: usize, container: bool) -> String {
    let mine: Vec<&str> = base.lines().filter(|l| l.contains(POD)).collect();
    let mut out = base.to_string();
    for i in 0..pods {
        let name = format!("web-{i:02}-5d8f7c9b4-x2x9q");
        for l in &mine {
            let l = l.replace(POD, &name);
            out.push_str(&l);
            out.push('\n');
            if container && l.contains("container=\"\"") {
                out.push_str(&l.replace("container=\"\"", "container=\"http\""));
                out.push('\n');
            }
        }
    }
    out
}

fn main() {
    let mut args = std::env::args().skip(1);
    let pods: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(50);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let cadvisor = node_text(CADVISOR, pods, true);
    let resource = node_text(RESOURCE, pods, false);
    let names: BTreeSet<String> = (0..pods)
        .map(|i| format!("web-{i:02}-5d8f7c9b4-x2x9q"))
        .collect();
    let mut seen = PodsObserved::default();
    let start = Instant::now();
    for round in 0..rounds {
        let mut advised = parse_kubelet(&cadvisor, NS, &names);
        for (pod, c) in parse_kubelet(&resource, NS, &names) {
            let mut c = c.or(advised.remove(&pod).unwrap_or_default());
            // A new stamp each round, as each read of the resource metrics has.
            c.stamp_ms = Some(round as i64 * 1000);
            seen.add(
                &pod,
                PodSample {
                    at_s: round as f64,
                    counters: c,
                    restarts: 0,
                    ready: true,
                },
            );
        }
    }
    let per_round = start.elapsed().as_secs_f64() / rounds as f64;
    let report = stampede_core::pods::with_pods(None, &seen);
    assert_eq!(report.pods.len(), pods, "every pod is found");
    println!(
        "{pods} pods: cAdvisor text {} KiB ({} lines), resource text {} KiB; \
         parse + merge {:.3} ms per interval = {:.3} % of a core at 1 Hz ({rounds} rounds)",
        cadvisor.len() / 1024,
        cadvisor.lines().count(),
        resource.len() / 1024,
        per_round * 1e3,
        per_round * 100.0
    );
}
