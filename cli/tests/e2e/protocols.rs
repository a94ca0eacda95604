//! Protocols end to end: tcp (login and echo), udp and unix steps, and the error kinds by
//! cause, through a real controller and agents against real target servers on loopback.

use std::time::Duration;

use stampede_cli::local::LocalCluster;
use stampede_core::report::{Report, RunOutcome};
use stampede_target_servers::echo::{EchoConfig, EchoServer};
use stampede_target_servers::frame::Framing;
use stampede_target_servers::login::{LoginConfig, LoginServer};
use tokio::net::{TcpListener, UdpSocket, UnixListener};

use crate::{run, serve_until_dropped, Stop, Target};

/// `rate` sessions/s for 1 s, each running `session` (YAML list items, indented by 2).
fn scenario(target: &str, rate: u32, session: &str, extra: &str) -> String {
    format!(
        "name: e2e-proto\ntarget: {target}\nphases:\n  - {{ duration: 1s, arrival_rate: {rate} }}\nsession:\n{session}{extra}"
    )
}

/// Runs `text` on a fresh local cluster of `agents`.
async fn run_local(text: &str, agents: u32) -> Report {
    let cluster = LocalCluster::start(agents, None).await.unwrap();
    let r = run(&cluster.url(), &cluster.token, text, agents).await;
    cluster.stop().await;
    r
}

fn errors(r: &Report) -> Vec<(&str, u64)> {
    r.totals
        .errors
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect()
}

async fn login_target() -> (LoginServer, String, Stop) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("tcp://{}", l.local_addr().unwrap());
    let server = LoginServer::new(LoginConfig::default()).unwrap();
    let stop = serve_until_dropped(|shutdown| server.clone().serve(l, shutdown));
    (server, url, stop)
}

async fn echo_tcp(framing: Framing) -> (EchoServer, String, Stop) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("tcp://{}", l.local_addr().unwrap());
    let server = EchoServer::new(EchoConfig {
        framing,
        ..EchoConfig::default()
    })
    .unwrap();
    let stop = serve_until_dropped(|shutdown| server.clone().serve_tcp(l, shutdown));
    (server, url, stop)
}

