//! YAML aliases, bounded before anything is allocated for them.
//!
//! The scenario parser (serde) expands every alias into a fresh copy of its anchor, so a few
//! MiB of `*a, *a, …` pointing at a large anchor become gigabytes before validation could
//! refuse the result. This pass walks the document's events with a separate event parser,
//! which never expands aliases, and adds up the size the expansion would have: past a small
//! multiple of the text it is refused, naming the alias.

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// How much larger than its text a scenario may become once its aliases are expanded.
pub const MAX_EXPANSION: u64 = 4;
/// Expansion allowed whatever the text's size (anchors for a few shared headers).
pub const MIN_EXPANDED_BYTES: u64 = 1 << 20;

/// Refuses a document whose aliases would expand it past `max(4 × its size, 1 MiB)`. The
/// message names the alias's line and column. Syntax errors are left to the real parser,
/// which reports them with the field.
pub fn check_aliases(text: &str) -> Result<(), String> {
    if !text.contains('*') {
        return Ok(()); // no alias can be written without one
    }
    let limit = (text.len() as u64)
        .saturating_mul(MAX_EXPANSION)
        .max(MIN_EXPANDED_BYTES);
    let mut budget = Budget {
        limit,
        ..Budget::default()
    };
    let mut parser = Parser::new_from_str(text);
    let _ = parser.load(&mut budget, true);
    match budget.refused {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

#[derive(Default)]
struct Budget {
    /// Expanded size of each finished anchor, by anchor id.
    anchors: std::collections::HashMap<usize, u64>,
    /// Open collections: (anchor id, expanded size so far).
    open: Vec<(usize, u64)>,
    total: u64,
    limit: u64,
    refused: Option<String>,
}

impl Budget {
    fn add(&mut self, size: u64) {
        if let Some(top) = self.open.last_mut() {
            top.1 = top.1.saturating_add(size);
        }
    }
}

impl MarkedEventReceiver for Budget {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.refused.is_some() {
            return;
        }
        match ev {
            Event::Scalar(value, _, anchor, _) => {
                let size = value.len() as u64 + 1;
                if anchor > 0 {
                    self.anchors.insert(anchor, size);
                }
                self.total = self.total.saturating_add(size);
                self.add(size);
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                self.total = self.total.saturating_add(1);
                self.open.push((anchor, 1));
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((anchor, size)) = self.open.pop() {
                    if anchor > 0 {
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
                    self.refused = Some(format!(
                        "line {} column {}: YAML aliases would expand the scenario to more than {} bytes ({}× its text); write the values out or use fewer aliases",
                        mark.line(),
                        mark.col() + 1,
                        self.limit,
                        MAX_EXPANSION
                    ));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_anchors_pass() {
        let text = "name: &n x\ntarget: http://h:1\nsession:\n  - http: &h { path: / }\n  - http: *h\nthresholds: [*n]\n";
        assert!(check_aliases(text).is_ok());
    }

    #[test]
    fn an_alias_bomb_is_refused_without_expanding_it() {
        let big = "x".repeat(65_536);
        let aliases = vec!["*s"; 20_000].join(", ");
        let text =
            format!("name: &s \"{big}\"\ntarget: http://127.0.0.1:1\nthresholds: [{aliases}]\n");
        let e = check_aliases(&text).unwrap_err();
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
        assert!(check_aliases(&laughs).is_err());
    }
}
