//! Templates: `${...}` references in request fields (HTTP path, header values, body; the text
//! of a tcp or udp `send` payload).
//!
//! A template is parsed once, when the scenario is read, into literal segments and typed
//! references, so a typo fails validation with the field named instead of being sent
//! literally, and the agent never scans strings for `${` on the hot path. A field with no
//! reference is [`Template::as_static`], and the agent keeps today's pre-rendered request.
//!
//! Syntax (documented in `docs/scenario.md`):
//! - `${name}`: a value extracted by an earlier step of the session;
//! - `${setup.name}`: a value extracted by a setup step (run once on each agent before the
//!   load);
//! - `${source.column}`: a column of the row a `data` source bound to this session;
//! - `${env:NAME}`: an environment variable of the CLI, resolved at submit time;
//! - built-ins `${session.index}` (the global arrival index), `${session.agent}` (the agent's
//!   shard index), `${run.id}`, and the time the request is rendered: `${now}` (Unix
//!   milliseconds), `${now.s}` (Unix seconds), `${now.iso}` (RFC 3339, UTC, milliseconds);
//! - generators `${uuid()}`, `${int(MIN,MAX)}`, `${seq(START,STEP)}` drawn from the run
//!   seed and the arrival index, so a rerun sends the same values whatever the agent count;
//! - a filter after `|`: `url` (percent-encoding), `json` (a JSON string's escapes), `hex`;
//! - `$${` is a literal `${`: before a `{`, each `$$` is one literal `$` and a single `$`
//!   left over opens a reference, so `$$${x}` is a `$` followed by `${x}`.

use std::fmt::Write as _;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest template accepted (the largest body a request step may carry).
pub const MAX_TEMPLATE: usize = 1 << 20;

/// A parsed template; it serializes back to its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Template {
    segments: Vec<Segment>,
}

/// A piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// Text sent as is.
    Literal(String),
    /// A value looked up (and filtered) for each request.
    Ref(Ref),
}

/// A reference and its optional filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ref {
    pub var: Var,
    pub filter: Option<Filter>,
}

/// What a reference reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    /// `${env:NAME}`: resolved by the CLI before submission, so agents never read their own
    /// environment and a value never reaches the controller's reports.
    Env(String),
    /// `${source.column}`.
    Data {
        source: String,
        column: String,
    },
    /// `${name}`: extracted by an earlier step.
    Extracted(String),
    /// `${setup.name}`: extracted by a setup step (run once per agent before the load).
    Setup(String),
    Builtin(Builtin),
    Gen(Generator),
}

/// Values every session has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// `${session.index}`: the global index of the arrival (or slot) in the whole-test schedule.
    SessionIndex,
    /// `${session.agent}`: the shard index of the agent running the session.
    Agent,
    /// `${run.id}`.
    RunId,
    /// `${now}`, `${now.s}`, `${now.iso}`: the time the request is rendered.
    Now(TimeFormat),
}

/// How `${now...}` writes the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeFormat {
    /// `${now}`: Unix milliseconds.
    Millis,
    /// `${now.s}`: Unix seconds.
    Seconds,
    /// `${now.iso}`: RFC 3339 in UTC with milliseconds, `2025-01-31T12:34:56.789Z`.
    Iso,
}

/// Values drawn per use from the session's seeded generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generator {
    /// `${uuid()}`: a random (version 4) UUID.
    Uuid,
    /// `${int(MIN,MAX)}`: a uniform integer in `[MIN, MAX]`.
    Int { min: i64, max: i64 },
    /// `${seq(START,STEP)}`: `START + STEP × session.index` (a unique number per session).
    Seq { start: i64, step: i64 },
}

/// How a value is escaped before it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// Percent-encoding of everything but RFC 3986 unreserved characters.
    Url,
    /// The escapes of a JSON string's contents (no quotes added).
    Json,
    /// Lowercase hexadecimal of the bytes.
    Hex,
}

