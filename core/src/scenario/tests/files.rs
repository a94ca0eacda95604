//! Files a scenario names (payloads, TLS material, env and data files): inlined or resolved, the
//! field named when one is wrong.

use super::*;

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
