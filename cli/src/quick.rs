//! One-line runs and overrides, in the habits of wrk, wrk2, hey and oha:
//! `stampede run --url URL --rate R --duration D` builds a scenario from flags, and the same
//! flags override a scenario file's target and load. Everything here works on the scenario's
//! data form (JSON, which is YAML) and the result is parsed and validated like any file, so a
//! flag can never produce a scenario the file format could not.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};
use stampede_core::Scenario;

/// The flags of a one-line run (and the overrides of a file).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct QuickArgs {
    /// Target URL of a one-line run (no scenario file): one request per session to this URL.
    /// With a file, replaces its `target`.
    #[arg(long, short = 'u')]
    pub url: Option<String>,
    /// Rate in requests per second. Alone: an open model (arrivals at this rate, latency timed
    /// from each intended send). With --connections: a constant rate over that many
    /// connections (wrk2 -R).
    #[arg(long, short = 'R')]
    pub rate: Option<f64>,
    /// How long the load lasts, e.g. 30s, 5m, 1h (default 10s for a one-line run; with a file,
    /// its phases are scaled to it).
    #[arg(long, short = 'd', value_parser = crate::config::parse_duration)]
    pub duration: Option<Duration>,
    /// Connections. Alone: a closed model (each connection sends back to back, wrk -c). With
    /// --rate: the constant-rate pool.
    #[arg(long, short = 'c')]
    pub connections: Option<u32>,
    /// HTTP method of a one-line run (default GET).
    #[arg(long, short = 'm')]
    pub method: Option<String>,
    /// A request header of a one-line run, `name: value` (repeatable).
    #[arg(long = "header", short = 'H')]
    pub headers: Vec<String>,
    /// Request body of a one-line run.
    #[arg(long)]
    pub body: Option<String>,
    /// Send exactly this many requests (hey -n): at --rate, or spread over --duration, or at
    /// up to 1000/s when neither is given; over --connections (default 10) kept-alive
    /// connections, or one connection per request with --rate alone.
    #[arg(long = "requests", short = 'n', value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: Option<u64>,
    /// Skip TLS certificate verification of the target (a self-signed test server); sets the
    /// scenario's `tls.insecure_skip_verify`.
    #[arg(long)]
    pub insecure: bool,
}

/// Connections of a one-line run given neither --rate nor --connections (wrk's default).
pub const DEFAULT_CONNECTIONS: u32 = 10;
/// Duration of a one-line run without --duration (wrk's default).
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// Highest rate `-n` picks by itself (neither --rate nor --duration given): fast enough for a
/// quick check, slow enough not to flood a laptop's server by surprise.
pub const DEFAULT_COUNT_RATE: f64 = 1000.0;

impl QuickArgs {
    /// True when no flag of this group was given.
    pub fn is_empty(&self) -> bool {
        self.url.is_none()
            && self.rate.is_none()
            && self.duration.is_none()
            && self.connections.is_none()
            && self.method.is_none()
            && self.headers.is_empty()
            && self.body.is_none()
            && self.requests.is_none()
            && !self.insecure
    }

