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
//!
//! This module parses; `template/text` writes a template back as text (the parser's
//! inverse), and `template/render` holds what a reference writes per request (filters, time
//! formats, generators).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod render;
mod text;

pub use render::{apply_filter, generate, session_rng, think_fraction, write_time};

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
    /// What it reads.
    pub var: Var,
    /// How the value is escaped before it is written (`| url`, `| json`, `| hex`); `None` writes it
    /// as it is.
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
        /// The data source's name.
        source: String,
        /// The column read from the session's row.
        column: String,
    },
    /// `${name}`: extracted by an earlier step.
    Extracted(String),
    /// `${setup.name}`: extracted by a setup step (run once per agent before the load).
    Setup(String),
    /// `${session.index}`, `${session.agent}`, `${run.id}` or `${now…}`: values every session has.
    Builtin(Builtin),
    /// `${uuid()}`, `${int(MIN,MAX)}` or `${seq(START,STEP)}`: drawn per use from the session's
    /// seeded generator.
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
    Int {
        /// The smallest value drawn.
        min: i64,
        /// The largest value drawn.
        max: i64,
    },
    /// `${seq(START,STEP)}`: `START + STEP × session.index` (a unique number per session).
    Seq {
        /// The first session's value.
        start: i64,
        /// Added per session index.
        step: i64,
    },
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

    /// The literal texts and references, in order; adjacent literals are one segment.
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn now_and_setup_references_parse() {
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
    }
}
