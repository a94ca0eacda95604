//! Dynamic steps: HTTP requests and tcp/udp payloads rendered per session from templates, data
//! rows, extracted values and cookies, and responses (HTTP) or replies (tcp/udp payloads)
//! captured for extraction and checks.
//!
//! Only steps that need it come here (a reference, an `extract`, a `check`, or the cookie
//! jar); static steps keep the request rendered once per run (`http1::PreparedRequest`). The
//! templates are resolved to indexes once per run ([`Compiled`]), and a session renders into
//! buffers it reuses from one request to the next.
//!
//! This module holds what every kind shares (the run's [`Context`], a session's
//! [`SessionVars`], compiled templates and gRPC's [`DynamicFields`]); `http_step` renders and
//! sends an HTTP step, `send` a tcp or udp one, `ws_step` a WebSocket one, and `judge` is the
//! extraction and checks all apply to what comes back.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use stampede_core::data::share::Share;
use stampede_core::data::{DataScope, DataSource};
use stampede_core::scenario::Scenario;
use stampede_core::template::{self, Builtin, Filter, Generator, Ref, Segment, Template, Var};

use crate::http1::Capture;

mod http_step;
mod jar;
mod judge;
mod send;
mod ws_step;

pub use http_step::{DynamicHttp, HttpCompileError};
pub use judge::ReplyJudge;
pub use send::{DynamicSend, SendCompileError};
pub use ws_step::{After, DynamicWs, WsCompileError};

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
    /// The source's name, for failure samples.
    name: String,
    /// Its values may be shown in a failure sample: not a `secret` source's.
    shown_columns: usize,
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
    /// Boxed on first use: its 336 bytes would be part of every session's variables, and
    /// most sessions (every held WebSocket of a plain echo load) never draw from it.
    rng: Option<Box<rand_chacha::ChaCha8Rng>>,
    cookies: jar::Jar,
    out: Vec<u8>,
    body: Vec<u8>,
    /// An HTTP answer's head and body, or (its body) a tcp, udp or gRPC reply's payload, for
    /// a step that extracts from it or checks it: one buffer for all, boxed when first used
    /// ([`capture`]). The variables are boxed per session, and a WebSocket session that
    /// neither checks nor extracts never reads an answer's head: without the capture inline
    /// they are 192 bytes (jemalloc's class of that size), where they were 264 (320).
    capture: Option<Box<Capture>>,
    /// Compressed bodies decoded since the session's counters last took them: (bytes on the
    /// wire, decoded).
    decoded: (u64, u64),
}

/// A session's capture buffer ([`SessionVars::capture`]), made on first use. A function of the
/// field, not a method, so that the session's other fields stay free to borrow beside it.
fn capture(c: &mut Option<Box<Capture>>) -> &mut Capture {
    c.get_or_insert_with(Box::default)
}

/// The body a session's capture holds (empty before its first use), for the same reason a
/// function of the field.
fn captured(c: &Option<Box<Capture>>) -> &[u8] {
    c.as_deref().map_or(&[], |c| &c.body)
}

/// What a dynamic exchange brought back.
pub struct Outcome<'a> {
    /// Bytes written for the request, head and body.
    pub sent: u64,
    /// Bytes read for the response, head and body as they came on the wire.
    pub received: u64,
    /// The connection may carry the session's next request.
    pub keep_alive: bool,
    /// The error kind when the response is not the expected one.
    pub error: Option<&'a str>,
    /// The HTTP status code.
    pub status: u16,
    /// A streamed reply's arrivals (`stream:` steps only).
    pub arrivals: Option<Box<crate::http1::stream::Arrivals>>,
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
                name: name.clone(),
                shown_columns: if d.secret.is_some() {
                    0
                } else {
                    d.columns.len()
                },
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
            cookies: jar::Jar::default(),
            out: Vec::new(),
            body: Vec::new(),
            capture: None,
            decoded: (0, 0),
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
            cookies: jar::Jar::default(),
            out: Vec::new(),
            body: Vec::new(),
            capture: None,
            decoded: (0, 0),
        }
    }

    /// The rows `vars` has bound, for a failure sample: each source's name, the row's
    /// position in the source's pass, and its values (none from a `secret` source).
    pub fn bound_rows<'a>(
        &'a self,
        vars: &'a SessionVars,
    ) -> impl Iterator<Item = (&'a str, u64, Vec<&'a str>)> + 'a {
        self.sources.iter().zip(&vars.rows).filter_map(|(s, row)| {
            let row = (*row)?;
            let position = s.share.positions().get(row as usize)?;
            let values = (0..s.shown_columns).map(|c| s.share.cell(row, c)).collect();
            Some((s.name.as_str(), u64::from(*position), values))
        })
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
    /// The last request rendered: a whole HTTP/1.1 request, an h2 path, or a tcp or udp
    /// payload.
    pub fn rendered(&self) -> &[u8] {
        &self.out
    }

    /// The last tcp or udp payload rendered (before framing), or HTTP body.
    pub fn payload(&self) -> &[u8] {
        &self.body
    }

    /// The body of the last answer captured (at most its start).
    pub fn captured_body(&self) -> &[u8] {
        captured(&self.capture)
    }

    /// The buffer a tcp or udp step reads its reply into, taken from the capture while the
    /// exchange borrows the other variables; empty, and no capture made, when the step does
    /// not read its reply (`wanted` false). Given back with [`Self::put_reply`].
    fn take_reply(&mut self, wanted: bool) -> Vec<u8> {
        if wanted {
            std::mem::take(&mut capture(&mut self.capture).body)
        } else {
            Vec::new()
        }
    }

    /// Gives back what [`Self::take_reply`] took (nothing when not `wanted`).
    fn put_reply(&mut self, reply: Vec<u8>, wanted: bool) {
        if wanted {
            capture(&mut self.capture).body = reply;
        }
    }

    /// Keeps `body` as the last answer's captured body (an uncaptured step's failure excerpt).
    pub(crate) fn keep_body(&mut self, body: &[u8]) {
        let c = capture(&mut self.capture);
        c.body.clear();
        c.body.extend_from_slice(body);
    }

    /// The compressed bodies decoded since the last call, (bytes on the wire, decoded), for
    /// the session's counters.
    pub fn take_decoded(&mut self) -> (u64, u64) {
        std::mem::take(&mut self.decoded)
    }

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

