//! A session that calls two services: its login on an auth service named by the step's own
//! `target:`, its API calls on the workload's target, each over a connection of its own that
//! the session keeps, with cookies kept per host.

use std::collections::{BTreeMap, BTreeSet};

use stampede_core::report::Report;

use crate::sessions::LoginServer;
use crate::BIN;

/// 40 sessions over 2 agents, each a login and a `/me` on the auth service and two calls on
/// the API with the token from the login: each server sees exactly its own requests, the
/// API the token and never the auth service's cookie, the auth service its cookie back on
/// the login's connection; the report has a row per target, judged by `target(NAME)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_calls_an_auth_service_and_an_api() {
    // Two hosts, as a cookie jar sees them: a port alone does not part them.
    let (auth, api) = (
        LoginServer::start_on("127.0.0.2:0").await,
        LoginServer::start().await,
    );
    let name = |url: &str| {
        url.trim_start_matches("http://")
            .trim_end_matches("/api")
            .to_string()
    };
    let (auth_name, api_name) = (name(&auth.url), name(&api.url));
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"name: two-services
target: {api}
cookies: true
phases: [ {{ duration: 2s, arrival_rate: 20 }} ]
session:
  - name: login
    target: {auth}
    http: {{ method: post, path: /login }}
    extract: {{ token: {{ json: /token }} }}
    check: {{ status: [200] }}
  - name: orders
    http: {{ path: /orders, headers: {{ authorization: 'Bearer ${{token}}' }} }}
    repeat: 2
  - name: me
    target: {auth}
    http: {{ path: /me, headers: {{ authorization: 'Bearer ${{token}}' }} }}
    check: {{ status: [200] }}
thresholds: [ "target({auth_name}).error_rate < 1%", "target({api_name}).p99 < 5s" ]
"#,
        api = api.url,
        auth = auth.url,
    );
    let path = dir.path().join("two.yaml");
    std::fs::write(&path, text).unwrap();
    let report = dir.path().join("two.json");
    let out = tokio::process::Command::new(BIN)
        .args(["run", "--local", "--quiet", "--agents", "2", "--report"])
        .arg(&report)
        .arg(&path)
        .output()
        .await
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{printed}");

    let count = |seen: &[crate::sessions::Seen]| {
        let mut by: BTreeMap<String, u64> = BTreeMap::new();
        for s in seen {
            *by.entry(s.path.clone()).or_default() += 1;
        }
        by
    };
    let (on_auth, on_api) = (auth.seen(), api.seen());
    assert_eq!(
        count(&on_auth),
        BTreeMap::from([("/api/login".into(), 40), ("/api/me".into(), 40)])
    );
    assert_eq!(count(&on_api), BTreeMap::from([("/api/orders".into(), 80)]));
    // The API got the tokens the auth service issued, and no cookie of its.
    let issued: BTreeSet<String> = (1..=40).map(|n| format!("Bearer t-{n}")).collect();
    let sent: BTreeSet<String> = on_api
        .iter()
        .map(|s| s.headers["authorization"].clone())
        .collect();
    assert_eq!(sent, issued);
    assert!(on_api.iter().all(|s| !s.headers.contains_key("cookie")));
    // The auth service got its cookie back with each `/me`, on the connection of the login
    // that set it: the session kept it open across the API calls.
    let logins: BTreeMap<u16, ()> = on_auth
        .iter()
        .filter(|s| s.path == "/api/login")
        .map(|s| (s.peer, ()))
        .collect();
    assert_eq!(logins.len(), 40, "a connection per session");
    for me in on_auth.iter().filter(|s| s.path == "/api/me") {
        let n = me.headers["authorization"].trim_start_matches("Bearer t-");
        assert_eq!(me.headers["cookie"], format!("sid=s-{n}"));
        assert!(logins.contains_key(&me.peer), "{me:?}");
    }

    // A row per target, from its steps' requests; its thresholds judged on them.
    let r: Report = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let rows: Vec<(&str, u64, u64)> = r
        .targets
        .iter()
        .map(|t| {
            (
                t.figures.name.as_str(),
                t.figures.completed,
                t.figures.failed,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [(api_name.as_str(), 80, 0), (auth_name.as_str(), 80, 0)],
        "{:?}",
        r.targets
    );
    let judged: Vec<(&str, bool)> = r
        .thresholds
        .iter()
        .filter(|t| t.expr.starts_with("target("))
        .map(|t| (t.expr.as_str(), t.passed))
        .collect();
    assert_eq!(judged.len(), 2, "{judged:?}");
    assert!(judged.iter().all(|(_, passed)| *passed), "{judged:?}");
    assert_eq!(r.totals.completed, 160);
}
