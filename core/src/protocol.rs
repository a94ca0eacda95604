//! Raw-socket steps of a session (`tcp:` and `udp:`), their payloads, framings and
//! expected replies, and which transport a target URL selects.
//!
//! A payload is written as exactly one of:
//!
//! ```yaml
//! send: { text: "PING\n" }            # UTF-8 (YAML escapes apply)
//! send: { hex: "de ad be ef" }         # hex digits, whitespace ignored
//! send: { base64: "3q2+7w==" }         # standard alphabet, padding optional
//! send: { file: payloads/login.bin }   # read by the CLI, relative to the scenario file
//! ```
//!
//! The CLI reads `file:` payloads before it submits the scenario, so agents never need the
//! file: the submitted scenario carries the bytes (as `base64:`).
//!
//! The `text` of a `send` payload is a template (`${users.name}`, `${token}`, ...: see
//! [`crate::template`]), rendered per request; one with no reference is framed once per run.
//! Delimiters and expected replies are literal.

use std::path::Path;

use base64::Engine as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::HumanDuration;
use crate::template::Template;

/// Largest frame a TCP step may send or accept in reply (and largest `fixed` length).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;
/// Largest UDP payload.
pub const MAX_DATAGRAM: usize = 65_507;

/// Bytes to send or expect: `{ text: .. }`, `{ hex: .. }`, `{ base64: .. }` or `{ file: .. }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PayloadRepr", into = "PayloadRepr")]
pub enum Payload {
    /// UTF-8 text; in a `send` payload, a template.
    Text(Template),
    /// Hex digits (whitespace between them is ignored).
    Hex(String),
    /// Standard base64 (padding optional).
    Base64(String),
    /// A file, read by the CLI relative to the scenario file's folder before submission.
    File(String),
}

/// A payload, framing or expected reply that cannot be used, or a file that cannot be read
/// into one. The message is the reason; the caller names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// A payload map without exactly one of its keys.
    #[error("a payload needs exactly one of: text, hex, base64, file")]
    PayloadForm,
    /// A framing map that is neither `{ delimiter: .. }` nor `{ fixed: N }`.
    #[error("{FRAMING_FORMS}")]
    FramingForm,
    /// An `expect` map without exactly one of `exact` and `prefix`.
    #[error("expect needs exactly one of: exact, prefix")]
    ExpectForm,
    /// A `text:` payload that is not a valid template.
    #[error("text: {0}")]
    Text(String),
    /// A text with references where only fixed bytes make sense (a delimiter, an expected reply).
    #[error("`{0}` has ${{...}} references: only a send payload is a template")]
    NotStatic(String),
    /// A `file:` payload still unread where its bytes are needed.
    #[error("file `{0}` was not read: file payloads are read by the CLI before submission")]
    Unread(String),
    /// `file:` with an empty name.
    #[error("file: must name a file")]
    EmptyFile,
    /// Hex with an odd number of digits.
    #[error("not hex: an odd number of digits ({0})")]
    OddHex(usize),
    /// Hex with a character that is not a digit (shown escaped).
    #[error("not hex: unexpected character `{0}`")]
    NotHex(String),
    /// Text that is not base64; the decoder's reason.
    #[error("not base64: {0}")]
    NotBase64(String),
    /// A payload longer than its field allows.
    #[error("is {len} bytes, more than the limit of {max}")]
    TooLong {
        /// The payload's length.
        len: usize,
        /// The field's limit.
        max: usize,
    },
    /// A file that cannot be read; the system's reason.
    #[error("cannot read `{}`: {reason}", path.display())]
    Read {
        /// The file, joined to the scenario's folder.
        path: std::path::PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// A file longer than its field allows.
    #[error("`{}` is {len} bytes, more than the limit of {max}", path.display())]
    FileTooLong {
        /// The file, joined to the scenario's folder.
        path: std::path::PathBuf,
        /// Its length.
        len: usize,
        /// The field's limit.
        max: usize,
    },
}

/// The file form of a [`Payload`]: a map with exactly one of its keys.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a payload: { text: .. }, { hex: .. }, { base64: .. } or { file: .. }"
)]
struct PayloadRepr {
    /// UTF-8 text (YAML escapes such as `"\n"` apply). In a `send` payload, a template:
    /// `${users.name}`, `${token}`, ... rendered per request (`$${` is a literal `${`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    /// Hex digits; whitespace between them is ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hex: Option<String>,
    /// Standard base64; padding optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    base64: Option<String>,
    /// A file, relative to the scenario file, read by the CLI before submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    file: Option<String>,
}