    /// The note a run prints when `--rate` alone makes every request open its own connection
    /// (an open model without a pool): its latencies include a connect each time.
    pub fn connection_note(&self) -> Option<&'static str> {
        (self.rate.is_some() && self.connections.is_none()).then_some(
            "note: --rate without --connections opens a new connection for every request \
             (each latency includes a connect); add -c N to reuse N connections",
        )
    }

    /// The scenario of a one-line run, as JSON text (parsed and validated by the caller).
    pub fn scenario_text(&self) -> Result<String> {
        let Some(url) = &self.url else {
            bail!("give a scenario file, or --url for a one-line run (see `stampede run --help`)")
        };
        let (origin, path) = split_url(url)?;
        let mut http = Map::new();
        let method = self.method.as_deref().unwrap_or("GET");
        http.insert("method".into(), json!(method));
        http.insert("path".into(), json!(path));
        if !self.headers.is_empty() {
            let mut h = Map::new();
            for (i, line) in self.headers.iter().enumerate() {
                let Some((k, v)) = line.split_once(':') else {
                    bail!("--header #{}: `{line}` is not `name: value`", i + 1)
                };
                h.insert(k.trim().to_string(), json!(v.trim()));
            }
            http.insert("headers".into(), Value::Object(h));
        }
        if let Some(b) = &self.body {
            http.insert("body".into(), json!(b));
        }
        let mut s = json!({
            "name": format!("{method} {url}"),
            "target": origin,
            "agents": 1,
            "session": [ { "http": Value::Object(http) } ],
        });
        if self.insecure {
            s["tls"] = json!({ "insecure_skip_verify": true });
        }
        self.set_load(&mut s, DEFAULT_DURATION, true)?;
        Ok(s.to_string())
    }

    /// Applies the target and load flags to a scenario file's content; the request flags
    /// (--method, --header, --body) only describe a one-line run and are refused here.
    pub fn override_file(&self, scenario: &Scenario) -> Result<String> {
        for (given, flag) in [
            (self.method.is_some(), "--method"),
            (!self.headers.is_empty(), "--header"),
            (self.body.is_some(), "--body"),
        ] {
            if given {
                bail!("{flag} describes the request of a one-line run (--url without a file); edit the scenario's session instead")
            }
        }
        if !scenario.workloads.is_empty()
            && (self.rate.is_some() || self.connections.is_some() || self.duration.is_some())
        {
            bail!("--rate, --connections and --duration set the load of a one-load scenario; this one has workloads, each with its own load: edit them in the file")
        }
        let mut v = serde_json::to_value(scenario).context("reading the scenario")?;
        if let Some(url) = &self.url {
            v["target"] = json!(url);
        }
        if self.insecure {
            let tls = v
                .as_object_mut()
                .context("a scenario is a mapping")?
                .entry("tls")
                .or_insert_with(|| json!({}));
            tls["insecure_skip_verify"] = json!(true);
        }
        self.set_load(&mut v, scenario.duration(), false)?;
        Ok(v.to_string())
    }

    /// Rewrites the load from --rate/--connections/--duration. With neither rate nor
    /// connections, a file keeps its load shape and only its length changes.
    fn set_load(&self, v: &mut Value, current: Duration, fresh: bool) -> Result<()> {
        if let Some(n) = self.requests {
            return self.set_count(v, n);
        }
        let obj = v.as_object_mut().context("a scenario is a mapping")?;
        let duration = self.duration.unwrap_or(current);
        if duration.is_zero() {
            bail!("--duration must be > 0");
        }
        let d = ms(duration);
        let load = match (self.rate, self.connections) {
            (None, None) if fresh => Some(json!({
                "model": "closed", "connections": DEFAULT_CONNECTIONS, "duration": d
            })),
            (None, None) => None,
            // A file's phases keep their names (its `phase()` thresholds name them) and their
            // proportions: each runs at the one rate, over its share of the duration.
            (Some(r), None) if !fresh && obj.get("phases").is_some_and(Value::is_array) => {
                let Some(Value::Array(phases)) = obj.get_mut("phases") else {
                    return Ok(());
                };
                if self.duration.is_some() {
                    scale_phases(phases, current, duration)?;
                }
                for p in phases.iter_mut() {
                    if let Some(p) = p.as_object_mut() {
                        p.insert("arrival_rate".into(), json!(r));
                        p.remove("ramp_to");
                    }
                }
                return Ok(());
            }
            (Some(r), None) => {
                obj.remove("load");
                obj.insert(
                    "phases".into(),
                    json!([{ "name": "rate", "duration": d, "arrival_rate": r }]),
                );
                return Ok(());
            }
            (Some(r), Some(c)) => Some(json!({
                "model": "constant", "rate": r, "connections": c, "duration": d
            })),
            (None, Some(c)) => Some(json!({
                "model": "closed", "connections": c, "duration": d
            })),
        };
        match load {
            Some(l) => {
                obj.remove("phases");
                obj.remove("arrival");
                obj.insert("load".into(), l);
            }
            None => {
                let Some(new) = self.duration else {
                    return Ok(());
                };
                if let Some(l) = obj.get_mut("load") {
                    l["duration"] = json!(ms(new));
                } else if let Some(Value::Array(phases)) = obj.get_mut("phases") {
                    scale_phases(phases, current, new)?;
                }
            }
        }
        Ok(())
    }
}