/// A template that does not parse, or an `${env:NAME}` that cannot be resolved. The message
/// says what is wrong and where; the caller names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The text is longer than a template may be.
    #[error("{0} bytes; at most {MAX_TEMPLATE}")]
    TooLong(usize),
    /// A `${` without its `}` (the text from it, clipped).
    #[error("`{0}` is not closed by }}")]
    Unclosed(String),
    /// A reference that does not parse: what is between `${` and `}`, and why.
    #[error("${{{inner}}}: {why}")]
    Ref {
        /// The reference's text.
        inner: String,
        /// What is wrong with it.
        why: RefError,
    },
    /// An `${env:NAME}` whose variable is not set where the scenario is submitted.
    #[error("${{env:{0}}} is not set in the environment")]
    EnvNotSet(String),
}

/// What is wrong with one `${...}` reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    /// After `|`, a name that is not a filter.
    #[error("`{0}` is not a filter (url, json, hex)")]
    Filter(String),
    /// After `env:`, a name that is not an environment variable's.
    #[error("`{0}` is not an environment variable name")]
    EnvName(String),
    /// A dotted name under a reserved prefix (`session.`, `run.`, `now.`) that is no built-in.
    #[error("`{0}` is not a built-in (session.index, session.agent, run.id, now, now.s, now.iso)")]
    NotBuiltin(String),
    /// Not a variable name at all.
    #[error("`{0}` is not a variable name")]
    NotName(String),
    /// A generator argument that is not an integer.
    #[error("`{0}` is not an integer")]
    NotInteger(String),
    /// `int(MIN,MAX)` with MIN above MAX.
    #[error("int(MIN,MAX) needs MIN <= MAX")]
    IntRange,
    /// A call that is not one of the generators, with its arguments.
    #[error("`{0}` is not a generator (uuid(), int(MIN,MAX), seq(START,STEP))")]
    NotGenerator(String),
}

impl Template {
    /// Parses a template; the error says what is wrong and where.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        if text.len() > MAX_TEMPLATE {
            return Err(TemplateError::TooLong(text.len()));
        }
        let mut segments = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(at) = rest.find("${") {
            // A run of `$` before `{`: each pair is one literal `$`; an odd one left over
            // opens a reference (`$${` is a literal `${`, `$$${x}` is `$` then `${x}`).
            let run = 1 + rest[..at].bytes().rev().take_while(|&b| b == b'$').count();
            let start = at + 1 - run;
            lit.push_str(&rest[..start]);
            lit.extend(std::iter::repeat_n('$', run / 2));
            if run % 2 == 0 {
                lit.push('{');
                rest = &rest[at + 2..];
                continue;
            }
            let body_start = at + 2;
            let end = rest[body_start..]
                .find('}')
                .ok_or_else(|| TemplateError::Unclosed(clip(&rest[at..]).to_string()))?;
            let inner = &rest[body_start..body_start + end];
            let r = parse_ref(inner).map_err(|why| TemplateError::Ref {
                inner: inner.to_string(),
                why,
            })?;
            if !lit.is_empty() {
                segments.push(Segment::Literal(std::mem::take(&mut lit)));
            }
            segments.push(Segment::Ref(r));
            rest = &rest[body_start + end + 1..];
        }
        lit.push_str(rest);
        if !lit.is_empty() || segments.is_empty() {
            segments.push(Segment::Literal(lit));
        }
        Ok(Self { segments })
    }

    /// The templates one after the other, as one (adjacent literal text joined).
    pub fn concat(parts: impl IntoIterator<Item = Template>) -> Self {
        let mut segments: Vec<Segment> = Vec::new();
        for s in parts.into_iter().flat_map(|t| t.segments) {
            match (segments.last_mut(), s) {
                (Some(Segment::Literal(l)), Segment::Literal(more)) => l.push_str(&more),
                (_, s) => segments.push(s),
            }
        }
        if segments.is_empty() {
            segments.push(Segment::Literal(String::new()));
        }
        Self { segments }
    }

    /// A template of literal text only.
    pub fn literal(text: impl Into<String>) -> Self {
        Self {
            segments: vec![Segment::Literal(text.into())],
        }
    }

    /// The text when there is no reference: such a field costs nothing per request.
    pub fn as_static(&self) -> Option<&str> {
        match self.segments.as_slice() {
            [Segment::Literal(s)] => Some(s),
            _ => None,
        }
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The references, in order.
    pub fn refs(&self) -> impl Iterator<Item = &Ref> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Ref(r) => Some(r),
            Segment::Literal(_) => None,
        })
    }

    /// Replaces every `${env:NAME}` with `lookup(NAME)`; the error names the variable that is
    /// not set. Returns whether anything changed.
    pub fn resolve_env(
        &mut self,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<bool, TemplateError> {
        if !self.refs().any(|r| matches!(r.var, Var::Env(_))) {
            return Ok(false);
        }
        let mut out: Vec<Segment> = Vec::with_capacity(self.segments.len());
        for s in &self.segments {
            let s = match s {
                Segment::Ref(Ref {
                    var: Var::Env(name),
                    filter,
                }) => {
                    let filter = *filter;
                    let v = lookup(name).ok_or_else(|| TemplateError::EnvNotSet(name.clone()))?;
                    let mut buf = Vec::new();
                    apply_filter(filter, v.as_bytes(), &mut buf);
                    Segment::Literal(String::from_utf8_lossy(&buf).into_owned())
                }
                other => other.clone(),
            };
            match (out.last_mut(), s) {
                (Some(Segment::Literal(a)), Segment::Literal(b)) => a.push_str(&b),
                (_, s) => out.push(s),
            }
        }
        self.segments = out;
        Ok(true)
    }

    /// Puts `prefix` (literal text) in front of the template.
    pub fn prepend(&mut self, prefix: &str) {
        if prefix.is_empty() {
            return;
        }
        match self.segments.first_mut() {
            Some(Segment::Literal(s)) => s.insert_str(0, prefix),
            _ => self
                .segments
                .insert(0, Segment::Literal(prefix.to_string())),
        }
    }
}

