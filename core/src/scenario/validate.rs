//! A parsed scenario checked whole before anything uses it: the run's own settings, load
//! models, steps and their templates, and transports. Every error names the field
//! (`session[2].http.path: ...`) and says why, so a malformed scenario never gets as far as a
//! panic or a request. The run's size bounds are in `validate_bounds`, and what the agents
//! receive before the load (setup values, data rows) in `validate_data`.

use super::validate_bounds::check_rate;
use super::{
    AgentLossPolicy, ArrivalProcess, HttpVersion, Load, LoadModel, Scenario, ScenarioError, Step,
    StepKind, ThinkTime, MAX_AGENTS, MAX_CONNECTIONS, MAX_STEPS, MAX_STREAMS_PER_CONNECTION,
    MAX_THRESHOLDS,
};
use crate::duration::HumanDuration;
use crate::protocol::{self, Transport};
use crate::target::Target;

impl Scenario {
    /// Checks every value the types cannot express. Returns the first problem found.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        self.validate_with(true)
    }

    /// [`Scenario::validate`]; `phase_scopes` false leaves `phase()` threshold scopes
    /// unchecked (the capacity search's placeholder phase is replaced by its steps).
    pub(super) fn validate_with(&self, phase_scopes: bool) -> Result<(), ScenarioError> {
        if self.name.trim().is_empty() {
            return Err(ScenarioError::invalid("name", "must not be empty"));
        }
        if let Some(agents) = self.agents {
            if agents == 0 || agents > MAX_AGENTS {
                return Err(ScenarioError::invalid(
                    "agents",
                    format!("must be between 1 and {MAX_AGENTS}"),
                ));
            }
        }
        if let AgentLossPolicy::Tolerate(pct) = self.on_agent_loss {
            if !(0.0..=100.0).contains(&pct) {
                return Err(ScenarioError::invalid(
                    "on_agent_loss.tolerate",
                    "must be a percentage between 0 and 100",
                ));
            }
        }
        if self.arrival_resolution() > super::MAX_ARRIVAL_RESOLUTION {
            return Err(ScenarioError::invalid(
                "arrival_resolution",
                format!(
                    "must be at most {} (0s times every arrival on its own)",
                    HumanDuration(super::MAX_ARRIVAL_RESOLUTION)
                ),
            ));
        }
        if self.debug > super::MAX_DEBUG {
            return Err(ScenarioError::invalid(
                "debug",
                format!(
                    "{} requests to print; at most {}",
                    self.debug,
                    super::MAX_DEBUG
                ),
            ));
        }
        if self.request_timeout.0.is_zero() {
            return Err(ScenarioError::invalid("request_timeout", "must be > 0"));
        }
        if let Some(g) = self.graceful_stop {
            if g.0 > super::MAX_GRACEFUL_STOP {
                return Err(ScenarioError::invalid(
                    "graceful_stop",
                    format!(
                        "must be at most {} (0s stops at once)",
                        HumanDuration(super::MAX_GRACEFUL_STOP)
                    ),
                ));
            }
        }
        if self.thresholds.len() > MAX_THRESHOLDS {
            return Err(ScenarioError::invalid(
                "thresholds",
                format!(
                    "{} thresholds; at most {MAX_THRESHOLDS}",
                    self.thresholds.len()
                ),
            ));
        }
        if !self.endpoints.is_empty() {
            if self.transport()? == Transport::Unix {
                return Err(ScenarioError::invalid(
                    "endpoints",
                    "a unix:// target has one socket path, no addresses",
                ));
            }
            crate::endpoints::parse(self.endpoints.list())
                .map_err(|(path, why)| ScenarioError::invalid(path, why))?;
        }
        if self.endpoints.is_service() {
            if let Some(t) = &self.target {
                crate::service::ServiceRef::from_target(t).map_err(|e| {
                    ScenarioError::invalid("target", format!("with `endpoints: service`, {e}"))
                })?;
            }
        }
        crate::observe::validate(&self.observe)
            .map_err(|(path, why)| ScenarioError::invalid(path, why))?;
        if self.http_version.is_some() && !self.any_target(|t| t.step_kind() == "http")? {
            return Err(ScenarioError::invalid(
                "http_version",
                "only applies to http:// and https:// targets",
            ));
        }
        if let Some(tls) = &self.tls {
            if !self.any_target(Transport::is_tls)? {
                return Err(ScenarioError::invalid(
                    "tls",
                    "only applies to https://, grpcs:// and wss:// targets",
                ));
            }
            tls.validate()?;
        }
        self.validate_workloads()?;
        self.validate_data()?;
        if self.cookies && !self.any_target(|t| t.step_kind() == "http")? {
            return Err(ScenarioError::invalid(
                "cookies",
                "only applies to http:// and https:// targets",
            ));
        }
        self.validate_setup()?;
        for w in self.workload_views() {
            for t in &w.types {
                self.validate_steps(&t.path, t.steps, &w)?;
            }
        }
        if let Some((field, _)) = self.targets().get(super::MAX_TARGETS) {
            return Err(ScenarioError::invalid(
                field.clone(),
                format!("more than {} targets in one run", super::MAX_TARGETS),
            ));
        }
        crate::grpc::check_scenario(self)?;
        if let Some(v) = &self.max_error_rate {
            let v = v.trim();
            if v != "none" && v != "off" && crate::threshold::parse_fraction(v).is_none() {
                return Err(ScenarioError::invalid(
                    "max_error_rate",
                    format!("`{v}` is not a percentage like 1% or 0%, or `none`"),
                ));
            }
        }
        if let Some(v) = &self.max_dropped {
            if crate::threshold::parse_fraction(v.trim()).is_none() {
                return Err(ScenarioError::invalid(
                    "max_dropped",
                    format!("`{v}` is not a percentage like 0.1% or 5%"),
                ));
            }
        }
        // The supply of rows is known now when the schedule does not depend on a seed the
        // controller has yet to draw; otherwise the agents check it with the run's seed.
        if self.seed.is_some() || self.arrival == ArrivalProcess::Uniform {
            self.check_data_supply(self.seed.unwrap_or(0))?;
        }
        let thresholds = self.parsed_thresholds()?;
        self.check_scopes(&thresholds, phase_scopes)
    }

    /// A workload's `load` (its `path` is its field prefix: empty at the top level).
    pub(super) fn validate_load(
        &self,
        w: &crate::workload::View<'_>,
        load: &Load,
    ) -> Result<(), ScenarioError> {
        let (path, phases) = (w.path.as_str(), w.phases);
        let field = |f: &str| format!("{path}{f}");
        if !phases.is_empty() {
            return Err(ScenarioError::invalid(
                field("load"),
                "give either phases or load, not both",
            ));
        }
        if self.arrival == ArrivalProcess::Poisson {
            return Err(ScenarioError::invalid(
                "arrival",
                "poisson only applies to phases; a load runs on a uniform schedule",
            ));
        }
        if !load.stages.is_empty() {
            check_stages(&field("load"), load)?;
        }
        if load.connections == 0 {
            return Err(ScenarioError::invalid(
                field("load.connections"),
                "must be >= 1 (or give stages: a ramp of connections)",
            ));
        }
        if load.connections > MAX_CONNECTIONS {
            return Err(ScenarioError::invalid(
                field("load.connections"),
                format!("must be <= {MAX_CONNECTIONS}"),
            ));
        }
        if load.duration.0.is_zero() {
            return Err(ScenarioError::invalid(
                field("load.duration"),
                "must be > 0",
            ));
        }
        if let Some(s) = load.streams_per_connection {
            let transport = w.target.map(Target::transport);
            let h2 = (self.http_version == Some(HttpVersion::Http2)
                && transport.is_some_and(|t| t.step_kind() == "http"))
                || matches!(transport, Some(Transport::Grpc | Transport::Grpcs));
            if !h2 {
                return Err(ScenarioError::invalid(
                    field("load.streams_per_connection"),
                    "only HTTP/2 carries several streams on a connection: it needs http_version: \"2\" or a grpc:// or grpcs:// target",
                ));
            }
            if !(1..=MAX_STREAMS_PER_CONNECTION).contains(&s) {
                return Err(ScenarioError::invalid(
                    field("load.streams_per_connection"),
                    format!("must be between 1 and {MAX_STREAMS_PER_CONNECTION}"),
                ));
            }
        }
        match (load.model, load.rate) {
            (LoadModel::Closed, Some(_)) => Err(ScenarioError::invalid(
                field("load.rate"),
                "only applies to model constant (a closed load has no rate)",
            )),
            (LoadModel::Closed, None) => Ok(()),
            (LoadModel::Constant, None) => Err(ScenarioError::invalid(
                field("load.rate"),
                "is required for model constant",
            )),
            (LoadModel::Constant, Some(r)) => {
                check_rate(&field("load.rate"), r)?;
                if r <= 0.0 {
                    return Err(ScenarioError::invalid(field("load.rate"), "must be > 0"));
                }
                Ok(())
            }
        }
    }

    /// One session type's steps (`path`: `session`, `sessions[1].steps`, ...).
    pub(super) fn validate_steps(
        &self,
        path: &str,
        steps: &[Step],
        w: &crate::workload::View<'_>,
    ) -> Result<(), ScenarioError> {
        if steps.is_empty() {
            return Err(ScenarioError::invalid(
                path,
                "must contain at least one step",
            ));
        }
        if steps.len() > MAX_STEPS {
            return Err(ScenarioError::invalid(
                path,
                format!("{} steps; at most {MAX_STEPS}", steps.len()),
            ));
        }
        // Variables extracted by the steps before the one being checked.
        let mut defined = std::collections::BTreeSet::new();
        for (i, step) in steps.iter().enumerate() {
            let at = format!("{path}[{i}]");
            match &step.target {
                Some(t) => check_own_target(&at, step, t)?,
                None if step.kind.is_request() => check_step_transport(w, &at, step.kind.key())?,
                None => {}
            }
            let field = |f: &str, why: String| {
                ScenarioError::invalid(format!("{at}.{}.{f}", step.kind.key()), why)
            };
            match &step.kind {
                StepKind::Http(http) => {
                    http.check().map_err(|(f, why)| field(&f, why))?;
                    if http.stream.is_some() && self.http_version == Some(super::HttpVersion::Http2)
                    {
                        return Err(field(
                            "stream",
                            "streamed replies are read over HTTP/1.1: drop http_version: \"2\""
                                .into(),
                        ));
                    }
                }
                StepKind::Tcp(t) => protocol::check_tcp(t).map_err(|(f, why)| field(f, why))?,
                StepKind::Udp(u) => protocol::check_udp(u).map_err(|(f, why)| field(f, why))?,
                StepKind::Grpc(g) => g.check().map_err(|(f, why)| field(&f, why))?,
                StepKind::Ws(w) => w.check().map_err(|(f, why)| field(&f, why))?,
                StepKind::Think(ThinkTime::Range { min, max }) if min > max => {
                    return Err(ScenarioError::invalid(
                        format!("{at}.think_time"),
                        "min must be <= max",
                    ));
                }
                StepKind::Think(_) => {}
            }
            if step.repeat == Some(0) {
                return Err(ScenarioError::invalid(
                    format!("{path}[{i}].repeat"),
                    "must be >= 1",
                ));
            }
            for (field, t) in step.templates() {
                self.check_refs(t, &defined, false)
                    .map_err(|why| ScenarioError::invalid(format!("{path}[{i}].{field}"), why))?;
            }
            if !step.extract.is_empty()
                || step.check.is_some()
                || matches!(step.kind, StepKind::Grpc(_))
            {
                check_reply_reading(step, &format!("{path}[{i}]"))?;
            }
            check_extraction(step, &format!("{path}[{i}]"))?;
            defined.extend(step.extract.keys().map(String::as_str));
        }
        if steps.iter().all(|s| s.requests() == 0) {
            return Err(ScenarioError::invalid(
                path,
                "must contain at least one request step",
            ));
        }
        // A session's WebSocket is opened by its first ws step.
        if let Some(i) = steps.iter().position(|s| matches!(s.kind, StepKind::Ws(_))) {
            if !matches!(steps[i].kind, StepKind::Ws(crate::ws::WsAction::Connect(_))) {
                return Err(ScenarioError::invalid(
                    format!("{path}[{i}].ws"),
                    "a session's first ws step opens its WebSocket: make it a connect",
                ));
            }
        }
        Ok(())
    }

    /// Every target the run loads, once each, with the field that gives it: the
    /// scenario's `target` first, then each workload's own, then the steps' own.
    pub fn targets(&self) -> Vec<(String, &Target)> {
        let mut out: Vec<(String, &Target)> = Vec::new();
        let top = self.target.iter().map(|t| ("target".to_string(), t));
        let own = self
            .workloads
            .iter()
            .enumerate()
            .filter_map(|(i, w)| Some((format!("workloads[{i}].target"), w.target.as_ref()?)));
        let steps = self.step_lists().into_iter().flat_map(|(path, steps)| {
            steps
                .iter()
                .enumerate()
                .filter_map(move |(i, s)| Some((format!("{path}[{i}].target"), s.target.as_ref()?)))
        });
        for (field, t) in top.chain(own).chain(steps) {
            if !out.iter().any(|(_, seen)| *seen == t) {
                out.push((field, t));
            }
        }
        out
    }

    /// Whether some target the run loads has a transport `f` accepts; an error when the run
    /// has no target at all.
    fn any_target(&self, f: impl Fn(Transport) -> bool) -> Result<bool, ScenarioError> {
        let targets = self.targets();
        if targets.is_empty() {
            return Err(ScenarioError::invalid("target", "is required"));
        }
        Ok(targets.iter().any(|(_, t)| f(t.transport())))
    }
}

