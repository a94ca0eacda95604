//! Hostile input: the agent's HTTP/1.1 response parser (`http1::Conn`, the code the
//! agent runs) fed from memory in pieces of any size. Well-formed responses are read back
//! exactly (status, bytes, kept body); random and mutated ones end in an error or a response,
//! never a panic, and never claim more bytes than were sent. The same input as the
//! `http1_response` fuzz target (`fuzz/README.md`).

use std::pin::Pin;
use std::task::{Context, Poll};

use proptest::prelude::*;
use stampede_agent::http1::{Capture, Conn, Discard, Response};
use tokio::io::{AsyncRead, ReadBuf};

/// Serves `data` at most `piece` bytes per read, then end of stream.
struct Pieces {
    data: Vec<u8>,
    at: usize,
    piece: usize,
}

impl AsyncRead for Pieces {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = (self.data.len() - self.at)
            .min(self.piece)
            .min(buf.remaining());
        let at = self.at;
        buf.put_slice(&self.data[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n";
const LIMIT: usize = 48;

/// Up to three exchanges on one connection over `data`; each result and what was kept.
fn exchanges(
    data: Vec<u8>,
    piece: usize,
    head: bool,
    capture: bool,
) -> Vec<Result<(Response, Capture), &'static str>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let stream = tokio::io::join(Pieces { data, at: 0, piece }, tokio::io::sink());
    rt.block_on(async {
        let mut conn = Conn::over(stream);
        let mut out = Vec::new();
        for _ in 0..3 {
            let mut sink = Capture::default();
            sink.clear(LIMIT);
            let r = if capture {
                conn.exchange(REQUEST, head, &mut sink).await
            } else {
                conn.exchange(REQUEST, head, &mut Discard).await
            };
            let more = r.is_ok_and(|r| r.keep_alive);
            out.push(r.map(|r| (r, sink)).map_err(|e| e.0));
            if !more {
                break;
            }
        }
        out
    })
}

#[derive(Debug, Clone)]
enum Body {
    Length(Vec<u8>),
    /// Chunks, with a chunk extension on the first and a trailer when `true`.
    Chunked(Vec<Vec<u8>>, bool),
    UntilClose(Vec<u8>),
}

/// One well-formed response (after `interim` 1xx answers) and what the parser must report.
#[derive(Debug, Clone)]
struct Wellformed {
    interim: Vec<u16>,
    status: u16,
    close: bool,
    extra: Vec<(String, String)>,
    body: Body,
}

impl Wellformed {
    fn bytes(&self, head: bool) -> Vec<u8> {
        let mut out = Vec::new();
        for s in &self.interim {
            out.extend_from_slice(format!("HTTP/1.1 {s} Interim\r\nX-I: {s}\r\n\r\n").as_bytes());
        }
        out.extend_from_slice(format!("HTTP/1.1 {} Whatever\r\n", self.status).as_bytes());
        for (k, v) in &self.extra {
            out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
        }
        if self.close {
            out.extend_from_slice(b"Connection: close\r\n");
        }
        let no_body = head || matches!(self.status, 204 | 304);
        match &self.body {
            Body::Length(b) => {
                out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", b.len()).as_bytes());
                if !no_body {
                    out.extend_from_slice(b);
                }
            }
            Body::Chunked(chunks, ext) => {
                out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                if !no_body {
                    for (i, c) in chunks.iter().enumerate() {
                        let e = if *ext && i == 0 { ";name=value" } else { "" };
                        out.extend_from_slice(format!("{:x}{e}\r\n", c.len()).as_bytes());
                        out.extend_from_slice(c);
                        out.extend_from_slice(b"\r\n");
                    }
                    out.extend_from_slice(b"0\r\n");
                    if *ext {
                        out.extend_from_slice(b"X-Trailer: t\r\n");
                    }
                    out.extend_from_slice(b"\r\n");
                }
            }
            Body::UntilClose(b) => {
                out.extend_from_slice(b"\r\n");
                if !no_body {
                    out.extend_from_slice(b);
                }
            }
        }
        out
    }

    fn body(&self) -> Vec<u8> {
        match &self.body {
            Body::Length(b) | Body::UntilClose(b) => b.clone(),
            Body::Chunked(c, _) => c.concat(),
        }
    }
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

fn wellformed() -> impl Strategy<Value = Wellformed> {
    let body = prop_oneof![
        bytes(300).prop_map(Body::Length),
        (
            proptest::collection::vec(bytes(40).prop_filter("non-empty", |c| !c.is_empty()), 0..6),
            any::<bool>()
        )
            .prop_map(|(c, ext)| Body::Chunked(c, ext)),
        bytes(300).prop_map(Body::UntilClose),
    ];
    (
        proptest::collection::vec(prop_oneof![Just(100u16), Just(102), Just(103)], 0..3),
        prop_oneof![
            Just(200u16),
            Just(201),
            Just(204),
            Just(304),
            Just(404),
            200u16..600
        ],
        any::<bool>(),
        proptest::collection::vec(("[A-Za-z][A-Za-z0-9-]{0,12}", "[ -~]{0,30}"), 0..5),
        body,
    )
        .prop_map(|(interim, status, close, extra, body)| {
            // Header names the parser acts on are the test's to choose, not the strategy's.
            let extra = extra
                .into_iter()
                .filter(|(k, _)| {
                    !["content-length", "transfer-encoding", "connection"]
                        .contains(&k.to_ascii_lowercase().as_str())
                })
                .map(|(k, v)| (k, v.trim().to_string()))
                .collect();
            Wellformed {
                interim,
                status,
                close,
                extra,
                body,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A well-formed response, in pieces of any size, is read exactly: its status, every
    /// byte (interim answers included), keep-alive, and the kept body's first bytes.
    #[test]
    fn wellformed_responses_are_read_exactly(
        r in wellformed(),
        piece in prop_oneof![1usize..8, 8usize..64, Just(usize::MAX)],
        head in any::<bool>(),
        capture in any::<bool>(),
    ) {
        let data = r.bytes(head);
        let first = exchanges(data.clone(), piece, head, capture).into_iter().next().unwrap();
        let (resp, kept) = first.map_err(|e| TestCaseError::fail(format!("{e}: {r:?}")))?;
        prop_assert_eq!(resp.status, r.status);
        prop_assert_eq!(resp.bytes_received, data.len() as u64);
        let no_body = head || matches!(r.status, 204 | 304);
        let until_close = matches!(r.body, Body::UntilClose(_)) && !no_body;
        prop_assert_eq!(resp.keep_alive, !r.close && !until_close);
        if capture {
            let body = if no_body { Vec::new() } else { r.body() };
            prop_assert_eq!(&kept.body[..], &body[..body.len().min(LIMIT)]);
            for (k, v) in &r.extra {
                let k = k.to_ascii_lowercase();
                prop_assert!(kept.headers.iter().any(|(n, val)| *n == k && val == v.as_bytes()), "{k}");
            }
        }
    }

    /// Well-formed responses with bytes changed, cut or extended, and random bytes: an error
    /// or a response, never a panic, never more bytes claimed than were sent, never more body
    /// kept than the limit.
    #[test]
    fn hostile_responses_never_panic(
        r in wellformed(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<usize>(),
        tail in bytes(40),
        random in bytes(200),
        piece in prop_oneof![1usize..8, Just(usize::MAX)],
        head in any::<bool>(),
        capture in any::<bool>(),
    ) {
        let mut data = r.bytes(head);
        for (at, b) in edits {
            let at = at % data.len();
            data[at] = b;
        }
        data.truncate(cut % (data.len() + 1));
        data.extend_from_slice(&tail);
        for input in [data, random] {
            let sent = input.len() as u64;
            let got = exchanges(input, piece, head, capture);
            let received: u64 = got.iter().flatten().map(|(r, _)| r.bytes_received).sum();
            prop_assert!(received <= sent, "{received} > {sent}");
            prop_assert!(got.iter().flatten().all(|(_, k)| k.body.len() <= LIMIT));
        }
    }
}
