//! What a capacity search varies (`--vary rate|connections`, `--workload NAME`), and the
//! scenario of one step at one level of it.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use stampede_core::capacity::Axis;
use stampede_core::ramp::Stage;
use stampede_core::scenario::{Load, LoadModel, Phase, Scenario};
use stampede_core::threshold::{Scope, Threshold};
use stampede_core::HumanDuration;

/// What the search varies: the axis, and with workloads, the one workload it varies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Varied {
    /// What changes from step to step (the arrival rate, the connections, ...).
    pub axis: Axis,
    /// With workloads, the one whose load the search varies; the others run as written.
    pub workload: Option<String>,
}

/// Reads `--vary` and `--workload` against the scenario's workload names. `--vary` is
/// `rate` (the default) or `connections`; any other value is a workload's name, varied by
/// rate, as `--workload NAME` says it. A workload named like an axis makes `--vary` with that
/// word ambiguous unless `--workload` is given.
pub fn resolve(vary: Option<&str>, workload: Option<&str>, names: &[&str]) -> Result<Varied> {
    let (axis, legacy) = match vary.map(str::trim) {
        None | Some("rate") => (Axis::Rate, None),
        Some("connections") => (Axis::Connections, None),
        Some("") => bail!("--vary: give rate, connections, or a workload's name"),
        Some(name) => (Axis::Rate, Some(name)),
    };
    if let (Some(word), None, None) = (vary.map(str::trim), legacy, workload) {
        if names.contains(&word) {
            bail!(
                "--vary {word}: ambiguous, the scenario has a workload named `{word}`; say \
                 --vary {word} --workload NAME to vary the {word} of workload NAME"
            );
        }
    }
    if let Some(name) = legacy.filter(|n| !names.is_empty() && !names.contains(n)) {
        bail!(
            "--vary {name}: not rate, connections, nor a workload (one of: {})",
            names.join(", ")
        );
    }
    let workload = match (legacy, workload) {
        (Some(a), Some(b)) if a != b => bail!(
            "--vary {a}: not rate or connections, and --workload names another workload ({b})"
        ),
        (a, b) => a.or(b),
    };
    match (workload, names.is_empty()) {
        (Some(w), true) => {
            bail!("--vary {w}: the scenario has no workloads (--vary takes rate or connections)")
        }
        (Some(w), false) if !names.contains(&w) => bail!(
            "--workload {w}: no such workload (one of: {})",
            names.join(", ")
        ),
        (None, false) => bail!(
            "--workload: name the workload the search varies (one of: {})",
            names.join(", ")
        ),
        _ => {}
    }
    Ok(Varied {
        axis,
        workload: workload.map(str::to_string),
    })
}

/// The share of a connections step spent ramping up to its connections: connects paced over
/// a quarter of the step instead of a burst of SYNs at its start.
const RAMP_SHARE: u32 = 4;

/// The load of one step: `level` arrivals per second for the step's duration (one phase
/// named `name`), or a closed load ramped to `level` connections over a quarter of the step
/// and held to its end.
fn step_load(name: &str, axis: Axis, level: f64, duration: Duration) -> (Option<Load>, Vec<Phase>) {
    match axis {
        Axis::Rate => (
            None,
            vec![Phase {
                name: Some(name.to_string()),
                duration: HumanDuration(duration),
                arrival_rate: level,
                ramp_to: None,
                warmup: false,
            }],
        ),
        Axis::Connections => {
            let n = level as u32;
            let ramp = duration / RAMP_SHARE;
            let stages = vec![
                Stage {
                    connections: n,
                    duration: HumanDuration(ramp),
                },
                Stage {
                    connections: n,
                    duration: HumanDuration(duration - ramp),
                },
            ];
            let load = Load {
                model: LoadModel::Closed,
                connections: n,
                duration: HumanDuration(duration),
                stages,
                rate: None,
                streams_per_connection: None,
            };
            (Some(load), Vec::new())
        }
    }
}

