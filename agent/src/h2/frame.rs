//! HTTP/2 frames as the lean client ([`super::lean`]) reads and writes them (RFC 9113 §4 and
//! §6): a frame's header, the payload checks a client needs, the frames it writes, and the
//! constant header block of a static request. Nothing here trusts a length: a frame longer
//! than the client accepts is refused from its 9-byte header, before any of it is kept.

use std::fmt;

/// What a client sends first on every HTTP/2 connection.
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// A frame header's length.
pub(crate) const HEAD_LEN: usize = 9;
/// The largest frame payload the client accepts: the protocol's default, which it never
/// raises (an answer's bytes are counted, not kept, so larger frames would save nothing).
pub(crate) const MAX_FRAME: usize = 16_384;

/// Frame types.
pub(crate) mod kind {
    pub(crate) const DATA: u8 = 0;
    pub(crate) const HEADERS: u8 = 1;
    pub(crate) const PRIORITY: u8 = 2;
    pub(crate) const RST_STREAM: u8 = 3;
    pub(crate) const SETTINGS: u8 = 4;
    pub(crate) const PUSH_PROMISE: u8 = 5;
    pub(crate) const PING: u8 = 6;
    pub(crate) const GOAWAY: u8 = 7;
    pub(crate) const WINDOW_UPDATE: u8 = 8;
    pub(crate) const CONTINUATION: u8 = 9;
}

/// Frame flags.
pub(crate) mod flag {
    pub(crate) const END_STREAM: u8 = 0x1;
    pub(crate) const ACK: u8 = 0x1;
    pub(crate) const END_HEADERS: u8 = 0x4;
    pub(crate) const PADDED: u8 = 0x8;
    pub(crate) const PRIORITY: u8 = 0x20;
}

/// Error codes (RFC 9113 §7).
pub(crate) mod code {
    pub(crate) const PROTOCOL_ERROR: u32 = 1;
    pub(crate) const FLOW_CONTROL_ERROR: u32 = 3;
    pub(crate) const FRAME_SIZE_ERROR: u32 = 6;
    pub(crate) const REFUSED_STREAM: u32 = 7;
    pub(crate) const CANCEL: u32 = 8;
    pub(crate) const COMPRESSION_ERROR: u32 = 9;
}

/// Settings identifiers (RFC 9113 §6.5.2).
pub(crate) mod setting {
    pub(crate) const ENABLE_PUSH: u16 = 2;
    pub(crate) const MAX_CONCURRENT_STREAMS: u16 = 3;
    pub(crate) const INITIAL_WINDOW_SIZE: u16 = 4;
    pub(crate) const MAX_FRAME_SIZE: u16 = 5;
    pub(crate) const MAX_HEADER_LIST_SIZE: u16 = 6;
}

/// The largest flow-control window the protocol allows.
pub(crate) const MAX_WINDOW: u32 = (1 << 31) - 1;

/// A frame's 9-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    /// The payload's length.
    pub(crate) len: usize,
    /// The frame's type ([`kind`]).
    pub(crate) kind: u8,
    /// Its flags ([`flag`]).
    pub(crate) flags: u8,
    /// Its stream (0: the connection), the reserved bit cleared.
    pub(crate) stream: u32,
}

/// Why the peer's bytes are not a frame this client can take: a connection error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FrameError {
    /// A frame longer than [`MAX_FRAME`], which the client never allowed.
    #[error("a frame of {0} bytes, past the {MAX_FRAME} the client accepts")]
    TooLarge(usize),
    /// A padded frame whose padding does not fit in it.
    #[error("padding longer than its frame")]
    Padding,
    /// A frame whose type fixes its length, with another length.
    #[error("a {0} frame of {1} bytes")]
    Size(Kind, usize),
    /// A frame on a stream its type cannot be on (or off the stream it must be on).
    #[error("a {0} frame on stream {1}")]
    Stream(Kind, u32),
}

impl FrameError {
    /// The error code a GOAWAY for this error carries.
    pub(crate) fn code(self) -> u32 {
        match self {
            FrameError::TooLarge(_) | FrameError::Size(..) => code::FRAME_SIZE_ERROR,
            FrameError::Padding | FrameError::Stream(..) => code::PROTOCOL_ERROR,
        }
    }
}

