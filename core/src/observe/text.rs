//! The Prometheus text exposition format, one sample line at a time: the metric's name, its
//! labels, its value and its optional timestamp. Shared by the process metrics of `observe:`
//! and the kubelet's cAdvisor metrics of a cluster target's pods.
//!
//! Nothing is trusted: a line that does not parse (an unterminated label value, a value that
//! is not a finite number) is skipped, never an error and never a panic; no length in the text
//! sizes anything.

/// One sample line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleLine<'a> {
    /// The metric's name.
    pub name: &'a str,
    /// The text between the braces (without them), empty without labels; read it with
    /// [`SampleLine::label`].
    pub labels: &'a str,
    /// The sample's value (finite: a line with any other is skipped).
    pub value: f64,
    /// Milliseconds since the Unix epoch, when the exporter stamped the sample (cAdvisor does:
    /// its figures are as old as its last housekeeping, not the scrape).
    pub timestamp_ms: Option<i64>,
}

impl<'a> SampleLine<'a> {
    /// The raw value of label `key` (escapes left as they are: Kubernetes names have none).
    pub fn label(&self, key: &str) -> Option<&'a str> {
        Labels(self.labels).find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

/// The sample lines of a text exposition, comments and malformed lines skipped.
pub fn samples(text: &str) -> impl Iterator<Item = SampleLine<'_>> {
    text.lines().filter_map(sample_line)
}

/// Parses one line: `name[{labels}] value [timestamp]`.
pub fn sample_line(line: &str) -> Option<SampleLine<'_>> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() {
        return None;
    }
    let rest = &line[name_end..];
    let (labels, rest) = match rest.strip_prefix('{') {
        Some(inner) => {
            let end = labels_end(inner)?;
            (&inner[..end], &inner[end + 1..])
        }
        None => ("", rest),
    };
    let mut fields = rest.split_whitespace();
    let value = fields
        .next()?
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())?;
    let timestamp_ms = fields.next().and_then(|t| t.parse::<i64>().ok());
    Some(SampleLine {
        name,
        labels,
        value,
        timestamp_ms,
    })
}

/// The index of the `}` closing a label set that starts at `s[0]`, skipping quoted values
/// (which may hold `}`, `,` or an escaped `"`); `None` when it is never closed.
fn labels_end(s: &str) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match (quoted, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (true, false, '"') => quoted = false,
            (false, _, '"') => quoted = true,
            (false, _, '}') => return Some(i),
            _ => {}
        }
    }
    None
}

/// The `key="value"` pairs of a label set; stops at the first malformed pair.
struct Labels<'a>(&'a str);

impl<'a> Iterator for Labels<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        let s = self
            .0
            .trim_start_matches(|c: char| c == ',' || c.is_whitespace());
        let eq = s.find('=')?;
        let key = s[..eq].trim();
        let after = s[eq + 1..].trim_start().strip_prefix('"')?;
        let mut escaped = false;
        let end = after.char_indices().find_map(|(i, c)| {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => return Some(i),
                _ => {}
            }
            None
        })?;
        self.0 = &after[end + 1..];
        Some((key, &after[..end]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_labels_values_and_timestamps_are_read() {
        let l = sample_line(
            r#"container_cpu_usage_seconds_total{container="http",id="/kubepods/x",name="a}b,\"c",namespace="shop",pod="web-1"} 12.5 1764417600123"#,
        )
        .unwrap();
        assert_eq!(l.name, "container_cpu_usage_seconds_total");
        assert_eq!((l.value, l.timestamp_ms), (12.5, Some(1_764_417_600_123)));
        assert_eq!(l.label("pod"), Some("web-1"));
        assert_eq!(l.label("namespace"), Some("shop"));
        assert_eq!(l.label("name"), Some(r#"a}b,\"c"#));
        assert_eq!(l.label("cpu"), None);
        let bare = sample_line("process_cpu_seconds_total 3e0").unwrap();
        assert_eq!(
            (bare.labels, bare.value, bare.timestamp_ms),
            ("", 3.0, None)
        );
    }

    #[test]
    fn malformed_lines_are_skipped() {
        for bad in [
            "# HELP x y",
            "",
            "x{pod=\"a\" 1",
            "x{pod=\"a} 1",
            "x 1e999",
            "x NaN",
            "x",
            "{pod=\"a\"} 1",
        ] {
            assert_eq!(sample_line(bad), None, "{bad}");
        }
        assert_eq!(samples("a 1\n\u{0}\nb{c=\"d\"} 2\n").count(), 2);
    }
}