impl TryFrom<PayloadRepr> for Payload {
    type Error = PayloadError;
    fn try_from(r: PayloadRepr) -> Result<Self, PayloadError> {
        match (r.text, r.hex, r.base64, r.file) {
            (Some(t), None, None, None) => Template::parse(&t)
                .map(Payload::Text)
                .map_err(|e| PayloadError::Text(e.to_string())),
            (None, Some(h), None, None) => Ok(Payload::Hex(h)),
            (None, None, Some(b), None) => Ok(Payload::Base64(b)),
            (None, None, None, Some(f)) => Ok(Payload::File(f)),
            _ => Err(PayloadError::PayloadForm),
        }
    }
}

impl From<Payload> for PayloadRepr {
    fn from(p: Payload) -> Self {
        let mut r = PayloadRepr::default();
        match p {
            Payload::Text(t) => r.text = Some(t.to_string()),
            Payload::Hex(h) => r.hex = Some(h),
            Payload::Base64(b) => r.base64 = Some(b),
            Payload::File(f) => r.file = Some(f),
        }
        r
    }
}

impl JsonSchema for Payload {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Payload".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        PayloadRepr::json_schema(g)
    }
}

impl Payload {
    /// Literal UTF-8 text.
    pub fn text(t: impl Into<String>) -> Self {
        Payload::Text(Template::literal(t))
    }

    /// The template of a `text` payload with references (rendered per request), if any.
    pub fn template(&self) -> Option<&Template> {
        match self {
            Payload::Text(t) if t.as_static().is_none() => Some(t),
            _ => None,
        }
    }

    /// The bytes. A `file` payload has no bytes until the CLI inlines it.
    pub fn bytes(&self) -> Result<Vec<u8>, PayloadError> {
        match self {
            Payload::Text(t) => t
                .as_static()
                .map(|s| s.as_bytes().to_vec())
                .ok_or_else(|| PayloadError::NotStatic(t.to_string())),
            Payload::Hex(h) => decode_hex(h),
            Payload::Base64(b) => decode_base64(b),
            Payload::File(p) => Err(PayloadError::Unread(p.clone())),
        }
    }
}

/// Decodes hex digits, ignoring ASCII whitespace.
pub fn decode_hex(text: &str) -> Result<Vec<u8>, PayloadError> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if !digits.len().is_multiple_of(2) {
        return Err(PayloadError::OddHex(digits.len()));
    }
    let nibble = |b: u8| -> Result<u8, PayloadError> {
        match b {
            b'0'..=b'9' => Ok(b - b'0'),
            b'a'..=b'f' => Ok(b - b'a' + 10),
            b'A'..=b'F' => Ok(b - b'A' + 10),
            _ => Err(PayloadError::NotHex(b.escape_ascii().to_string())),
        }
    };
    digits
        .chunks_exact(2)
        .map(|p| Ok((nibble(p[0])? << 4) | nibble(p[1])?))
        .collect()
}

/// Decodes standard base64; padding is optional, whitespace is ignored.
pub fn decode_base64(text: &str) -> Result<Vec<u8>, PayloadError> {
    let clean: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    engine
        .decode(clean.as_bytes())
        .map_err(|e| PayloadError::NotBase64(e.to_string()))
}

/// Encodes bytes as standard base64 (how the CLI inlines files).
pub fn encode_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// How a TCP (or Unix-socket) step frames its request and finds the end of the reply:
/// `length_prefixed`, `{ delimiter: <payload> }` or `{ fixed: N }`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(into = "FramingRepr")]
pub enum Framing {
    /// A 4-byte big-endian length, then the payload (both ways).
    #[default]
    LengthPrefixed,
    /// The payload, then these bytes (both ways); the reply ends at the first delimiter.
    Delimiter(Payload),
    /// The request is sent as is; the reply is exactly N bytes.
    Fixed(u32),
}

/// The file form of [`Framing`], for its JSON Schema and its serialised form; it is read by
/// hand (below), so that a mistake names the accepted forms.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
enum FramingRepr {
    /// `length_prefixed`: a 4-byte big-endian length, then the payload (both ways).
    Word(FramingWord),
    /// `{ delimiter: <payload> }` (the payload, then the delimiter, both ways) or
    /// `{ fixed: N }` (the request as is; the reply is exactly N bytes).
    Map(FramingMap),
}

#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum FramingWord {
    LengthPrefixed,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FramingMap {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    delimiter: Option<Payload>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fixed: Option<u32>,
}

