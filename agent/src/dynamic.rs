//! Dynamic steps: HTTP requests and tcp/udp payloads rendered per session from templates, data
//! rows, extracted values and cookies, and responses (HTTP) or replies (tcp/udp payloads)
//! captured for extraction and checks.
//!
//! Only steps that need it come here (a reference, an `extract`, a `check`, or the cookie
//! jar); static steps keep the request rendered once per run (`http1::PreparedRequest`). The
//! templates are resolved to indexes once per run ([`Compiled`]), and a session renders into
//! buffers it reuses from one request to the next.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use stampede_core::data::share::Share;
use stampede_core::data::{DataScope, DataSource};
use stampede_core::extract::{Check, Extract, Response as Seen, MAX_CAPTURED_BODY};
use stampede_core::protocol::Payload;
use stampede_core::scenario::{status_error, HttpRequest, Scenario};
use stampede_core::stats::error_kind;
use stampede_core::template::{self, Builtin, Filter, Generator, Segment, Template, Var};

use crate::http1::{Capture, Conn, Discard};
use crate::net::Failure;

/// What every session of a run reads: this agent's share of each data source, the seed,
/// who we are.
#[derive(Debug)]
pub struct Context {
    sources: Vec<Source>,
    /// The values the setup steps extracted (`${setup.NAME}`), by [`setup_slots`]: replaced
    /// whole when a refresh brings new ones; a session takes the current ones when it starts.
    setup: RwLock<Arc<Vec<String>>>,
    slots: usize,
    seed: u64,
    agent: String,
    run_id: String,
}

/// One data source as the agent holds it.
#[derive(Debug)]
struct Source {
    /// This agent's rows: those of the keys it runs.
    share: Share,
    per: DataScope,
    /// Keys per session (`per: request`: the requests of a session that read the source).
    per_session: u64,
}

/// One piece of a compiled template.
#[derive(Debug, Clone)]
enum Part {
    Lit(Box<[u8]>),
    Data {
        source: usize,
        column: usize,
        filter: Option<Filter>,
    },
    Slot(usize, Option<Filter>),
    Setup(usize, Option<Filter>),
    Builtin(Builtin, Option<Filter>),
    Gen(Generator, Option<Filter>),
}

/// A template with its names resolved to indexes.
#[derive(Debug, Clone)]
pub struct Compiled(Vec<Part>);

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
    /// The `per: request` sources the request reads: each binds its next row per request.
    per_request: Vec<usize>,
    /// About how long the rendered HTTP/1.1 request is: a session's buffer is sized once.
    size_hint: usize,
}

/// A session's variables and reusable buffers; exists only when the run has dynamic steps.
#[derive(Debug)]
pub struct SessionVars {
    index: u64,
    /// The setup values when the session started (a refresh applies to later sessions).
    setup: Arc<Vec<String>>,
    /// Per source, the row (of the agent's share) bound now; a `per: request` source binds
    /// one before each request that reads it.
    rows: Vec<Option<u32>>,
    /// Per source, the requests of this session that read it so far (`per: request`; empty
    /// until the first such request).
    reads: Vec<u64>,
    values: Vec<Option<String>>,
    rng: Option<rand_chacha::ChaCha8Rng>,
    cookies: Vec<(String, String)>,
    out: Vec<u8>,
    body: Vec<u8>,
    capture: Capture,
    /// A tcp or udp reply's payload, for a step that extracts from it or checks it.
    reply: Vec<u8>,
}

/// What a dynamic exchange brought back.
pub struct Outcome<'a> {
    pub sent: u64,
    pub received: u64,
    pub keep_alive: bool,
    /// The error kind when the response is not the expected one.
    pub error: Option<&'a str>,
    /// The HTTP status code.
    pub status: u16,
}

