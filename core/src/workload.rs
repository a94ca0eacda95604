//! Workloads: several traffic shapes in one run. Each workload has its own load (arrival
//! phases, a closed or a constant-rate load), its own session or weighted mix of sessions, its
//! own schedule, seed and arrival index space, and an optional start offset; all start from
//! the run's one T0 and are sharded by the same rules. A scenario without `workloads:` is one
//! workload made of its top-level `phases`/`load` and `session`/`sessions`.
//!
//! The run indexes phases, request steps and session types globally, workload after workload
//! ([`View`]): the recorder, the plan, the wire and the report keep one flat index each, and
//! the report groups them back by workload.
//!
//! A weighted mix is exact, not drawn: [`Mix`] is a smooth weighted round-robin table of
//! period `P = Σ weights`, and an agent's `j`-th own arrival runs the type at position
//! `j + ⌊k·P/n⌋` (shard `k` of `n`). Every agent runs the exact mix over every `P` of its own
//! arrivals, the run over every `n·P`, and the per-agent offset keeps agents from running the
//! same type at the same moment. Taking the position from the global arrival index instead
//! would hand agents biased subsets whenever `P` and `n` share a factor.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::HumanDuration;
use crate::scenario::{Load, LoadModel, Phase, Scenario, Step};
use crate::target::Target;

/// Most workloads in one scenario.
pub const MAX_WORKLOADS: usize = 64;
/// Most session types in one workload's mix.
pub const MAX_SESSION_TYPES: usize = 64;
/// Largest sum of a mix's weights (the period of its table).
pub const MAX_MIX_PERIOD: u32 = 65_536;

/// One traffic shape of a run: `{ name, start, phases | load, session | sessions }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Names the workload in the report and in thresholds (`workload(NAME).p99 < 300ms`).
    pub name: String,
    /// What this workload loads, when it is not the scenario's `target:` (an auth service
    /// beside an API, say): any scheme a scenario's target may have, and its steps follow
    /// that scheme. Workloads naming the same URL share its connections' setup (TLS, DNS).
    /// The scenario's `endpoints:` apply to the scenario's own target only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    /// When this workload starts, after the run's T0 (default 0): a background load first,
    /// a spike later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<HumanDuration>,
    /// Arrival phases (open model), run one after the other. Give either `phases` or `load`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<Phase>,
    /// A closed or constant-rate load instead of arrival phases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<Load>,
    /// The steps each arriving session runs. Give either `session` or `sessions`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub session: Vec<Step>,
    /// A weighted mix of sessions, run exactly in proportion to the weights.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sessions: Vec<SessionType>,
}

/// One kind of session of a mix: `{ name, weight, steps }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionType {
    /// Names the session type in the report and in step names (`NAME/step`).
    pub name: String,
    /// Its share of the workload's sessions: `weight / Σ weights`, exactly.
    pub weight: u32,
    /// What one of its sessions does, in order.
    pub steps: Vec<Step>,
}

/// A workload as the run sees it, with its place in the run's global indexes.
#[derive(Debug, Clone)]
pub struct View<'a> {
    /// Its position among the scenario's workloads (0 for a scenario without `workloads:`).
    pub index: usize,
    /// Its `name`; `default` for a scenario without `workloads:`.
    pub name: &'a str,
    /// The field path of its load and sessions in the file: `` (top level) or `workloads[2].`.
    pub path: String,
    /// What it loads: its own `target:`, or else the scenario's (`None`: neither is given).
    pub target: Option<&'a Target>,
    /// The field that gives its target: `workloads[2].target`, or `target` for the
    /// scenario's.
    pub target_field: String,
    /// When it starts, after T0 (its `start:`, default 0).
    pub start: Duration,
    /// The arrival phases as written (empty with a `load`).
    pub phases: &'a [Phase],
    /// The closed or constant-rate load, when it has one instead of phases.
    pub load: Option<&'a Load>,
    /// Its session types: one for `session:`, the mix for `sessions:`.
    pub types: Vec<TypeView<'a>>,
    /// Whether it has a `sessions:` mix (names then carry the type).
    pub mixed: bool,
    /// Global index of its first phase.
    pub phase_base: usize,
    /// Global index of its first session type.
    pub type_base: usize,
}

/// One session type of a [`View`].
#[derive(Debug, Clone)]
pub struct TypeView<'a> {
    /// The type's `name`; `default` for a `session:`.
    pub name: &'a str,
    /// Its weight in the mix (1 for a `session:`).
    pub weight: u32,
    /// The steps each session of this type runs.
    pub steps: &'a [Step],
    /// The field path of its steps: `session`, `sessions[1].steps`, `workloads[0].session`.
    pub path: String,
    /// Global ordinal of its first request step.
    pub step_base: usize,
}