const LOGIN: &str = r#"  - name: login
    tcp:
      send: { text: '{"username":"alice","password":"wonderland"}' }
      framing: length_prefixed
      expect: { exact: { text: '{"action":"granted","role":"admin"}' } }
    repeat: 4
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_login_counts_match_the_target() {
    let (server, url, _stop) = login_target().await;
    let r = run_local(&scenario(&url, 40, LOGIN, ""), 2).await;
    let st = server.stats();
    eprintln!(
        "tcp login: {:?} errors {:?} target {st:?}",
        r.totals,
        errors(&r)
    );
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 160);
    assert_eq!(r.totals.completed, st.frames_total);
    // One connection per session, reused for its four logins.
    assert_eq!(st.connections_total, 40);
    assert_eq!(r.steps.len(), 1);
    assert_eq!(
        (r.steps[0].name.as_str(), r.steps[0].completed),
        ("login", 160)
    );
    assert!(r.totals.bytes_received > 0 && r.totals.bytes_sent > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_new_connection_per_login() {
    let (server, url, _stop) = login_target().await;
    let session = format!("{LOGIN}    new_connection: true\n");
    let r = run_local(&scenario(&url, 10, &session, ""), 1).await;
    let st = server.stats();
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 40);
    assert_eq!(st.frames_total, 40);
    assert_eq!(st.connections_total, 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_unexpected_reply_is_a_protocol_error() {
    let (server, url, _stop) = login_target().await;
    // Bob is granted the `user` role, not `admin`: every first login fails the check, and
    // the session stops there.
    let session = LOGIN.replace(
        r#""username":"alice","password":"wonderland""#,
        r#""username":"bob","password":"builder""#,
    );
    let r = run_local(&scenario(&url, 20, &session, ""), 2).await;
    assert_eq!(errors(&r), [("protocol", 20)]);
    assert_eq!(r.totals.completed, 0);
    assert_eq!(server.stats().frames_total, 20);
    assert_eq!(r.steps[0].errors.get("protocol"), Some(&20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_echo_with_delimiter_framing() {
    let (server, url, _stop) = echo_tcp(Framing::Newline).await;
    let session = "  - tcp:\n      send: { hex: '50 49 4e 47' }\n      framing: { delimiter: { text: \"\\n\" } }\n      expect: { exact: { text: PING } }\n    repeat: 3\n";
    let r = run_local(&scenario(&url, 30, session, ""), 2).await;
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 90);
    assert_eq!(server.stats().frames_total, 90);
    // "PING\n" both ways.
    assert_eq!(r.totals.bytes_sent, 90 * 5);
    assert_eq!(r.totals.bytes_received, 90 * 5);
}

/// A data row holding the newline delimiter would be sent as two frames, and every later
/// reply on the connection read as the answer to the wrong request: its request fails with
/// `template` and sends nothing, so the target parses exactly one frame per request counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rendered_payload_holding_its_delimiter_is_a_template_error() {
    let (server, url, _stop) = echo_tcp(Framing::Newline).await;
    let session = "  - tcp:\n      send: { text: 'hello ${users.name}' }\n      framing: { delimiter: { text: \"\\n\" } }\n      expect: { prefix: { text: hello } }\n    repeat: 3\n";
    let data =
        "data:\n  users: { on_exhausted: wrap, columns: [name], rows: [[good], [\"x\\ny\"]] }\n";
    let r = run_local(&scenario(&url, 30, session, data), 2).await;
    let frames = server.stats().frames_total;
    eprintln!("delimiter in a row: {:?}, {frames} frames", r.totals);
    // Sessions take the rows in turn: 15 send three good frames each, 15 fail their first
    // request (a session stops at its first failure).
    assert_eq!(errors(&r), [("template", 15)]);
    assert_eq!(r.totals.completed, 45);
    assert_eq!(frames, 45);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_echo_counts_match() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("echo.sock");
    let l = UnixListener::bind(&path).unwrap();
    let server = EchoServer::new(EchoConfig::default()).unwrap();
    let _stop = serve_until_dropped(|shutdown| server.clone().serve_unix(l, shutdown));
    let session = "  - tcp: { send: { base64: cGluZw== }, expect: { exact: { text: ping } } }\n    repeat: 5\n";
    let url = format!("unix://{}", path.display());
    let r = run_local(&scenario(&url, 20, session, ""), 2).await;
    let st = server.stats();
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 100);
    assert_eq!(st.frames_total, 100);
    assert_eq!(st.connections_total, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_echo_counts_match() {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let url = format!("udp://{}", socket.local_addr().unwrap());
    let server = EchoServer::new(EchoConfig::default()).unwrap();
    let _stop = serve_until_dropped(|shutdown| server.clone().serve_udp(socket, shutdown));
    let session = "  - udp: { send: { text: ping }, timeout: 2s, expect: { exact: { text: ping } } }\n    repeat: 5\n";
    let r = run_local(&scenario(&url, 30, session, ""), 2).await;
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 150);
    assert_eq!(server.stats().frames_total, 150);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_silence_is_a_timeout() {
    // Bound (so no ICMP "unreachable"), never answers.
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let url = format!("udp://{}", socket.local_addr().unwrap());
    let session = "  - udp: { send: { text: hello }, timeout: 200ms }\n";
    let r = run_local(&scenario(&url, 10, session, ""), 2).await;
    assert_eq!(errors(&r), [("timeout", 10)]);
    assert_eq!(r.totals.completed, 0);
    drop(socket);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_late_reply_is_never_taken_for_a_later_answer() {
    // Answers the first datagram late, with "LATE"; every later one at once, with its
    // content. Were the late reply read by the next request, that request would fail its
    // exact check (a protocol error).
    let socket = std::sync::Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let url = format!("udp://{}", socket.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (sock, count) = (socket.clone(), seen.clone());
    let server = tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        loop {
            let Ok((n, peer)) = sock.recv_from(&mut buf).await else {
                continue;
            };
            let k = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if k == 0 {
                let sock = sock.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    let _ = sock.send_to(b"LATE", peer).await;
                });
            } else {
                let _ = sock.send_to(&buf[..n], peer).await;
            }
        }
    });
    let text = format!(
        "name: late\ntarget: {url}\nload: {{ model: closed, connections: 1, duration: 1s }}\nsession:\n  - udp: {{ send: {{ text: ping }}, timeout: 100ms, expect: {{ exact: {{ text: ping }} }} }}\n"
    );
    let r = run_local(&text, 1).await;
    server.abort();
    let received = seen.load(std::sync::atomic::Ordering::SeqCst);
    eprintln!(
        "udp late: {:?} errors {:?}, target saw {received}",
        r.totals.completed,
        errors(&r)
    );
    assert_eq!(errors(&r), [("timeout", 1)]);
    assert!(r.totals.completed > 10, "{}", r.totals.completed);
    assert_eq!(r.totals.completed + 1, received);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_port_is_connect_refused() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let http = crate::scenario(
        &format!("http://{addr}"),
        "  - { duration: 1s, arrival_rate: 10 }\n",
        "",
    );
    let r = run_local(&http, 2).await;
    assert_eq!(errors(&r), [("connect_refused", 10)]);
    let tcp = scenario(&format!("tcp://{addr}"), 10, LOGIN, "");
    let r = run_local(&tcp, 1).await;
    assert_eq!(errors(&r), [("connect_refused", 10)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_resets_is_reset() {
    // Accepts, reads the request, then aborts the connection (RST).
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count = accepted.clone();
    let server = tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s.set_zero_linger();
                drop(s);
            });
        }
    });
    let r = run_local(&scenario(&format!("tcp://{addr}"), 10, LOGIN, ""), 2).await;
    server.abort();
    assert_eq!(errors(&r), [("reset", 10)]);
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_unexpected_status_is_status() {
    let target = Target::start(0).await;
    let session = "  - http: { method: GET, path: /data, expect_status: [201] }\n";
    let r = run_local(&scenario(&target.url, 20, session, ""), 2).await;
    // The error names the code the target sent.
    assert_eq!(errors(&r), [("status_200", 20)]);
    assert_eq!(r.totals.status_codes.get(&200), Some(&20));
    assert_eq!(target.requests(), 20);
    // And the same target with the right expectation: all complete, counts match.
    let ok = "  - http: { method: GET, path: /data, expect_status: [200] }\n    repeat: 3\n";
    let r = run_local(&scenario(&target.url, 20, ok, ""), 2).await;
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 60);
    assert_eq!(target.requests(), 80);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_read_by_the_cli_and_carried_in_the_scenario() {
    let (server, url, _stop) = echo_tcp(Framing::Length).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("payloads")).unwrap();
    let bytes = [0u8, 1, 2, 0xff, b'\n', 0x80];
    std::fs::write(dir.path().join("payloads/req.bin"), bytes).unwrap();
    let path = dir.path().join("s.yaml");
    let session = "  - tcp: { send: { file: payloads/req.bin }, expect: { exact: { file: payloads/req.bin } } }\n";
    std::fs::write(&path, scenario(&url, 10, session, "")).unwrap();
    let (text, parsed) = stampede_cli::client::read_scenario(&path).unwrap();
    // The submitted text carries the bytes, not the path.
    assert!(!text.contains("req.bin"), "{text}");
    assert!(!parsed.has_files());
    // The file is gone: the agents never need it.
    drop(dir);
    let r = run_local(&text, 2).await;
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 10);
    assert_eq!(server.stats().frames_total, 10);
    assert_eq!(r.totals.bytes_sent, 10 * (4 + bytes.len() as u64));

    // A missing file is an error naming the field, before anything is sent.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.yaml");
    std::fs::write(&path, scenario(&url, 10, session, "")).unwrap();
    let e = stampede_cli::client::read_scenario(&path)
        .unwrap_err()
        .to_string();
    assert!(e.contains("session[0].tcp.send: cannot read"), "{e}");
    let body = "  - http: { method: POST, path: /echo, body_file: nope.json }\n";
    std::fs::write(&path, scenario("http://127.0.0.1:1", 10, body, "")).unwrap();
    let e = stampede_cli::client::read_scenario(&path)
        .unwrap_err()
        .to_string();
    assert!(e.contains("session[0].http.body_file: cannot read"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_body_file_is_sent() {
    let target = Target::start(0).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("body.json"), r#"{"user":"herbert"}"#).unwrap();
    let path = dir.path().join("s.yaml");
    let session = "  - http: { method: POST, path: /echo, body_file: body.json }\n";
    std::fs::write(&path, scenario(&target.url, 10, session, "")).unwrap();
    let (text, _) = stampede_cli::client::read_scenario(&path).unwrap();
    assert!(text.contains("herbert"), "{text}");
    let r = run_local(&text, 1).await;
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 10);
    assert_eq!(target.requests(), 10);
    // The echo route sends the 18-byte body back in each response.
    assert!(r.totals.bytes_received >= 10 * 18);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_counts_match_over_one_connection_per_session() {
    let target = Target::start(0).await;
    let session = "  - http: { method: GET, path: /data, expect_status: [200] }\n    repeat: 5\n  - http: { method: POST, path: /echo, body: hello }\n";
    let r = run_local(
        &scenario(&target.url, 20, session, "http_version: \"2\"\n"),
        2,
    )
    .await;
    assert_eq!(r.outcome, RunOutcome::Succeeded, "{:?}", r.message);
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 120);
    assert_eq!(target.requests(), 120);
    // Six streams per session over its one connection.
    assert_eq!(target.server.stats().connections_total, 20);
    // `/data` answers 1024 bytes: the bodies were read.
    assert!(
        r.totals.bytes_received >= 100 * 1024,
        "{}",
        r.totals.bytes_received
    );
    // A wrong status over HTTP/2 is a `status_NNN` error too.
    let bad = "  - http: { method: GET, path: /data, expect_status: [204] }\n";
    let r = run_local(&scenario(&target.url, 10, bad, "http_version: \"2\"\n"), 1).await;
    assert_eq!(errors(&r), [("status_200", 10)]);
}

/// A `send` payload's text is a template: each session logs in over tcp as its own user of a
/// data file (split across two agents), then with a wrong password the target denies; a udp
/// datagram carries its session's row too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_and_udp_payloads_are_templates() {
    let (server, url, _stop) = login_target().await;
    let rows: Vec<String> = (0..40)
        .map(|i| format!("[\"user{i}\", \"pass{i}\"]"))
        .collect();
    let data = format!(
        "data:\n  users: {{ order: shuffle, columns: [username, password], rows: [{}] }}\n",
        rows.join(", ")
    );
    let session = r#"  - name: login
    tcp:
      send: { text: '{"username":"${users.username|json}","password":"${users.password|json}"}' }
      expect: { exact: { text: '{"action":"granted","role":"user"}' } }
  - name: wrong
    tcp:
      send: { text: '{"username":"${users.username}","password":"x${session.index}"}' }
      expect: { exact: { text: '{"action":"denied","reason":"wrong_password"}' } }
"#;
    let r = run_local(&scenario(&url, 40, session, &data), 2).await;
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    assert_eq!(r.totals.completed, 80);
    assert_eq!(server.stats().frames_total, 80);

    // A udp peer that records each datagram and answers `ok`.
    let socket = std::sync::Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let url = format!("udp://{}", socket.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let _stop = serve_until_dropped({
        let (socket, seen) = (socket.clone(), seen.clone());
        move |shutdown| async move {
            let mut buf = [0u8; 2048];
            tokio::select! {
                _ = shutdown => {}
                _ = async {
                    while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                        seen.lock().unwrap().push(String::from_utf8_lossy(&buf[..n]).to_string());
                        let _ = socket.send_to(b"ok", from).await;
                    }
                } => {}
            }
        }
    });
    let session = "  - udp: { send: { text: 'hi ${users.username}' }, timeout: 2s, expect: { exact: { text: ok } } }\n";
    let r = run_local(&scenario(&url, 20, session, &data), 2).await;
    assert!(r.totals.errors.is_empty(), "{:?}", r.totals.errors);
    let mut got = seen.lock().unwrap().clone();
    got.sort();
    got.dedup();
    assert_eq!(got.len(), 20, "a row per session: {got:?}");
    assert!(got.iter().all(|g| g.starts_with("hi user")), "{got:?}");
}

