//! Tests of parsing and validating a scenario, one module per part of the scenario; the
//! example scenarios and the helper they share are here.

use super::*;

mod fields;
mod files;
mod load;
mod protocols;
mod sessions;

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

fn err(text: &str) -> ScenarioError {
    Scenario::from_yaml(text).expect_err("should be rejected")
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