impl Context {
    /// The run's context, from this agent's `shares` of the data sources (by name), and
    /// the slot of every extracted variable by name.
    pub fn new(
        scenario: &Scenario,
        mut shares: BTreeMap<String, Share>,
        seed: u64,
        agent: u32,
        run_id: &str,
    ) -> (Self, BTreeMap<String, usize>) {
        let sources = scenario
            .data
            .iter()
            .map(|(name, d)| Source {
                share: {
                    let mut share = shares.remove(name).unwrap_or_else(|| Share::new(d));
                    if d.order == stampede_core::data::DataOrder::Random {
                        share.draw_at_random(DataSource::random_salt(name, seed));
                    }
                    share
                },
                per: d.per,
                per_session: match d.per {
                    DataScope::Request => scenario.requests_reading(name),
                    _ => 1,
                },
            })
            .collect();
        let mut slots = BTreeMap::new();
        for s in scenario
            .step_lists()
            .into_iter()
            .flat_map(|(_, steps)| steps)
        {
            for name in s.extract.keys() {
                let n = slots.len();
                slots.entry(name.clone()).or_insert(n);
            }
        }
        let ctx = Self {
            sources,
            setup: RwLock::new(Arc::new(vec![String::new(); setup_slots(scenario).len()])),
            slots: slots.len(),
            seed,
            agent: agent.to_string(),
            run_id: run_id.to_string(),
        };
        (ctx, slots)
    }

    /// The variables of session `index` (its global arrival index) running on connection
    /// `connection` (the connection's global index; with arrival phases, `index`), or `None`
    /// when a data source has no row for it (`stop`): for `per: request`, no row for its
    /// last request.
    pub fn session(&self, index: u64, connection: u64) -> Option<SessionVars> {
        let rows = self
            .sources
            .iter()
            .map(|s| match s.per {
                DataScope::Session => s.share.row(index).map(Some),
                DataScope::Connection => s.share.row(connection).map(Some),
                DataScope::Request if s.per_session == 0 => Some(None),
                DataScope::Request => {
                    let last = index
                        .checked_mul(s.per_session)?
                        .checked_add(s.per_session - 1)?;
                    s.share.row(last).map(|_| None)
                }
            })
            .collect::<Option<Vec<_>>>()?;
        Some(SessionVars {
            index,
            reads: Vec::new(),
            rows,
            setup: self.setup_now(),
            values: vec![None; self.slots],
            rng: None,
            cookies: Vec::new(),
            out: Vec::new(),
            body: Vec::new(),
            capture: Capture::default(),
            reply: Vec::new(),
        })
    }

