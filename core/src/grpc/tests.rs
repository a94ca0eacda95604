//! The gRPC step's checks, framing and statuses.

use super::*;

#[test]
fn status_codes_and_names() {
    assert_eq!(status_code(b"14"), Some(14));
    assert_eq!(status_name(14), Some("UNAVAILABLE"));
    assert_eq!(status_code(b"99"), Some(2), "past 16 reads as UNKNOWN");
    assert_eq!(status_code(b"x"), None);
    assert_eq!(status_code(b""), None);
    assert_eq!(status_name(17), None);
}
use proptest::prelude::*;

fn call(method: &str) -> GrpcCall {
    GrpcCall {
        method: method.into(),
        ..Default::default()
    }
}

#[test]
fn methods_and_metadata_are_checked_by_name() {
    assert_eq!(call("pkg.v1.Svc/Do").parts(), Some(("pkg.v1.Svc", "Do")));
    assert_eq!(call("Svc/Do").path(), "/Svc/Do");
    for bad in [
        "Svc",
        "/Do",
        "Svc/",
        "a..b/Do",
        "pkg.Svc/Do/x",
        "1pkg.Svc/Do",
        "p.S/a.b",
    ] {
        let e = call(bad).check().unwrap_err();
        assert_eq!(e.0, "method", "{bad}");
    }
    let mut c = call("p.S/M");
    c.message = serde_json::json!([1, 2]).into();
    assert_eq!(c.check().unwrap_err().0, "message");
    for (name, value, why) in [
        ("X-Up", "1", "lower-case"),
        ("grpc-timeout", "1S", "set by gRPC"),
        ("te", "trailers", "set by gRPC"),
        ("x-bytes-bin", "!!", "base64"),
        ("x-text", "a\nb", "printable"),
    ] {
        let mut c = call("p.S/M");
        c.metadata
            .insert(name.into(), Template::parse(value).unwrap());
        let (f, e) = c.check().unwrap_err();
        assert_eq!(f, format!("metadata.{name}"));
        assert!(e.contains(why), "{name}: {e}");
    }
    let mut ok = call("p.S/M");
    ok.metadata
        .insert("x-bytes-bin".into(), Template::literal("3q2+7w=="));
    ok.metadata
        .insert("authorization".into(), Template::literal("Bearer abc"));
    // A templated value is checked when rendered.
    ok.metadata
        .insert("x-token".into(), Template::parse("${token}").unwrap());
    ok.check().unwrap();
    assert_eq!(
        ok.templates().map(|(f, _)| f).collect::<Vec<_>>(),
        [
            "metadata.authorization",
            "metadata.x-bytes-bin",
            "metadata.x-token"
        ]
    );
}

#[test]
fn frames_are_one_uncompressed_message() {
    let f = frame(b"\x08\x07").unwrap();
    assert_eq!(f, [0, 0, 0, 0, 2, 8, 7]);
    let mut c = call("p.S/M");
    c.frame = Some(crate::protocol::encode_base64(&f));
    assert_eq!(c.frame_bytes().unwrap().unwrap(), f);
    for bad in [
        &[0u8, 0, 0, 0, 3, 1][..],
        &[1, 0, 0, 0, 0],
        &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        &[],
    ] {
        c.frame = Some(crate::protocol::encode_base64(bad));
        assert_eq!(c.check().unwrap_err().0, "frame", "{bad:?}");
    }
    assert!(frame(&vec![0; MAX_MESSAGE + 1]).is_err());
}

#[test]
fn statuses_name_their_kind_once() {
    assert_eq!(status_kind(b"0"), Ok(None));
    assert_eq!(status_kind(b"3"), Ok(Some("grpc_invalid_argument")));
    assert_eq!(status_kind(b"14"), Ok(Some("grpc_unavailable")));
    assert_eq!(status_kind(b"16"), Ok(Some("grpc_unauthenticated")));
    assert_eq!(status_kind(b"99"), Ok(Some("grpc_unknown")));
    assert_eq!(status_kind(b"99999999999"), Err(()));
    for bad in [&b""[..], b"-1", b"OK", b" 0"] {
        assert_eq!(status_kind(bad), Err(()), "{bad:?}");
    }
}