impl TryFrom<FramingRepr> for Framing {
    type Error = PayloadError;
    fn try_from(r: FramingRepr) -> Result<Self, PayloadError> {
        match r {
            FramingRepr::Word(FramingWord::LengthPrefixed) => Ok(Framing::LengthPrefixed),
            FramingRepr::Map(FramingMap {
                delimiter: Some(d),
                fixed: None,
            }) => Ok(Framing::Delimiter(d)),
            FramingRepr::Map(FramingMap {
                delimiter: None,
                fixed: Some(n),
            }) => Ok(Framing::Fixed(n)),
            FramingRepr::Map(_) => Err(PayloadError::FramingForm),
        }
    }
}

/// The forms a framing takes, named in every error about one.
const FRAMING_FORMS: &str = "framing is length_prefixed, { delimiter: .. } or { fixed: N }";

impl<'de> Deserialize<'de> for Framing {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Framing;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(FRAMING_FORMS)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Framing, E> {
                match v.trim() {
                    "length_prefixed" => Ok(Framing::LengthPrefixed),
                    _ => Err(E::custom(format!("`{v}`: {FRAMING_FORMS}"))),
                }
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<Framing, A::Error> {
                let map = FramingMap::deserialize(serde::de::value::MapAccessDeserializer::new(m))?;
                Framing::try_from(FramingRepr::Map(map)).map_err(serde::de::Error::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl From<Framing> for FramingRepr {
    fn from(f: Framing) -> Self {
        match f {
            Framing::LengthPrefixed => FramingRepr::Word(FramingWord::LengthPrefixed),
            Framing::Delimiter(d) => FramingRepr::Map(FramingMap {
                delimiter: Some(d),
                fixed: None,
            }),
            Framing::Fixed(n) => FramingRepr::Map(FramingMap {
                delimiter: None,
                fixed: Some(n),
            }),
        }
    }
}

impl JsonSchema for Framing {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Framing".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        FramingRepr::json_schema(g)
    }
}

/// A check of the reply's payload (framing removed): `{ exact: <payload> }` or
/// `{ prefix: <payload> }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ExpectRepr", into = "ExpectRepr")]
pub enum Expect {
    /// The reply must be exactly these bytes.
    Exact(Payload),
    /// The reply must start with these bytes.
    Prefix(Payload),
}

/// The file form of [`Expect`]: exactly one of its keys.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "an expected reply: { exact: <payload> } or { prefix: <payload> }"
)]
struct ExpectRepr {
    /// The reply must be exactly these bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    exact: Option<Payload>,
    /// The reply must start with these bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prefix: Option<Payload>,
}

impl TryFrom<ExpectRepr> for Expect {
    type Error = PayloadError;
    fn try_from(r: ExpectRepr) -> Result<Self, PayloadError> {
        match (r.exact, r.prefix) {
            (Some(p), None) => Ok(Expect::Exact(p)),
            (None, Some(p)) => Ok(Expect::Prefix(p)),
            _ => Err(PayloadError::ExpectForm),
        }
    }
}

impl From<Expect> for ExpectRepr {
    fn from(e: Expect) -> Self {
        match e {
            Expect::Exact(p) => ExpectRepr {
                exact: Some(p),
                prefix: None,
            },
            Expect::Prefix(p) => ExpectRepr {
                exact: None,
                prefix: Some(p),
            },
        }
    }
}

impl JsonSchema for Expect {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Expect".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        ExpectRepr::json_schema(g)
    }
}

impl Expect {
    /// The bytes the reply must equal, or start with.
    pub fn payload(&self) -> &Payload {
        match self {
            Expect::Exact(p) | Expect::Prefix(p) => p,
        }
    }
    fn payload_mut(&mut self) -> &mut Payload {
        match self {
            Expect::Exact(p) | Expect::Prefix(p) => p,
        }
    }
}

/// A request/response exchange over the session's TCP (or Unix-socket) connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TcpRequest {
    /// The request payload (framing is added).
    pub send: Payload,
    /// Default: `length_prefixed`.
    #[serde(default)]
    pub framing: Framing,
    /// Optional check of the reply; a mismatch counts as a `protocol` error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Expect>,
}

/// One datagram and its reply, over the session's connected UDP socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UdpRequest {
    /// The datagram's payload.
    pub send: Payload,
    /// How long to wait for the reply (default: the scenario's `request_timeout`); a missing
    /// reply counts as a `timeout` error, and a late one is never taken for a later answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
    /// Optional check of the reply; a mismatch counts as a `protocol` error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Expect>,
}

