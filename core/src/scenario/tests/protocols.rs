//! The steps of each protocol (HTTP versions, tcp, udp): their payloads, expectations and
//! templates, and their errors.

use super::*;

#[test]
fn http_step_needs_target() {
    let e = err(&DEMO.replace("target: http://127.0.0.1:8080\n", ""));
    assert_eq!(e.path(), "target");
}

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

/// A step's own target is an http step's, an http(s) URL, never a setup step's; it is one
/// of the run's targets, under the step's field, and its requests are its target's.
#[test]
fn a_steps_own_target_is_checked_and_counted() {
    let base = "name: t\ntarget: http://127.0.0.1:1\nphases: [ { duration: 1s, arrival_rate: 1 } ]\nsession:\n";
    let two = format!(
        "{base}  - {{ target: 'http://127.0.0.2:9', http: {{ path: /login }} }}\n  - {{ http: {{ path: /a }} }}\n  - {{ think_time: 1s }}\n  - {{ target: 'http://127.0.0.2:9', http: {{ path: /me }} }}\n"
    );
    let s = Scenario::from_yaml(&two).unwrap();
    let fields: Vec<String> = s.targets().into_iter().map(|(f, _)| f).collect();
    assert_eq!(fields, ["target", "session[0].target"]);
    let views = s.workload_views();
    assert_eq!(
        crate::workload::target_names(&views),
        ["127.0.0.1:1", "127.0.0.2:9"]
    );
    assert!(crate::workload::steps_have_targets(&views));
    assert_eq!(crate::workload::target_steps(&views, "127.0.0.2:9"), [0, 2]);
    assert_eq!(crate::workload::target_steps(&views, "127.0.0.1:1"), [1]);
    // Every request elsewhere: the workload's own target is not one the run loads.
    let away = two.replace("  - { http: { path: /a } }\n", "");
    let s = Scenario::from_yaml(&away).unwrap();
    assert_eq!(
        crate::workload::target_names(&s.workload_views()),
        ["127.0.0.2:9"]
    );

    let cases = [
        (
            format!("{base}  - {{ target: 'tcp://127.0.0.2:9', http: {{ path: / }} }}\n"),
            "session[0].target",
            "an http step's target is an http:// or https:// URL",
        ),
        (
            format!("{base}  - {{ target: 'http://127.0.0.2:9', think_time: 1s }}\n"),
            "session[0].target",
            "a step's own target is for http steps (this is a think_time step)",
        ),
        (
            format!(
                "{base}  - {{ http: {{ path: / }} }}\nsetup:\n  - {{ target: 'http://127.0.0.2:9', http: {{ path: /t }} }}\n"
            ),
            "setup[0].target",
            "setup steps run against the scenario's target",
        ),
        (
            format!(
                "{base}{}",
                (0..64)
                    .map(|i| format!("  - {{ target: 'http://127.0.1.{i}:9', http: {{ path: / }} }}\n"))
                    .collect::<String>()
            ),
            "session[63].target",
            "more than 64 targets in one run",
        ),
    ];
    for (text, path, why) in cases {
        let e = err(&text);
        assert_eq!(e.path(), path, "{e}");
        assert!(e.to_string().contains(why), "{e}");
    }
}
