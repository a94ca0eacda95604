//! `multipart/form-data` request bodies (`http: { multipart: [...] }`): the parts a step
//! sends, checked field by field, and their assembly into the step's body template.
//!
//! ```yaml
//! - http:
//!     method: POST
//!     path: /upload
//!     multipart:
//!       - { name: user, value: '${users.name}' }
//!       - { name: report, file: report.csv, filename: 'r-${session.index}.csv', content_type: text/csv }
//! ```
//!
//! The CLI reads each part's `file` (UTF-8 text, templated like `value`), then writes the
//! whole body as one template (the parts between boundary lines, RFC 7578) and the
//! `content-type: multipart/form-data; boundary=...` header, so agents send it as any other
//! templated body. The boundary is generated from the parts' text and checked absent from
//! every fixed piece of it; a rendered value holding it is as unlikely as a 32-digit guess.

use std::hash::{Hash, Hasher};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::template::{Segment, Template};

/// Most parts a body may have.
pub const MAX_PARTS: usize = 100;

/// One part of a `multipart/form-data` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FormPart {
    /// The form field's name.
    pub name: String,
    /// The part's content; a template. Excludes `file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Template>,
    /// The content from a UTF-8 file, relative to the scenario file, read by the CLI and
    /// templated like `value` (the submitted scenario carries the assembled body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The file name the server is told (a file part); a template. Default for a `file`
    /// part: the file's base name; none for a `value` part (a plain form field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<Template>,
    /// The part's `content-type` (`text/csv`); default none, which servers read as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
}

/// Checks the parts; the error is `(field suffix, reason)` (`[1].name`).
pub fn check(parts: &[FormPart]) -> Result<(), (String, String)> {
    if parts.len() > MAX_PARTS {
        return Err((String::new(), format!("at most {MAX_PARTS} parts")));
    }
    // Quotes and line breaks would end the header that carries them.
    let plain = |s: &str| s.chars().all(|c| c != '"' && c != '\\' && !c.is_control());
    for (i, p) in parts.iter().enumerate() {
        let at = |f: &str| format!("[{i}].{f}");
        if p.name.is_empty() || !plain(&p.name) {
            return Err((
                at("name"),
                "a field name is not empty and holds no quote, backslash or control character"
                    .into(),
            ));
        }
        match (&p.value, &p.file) {
            (Some(_), Some(_)) => {
                return Err((at("file"), "give value or file, not both".into()));
            }
            (None, None) => return Err((at("value"), "give value or file".into())),
            _ => {}
        }
        if let Some(f) = &p.filename {
            let fixed = f.segments().iter().all(|s| match s {
                Segment::Literal(l) => plain(l),
                Segment::Ref(_) => true,
            });
            if !fixed {
                return Err((
                    at("filename"),
                    "a file name holds no quote, backslash or control character".into(),
                ));
            }
        }
        if let Some(ct) = &p.content_type {
            if ct.is_empty() || !ct.bytes().all(|b| (0x20..0x7f).contains(&b)) {
                return Err((
                    at("content_type"),
                    "a content type is printable ASCII (text/csv)".into(),
                ));
            }
        }
    }
    Ok(())
}

/// The body template and the `content-type` value of `parts`, once every part has its
/// value (the CLI has read the files); `None` while one still names a file.
pub fn assemble(parts: &[FormPart]) -> Option<(Template, String)> {
    let values: Vec<&Template> = parts
        .iter()
        .map(|p| p.value.as_ref())
        .collect::<Option<_>>()?;
    let boundary = boundary(parts);
    let mut pieces = Vec::new();
    let lit = |s: String| Template::literal(s);
    for (p, value) in parts.iter().zip(values) {
        pieces.push(lit(format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{}\"",
            p.name
        )));
        if let Some(f) = &p.filename {
            pieces.push(lit("; filename=\"".into()));
            pieces.push(f.clone());
            pieces.push(lit("\"".into()));
        }
        pieces.push(lit("\r\n".into()));
        if let Some(ct) = &p.content_type {
            pieces.push(lit(format!("Content-Type: {ct}\r\n")));
        }
        pieces.push(lit("\r\n".into()));
        pieces.push(value.clone());
        pieces.push(lit("\r\n".into()));
    }
    pieces.push(lit(format!("--{boundary}--\r\n")));
    Some((
        Template::concat(pieces),
        format!("multipart/form-data; boundary={boundary}"),
    ))
}