/// A step's own `target:` is an `http` step's, and an `http://` or `https://` URL: the
/// session opens a second connection for it, which only HTTP steps know how to.
fn check_own_target(at: &str, step: &Step, t: &Target) -> Result<(), ScenarioError> {
    if !matches!(step.kind, StepKind::Http(_)) {
        return Err(ScenarioError::invalid(
            format!("{at}.target"),
            format!(
                "a step's own target is for http steps (this is a {} step): give its workload the target instead",
                step.kind.key()
            ),
        ));
    }
    if t.transport().step_kind() != "http" {
        return Err(ScenarioError::invalid(
            format!("{at}.target"),
            format!("an http step's target is an http:// or https:// URL, not `{t}`"),
        ));
    }
    Ok(())
}

/// A step of `kind` needs its workload's target, whose scheme runs that kind.
fn check_step_transport(
    w: &crate::workload::View<'_>,
    step: &str,
    kind: &str,
) -> Result<(), ScenarioError> {
    let Some(t) = w.target else {
        let field = if w.path.is_empty() {
            "target".to_string()
        } else {
            format!("{}target", w.path)
        };
        return Err(ScenarioError::invalid(
            field,
            format!("{step} is a {kind} step, so a target URL is required (here or the scenario's target)"),
        ));
    };
    let transport = t.transport();
    if transport.step_kind() != kind {
        let want = match kind {
            "http" => "http:// or https://",
            "tcp" => "tcp:// or unix://",
            "grpc" => "grpc:// or grpcs://",
            "ws" => "ws:// or wss://",
            _ => "udp://",
        };
        return Err(ScenarioError::invalid(
            format!("{step}.{kind}"),
            format!(
                "a {kind} step needs a {want} target, but {} is `{t}` (its steps are {})",
                if w.own_target() {
                    w.target_field.as_str()
                } else {
                    "the target"
                },
                transport.step_kind()
            ),
        ));
    }
    Ok(())
}