    /// The setup values sessions read now.
    pub fn setup_now(&self) -> Arc<Vec<String>> {
        self.setup.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the setup values (from this agent's setup, or another's through the
    /// controller); sessions that start from now on read them. A list of another length (not
    /// this scenario's) is ignored.
    pub fn set_setup(&self, values: Vec<String>) -> bool {
        let mut now = self.setup.write().unwrap_or_else(|p| p.into_inner());
        if values.len() != now.len() {
            return false;
        }
        *now = Arc::new(values);
        true
    }

    /// The variables the setup steps run with: no data row, a slot per setup value, the
    /// values of earlier setup steps as they extract them (see [`SessionVars::keep_setup`]).
    pub fn setup_vars(&self) -> SessionVars {
        let n = self.setup_now().len();
        SessionVars {
            index: u64::MAX,
            rows: vec![None; self.sources.len()],
            reads: Vec::new(),
            setup: Arc::new(vec![String::new(); n]),
            values: vec![None; n],
            rng: None,
            cookies: Vec::new(),
            out: Vec::new(),
            body: Vec::new(),
            capture: Capture::default(),
            reply: Vec::new(),
        }
    }

    /// Binds the next row of each `per: request` source in `sources` (those a request reads).
    fn bind_request(&self, sources: &[usize], vars: &mut SessionVars) {
        if !sources.is_empty() && vars.reads.is_empty() {
            vars.reads = vec![0; self.sources.len()];
        }
        for &i in sources {
            let s = &self.sources[i];
            let key = vars.index.wrapping_mul(s.per_session) + vars.reads[i];
            vars.reads[i] += 1;
            vars.rows[i] = s.share.row(key);
        }
    }
}

impl SessionVars {
    /// In a setup run, makes what the setup steps extracted so far readable as
    /// `${setup.NAME}` by the next ones.
    pub fn keep_setup(&mut self) {
        let mut kept = self.setup.as_ref().clone();
        for (k, v) in kept.iter_mut().zip(&self.values) {
            if let Some(v) = v {
                k.clone_from(v);
            }
        }
        self.setup = Arc::new(kept);
    }

    /// In a setup run, the values extracted, in the order of [`Scenario::setup_names`].
    pub fn setup_values(&self) -> Vec<String> {
        self.setup.as_ref().clone()
    }
}

/// The slot of every value the setup steps extract, by name: its place in
/// [`Scenario::setup_names`], the order the values travel in.
pub fn setup_slots(scenario: &Scenario) -> BTreeMap<String, usize> {
    scenario
        .setup_names()
        .into_iter()
        .enumerate()
        .map(|(i, n)| (n.to_string(), i))
        .collect()
}

/// The `per: request` sources (by index) that one of `templates` reads.
fn request_sources<'t>(
    scenario: &Scenario,
    templates: impl Iterator<Item = &'t Template>,
) -> Vec<usize> {
    let mut out = Vec::new();
    for t in templates {
        for r in t.refs() {
            if let Var::Data { source, .. } = &r.var {
                let found = scenario
                    .data
                    .iter()
                    .position(|(n, d)| n == source && d.per == DataScope::Request);
                if let Some(i) = found.filter(|i| !out.contains(i)) {
                    out.push(i);
                }
            }
        }
    }
    out
}

/// Resolves the names of `t` against the scenario's data sources and the variable slots.
pub fn compile(
    t: &Template,
    scenario: &Scenario,
    slots: &BTreeMap<String, usize>,
) -> Result<Compiled, String> {
    let mut parts = Vec::new();
    for seg in t.segments() {
        parts.push(match seg {
            Segment::Literal(l) => Part::Lit(l.as_bytes().into()),
            Segment::Ref(r) => match &r.var {
                Var::Env(n) => {
                    return Err(format!(
                        "${{env:{n}}} was not resolved: environment references are resolved by the CLI at submit time"
                    ))
                }
                Var::Data { source, column } => {
                    let (i, (_, d)) = scenario
                        .data
                        .iter()
                        .enumerate()
                        .find(|(_, (n, _))| *n == source)
                        .ok_or_else(|| format!("{r}: `{source}` is not a data source"))?;
                    let column = d
                        .column(column)
                        .ok_or_else(|| format!("{r}: no column `{column}`"))?;
                    Part::Data {
                        source: i,
                        column,
                        filter: r.filter,
                    }
                }
                Var::Extracted(n) => Part::Slot(
                    *slots
                        .get(n)
                        .ok_or_else(|| format!("{r} is not extracted by any step"))?,
                    r.filter,
                ),
                Var::Setup(n) => Part::Setup(
                    *setup_slots(scenario)
                        .get(n)
                        .ok_or_else(|| format!("{r} is not extracted by any setup step"))?,
                    r.filter,
                ),
                Var::Builtin(b) => Part::Builtin(*b, r.filter),
                Var::Gen(g) => Part::Gen(*g, r.filter),
            },
        });
    }
    Ok(Compiled(parts))
}

/// `n` in decimal, written at the end of `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

impl Compiled {
    fn literal(text: &str) -> Self {
        Self(vec![Part::Lit(text.as_bytes().into())])
    }

    /// About how many bytes a rendering takes: the literals, and room for each value.
    fn size_hint(&self) -> usize {
        self.0
            .iter()
            .map(|p| match p {
                Part::Lit(b) => b.len(),
                _ => 32,
            })
            .sum()
    }

