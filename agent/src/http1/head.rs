//! A response head read into what the client needs of it: the status, how the body is framed
//! and whether the connection may carry another request. `httparse` splits the head; the
//! three headers that matter are then found by length first and compared against lowercase
//! names, and their common values (`keep-alive`, `close`, a plain decimal length) are
//! recognised before the general reading. Every closed request of a run parses one head, so
//! this was a third of the agent's own instructions per request.
//!
//! A server answering the same request sends the same head, byte for byte, until its `Date`
//! changes a second later. [`parse_framing`] keeps the last head each thread read, with what
//! it parsed into, and answers a head that starts with those very bytes without parsing
//! again: a comparison of some 150 bytes in place of `httparse` and the framing reading.

use stampede_core::stats::error_kind;

use super::{Failure, Sink};

/// Most headers a response may have.
const MAX_HEADERS: usize = 64;

/// How a response's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Body {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// A complete response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Head {
    pub(super) status: u16,
    /// The server allows another request on this connection (as far as the head says; a body
    /// read until the close ends it anyway).
    pub(super) keep_alive: bool,
    pub(super) body: Body,
    /// The head's length in bytes, its blank line included.
    pub(super) len: usize,
}

/// Longest head kept by [`parse_framing`]: a longer one (cookies, large custom headers) is
/// parsed every time rather than copied on every change.
const MAX_REMEMBERED: usize = 512;

/// The last head this thread parsed for its framing alone, and what it parsed into.
struct Remembered {
    bytes: Vec<u8>,
    head_request: bool,
    head: Option<Head>,
}

std::thread_local! {
    static LAST: std::cell::RefCell<Remembered> = const {
        std::cell::RefCell::new(Remembered { bytes: Vec::new(), head_request: false, head: None })
    };
}

/// [`parse`] for a caller that needs the framing only (no header goes to a sink): a head whose
/// bytes are those of the last one this thread parsed (up to and including its blank line)
/// is that head again. `httparse` finds the end of a head from the bytes before it alone, so
/// the same bytes cannot end, or read, any other way; what follows them is the body, read as
/// the remembered framing says.
pub(super) fn parse_framing(buf: &[u8], head_request: bool) -> Result<Option<Head>, Failure> {
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if let Some(head) = last.head {
            if last.head_request == head_request && buf.starts_with(&last.bytes) {
                return Ok(Some(head));
            }
        }
        let parsed = parse(buf, head_request, &mut super::Discard)?;
        if let Some(head) = parsed.filter(|h| h.len <= MAX_REMEMBERED) {
            last.bytes.clear();
            last.bytes.extend_from_slice(&buf[..head.len]);
            last.head_request = head_request;
            last.head = Some(head);
        }
        Ok(parsed)
    })
}

/// Parses the head at the start of `buf`, passing each header to `sink`: `None` while it is
/// incomplete, a protocol failure when it is malformed or its length is ambiguous.
/// `head_request`: the request was a HEAD, whose response has no body whatever it says.
pub(super) fn parse<S: Sink>(
    buf: &[u8],
    head_request: bool,
    sink: &mut S,
) -> Result<Option<Head>, Failure> {
    // Left uninitialised: filling 64 empty headers (2 KiB) cost as much as parsing a small
    // response's head.
    let mut headers = [std::mem::MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut resp,
        buf,
        &mut headers,
    ) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(Failure(error_kind::PROTOCOL)),
    };
    let status = resp.code.unwrap_or(0);
    let mut keep_alive = resp.version == Some(1);
    let mut length = None;
    let mut chunked = false;
    for h in resp.headers.iter() {
        sink.header(h.name, h.value);
        match framing(h.name.as_bytes()) {
            Some(Framing::ContentLength) => match content_length(h.value) {
                Some(v) if length.is_none_or(|l| l == v) => length = Some(v),
                _ => return Err(Failure(error_kind::PROTOCOL)),
            },
            Some(Framing::TransferEncoding) => chunked = contains(h.value, b"chunked"),
            Some(Framing::Connection) => {
                if let Some(k) = connection_keeps(h.value) {
                    keep_alive = k;
                }
            }
            None => {}
        }
    }
    let body = if head_request || status == 204 || status == 304 || (100..200).contains(&status) {
        Body::None
    } else if chunked {
        Body::Chunked
    } else if let Some(l) = length {
        Body::Length(l)
    } else {
        Body::UntilClose
    };
    Ok(Some(Head {
        status,
        keep_alive,
        body,
        len,
    }))
}

/// The headers that frame a response or end its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    ContentLength,
    TransferEncoding,
    Connection,
}

