//! The HTTP request of a step: method, path, headers and body, the last three templates
//! (`crate::template`) parsed when the scenario is read.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::template::Template;

/// An HTTP request, relative to the scenario's `target` (its path prefix included).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpRequest {
    /// The method; `get` is normalized to `GET`.
    #[serde(default = "default_method", deserialize_with = "upper")]
    pub method: String,
    /// The path and query, appended to the target's path prefix; a template.
    #[serde(default = "default_path")]
    pub path: Template,
    /// Header values are templates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, Template>,
    /// The body; a template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Template>,
    /// The body from a UTF-8 file, read by the CLI (relative to the scenario file) before
    /// submission; the submitted scenario carries it as `body`. Excludes `body`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_file: Option<String>,
    /// A `multipart/form-data` body, part by part (`crate::multipart`); excludes `body` and
    /// `body_file`. The CLI reads the parts' files and writes the body and its content type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub multipart: Vec<crate::multipart::FormPart>,
    /// Status codes that count as success; default: any 2xx or 3xx.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_status: Option<Vec<u16>>,
    /// Read the reply as a stream and time it as one (HTTP/1.1 targets): `sse` (server-sent
    /// events) or `chunks` (body bytes as they arrive). The step then reports the time to its
    /// first event (or byte) and the gaps between events beside the whole reply's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamMode>,
}

/// How a streamed reply is cut into the arrivals it is timed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StreamMode {
    /// Server-sent events (`text/event-stream`): an event arrives when the blank line that
    /// ends it does.
    Sse,
    /// Any body: each read that brings body bytes is an arrival.
    Chunks,
}

fn default_method() -> String {
    "GET".to_string()
}
fn default_path() -> Template {
    Template::literal("/")
}

/// Methods are case-sensitive tokens on the wire, and every server expects them upper case;
/// `method: get` in a file means `GET`.
fn upper<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    String::deserialize(d).map(|m| m.to_ascii_uppercase())
}

impl Default for HttpRequest {
    fn default() -> Self {
        Self {
            method: default_method(),
            path: default_path(),
            headers: BTreeMap::new(),
            body: None,
            body_file: None,
            multipart: Vec::new(),
            expect_status: None,
            stream: None,
        }
    }
}

impl HttpRequest {
    /// Whether `status` is one the request expects: one of `expect_status`, or any 2xx or 3xx
    /// without it.
    pub fn status_ok(&self, status: u16) -> bool {
        status_expected(self.expect_status.as_deref(), status)
    }

    /// True when no field has a reference: the request can be rendered once per run.
    pub fn is_static(&self) -> bool {
        self.templates().all(|(_, t)| t.as_static().is_some())
    }

    /// Every template with its field name relative to the request (`path`,
    /// `headers.NAME`, `body`).
    pub fn templates(&self) -> impl Iterator<Item = (String, &Template)> {
        std::iter::once(("path".to_string(), &self.path))
            .chain(
                self.headers
                    .iter()
                    .map(|(k, v)| (format!("headers.{k}"), v)),
            )
            .chain(self.body.iter().map(|b| ("body".to_string(), b)))
            .chain(self.multipart.iter().enumerate().flat_map(|(i, p)| {
                let value = p
                    .value
                    .iter()
                    .map(move |t| (format!("multipart[{i}].value"), t));
                let name = p
                    .filename
                    .iter()
                    .map(move |t| (format!("multipart[{i}].filename"), t));
                value.chain(name)
            }))
    }

    /// Mutable access to every template, for the CLI's `${env:...}` resolution.
    pub fn templates_mut(&mut self) -> impl Iterator<Item = (String, &mut Template)> {
        std::iter::once(("path".to_string(), &mut self.path))
            .chain(
                self.headers
                    .iter_mut()
                    .map(|(k, v)| (format!("headers.{k}"), v)),
            )
            .chain(self.body.iter_mut().map(|b| ("body".to_string(), b)))
            .chain(self.multipart.iter_mut().enumerate().flat_map(|(i, p)| {
                let value = p
                    .value
                    .iter_mut()
                    .map(move |t| (format!("multipart[{i}].value"), t));
                let name = p
                    .filename
                    .iter_mut()
                    .map(move |t| (format!("multipart[{i}].filename"), t));
                value.chain(name)
            }))
    }

    /// Checks what the types cannot; `Err((field, reason))`, the field relative to the request.
    pub fn check(&self) -> Result<(), (String, String)> {
        if self.body.is_some() && self.body_file.is_some() {
            return Err((
                "body_file".into(),
                "give either body or body_file, not both".into(),
            ));
        }
        if !self.multipart.is_empty() {
            if self.body.is_some() || self.body_file.is_some() {
                return Err((
                    "multipart".into(),
                    "give one of body, body_file and multipart".into(),
                ));
            }
            if let Some(k) = self
                .headers
                .keys()
                .find(|k| k.eq_ignore_ascii_case("content-type"))
            {
                return Err((
                    format!("headers.{k}"),
                    "multipart sets the content type (with its boundary)".into(),
                ));
            }
            crate::multipart::check(&self.multipart)
                .map_err(|(f, why)| (format!("multipart{f}"), why))?;
        }
        let method_ok = !self.method.is_empty()
            && self.method.len() <= 32
            && self
                .method
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !method_ok {
            return Err((
                "method".into(),
                format!("`{}` is not an HTTP method", self.method),
            ));
        }
        let path_ok = match self.path.segments().first() {
            Some(crate::template::Segment::Literal(l)) => l.starts_with('/'),
            _ => false,
        };
        if !path_ok || self.path.to_string().contains(char::is_whitespace) {
            return Err((
                "path".into(),
                "must start with / and contain no spaces".into(),
            ));
        }
        for name in self.headers.keys() {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                return Err((
                    "headers".into(),
                    format!("`{name}` is not a valid header name"),
                ));
            }
        }
        for (name, value) in &self.headers {
            // A CR or LF would end the header early and inject others (or a second request).
            if value.to_string().contains(['\r', '\n', '\0']) {
                return Err((
                    format!("headers.{name}"),
                    "must not contain a line break (CR or LF) or NUL".into(),
                ));
            }
        }
        if let Some(codes) = &self.expect_status {
            if codes.is_empty() || codes.iter().any(|c| !(100..=599).contains(c)) {
                return Err((
                    "expect_status".into(),
                    "must list status codes between 100 and 599".into(),
                ));
            }
        }
        Ok(())
    }
}

/// Whether `status` answers a request expecting `expect` (no list: any 2xx or 3xx).
pub fn status_expected(expect: Option<&[u16]>, status: u16) -> bool {
    match expect {
        Some(list) => list.contains(&status),
        None => (200..400).contains(&status),
    }
}

/// The error kind of a response whose status `expect` does not allow (`status_404`), or
/// `None` when it is expected: the one place every driver turns a status into a verdict.
pub fn status_error(expect: Option<&[u16]>, status: u16) -> Option<&'static str> {
    (!status_expected(expect, status)).then(|| crate::stats::error_kind::status(status))
}