    /// Appends the rendered value to `out`.
    fn render(&self, ctx: &Context, vars: &mut SessionVars, out: &mut Vec<u8>) {
        for p in &self.0 {
            match p {
                Part::Lit(b) => out.extend_from_slice(b),
                Part::Data {
                    source,
                    column,
                    filter,
                } => {
                    if let Some(row) = vars.rows[*source] {
                        let v = ctx.sources[*source].share.cell(row, *column);
                        template::apply_filter(*filter, v.as_bytes(), out);
                    }
                }
                Part::Setup(slot, filter) => {
                    let v = vars.setup.get(*slot).map_or("", String::as_str);
                    template::apply_filter(*filter, v.as_bytes(), out);
                }
                Part::Slot(slot, filter) => {
                    let v = vars.values[*slot].as_deref().unwrap_or_default();
                    template::apply_filter(*filter, v.as_bytes(), out);
                }
                Part::Builtin(b, filter) => {
                    // Written in place: no allocation per request.
                    let mut digits = [0u8; 20];
                    let v: &[u8] = match b {
                        Builtin::SessionIndex => decimal(vars.index, &mut digits),
                        Builtin::Agent => ctx.agent.as_bytes(),
                        Builtin::RunId => ctx.run_id.as_bytes(),
                        Builtin::Now(format) => {
                            let ms = std::time::SystemTime::now()
                                .duration_since(std::time::UNIX_EPOCH)
                                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                            let mut v = Vec::with_capacity(24);
                            template::write_time(ms, *format, &mut v);
                            template::apply_filter(*filter, &v, out);
                            continue;
                        }
                    };
                    template::apply_filter(*filter, v, out);
                }
                Part::Gen(g, filter) => {
                    let rng = vars
                        .rng
                        .get_or_insert_with(|| template::session_rng(ctx.seed, vars.index));
                    if filter.is_none() {
                        template::generate(*g, vars.index, rng, out);
                    } else {
                        let mut v = Vec::new();
                        template::generate(*g, vars.index, rng, &mut v);
                        template::apply_filter(*filter, &v, out);
                    }
                }
            }
        }
    }
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
    ) -> Result<Self, String> {
        let mut path = req.path.clone();
        path.prepend(prefix);
        let path = compile(&path, scenario, slots).map_err(|e| format!("http.path: {e}"))?;
        let mut headers = Vec::new();
        let mut has_ua = false;
        for (k, v) in &req.headers {
            if k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("host") {
                continue;
            }
            has_ua |= k.eq_ignore_ascii_case("user-agent");
            let c = compile(v, scenario, slots).map_err(|e| format!("http.headers.{k}: {e}"))?;
            headers.push((k.clone(), c));
        }
        let body = req
            .body
            .as_ref()
            .map(|b| compile(b, scenario, slots))
            .transpose()
            .map_err(|e| format!("http.body: {e}"))?;
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
        let capture_body = judge.needs_body();
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
            per_request,
            size_hint,
        })
    }

    /// Renders the body into `vars.body`, then the whole HTTP/1.1 request into `vars.out`.
    /// A rendered value that would break the request (a line break in a header, a space in
    /// the path) is a `template` error.
    fn render_http1(&self, ctx: &Context, vars: &mut SessionVars) -> Result<(), Failure> {
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
            if self.cookies && !vars.cookies.is_empty() {
                out.extend_from_slice(b"Cookie: ");
                for (i, (k, v)) in vars.cookies.iter().enumerate() {
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
    fn judge(&self, status: u16, vars: &mut SessionVars) -> Option<&str> {
        let seen = Seen {
            status,
            headers: &vars.capture.headers,
            body: &vars.capture.body,
        };
        if self.cookies {
            for (name, value) in stampede_core::extract::set_cookies(seen.headers) {
                match vars.cookies.iter_mut().find(|(n, _)| n == name) {
                    Some(c) => c.1 = value.to_string(),
                    None => vars.cookies.push((name.to_string(), value.to_string())),
                }
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
        let resp = if self.wants_capture() {
            let limit = if self.capture_body {
                MAX_CAPTURED_BODY
            } else {
                0
            };
            vars.capture.clear(limit);
            conn.exchange(&vars.out, self.head, &mut vars.capture)
                .await?
        } else {
            conn.exchange(&vars.out, self.head, &mut Discard).await?
        };
        let error = self.verdict(resp.status, vars);
        Ok(Outcome {
            sent: vars.out.len() as u64,
            received: resp.bytes_received,
            keep_alive: resp.keep_alive,
            error,
            status: resp.status,
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
        if self.cookies && !vars.cookies.is_empty() {
            let jar = vars
                .cookies
                .iter()
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
            let limit = if self.capture_body {
                MAX_CAPTURED_BODY
            } else {
                0
            };
            vars.capture.clear(limit);
            conn.send(req, Bytes::from(body), &mut vars.capture).await?
        } else {
            conn.send(req, Bytes::from(body), &mut Discard).await?
        };
        let error = self.verdict(resp.status, vars);
        Ok(Outcome {
            sent,
            received: resp.bytes_received,
            keep_alive: true,
            error,
            status: resp.status,
        })
    }
}

/// A step's extraction and checks, compiled once: what a captured response or reply is
/// judged by. HTTP adds its status and cookies around it; a tcp or udp reply is its payload.
#[derive(Debug, Default)]
struct Judge {
    /// (the variable's slot, the extractor, its error kind `extract.NAME`).
    extract: Vec<(usize, Extract, String)>,
    check: Option<Check>,
}

impl Judge {
    fn new(
        extract: &BTreeMap<String, Extract>,
        check: Option<&Check>,
        slots: &BTreeMap<String, usize>,
    ) -> Self {
        Self {
            extract: extract
                .iter()
                .map(|(name, e)| (slots[name], e.clone(), format!("extract.{name}")))
                .collect(),
            check: check.cloned(),
        }
    }

    fn is_empty(&self) -> bool {
        self.extract.is_empty() && self.check.is_none()
    }

    fn needs_body(&self) -> bool {
        self.extract.iter().any(|(_, e, _)| e.needs_body())
            || self.check.as_ref().is_some_and(Check::needs_body)
    }

    /// The error kind of the first failed check.
    fn check(&self, seen: &Seen<'_>) -> Option<&'static str> {
        Some(match self.check.as_ref()?.apply(seen)? {
            "status" => "check.status",
            "body_contains" => "check.body_contains",
            _ => "check.json",
        })
    }

    /// Takes every value into its slot; the error kind of the first one missing.
    fn extract(&self, seen: &Seen<'_>, values: &mut [Option<String>]) -> Option<&str> {
        for (slot, e, kind) in &self.extract {
            match e.apply(seen) {
                Some(v) => values[*slot] = Some(v),
                None => return Some(kind),
            }
        }
        None
    }
}

/// A tcp or udp step that is not the same bytes every time, or whose reply is read: its
/// `send` payload rendered per request when it is a template, its reply's payload captured
/// when it extracts or checks. The framing, timeout and `expect` stay in the step's
/// `FramedRequest` or `DatagramRequest`.
#[derive(Debug)]
pub struct DynamicSend {
    /// `None`: the payload is static, already framed in the request.
    send: Option<Compiled>,
    per_request: Vec<usize>,
    judge: Judge,
}

impl DynamicSend {
    /// Compiles a `tcp` or `udp` step's `send` (when a template), `extract` and `check`;
    /// `None` when it has none of them and so stays on the static path.
    pub fn new(
        send: &Payload,
        extract: &BTreeMap<String, Extract>,
        check: Option<&Check>,
        scenario: &Scenario,
        slots: &BTreeMap<String, usize>,
    ) -> Result<Option<Self>, String> {
        let template = send.template();
        if template.is_none() && extract.is_empty() && check.is_none() {
            return Ok(None);
        }
        Ok(Some(Self {
            send: template
                .map(|t| compile(t, scenario, slots))
                .transpose()
                .map_err(|e| format!("send: {e}"))?,
            per_request: request_sources(scenario, template.into_iter()),
            judge: Judge::new(extract, check, slots),
        }))
    }

    /// Renders the payload into `vars.body` (binding the next rows of `per: request`
    /// sources); `false` when it is static.
    fn render(&self, ctx: &Context, vars: &mut SessionVars) -> bool {
        let Some(send) = &self.send else {
            return false;
        };
        ctx.bind_request(&self.per_request, vars);
        let mut body = std::mem::take(&mut vars.body);
        body.clear();
        send.render(ctx, vars, &mut body);
        vars.body = body;
        true
    }

    /// The captured reply's verdict: checks, then extraction into the session's values.
    fn verdict<'s>(&'s self, vars: &mut SessionVars) -> Option<&'s str> {
        let seen = Seen {
            status: 0,
            headers: &[],
            body: &vars.reply,
        };
        if let Some(kind) = self.judge.check(&seen) {
            return Some(kind);
        }
        self.judge.extract(&seen, &mut vars.values)
    }

    fn outcome(&self, sent: u64, received: u64, vars: &mut SessionVars) -> Outcome<'_> {
        Outcome {
            sent,
            received,
            keep_alive: true,
            error: if self.judge.is_empty() {
                None
            } else {
                self.verdict(vars)
            },
            status: 0,
        }
    }

    /// One framed request over a tcp or unix stream.
    pub async fn tcp<'s>(
        &'s self,
        conn: &mut crate::stream::StreamConn,
        req: &crate::stream::FramedRequest,
        ctx: &Context,
        vars: &mut SessionVars,
    ) -> Result<Outcome<'s>, Failure> {
        let capture = !self.judge.is_empty();
        let mut out = std::mem::take(&mut vars.out);
        let mut reply = std::mem::take(&mut vars.reply);
        // A static payload goes out as the step framed it once; only a template is framed here.
        let framed = if self.render(ctx, vars) {
            req.frame(&vars.body, &mut out).map(|()| true)
        } else {
            Ok(false)
        };
        let exchanged = match framed {
            Ok(rendered) => {
                let bytes = if rendered { &out[..] } else { req.bytes() };
                conn.exchange(bytes, req, capture.then_some(&mut reply))
                    .await
                    .map(|received| (bytes.len() as u64, received))
            }
            Err(f) => Err(f),
        };
        vars.out = out;
        vars.reply = reply;
        let (sent, received) = exchanged?;
        Ok(self.outcome(sent, received, vars))
    }

    /// One datagram.
    pub async fn udp<'s>(
        &'s self,
        conn: &mut crate::udp::UdpConn,
        req: &crate::udp::DatagramRequest,
        deadline: tokio::time::Instant,
        ctx: &Context,
        vars: &mut SessionVars,
    ) -> Result<Outcome<'s>, Failure> {
        let capture = !self.judge.is_empty();
        let mut reply = std::mem::take(&mut vars.reply);
        let received = if self.render(ctx, vars) {
            conn.exchange(&vars.body, req, deadline, capture.then_some(&mut reply))
                .await
        } else {
            conn.exchange(req.bytes(), req, deadline, capture.then_some(&mut reply))
                .await
        };
        vars.reply = reply;
        let sent = if self.send.is_some() {
            vars.body.len()
        } else {
            req.len()
        } as u64;
        Ok(self.outcome(sent, received?, vars))
    }
}

