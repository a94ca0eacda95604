use super::*;

const DEMO: &str = r#"
name: ramp-demo
target: http://127.0.0.1:8080
agents: 3
arrival: uniform
phases:
  - duration: 10s
    arrival_rate: 20
  - duration: 10s
    arrival_rate: 20
    ramp_to: 100
session:
  - http: { method: GET, path: /data }
"#;

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

fn err(text: &str) -> ScenarioError {
    Scenario::from_yaml(text).expect_err("should be rejected")
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

#[test]
fn http_step_needs_target() {
    let e = err(&DEMO.replace("target: http://127.0.0.1:8080\n", ""));
    assert_eq!(e.path(), "target");
}

const TCP: &str = r#"
name: tcp
target: tcp://127.0.0.1:7000
phases:
  - { duration: 1s, arrival_rate: 1 }
session:
  - tcp:
      send: { text: hi }
      framing: { delimiter: { hex: 0d0a } }
      expect: { prefix: { base64: aGk= } }
"#;

#[test]
fn protocol_steps_parse() {
    use crate::protocol::{Expect, Framing, Payload};
    let s = Scenario::from_yaml(TCP).unwrap();
    let t = match &s.session[0].kind {
        StepKind::Tcp(x) => x,
        k => panic!("not a tcp step: {k:?}"),
    };
    assert_eq!(t.framing, Framing::Delimiter(Payload::Hex("0d0a".into())));
    assert_eq!(
        t.expect,
        Some(Expect::Prefix(Payload::Base64("aGk=".into())))
    );
    assert_eq!(s.requests_per_session(), 1);
    let again = Scenario::from_yaml(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(again, s);
    let default = TCP.replace("      framing: { delimiter: { hex: 0d0a } }\n", "");
    let d = Scenario::from_yaml(&default).unwrap();
    assert_eq!(
        (match &d.session[0].kind {
            StepKind::Tcp(x) => x,
            k => panic!("not a tcp step: {k:?}"),
        })
        .framing,
        Framing::LengthPrefixed
    );
    let fixed = TCP.replace("{ delimiter: { hex: 0d0a } }", "{ fixed: 2 }");
    Scenario::from_yaml(&fixed).unwrap();
    let udp = "name: u\ntarget: udp://127.0.0.1:53\nphases: [{ duration: 1s, arrival_rate: 1 }]\nsession:\n  - udp: { send: { hex: 'ab cd' }, timeout: 250ms }\n";
    let u = Scenario::from_yaml(udp).unwrap();
    assert_eq!(
        (match &u.session[0].kind {
            StepKind::Udp(x) => x,
            k => panic!("not a udp step: {k:?}"),
        })
        .timeout
        .unwrap()
        .0
        .as_millis(),
        250
    );
    Scenario::from_yaml(&TCP.replace("tcp://127.0.0.1:7000", "unix:///tmp/e.sock")).unwrap();
}

#[test]
fn protocol_errors_name_the_field() {
    let cases = [
        ("{ text: hi }", "{ hex: abc }", "session[0].tcp.send"),
        ("{ text: hi }", "{ base64: '!!' }", "session[0].tcp.send"),
        ("{ text: hi }", "{ file: '' }", "session[0].tcp.send"),
        (
            "{ text: hi }",
            "{ text: hi, hex: 00 }",
            "session[0].tcp.send",
        ),
        (
            "{ delimiter: { hex: 0d0a } }",
            "{ fixed: 0 }",
            "session[0].tcp.framing.fixed",
        ),
        (
            "{ delimiter: { hex: 0d0a } }",
            "{ fixed: 99999999 }",
            "session[0].tcp.framing.fixed",
        ),
        (
            "{ delimiter: { hex: 0d0a } }",
            "{ delimiter: { text: '' } }",
            "session[0].tcp.framing.delimiter",
        ),
        (
            "{ delimiter: { hex: 0d0a } }",
            "{ delimiter: { hex: zz } }",
            "session[0].tcp.framing.delimiter",
        ),
        (
            "{ delimiter: { hex: 0d0a } }",
            "chunked",
            "session[0].tcp.framing",
        ),
        (
            "{ prefix: { base64: aGk= } }",
            "{ prefix: { base64: 'a' } }",
            "session[0].tcp.expect",
        ),
        (
            "{ prefix: { base64: aGk= } }",
            "{ contains: { text: a } }",
            "session[0].tcp.expect.contains",
        ),
        (
            "tcp://127.0.0.1:7000",
            "udp://127.0.0.1:7000",
            "session[0].tcp",
        ),
        (
            "tcp://127.0.0.1:7000",
            "http://127.0.0.1:7000",
            "session[0].tcp",
        ),
        ("tcp://127.0.0.1:7000", "tcp://127.0.0.1", "target"),
        ("tcp://127.0.0.1:7000", "gopher://h:1", "target"),
    ];
    for (from, to, path) in cases {
        let e = err(&TCP.replace(from, to));
        assert_eq!(e.path(), path, "{to}: {e}");
    }
    let e = err(&TCP
        .replace("{ delimiter: { hex: 0d0a } }", "{ fixed: 3 }")
        .replace("prefix", "exact"));
    assert_eq!(
        e.to_string(),
        "session[0].tcp.expect: is 2 bytes but the framing fixes replies at 3"
    );
    let e = err(&DEMO.replace("target: http://127.0.0.1:8080", "target: udp://127.0.0.1:9"));
    assert_eq!(e.path(), "session[0].http", "{e}");
    assert!(
        e.to_string().contains("needs a http:// or https:// target"),
        "{e}"
    );
    let udp = "name: u\ntarget: udp://127.0.0.1:53\nphases: [{ duration: 1s, arrival_rate: 1 }]\nsession:\n  - udp: { send: { text: x }, timeout: 0s }\n";
    assert_eq!(err(udp).path(), "session[0].udp.timeout");
    // A payload that always holds its delimiter would be read as two requests: refused, static
    // or in a template's literal text. A value rendered into it is checked per request.
    for send in [
        r#"{ text: "a\r\nb" }"#,
        "{ hex: 610d0a62 }",
        r#"{ text: "${session.index}\r\n" }"#,
    ] {
        let e = err(&TCP.replace("{ text: hi }", send));
        assert_eq!(e.path(), "session[0].tcp.send", "{send}: {e}");
        assert!(e.to_string().contains("framing delimiter"), "{e}");
    }
    for send in [r#"{ text: "a\rb\n" }"#, r#"{ text: "${session.index}\r" }"#] {
        Scenario::from_yaml(&TCP.replace("{ text: hi }", send)).unwrap();
    }
    let both = DEMO.replace("path: /data }", "path: /data, body: x, body_file: b.json }");
    assert_eq!(err(&both).path(), "session[0].http.body_file");
}

#[test]
fn files_are_inlined_with_the_field_named() {
    use crate::protocol::Payload;
    let text = TCP.replace("{ text: hi }", "{ file: req.bin }");
    let mut s = Scenario::from_yaml(&text).unwrap();
    assert!(s.has_files());
    let base = std::path::Path::new("/base");
    let mut seen = Vec::new();
    let changed = s
        .inline_files(base, &mut |p| {
            seen.push(p.to_path_buf());
            Ok(vec![0xde, 0xad])
        })
        .unwrap();
    assert!(changed && !s.has_files());
    assert_eq!(seen, [std::path::PathBuf::from("/base/req.bin")]);
    assert_eq!(
        (match &s.session[0].kind {
            StepKind::Tcp(x) => x,
            k => panic!("not a tcp step: {k:?}"),
        })
        .send,
        Payload::Base64("3q0=".into())
    );
    let mut s = Scenario::from_yaml(&text).unwrap();
    let e = s
        .inline_files(base, &mut |_| Err(std::io::ErrorKind::NotFound.into()))
        .unwrap_err();
    assert_eq!(e.path(), "session[0].tcp.send");
    let mut s = Scenario::from_yaml(&text).unwrap();
    let e = s
        .inline_files(base, &mut |_| Ok(vec![0; crate::protocol::MAX_FRAME + 1]))
        .unwrap_err();
    assert!(e.to_string().contains("more than the limit"), "{e}");
    let body = DEMO.replace("path: /data }", "path: /data, body_file: b.json }");
    let mut s = Scenario::from_yaml(&body).unwrap();
    let e = s
        .inline_files(base, &mut |_| Ok(vec![0xff, 0xfe]))
        .unwrap_err();
    assert_eq!(e.path(), "session[0].http.body_file");
    let mut s = Scenario::from_yaml(&body).unwrap();
    s.inline_files(base, &mut |_| Ok(b"{}".to_vec())).unwrap();
    let h = match &s.session[0].kind {
        StepKind::Http(x) => x,
        k => panic!("not a http step: {k:?}"),
    };
    assert_eq!(
        (
            h.body.as_ref().and_then(|b| b.as_static()),
            h.body_file.as_deref()
        ),
        (Some("{}"), None)
    );
}

#[test]
fn tls_options_are_checked_and_the_ca_file_is_inlined() {
    let https = DEMO.replace("http://127.0.0.1:8080", "https://localhost:8443");
    let ok = Scenario::from_yaml(&format!(
        "{https}http_version: \"2\"\ntls: {{ server_name: api.test }}\n"
    ))
    .unwrap();
    assert_eq!(ok.tls.unwrap().server_name.as_deref(), Some("api.test"));
    let e = err(&format!("{DEMO}tls: {{ insecure_skip_verify: true }}\n"));
    assert_eq!(
        e.to_string(),
        "tls: only applies to https://, grpcs:// and wss:// targets"
    );
    let e = err(&format!("{https}tls: {{ server_name: \"not a name\" }}\n"));
    assert_eq!(e.path(), "tls.server_name");
    let e = err(&format!("{https}tls: {{ ca_pem: \"hello\" }}\n"));
    assert_eq!(e.path(), "tls.ca_pem");
    assert!(e.to_string().contains("no PEM certificate"), "{e}");
    let e = err(&format!(
        "{https}tls: {{ insecure_skip_verify: true, ca_file: ca.pem }}\n"
    ));
    assert_eq!(e.path(), "tls.insecure_skip_verify");
    let e = err(&format!("{https}tls: {{ verify: false }}\n"));
    assert!(e.to_string().contains("verify"), "{e}");

    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let pem = cert.cert.pem();
    let mut s = Scenario::from_yaml(&format!("{https}tls: {{ ca_file: certs/ca.pem }}\n")).unwrap();
    assert!(s.has_files());
    let mut seen = Vec::new();
    s.inline_files(std::path::Path::new("/base"), &mut |p| {
        seen.push(p.to_path_buf());
        Ok(pem.clone().into_bytes())
    })
    .unwrap();
    assert_eq!(seen, [std::path::PathBuf::from("/base/certs/ca.pem")]);
    let tls = s.tls.as_ref().unwrap();
    assert_eq!(
        (tls.ca_file.as_deref(), tls.ca_pem.as_deref()),
        (None, Some(pem.as_str()))
    );
    assert_eq!(tls.ca_certificates().unwrap().len(), 1);
    let mut s = Scenario::from_yaml(&format!("{https}tls: {{ ca_file: ca.pem }}\n")).unwrap();
    let e = s
        .inline_files(std::path::Path::new("/"), &mut |_| Ok(b"junk".to_vec()))
        .unwrap_err();
    assert_eq!(e.path(), "tls.ca_pem");
}

const SESSIONS: &str = r#"
name: s
target: http://127.0.0.1:8080/api/v1/
data:
  users: { columns: [id, name], rows: [["1", "a"], ["2", "b"]], on_exhausted: wrap }
phases: [ { duration: 1s, arrival_rate: 5 } ]
session:
  - name: login
    http: { method: post, path: '/login?u=${users.name|url}', body: '{"id":${users.id}}' }
    extract: { token: { json: /token } }
    check: { status: [200], json: { /status: ok } }
  - http: { path: /me, headers: { authorization: 'Bearer ${token}' } }
"#;

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

#[test]
fn tcp_and_udp_replies_are_read_by_their_payload_only() {
    let text = r#"
name: t
target: tcp://127.0.0.1:7000
phases: [ { duration: 1s, arrival_rate: 2 } ]
session:
  - tcp: { send: { text: login } }
    extract: { role: { json: /role }, who: { between: ['<', '>'] }, n: { regex: 'n=([0-9]+)' } }
    check: { body_contains: granted, json: { /action: granted } }
  - tcp: { send: { text: 'as ${role} ${who} ${n}' } }
"#;
    let s = Scenario::from_yaml(text).unwrap();
    assert_eq!(s.session[0].extract.len(), 3);
    let udp = text.replace("tcp://", "udp://").replace("tcp:", "udp:");
    Scenario::from_yaml(&udp).unwrap();
    for (from, to, want) in [
        (
            "role: { json: /role }",
            "role: { header: x-role }",
            "session[0].extract.role: a tcp reply has no headers or cookies: take values with json, regex or between",
        ),
        (
            "role: { json: /role }",
            "role: { cookie: sid }",
            "session[0].extract.role: a tcp reply has no headers or cookies: take values with json, regex or between",
        ),
        (
            "body_contains: granted,",
            "status: [200],",
            "session[0].check.status: a tcp reply has no status: check it with body_contains or json",
        ),
    ] {
        assert_eq!(err(&text.replace(from, to)).to_string(), want, "{to}");
    }
    assert_eq!(
        err(&udp.replace("body_contains: granted,", "status: [200],")).to_string(),
        "session[0].check.status: a udp reply has no status: check it with body_contains or json"
    );
}

#[test]
fn tcp_and_udp_sends_are_templates_checked_like_http() {
    use crate::protocol::Payload;
    let tcp = r#"
name: t
target: tcp://127.0.0.1:7000
data:
  users: { per: request, columns: [name], rows: [["a"], ["b"], ["c"], ["d"]] }
phases: [ { duration: 1s, arrival_rate: 2 } ]
session:
  - tcp: { send: { text: 'login ${users.name|json} ${env:PW}' }, expect: { prefix: { text: ok } } }
    repeat: 2
"#;
    let mut s = Scenario::from_yaml(tcp).unwrap();
    let t = match &s.session[0].kind {
        StepKind::Tcp(x) => x,
        k => panic!("not a tcp step: {k:?}"),
    };
    assert!(t.send.template().is_some());
    assert_eq!(s.requests_reading("users"), 2);
    assert!(s.has_env_refs());
    assert_eq!(s.env_names().into_iter().collect::<Vec<_>>(), ["PW"]);
    s.resolve_env(&|_| Some("p\"w".into())).unwrap();
    assert!(s.env_names().is_empty());
    assert_eq!(
        (match &s.session[0].kind {
            StepKind::Tcp(x) => x,
            k => panic!("not a tcp step: {k:?}"),
        })
        .send,
        Payload::Text(crate::template::Template::parse("login ${users.name|json} p\"w").unwrap())
    );
    let again = Scenario::from_yaml(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(again, s);
    for (from, to, want) in [
        (
            "${users.name|json}",
            "${token}",
            "session[0].tcp.send: ${token} is not defined before this step",
        ),
        (
            "prefix: { text: ok }",
            "prefix: { text: 'ok ${users.name}' }",
            "session[0].tcp.expect: `ok ${users.name}` has ${...} references: only a send payload is a template",
        ),
        (
            "rows: [[\"a\"], [\"b\"], [\"c\"], [\"d\"]]",
            "rows: [[\"a\"]]",
            "data.users: 1 rows, 4 requests read it (2 per session): rows run out at t=0.2 s in phase phase-1; add rows, or use on_exhausted: wrap or stop",
        ),
    ] {
        assert_eq!(err(&tcp.replace(from, to)).to_string(), want, "{to}");
    }
    let udp = tcp
        .replace("tcp://", "udp://")
        .replace("- tcp: { send: { text: 'login ${users.name|json} ${env:PW}' }, expect: { prefix: { text: ok } } }", "- udp: { send: { text: '${users.name}' } }");
    let s = Scenario::from_yaml(&udp).unwrap();
    assert!((match &s.session[0].kind {
        StepKind::Udp(x) => x,
        k => panic!("not a udp step: {k:?}"),
    })
    .send
    .template()
    .is_some());
    let e = err(&udp.replace("${users.name}", "${users.nope}"));
    assert_eq!(e.path(), "session[0].udp.send");
}

#[test]
fn env_and_data_files_are_resolved_by_the_cli() {
    let text = SESSIONS
        .replace(
            "users: { columns: [id, name], rows: [[\"1\", \"a\"], [\"2\", \"b\"]], on_exhausted: wrap }",
            "users: { file: users.csv, on_exhausted: wrap }",
        )
        .replace("path: /me,", "path: /me, body: '${env:KEY}',");
    let mut s = Scenario::from_yaml(&text).unwrap();
    assert!(s.has_files() && s.has_env_refs());
    s.inline_files(std::path::Path::new("/b"), &mut |_| {
        Ok(b"id,name\n1,x\n".to_vec())
    })
    .unwrap();
    assert_eq!(s.data["users"].rows.to_vec(), [vec!["1", "x"]]);
    let e = s.resolve_env(&|_| None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "session[1].http.body: ${env:KEY} is not set in the environment"
    );
    assert!(s.resolve_env(&|_| Some("v".into())).unwrap());
    assert!(!s.has_env_refs() && !s.has_files());
}

#[test]
fn http_version_parses_and_only_applies_to_http() {
    let s = Scenario::from_yaml(&format!("{DEMO}http_version: \"2\"\n")).unwrap();
    assert_eq!(s.http_version, Some(HttpVersion::Http2));
    let again = Scenario::from_yaml(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(again, s);
    assert_eq!(
        err(&format!("{DEMO}http_version: \"3\"\n")).path(),
        "http_version"
    );
    let tcp = format!("{TCP}http_version: \"2\"\n");
    assert_eq!(
        err(&tcp).to_string(),
        "http_version: only applies to http:// and https:// targets"
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
