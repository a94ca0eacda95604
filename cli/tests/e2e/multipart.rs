//! `multipart/form-data` bodies end to end: the real `stampede` binary reads a part's file
//! and assembles the body with its boundary, the agent renders its templates per request, and
//! a server that parses the parts with an independent parser (multer) sees every field, file
//! name, content type and content as the scenario says.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{cli_run_local, read_head, serve_each};

/// One part as the server parsed it: (name, file name, content type, content).
type Part = (String, Option<String>, Option<String>, String);

/// An HTTP/1.1 server that parses each request's multipart body and keeps its parts; it
/// answers 200, or 400 when the body does not parse.
async fn parsing_server() -> (String, Arc<Mutex<Vec<Vec<Part>>>>, crate::Stop) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<Vec<Part>>>> = Arc::default();
    let kept = seen.clone();
    let stop = serve_each(l, move |mut s| {
        let kept = kept.clone();
        async move {
            let mut buf = Vec::new();
            while let Some(end) = read_head(&mut s, &mut buf).await {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let header = |name: &str| {
                    head.lines()
                        .find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_string))
                };
                let len: usize = header("content-length")
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                let ct = String::from_utf8_lossy(&buf[..end])
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-type")
                            .then(|| v.trim().to_string())
                    })
                    .unwrap_or_default();
                while buf.len() < end + len {
                    let mut chunk = [0u8; 8192];
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let body = bytes::Bytes::copy_from_slice(&buf[end..end + len]);
                buf.drain(..end + len);
                let parsed = parse(&ct, body).await;
                let status = if parsed.is_some() {
                    "200 OK"
                } else {
                    "400 Bad Request"
                };
                if let Some(parts) = parsed {
                    kept.lock().unwrap().push(parts);
                }
                let answer = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
                if s.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
    });
    (url, seen, stop)
}

/// The parts of a multipart body, as multer reads them; `None` when it does not parse.
async fn parse(content_type: &str, body: bytes::Bytes) -> Option<Vec<Part>> {
    let boundary = multer::parse_boundary(content_type).ok()?;
    let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(body) });
    let mut form = multer::Multipart::new(stream, boundary);
    let mut parts = Vec::new();
    while let Some(field) = form.next_field().await.ok()? {
        let name = field.name()?.to_string();
        let file = field.file_name().map(str::to_string);
        let ct = field.content_type().map(|m| m.to_string());
        parts.push((name, file, ct, field.text().await.ok()?));
    }
    Some(parts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_parts_reach_a_parsing_server_rendered() {
    let (url, seen, _stop) = parsing_server().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("report.csv"),
        "id,who\n${session.index},x\n",
    )
    .unwrap();
    let text = format!(
        "name: e2e-multipart\ntarget: {url}\nphases:\n  - {{ duration: 1s, arrival_rate: 10 }}\n\
         session:\n  - http:\n      method: POST\n      path: /upload\n      multipart:\n\
         \x20       - {{ name: user, value: 'u${{session.index}}' }}\n\
         \x20       - {{ name: report, file: report.csv, filename: 'r-${{session.index}}.csv', content_type: text/csv }}\n\
         \x20       - {{ name: notes, file: report.csv }}\n"
    );
    let r = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || cli_run_local(&dir, "multipart", &text)
    })
    .await
    .unwrap();
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        r.report.totals.completed, 10,
        "{:?}",
        r.report.totals.errors
    );
    let mut seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 10);
    seen.sort_by_key(|parts| parts[0].3.clone());
    for parts in &seen {
        let i = parts[0]
            .3
            .strip_prefix('u')
            .expect("the user field")
            .to_string();
        assert_eq!(
            parts,
            &[
                ("user".to_string(), None, None, format!("u{i}")),
                (
                    "report".to_string(),
                    Some(format!("r-{i}.csv")),
                    Some("text/csv".to_string()),
                    format!("id,who\n{i},x\n")
                ),
                (
                    "notes".to_string(),
                    Some("report.csv".to_string()),
                    None,
                    format!("id,who\n{i},x\n")
                ),
            ]
        );
    }
}
