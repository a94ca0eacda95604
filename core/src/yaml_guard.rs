//! The scenario text's shape, bounded before the real parser sees it: nesting depth and
//! YAML aliases.
//!
//! The scenario parser (serde, over libyaml) takes time quadratic in the nesting depth of
//! flow collections before its own recursion limit applies (`[[[[…` 80,000 deep: 23 s), and
//! it expands every alias into a fresh copy of its anchor, so a few MiB of `*a, *a, …`
//! pointing at a large anchor become gigabytes before validation could refuse the result.
//! This pass reads the document's events with a separate event parser, which never expands
//! aliases and is stopped at the first collection deeper than [`MAX_DEPTH`] (so it costs at
//! most that much per event), and adds up the size the expansion would have: past a small
//! multiple of the text it is refused, naming the alias.

use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::Marker;

/// How much larger than its text a scenario may become once its aliases are expanded.
pub const MAX_EXPANSION: u64 = 4;
/// Expansion allowed whatever the text's size (anchors for a few shared headers).
pub const MIN_EXPANDED_BYTES: u64 = 1 << 20;
/// Deepest nesting of collections (maps and lists) a scenario may have. The deepest field of
/// a scenario is a gRPC message, which nests as deep as its schema; 64 leaves room for any
/// real one.
pub const MAX_DEPTH: usize = 64;

/// Refuses a document nested deeper than [`MAX_DEPTH`], or whose aliases would expand it past
/// `max(4 × its size, 1 MiB)`, in time linear in its size. The message names the line and
/// column. Syntax errors are left to the real parser, which reports them with the field.
pub fn check(text: &str) -> Result<(), ShapeError> {
    let limit = (text.len() as u64)
        .saturating_mul(MAX_EXPANSION)
        .max(MIN_EXPANDED_BYTES);
    let mut budget = Budget {
        limit,
        // No alias can be written without a `*`: skip the bookkeeping.
        aliases: text.contains('*'),
        ..Budget::default()
    };
    let mut parser = Parser::new_from_str(text);
    loop {
        match parser.next_token() {
            Ok((Event::StreamEnd, _)) => return Ok(()),
            Ok((ev, mark)) => budget.on_event(ev, mark)?,
            // The scanner reads up to 1,024 characters ahead of the events, and refuses flow
            // collections 256 deep on its own: `[[[[…` ends here, not at the 65th event.
            Err(e) if e.info() == "recursion limit exceeded" => return Err(too_deep(e.marker())),
            Err(_) => return Ok(()),
        }
    }
}

/// The deepest nesting of arrays and objects in `text` read as JSON (brackets inside strings
/// do not count), in one pass without allocating: JSON has no aliases, so its depth is all
/// [`check`] would have to bound.
pub fn json_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for b in text.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Why a scenario's text is refused before parsing; the message names the line and column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// Collections nested deeper than [`MAX_DEPTH`].
    #[error("line {line} column {column}: nested more than {MAX_DEPTH} levels deep (lists and maps inside each other); a scenario needs far fewer")]
    TooDeep {
        /// The line where the collection past the limit opens.
        line: usize,
        /// Its column, from 1.
        column: usize,
    },
    /// Aliases whose expansion would pass the budget.
    #[error("line {line} column {column}: YAML aliases would expand the scenario to more than {limit} bytes ({MAX_EXPANSION}× its text); write the values out or use fewer aliases")]
    AliasExpansion {
        /// The line of the alias that passed the budget.
        line: usize,
        /// Its column, from 1.
        column: usize,
        /// The budget, bytes: [`MAX_EXPANSION`] times the text's length, and at least
        /// [`MIN_EXPANDED_BYTES`].
        limit: u64,
    },
}

fn too_deep(mark: &Marker) -> ShapeError {
    ShapeError::TooDeep {
        line: mark.line(),
        column: mark.col() + 1,
    }
}

#[derive(Default)]
struct Budget {
    /// Whether aliases are counted (the text has a `*`).
    aliases: bool,
    /// Expanded size of each finished anchor, by anchor id.
    anchors: std::collections::HashMap<usize, u64>,
    /// Open collections: (anchor id, expanded size so far).
    open: Vec<(usize, u64)>,
    total: u64,
    limit: u64,
}