impl QuickArgs {
    /// `-n N`: exactly N sessions (N requests in a one-line run). The uniform schedule puts
    /// its k-th arrival at level k + ½, so a rate r over N / r seconds holds exactly N of them
    /// whatever the rounding of the duration.
    fn set_count(&self, v: &mut Value, n: u64) -> Result<()> {
        let obj = v.as_object_mut().context("a scenario is a mapping")?;
        let has_workloads = obj
            .get("workloads")
            .and_then(Value::as_array)
            .is_some_and(|w| !w.is_empty());
        if has_workloads {
            bail!("--requests sets the load of a one-load scenario; this one has workloads");
        }
        let rate = match (self.rate, self.duration) {
            (Some(_), Some(_)) => {
                bail!("--requests with both --rate and --duration: give one of them (the other follows)")
            }
            (Some(r), None) if r > 0.0 && r.is_finite() => r,
            (Some(r), None) => bail!("--rate {r}: must be > 0"),
            (None, Some(d)) if !d.is_zero() => n as f64 / d.as_secs_f64(),
            (None, Some(_)) => bail!("--duration must be > 0"),
            (None, None) => (n as f64).min(DEFAULT_COUNT_RATE),
        };
        let d = format!("{}ms", n as f64 / rate * 1e3);
        obj.remove("phases");
        obj.remove("arrival");
        obj.remove("load");
        match (self.rate, self.connections) {
            // --rate alone: the open model, as without -n.
            (Some(_), None) => {
                obj.insert(
                    "phases".into(),
                    json!([{ "name": "requests", "duration": d, "arrival_rate": rate }]),
                );
            }
            (_, c) => {
                let c = c.unwrap_or(DEFAULT_CONNECTIONS);
                obj.insert(
                    "load".into(),
                    json!({ "model": "constant", "rate": rate, "connections": c, "duration": d }),
                );
            }
        }
        Ok(())
    }
}

/// Scales every phase's duration by `new / current`, keeping their proportions (the demo's
/// `--duration`, and `run FILE --duration`).
pub fn scale_phases(phases: &mut [Value], current: Duration, new: Duration) -> Result<()> {
    let factor = new.as_secs_f64() / current.as_secs_f64().max(1e-9);
    for (i, p) in phases.iter_mut().enumerate() {
        let text = p["duration"].as_str().unwrap_or_default().to_string();
        let old = stampede_core::duration::parse_duration(&text)
            .map_err(|e| anyhow::anyhow!("phases[{i}].duration: {e}"))?;
        p["duration"] = json!(ms(old.mul_f64(factor)));
    }
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{}ms", d.as_secs_f64() * 1e3)
}

/// Whether a `run` argument is a URL rather than a file name: a scheme stampede speaks, then
/// `://` and a host (`stampede run http://host/`, as wrk, hey and oha take it).
pub fn looks_like_url(arg: &str) -> bool {
    let Some((scheme, rest)) = arg.split_once("://") else {
        return false;
    };
    let known = [
        "http", "https", "h2c", "grpc", "grpcs", "tcp", "udp", "unix",
    ];
    known.contains(&scheme.to_ascii_lowercase().as_str()) && !rest.is_empty()
}