/// A step's extractions (variable names and extractors) and checks; `at` is the step's field
/// (`session[2]`, `setup[0]`). Session and setup steps are checked alike.
pub(super) fn check_extraction(step: &Step, at: &str) -> Result<(), ScenarioError> {
    for (name, e) in &step.extract {
        if !crate::template::is_name(name) {
            return Err(ScenarioError::invalid(
                format!("{at}.extract"),
                format!("`{name}` is not a variable name"),
            ));
        }
        e.check()
            .map_err(|why| ScenarioError::invalid(format!("{at}.extract.{name}"), why))?;
    }
    if let Some(c) = &step.check {
        c.validate()
            .map_err(|(f, why)| ScenarioError::invalid(format!("{at}.check.{f}"), why))?;
    }
    Ok(())
}

/// What a step's extraction and checks may read: everything of an HTTP response; of a tcp,
/// udp or WebSocket reply only its payload (the body), as it has no status, headers or
/// cookies; of a gRPC reply its (last) message, whose JSON Pointers the CLI compiles into
/// field numbers (`grpc.reply`).
pub(super) fn check_reply_reading(step: &Step, at: &str) -> Result<(), ScenarioError> {
    let kind = match &step.kind {
        StepKind::Http(_) => return Ok(()),
        StepKind::Tcp(_) => "tcp",
        StepKind::Udp(_) => "udp",
        StepKind::Ws(_) => "ws",
        StepKind::Grpc(g) => {
            g.check_reply(&step.json_pointers())
                .map_err(|(f, why)| ScenarioError::invalid(format!("{at}.grpc.{f}"), why))?;
            "grpc"
        }
        StepKind::Think(_) => {
            return Err(ScenarioError::invalid(
                at,
                "extract and check apply to http, tcp, udp, ws and grpc steps",
            ))
        }
    };
    if let Some((name, _)) = step.extract.iter().find(|(_, e)| !e.needs_body()) {
        return Err(ScenarioError::invalid(
            format!("{at}.extract.{name}"),
            format!(
                "a {kind} reply has no headers or cookies: take values with json, regex or between"
            ),
        ));
    }
    if step.check.as_ref().is_some_and(|c| c.status.is_some()) {
        return Err(ScenarioError::invalid(
            format!("{at}.check.status"),
            format!("a {kind} reply has no status: check it with body_contains or json"),
        ));
    }
    Ok(())
}