#[test]
fn a_resolved_call_carries_exactly_the_paths_its_step_reads() {
    let mut c = call("p.S/M");
    let reads = BTreeMap::from([("/a", "extract.a")]);
    // Before the CLI resolves the call, it has no paths, and that is fine.
    assert_eq!(c.check_reply(&reads), Ok(()));
    c.frame = Some(crate::protocol::encode_base64(&frame(b"").unwrap()));
    let (field, why) = c.check_reply(&reads).unwrap_err();
    assert_eq!(field, "reply");
    assert!(why.contains("`/a` is not compiled"), "{why}");
    let path: ReplyPath =
        serde_json::from_str(r#"{"hops":[{"field":1}],"kind":"string"}"#).unwrap();
    c.reply.insert("/a".into(), path.clone());
    assert_eq!(c.check_reply(&reads), Ok(()));
    c.reply.insert("/b".into(), path);
    assert_eq!(c.check_reply(&reads).unwrap_err().0, "reply./b");
    c.reply.remove("/b");
    c.reply.get_mut("/a").unwrap().hops.clear();
    assert_eq!(
        c.check(),
        Err(("reply./a".to_string(), "the path has no field".to_string()))
    );
}

#[test]
fn hostile_lengths_are_refused_at_the_prefix() {
    let mut s = FrameScanner::new(16);
    // A length of 4 GiB is refused as soon as its prefix is whole, never waited for.
    assert_eq!(
        s.feed(&[0, 0xff, 0xff, 0xff])
            .and_then(|()| s.feed(&[0xff])),
        Err(FrameError::TooLong(u32::MAX))
    );
    let mut s = FrameScanner::new(16);
    assert_eq!(s.feed(&[0, 0, 0, 0, 17]), Err(FrameError::TooLong(17)));
    let mut s = FrameScanner::new(16);
    assert_eq!(s.feed(&[2, 0, 0, 0, 1]), Err(FrameError::Flag(2)));
    let mut s = FrameScanner::new(16);
    s.feed(&[0, 0, 0, 0, 4, 1, 2]).unwrap();
    assert_eq!(s.finish(), Err(FrameError::Truncated));
    s.feed(&[3, 4, 0, 0]).unwrap();
    assert_eq!(s.finish(), Err(FrameError::Truncated));
    s.feed(&[0, 0, 0]).unwrap();
    assert_eq!(s.finish(), Ok(2));
}

#[test]
fn scenarios_tie_grpc_steps_to_a_grpc_target_and_a_schema() {
    let doc = |target: &str, grpc: &str, step: &str| {
        format!(
            "name: g\ntarget: {target}\n{grpc}phases: [{{ duration: 1s, arrival_rate: 1 }}]\nsession:\n  - {step}\n"
        )
    };
    let call = "grpc: { method: p.S/M, message: { id: 1 } }";
    let s = Scenario::from_yaml(&doc("grpc://h:1", "grpc: { reflection: true }\n", call)).unwrap();
    assert_eq!(
        (match &s.session[0].kind {
            crate::scenario::StepKind::Grpc(x) => x,
            k => panic!("not a grpc step: {k:?}"),
        })
        .message
        .json()["id"],
        1
    );
    assert_eq!(s.requests_per_session(), 1);
    Scenario::from_yaml(&doc(
        "grpcs://h",
        "grpc: { proto_files: [a.proto] }\ntls: { insecure_skip_verify: true }\n",
        call,
    ))
    .unwrap();
    let s = Scenario::from_yaml(&doc(
        "grpc://h:1",
        "grpc: { proto_files: [protos/a.proto], config_map: protos }\n",
        call,
    ))
    .unwrap();
    assert_eq!(s.grpc.unwrap().config_map.as_deref(), Some("protos"));
    for (target, grpc, step, path, why) in [
        (
            "http://h:1",
            "grpc: { reflection: true }\n",
            call,
            "session[0].grpc",
            "grpc:// or grpcs://",
        ),
        ("grpc://h:1", "", call, "grpc", "proto_files"),
        ("grpc://h:1", "grpc: {}\n", call, "grpc", "reflection: true"),
        (
            "grpc://h:1",
            "grpc: { reflection: true, proto_files: [a.proto] }\n",
            call,
            "grpc.reflection",
            "not both",
        ),
        (
            "grpc://h:1",
            "grpc: { reflection: true, config_map: protos }\n",
            call,
            "grpc.config_map",
            "holds proto_files",
        ),
        (
            "grpc://h:1",
            "grpc: { proto_files: [a.proto], config_map: ' ' }\n",
            call,
            "grpc.config_map",
            "name is empty",
        ),
        (
            "grpc://h:1",
            "grpc: { reflection: true }\n",
            "grpc: { method: nope }",
            "session[0].grpc.method",
            "package.Service/Method",
        ),
        (
            "grpc://h:1",
            "grpc: { reflection: true }\nhttp_version: \"2\"\n",
            call,
            "http_version",
            "http://",
        ),
        (
            "http://h:1",
            "grpc: { reflection: true }\n",
            "http: { path: / }",
            "grpc",
            "only applies",
        ),
        (
            "grpc://h:1",
            "grpc: { reflection: true }\n",
            "grpc: { method: p.S/M, message: { inner: { id: '${token}' } } }",
            "session[0].grpc.message.inner.id",
            "${token} is not defined before this step",
        ),
        (
            "grpc://h:1",
            "grpc: { reflection: true }\n",
            "grpc: { method: p.S/M, metadata: { x-user: '${users.id}' } }",
            "session[0].grpc.metadata.x-user",
            "`users` is not a data source",
        ),
        (
            "grpc://h:1",
            "grpc: { reflection: true }\n",
            "grpc: { method: p.S/M, message: { tags: [a, '${uuid('] } }",
            "session[0].grpc.message.tags[1]",
            "not closed",
        ),
    ] {
        let e = Scenario::from_yaml(&doc(target, grpc, step)).unwrap_err();
        assert_eq!(e.path(), path, "{e}");
        assert!(e.to_string().contains(why), "{e}");
    }
}

#[test]
fn environment_references_in_calls_are_resolved_for_agents() {
    let mut s = Scenario::from_yaml(
        "name: g\ntarget: grpc://h:1\ngrpc: { reflection: true }\n\
         phases: [{ duration: 1s, arrival_rate: 1 }]\n\
         session:\n  - grpc: { method: p.S/M, message: { key: '${env:KEY}' }, metadata: { x-key: '${env:KEY}' } }\n",
    )
    .unwrap();
    assert_eq!(
        s.env_names().into_iter().collect::<Vec<_>>(),
        ["KEY"],
        "both references are seen"
    );
    assert!(s.resolve_env(&|_| Some("s3cret".into())).unwrap());
    let submitted = serde_json::to_string(&s).unwrap();
    assert!(!submitted.contains("env:"), "{submitted}");
    let agent = Scenario::from_yaml(&submitted).unwrap();
    assert!(!agent.has_env_refs());
    let g = match &agent.session[0].kind {
        crate::scenario::StepKind::Grpc(x) => x,
        k => panic!("not a grpc step: {k:?}"),
    };
    assert_eq!(g.message.literal_json()["key"], "s3cret");
    assert_eq!(g.metadata["x-key"].as_static(), Some("s3cret"));
}

proptest! {
    /// However the body is cut into chunks, the count of whole messages is the same, and
    /// no input panics.
    #[test]
    fn chunking_never_changes_the_count(
        lens in proptest::collection::vec(0usize..40, 0..6),
        cuts in proptest::collection::vec(0usize..300, 0..8),
    ) {
        let body: Vec<u8> = lens.iter().flat_map(|&n| frame(&vec![7; n]).unwrap()).collect();
        let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (body.len() + 1)).collect();
        points.sort_unstable();
        let mut s = FrameScanner::new(64);
        let mut at = 0;
        for p in points.into_iter().chain([body.len()]) {
            s.feed(&body[at..p]).unwrap();
            at = p;
        }
        prop_assert_eq!(s.finish(), Ok(lens.len() as u32));
    }

    /// However the body is cut, the kept bytes are the last message's, whole.
    #[test]
    fn chunking_keeps_the_last_message(
        lens in proptest::collection::vec(0usize..40, 1..6),
        cuts in proptest::collection::vec(0usize..300, 0..8),
    ) {
        let messages: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|b| (b + i) as u8).collect())
            .collect();
        let body: Vec<u8> = messages.iter().flat_map(|m| frame(m).unwrap()).collect();
        let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (body.len() + 1)).collect();
        points.sort_unstable();
        let mut s = FrameScanner::new(64);
        let mut kept = vec![0xee; 3];
        let mut at = 0;
        for p in points.into_iter().chain([body.len()]) {
            s.feed_keeping(&body[at..p], Some(&mut kept)).unwrap();
            at = p;
        }
        prop_assert_eq!(s.finish(), Ok(lens.len() as u32));
        prop_assert_eq!(&kept, messages.last().unwrap());
    }

    #[test]
    fn garbage_is_an_error_or_a_count(body in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut s = FrameScanner::new(32);
        if s.feed(&body).is_ok() {
            let _ = s.finish();
        }
    }
}