/// `http://host:port/a/b?q` → (`http://host:port`, `/a/b?q`).
fn split_url(url: &str) -> Result<(String, String)> {
    let Some((scheme, rest)) = url.split_once("://") else {
        bail!("--url `{url}`: expected a URL like http://host:port/path")
    };
    let at = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(at);
    if authority.is_empty() {
        bail!("--url `{url}`: no host");
    }
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_string(),
    };
    Ok((format!("{scheme}://{authority}"), path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick(url: &str) -> QuickArgs {
        QuickArgs {
            url: Some(url.into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_one_line_run_is_a_valid_scenario() {
        let mut q = quick("http://127.0.0.1:8080/api/me?x=1");
        q.rate = Some(50.0);
        q.duration = Some(Duration::from_secs(2));
        q.headers = vec!["authorization: Bearer t".into()];
        let s = Scenario::from_yaml(&q.scenario_text().unwrap()).unwrap();
        assert_eq!(
            s.target.as_ref().map(|t| t.as_str()),
            Some("http://127.0.0.1:8080")
        );
        assert_eq!(s.phases.len(), 1);
        assert_eq!(s.phases[0].arrival_rate, 50.0);
        assert_eq!(s.duration(), Duration::from_secs(2));
        let http = match &s.session[0].kind {
            stampede_core::scenario::StepKind::Http(x) => x,
            k => panic!("not a http step: {k:?}"),
        };
        assert_eq!(http.path.to_string(), "/api/me?x=1");
        assert_eq!(http.headers["authorization"].to_string(), "Bearer t");

        // Neither rate nor connections: wrk's closed model with 10 connections for 10 s.
        let s = Scenario::from_yaml(&quick("http://h:1").scenario_text().unwrap()).unwrap();
        let l = s.load.unwrap();
        assert_eq!((l.connections, l.duration.0), (10, DEFAULT_DURATION));
        // Rate and connections: constant.
        let mut q = quick("http://h:1");
        q.rate = Some(100.0);
        q.connections = Some(4);
        let s = Scenario::from_yaml(&q.scenario_text().unwrap()).unwrap();
        assert_eq!(s.load.unwrap().rate, Some(100.0));
    }

    #[test]
    fn flags_override_a_file() {
        let file = Scenario::from_yaml(
            "name: f\ntarget: http://a:1\nphases:\n  - { duration: 10s, arrival_rate: 5 }\n  - { duration: 30s, arrival_rate: 5, ramp_to: 50 }\nsession:\n  - http: { path: / }\n",
        )
        .unwrap();
        let q = QuickArgs {
            url: Some("http://b:2".into()),
            duration: Some(Duration::from_secs(4)),
            ..Default::default()
        };
        let s = Scenario::from_yaml(&q.override_file(&file).unwrap()).unwrap();
        assert_eq!(s.target.as_ref().map(|t| t.as_str()), Some("http://b:2"));
        assert_eq!(s.phases[0].duration.0, Duration::from_secs(1));
        assert_eq!(s.phases[1].duration.0, Duration::from_secs(3));
        assert_eq!(s.phases[1].ramp_to, Some(50.0));
        let q = QuickArgs {
            connections: Some(7),
            ..Default::default()
        };
        let s = Scenario::from_yaml(&q.override_file(&file).unwrap()).unwrap();
        assert!(s.phases.is_empty());
        let l = s.load.unwrap();
        assert_eq!((l.connections, l.duration.0), (7, Duration::from_secs(40)));
        // --rate keeps the file's phases and their names, each at the one rate.
        let named = Scenario::from_yaml(
            "name: f\ntarget: http://a:1\nphases:\n  - { name: warm, duration: 10s, arrival_rate: 5 }\n  - { name: steady, duration: 30s, arrival_rate: 5, ramp_to: 50 }\nsession:\n  - http: { path: / }\nthresholds: [ \"phase(steady).p99 < 1s\" ]\n",
        )
        .unwrap();
        let q = QuickArgs {
            rate: Some(20.0),
            duration: Some(Duration::from_secs(8)),
            ..Default::default()
        };
        let s = Scenario::from_yaml(&q.override_file(&named).unwrap()).unwrap();
        let names: Vec<_> = s.phases.iter().map(|p| p.name.clone().unwrap()).collect();
        assert_eq!(names, ["warm", "steady"]);
        assert!(s
            .phases
            .iter()
            .all(|p| p.arrival_rate == 20.0 && p.ramp_to.is_none()));
        assert_eq!(s.phases[1].duration.0, Duration::from_secs(6));
        let q = QuickArgs {
            method: Some("POST".into()),
            ..Default::default()
        };
        assert!(q
            .override_file(&file)
            .unwrap_err()
            .to_string()
            .contains("--method"));
    }

    #[test]
    fn bad_urls_and_headers_say_why() {
        assert!(quick("localhost:80").scenario_text().is_err());
        let mut q = quick("http://h:1/");
        q.headers = vec!["no-colon".into()];
        assert!(q
            .scenario_text()
            .unwrap_err()
            .to_string()
            .contains("--header #1"));
        assert!(QuickArgs::default().scenario_text().is_err());
    }
}