/// The payload of a tcp reply is read like an HTTP body: a check that fails counts under its
/// own kind on its step, a value taken with `between` or `regex` is sent by the next request.
/// 40 users log in over two agents, the last 10 with a wrong password; each granted session
/// then logs in as the role it was given (`user`, which is no user), and checks the refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_replies_are_checked_and_their_values_carried() {
    let (server, url, _stop) = login_target().await;
    let rows: Vec<String> = (0..40)
        .map(|i| {
            let password = if i < 30 {
                format!("pass{i}")
            } else {
                "bad".into()
            };
            format!("[\"user{i}\", \"{password}\"]")
        })
        .collect();
    let data = format!(
        "data:\n  users: {{ order: sequence, on_exhausted: fail, columns: [u, p], rows: [{}] }}\n",
        rows.join(", ")
    );
    let session = r#"  - name: login
    tcp: { send: { text: '{"username":"${users.u|json}","password":"${users.p|json}"}' } }
    check: { json: { /action: granted } }
    extract: { role: { between: ['"role":"', '"'] } }
  - name: as-role
    tcp: { send: { text: '{"username":"${role|json}","password":"x"}' } }
    check: { body_contains: unknown_user }
    extract: { reason: { regex: '"reason":"([a-z_]+)"' } }
  - name: echo-reason
    tcp: { send: { text: '{"username":"${reason|json}","password":"${role|json}"}' } }
    check: { json: { /reason: unknown_user } }