fn clip(s: &str) -> &str {
    match s.char_indices().nth(24) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Names of the built-ins' namespaces: no data source may take them.
pub const RESERVED: [&str; 4] = ["session", "run", "now", "setup"];

/// A variable or source name: a letter or `_`, then letters, digits, `_` or `-`.
pub fn is_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

fn parse_ref(inner: &str) -> Result<Ref, RefError> {
    let (name, filter) = match inner.split_once('|') {
        Some((n, f)) => (n.trim(), Some(f.trim())),
        None => (inner.trim(), None),
    };
    let filter = match filter {
        None => None,
        Some("url") => Some(Filter::Url),
        Some("json") => Some(Filter::Json),
        Some("hex") => Some(Filter::Hex),
        Some(other) => return Err(RefError::Filter(other.to_string())),
    };
    let var = if let Some(env) = name.strip_prefix("env:") {
        if env.is_empty() || !env.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(RefError::EnvName(env.to_string()));
        }
        Var::Env(env.to_string())
    } else if let Some((gen, args)) = name.strip_suffix(')').and_then(|n| n.split_once('(')) {
        Var::Gen(parse_generator(gen.trim(), args)?)
    } else {
        match name {
            "session.index" => Var::Builtin(Builtin::SessionIndex),
            "session.agent" => Var::Builtin(Builtin::Agent),
            "run.id" => Var::Builtin(Builtin::RunId),
            "now" | "now.ms" => Var::Builtin(Builtin::Now(TimeFormat::Millis)),
            "now.s" => Var::Builtin(Builtin::Now(TimeFormat::Seconds)),
            "now.iso" => Var::Builtin(Builtin::Now(TimeFormat::Iso)),
            _ => match name.split_once('.') {
                Some(("setup", name)) if is_name(name) => Var::Setup(name.to_string()),
                Some((source, column)) if is_name(source) && !column.is_empty() => {
                    if RESERVED.contains(&source) {
                        return Err(RefError::NotBuiltin(name.to_string()));
                    }
                    Var::Data {
                        source: source.to_string(),
                        column: column.to_string(),
                    }
                }
                None if is_name(name) => Var::Extracted(name.to_string()),
                _ => return Err(RefError::NotName(name.to_string())),
            },
        }
    };
    Ok(Ref { var, filter })
}