/// The scenario of one step: the base scenario at one level (a rate, or connections), with
/// the SLOs as thresholds, evaluated live (`abort_on_fail`) so an overloaded step ends early.
/// With a varied workload, the others run as written and unscoped SLOs apply to it.
pub fn step_scenario(
    base: &Scenario,
    name: &str,
    level: f64,
    duration: Duration,
    slos: &[String],
    varied: &Varied,
) -> Result<Scenario> {
    let mut s = base.clone();
    let (load, phases) = step_load(name, varied.axis, level, duration);
    match &varied.workload {
        None => {
            if !s.workloads.is_empty() {
                bail!("--workload: name the workload the search varies");
            }
            s.load = load;
            s.phases = phases;
            s.thresholds = slos.to_vec();
        }
        Some(scope) => {
            let Some(w) = s.workloads.iter_mut().find(|w| &w.name == scope) else {
                bail!("--workload {scope}: no such workload");
            };
            w.load = load;
            w.phases = phases;
            s.thresholds = slos
                .iter()
                .map(|slo| match Threshold::parse(slo) {
                    Ok(t) if t.scope == Scope::Run => format!("workload({scope}).{}", slo.trim()),
                    _ => slo.clone(),
                })
                .collect();
        }
    }
    // The SLOs given are the verdict; the default error verdict would add one of its own.
    s.max_error_rate = Some("none".into());
    s.abort_on_fail = true;
    s.validate().with_context(|| format!("step {name}"))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "name: v\ntarget: http://127.0.0.1:1\nworkloads:\n  - name: background\n    load: { model: constant, rate: 20, connections: 2, duration: 30s }\n    session: [ { http: { method: GET, path: / } } ]\n  - name: checkout\n    session: [ { http: { method: GET, path: /pay } } ]\n";

    fn rate(w: Option<&str>) -> Varied {
        Varied {
            axis: Axis::Rate,
            workload: w.map(str::to_string),
        }
    }

    /// `--vary` replaces one workload's load with the step and scopes unscoped SLOs to it;
    /// the others run as written.
    #[test]
    fn a_step_varies_one_workload_and_scopes_its_slos() {
        let base = Scenario::from_yaml_loadless(TWO).unwrap();
        let slos = [
            "p99 < 50ms".to_string(),
            "step(checkout/step-1).p99 < 9ms".to_string(),
        ];
        let d = Duration::from_secs(5);
        let s = step_scenario(&base, "s1", 40.0, d, &slos, &rate(Some("checkout"))).unwrap();
        assert_eq!(s.workloads[1].phases[0].arrival_rate, 40.0);
        assert!(s.workloads[1].load.is_none());
        assert_eq!(s.workloads[0], base.workloads[0]);
        assert_eq!(
            s.thresholds,
            [
                "workload(checkout).p99 < 50ms",
                "step(checkout/step-1).p99 < 9ms"
            ]
        );
        let one = Scenario::from_yaml_loadless(
            "name: o\ntarget: http://127.0.0.1:1\nsession: [ { http: { path: / } } ]\n",
        )
        .unwrap();
        // One workload: its steps are named without a workload prefix.
        let slos = [
            "p99 < 50ms".to_string(),
            "step(step-1).p99 < 9ms".to_string(),
        ];
        assert_eq!(
            step_scenario(&one, "s1", 40.0, d, &slos, &rate(None))
                .unwrap()
                .thresholds,
            slos
        );
    }

    /// A connections step is a closed load ramped to N over a quarter of the step, then held;
    /// it survives the trip to the agents (JSON, parsed again) unchanged.
    #[test]
    fn a_connections_step_is_a_ramped_closed_load() {
        let one = Scenario::from_yaml_loadless(
            "name: o\ntarget: http://127.0.0.1:1\nsession: [ { http: { path: / } } ]\n",
        )
        .unwrap();
        let v = Varied {
            axis: Axis::Connections,
            workload: None,
        };
        let s = step_scenario(&one, "s2 12 conn", 12.0, Duration::from_secs(2), &[], &v).unwrap();
        let load = s.load.as_ref().unwrap();
        assert_eq!((load.model, load.connections), (LoadModel::Closed, 12));
        let ramp: Vec<(u32, Duration)> = load
            .stages
            .iter()
            .map(|s| (s.connections, s.duration.0))
            .collect();
        assert_eq!(
            ramp,
            [
                (12, Duration::from_millis(500)),
                (12, Duration::from_millis(1500))
            ]
        );
        assert!(s.phases.is_empty() && s.abort_on_fail);
        let again = Scenario::from_yaml(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(again.load, s.load);
        let base = Scenario::from_yaml_loadless(TWO).unwrap();
        let v = Varied {
            axis: Axis::Connections,
            workload: Some("checkout".into()),
        };
        let s = step_scenario(&base, "s1", 3.0, Duration::from_secs(4), &[], &v).unwrap();
        assert_eq!(s.workloads[1].load.as_ref().unwrap().connections, 3);
        assert!(s.workloads[1].phases.is_empty());
    }

    /// Both spellings read naturally; every wrong combination names the flag and the choices.
    #[test]
    fn vary_and_workload_flags() {
        let none: &[&str] = &[];
        let two = &["background", "checkout"];
        assert_eq!(resolve(None, None, none).unwrap(), rate(None));
        assert_eq!(resolve(Some("rate"), None, none).unwrap(), rate(None));
        assert_eq!(
            resolve(Some("connections"), Some("checkout"), two).unwrap(),
            Varied {
                axis: Axis::Connections,
                workload: Some("checkout".into())
            }
        );
        // The old spelling: a workload's name, varied by rate.
        assert_eq!(
            resolve(Some("checkout"), None, two).unwrap(),
            rate(Some("checkout"))
        );
        assert_eq!(
            resolve(Some("rate"), Some("checkout"), two).unwrap(),
            rate(Some("checkout"))
        );
        let err = |v: Option<&str>, w: Option<&str>, names: &[&str]| {
            resolve(v, w, names).unwrap_err().to_string()
        };
        assert!(err(Some("checkout"), None, none).contains("no workloads"));
        assert!(err(Some("nope"), None, two).starts_with(
            "--vary nope: not rate, connections, nor a workload (one of: background, checkout)"
        ));
        assert!(err(None, Some("nope"), two).starts_with("--workload nope: no such workload"));
        assert!(err(None, None, two).starts_with("--workload: name the workload"));
        assert!(err(Some("checkout"), Some("background"), two).contains("another workload"));
        // A workload named `connections`: the word alone is ambiguous; with --workload it is not.
        let odd = &["connections", "checkout"];
        let e = err(Some("connections"), None, odd);
        assert!(e.contains("ambiguous") && e.contains("--workload"), "{e}");
        assert_eq!(
            resolve(Some("connections"), Some("connections"), odd)
                .unwrap()
                .axis,
            Axis::Connections
        );
        assert_eq!(
            resolve(Some("rate"), Some("connections"), odd).unwrap(),
            rate(Some("connections"))
        );
    }
}