/// The templates of one request rendered one at a time into the caller's buffers (a gRPC
/// call's message fields and metadata values: `crate::grpc`), compiled once per run.
#[derive(Debug)]
pub struct DynamicFields {
    fields: Vec<Compiled>,
    per_request: Vec<usize>,
}

impl DynamicFields {
    /// Compiles `templates`; the error names the template by its index.
    pub fn new(
        templates: &[&Template],
        scenario: &Scenario,
        slots: &BTreeMap<String, usize>,
    ) -> Result<Self, (usize, String)> {
        let fields = templates
            .iter()
            .enumerate()
            .map(|(i, t)| compile(t, scenario, slots).map_err(|e| (i, e)))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            fields,
            per_request: request_sources(scenario, templates.iter().copied()),
        })
    }

    /// Binds the next rows of the `per: request` sources the request reads (once per
    /// request, before its fields are rendered), then runs `f` with a renderer of field `i`
    /// into a buffer and the session's scratch buffer.
    pub fn render_with<R>(
        &self,
        ctx: &Context,
        vars: &mut SessionVars,
        f: impl FnOnce(&mut dyn FnMut(usize, &mut Vec<u8>), &mut Vec<u8>) -> R,
    ) -> R {
        ctx.bind_request(&self.per_request, vars);
        let mut scratch = std::mem::take(&mut vars.body);
        let r = f(
            &mut |i, out| self.fields[i].render(ctx, vars, out),
            &mut scratch,
        );
        vars.body = scratch;
        r
    }
}

