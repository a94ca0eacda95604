//! A dynamic HTTP step: its request rendered per session (templates, rows, extracted values,
//! cookies) into the session's buffers, sent over HTTP/1.1 or h2, and its response captured
//! for the judge when it extracts or checks.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use stampede_core::extract::{Check, Extract, Response as Seen, MAX_CAPTURED_BODY};
use stampede_core::http::StreamMode;
use stampede_core::scenario::{status_error, HttpRequest, Scenario};
use stampede_core::stats::error_kind;

use super::{compile, request_sources, CompileError, Compiled, Context, Outcome, SessionVars};
use crate::http1::stream::Streamed;
use crate::http1::{Conn, Excerpt};
use crate::net::Failure;

use super::judge::Judge;

/// A dynamic HTTP step, compiled once per run.
#[derive(Debug)]
pub struct DynamicHttp {
    method: String,
    head: bool,
    /// Content-Length is sent even for an empty body.
    body_method: bool,
    path: Compiled,
    headers: Vec<(String, Compiled)>,
    has_ua: bool,
    body: Option<Compiled>,
    /// The `Host` header (HTTP/1.1) or `:authority` (h2).
    authority: String,
    /// `http` or `https`, for h2's `:scheme`.
    scheme: &'static str,
    expect: Option<Vec<u16>>,
    judge: Judge,
    capture_body: bool,
    cookies: bool,
    /// The host its cookies are kept and sent under (the authority's, without the port).
    jar_host: Arc<str>,
    /// The `per: request` sources the request reads: each binds its next row per request.
    pub(super) per_request: Vec<usize>,
    /// About how long the rendered HTTP/1.1 request is: a session's buffer is sized once.
    size_hint: usize,
    /// Read the reply as a stream and time its events.
    stream: Option<StreamMode>,
}

/// Why an http step with templates cannot be compiled; the message names the field relative
/// to the step.
#[derive(Debug, thiserror::Error)]
pub enum HttpCompileError {
    /// The path's template.
    #[error("http.path: {0}")]
    Path(CompileError),
    /// A header value's template.
    #[error("http.headers.{name}: {error}")]
    Header {
        /// The header's name.
        name: String,
        /// Why its value does not compile.
        error: CompileError,
    },
    /// The body's template.
    #[error("http.body: {0}")]
    Body(CompileError),
}