/// The transport a target URL selects (parsed in [`crate::target::Target`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `http://`: HTTP/1.1 over TCP.
    Http,
    /// `https://`: HTTP over TLS.
    Https,
    /// `tcp://host:port`: framed request/response.
    Tcp,
    /// `udp://host:port`: datagram request/response.
    Udp,
    /// `unix:///path`: framed request/response over a Unix stream socket (local only).
    Unix,
    /// `grpc://host:port`: gRPC over HTTP/2 with prior knowledge (h2c).
    Grpc,
    /// `grpcs://host:port`: gRPC over TLS, h2 by ALPN.
    Grpcs,
    /// `ws://host:port/prefix`: WebSocket, upgraded from HTTP/1.1.
    Ws,
    /// `wss://host:port/prefix`: WebSocket over TLS.
    Wss,
}

impl Transport {
    /// The step kind (`http`, `tcp` or `udp`) this transport runs.
    pub fn step_kind(self) -> &'static str {
        match self {
            Transport::Http | Transport::Https => "http",
            Transport::Tcp | Transport::Unix => "tcp",
            Transport::Udp => "udp",
            Transport::Grpc | Transport::Grpcs => "grpc",
            Transport::Ws | Transport::Wss => "ws",
        }
    }

    /// Whether the transport runs over TLS (the `tls:` options apply).
    pub fn is_tls(self) -> bool {
        matches!(self, Transport::Https | Transport::Grpcs | Transport::Wss)
    }
}

/// Checks a payload at `path`: it decodes, and is not longer than `max`.
pub(crate) fn check_payload(p: &Payload, max: usize) -> Result<usize, PayloadError> {
    if let Payload::File(f) = p {
        if f.trim().is_empty() {
            return Err(PayloadError::EmptyFile);
        }
        // Read by the CLI; its length is checked then.
        return Ok(0);
    }
    let n = p.bytes()?.len();
    if n > max {
        return Err(PayloadError::TooLong { len: n, max });
    }
    Ok(n)
}

/// Checks a `send` payload: a template's length is known only once rendered (a rendered
/// payload over `max` fails its request with a `template` error), its references are checked
/// with the scenario's.
fn check_send(p: &Payload, max: usize) -> Result<usize, PayloadError> {
    match p.template() {
        Some(_) => Ok(0),
        None => check_payload(p, max),
    }
}

/// Whether a `send` payload always holds `delim`: its bytes when static, a literal part of
/// its template otherwise (a rendered value holding it fails its request at run time).
fn send_holds(send: &Payload, delim: &[u8]) -> bool {
    let holds = |hay: &[u8]| !delim.is_empty() && hay.windows(delim.len()).any(|w| w == delim);
    match send {
        Payload::File(_) => false,
        Payload::Text(t) if t.as_static().is_none() => t.segments().iter().any(|s| match s {
            crate::template::Segment::Literal(l) => holds(l.as_bytes()),
            crate::template::Segment::Ref(_) => false,
        }),
        p => p.bytes().is_ok_and(|b| holds(&b)),
    }
}

/// Validates a TCP step; the error is `(field suffix, reason)`.
pub(crate) fn check_tcp(t: &TcpRequest) -> Result<(), (&'static str, String)> {
    check_send(&t.send, MAX_FRAME).map_err(|e| ("send", e.to_string()))?;
    match &t.framing {
        Framing::LengthPrefixed => {}
        Framing::Delimiter(d) => {
            let n = check_payload(d, 64).map_err(|e| ("framing.delimiter", e.to_string()))?;
            if n == 0 && !matches!(d, Payload::File(_)) {
                return Err(("framing.delimiter", "must not be empty".into()));
            }
            if matches!(d, Payload::File(_)) {
                return Err(("framing.delimiter", "give the delimiter inline".into()));
            }
            let d = d
                .bytes()
                .map_err(|e| ("framing.delimiter", e.to_string()))?;
            if send_holds(&t.send, &d) {
                return Err((
                    "send",
                    "holds the framing delimiter: the peer would read two requests and every later reply would answer the wrong one".into(),
                ));
            }
        }
        Framing::Fixed(n) => {
            if *n == 0 {
                return Err(("framing.fixed", "must be >= 1".into()));
            }
            if *n as usize > MAX_FRAME {
                return Err(("framing.fixed", format!("must be <= {MAX_FRAME}")));
            }
        }
    }
    if let Some(e) = &t.expect {
        let n = check_payload(e.payload(), MAX_FRAME).map_err(|e| ("expect", e.to_string()))?;
        if let (Framing::Fixed(f), Expect::Exact(_)) = (&t.framing, e) {
            if !matches!(e.payload(), Payload::File(_)) && n != *f as usize {
                return Err((
                    "expect",
                    format!("is {n} bytes but the framing fixes replies at {f}"),
                ));
            }
        }
    }
    Ok(())
}

