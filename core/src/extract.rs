//! Extraction and checks on a response: values carried into later steps of a session
//! (`extract`), and assertions that fail the request with their own error kind (`check`).
//!
//! Both are pure functions of the status, the headers and the (bounded) body, so the agent
//! only has to capture those for the steps that declare them; every other step keeps the
//! discard path. A JSON Pointer is looked up while the body is parsed (`pointer`): no tree of
//! the body is built.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod pointer;

/// Most bytes of a body examined by extraction and checks; the rest is read and discarded.
pub const MAX_CAPTURED_BODY: usize = 1 << 20;
/// Longest extracted value kept.
pub const MAX_VALUE: usize = 64 * 1024;

/// Where a value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extractor {
    /// An RFC 6901 JSON Pointer into the JSON body, e.g. `/data/token`. A string is taken
    /// as is, any other value as JSON text.
    Json(String),
    /// A response header (case-insensitive name; the first one).
    Header(String),
    /// A cookie set by the response (`Set-Cookie`).
    Cookie(String),
    /// A regular expression over the body, and the capture group to take.
    Regex(Pattern, Option<usize>),
    /// The text between the first `left` and the next `right` in the body.
    Between(String, String),
}

/// An extraction: `{ json: /pointer }`, `{ header: name }`, `{ cookie: name }`,
/// `{ regex: '...', group: N }` or `{ between: [left, right] }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ExtractRepr", into = "ExtractRepr")]
pub struct Extract {
    /// Where the value comes from.
    pub from: Extractor,
}

/// The file form of [`Extract`]: exactly one source.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "an extraction: { json: /pointer }, { header: NAME }, { cookie: NAME }, \
                 { regex: '...', group: N } or { between: [LEFT, RIGHT] }"
)]
struct ExtractRepr {
    /// An RFC 6901 JSON Pointer into the JSON body, e.g. `/data/token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    json: Option<String>,
    /// A response header (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    header: Option<String>,
    /// A cookie set by the response (`Set-Cookie`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cookie: Option<String>,
    /// A regular expression over the body (Rust regex syntax).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    regex: Option<Pattern>,
    /// The capture group of `regex` (default 1, or 0 when the pattern has no group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    group: Option<usize>,
    /// The text between the first `left` and the next `right` in the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    between: Option<[String; 2]>,
}

/// An extraction that cannot work; the caller names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtractError {
    /// `group` without `regex`.
    #[error("group only applies to regex")]
    GroupWithoutRegex,
    /// Not exactly one place to take the value from.
    #[error("give exactly one of: json, header, cookie, regex, between")]
    Form,
    /// A pattern the regex engine refuses (or that compiles too large); its reason.
    #[error("not a valid regular expression: {0}")]
    Regex(String),
    /// A `json` path that is not a JSON Pointer.
    #[error("`{0}` is not a JSON Pointer (it starts with /)")]
    Pointer(String),
    /// A capture group the pattern does not have.
    #[error("group {group}: the pattern has {groups} groups")]
    Group {
        /// The group asked for.
        group: usize,
        /// The groups the pattern has.
        groups: usize,
    },
    /// A header or cookie without its name.
    #[error("needs a name")]
    NoName,
    /// `between` with an empty side.
    #[error("between needs two non-empty strings")]
    EmptyBetween,
}

impl TryFrom<ExtractRepr> for Extract {
    type Error = ExtractError;
    fn try_from(r: ExtractRepr) -> Result<Self, ExtractError> {
        if r.group.is_some() && r.regex.is_none() {
            return Err(ExtractError::GroupWithoutRegex);
        }
        let from = match (r.json, r.header, r.cookie, r.regex, r.between) {
            (Some(p), None, None, None, None) => Extractor::Json(p),
            (None, Some(h), None, None, None) => Extractor::Header(h),
            (None, None, Some(c), None, None) => Extractor::Cookie(c),
            (None, None, None, Some(re), None) => Extractor::Regex(re, r.group),
            (None, None, None, None, Some([l, r])) => Extractor::Between(l, r),
            _ => return Err(ExtractError::Form),
        };
        Ok(Self { from })
    }
}

impl From<Extract> for ExtractRepr {
    fn from(e: Extract) -> Self {
        let mut r = ExtractRepr::default();
        match e.from {
            Extractor::Json(p) => r.json = Some(p),
            Extractor::Header(h) => r.header = Some(h),
            Extractor::Cookie(c) => r.cookie = Some(c),
            Extractor::Regex(p, g) => (r.regex, r.group) = (Some(p), g),
            Extractor::Between(a, b) => r.between = Some([a, b]),
        }
        r
    }
}

impl JsonSchema for Extract {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Extract".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        ExtractRepr::json_schema(g)
    }
}