"#;
    let r = run_local(&scenario(&url, 40, session, &data), 2).await;
    let metrics = server.metrics_text();
    let logins = |result: &str| {
        metrics
            .lines()
            .find(|l| l.contains("logins_total") && l.contains(&format!("result=\"{result}\"")))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    eprintln!("tcp replies: {:?} errors {:?}", r.totals, errors(&r));
    let step = |name: &str| r.steps.iter().find(|s| s.name == name).unwrap();
    assert_eq!(
        (step("login").completed, step("login").failed),
        (30, 10),
        "{:?}",
        step("login")
    );
    assert_eq!(step("login").errors.get("check.json"), Some(&10));
    // Only the granted sessions go on, with the extracted role as the user name.
    assert_eq!((step("as-role").completed, step("as-role").failed), (30, 0));
    assert_eq!(
        (step("echo-reason").completed, step("echo-reason").failed),
        (30, 0)
    );
    assert_eq!(errors(&r), [("check.json", 10)]);
    assert_eq!(logins("granted"), 30);
    assert_eq!(logins("wrong_password"), 10);
    // `user` (the role) and `unknown_user` (the reason) are no users.
    assert_eq!(logins("unknown_user"), 60);
    assert_eq!(server.stats().frames_total, 100);
}

/// A udp reply is read the same way: the value a datagram's reply carries goes into the next
/// datagram, and a check that cannot pass (an echo is not JSON) fails every request of its
/// step under `check.json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_replies_are_checked_and_their_values_carried() {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let url = format!("udp://{}", socket.local_addr().unwrap());
    let server = EchoServer::new(EchoConfig::default()).unwrap();
    let _stop = serve_until_dropped(|shutdown| server.clone().serve_udp(socket, shutdown));
    let session = r#"  - name: hello
    udp: { send: { text: 'n=${session.index};' }, timeout: 2s }
    extract: { n: { regex: 'n=([0-9]+);' } }
  - name: again
    udp: { send: { text: 'again ${n}' }, timeout: 2s }
    check: { body_contains: 'again ' }
    extract: { m: { regex: '^again ([0-9]+)$' } }
  - name: json
    udp: { send: { text: 'not json' }, timeout: 2s }
    check: { json: { /ok: true } }