/// A boundary made from the parts' text, absent from every fixed piece of it.
fn boundary(parts: &[FormPart]) -> String {
    let literals: Vec<&str> = parts
        .iter()
        .flat_map(|p| p.value.iter().chain(&p.filename))
        .flat_map(|t| t.segments())
        .filter_map(|s| match s {
            Segment::Literal(l) => Some(l.as_str()),
            Segment::Ref(_) => None,
        })
        .chain(parts.iter().map(|p| p.name.as_str()))
        .collect();
    let mut salt = 0u64;
    loop {
        let mut a = std::collections::hash_map::DefaultHasher::new();
        (salt, &literals).hash(&mut a);
        let mut b = std::collections::hash_map::DefaultHasher::new();
        (salt, "stampede", &literals).hash(&mut b);
        let candidate = format!("stampede-{:016x}{:016x}", a.finish(), b.finish());
        if !literals.iter().any(|l| l.contains(&candidate)) {
            return candidate;
        }
        salt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(name: &str, value: &str) -> FormPart {
        FormPart {
            name: name.into(),
            value: Some(Template::parse(value).unwrap()),
            file: None,
            filename: None,
            content_type: None,
        }
    }

    #[test]
    fn parts_assemble_between_boundaries_with_their_templates() {
        let mut file = part("report", "id\n${session.index}\n");
        file.filename = Some(Template::parse("r-${session.index}.csv").unwrap());
        file.content_type = Some("text/csv".into());
        let parts = [part("user", "u"), file];
        check(&parts).unwrap();
        let (body, ct) = assemble(&parts).unwrap();
        let b = ct.strip_prefix("multipart/form-data; boundary=").unwrap();
        assert_eq!(b, boundary(&parts), "the same parts give the same boundary");
        let refs: Vec<String> = body.refs().map(|r| format!("{r:?}")).collect();
        assert_eq!(refs.len(), 2, "{refs:?}");
        let fixed: String = body
            .segments()
            .iter()
            .map(|s| match s {
                Segment::Literal(l) => l.as_str(),
                Segment::Ref(_) => "#",
            })
            .collect();
        assert_eq!(
            fixed,
            format!(
                "--{b}\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\nu\r\n\
                 --{b}\r\nContent-Disposition: form-data; name=\"report\"; filename=\"r-#.csv\"\r\n\
                 Content-Type: text/csv\r\n\r\nid\n#\n\r\n--{b}--\r\n"
            )
        );
    }

    #[test]
    fn a_boundary_never_appears_in_the_fixed_text() {
        let parts = [part("a", "x")];
        let first = boundary(&parts);
        let holding = [part("a", &format!("..{first}.."))];
        assert!(!format!("..{first}..").contains(&boundary(&holding)));
    }

    #[test]
    fn bad_parts_name_their_field() {
        let mut both = part("a", "x");
        both.file = Some("f".into());
        let mut neither = part("a", "x");
        neither.value = None;
        let mut ct = part("a", "x");
        ct.content_type = Some("text/csv\r\nx: y".into());
        let mut quoted = part("a", "x");
        quoted.filename = Some(Template::literal("a\"b"));
        for (p, field) in [
            (part("", "x"), "[0].name"),
            (part("a\"b", "x"), "[0].name"),
            (both, "[0].file"),
            (neither, "[0].value"),
            (ct, "[0].content_type"),
            (quoted, "[0].filename"),
        ] {
            assert_eq!(check(&[p]).unwrap_err().0, field);
        }
        let mut unread = part("a", "x");
        unread.value = None;
        unread.file = Some("f.csv".into());
        assert!(assemble(&[unread]).is_none());
    }
}