/// A compiled regular expression that serializes as its text.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Pattern(regex::bytes::Regex);

impl PartialEq for Pattern {
    fn eq(&self, o: &Self) -> bool {
        self.0.as_str() == o.0.as_str()
    }
}
impl Eq for Pattern {}

impl TryFrom<String> for Pattern {
    type Error = ExtractError;
    fn try_from(s: String) -> Result<Self, ExtractError> {
        regex::bytes::RegexBuilder::new(&s)
            .size_limit(1 << 20)
            .build()
            .map(Pattern)
            .map_err(|e| ExtractError::Regex(e.to_string()))
    }
}

impl From<Pattern> for String {
    fn from(p: Pattern) -> String {
        p.0.as_str().to_string()
    }
}

impl JsonSchema for Pattern {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Pattern".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "description": "A regular expression (Rust regex syntax)." })
    }
}

/// Assertions on a response; each failure is its own error kind (`check.status`, ...).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// The status must be one of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Vec<u16>>,
    /// The body must contain this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_contains: Option<String>,
    /// JSON Pointer → expected value, e.g. `{ /status: ok }`. A string expectation also
    /// matches a number or boolean written the same way.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub json: BTreeMap<String, serde_json::Value>,
}

/// The parts of a response extraction and checks read.
#[derive(Debug, Clone, Copy)]
pub struct Response<'a> {
    /// The HTTP status (200 for a gRPC call, whose outcome is its `grpc-status`).
    pub status: u16,
    /// Header names in lowercase, in order.
    pub headers: &'a [(String, Vec<u8>)],
    /// The body as captured (at most [`MAX_CAPTURED_BODY`] bytes), decoded when it came compressed.
    pub body: &'a [u8],
    /// For a gRPC reply, whose body is a protobuf message: where each JSON Pointer is in it
    /// (compiled by the CLI). `None`: the body is JSON text.
    pub protobuf: Option<&'a crate::grpc::ReplyPaths>,
}

impl Response<'_> {
    /// The value a JSON Pointer names: looked up while the JSON body is parsed, or along
    /// the pointer's compiled path through a protobuf reply.
    fn json_at(&self, pointer: &str) -> Option<serde_json::Value> {
        match self.protobuf {
            Some(paths) => paths.get(pointer)?.lookup(self.body),
            None => pointer::lookup(self.body, pointer),
        }
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `name=value` pairs of the `Set-Cookie` headers.
pub fn set_cookies<'a>(
    headers: &'a [(String, Vec<u8>)],
) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
        .filter_map(|(_, v)| {
            let v = std::str::from_utf8(v).ok()?;
            let pair = v.split(';').next()?;
            let (name, value) = pair.split_once('=')?;
            Some((name.trim(), value.trim()))
        })
}

impl Extract {
    /// The value, or `None` when the response does not hold it.
    pub fn apply(&self, r: &Response<'_>) -> Option<String> {
        let v = match &self.from {
            Extractor::Json(pointer) => json_text(&r.json_at(pointer)?),
            Extractor::Header(name) => String::from_utf8_lossy(r.header(name)?).into_owned(),
            Extractor::Cookie(name) => set_cookies(r.headers)
                .find(|(n, _)| n == name)?
                .1
                .to_string(),
            Extractor::Regex(p, group) => {
                let caps = p.0.captures(r.body)?;
                let group = group.unwrap_or(usize::from(p.0.captures_len() > 1));
                String::from_utf8_lossy(caps.get(group)?.as_bytes()).into_owned()
            }
            Extractor::Between(left, right) => {
                let body = r.body;
                let start = find(body, left.as_bytes())? + left.len();
                let len = find(&body[start..], right.as_bytes())?;
                String::from_utf8_lossy(&body[start..start + len]).into_owned()
            }
        };
        (v.len() <= MAX_VALUE).then_some(v)
    }

    /// Whether the value comes from the body (header and cookie extractors read only the
    /// head): the body must be captured, and only such a value can come from a tcp or udp
    /// reply, which is a payload without a head.
    pub fn needs_body(&self) -> bool {
        !matches!(self.from, Extractor::Header(_) | Extractor::Cookie(_))
    }

