//! Extraction and checks on gRPC replies, end to end: the CLI compiles each JSON Pointer
//! against the method's reply type, the agent reads the real target's protobuf replies
//! without a descriptor, and the values extracted reach the next calls, as the target's kept
//! echoes show.

use crate::grpc::{grpc_target_keeping_echoes, refused_before_any_load, run, PROTO};

/// 20 sessions in 1 s over the real gRPC target's schema, each running `session`.
fn scenario(target: &str, session: &str) -> String {
    format!(
        "name: e2e-grpc-reply\ntarget: {target}\ngrpc: {{ proto_files: [{PROTO}] }}\n\
         max_error_rate: none\nphases:\n  - {{ duration: 1s, arrival_rate: 20 }}\nsession:\n{session}"
    )
}

/// A unary reply's string, repeated element and int64 are extracted, its nested double and an
/// absent bool (read as protobuf's default) checked; a server stream's last message is the
/// one read; each value comes back in the next call; a failed check fails only its own call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_values_are_extracted_and_checked_without_a_descriptor() {
    let (server, url, _stop) = grpc_target_keeping_echoes().await;
    let dir = tempfile::tempdir().unwrap();
    let session = "  - name: first
    grpc:
      method: stampede.target.v1.Target/Echo
      message: { text: 'tok-${session.index}', id: '${session.index}', tags: [a, b], inner: { score: 2.5 } }
    extract:
      tok: { json: /text }
      second: { json: /tags/1 }
      n: { json: /id }
    check: { json: { /inner/score: 2.5, /inner/flag: false } }
  - name: watch
    grpc:
      method: stampede.target.v1.Target/Stream
      message: { count: 3, text: s }
    extract: { last: { json: /id } }
    check: { json: { /id: 2 } }
  - name: again
    grpc:
      method: stampede.target.v1.Target/Echo
      message: { text: '${tok}/${second}/${last}', id: '${n}' }
    check: { body_contains: '/b/2' }
  - name: wrong
    grpc:
      method: stampede.target.v1.Target/Echo
      message: { text: no }
    check: { json: { /text: yes } }
";
    let r = run(dir.path(), "reply", scenario(&url, session)).await;
    let t = &r.report.totals;
    assert_eq!(
        t.errors.iter().collect::<Vec<_>>(),
        [(&"check.json".to_string(), &20)],
        "{}",
        r.stderr
    );
    assert_eq!((t.completed, t.failed), (60, 20), "{}", r.stderr);
    let echoes = server.echoes();
    assert_eq!(echoes.len(), 60);
    let mut carried = 0;
    for e in &echoes {
        let q = &e.request;
        if q.text.starts_with("tok-") && q.text.contains('/') {
            // The second Echo carries the first reply's text and element, and the stream's
            // last id.
            assert_eq!(q.text, format!("tok-{}/b/2", q.id), "{q:?}");
            carried += 1;
        }
    }
    assert_eq!(carried, 20);
    assert_eq!(server.streamed("Stream", "out"), 60);
}

/// A pointer the reply type does not have is refused before any load, naming the step's
/// field, the reply type and the fields it has; so is a pointer at a whole message.
#[tokio::test]
async fn a_pointer_the_reply_lacks_is_named_before_any_load() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "    extract: { t: { json: /txt } }\n",
            "session[0].extract.t: `/txt`: stampede.target.v1.EchoReply has no field `txt` (it has: text, id, payload, tags, inner)",
        ),
        (
            "    check: { json: { /inner: x } }\n",
            "session[0].check.json: `/inner` at `inner`: a message (stampede.target.v1.Inner): point at one of its fields",
        ),
        (
            "    extract: { t: { json: /tags } }\n",
            "session[0].extract.t: `/tags` at `tags`: a repeated field: give the element's index (`/tags/0`)",
        ),
    ];
    for (reading, why) in cases {
        let text = scenario(
            "grpc://127.0.0.1:9",
            &format!(
                "  - grpc: {{ method: stampede.target.v1.Target/Echo, message: {{ text: hi }} }}\n{reading}"
            ),
        );
        refused_before_any_load(dir.path(), &text, why);
    }
}