"#;
    let r = run_local(&scenario(&url, 20, session, ""), 2).await;
    let step = |name: &str| r.steps.iter().find(|s| s.name == name).unwrap();
    assert_eq!(step("hello").completed, 20);
    assert_eq!(step("again").completed, 20);
    assert_eq!(
        (step("json").failed, step("json").errors.get("check.json")),
        (20, Some(&20))
    );
    assert_eq!(errors(&r), [("check.json", 20)]);
    assert_eq!(server.stats().frames_total, 60);
}

/// A scenario that still names a file, sent straight to the gRPC service rather than through
/// the CLI (which inlines it), is refused naming the field: the controller cannot read the
/// file, and running without it would load the target with a request the user did not write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_submit_with_an_unread_file_is_refused_naming_the_field() {
    let cluster = LocalCluster::start(1, None).await.unwrap();
    let mut c = stampede_cli::client::connect(&cluster.url(), Some(&cluster.token))
        .await
        .unwrap();
    let body = "name: raw\ntarget: http://127.0.0.1:9\nphases: [ { duration: 1s, arrival_rate: 1 } ]\nsession:\n  - http: { path: / }\n  - http: { method: POST, path: /orders }\n  - http: { method: POST, path: /orders, body_file: order.json }\n";
    let ca = "name: raw\ntarget: https://127.0.0.1:9\nphases: [ { duration: 1s, arrival_rate: 1 } ]\nsession:\n  - http: { path: / }\ntls: { ca_file: ca.pem }\n";
    let mut refusals = Vec::new();
    for text in [body, ca] {
        let e = stampede_cli::client::submit(&mut c, text, Some(1), None)
            .await
            .unwrap_err()
            .to_string();
        refusals.push(e);
    }
    cluster.stop().await;
    assert!(
        refusals[0].contains(
            "session[2].http.body_file: a file path cannot be read by the controller; submit \
             with the CLI, which inlines it"
        ),
        "{}",
        refusals[0]
    );
    assert!(
        refusals[1].contains("tls.ca_file: a file path cannot be read by the controller"),
        "{}",
        refusals[1]
    );
}
