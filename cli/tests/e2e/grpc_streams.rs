//! Streaming gRPC calls end to end: the real `stampede` binary reads each method's streaming
//! kind from the `.proto` file, and a local agent runs server-, client- and bidirectional
//! streams against the real gRPC target. Every message is counted on both sides, server
//! messages are timed like SSE events (from the intended send, and between them), and a
//! stream's failure is counted by its `grpc-status`.

use crate::grpc::{grpc_target, run, PROTO};

/// 10 sessions in 1 s, each running `session` (YAML list items, indented by 2).
fn scenario(target: &str, extra: &str, session: &str) -> String {
    format!(
        "name: e2e-grpc-streams\ntarget: {target}\ngrpc: {{ proto_files: [{PROTO}] }}\n\
         max_error_rate: none\nphases:\n  - {{ duration: 1s, arrival_rate: 10 }}\n{extra}\
         session:\n{session}"
    )
}

/// 10 calls each read 5 messages 100 ms apart: every message is counted, the first comes
/// soon after the intended send, the gaps are the server's 100 ms, and thresholds judge them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_streams_are_timed_message_by_message() {
    let (server, url, _stop) = grpc_target().await;
    let dir = tempfile::tempdir().unwrap();
    let text = scenario(
        &url,
        "thresholds: [ 'step(watch).ttfb.p99 < 2s', 'step(watch).gap.p50 < 1s' ]\n",
        "  - name: watch
    grpc:
      method: stampede.target.v1.Target/Stream
      message: { count: 5, gap_ms: 100, text: hi }
      expect: { messages: 5 }
",
    );
    let r = run(dir.path(), "server", text).await;
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    let step = r.report.steps.iter().find(|s| s.name == "watch").unwrap();
    assert_eq!((step.completed, step.failed), (10, 0), "{step:?}");
    let s = step
        .stream
        .as_ref()
        .expect("a streamed call reports its arrivals");
    assert_eq!(s.events, 50);
    assert_eq!((s.ttfb.count, s.gap.count), (10, 40));
    // Messages per second over the run's duration.
    let over = s.events_per_s * r.report.duration_s;
    assert!(
        (over - 50.0).abs() < 0.5,
        "{s:?} over {} s",
        r.report.duration_s
    );
    // The first message leaves with the answer's head: far below one gap.
    assert!(s.ttfb.p50_us < 50_000, "{s:?}");
    assert!((85_000..=115_000).contains(&s.gap.p50_us), "{s:?}");
    // The whole call takes the 4 gaps at least.
    assert!(step.latency.response_time.min_us >= 400_000, "{step:?}");
    assert!(
        r.report.thresholds.iter().all(|t| t.passed),
        "{:?}",
        r.report.thresholds
    );
    assert_eq!(server.streamed("Stream", "out"), 50);
    assert_eq!(server.calls("Stream", "ok"), 10);
}

/// A client stream sends its message `count` times (templated per call) or its list; a
/// bidirectional chat is echoed message by message. The target's own counts agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_and_bidirectional_streams_send_every_message() {
    let (server, url, _stop) = grpc_target().await;
    let dir = tempfile::tempdir().unwrap();
    let text = scenario(
        &url,
        "",
        "  - name: upload
    grpc:
      method: stampede.target.v1.Target/Collect
      message: { text: 'hi ${session.index}', id: '${session.index}' }
      send: { count: 10, gap: 5ms }
  - name: listed
    grpc:
      method: stampede.target.v1.Target/Collect
      messages: [ { text: a }, { text: b, id: 2 }, { text: '${session.index}' } ]
  - name: chat
    grpc:
      method: stampede.target.v1.Target/Chat
      messages: [ { text: a }, { text: b } ]
      send: { count: 3, gap: 10ms }
      expect: { messages: 6 }
",
    );
    let r = run(dir.path(), "client", text).await;
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.report.totals.errors.is_empty(),
        "{:?}",
        r.report.totals.errors
    );
    assert_eq!(r.report.totals.completed, 30);
    assert_eq!(server.streamed("Collect", "in"), 10 * 10 + 10 * 3);
    assert_eq!(server.calls("Collect", "ok"), 20);
    assert_eq!(server.streamed("Chat", "in"), 60);
    assert_eq!(server.streamed("Chat", "out"), 60);
    let chat = r.report.steps.iter().find(|s| s.name == "chat").unwrap();
    let s = chat.stream.as_ref().unwrap();
    assert_eq!((s.events, s.gap.count), (60, 50));
    // Each echo follows its message, sent 10 ms after the one before.
    assert!(s.gap.p50_us >= 8_000, "{s:?}");
    // One answer per client stream: its time to first message is the whole call's.
    let upload = r.report.steps.iter().find(|s| s.name == "upload").unwrap();
    assert!(upload.latency.response_time.min_us >= 45_000, "{upload:?}");
}

/// A stream that ends with a non-OK status counts it as a unary call would; one that ends OK
/// with another number of messages than `expect` asks is `grpc_messages`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_failures_are_counted_by_status_and_count() {
    let (server, url, _stop) = grpc_target().await;
    let dir = tempfile::tempdir().unwrap();
    let failing = scenario(
        &url,
        "",
        "  - grpc: { method: stampede.target.v1.Target/Stream, message: { count: 2, fail_with: 14 } }\n",
    );
    let r = run(dir.path(), "failing", failing).await;
    let t = &r.report.totals;
    assert_eq!((t.completed, t.failed), (0, 10), "{}", r.stderr);
    assert_eq!(
        t.errors.iter().collect::<Vec<_>>(),
        [(&"grpc_unavailable".to_string(), &10)]
    );
    assert_eq!(
        t.grpc_statuses.iter().collect::<Vec<_>>(),
        [(&"UNAVAILABLE".to_string(), &10)]
    );
    assert_eq!(server.calls("Stream", "unavailable"), 10);

    let short = scenario(
        &url,
        "",
        "  - grpc: { method: stampede.target.v1.Target/Stream, message: { count: 3 }, expect: { messages: 4 } }\n",
    );
    let r = run(dir.path(), "short", short).await;
    let t = &r.report.totals;
    assert_eq!(
        t.errors.iter().collect::<Vec<_>>(),
        [(&"grpc_messages".to_string(), &10)],
        "{}",
        r.stderr
    );
    assert_eq!(t.grpc_statuses.get("OK"), Some(&10));
}

/// A unary method given several messages is refused before any load, with the field named.
#[tokio::test]
async fn a_unary_method_refuses_a_stream_of_messages() {
    let dir = tempfile::tempdir().unwrap();
    let text = scenario(
        "grpc://127.0.0.1:9",
        "",
        "  - grpc: { method: stampede.target.v1.Target/Echo, messages: [ { text: a }, { text: b } ] }\n",
    );
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new(crate::BIN)
        .args(["validate"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "session[0].grpc.messages: `stampede.target.v1.Target/Echo` takes one message"
        ),
        "{stderr}"
    );
}
