//! A static request rendered to bytes once per step, in its keep-alive and closing forms.

use bytes::Bytes;
use stampede_core::scenario::HttpRequest;
use stampede_core::template::Template;

/// A request rendered to bytes once, in two forms: as written, and asking the server to close
/// the connection after answering (for the last request on a connection, so that the server
/// closes first and the TIME_WAIT is its own, not the generator's ephemeral port).
#[derive(Debug, Clone)]
pub struct PreparedRequest {
    /// Both forms back to back: `..split` as written, `split..` closing.
    bytes: Bytes,
    split: u32,
    pub(super) head: bool,
}

impl PreparedRequest {
    /// Renders a static request (no template reference: see [`HttpRequest::is_static`]) once,
    /// its path appended to the target's `prefix`.
    pub fn new(req: &HttpRequest, host_header: &str, prefix: &str) -> Self {
        debug_assert!(req.is_static());
        let text = |t: &Template| t.as_static().unwrap_or_default().to_string();
        let mut out = String::with_capacity(256);
        out.push_str(&req.method);
        out.push(' ');
        out.push_str(prefix);
        out.push_str(&text(&req.path));
        out.push_str(" HTTP/1.1\r\nHost: ");
        out.push_str(host_header);
        out.push_str("\r\n");
        let mut has_ua = false;
        let mut has_connection = false;
        for (k, v) in &req.headers {
            if k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("host") {
                continue;
            }
            has_ua |= k.eq_ignore_ascii_case("user-agent");
            has_connection |= k.eq_ignore_ascii_case("connection");
            out.push_str(k);
            out.push_str(": ");
            out.push_str(&text(v));
            out.push_str("\r\n");
        }
        if !has_ua {
            out.push_str("User-Agent: stampede\r\n");
        }
        let body = req.body.as_ref().map(text).unwrap_or_default();
        let body = body.as_str();
        if !body.is_empty() || matches!(req.method.as_str(), "POST" | "PUT" | "PATCH") {
            out.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        // The head without its blank line: the closing form adds one header there.
        let head_end = out.len();
        out.push_str("\r\n");
        out.push_str(body);
        let written = out;
        let mut both = String::with_capacity(2 * written.len() + 19);
        both.push_str(&written);
        if has_connection {
            // The scenario says what it wants: never a second Connection header.
            both.push_str(&written);
        } else {
            both.push_str(&written[..head_end]);
            both.push_str("Connection: close\r\n");
            both.push_str(&written[head_end..]);
        }
        Self {
            bytes: Bytes::from(both),
            split: u32::try_from(written.len()).unwrap_or(u32::MAX),
            head: req.method.eq_ignore_ascii_case("HEAD"),
        }
    }

    /// The request's bytes: `last` for the last request on its connection.
    pub fn bytes(&self, last: bool) -> &[u8] {
        let (written, closing) = self.bytes.split_at(self.split as usize);
        if last {
            closing
        } else {
            written
        }
    }

    /// Bytes of the request, head and body, for the bytes-sent count.
    pub fn len(&self) -> usize {
        self.split as usize
    }

    /// Whether the request has no bytes.
    pub fn is_empty(&self) -> bool {
        self.split == 0
    }
}