impl DynamicHttp {
    /// Compiles `req` of a step with `extract` and `check`; the error names the field
    /// relative to the step.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        req: &HttpRequest,
        extract: &BTreeMap<String, Extract>,
        check: Option<&Check>,
        scenario: &Scenario,
        slots: &BTreeMap<String, usize>,
        authority: &str,
        prefix: &str,
        https: bool,
    ) -> Result<Self, HttpCompileError> {
        let mut path = req.path.clone();
        path.prepend(prefix);
        let path = compile(&path, scenario, slots).map_err(HttpCompileError::Path)?;
        let mut headers = Vec::new();
        let mut has_ua = false;
        for (k, v) in &req.headers {
            if k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("host") {
                continue;
            }
            has_ua |= k.eq_ignore_ascii_case("user-agent");
            let c = compile(v, scenario, slots).map_err(|error| HttpCompileError::Header {
                name: k.clone(),
                error,
            })?;
            headers.push((k.clone(), c));
        }
        let body = req
            .body
            .as_ref()
            .map(|b| compile(b, scenario, slots))
            .transpose()
            .map_err(HttpCompileError::Body)?;
        let judge = Judge::new(extract, check, slots);
        let per_request = request_sources(scenario, req.templates().map(|(_, t)| t));
        let size_hint = 64
            + req.method.len()
            + authority.len()
            + path.size_hint()
            + headers
                .iter()
                .map(|(k, v): &(String, Compiled)| k.len() + 4 + v.size_hint())
                .sum::<usize>()
            + body.as_ref().map_or(0, Compiled::size_hint);
        // `run --debug` shows the start of every answer, not only of a failed one.
        let capture_body = judge.needs_body() || scenario.debug > 0;
        Ok(Self {
            method: req.method.clone(),
            head: req.method == "HEAD",
            body_method: matches!(req.method.as_str(), "POST" | "PUT" | "PATCH"),
            path,
            headers,
            has_ua,
            body,
            authority: authority.to_string(),
            scheme: if https { "https" } else { "http" },
            expect: req.expect_status.clone(),
            judge,
            capture_body,
            cookies: scenario.cookies,
            jar_host: super::jar::host_of(authority),
            per_request,
            size_hint,
            stream: req.stream,
        })
    }

    /// The request's method, for a failure sample's request line.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// Renders the body into `vars.body`, then the whole HTTP/1.1 request into `vars.out`.
    /// A rendered value that would break the request (a line break in a header, a space in
    /// the path) is a `template` error.
    pub(super) fn render_http1(
        &self,
        ctx: &Context,
        vars: &mut SessionVars,
    ) -> Result<(), Failure> {
        let mut out = std::mem::take(&mut vars.out);
        let mut body = std::mem::take(&mut vars.body);
        out.clear();
        body.clear();
        // Sized once per session, not grown request by request.
        out.reserve(self.size_hint);
        let r = (|| {
            if let Some(b) = &self.body {
                b.render(ctx, vars, &mut body);
            }
            out.extend_from_slice(self.method.as_bytes());
            out.push(b' ');
            let start = out.len();
            self.path.render(ctx, vars, &mut out);
            if out[start..].iter().any(|&b| b <= b' ' || b == 0x7f) {
                return Err(Failure(error_kind::TEMPLATE));
            }
            out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
            out.extend_from_slice(self.authority.as_bytes());
            out.extend_from_slice(b"\r\n");
            for (k, v) in &self.headers {
                out.extend_from_slice(k.as_bytes());
                out.extend_from_slice(b": ");
                let start = out.len();
                v.render(ctx, vars, &mut out);
                if out[start..].iter().any(|&b| matches!(b, b'\r' | b'\n' | 0)) {
                    return Err(Failure(error_kind::TEMPLATE));
                }
                out.extend_from_slice(b"\r\n");
            }
            if !self.has_ua {
                out.extend_from_slice(b"User-Agent: stampede\r\n");
            }
            if self.cookies && vars.cookies.has(&self.jar_host) {
                out.extend_from_slice(b"Cookie: ");
                for (i, (k, v)) in vars.cookies.for_host(&self.jar_host).enumerate() {
                    if i > 0 {
                        out.extend_from_slice(b"; ");
                    }
                    out.extend_from_slice(k.as_bytes());
                    out.push(b'=');
                    out.extend_from_slice(v.as_bytes());
                }
                out.extend_from_slice(b"\r\n");
            }
            if !body.is_empty() || self.body_method {
                out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(&body);
            Ok(())
        })();
        vars.out = out;
        vars.body = body;
        r
    }

    /// Runs extraction, checks and the cookie jar on a captured response; the error kind
    /// of the first failure.
    pub(super) fn judge(&self, status: u16, vars: &mut SessionVars) -> Option<&str> {
        // A compressed body is decoded for the checks and extraction that read it.
        if self.capture_body {
            let cap = crate::decode::MAX_DECODED_BODY;
            let captured = super::capture(&mut vars.capture);
            let wire = captured.body.len() as u64;
            match crate::decode::decode_capture(captured, cap) {
                Ok(Some(decoded)) => {
                    vars.decoded.0 += wire;
                    vars.decoded.1 += decoded;
                }
                Ok(None) => {}
                Err(kind) => return Some(kind),
            }
        }
        let captured = super::capture(&mut vars.capture);
        let seen = Seen {
            status,
            headers: &captured.headers,
            body: &captured.body,
            protobuf: None,
        };
        if self.cookies {
            for (name, value) in stampede_core::extract::set_cookies(seen.headers) {
                vars.cookies.set(&self.jar_host, name, value);
            }
        }
        if let Some(kind) = self.judge.check(&seen) {
            return Some(kind);
        }
        if self.judge.check.as_ref().is_none_or(|c| c.status.is_none()) {
            if let Some(kind) = status_error(self.expect.as_deref(), status) {
                return Some(kind);
            }
        }
        self.judge.extract(&seen, &mut vars.values)
    }

    /// The response's error kind, if any: checks and extraction on a capturing step, the
    /// expected statuses otherwise. The same for HTTP/1.1 and h2.
    fn verdict<'s>(&'s self, status: u16, vars: &mut SessionVars) -> Option<&'s str> {
        if self.wants_capture() {
            self.judge(status, vars)
        } else {
            status_error(self.expect.as_deref(), status)
        }
    }

    /// How much of a captured body to keep: what the checks and extraction read, or the
    /// start a failure sample shows (one byte more marks a cut).
    fn capture_limit(&self) -> usize {
        if self.capture_body {
            MAX_CAPTURED_BODY
        } else {
            stampede_core::samples::MAX_BODY + 1
        }
    }

    fn wants_capture(&self) -> bool {
        self.capture_body || !self.judge.is_empty() || self.cookies
    }

    /// One request over HTTP/1.1.
    pub async fn http1<'s>(
        &'s self,
        conn: &mut Conn,
        ctx: &Context,
        vars: &mut SessionVars,
    ) -> Result<Outcome<'s>, Failure> {
        ctx.bind_request(&self.per_request, vars);
        self.render_http1(ctx, vars)?;
        let mut arrivals = None;
        let resp = if let Some(mode) = self.stream {
            // Boxed: only streamed steps pay for the reader's future.
            let captured = super::capture(&mut vars.capture);
            captured.clear(self.capture_limit());
            let mut sink = Streamed::new(captured, mode);
            let resp = Box::pin(conn.exchange(&vars.out, self.head, &mut sink)).await?;
            arrivals = Some(Box::new(sink.arrivals));
            resp
        } else if self.wants_capture() {
            let captured = super::capture(&mut vars.capture);
            captured.clear(self.capture_limit());
            conn.exchange(&vars.out, self.head, captured).await?
        } else {
            let mut excerpt = Excerpt::new(true, &self.expect);
            let resp = conn.exchange(&vars.out, self.head, &mut excerpt).await?;
            vars.keep_body(excerpt.kept());
            resp
        };
        let error = self.verdict(resp.status, vars);
        Ok(Outcome {
            sent: vars.out.len() as u64,
            received: resp.bytes_received,
            keep_alive: resp.keep_alive,
            error,
            status: resp.status,
            arrivals,
        })
    }

    /// One request over HTTP/2.
    pub async fn h2<'s>(
        &'s self,
        conn: &mut crate::h2::H2Conn,
        ctx: &Context,
        vars: &mut SessionVars,
    ) -> Result<Outcome<'s>, Failure> {
        ctx.bind_request(&self.per_request, vars);
        let bad = || Failure(error_kind::TEMPLATE);
        let mut path = std::mem::take(&mut vars.out);
        path.clear();
        self.path.render(ctx, vars, &mut path);
        let uri = http::Uri::builder()
            .scheme(self.scheme)
            .authority(self.authority.as_str())
            .path_and_query(path.as_slice())
            .build()
            .map_err(|_| bad());
        let mut sent = (self.method.len() + path.len() + self.authority.len()) as u64;
        vars.out = path;
        let mut req = http::Request::new(());
        *req.method_mut() = http::Method::from_bytes(self.method.as_bytes()).map_err(|_| bad())?;
        *req.uri_mut() = uri?;
        let mut value = Vec::new();
        for (k, v) in &self.headers {
            let lower = k.to_ascii_lowercase();
            if matches!(
                lower.as_str(),
                "connection" | "keep-alive" | "transfer-encoding" | "upgrade"
            ) {
                continue;
            }
            value.clear();
            v.render(ctx, vars, &mut value);
            sent += (k.len() + value.len()) as u64;
            let name = http::HeaderName::from_bytes(lower.as_bytes()).map_err(|_| bad())?;
            let value = http::HeaderValue::from_bytes(&value).map_err(|_| bad())?;
            req.headers_mut().append(name, value);
        }
        if !self.has_ua {
            req.headers_mut().insert(
                http::header::USER_AGENT,
                http::HeaderValue::from_static("stampede"),
            );
        }
        if self.cookies && vars.cookies.has(&self.jar_host) {
            let jar = vars
                .cookies
                .for_host(&self.jar_host)
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("; ");
            let value = http::HeaderValue::from_str(&jar).map_err(|_| bad())?;
            req.headers_mut().insert(http::header::COOKIE, value);
        }
        let mut body = Vec::new();
        if let Some(b) = &self.body {
            b.render(ctx, vars, &mut body);
        }
        sent += body.len() as u64;
        let resp = if self.wants_capture() {
            let captured = super::capture(&mut vars.capture);
            captured.clear(self.capture_limit());
            conn.send(req, Bytes::from(body), captured).await?
        } else {
            let mut excerpt = Excerpt::new(true, &self.expect);
            let resp = conn.send(req, Bytes::from(body), &mut excerpt).await?;
            vars.keep_body(excerpt.kept());
            resp
        };
        let error = self.verdict(resp.status, vars);
        Ok(Outcome {
            sent,
            received: resp.bytes_received,
            keep_alive: true,
            error,
            status: resp.status,
            arrivals: None,
        })
    }
}