fn parse_generator(name: &str, args: &str) -> Result<Generator, RefError> {
    let nums = || -> Result<Vec<i64>, RefError> {
        if args.trim().is_empty() {
            return Ok(Vec::new());
        }
        args.split(',')
            .map(|a| {
                a.trim()
                    .parse::<i64>()
                    .map_err(|_| RefError::NotInteger(a.trim().to_string()))
            })
            .collect()
    };
    match (name, nums()?.as_slice()) {
        ("uuid", []) => Ok(Generator::Uuid),
        ("int", [min, max]) if min <= max => Ok(Generator::Int {
            min: *min,
            max: *max,
        }),
        ("int", [_, _]) => Err(RefError::IntRange),
        ("seq", []) => Ok(Generator::Seq { start: 0, step: 1 }),
        ("seq", [start]) => Ok(Generator::Seq {
            start: *start,
            step: 1,
        }),
        ("seq", [start, step]) => Ok(Generator::Seq {
            start: *start,
            step: *step,
        }),
        _ => Err(RefError::NotGenerator(format!("{name}({args})"))),
    }
}

/// Writes `value` through `filter` to `out`.
pub fn apply_filter(filter: Option<Filter>, value: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match filter {
        None => out.extend_from_slice(value),
        Some(Filter::Hex) => {
            for &b in value {
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 15)]);
            }
        }
        Some(Filter::Url) => {
            for &b in value {
                if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                    out.push(b);
                } else {
                    out.extend_from_slice(&[
                        b'%',
                        HEX[usize::from(b >> 4)].to_ascii_uppercase(),
                        HEX[usize::from(b & 15)].to_ascii_uppercase(),
                    ]);
                }
            }
        }
        Some(Filter::Json) => {
            for &b in value {
                match b {
                    b'"' => out.extend_from_slice(b"\\\""),
                    b'\\' => out.extend_from_slice(b"\\\\"),
                    b'\n' => out.extend_from_slice(b"\\n"),
                    b'\r' => out.extend_from_slice(b"\\r"),
                    b'\t' => out.extend_from_slice(b"\\t"),
                    0..0x20 => out.extend_from_slice(&[
                        b'\\',
                        b'u',
                        b'0',
                        b'0',
                        HEX[usize::from(b >> 4)],
                        HEX[usize::from(b & 15)],
                    ]),
                    _ => out.push(b),
                }
            }
        }
    }
}

impl std::fmt::Display for Ref {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("${")?;
        match &self.var {
            Var::Env(n) => write!(f, "env:{n}")?,
            Var::Data { source, column } => write!(f, "{source}.{column}")?,
            Var::Extracted(n) => f.write_str(n)?,
            Var::Setup(n) => write!(f, "setup.{n}")?,
            Var::Builtin(Builtin::SessionIndex) => f.write_str("session.index")?,
            Var::Builtin(Builtin::Agent) => f.write_str("session.agent")?,
            Var::Builtin(Builtin::RunId) => f.write_str("run.id")?,
            Var::Builtin(Builtin::Now(TimeFormat::Millis)) => f.write_str("now")?,
            Var::Builtin(Builtin::Now(TimeFormat::Seconds)) => f.write_str("now.s")?,
            Var::Builtin(Builtin::Now(TimeFormat::Iso)) => f.write_str("now.iso")?,
            Var::Gen(Generator::Uuid) => f.write_str("uuid()")?,
            Var::Gen(Generator::Int { min, max }) => write!(f, "int({min},{max})")?,
            Var::Gen(Generator::Seq { start, step }) => write!(f, "seq({start},{step})")?,
        }
        match self.filter {
            None => {}
            Some(Filter::Url) => f.write_str("|url")?,
            Some(Filter::Json) => f.write_str("|json")?,
            Some(Filter::Hex) => f.write_str("|hex")?,
        }
        f.write_char('}')
    }
}

/// The text of a template: [`Template::parse`] of it gives the template back. In a literal,
/// a run of `$` is doubled where a `{` follows it, in the literal or as the start of the next
/// reference (a value ending in `$` before a reference stays a `$`).
impl std::fmt::Display for Template {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, s) in self.segments.iter().enumerate() {
            match s {
                Segment::Literal(text) => {
                    let brace_next = match self.segments.get(i + 1) {
                        Some(Segment::Ref(_)) => true,
                        Some(Segment::Literal(next)) => next.starts_with('{'),
                        None => false,
                    };
                    write_literal(f, text, brace_next)?;
                }
                Segment::Ref(r) => write!(f, "{r}")?,
            }
        }
        Ok(())
    }
}

