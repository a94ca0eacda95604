//! The text form of a template: what a parsed template serializes back to, so that the
//! scenario the CLI resolved (`${env:}` values merged into literals) reaches the controller
//! and the agents as text that parses to the same template. Kept apart from the parser
//! because the escaping of `$` here is the parser's inverse, and the round-trip property
//! test checks the two together.

use std::fmt::Write as _;

use super::{Builtin, Filter, Generator, Ref, Segment, Template, TemplateError, TimeFormat, Var};

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
}