impl TypeView<'_> {
    /// Requests one session of this type sends.
    pub fn requests(&self) -> u64 {
        self.steps.iter().map(Step::requests).sum()
    }

    /// Request steps of this type.
    pub fn request_steps(&self) -> usize {
        self.steps.iter().filter(|s| s.requests() > 0).count()
    }

    /// Each request step's global ordinal with where it goes: its own target, else
    /// `workload`'s (the workload's target).
    pub fn aimed<'t>(
        &'t self,
        workload: Option<&'t Target>,
    ) -> impl Iterator<Item = (usize, Option<&'t Target>)> + 't {
        self.steps
            .iter()
            .filter(|s| s.requests() > 0)
            .enumerate()
            .map(move |(i, s)| (self.step_base + i, s.target.as_ref().or(workload)))
    }
}

/// The targets `views` load, each once by [`Target::scope_name`], in the order the workloads
/// first name them (a workload's own, then its steps' own): what `target(NAME)` scopes and
/// the report's targets call them. A workload all of whose requests go to steps' own targets
/// does not name its own.
pub fn target_names(views: &[View<'_>]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut add = |t: &Target| {
        let name = t.scope_name();
        if !names.contains(&name) {
            names.push(name);
        }
    };
    for w in views {
        let aimed: Vec<Option<&Target>> = w
            .types
            .iter()
            .flat_map(|t| t.aimed(w.target))
            .map(|(_, t)| t)
            .collect();
        let own_used = aimed.is_empty() || aimed.contains(&w.target);
        if let Some(t) = w.target.filter(|_| own_used) {
            add(t);
        }
        for t in aimed.into_iter().flatten() {
            add(t);
        }
    }
    names
}