/// Writes literal text, doubling each run of `$` that a `{` follows (`brace_next`: one
/// follows the text's end).
fn write_literal(
    f: &mut std::fmt::Formatter<'_>,
    text: &str,
    brace_next: bool,
) -> std::fmt::Result {
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        f.write_str(&rest[..at])?;
        let run = rest[at..].bytes().take_while(|&b| b == b'$').count();
        let after = &rest[at + run..];
        let doubled = if after.is_empty() {
            brace_next
        } else {
            after.starts_with('{')
        };
        for _ in 0..if doubled { 2 * run } else { run } {
            f.write_char('$')?;
        }
        rest = after;
    }
    f.write_str(rest)
}

impl TryFrom<String> for Template {
    type Error = TemplateError;
    fn try_from(s: String) -> Result<Self, TemplateError> {
        Self::parse(&s)
    }
}

impl From<Template> for String {
    fn from(t: Template) -> String {
        t.to_string()
    }
}

impl Default for Template {
    fn default() -> Self {
        Self::literal("")
    }
}

impl JsonSchema for Template {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Template".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "Text with optional ${...} references: ${name} (extracted earlier), ${setup.name} (extracted by a setup step), ${source.column} (data), ${env:NAME}, ${session.index}, ${session.agent}, ${run.id}, ${now} (Unix ms), ${now.s}, ${now.iso}, ${uuid()}, ${int(MIN,MAX)}, ${seq(START,STEP)}; filters |url |json |hex; $${ is a literal ${."
        })
    }
}

/// Writes `unix_ms` (milliseconds since the Unix epoch) to `out` in `format`.
pub fn write_time(unix_ms: u64, format: TimeFormat, out: &mut Vec<u8>) {
    use std::io::Write as _;
    let _ = match format {
        TimeFormat::Millis => write!(out, "{unix_ms}"),
        TimeFormat::Seconds => write!(out, "{}", unix_ms / 1000),
        TimeFormat::Iso => {
            let (secs, ms) = (unix_ms / 1000, unix_ms % 1000);
            let (days, rest) = (secs / 86_400, secs % 86_400);
            let (y, m, d) = civil_from_days(days);
            write!(
                out,
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
                rest / 3600,
                rest % 3600 / 60,
                rest % 60
            )
        }
    };
}

/// The proleptic Gregorian date of `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// The per-session generator: seeded from the run seed and the arrival index only, so the
/// same arrival draws the same values whatever the number of agents.
pub fn session_rng(seed: u64, index: u64) -> rand_chacha::ChaCha8Rng {
    keyed_rng(seed, index, b"sessions")
}

/// The generator of a session's think times: like [`session_rng`], but a stream of its own,
/// so adding a think time does not change the values the session generates.
pub fn think_rng(seed: u64, index: u64) -> rand_chacha::ChaCha8Rng {
    keyed_rng(seed, index, b"thinking")
}

fn keyed_rng(seed: u64, index: u64, domain: &[u8; 8]) -> rand_chacha::ChaCha8Rng {
    use rand::SeedableRng;
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&index.to_le_bytes());
    key[16..24].copy_from_slice(domain);
    rand_chacha::ChaCha8Rng::from_seed(key)
}