/// A workload's or a session type's name: not empty, and free of `/` (which joins names in
/// the report) and of parentheses (which close a threshold's scope).
pub(super) fn check_name(field: &str, name: &str) -> Result<(), ScenarioError> {
    if name.trim().is_empty() {
        return Err(ScenarioError::invalid(field, "must not be empty"));
    }
    if name.contains(['/', '(', ')']) || name.len() > 64 {
        return Err(ScenarioError::invalid(
            field,
            format!("`{name}`: at most 64 characters, without `/`, `(` or `)`"),
        ));
    }
    Ok(())
}

/// A closed or constant-rate load's ramp (`path`: the load's field): one stream per
/// connection, stages that last and reach some connections, and no `connections`/`duration`
/// beside them.
fn check_stages(path: &str, load: &Load) -> Result<(), ScenarioError> {
    use crate::ramp::{peak, total, MAX_STAGES};
    let f = |x: &str| format!("{path}.{x}");
    if load.streams() > 1 {
        return Err(ScenarioError::invalid(
            f("stages"),
            "a ramp opens one session per connection: leave streams_per_connection out",
        ));
    }
    if load.stages.len() > MAX_STAGES {
        return Err(ScenarioError::invalid(
            f("stages"),
            format!("{} stages; at most {MAX_STAGES}", load.stages.len()),
        ));
    }
    for (i, s) in load.stages.iter().enumerate() {
        if s.duration.0.is_zero() {
            return Err(ScenarioError::invalid(
                f(&format!("stages[{i}].duration")),
                "must be > 0",
            ));
        }
    }
    if load.connections != peak(&load.stages) || load.duration.0 != total(&load.stages) {
        return Err(ScenarioError::invalid(
            f("stages"),
            "give either connections and duration, or stages (which set both)",
        ));
    }
    Ok(())
}