/// A frame type, named for errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kind(pub u8);

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            kind::DATA => "DATA",
            kind::HEADERS => "HEADERS",
            kind::PRIORITY => "PRIORITY",
            kind::RST_STREAM => "RST_STREAM",
            kind::SETTINGS => "SETTINGS",
            kind::PUSH_PROMISE => "PUSH_PROMISE",
            kind::PING => "PING",
            kind::GOAWAY => "GOAWAY",
            kind::WINDOW_UPDATE => "WINDOW_UPDATE",
            kind::CONTINUATION => "CONTINUATION",
            other => return write!(f, "type-{other}"),
        };
        f.write_str(name)
    }
}

impl Head {
    /// The header at the front of `b`, when all 9 bytes are there; a frame longer than
    /// [`MAX_FRAME`] is an error here, so its payload is never waited for.
    pub(crate) fn parse(b: &[u8]) -> Result<Option<Head>, FrameError> {
        let Some(h) = b.get(..HEAD_LEN) else {
            return Ok(None);
        };
        let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge(len));
        }
        Ok(Some(Head {
            len,
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & MAX_WINDOW,
        }))
    }

    /// Checks the stream a frame is on and the lengths its type fixes (§6): what would
    /// otherwise be read past, or be a frame the protocol forbids there.
    pub(crate) fn check(&self) -> Result<(), FrameError> {
        let on_stream = match self.kind {
            kind::DATA | kind::HEADERS | kind::PRIORITY | kind::RST_STREAM | kind::CONTINUATION => {
                Some(true)
            }
            kind::SETTINGS | kind::PING | kind::GOAWAY => Some(false),
            _ => None,
        };
        if let Some(on) = on_stream {
            if on != (self.stream != 0) {
                return Err(FrameError::Stream(Kind(self.kind), self.stream));
            }
        }
        let fits = match self.kind {
            kind::PRIORITY => self.len == 5,
            kind::RST_STREAM | kind::WINDOW_UPDATE => self.len == 4,
            kind::PING => self.len == 8,
            kind::GOAWAY => self.len >= 8,
            kind::SETTINGS if self.flags & flag::ACK != 0 => self.len == 0,
            kind::SETTINGS => self.len.is_multiple_of(6),
            _ => true,
        };
        if fits {
            Ok(())
        } else {
            Err(FrameError::Size(Kind(self.kind), self.len))
        }
    }
}

/// A DATA or HEADERS payload without its padding, and a HEADERS payload without its
/// priority fields: the data, or the header block fragment.
pub(crate) fn content<'a>(head: &Head, payload: &'a [u8]) -> Result<&'a [u8], FrameError> {
    let mut p = payload;
    let mut pad = 0usize;
    if head.flags & flag::PADDED != 0 {
        let (&n, rest) = p.split_first().ok_or(FrameError::Padding)?;
        pad = usize::from(n);
        p = rest;
    }
    if head.kind == kind::HEADERS && head.flags & flag::PRIORITY != 0 {
        p = p
            .get(5..)
            .ok_or(FrameError::Size(Kind(head.kind), head.len))?;
    }
    if pad > p.len() {
        return Err(FrameError::Padding);
    }
    Ok(&p[..p.len() - pad])
}

/// A 4-byte big-endian field at `at` of a payload whose length [`Head::check`] checked.
pub(crate) fn u32_at(payload: &[u8], at: usize) -> u32 {
    let b = &payload[at..at + 4];
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// A SETTINGS payload's entries (its length checked by [`Head::check`]).
pub(crate) fn settings(payload: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
    payload
        .chunks_exact(6)
        .map(|e| (u16::from_be_bytes([e[0], e[1]]), u32_at(e, 2)))
}

/// Appends a frame header.
pub(crate) fn head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let l = (len as u32).to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], kind, flags]);
    out.extend_from_slice(&(stream & MAX_WINDOW).to_be_bytes());
}