/// A reference the agent cannot resolve. The scenario's validation refuses all of these
/// before submission, so only a scenario that skipped it (a hand-made Assign) gets one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// An environment reference the CLI should have replaced.
    #[error("${{env:{name}}} was not resolved: environment references are resolved by the CLI at submit time")]
    EnvUnresolved {
        /// The variable's name.
        name: String,
    },
    /// A data source the scenario does not declare.
    #[error("{at}: `{data}` is not a data source")]
    NoDataSource {
        /// The reference, as written.
        at: Ref,
        /// The source it names.
        data: String,
    },
    /// A column the data source does not have.
    #[error("{at}: no column `{column}`")]
    NoColumn {
        /// The reference, as written.
        at: Ref,
        /// The column it names.
        column: String,
    },
    /// A value no step extracts.
    #[error("{at} is not extracted by any step")]
    NotExtracted {
        /// The reference, as written.
        at: Ref,
    },
    /// A setup value no setup step extracts.
    #[error("{at} is not extracted by any setup step")]
    NotInSetup {
        /// The reference, as written.
        at: Ref,
    },
}

/// Resolves the names of `t` against the scenario's data sources and the variable slots.
pub fn compile(
    t: &Template,
    scenario: &Scenario,
    slots: &BTreeMap<String, usize>,
) -> Result<Compiled, CompileError> {
    let mut parts = Vec::new();
    for seg in t.segments() {
        parts.push(match seg {
            Segment::Literal(l) => Part::Lit(l.as_bytes().into()),
            Segment::Ref(r) => match &r.var {
                Var::Env(n) => return Err(CompileError::EnvUnresolved { name: n.clone() }),
                Var::Data { source, column } => {
                    let (i, (_, d)) = scenario
                        .data
                        .iter()
                        .enumerate()
                        .find(|(_, (n, _))| *n == source)
                        .ok_or_else(|| CompileError::NoDataSource {
                            at: r.clone(),
                            data: source.clone(),
                        })?;
                    let column = d.column(column).ok_or_else(|| CompileError::NoColumn {
                        at: r.clone(),
                        column: column.clone(),
                    })?;
                    Part::Data {
                        source: i,
                        column,
                        filter: r.filter,
                    }
                }
                Var::Extracted(n) => Part::Slot(
                    *slots
                        .get(n)
                        .ok_or_else(|| CompileError::NotExtracted { at: r.clone() })?,
                    r.filter,
                ),
                Var::Setup(n) => Part::Setup(
                    *setup_slots(scenario)
                        .get(n)
                        .ok_or_else(|| CompileError::NotInSetup { at: r.clone() })?,
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
                    let rng = vars.rng.get_or_insert_with(|| {
                        Box::new(template::session_rng(ctx.seed, vars.index))
                    });
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
    ) -> Result<Self, (usize, CompileError)> {
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
    use stampede_core::extract::MAX_CAPTURED_BODY;

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
        let h = match &s.session[0].kind {
            stampede_core::scenario::StepKind::Http(x) => x,
            k => panic!("not a http step: {k:?}"),
        };
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
        let h = match &s.session[0].kind {
            stampede_core::scenario::StepKind::Http(x) => x,
            k => panic!("not a http step: {k:?}"),
        };
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
        let c = capture(&mut vars.capture);
        c.clear(MAX_CAPTURED_BODY);
        c.body.extend_from_slice(br#"{"token":"t-9"}"#);
        assert_eq!(login.judge(200, &mut vars), None);
        let me = match &s.session[1].kind {
            stampede_core::scenario::StepKind::Http(x) => x,
            k => panic!("not a http step: {k:?}"),
        };
        let me =
            DynamicHttp::new(me, &BTreeMap::new(), None, &s, &slots, "h", "/api", false).unwrap();
        me.render_http1(&ctx, &mut vars).unwrap();
        let text = String::from_utf8(vars.out.clone()).unwrap();
        assert!(text.contains("authorization: Bearer t-9\r\n"), "{text}");
        let c = capture(&mut vars.capture);
        c.clear(MAX_CAPTURED_BODY);
        c.body.extend_from_slice(b"{}");
        assert_eq!(login.judge(200, &mut vars), Some("extract.token"));
    }
}