/// Which framing header `name` is, if any: by its length first, so that most headers cost a
/// comparison of lengths.
fn framing(name: &[u8]) -> Option<Framing> {
    match name.len() {
        10 if is_lowercase_of(name, b"connection") => Some(Framing::Connection),
        14 if is_lowercase_of(name, b"content-length") => Some(Framing::ContentLength),
        17 if is_lowercase_of(name, b"transfer-encoding") => Some(Framing::TransferEncoding),
        _ => None,
    }
}

/// `text` equals `lower` (already lowercase) ignoring ASCII case: only `text` is lowered,
/// and without an early exit, so the loop has no branch per byte.
fn is_lowercase_of(text: &[u8], lower: &[u8]) -> bool {
    text.len() == lower.len()
        && text
            .iter()
            .zip(lower)
            .fold(0u8, |diff, (t, l)| diff | (t.to_ascii_lowercase() ^ l))
            == 0
}

/// Whether `needle` (lowercase) occurs in `value`, ignoring ASCII case.
fn contains(value: &[u8], needle: &[u8]) -> bool {
    value
        .windows(needle.len())
        .any(|w| is_lowercase_of(w, needle))
}

/// A Content-Length value: a plain run of digits (what servers send) read directly, anything
/// else as a trimmed decimal; `None` when it is not one or does not fit.
fn content_length(value: &[u8]) -> Option<u64> {
    if !value.is_empty() && value.len() <= 19 && value.iter().all(u8::is_ascii_digit) {
        // 19 digits always fit a u64.
        return Some(value.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')));
    }
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
}

/// What a Connection header says of the connection's reuse: `Some(false)` when it mentions
/// `close`, `Some(true)` when it mentions `keep-alive` (and not `close`), `None` otherwise.
fn connection_keeps(value: &[u8]) -> Option<bool> {
    // The two values servers send, whole.
    if is_lowercase_of(value, b"keep-alive") {
        return Some(true);
    }
    if is_lowercase_of(value, b"close") {
        return Some(false);
    }
    if contains(value, b"close") {
        Some(false)
    } else if contains(value, b"keep-alive") {
        Some(true)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::http1::Discard;

    /// The reading before the fast paths: each header name compared in full, each value
    /// searched through (kept here as the reference the fast paths must agree with).
    fn reference(
        name: &[u8],
        value: &[u8],
    ) -> (Option<Framing>, Option<Option<u64>>, Option<bool>) {
        let frame = if name.eq_ignore_ascii_case(b"content-length") {
            Some(Framing::ContentLength)
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            Some(Framing::TransferEncoding)
        } else if name.eq_ignore_ascii_case(b"connection") {
            Some(Framing::Connection)
        } else {
            None
        };
        let length = std::str::from_utf8(value)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
        let keeps = if value.windows(5).any(|w| w.eq_ignore_ascii_case(b"close")) {
            Some(false)
        } else if value
            .windows(10)
            .any(|w| w.eq_ignore_ascii_case(b"keep-alive"))
        {
            Some(true)
        } else {
            None
        };
        (frame, Some(length), keeps)
    }

    fn fast(name: &[u8], value: &[u8]) -> (Option<Framing>, Option<Option<u64>>, Option<bool>) {
        (
            framing(name),
            Some(content_length(value)),
            connection_keeps(value),
        )
    }

    #[test]
    fn the_common_values_read_as_before() {
        for (name, value) in [
            (&b"Content-Length"[..], &b"2"[..]),
            (b"content-length", b"18446744073709551615"),
            (b"CONTENT-LENGTH", b"18446744073709551616"),
            (b"Content-Length", b" 42 "),
            (b"Content-Length", b"+7"),
            (b"Content-Length", b""),
            (b"Content-Length", b"0x10"),
            (b"Connection", b"keep-alive"),
            (b"connection", b"Keep-Alive"),
            (b"Connection", b"close"),
            (b"Connection", b"Upgrade, close"),
            (b"Connection", b"keep-alive, Upgrade"),
            (b"Connection", b"upgrade"),
            (b"Transfer-Encoding", b"gzip, chunked"),
            (b"Content-Type", b"text/plain"),
            (b"Connectiom", b"close"),
            (b"Content-Lengtg", b"2"),
        ] {
            assert_eq!(
                fast(name, value),
                reference(name, value),
                "{name:?}: {value:?}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Any name and value of printable ASCII reads the same as the reference reading.
        #[test]
        fn fast_paths_agree_with_the_reference(
            name in "(?i:content-length|connection|transfer-encoding|content-type|[A-Za-z-]{0,18})",
            value in "(?i:keep-alive|close|[0-9]{0,21}|[ -~]{0,24})",
        ) {
            prop_assert_eq!(fast(name.as_bytes(), value.as_bytes()), reference(name.as_bytes(), value.as_bytes()));
        }
    }

    #[test]
    fn a_head_reads_into_status_framing_and_reuse() {
        let nginx = b"HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Thu, 26 Nov 2026 13:29:25 GMT\r\n\
            Content-Type: text/plain\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok";
        let head = parse(nginx, false, &mut Discard).unwrap().unwrap();
        assert_eq!(
            head,
            Head {
                status: 200,
                keep_alive: true,
                body: Body::Length(2),
                len: nginx.len() - 2,
            }
        );
        assert_eq!(parse(&nginx[..40], false, &mut Discard).unwrap(), None);
        let closing = b"HTTP/1.1 404 NF\r\nConnection: Close\r\n\r\n";
        let head = parse(closing, false, &mut Discard).unwrap().unwrap();
        assert_eq!(
            (head.status, head.keep_alive, head.body),
            (404, false, Body::UntilClose)
        );
        let old = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert!(!parse(old, false, &mut Discard).unwrap().unwrap().keep_alive);
        let two = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\ncontent-length: 2\r\n\r\n";
        assert_eq!(
            parse(two, false, &mut Discard).unwrap_err(),
            Failure(error_kind::PROTOCOL)
        );
        let head_only = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n";
        assert_eq!(
            parse(head_only, true, &mut Discard).unwrap().unwrap().body,
            Body::None
        );
    }

    /// Heads that share prefixes, differ in one byte of a header or in their framing, and
    /// one too long to remember.
    fn heads() -> Vec<Vec<u8>> {
        let long = format!(
            "HTTP/1.1 200 OK\r\nX-Pad: {}\r\nContent-Length: 3\r\n\r\n",
            "p".repeat(600)
        );
        vec![
            b"HTTP/1.1 200 OK\r\nDate: Thu, 26 Nov 2026 13:29:25 GMT\r\nContent-Length: 2\r\n\r\n"
                .to_vec(),
            b"HTTP/1.1 200 OK\r\nDate: Thu, 26 Nov 2026 13:29:26 GMT\r\nContent-Length: 2\r\n\r\n"
                .to_vec(),
            b"HTTP/1.1 200 OK\r\nDate: Thu, 26 Nov 2026 13:29:26 GMT\r\nContent-Length: 25\r\n\r\n"
                .to_vec(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n".to_vec(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n".to_vec(),
            b"HTTP/1.1 200 OK\nContent-Length: 2\n\n".to_vec(),
            b"HTTP/1.1 100 Continue\r\n\r\n".to_vec(),
            b"HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\n".to_vec(),
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n".to_vec(),
            b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n".to_vec(),
            long.into_bytes(),
        ]
    }

    #[test]
    fn a_head_seen_again_is_the_head_it_was_and_a_changed_one_is_parsed() {
        let h = heads();
        let mut buf = h[0].clone();
        buf.extend_from_slice(b"ok");
        let first = parse_framing(&buf, false).unwrap();
        assert_eq!(first, parse(&buf, false, &mut Discard).unwrap());
        // The same head before another body.
        buf.truncate(h[0].len());
        buf.extend_from_slice(b"\r\n\r\n");
        assert_eq!(parse_framing(&buf, false).unwrap(), first);
        // Asked as a HEAD request, the same bytes frame no body.
        assert_eq!(
            parse_framing(&h[0], true).unwrap().unwrap().body,
            Body::None
        );
        assert_eq!(
            parse_framing(&h[0], false).unwrap().unwrap().body,
            Body::Length(2)
        );
        // One byte of the Date changed, then the length: parsed again each time.
        assert_eq!(parse_framing(&h[1], false).unwrap(), first);
        assert_eq!(
            parse_framing(&h[2], false).unwrap().unwrap().body,
            Body::Length(25)
        );
        // Part of the remembered head is not yet a head.
        assert_eq!(parse_framing(&h[2][..h[2].len() - 1], false).unwrap(), None);
        // A head too long to remember is parsed every time, and the one before it stays.
        let long = &h[h.len() - 1];
        assert_eq!(parse_framing(long, false).unwrap().unwrap().len, long.len());
        LAST.with(|l| assert_eq!(l.borrow().bytes, h[2]));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        /// Any sequence of heads, whole, cut short or followed by more bytes, and asked as a
        /// HEAD request or not, reads through the remembered head exactly as it parses.
        #[test]
        fn the_remembered_head_reads_as_parsing_does(
            seq in proptest::collection::vec((0usize..12, 0usize..700, any::<bool>(), any::<bool>()), 1..40),
        ) {
            let h = heads();
            for (which, cut, more, head_request) in seq {
                let mut buf = h[which].clone();
                if more {
                    buf.extend_from_slice(&h[(which + 1) % h.len()]);
                }
                buf.truncate(cut.max(1).min(buf.len()));
                let parsed = parse(&buf, head_request, &mut Discard);
                prop_assert_eq!(parse_framing(&buf, head_request), parsed);
            }
        }
    }
}