/// Appends a SETTINGS frame with `entries`.
pub(crate) fn put_settings(out: &mut Vec<u8>, entries: &[(u16, u32)]) {
    head(out, entries.len() * 6, kind::SETTINGS, 0, 0);
    for (id, value) in entries {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// Appends a WINDOW_UPDATE frame.
pub(crate) fn put_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    head(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&(increment & MAX_WINDOW).to_be_bytes());
}

/// Appends an RST_STREAM frame.
pub(crate) fn put_rst_stream(out: &mut Vec<u8>, stream: u32, error: u32) {
    head(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&error.to_be_bytes());
}

/// Appends a GOAWAY frame (no debug data).
pub(crate) fn put_goaway(out: &mut Vec<u8>, last_stream: u32, error: u32) {
    head(out, 8, kind::GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & MAX_WINDOW).to_be_bytes());
    out.extend_from_slice(&error.to_be_bytes());
}

/// Appends a header block as a HEADERS frame and as many CONTINUATION frames as
/// `max_frame` (the peer's SETTINGS_MAX_FRAME_SIZE) needs.
pub(crate) fn put_headers(
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame: usize,
) {
    let mut chunks = block.chunks(max_frame.max(1)).peekable();
    let end = if end_stream { flag::END_STREAM } else { 0 };
    let mut first = true;
    loop {
        let chunk = chunks.next().unwrap_or_default();
        let last = chunks.peek().is_none();
        let flags = if last { flag::END_HEADERS } else { 0 };
        if first {
            head(out, chunk.len(), kind::HEADERS, flags | end, stream);
        } else {
            head(out, chunk.len(), kind::CONTINUATION, flags, stream);
        }
        out.extend_from_slice(chunk);
        first = false;
        if last {
            return;
        }
    }
}

/// Appends a DATA frame.
pub(crate) fn put_data(out: &mut Vec<u8>, stream: u32, data: &[u8], end_stream: bool) {
    let flags = if end_stream { flag::END_STREAM } else { 0 };
    head(out, data.len(), kind::DATA, flags, stream);
    out.extend_from_slice(data);
}

/// The header block of a static request, the same on every stream of every connection: each
/// field a literal the decoder does not index (or an entry of the static table), so the block
/// never depends on a dynamic table's state. Pseudo-header names are the static table's.
pub(crate) fn request_block<'a>(
    method: &str,
    scheme: &str,
    authority: &str,
    path: &str,
    headers: impl Iterator<Item = (&'a str, &'a [u8])>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    // RFC 7541 Appendix A: the entries a request line of GET or POST on `/` hits exactly.
    match method {
        "GET" => out.push(0x80 | 2),
        "POST" => out.push(0x80 | 3),
        m => indexed_name(&mut out, 2, m.as_bytes()),
    }
    match scheme {
        "https" => out.push(0x80 | 7),
        _ => out.push(0x80 | 6),
    }
    match path {
        "/" => out.push(0x80 | 4),
        p => indexed_name(&mut out, 4, p.as_bytes()),
    }
    indexed_name(&mut out, 1, authority.as_bytes());
    for (name, value) in headers {
        // Literal without indexing, a new name.
        out.push(0);
        string(&mut out, name.as_bytes());
        string(&mut out, value);
    }
    out
}

/// A literal field without indexing whose name is the static table's entry `index`.
fn indexed_name(out: &mut Vec<u8>, index: usize, value: &[u8]) {
    integer(out, index, 4, 0);
    string(out, value);
}

/// A string literal, not Huffman-coded.
fn string(out: &mut Vec<u8>, s: &[u8]) {
    integer(out, s.len(), 7, 0);
    out.extend_from_slice(s);
}