impl Default for Compiled {
    fn default() -> Self {
        Self::literal("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCENARIO: &str = r#"
name: t
target: http://127.0.0.1:1/api
seed: 3
data:
  users: { order: sequence, on_exhausted: wrap, columns: [id, name], rows: [["1", "a b"], ["2", "c"]] }
phases: [ { duration: 1s, arrival_rate: 3 } ]
session:
  - http: { method: post, path: '/login?u=${users.name|url}', body: '{"id":${users.id},"i":${session.index}}' }
    extract: { token: { json: /token } }
  - http: { path: /me, headers: { authorization: 'Bearer ${token}' } }
"#;

    /// Every row of every source: the share of the one agent of a run.
    fn whole(s: &Scenario, seed: u64) -> BTreeMap<String, Share> {
        let map = stampede_core::shard::ShardMap::new(1, &[]).unwrap();
        s.data
            .iter()
            .map(|(name, d)| {
                let keys = stampede_core::data::Keys::new(s, name, d, seed, &map);
                let share = Share::of(d, &d.pass(name, seed), &keys.positions(d, 0)).unwrap();
                (name.clone(), share)
            })
            .collect()
    }

    #[test]
    fn decimals() {
        let mut buf = [0u8; 20];
        assert_eq!(decimal(0, &mut buf), b"0");
        assert_eq!(decimal(907, &mut buf), b"907");
        assert_eq!(decimal(u64::MAX, &mut buf), b"18446744073709551615");
    }

    #[test]
    fn now_is_the_time_of_the_request() {
        let s = Scenario::from_yaml(SCENARIO).unwrap();
        let (ctx, slots) = Context::new(&s, whole(&s, 3), 3, 0, "r1");
        let t = Template::parse("${now.s} ${now.iso}").unwrap();
        let c = compile(&t, &s, &slots).unwrap();
        let mut vars = ctx.session(0, 0).unwrap();
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let mut out = Vec::new();
        c.render(&ctx, &mut vars, &mut out);
        let text = String::from_utf8(out).unwrap();
        let (secs, iso) = text.split_once(' ').unwrap();
        let secs: u64 = secs.parse().unwrap();
        assert!(secs >= before && secs <= before + 2, "{text}");
        assert!(iso.ends_with('Z') && iso.len() == 24, "{text}");
    }

    #[test]
    fn rows_bind_per_session_request_and_connection() {
        let text = SCENARIO.replace(
            "users: { order: sequence, on_exhausted: wrap, columns: [id, name], rows: [[\"1\", \"a b\"], [\"2\", \"c\"]] }",
            "users: { per: request, on_exhausted: wrap, columns: [id, name], rows: [[\"1\", \"a\"], [\"2\", \"b\"], [\"3\", \"c\"]] }\n  conn: { per: connection, on_exhausted: stop, columns: [u], rows: [[\"x\"], [\"y\"]] }",
        );
        let text = text.replace(
            "'/login?u=${users.name|url}'",
            "'/login?u=${users.name}&c=${conn.u}'",
        );
        let s = Scenario::from_yaml(&text).unwrap();
        assert_eq!(s.requests_reading("users"), 1);
        let (ctx, slots) = Context::new(&s, whole(&s, 3), 3, 0, "r1");
        let h = s.session[0].http.as_ref().unwrap();
        let login =
            DynamicHttp::new(h, &s.session[0].extract, None, &s, &slots, "h", "", false).unwrap();
        let mut seen = Vec::new();
        for (index, connection) in [(0, 0), (1, 1), (2, 1), (4, 0)] {
            let mut vars = ctx.session(index, connection).unwrap();
            ctx.bind_request(&login.per_request, &mut vars);
            login.render_http1(&ctx, &mut vars).unwrap();
            let text = String::from_utf8(vars.out.clone()).unwrap();
            seen.push(text.lines().next().unwrap().to_string());
        }
        assert_eq!(
            seen,
            [
                "POST /login?u=a&c=x HTTP/1.1",
                "POST /login?u=b&c=y HTTP/1.1",
                "POST /login?u=c&c=y HTTP/1.1",
                "POST /login?u=b&c=x HTTP/1.1",
            ]
        );
        // The connection source stops: a third connection has no row.
        assert!(ctx.session(0, 2).is_none());
    }

    #[test]
    fn requests_render_from_rows_and_extracted_values() {
        let s = Scenario::from_yaml(SCENARIO).unwrap();
        let (ctx, slots) = Context::new(&s, whole(&s, 3), 3, 0, "r1");
        let h = s.session[0].http.as_ref().unwrap();
        let login = DynamicHttp::new(
            h,
            &s.session[0].extract,
            None,
            &s,
            &slots,
            "127.0.0.1:1",
            "/api",
            false,
        )
        .unwrap();
        let mut vars = ctx.session(2, 2).unwrap();
        login.render_http1(&ctx, &mut vars).unwrap();
        let text = String::from_utf8(vars.out.clone()).unwrap();
        assert!(
            text.starts_with("POST /api/login?u=a%20b HTTP/1.1\r\nHost: 127.0.0.1:1\r\n"),
            "{text}"
        );
        assert!(
            text.ends_with("Content-Length: 14\r\n\r\n{\"id\":1,\"i\":2}"),
            "{text}"
        );
        vars.capture.clear(MAX_CAPTURED_BODY);
        vars.capture.body.extend_from_slice(br#"{"token":"t-9"}"#);
        assert_eq!(login.judge(200, &mut vars), None);
        let me = s.session[1].http.as_ref().unwrap();
        let me =
            DynamicHttp::new(me, &BTreeMap::new(), None, &s, &slots, "h", "/api", false).unwrap();
        me.render_http1(&ctx, &mut vars).unwrap();
        let text = String::from_utf8(vars.out.clone()).unwrap();
        assert!(text.contains("authorization: Bearer t-9\r\n"), "{text}");
        vars.capture.clear(MAX_CAPTURED_BODY);
        vars.capture.body.extend_from_slice(b"{}");
        assert_eq!(login.judge(200, &mut vars), Some("extract.token"));
    }
}
