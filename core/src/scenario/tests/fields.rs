//! The scenario's top-level fields: what is accepted, and how a wrong value, type or protocol is
//! refused with its field named.

use super::*;

#[test]
fn durations_without_units_and_think_times_say_what_to_write() {
    let e = err(&DEMO.replace(
        "duration: 10s\n    arrival_rate: 20\n  -",
        "duration: 10\n    arrival_rate: 20\n  -",
    ));
    assert!(e.to_string().contains("`10` has no unit"), "{e}");
    let think = format!("{DEMO}  - think_time: 500\n");
    let e = err(&think);
    assert!(e.to_string().contains("`500` has no unit"), "{e}");
    assert!(e.path().contains("think_time"), "{}", e.path());
    let e = err(&format!("{DEMO}  - think_time: 2 minutes\n"));
    assert!(e.to_string().contains("write `2m`"), "{e}");
    let ok =
        Scenario::from_yaml(&format!("{DEMO}  - think_time: {{ min: 1s, max: 2s }}\n")).unwrap();
    assert!(matches!(
        ok.session[1].kind,
        StepKind::Think(ThinkTime::Range { .. })
    ));
    let e = err(&format!("{DEMO}  - think_time: {{ min: 1s, most: 2s }}\n"));
    assert!(e.to_string().contains("most"), "{e}");
}

#[test]
fn header_values_cannot_inject_lines() {
    let e = err(&DEMO.replace(
        "http: { method: GET, path: /data }",
        "http: { method: GET, path: /data, headers: { x-a: \"1\\r\\nx-b: 2\" } }",
    ));
    assert_eq!(e.path(), "session[0].http.headers.x-a");
    assert!(e.to_string().contains("line break"), "{e}");
}

#[test]
fn accepts_the_contract_subset() {
    let s = Scenario::from_yaml(DEMO).unwrap();
    assert_eq!(s.name, "ramp-demo");
    assert_eq!(s.agents, Some(3));
    assert_eq!(s.phases.len(), 2);
    assert_eq!(s.phases[1].end_rate(), 100.0);
    assert_eq!(s.requests_per_session(), 1);
    assert_eq!(s.phases[1].expected_arrivals(), 600.0);
    assert_eq!(s.on_agent_loss, AgentLossPolicy::Fail);
}

#[test]
fn negative_ramp_names_the_field() {
    let e = err(&DEMO.replace("ramp_to: 100", "ramp_to: -5"));
    assert_eq!(e.to_string(), "phases[1].ramp_to: must be >= 0");
}

#[test]
fn wrong_type_names_the_field() {
    let e = err(&DEMO.replace(
        "arrival_rate: 20\n  - duration",
        "arrival_rate: lots\n  - duration",
    ));
    assert_eq!(e.path(), "phases[0].arrival_rate", "{e}");
}

#[test]
fn unknown_protocol_is_rejected() {
    let e = err(&DEMO.replace("http: { method: GET, path: /data }", "ftp: { path: /x }"));
    assert_eq!(e.path(), "session[0].ftp", "{e}");
    assert!(
        e.to_string()
            .starts_with("session[0].ftp: unknown field `ftp`"),
        "{e}"
    );
    assert!(e.to_string().contains("ftp"), "{e}");
}

#[test]
fn garbage_never_panics() {
    for text in [
        "",
        "[",
        "{{{",
        "name: [1,2",
        "phases: 3",
        "- - -",
        "name: x\nphases:\n - 1",
        "\u{0}\u{1}",
    ] {
        let _ = Scenario::from_yaml(text);
    }
}