fn integer(out: &mut Vec<u8>, value: usize, prefix: u8, bits: u8) {
    super::hpack::put_integer(out, value, prefix, bits);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_is_read_back_and_a_long_frame_refused_from_its_header() {
        let mut out = Vec::new();
        head(&mut out, 300, kind::DATA, flag::END_STREAM, 7 | 1 << 31);
        let h = Head::parse(&out).unwrap().unwrap();
        assert_eq!(
            h,
            Head {
                len: 300,
                kind: kind::DATA,
                flags: flag::END_STREAM,
                stream: 7
            }
        );
        assert_eq!(Head::parse(&out[..8]), Ok(None));
        let long = [0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 1];
        assert_eq!(Head::parse(&long), Err(FrameError::TooLarge(0xff_ffff)));
    }

    #[test]
    fn fixed_lengths_and_streams_are_checked() {
        let h = |len, kind, flags, stream| Head {
            len,
            kind,
            flags,
            stream,
        };
        assert!(h(8, kind::PING, 0, 0).check().is_ok());
        assert!(h(7, kind::PING, 0, 0).check().is_err());
        assert!(h(8, kind::PING, 0, 1).check().is_err());
        assert!(h(6, kind::SETTINGS, flag::ACK, 0).check().is_err());
        assert!(h(12, kind::SETTINGS, 0, 0).check().is_ok());
        assert!(h(13, kind::SETTINGS, 0, 0).check().is_err());
        assert!(h(4, kind::DATA, 0, 0).check().is_err());
        assert!(h(4, kind::WINDOW_UPDATE, 0, 0).check().is_ok());
        assert!(h(7, kind::GOAWAY, 0, 0).check().is_err());
        assert!(h(0, 0x42, 0, 0).check().is_ok());
    }

    #[test]
    fn padding_and_priority_are_taken_off() {
        let d = Head {
            len: 6,
            kind: kind::DATA,
            flags: flag::PADDED,
            stream: 1,
        };
        assert_eq!(content(&d, &[2, b'o', b'k', b'!', 0, 0]).unwrap(), b"ok!");
        assert_eq!(content(&d, &[6, 1, 2, 3, 4, 5]), Err(FrameError::Padding));
        assert_eq!(content(&d, &[]), Err(FrameError::Padding));
        let h = Head {
            len: 8,
            kind: kind::HEADERS,
            flags: flag::PADDED | flag::PRIORITY,
            stream: 1,
        };
        assert_eq!(content(&h, &[1, 0, 0, 0, 0, 9, 0x88, 0]).unwrap(), [0x88]);
        assert!(content(&h, &[1, 0, 0]).is_err());
    }

    #[test]
    fn a_request_block_decodes_to_its_fields_and_splits_into_continuations() {
        let block = request_block(
            "DELETE",
            "https",
            "h:1",
            "/a?b=c",
            [("user-agent", &b"stampede"[..])].into_iter(),
        );
        let mut d = loona_hpack::Decoder::new();
        let fields: Vec<(Vec<u8>, Vec<u8>)> = d.decode(&block).unwrap();
        let want: Vec<(&[u8], &[u8])> = vec![
            (b":method", b"DELETE"),
            (b":scheme", b"https"),
            (b":path", b"/a?b=c"),
            (b":authority", b"h:1"),
            (b"user-agent", b"stampede"),
        ];
        let got: Vec<(&[u8], &[u8])> = fields.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        assert_eq!(got, want);
        // Not indexed: a second decoder's table stays empty, so the same bytes decode the same.
        assert_eq!(d.decode(&block).unwrap(), fields);

        let mut out = Vec::new();
        put_headers(&mut out, 3, &block, true, 10);
        let first = Head::parse(&out).unwrap().unwrap();
        assert_eq!(
            (first.kind, first.len, first.flags),
            (kind::HEADERS, 10, flag::END_STREAM)
        );
        let mut at = HEAD_LEN + first.len;
        let mut joined = out[HEAD_LEN..at].to_vec();
        loop {
            let h = Head::parse(&out[at..]).unwrap().unwrap();
            assert_eq!((h.kind, h.stream), (kind::CONTINUATION, 3));
            joined.extend_from_slice(&out[at + HEAD_LEN..at + HEAD_LEN + h.len]);
            at += HEAD_LEN + h.len;
            if h.flags & flag::END_HEADERS != 0 {
                break;
            }
        }
        assert_eq!(at, out.len());
        assert_eq!(joined, block);
    }

    proptest::proptest! {
        /// Any bytes: a header is read or refused, never read past, and a payload's content is
        /// within it.
        #[test]
        fn any_bytes_are_read_within_their_lengths(b in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            if let Ok(Some(h)) = Head::parse(&b) {
                proptest::prop_assert!(h.len <= MAX_FRAME);
                let payload = &b[HEAD_LEN..];
                let _ = h.check();
                if let Ok(c) = content(&h, payload) {
                    proptest::prop_assert!(c.len() <= payload.len());
                }
            }
        }
    }
}