/// Whether some step of `views` names a target of its own: a target's figures are then its
/// steps', since one session's requests go to several.
pub fn steps_have_targets(views: &[View<'_>]) -> bool {
    views
        .iter()
        .flat_map(|w| &w.types)
        .flat_map(|t| t.steps)
        .any(|s| s.target.is_some())
}

/// The global ordinals of the request steps aimed at the target called `name`: those with
/// it as their own target, and those without one in workloads that load it.
pub fn target_steps(views: &[View<'_>], name: &str) -> Vec<usize> {
    views
        .iter()
        .flat_map(|w| w.types.iter().flat_map(|t| t.aimed(w.target)))
        .filter(|(_, t)| t.is_some_and(|t| t.scope_name() == name))
        .map(|(i, _)| i)
        .collect()
}

/// The name of the one workload of a scenario without `workloads:`.
pub const DEFAULT_NAME: &str = "default";

impl<'a> View<'a> {
    /// Every workload of `s`, with global bases. A scenario without `workloads:` gives one.
    pub fn all(s: &'a Scenario) -> Vec<View<'a>> {
        let mut views = Vec::new();
        let (mut phase_base, mut type_base, mut step_base) = (0, 0, 0);
        let mut push = |index: usize,
                        name: &'a str,
                        path: String,
                        own: Option<&'a Target>,
                        start: Duration,
                        phases: &'a [Phase],
                        load: Option<&'a Load>,
                        session: &'a [Step],
                        sessions: &'a [SessionType]| {
            let mixed = !sessions.is_empty();
            let types: Vec<TypeView<'a>> = if mixed {
                sessions
                    .iter()
                    .enumerate()
                    .map(|(t, st)| TypeView {
                        name: &st.name,
                        weight: st.weight,
                        steps: &st.steps,
                        path: format!("{path}sessions[{t}].steps"),
                        step_base: 0,
                    })
                    .collect()
            } else {
                vec![TypeView {
                    name: DEFAULT_NAME,
                    weight: 1,
                    steps: session,
                    path: format!("{path}session"),
                    step_base: 0,
                }]
            };
            let types: Vec<TypeView<'a>> = types
                .into_iter()
                .map(|mut t| {
                    t.step_base = step_base;
                    step_base += t.request_steps();
                    t
                })
                .collect();
            let n_phases = if load.is_some() { 1 } else { phases.len() };
            let n_types = types.len();
            let target_field = match own {
                Some(_) => format!("{path}target"),
                None => "target".to_string(),
            };
            views.push(View {
                index,
                name,
                path,
                target: own.or(s.target.as_ref()),
                target_field,
                start,
                phases,
                load,
                types,
                mixed,
                phase_base,
                type_base,
            });
            phase_base += n_phases;
            type_base += n_types;
        };
        if s.workloads.is_empty() {
            push(
                0,
                DEFAULT_NAME,
                String::new(),
                None,
                Duration::ZERO,
                &s.phases,
                s.load.as_ref(),
                &s.session,
                &s.sessions,
            );
        } else {
            for (i, w) in s.workloads.iter().enumerate() {
                push(
                    i,
                    &w.name,
                    format!("workloads[{i}]."),
                    w.target.as_ref(),
                    w.start.map_or(Duration::ZERO, |d| d.0),
                    &w.phases,
                    w.load.as_ref(),
                    &w.session,
                    &w.sessions,
                );
            }
        }
        views
    }

    /// The phases its schedule, plan and report use: the arrival phases, or the one synthetic
    /// phase of a `load`; with several workloads, named `WORKLOAD/PHASE`.
    pub fn effective_phases(&self, named: bool) -> Vec<Phase> {
        let phases = match self.load {
            Some(load) => vec![load.as_phase()],
            None => self.phases.to_vec(),
        };
        if !named {
            return phases;
        }
        phases
            .into_iter()
            .enumerate()
            .map(|(i, mut p)| {
                p.name = Some(format!("{}/{}", self.name, p.display_name(i)));
                p
            })
            .collect()
    }

    /// Number of phases it adds to the run.
    pub fn phase_count(&self) -> usize {
        if self.load.is_some() {
            1
        } else {
            self.phases.len()
        }
    }

    /// How many of `agents` share its arrivals: all of them, except that a constant load's
    /// slots go only to the agents holding some of its connections (the first
    /// `connections`, by the even split), since a slot runs on a pooled connection.
    pub fn shards(&self, agents: u32) -> u32 {
        match self.load {
            Some(l) if l.model == LoadModel::Constant => agents.min(l.connections).max(1),
            _ => agents,
        }
    }

    /// The closed model: no schedule, planned is what was started.
    pub fn is_closed(&self) -> bool {
        self.load.is_some_and(|l| l.model == LoadModel::Closed)
    }

    /// How long it generates load (its phases, or its load's duration), not counting `start`.
    pub fn duration(&self) -> Duration {
        match self.load {
            Some(load) => load.duration.0,
            None => self.phases.iter().map(|p| p.duration.0).sum(),
        }
    }

    /// Its schedule's seed: the run's for the one workload of a scenario without
    /// `workloads:` (so such runs are what they always were); otherwise mixed with the
    /// workload's name, so workloads do not arrive in lockstep and reordering them changes
    /// nothing.
    pub fn seed(&self, run_seed: u64, several: bool) -> u64 {
        if !several {
            return run_seed;
        }
        // FNV-1a of the name, then a splitmix64 finish of seed ^ hash.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.name.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        let mut z = run_seed ^ h;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Whether it loads a target of its own rather than the scenario's: the scenario's
    /// `endpoints:` then do not apply to it.
    pub fn own_target(&self) -> bool {
        self.target_field != "target"
    }

    /// Its mix table (one entry for a single session).
    pub fn mix(&self) -> Mix {
        let weights: Vec<u32> = self.types.iter().map(|t| t.weight).collect();
        Mix::new(&weights).unwrap_or_else(|_| Mix { table: vec![0] })
    }

    /// The display names of its request steps, in global order: `STEP`, or with a mix
    /// `TYPE/STEP`, and with several workloads `WORKLOAD/...`.
    pub fn step_names(&self, several: bool) -> Vec<String> {
        let mut out = Vec::new();
        for t in &self.types {
            for (i, s) in t.steps.iter().enumerate() {
                if s.requests() == 0 {
                    continue;
                }
                let step = s.display_name(i);
                let typed = if self.mixed {
                    format!("{}/{step}", t.name)
                } else {
                    step
                };
                out.push(if several {
                    format!("{}/{typed}", self.name)
                } else {
                    typed
                });
            }
        }
        out
    }
}

/// An exact weighted mix: a smooth weighted round-robin table over one period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mix {
    table: Vec<u32>,
}

/// Weights that cannot make a mix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("weights must be >= 1 each and sum to at most {MAX_MIX_PERIOD}")]
pub struct BadWeights;

impl Mix {
    /// The mix of `weights`, one per session type; refused when empty, a weight is 0, or the sum is
    /// past [`MAX_MIX_PERIOD`].
    pub fn new(weights: &[u32]) -> Result<Self, BadWeights> {
        if weights.is_empty() {
            return Err(BadWeights);
        }
        crate::shard::weighted_table(weights)
            .map(|table| Self { table })
            .map_err(|_| BadWeights)
    }

    /// The period `P`: every `P` consecutive positions hold each type exactly `weight` times.
    pub fn period(&self) -> u64 {
        self.table.len() as u64
    }

    /// Number of types.
    pub fn types(&self) -> usize {
        self.table.iter().max().map_or(0, |&m| m as usize + 1)
    }

    /// Where stream `k` of `n` (an agent's own arrivals, or a closed load's connection)
    /// starts in the table: `⌊k·P/n⌋`, spreading the streams over the period.
    pub fn offset(&self, k: u64, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        (u128::from(k) * u128::from(self.period()) / u128::from(n)) as u64
    }

    /// The session type at `position` of the (periodic) table.
    #[inline]
    pub fn pick(&self, position: u64) -> u32 {
        self.table[(position % self.period()) as usize]
    }

    /// How many of the positions `from..from + len` pick each type: arithmetic, never a walk
    /// longer than one period.
    pub fn counts(&self, from: u64, len: u64) -> Vec<u64> {
        let mut out = vec![0u64; self.types()];
        let p = self.period();
        let whole = len / p;
        if whole > 0 {
            for &t in &self.table {
                out[t as usize] += whole;
            }
        }
        for i in 0..len % p {
            out[self.pick(from.wrapping_add(i)) as usize] += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> (String, String) {
        let e = Scenario::from_yaml(text).unwrap_err();
        (e.path().to_string(), e.to_string())
    }

    const TWO: &str = "name: w\ntarget: http://127.0.0.1:1\nworkloads:\n  - name: a\n    phases: [ { duration: 1s, arrival_rate: 4 } ]\n    sessions:\n      - { name: x, weight: 3, steps: [ { http: { method: GET, path: /x } } ] }\n      - { name: y, weight: 1, steps: [ { http: { method: GET, path: /y } }, { think_time: 1s }, { http: { method: GET, path: /z } } ] }\n  - name: b\n    start: 2s\n    load: { model: closed, connections: 2, duration: 1s }\n    session: [ { http: { method: GET, path: /b } } ]\n";

    #[test]
    fn workloads_index_phases_types_and_steps_globally() {
        let s = Scenario::from_yaml(TWO).unwrap();
        let v = s.workload_views();
        assert_eq!(v.len(), 2);
        assert_eq!((v[1].phase_base, v[1].type_base), (1, 2));
        assert_eq!(v[0].types[1].step_base, 1);
        assert_eq!(v[1].types[0].step_base, 3);
        assert_eq!(
            s.step_names(),
            ["a/x/step-1", "a/y/step-1", "a/y/step-3", "b/step-1"]
        );
        let names: Vec<String> = s
            .effective_phases()
            .iter()
            .enumerate()
            .map(|(i, p)| p.display_name(i))
            .collect();
        assert_eq!(names, ["a/phase-1", "b/closed"]);
        assert_eq!(s.closed_phases(), [false, true]);
        assert_eq!(s.phase_starts(), [0.0, 2.0]);
        assert_eq!(s.duration(), Duration::from_secs(3));
        assert_ne!(v[0].seed(7, true), v[1].seed(7, true));
        assert_eq!(v[0].seed(7, false), 7);
    }

    #[test]
    fn workload_mistakes_name_the_field() {
        let with = |from: &str, to: &str| TWO.replacen(from, to, 1);
        let cases = [
            (with("workloads:", "phases: [ { duration: 1s, arrival_rate: 1 } ]\nworkloads:"), "phases"),
            (with("name: b", "name: a"), "workloads[1].name"),
            (with("name: b", "name: b/c"), "workloads[1].name"),
            (with("weight: 3", "weight: 0"), "workloads[0].sessions[0].weight"),
            (with("name: y", "name: x"), "workloads[0].sessions[1].name"),
            (with("path: /z", "path: /z\n        , extract: {}"), "workloads[0].sessions[1].steps"),
            (with("session: [ { http: { method: GET, path: /b } } ]", "session: [ { tcp: { send: hi } } ]"), "workloads[1].session[0].tcp"),
            (with("connections: 2", "connections: 0"), "workloads[1].load.connections"),
            (with("    session: [", "    sessions: [ { name: q, weight: 1, steps: [ { http: { method: GET, path: / } } ] } ]\n    session: ["), "workloads[1].sessions"),
            (with("name: w", "name: w\ndata: { u: { columns: [a], rows: [[x]] } }"), "data"),
        ];
        for (text, path) in cases {
            let (got, message) = err(&text);
            assert!(got.starts_with(path), "{path}: got {got}: {message}");
        }
    }

    const TARGETS: &str = "name: t\nworkloads:\n  - name: auth\n    target: http://127.0.0.1:1\n    phases: [ { duration: 1s, arrival_rate: 1 } ]\n    session: [ { http: { method: GET, path: /auth } } ]\n  - name: api\n    target: tcp://127.0.0.1:2\n    phases: [ { duration: 1s, arrival_rate: 1 } ]\n    session: [ { tcp: { send: { text: hi }, framing: length_prefixed } } ]\n";

    #[test]
    fn workloads_load_their_own_targets_or_the_scenarios() {
        let s = Scenario::from_yaml(TARGETS).unwrap();
        let v = s.workload_views();
        assert_eq!(v[0].target.map(|t| t.as_str()), Some("http://127.0.0.1:1"));
        assert_eq!(v[1].target_field, "workloads[1].target");
        let fields: Vec<String> = s.targets().into_iter().map(|(f, _)| f).collect();
        assert_eq!(fields, ["workloads[0].target", "workloads[1].target"]);
        // One without its own target loads the scenario's; a URL named twice counts once.
        let shared = TARGETS
            .replacen("name: t\n", "name: t\ntarget: http://127.0.0.1:1\n", 1)
            .replacen("    target: http://127.0.0.1:1\n", "", 1);
        let s = Scenario::from_yaml(&shared).unwrap();
        let v = s.workload_views();
        assert_eq!(v[0].target, s.target.as_ref());
        assert!(!v[0].own_target() && v[1].own_target());
        assert_eq!(s.targets().len(), 2);
    }

    #[test]
    fn target_mistakes_name_the_workloads_field() {
        let with = |from: &str, to: &str| TARGETS.replacen(from, to, 1);
        let cases = [
            // An http step against the workload's tcp target.
            (with("length_prefixed } }", "length_prefixed } }, { http: { path: / } }"), "workloads[1].session[1].http", "workloads[1].target is `tcp://127.0.0.1:2`"),
            // No target here and none for the scenario.
            (with("    target: tcp://127.0.0.1:2\n", ""), "workloads[1].target", "target URL is required"),
            (with("target: tcp://127.0.0.1:2", "target: ftp://127.0.0.1:2"), "workloads[1].target", ""),
            (with("name: t\n", "name: t\ntls: { insecure_skip_verify: true }\n"), "tls", "only applies"),
            (with("name: t\n", "name: t\nhttp_version: \"2\"\n").replace("http://127.0.0.1:1", "ws://127.0.0.1:1"), "http_version", ""),
            (
                with("    phases: [ { duration: 1s, arrival_rate: 1 } ]\n    session: [ { tcp", "    load: { model: closed, connections: 2, duration: 1s, streams_per_connection: 2 }\n    session: [ { tcp").replacen("name: t\n", "name: t\nhttp_version: \"2\"\n", 1),
                "workloads[1].load.streams_per_connection",
                "only HTTP/2",
            ),
        ];
        for (text, path, why) in cases {
            let (got, message) = err(&text);
            assert!(got.starts_with(path), "{path}: got {got}: {message}");
            assert!(message.contains(why), "{path}: {message}");
        }
        // A literal address the agents refuse is refused with the workload's field.
        let s = Scenario::from_yaml(&with("tcp://127.0.0.1:2", "tcp://169.254.169.254:2")).unwrap();
        let e = crate::target_policy::check_literals(&s).unwrap_err();
        assert!(e.to_string().starts_with("workloads[1].target: "), "{e}");
    }

    #[test]
    fn a_mix_is_exact_per_period_and_counts_windows_without_walking() {
        let m = Mix::new(&[3, 1]).unwrap();
        assert_eq!(m.period(), 4);
        assert_eq!(m.counts(0, 4), vec![3, 1]);
        assert_eq!(m.counts(5, 40), vec![30, 10]);
        for from in 0..8 {
            for len in 0..30 {
                let walked = (from..from + len).fold(vec![0u64; 2], |mut c, i| {
                    c[m.pick(i) as usize] += 1;
                    c
                });
                assert_eq!(m.counts(from, len), walked, "from {from} len {len}");
            }
        }
        assert!(Mix::new(&[]).is_err());
        assert!(Mix::new(&[1, 0]).is_err());
        assert_eq!(m.offset(1, 2), 2);
        assert_eq!(m.offset(2, 3), 2);
    }
}
