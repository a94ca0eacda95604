//! Threshold scopes checked against the scenario before any load: a `phase()`, `step()`,
//! `session()`, `workload()`, `endpoint()` or `target()` that names nothing would otherwise
//! fail only after the whole run. The error lists the names that exist, so a typo is fixed
//! in one go.

use super::{Scenario, ScenarioError};
use crate::threshold::{Scope, Threshold};

/// The names a threshold scope may use in one scenario, as the report names its rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopeNames {
    /// The phases as the report names them (`phase-N` for an unnamed one, `WORKLOAD/PHASE` with
    /// workloads).
    pub phases: Vec<String>,
    /// The request steps as the report names them.
    pub steps: Vec<String>,
    /// The workloads' names (`default` without `workloads:`).
    pub workloads: Vec<String>,
    /// The session types' names, each once (several workloads may share one).
    pub sessions: Vec<String>,
    /// The scenario's `endpoints:`, as `ip:port`.
    pub endpoints: Vec<String>,
    /// The targets the workloads load, by [`crate::target::Target::scope_name`], each once.
    pub targets: Vec<String>,
    /// The target is a host name, whose addresses are known only when it is resolved.
    pub named_target: bool,
}

impl ScopeNames {
    /// Every name of `s`: its phases (the report's rows, `WORKLOAD/PHASE` with workloads),
    /// request steps, workloads and session types.
    pub fn of(s: &Scenario) -> Self {
        let views = s.workload_views();
        let mut sessions: Vec<String> = Vec::new();
        for t in views.iter().flat_map(|w| &w.types) {
            if !sessions.iter().any(|n| n == t.name) {
                sessions.push(t.name.to_string());
            }
        }
        Self {
            targets: crate::workload::target_names(&views),
            phases: s
                .effective_phases()
                .iter()
                .enumerate()
                .map(|(i, p)| p.display_name(i))
                .collect(),
            steps: s.step_names(),
            workloads: views.iter().map(|w| w.name.to_string()).collect(),
            sessions,
            endpoints: crate::endpoints::listed(s.endpoints.list())
                .iter()
                .map(|a| a.to_string())
                .collect(),
            named_target: s.target.as_ref().is_some_and(|t| {
                t.unix_path().is_none() && t.host().parse::<std::net::IpAddr>().is_err()
            }),
        }
    }

    /// Why `scope` names nothing (`phase(stedy): no such phase; phases are warm, steady`),
    /// or `None` when it names something. `phases` false skips phase scopes (a capacity
    /// search replaces the phases).
    pub fn missing(&self, scope: &Scope, phases: bool) -> Option<String> {
        let (kind, plural, name, names) = match scope {
            Scope::Run => return None,
            Scope::Phase(_) if !phases => return None,
            Scope::Phase(n) => ("phase", "phases", n, &self.phases),
            Scope::Step(n) => ("step", "request steps", n, &self.steps),
            Scope::Workload(n) => ("workload", "workloads", n, &self.workloads),
            Scope::Session(n) => ("session", "session types", n, &self.sessions),
            Scope::Target(n) => ("target", "targets", n, &self.targets),
            // A host name's addresses are known once it is resolved; a scope naming none of
            // them fails in the report.
            Scope::Endpoint(_) if self.endpoints.is_empty() && self.named_target => return None,
            Scope::Endpoint(n) if self.endpoints.is_empty() => {
                return Some(format!(
                    "endpoint({n}): the target is one address; list the addresses in \
                     `endpoints:` or give the target as a host name with several"
                ))
            }
            Scope::Endpoint(n) if n == crate::threshold::ALL_ENDPOINTS => return None,
            Scope::Endpoint(n) => ("endpoint", "endpoints", n, &self.endpoints),
        };
        if names.iter().any(|x| x == name) {
            return None;
        }
        Some(format!(
            "{kind}({name}): no such {kind}; {plural} are {}",
            list(names)
        ))
    }
}

/// At most 20 names, comma-separated, then how many more.
fn list(names: &[String]) -> String {
    const SHOWN: usize = 20;
    let mut out = names
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        out.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    out
}

