//! The load: phases, load models, arrival resolution and the agent-loss policy, with their errors.

use super::*;

#[test]
fn empty_phases_are_rejected() {
    let text = "name: x\ntarget: http://h:1\nphases: []\nsession:\n  - http: {path: /}\n";
    assert_eq!(
        err(text).to_string(),
        "phases: must contain at least one phase"
    );
}

#[test]
fn arrival_resolution_defaults_to_a_millisecond_and_is_bounded() {
    let d = std::time::Duration::from_millis;
    assert_eq!(
        Scenario::from_yaml(DEMO).unwrap().arrival_resolution(),
        d(1)
    );
    for (given, expect) in [
        ("0s", d(0)),
        ("0.25ms", std::time::Duration::from_micros(250)),
        ("100ms", d(100)),
    ] {
        let s = Scenario::from_yaml(&format!("{DEMO}arrival_resolution: {given}\n")).unwrap();
        assert_eq!(s.arrival_resolution(), expect, "{given}");
    }
    let e = err(&format!("{DEMO}arrival_resolution: 1s\n"));
    assert_eq!(
        e.to_string(),
        "arrival_resolution: must be at most 100ms (0s times every arrival on its own)"
    );
    assert!(err(&format!("{DEMO}arrival_resolution: -1ms\n"))
        .to_string()
        .starts_with("arrival_resolution"));
}

#[test]
fn loss_policy_parses() {
    let s = Scenario::from_yaml(&format!("{DEMO}on_agent_loss: {{ tolerate: 50 }}\n")).unwrap();
    assert_eq!(s.on_agent_loss, AgentLossPolicy::Tolerate(50.0));
    let e = err(&format!("{DEMO}on_agent_loss: {{ tolerate: 150 }}\n"));
    assert_eq!(e.path(), "on_agent_loss.tolerate");
}

const CLOSED: &str = r#"
name: closed
target: http://127.0.0.1:8080
load: { model: closed, connections: 10, duration: 5s }
session:
  - http: { path: / }
"#;

#[test]
fn load_models_parse() {
    let s = Scenario::from_yaml(CLOSED).unwrap();
    assert!(s.is_closed());
    assert_eq!(s.duration(), std::time::Duration::from_secs(5));
    let p = s.effective_phases();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].display_name(0), "closed");
    assert_eq!(p[0].expected_arrivals(), 0.0);
    let c = Scenario::from_yaml(&CLOSED.replace("model: closed,", "model: constant, rate: 2000,"))
        .unwrap();
    assert!(!c.is_closed());
    assert_eq!(c.effective_phases()[0].display_name(0), "constant");
    assert_eq!(c.effective_phases()[0].expected_arrivals(), 10_000.0);
    // Serialising and parsing again gives the same scenario (the controller ships JSON).
    let again = Scenario::from_yaml(&serde_json::to_string(&c).unwrap()).unwrap();
    assert_eq!(again, c);
}

#[test]
fn load_validation_names_the_field() {
    let cases = [
        (
            "connections: 10",
            "connections: 0",
            "load.connections: must be >= 1 (or give stages: a ramp of connections)",
        ),
        ("duration: 5s", "duration: 0s", "load.duration: must be > 0"),
        (
            "connections: 10",
            "connections: 10, streams_per_connection: 4",
            "load.streams_per_connection: only HTTP/2 carries several streams on a connection: it needs http_version: \"2\" or a grpc:// or grpcs:// target",
        ),
        (
            "model: closed,",
            "model: closed, rate: 5,",
            "load.rate: only applies to model constant (a closed load has no rate)",
        ),
        (
            "model: closed,",
            "model: constant,",
            "load.rate: is required for model constant",
        ),
        (
            "model: closed,",
            "model: constant, rate: 0,",
            "load.rate: must be > 0",
        ),
        (
            "model: closed,",
            "model: constant, rate: -1,",
            "load.rate: must be >= 0",
        ),
    ];
    for (from, to, want) in cases {
        assert_eq!(err(&CLOSED.replace(from, to)).to_string(), want, "{to}");
    }
    let both = format!("{CLOSED}phases:\n  - {{ duration: 1s, arrival_rate: 1 }}\n");
    assert_eq!(
        err(&both).to_string(),
        "load: give either phases or load, not both"
    );
    let neither = CLOSED.replace(
        "load: { model: closed, connections: 10, duration: 5s }\n",
        "",
    );
    assert_eq!(
        err(&neither).to_string(),
        "phases: must contain at least one phase"
    );
    assert_eq!(
        err(&CLOSED.replace("model: closed", "model: open")).path(),
        "load.model"
    );
    assert_eq!(
        err(&format!("{CLOSED}arrival: poisson\n")).path(),
        "arrival"
    );
}
