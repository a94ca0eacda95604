//! Every field that takes one of a few forms (a word, a map of one key, a percentage, a
//! duration) refuses a wrong value with a message that names the field and the forms it
//! accepts, never serde's internals ("did not match any variant of untagged enum ...", the
//! name of a private type).

use stampede_core::Scenario;

const HTTP: &str =
    "name: f\ntarget: http://127.0.0.1:1\nphases: [ { duration: 1s, arrival_rate: 1 } ]\n";
const TCP: &str =
    "name: f\ntarget: tcp://127.0.0.1:1\nphases: [ { duration: 1s, arrival_rate: 1 } ]\n";
const GET: &str = "session: [ { http: { path: / } } ]\n";

/// `(scenario, the field the error must name, words it must contain)`.
fn cases() -> Vec<(String, &'static str, Vec<&'static str>)> {
    let http = |extra: &str| format!("{HTTP}{extra}{GET}");
    let tcp = |step: &str| format!("{TCP}session: [ {{ tcp: {step} }} ]\n");
    let data = |src: &str| {
        format!("{HTTP}data: {{ users: {{ columns: [name], rows: [[a]], {src} }} }}\n{GET}")
    };
    vec![
        (
            http("on_agent_loss: ignore\n"),
            "on_agent_loss",
            vec!["fail", "tolerate"],
        ),
        (
            http("on_agent_loss: 50%\n"),
            "on_agent_loss",
            vec!["fail", "tolerate"],
        ),
        (
            http("on_agent_loss: { keep: 5 }\n"),
            "on_agent_loss",
            vec!["tolerate"],
        ),
        (
            http("on_agent_loss: { tolerate: lots }\n"),
            "on_agent_loss.tolerate",
            vec!["50%"],
        ),
        (
            http("on_agent_loss: { tolerate: [5] }\n"),
            "on_agent_loss.tolerate",
            vec!["50%"],
        ),
        (
            http("on_agent_loss: { tolerate: 150% }\n"),
            "on_agent_loss.tolerate",
            vec!["0 and 100"],
        ),
        (
            http("max_error_rate: lots\n"),
            "max_error_rate",
            vec!["1%", "none"],
        ),
        (
            http("http_version: \"3\"\n"),
            "http_version",
            vec!["1.1", "2"],
        ),
        (
            http("arrival: gaussian\n"),
            "arrival",
            vec!["uniform", "poisson"],
        ),
        (
            http("request_timeout: soon\n"),
            "request_timeout",
            vec!["duration"],
        ),
        (
            http("graceful_stop: soon\n"),
            "graceful_stop",
            vec!["duration"],
        ),
        (
            http("graceful_stop: 2m\n"),
            "graceful_stop",
            vec!["at most"],
        ),
        (
            format!(
                "name: f\ntarget: http://127.0.0.1:1\nload: {{ model: open, duration: 1s }}\n{GET}"
            ),
            "load.model",
            vec!["closed", "constant"],
        ),
        (
            format!("{HTTP}session: [ {{ think_time: soon }} ]\n"),
            "session[0].think_time",
            vec!["500ms", "min"],
        ),
        (
            format!("{HTTP}session: [ {{ think_time: {{ least: 1s }} }} ]\n"),
            "session[0].think_time",
            vec!["min"],
        ),
        (
            data("order: shuffled"),
            "data.users.order",
            vec!["sequence", "shuffle", "random"],
        ),
        (
            data("per: user"),
            "data.users.per",
            vec!["session", "request", "connection"],
        ),
        (
            data("on_exhausted: panic"),
            "data.users.on_exhausted",
            vec!["fail", "wrap", "stop"],
        ),
        (
            tcp("{ send: { text: hi }, framing: lines }"),
            "session[0].tcp.framing",
            vec!["length_prefixed", "delimiter", "fixed"],
        ),
        (
            tcp("{ send: { text: hi }, framing: { delim: { text: x } } }"),
            "session[0].tcp.framing",
            vec!["delimiter", "fixed"],
        ),
        (
            tcp("{ send: { text: hi }, framing: [1] }"),
            "session[0].tcp.framing",
            vec!["length_prefixed", "delimiter", "fixed"],
        ),
        (
            tcp("{ send: hi }"),
            "session[0].tcp.send",
            vec!["text", "hex", "base64", "file"],
        ),
        (
            tcp("{ send: { text: hi }, expect: ok }"),
            "session[0].tcp.expect",
            vec!["exact", "prefix"],
        ),
        (
            format!(
                "{HTTP}session: [ {{ http: {{ path: / }}, extract: {{ t: {{ xpath: /a }} }} }} ]\n"
            ),
            "session[0].extract.t",
            vec!["json", "header", "regex"],
        ),
    ]
}

#[test]
fn a_wrong_form_names_the_field_and_the_accepted_forms() {
    let mut bad = Vec::new();
    for (text, field, words) in cases() {
        let e = match Scenario::from_yaml(&text) {
            Ok(_) => {
                bad.push(format!("accepted:\n{text}"));
                continue;
            }
            Err(e) => e.to_string(),
        };
        let internal = ["untagged", "variant of", "Repr", "struct ", "enum "]
            .iter()
            .any(|w| e.contains(w));
        let missing: Vec<_> = words.iter().filter(|w| !e.contains(*w)).collect();
        if internal || !e.starts_with(field) || !missing.is_empty() {
            bad.push(format!("{field}: `{e}` (missing {missing:?})"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Every percentage of a scenario takes the percent sign, and the bare number means the same.
#[test]
fn percentages_take_the_percent_sign() {
    let with = |v: &str| format!("{HTTP}agents: 2\non_agent_loss: {{ tolerate: {v} }}\n{GET}");
    for (v, want) in [("50%", 50.0), ("50", 50.0), ("12.5 %", 12.5), ("0%", 0.0)] {
        let s = Scenario::from_yaml(&with(v)).unwrap_or_else(|e| panic!("{v}: {e}"));
        assert_eq!(
            s.on_agent_loss,
            stampede_core::scenario::AgentLossPolicy::Tolerate(want),
            "{v}"
        );
        // What the CLI submits (and the controller and agents read back) says the same.
        let back = Scenario::from_yaml(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back.on_agent_loss, s.on_agent_loss, "{v}");
    }
    let s = Scenario::from_yaml(&format!("{HTTP}max_error_rate: 5%\n{GET}")).unwrap();
    assert_eq!(s.max_error_rate(), Some(0.05));
}