    /// Checks what the types cannot; `Err(reason)`.
    pub fn check(&self) -> Result<(), ExtractError> {
        match &self.from {
            Extractor::Json(p) if !(p.is_empty() || p.starts_with('/')) => {
                Err(ExtractError::Pointer(p.clone()))
            }
            Extractor::Regex(p, group) => match group {
                Some(g) if *g >= p.0.captures_len() => Err(ExtractError::Group {
                    group: *g,
                    groups: p.0.captures_len() - 1,
                }),
                _ => Ok(()),
            },
            Extractor::Header(n) | Extractor::Cookie(n) if n.is_empty() => {
                Err(ExtractError::NoName)
            }
            Extractor::Between(l, r) if l.is_empty() || r.is_empty() => {
                Err(ExtractError::EmptyBetween)
            }
            _ => Ok(()),
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The first failed check of a response: `"status"`, `"body_contains"` or `"json"`.
pub type CheckFailure = &'static str;

impl Check {
    /// Whether the body must be captured.
    pub fn needs_body(&self) -> bool {
        self.body_contains.is_some() || !self.json.is_empty()
    }

    /// Checks what the types cannot; `Err((field, reason))`.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if let Some(s) = &self.status {
            if s.is_empty() || s.iter().any(|c| !(100..=599).contains(c)) {
                return Err((
                    "status".into(),
                    "must list status codes between 100 and 599".into(),
                ));
            }
        }
        if let Some(p) = self.json.keys().find(|p| !p.starts_with('/')) {
            return Err((
                "json".into(),
                format!("`{p}` is not a JSON Pointer (it starts with /)"),
            ));
        }
        Ok(())
    }

    /// The first failed check, or `None` when all pass.
    pub fn apply(&self, r: &Response<'_>) -> Option<CheckFailure> {
        if let Some(s) = &self.status {
            if !s.contains(&r.status) {
                return Some("status");
            }
        }
        if let Some(text) = &self.body_contains {
            if find(r.body, text.as_bytes()).is_none() {
                return Some("body_contains");
            }
        }
        if !self.json.is_empty() {
            for (pointer, want) in &self.json {
                let ok = match (r.json_at(pointer), want) {
                    (None, _) => false,
                    (Some(got), serde_json::Value::String(w)) => json_text(&got) == *w,
                    (Some(got), w) => got == *w,
                };
                if !ok {
                    return Some("json");
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
        serde_norway::from_str(yaml).unwrap()
    }

    fn resp<'a>(headers: &'a [(String, Vec<u8>)], body: &'a [u8]) -> Response<'a> {
        Response {
            status: 200,
            headers,
            body,
            protobuf: None,
        }
    }

    #[test]
    fn extractors_read_the_response() {
        let headers = vec![
            ("location".to_string(), b"/next".to_vec()),
            ("set-cookie".to_string(), b"sid=s-1; Path=/".to_vec()),
        ];
        let body = br#"{"data":{"token":"t-7","n":3},"html":"<b>x</b>"}"#;
        let r = resp(&headers, body);
        let get = |y: &str| {
            let e: Extract = parse(y);
            e.check().unwrap();
            e.apply(&r)
        };
        assert_eq!(get("{ json: /data/token }").as_deref(), Some("t-7"));
        assert_eq!(get("{ json: /data/n }").as_deref(), Some("3"));
        assert_eq!(get("{ json: /nope }"), None);
        assert_eq!(get("{ header: Location }").as_deref(), Some("/next"));
        assert_eq!(get("{ cookie: sid }").as_deref(), Some("s-1"));
        assert_eq!(
            get(r#"{ regex: '"token":"(t-\d+)"' }"#).as_deref(),
            Some("t-7")
        );
        assert_eq!(
            get(r#"{ regex: 't-\d+', group: 0 }"#).as_deref(),
            Some("t-7")
        );
        assert_eq!(get("{ between: ['<b>', '</b>'] }").as_deref(), Some("x"));
        let bad: Extract = parse("{ regex: 'a(b)', group: 2 }");
        assert!(bad.check().is_err());
        assert!(serde_norway::from_str::<Extract>("{ regex: '(' }").is_err());
        assert!(serde_norway::from_str::<Extract>("{ xpath: '/a' }").is_err());
    }

    #[test]
    fn checks_name_the_first_failure() {
        let body = br#"{"status":"ok","n":2}"#;
        let r = resp(&[], body);
        let c: Check = parse("{ status: [200], body_contains: ok, json: { /status: ok, /n: 2 } }");
        c.validate().unwrap();
        assert_eq!(c.apply(&r), None);
        let c: Check = parse("{ status: [201] }");
        assert_eq!(c.apply(&r), Some("status"));
        let c: Check = parse("{ body_contains: nope }");
        assert_eq!(c.apply(&r), Some("body_contains"));
        let c: Check = parse("{ json: { /n: '2' } }");
        assert_eq!(c.apply(&r), None);
        let c: Check = parse("{ json: { /status: bad } }");
        assert_eq!(c.apply(&r), Some("json"));
        let c: Check = parse("{ json: { status: ok } }");
        assert!(c.validate().is_err());
        let c: Check = parse("{ body_contains: '' }");
        assert_eq!(c.apply(&resp(&[], b"")), None);
    }
}