/// Writes a generated value for session `index` to `out` (unfiltered).
pub fn generate(g: Generator, index: u64, rng: &mut impl rand::Rng, out: &mut Vec<u8>) {
    match g {
        Generator::Uuid => {
            let bytes: [u8; 16] = rng.random();
            let id = uuid::Builder::from_random_bytes(bytes).into_uuid();
            let mut buf = uuid::Uuid::encode_buffer();
            out.extend_from_slice(id.hyphenated().encode_lower(&mut buf).as_bytes());
        }
        Generator::Int { min, max } => {
            let v = rng.random_range(min..=max);
            out.extend_from_slice(v.to_string().as_bytes());
        }
        Generator::Seq { start, step } => {
            let v = i128::from(start) + i128::from(step) * i128::from(index);
            out.extend_from_slice(v.to_string().as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_literals_refs_and_filters() {
        let t = Template::parse("/u/${users.name|url}?t=${token}&i=${session.index}").unwrap();
        assert_eq!(t.as_static(), None);
        let refs: Vec<_> = t.refs().map(|r| r.var.clone()).collect();
        assert_eq!(
            refs,
            [
                Var::Data {
                    source: "users".into(),
                    column: "name".into()
                },
                Var::Extracted("token".into()),
                Var::Builtin(Builtin::SessionIndex),
            ]
        );
        assert_eq!(t.refs().next().unwrap().filter, Some(Filter::Url));
        assert_eq!(
            t.to_string(),
            "/u/${users.name|url}?t=${token}&i=${session.index}"
        );
        let s = Template::parse("/plain?a=$1&b=$${x}").unwrap();
        assert_eq!(s.as_static(), Some("/plain?a=$1&b=${x}"));
        assert_eq!(Template::parse(&s.to_string()).unwrap(), s);
        assert_eq!(Template::parse("").unwrap().as_static(), Some(""));
        let g = Template::parse("${uuid()}${int(1, 5)}${seq(10,2)}${env:HOME|json}").unwrap();
        let vars: Vec<_> = g.refs().map(|r| r.var.clone()).collect();
        assert_eq!(
            vars,
            [
                Var::Gen(Generator::Uuid),
                Var::Gen(Generator::Int { min: 1, max: 5 }),
                Var::Gen(Generator::Seq { start: 10, step: 2 }),
                Var::Env("HOME".into()),
            ]
        );
    }

    /// An `${env:}` value ending in `$` before a reference: the text sent on is re-parsed by
    /// the controller and agents, and must still hold the reference.
    #[test]
    fn a_dollar_before_a_reference_survives_the_text() {
        let mut t = Template::parse("/x/${env:PRICE}${session.index}").unwrap();
        t.resolve_env(&|_| Some("5$".into())).unwrap();
        let again = Template::parse(&t.to_string()).unwrap();
        assert_eq!(again, t);
        assert_eq!(
            again.segments(),
            [
                Segment::Literal("/x/5$".into()),
                Segment::Ref(Ref {
                    var: Var::Builtin(Builtin::SessionIndex),
                    filter: None
                })
            ]
        );
        for (text, lit) in [
            ("$${x}", "${x}"),
            ("a$$$${", "a$${"),
            ("$$", "$$"),
            ("$}", "$}"),
        ] {
            assert_eq!(
                Template::parse(text).unwrap().as_static(),
                Some(lit),
                "{text}"
            );
        }
    }

    fn segment() -> impl Strategy<Value = Segment> {
        let r = prop_oneof![
            Just(Var::Builtin(Builtin::SessionIndex)),
            Just(Var::Extracted("tok".into())),
            Just(Var::Data {
                source: "users".into(),
                column: "name".into()
            }),
            Just(Var::Gen(Generator::Int { min: -1, max: 7 })),
        ];
        let filter = prop_oneof![Just(None), Just(Some(Filter::Url)), Just(Some(Filter::Hex))];
        prop_oneof![
            "[$${}a]{1,8}".prop_map(Segment::Literal),
            (r, filter).prop_map(|(var, filter)| Segment::Ref(Ref { var, filter })),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Any template (literals of `$`, `{`, `}` and text between references) is what its
        /// text parses back to.
        #[test]
        fn the_text_parses_back_to_the_template(parts in prop::collection::vec(segment(), 0..8)) {
            // The parser's form: adjacent literals merged, no empty literal but the only one.
            let mut segments: Vec<Segment> = Vec::new();
            for p in parts {
                match (segments.last_mut(), p) {
                    (Some(Segment::Literal(a)), Segment::Literal(b)) => a.push_str(&b),
                    (_, p) => segments.push(p),
                }
            }
            if segments.is_empty() {
                segments.push(Segment::Literal(String::new()));
            }
            let t = Template { segments };
            let text = t.to_string();
            prop_assert_eq!(Template::parse(&text).unwrap(), t, "{}", text);
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        for (text, want) in [
            ("/a/${token", "is not closed"),
            ("${a|base64}", "is not a filter"),
            ("${1abc}", "is not a variable name"),
            ("${session.user}", "is not a built-in"),
            ("${int(5,1)}", "MIN <= MAX"),
            ("${int(a,1)}", "is not an integer"),
            ("${rand()}", "is not a generator"),
            ("${env:}", "environment variable"),
        ] {
            let e = Template::parse(text).unwrap_err();
            assert!(e.to_string().contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn env_is_resolved_and_merged_into_literals() {
        let mut t = Template::parse("Bearer ${env:KEY}!").unwrap();
        let lookup = |n: &str| (n == "KEY").then(|| "a b".to_string());
        assert!(t.resolve_env(&lookup).unwrap());
        assert_eq!(t.as_static(), Some("Bearer a b!"));
        let mut u = Template::parse("${env:KEY|url}").unwrap();
        u.resolve_env(&lookup).unwrap();
        assert_eq!(u.as_static(), Some("a%20b"));
        let mut missing = Template::parse("${env:NOPE}").unwrap();
        assert!(missing
            .resolve_env(&lookup)
            .unwrap_err()
            .to_string()
            .contains("NOPE"));
    }

    #[test]
    fn now_parses_and_writes_the_time() {
        let t = Template::parse("${now}|${now.s}|${now.iso|url}").unwrap();
        let vars: Vec<_> = t.refs().map(|r| r.var.clone()).collect();
        assert_eq!(
            vars,
            [
                Var::Builtin(Builtin::Now(TimeFormat::Millis)),
                Var::Builtin(Builtin::Now(TimeFormat::Seconds)),
                Var::Builtin(Builtin::Now(TimeFormat::Iso)),
            ]
        );
        assert_eq!(Template::parse(&t.to_string()).unwrap(), t);
        let setup = Template::parse("Bearer ${setup.token}").unwrap();
        assert_eq!(setup.refs().next().unwrap().var, Var::Setup("token".into()));
        assert_eq!(setup.to_string(), "Bearer ${setup.token}");
        assert!(Template::parse("${now.x}")
            .unwrap_err()
            .to_string()
            .contains("is not a built-in"));
        let write = |ms, f| {
            let mut out = Vec::new();
            write_time(ms, f, &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            write(1_700_000_000_123, TimeFormat::Millis),
            "1700000000123"
        );
        assert_eq!(write(1_700_000_000_123, TimeFormat::Seconds), "1700000000");
        assert_eq!(
            write(1_700_000_000_123, TimeFormat::Iso),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(write(0, TimeFormat::Iso), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            write(951_782_400_000, TimeFormat::Iso),
            "2000-02-29T00:00:00.000Z"
        );
    }

    #[test]
    fn filters_escape() {
        let mut out = Vec::new();
        apply_filter(Some(Filter::Url), "a b/ü".as_bytes(), &mut out);
        assert_eq!(out, b"a%20b%2F%C3%BC");
        out.clear();
        apply_filter(Some(Filter::Json), b"q\"\\\n\x01", &mut out);
        assert_eq!(out, b"q\\\"\\\\\\n\\u0001");
        out.clear();
        apply_filter(Some(Filter::Hex), b"\x01\xab", &mut out);
        assert_eq!(out, b"01ab");
    }

    #[test]
    fn generators_depend_on_seed_and_index_only() {
        let draw = |seed, index| {
            let mut rng = session_rng(seed, index);
            let mut out = Vec::new();
            generate(Generator::Uuid, index, &mut rng, &mut out);
            generate(Generator::Int { min: 1, max: 6 }, index, &mut rng, &mut out);
            generate(
                Generator::Seq {
                    start: 100,
                    step: 3,
                },
                index,
                &mut rng,
                &mut out,
            );
            String::from_utf8(out).unwrap()
        };
        assert_eq!(draw(7, 42), draw(7, 42));
        assert_ne!(draw(7, 42), draw(7, 43));
        assert_ne!(draw(7, 42), draw(8, 42));
        let v = draw(7, 42);
        assert_eq!(&v[14..15], "4", "a version 4 UUID: {v}");
        assert!(v.ends_with("226"), "{v}");
    }
}