impl Scenario {
    /// Refuses a threshold whose scope names no phase, step, workload or session type,
    /// naming the entry and what exists. `phases` false leaves phase scopes unchecked.
    pub(super) fn check_scopes(
        &self,
        thresholds: &[Threshold],
        phases: bool,
    ) -> Result<(), ScenarioError> {
        if thresholds.iter().all(|t| t.scope == Scope::Run) {
            return Ok(());
        }
        let names = ScopeNames::of(self);
        for (i, t) in thresholds.iter().enumerate() {
            if let Some(why) = names.missing(&t.scope, phases) {
                return Err(ScenarioError::invalid(format!("thresholds[{i}]"), why));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> ScenarioError {
        Scenario::from_yaml(text).unwrap_err()
    }

    const TWO_PHASES: &str = "name: t\ntarget: http://h:1\nphases:\n  - { name: warm, duration: 2s, arrival_rate: 5 }\n  - { name: steady, duration: 4s, arrival_rate: 10 }\nsession:\n  - { name: get, http: { path: / } }\n";

    #[test]
    fn a_phase_typo_is_refused_naming_the_phases_that_exist() {
        let e = refused(&format!(
            "{TWO_PHASES}thresholds: [ \"p99 < 1s\", \"phase(stedy).p99 < 1s\" ]\n"
        ));
        assert_eq!(e.path(), "thresholds[1]");
        assert_eq!(
            e.to_string(),
            "thresholds[1]: phase(stedy): no such phase; phases are warm, steady"
        );
        let ok = format!("{TWO_PHASES}thresholds: [ \"phase(steady).p99 < 1s\", \"step(get).error_rate < 1%\" ]\n");
        assert!(Scenario::from_yaml(&ok).is_ok());
    }

    #[test]
    fn steps_sessions_and_workloads_are_checked_too() {
        for (t, why) in [
            (
                "step(gett).p99 < 1s",
                "step(gett): no such step; request steps are get",
            ),
            (
                "session(nope).p99 < 1s",
                "session(nope): no such session; session types are default",
            ),
            (
                "workload(web).p99 < 1s",
                "workload(web): no such workload; workloads are default",
            ),
        ] {
            let e = refused(&format!("{TWO_PHASES}thresholds: [ \"{t}\" ]\n"));
            assert_eq!(e.to_string(), format!("thresholds[0]: {why}"), "{t}");
        }
        // Unnamed phases are `phase-N`, as the report names their rows.
        let unnamed = "name: t\ntarget: http://h:1\nphases: [ { duration: 1s, arrival_rate: 5 } ]\nsession: [ { http: { path: / } } ]\nthresholds: [ \"phase(main).p99 < 1s\" ]\n";
        assert!(refused(unnamed).to_string().ends_with("phases are phase-1"));
    }

    #[test]
    fn workload_phases_carry_the_workload_name() {
        let text = "name: t\ntarget: http://h:1\nworkloads:\n  - name: api\n    phases: [ { name: steady, duration: 1s, arrival_rate: 5 } ]\n    sessions:\n      - { name: buy, weight: 1, steps: [ { http: { path: / } } ] }\n";
        let with = |t: &str| format!("{text}thresholds: [ \"{t}\" ]\n");
        for good in [
            "phase(api/steady).p99 < 1s",
            "session(buy).p99 < 1s",
            "workload(api).p99 < 1s",
            "step(api/buy/step-1).p99 < 1s",
        ] {
            assert!(Scenario::from_yaml(&with(good)).is_ok(), "{good}");
        }
        assert!(refused(&with("phase(steady).p99 < 1s"))
            .to_string()
            .ends_with("phases are api/steady"));
    }

    /// `target(NAME)` names a workload's target by `host:port`, the default port filled in.
    #[test]
    fn target_scopes_name_a_workloads_host_and_port() {
        let text = "name: t\ntarget: http://auth.test\nworkloads:\n  - name: auth\n    phases: [ { duration: 1s, arrival_rate: 5 } ]\n    session: [ { http: { path: /login } } ]\n  - name: api\n    target: https://api.test:8443/v1\n    phases: [ { duration: 1s, arrival_rate: 5 } ]\n    session: [ { http: { path: /items } } ]\n";
        let with = |t: &str| format!("{text}thresholds: [ \"{t}\" ]\n");
        for good in [
            "target(auth.test:80).p99 < 1s",
            "target(api.test:8443).error_rate < 1%",
            "window(2s).target(api.test:8443).p99 < 1s",
        ] {
            if let Err(e) = Scenario::from_yaml(&with(good)) {
                panic!("{good}: {e}");
            }
        }
        assert_eq!(
            refused(&with("target(api.test).p99 < 1s")).to_string(),
            "thresholds[0]: target(api.test): no such target; targets are auth.test:80, \
             api.test:8443"
        );
    }

    /// A capacity search replaces the phases: the base file's phase scopes are not judged
    /// against its placeholder, the others still are.
    #[test]
    fn a_loadless_scenario_leaves_phase_scopes_to_its_steps() {
        let text = "name: t\ntarget: http://h:1\nsession: [ { http: { path: / } } ]\nthresholds: [ \"phase(steady).p99 < 1s\" ]\n";
        assert!(Scenario::from_yaml_loadless(text).is_ok());
        let typo = text.replace("phase(steady)", "step(nope)");
        assert!(Scenario::from_yaml_loadless(&typo).is_err());
    }

    /// `endpoint(ADDR)` must be one of `endpoints:`; with a target that is one IP address and
    /// no list, no endpoint scope can name anything; a host name's addresses are known only
    /// when it is resolved, so any address is accepted there.
    #[test]
    fn endpoint_scopes_are_checked_against_the_endpoints() {
        let listed = "name: t\ntarget: http://127.0.0.1:8080\nendpoints: [\"127.0.0.1:8080\", \"127.0.0.2:8080\"]\nload: { model: closed, connections: 2, duration: 1s }\nsession:\n  - http: { path: / }\n";
        let ok = format!("{listed}thresholds: [ \"endpoint(*).p99 < 50ms\", \"endpoint(127.0.0.2:8080).error_rate < 1%\" ]\n");
        if let Err(e) = Scenario::from_yaml(&ok) {
            panic!("{e}");
        }
        let e = refused(&format!(
            "{listed}thresholds: [ \"endpoint(127.0.0.3:8080).p99 < 50ms\" ]\n"
        ));
        assert_eq!(e.path(), "thresholds[0]");
        assert!(
            e.to_string()
                .contains("no such endpoint; endpoints are 127.0.0.1:8080, 127.0.0.2:8080"),
            "{e}"
        );
        let one = "name: t\ntarget: http://127.0.0.1:8080\nload: { model: closed, connections: 2, duration: 1s }\nsession:\n  - http: { path: / }\nthresholds: [ \"endpoint(*).p99 < 50ms\" ]\n";
        assert!(refused(one)
            .to_string()
            .contains("the target is one address"));
        let named = one.replace("127.0.0.1", "svc.example");
        assert!(Scenario::from_yaml(&named).is_ok());
    }
}
