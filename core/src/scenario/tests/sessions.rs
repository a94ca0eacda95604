//! Sessions: mixes of session types, setup steps, step kinds and the cap on request steps.

use super::*;

#[test]
fn sessions_parse_once_and_name_the_field() {
    let s = Scenario::from_yaml(SESSIONS).unwrap();
    let h = match &s.session[0].kind {
        StepKind::Http(x) => x,
        k => panic!("not a http step: {k:?}"),
    };
    assert_eq!(h.method, "POST");
    assert!(!h.is_static());
    assert_eq!(s.target.as_ref().unwrap().prefix(), "/api/v1");
    let again = Scenario::from_yaml(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(again, s);
    let cases = [
        (
            "extract: { token: { json: /token } }",
            "extract: { tok: { json: /token } }",
            "session[1].http.headers.authorization: ${token} is not defined before this step",
        ),
        (
            "${users.name|url}",
            "${user.name}",
            "session[0].http.path: ${user.name}: `user` is not a data source",
        ),
        (
            "${users.id}",
            "${users.email}",
            "session[0].http.body: ${users.email}: data.users has no column `email` (it has id, name)",
        ),
        (
            "${users.name|url}'",
            "${users.name|url'",
            "session[0].http.path: `${users.name|url` is not closed by } at line 9 column 11",
        ),
        (
            "json: /token",
            "json: token",
            "session[0].extract.token: `token` is not a JSON Pointer (it starts with /)",
        ),
        (
            "on_exhausted: wrap",
            "on_exhausted: fail",
            "data.users: 2 rows, 5 arrivals: rows run out at t=0.5 s in phase phase-1; add rows, or use on_exhausted: wrap or stop",
        ),
    ];
    for (from, to, want) in cases {
        assert_eq!(err(&SESSIONS.replace(from, to)).to_string(), want, "{to}");
    }
    let e = err(&SESSIONS.replace("method: post", "method: 'g t'"));
    assert_eq!(e.path(), "session[0].http.method");
}

#[test]
fn setup_steps_are_checked_and_their_values_read_as_setup() {
    let text = r#"
name: t
target: http://127.0.0.1:1
data:
  users: { on_exhausted: wrap, columns: [id], rows: [["1"]] }
phases: [ { duration: 1s, arrival_rate: 2 } ]
setup:
  - name: token
    http: { method: post, path: /oauth/token, body: 'key=${env:KEY}&t=${now}' }
    extract: { token: { json: /access_token } }
    check: { status: [200] }
  - http: { path: '/who?t=${setup.token|url}' }
    extract: { who: { header: x-who } }
session:
  - http: { path: '/u/${users.id}', headers: { authorization: 'Bearer ${setup.token}', x-who: '${setup.who}' } }
"#;
    let s = Scenario::from_yaml(text).unwrap();
    assert_eq!(s.setup.len(), 2);
    assert_eq!(
        s.requests_per_session(),
        1,
        "setup steps are not the session's"
    );
    assert_eq!(s.env_names().into_iter().collect::<Vec<_>>(), ["KEY"]);
    assert_eq!(s.setup_names(), ["token", "who"]);
    let again = Scenario::from_yaml(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(again, s);
    let refreshed = Scenario::from_yaml(&text.replace("phases:", "setup_refresh: 5m\nphases:"));
    assert_eq!(refreshed.unwrap().setup_refresh.unwrap().0.as_secs(), 300);
    assert_eq!(
        err("name: t\ntarget: http://127.0.0.1:1\nsetup_refresh: 5m\nphases: [ { duration: 1s, arrival_rate: 2 } ]\nsession: [ { http: { path: / } } ]\n").to_string(),
        "setup_refresh: refreshes the setup steps' values: give setup steps"
    );
    for (from, to, want) in [
        (
            "x-who: '${setup.who}'",
            "x-who: '${setup.nope}'",
            "session[0].http.headers.x-who: ${setup.nope} is not extracted by any setup step",
        ),
        (
            "'/who?t=${setup.token|url}'",
            "'/who?t=${token}'",
            "setup[1].http.path: ${token}: a setup step reads the values of earlier setup steps as ${setup.token}",
        ),
        (
            "'/who?t=${setup.token|url}'",
            "'/who?t=${setup.who}'",
            "setup[1].http.path: ${setup.who} is not defined before this step",
        ),
        (
            "'/who?t=${setup.token|url}'",
            "'/who?u=${users.id}'",
            "setup[1].http.path: ${users.id}: setup steps run once per run, not per session, so they read no data",
        ),
        (
            "  - http: { path: '/who?t=${setup.token|url}' }\n",
            "  - think_time: 1s\n",
            "setup[1]: a setup step is an http step",
        ),
        (
            "json: /access_token",
            "json: access_token",
            "setup[0].extract.token: `access_token` is not a JSON Pointer (it starts with /)",
        ),
        (
            "users: { on_exhausted",
            "setup: { on_exhausted",
            "data: `setup` cannot name a data source",
        ),
        (
            "phases:",
            "setup_refresh: 500ms\nphases:",
            "setup_refresh: must be at least 1s",
        ),
    ] {
        assert_eq!(err(&text.replace(from, to)).to_string(), want, "{to}");
    }
    let tcp = "name: t\ntarget: tcp://127.0.0.1:1\nphases: [ { duration: 1s, arrival_rate: 1 } ]\nsetup: [ { http: { path: / } } ]\nsession: [ { tcp: { send: { text: x } } } ]\n";
    assert_eq!(
        err(tcp).to_string(),
        "setup: setup steps are http steps: they need an http:// or https:// target"
    );
}

/// A mix of session types (`types` × `steps` request steps) over `phases` phases.
fn mix(types: usize, steps: usize, phases: usize) -> String {
    let step = vec!["{ http: { path: / } }"; steps].join(", ");
    let mut s = String::from("name: m\ntarget: http://127.0.0.1:1\nphases:\n");
    for _ in 0..phases {
        s.push_str("  - { duration: 1s, arrival_rate: 1 }\n");
    }
    s.push_str("sessions:\n");
    for t in 0..types {
        s.push_str(&format!(
            "  - {{ name: t{t}, weight: 1, steps: [ {step} ] }}\n"
        ));
    }
    s
}

/// Request steps are capped over the whole run (each has statistics on every agent and in
/// the controller), and so are phases × steps; the message names the limit.
#[test]
fn request_steps_are_capped_over_the_run() {
    Scenario::from_yaml(&mix(16, 100, 1)).unwrap();
    Scenario::from_yaml(&mix(40, 100, 1)).unwrap();
    let e = err(&mix(41, 100, 1));
    assert_eq!(e.path(), "sessions");
    assert!(e.to_string().contains("4100 request steps"), "{e}");
    assert!(e.to_string().contains("at most 4096"), "{e}");
    Scenario::from_yaml(&mix(1, 100, 1000)).unwrap();
    let e = err(&mix(2, 100, 501));
    assert!(
        e.to_string().contains(
            "501 phases × 200 request steps = 100200 per-step statistics; at most 100000"
        ),
        "{e}"
    );
}

#[test]
fn a_step_without_a_kind_or_with_two_is_refused_at_its_path() {
    let none = err(&format!("{DEMO}  - repeat: 2\n"));
    assert_eq!(none.path(), "session[1]", "{none}");
    assert!(
        none.to_string().contains(
            "a step needs exactly one of: http, tcp, udp, grpc, ws, think_time (it has none)"
        ),
        "{none}"
    );
    let two = err(&format!(
        "{DEMO}  - {{ http: {{ path: / }}, think_time: 1s }}\n"
    ));
    assert_eq!(two.path(), "session[1]", "{two}");
    assert!(
        two.to_string().contains("(it has http and think_time)"),
        "{two}"
    );
    let setup = err(&DEMO.replace(
        "session:\n",
        "setup:\n  - { http: { path: /login }, tcp: { send: { text: hi } } }\nsession:\n",
    ));
    assert_eq!(setup.path(), "setup[0]", "{setup}");
    assert!(
        setup.to_string().contains("(it has http and tcp)"),
        "{setup}"
    );
}

#[test]
fn every_step_kind_survives_yaml_and_json() {
    let yaml = format!(
        "{DEMO}  - {{ name: pause, think_time: {{ min: 1s, max: 2s }} }}\n  - http: {{ method: POST, path: /x, body: hi }}\n    repeat: 3\n    new_connection: true\n    extract: {{ id: {{ json: /id }} }}\n    check: {{ status: [201] }}\n"
    );
    let s = Scenario::from_yaml(&yaml).unwrap();
    let kinds: Vec<_> = s.session.iter().map(|st| st.kind.key()).collect();
    assert_eq!(kinds, ["http", "think_time", "http"]);
    assert_eq!(s.session[2].repeat(), 3);
    assert!(s.session[2].new_connection && s.session[2].check.is_some());
    let json = serde_json::to_string(&s).unwrap();
    assert!(
        json.contains(r#""think_time":{"min":"1s","max":"2s"}"#),
        "{json}"
    );
    assert!(!json.contains("kind"), "{json}");
    assert_eq!(Scenario::from_yaml(&json).unwrap(), s);
    let again = serde_norway::to_string(&s).unwrap();
    assert_eq!(Scenario::from_yaml(&again).unwrap(), s);
    for (yaml, key) in [
        ("tcp://127.0.0.1:7000", "tcp: { send: { text: hi } }"),
        ("udp://127.0.0.1:7000", "udp: { send: { text: hi } }"),
    ] {
        let text = DEMO
            .replace("http://127.0.0.1:8080", yaml)
            .replace("http: { method: GET, path: /data }", key);
        let s = Scenario::from_yaml(&text).unwrap();
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(Scenario::from_yaml(&json).unwrap(), s, "{json}");
    }
}

/// The setup values travel to every agent in one message: their count is capped so that at
/// the longest extracted length they fit it, and the cap is named.
#[test]
fn setup_values_are_capped_where_every_agent_receives_them() {
    let with = |n: usize| {
        let extract: Vec<String> = (0..n)
            .map(|i| format!("v{i}: {{ header: x-v{i} }}"))
            .collect();
        format!(
            "name: t\ntarget: http://127.0.0.1:1\nphases: [ {{ duration: 1s, arrival_rate: 2 }} ]\n\
             setup:\n  - http: {{ path: /token }}\n    extract: {{ {} }}\n\
             session: [ {{ http: {{ path: / }} }} ]\n",
            extract.join(", ")
        )
    };
    assert!(Scenario::from_yaml(&with(MAX_SETUP_VALUES)).is_ok());
    let e = err(&with(MAX_SETUP_VALUES + 1)).to_string();
    assert_eq!(
        e,
        format!(
            "setup: {} values extracted; at most {MAX_SETUP_VALUES} (MAX_SETUP_VALUES): every \
             agent receives them all, up to 64 KiB each",
            MAX_SETUP_VALUES + 1
        )
    );
    assert!(setup_values_too_large(MAX_SETUP_VALUES_BYTES + 1).contains("2048 KiB"));
}

/// `debug` (set by `run --debug N`) is bounded like any field.
#[test]
fn debug_is_capped() {
    let base = "name: t\ntarget: http://127.0.0.1:1\nphases: [ { duration: 1s, arrival_rate: 2 } ]\nsession: [ { http: { path: / } } ]\n";
    let s = Scenario::from_yaml(&format!("{base}debug: {MAX_DEBUG}\n")).unwrap();
    assert_eq!(s.debug, MAX_DEBUG);
    assert_eq!(
        err(&format!("{base}debug: {}\n", MAX_DEBUG + 1)).to_string(),
        format!(
            "debug: {} requests to print; at most {MAX_DEBUG}",
            MAX_DEBUG + 1
        )
    );
}

/// Rows an agent would refuse on arrival (more than it holds, as the wire packs them) are
/// refused by `validate`, with the agent's words: 3.8 M one-character rows are 7.6 MB of CSV
/// and 34 MiB packed.
#[test]
fn data_an_agent_cannot_hold_is_refused_by_validate() {
    let text =
        "name: t\ntarget: http://127.0.0.1:1\nphases: [ { duration: 1s, arrival_rate: 2 } ]\n\
                data:\n  d: { order: random, columns: [c], rows: [[x]] }\n\
                session: [ { http: { path: '/r/${d.c}' } } ]\n";
    let mut s = Scenario::from_yaml(text).unwrap();
    let fits = MAX_AGENT_DATA_BYTES / 9;
    let d = s.data.get_mut("d").unwrap();
    d.rows = crate::data::Rows::from_rows((0..fits).map(|_| ["x"])).unwrap();
    assert_eq!(d.rows.share_bytes(), fits * 9);
    s.validate().unwrap();
    let d = s.data.get_mut("d").unwrap();
    d.rows = crate::data::Rows::from_rows((0..fits + 1).map(|_| ["x"])).unwrap();
    let e = s.validate().unwrap_err().to_string();
    assert!(e.starts_with("data.d: 32.0 MiB of rows"), "{e}");
    assert!(e.ends_with(&data_rows_too_large()), "{e}");
}