impl Budget {
    fn add(&mut self, size: u64) {
        if let Some(top) = self.open.last_mut() {
            top.1 = top.1.saturating_add(size);
        }
    }
}

impl Budget {
    fn on_event(&mut self, ev: Event, mark: Marker) -> Result<(), ShapeError> {
        match ev {
            Event::Scalar(value, _, anchor, _) => {
                let size = value.len() as u64 + 1;
                if anchor > 0 && self.aliases {
                    self.anchors.insert(anchor, size);
                }
                self.total = self.total.saturating_add(size);
                self.add(size);
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if self.open.len() >= MAX_DEPTH {
                    return Err(too_deep(&mark));
                }
                self.total = self.total.saturating_add(1);
                self.open.push((anchor, 1));
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((anchor, size)) = self.open.pop() {
                    if anchor > 0 && self.aliases {
                        self.anchors.insert(anchor, size);
                    }
                    self.add(size);
                }
            }
            Event::Alias(anchor) => {
                let size = self.anchors.get(&anchor).copied().unwrap_or(1);
                self.total = self.total.saturating_add(size);
                self.add(size);
                if self.total > self.limit {
                    return Err(ShapeError::AliasExpansion {
                        line: mark.line(),
                        column: mark.col() + 1,
                        limit: self.limit,
                    });
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_depth_skips_strings() {
        assert_eq!(json_depth(r#"{"a":[[1],{"b":"[[[{"}],"c":"\\\"]"}"#), 3);
        assert_eq!(json_depth("{}"), 1);
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(json_depth(&format!("{{\"a\":{deep}}}")), MAX_DEPTH + 2);
    }

    #[test]
    fn small_anchors_pass() {
        let text = "name: &n x\ntarget: http://h:1\nsession:\n  - http: &h { path: / }\n  - http: *h\nthresholds: [*n]\n";
        assert!(check(text).is_ok());
    }

    #[test]
    fn an_alias_bomb_is_refused_without_expanding_it() {
        let big = "x".repeat(65_536);
        let aliases = vec!["*s"; 20_000].join(", ");
        let text =
            format!("name: &s \"{big}\"\ntarget: http://127.0.0.1:1\nthresholds: [{aliases}]\n");
        let e = check(&text).unwrap_err().to_string();
        assert!(e.contains("aliases would expand"), "{e}");
        // Nested anchors multiply: a billion laughs in a few lines.
        let mut laughs = String::from(
            "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
        );
        for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"]
            .iter()
            .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
        {
            let row = vec![format!("*{prev}"); 9].join(",");
            laughs.push_str(&format!("{name}: &{name} [{row}]\n"));
        }
        assert!(check(&laughs).is_err());
    }

    fn nested(open: &str, close: &str, n: usize) -> String {
        format!(
            "name: x\ntarget: http://127.0.0.1:1\nthresholds: {}{}\n",
            open.repeat(n),
            close.repeat(n)
        )
    }

    /// Any nesting past the limit is refused after reading at most that many levels (the
    /// depth is counted on the parser's events, so a 100,000-deep document costs no more than
    /// a 65-deep one), with or without aliases; the limit itself passes.
    #[test]
    fn deep_nesting_is_refused_whatever_the_form() {
        // The top-level map is one level: `thresholds` at depth 63 + 1 is the limit.
        assert!(check(&nested("[", "]", MAX_DEPTH - 1)).is_ok());
        for text in [
            nested("[", "]", MAX_DEPTH),
            nested("[", "]", 100_000),
            nested("[", "]", 100_000) + "a: *b\n",
            nested("{a: ", "}", 100_000),
            format!("name: x\nthresholds:\n{}x\n", "- ".repeat(100_000)),
        ] {
            let e = check(&text).unwrap_err().to_string();
            assert!(e.contains("nested more than 64 levels deep"), "{e}");
            assert!(e.starts_with("line "), "{e}");
        }
    }
}