/// Validates a UDP step; the error is `(field suffix, reason)`.
pub(crate) fn check_udp(u: &UdpRequest) -> Result<(), (&'static str, String)> {
    check_send(&u.send, MAX_DATAGRAM).map_err(|e| ("send", e.to_string()))?;
    if u.timeout.is_some_and(|t| t.0.is_zero()) {
        return Err(("timeout", "must be > 0".into()));
    }
    if let Some(e) = &u.expect {
        check_payload(e.payload(), MAX_DATAGRAM).map_err(|e| ("expect", e.to_string()))?;
    }
    Ok(())
}

/// Replaces a `file:` payload by its bytes (as `base64:`), read through `read` relative to
/// `base`. The error is the reason.
pub(crate) fn inline_payload(
    p: &mut Payload,
    base: &Path,
    max: usize,
    read: &mut dyn FnMut(&Path) -> std::io::Result<Vec<u8>>,
) -> Result<bool, PayloadError> {
    let Payload::File(f) = p else {
        return Ok(false);
    };
    let bytes = read_file(f, base, max, read)?;
    *p = Payload::Base64(encode_base64(&bytes));
    Ok(true)
}

pub(crate) fn read_file(
    f: &str,
    base: &Path,
    max: usize,
    read: &mut dyn FnMut(&Path) -> std::io::Result<Vec<u8>>,
) -> Result<Vec<u8>, PayloadError> {
    let path = base.join(f);
    let bytes = read(&path).map_err(|e| PayloadError::Read {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    if bytes.len() > max {
        return Err(PayloadError::FileTooLong {
            path,
            len: bytes.len(),
            max,
        });
    }
    Ok(bytes)
}

pub(crate) fn inline_expect(
    e: &mut Option<Expect>,
    base: &Path,
    max: usize,
    read: &mut dyn FnMut(&Path) -> std::io::Result<Vec<u8>>,
) -> Result<bool, PayloadError> {
    match e {
        Some(e) => inline_payload(e.payload_mut(), base, max, read),
        None => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_decode() {
        assert_eq!(Payload::text("hé").bytes().unwrap(), "hé".as_bytes());
        assert_eq!(
            Payload::Hex("de AD be ef\n00".into()).bytes().unwrap(),
            [0xde, 0xad, 0xbe, 0xef, 0]
        );
        assert_eq!(
            Payload::Base64("3q2+7w==".into()).bytes().unwrap(),
            [0xde, 0xad, 0xbe, 0xef]
        );
        assert_eq!(
            Payload::Base64("3q2+7w".into()).bytes().unwrap(),
            [0xde, 0xad, 0xbe, 0xef]
        );
        assert_eq!(
            Payload::Hex(String::new()).bytes().unwrap(),
            Vec::<u8>::new()
        );
    }

    #[test]
    fn bad_payloads_are_errors_not_panics() {
        for bad in ["abc", "zz", "0x12", "é1", "1 2 3"] {
            assert!(decode_hex(bad).is_err(), "{bad}");
        }
        for bad in ["!!!!", "a", "3q2+7w===", "3q2+\u{e9}w=="] {
            assert!(decode_base64(bad).is_err(), "{bad}");
        }
        assert!(Payload::File("x.bin".into()).bytes().is_err());
    }

    #[test]
    fn transports_parse() {
        for (url, t) in [
            ("http://h:1", Transport::Http),
            ("https://h", Transport::Https),
            ("tcp://127.0.0.1:7000", Transport::Tcp),
            ("udp://[::1]:53", Transport::Udp),
            ("unix:///tmp/x.sock", Transport::Unix),
            ("grpc://127.0.0.1:50051", Transport::Grpc),
            ("grpcs://h", Transport::Grpcs),
        ] {
            assert_eq!(
                crate::target::Target::parse(url).unwrap().transport(),
                t,
                "{url}"
            );
        }
        for bad in [
            "ftp://h:1",
            "tcp://h",
            "tcp://:1",
            "udp://h:99999",
            "unix://relative",
            "http://",
            "127.0.0.1:80",
            "tcp://h:1/path",
            "grpc://h",
            "grpc://h:1/pkg",
        ] {
            assert!(crate::target::Target::parse(bad).is_err(), "{bad}");
        }
    }
}
