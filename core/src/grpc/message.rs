//! A gRPC step's request message as written: protobuf JSON whose string values may hold
//! templates (`text: 'hi ${users.name}'`, `id: '${users.id}'`). The templates are parsed once,
//! when the scenario is read, so validation checks their references like any other step's
//! and the CLI's `${env:...}` resolution reaches them; the JSON itself is kept as written.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::template::Template;

/// The message of a gRPC call and the templates its string values hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GrpcMessage {
    json: serde_json::Value,
    /// Every string value holding `${`, by its field path (`inner.note`, `tags[1]`), parsed.
    templates: Vec<(String, Template)>,
    /// The first string that does not parse as a template: `(path, reason)`, reported by
    /// validation with the field named (deserialization itself never fails on it).
    error: Option<(String, String)>,
}

impl GrpcMessage {
    /// The message of `json`, its templates parsed.
    pub fn new(json: serde_json::Value) -> Self {
        let mut m = Self {
            json,
            templates: Vec::new(),
            error: None,
        };
        let mut found = Vec::new();
        walk(&m.json, String::new(), &mut found);
        for (path, text) in found {
            match Template::parse(&text) {
                Ok(t) => m.templates.push((path, t)),
                Err(why) if m.error.is_none() => m.error = Some((path, why.to_string())),
                Err(_) => {}
            }
        }
        m
    }

    /// The message as written.
    pub fn json(&self) -> &serde_json::Value {
        &self.json
    }

    /// No message given: the empty message.
    pub fn is_null(&self) -> bool {
        self.json.is_null()
    }

    /// The templates of the message's string values, by field path.
    pub fn templates(&self) -> impl Iterator<Item = (&str, &Template)> {
        self.templates.iter().map(|(p, t)| (p.as_str(), t))
    }

    /// Mutable access to the templates (the CLI's `${env:...}` resolution): what the CLI
    /// encodes is read from here, not from the JSON.
    pub fn templates_mut(&mut self) -> impl Iterator<Item = (&str, &mut Template)> {
        self.templates.iter_mut().map(|(p, t)| (p.as_str(), t))
    }

    /// The template of the string at `path`, if that string holds `${`.
    pub fn template_at(&self, path: &str) -> Option<&Template> {
        self.templates
            .iter()
            .find_map(|(p, t)| (p == path).then_some(t))
    }

    /// Whether a template that is not plain text (a reference) is at `path` or inside it.
    pub fn has_references_in(&self, path: &str) -> bool {
        self.templates.iter().any(|(p, t)| {
            t.as_static().is_none()
                && (path.is_empty()
                    || p == path
                    || p.strip_prefix(path)
                        .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('[')))
        })
    }

    /// Whether any string of the message holds a reference.
    pub fn has_references(&self) -> bool {
        self.has_references_in("")
    }

    /// The JSON with every template that is plain text (`$${` escapes, resolved
    /// `${env:...}`) replaced by its text: what a message without references encodes.
    pub fn literal_json(&self) -> serde_json::Value {
        let mut json = self.json.clone();
        for (path, t) in &self.templates {
            if let (Some(text), Some(v)) = (t.as_static(), at_mut(&mut json, path)) {
                *v = serde_json::Value::String(text.to_string());
            }
        }
        json
    }

    /// A map of fields (or nothing), and templates that parse; the error is
    /// `(field path relative to the message, reason)`.
    pub fn check(&self) -> Result<(), (String, String)> {
        if !(self.json.is_object() || self.json.is_null()) {
            return Err((
                String::new(),
                "must be a map of the message's fields (protobuf JSON)".into(),
            ));
        }
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

/// `parent.key`, or `key` at the top.
pub fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// Every string holding `${` under `v`, with its path.
fn walk(v: &serde_json::Value, at: String, out: &mut Vec<(String, String)>) {
    match v {
        serde_json::Value::String(s) if s.contains("${") => out.push((at, s.clone())),
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                walk(x, format!("{at}[{i}]"), out);
            }
        }
        serde_json::Value::Object(o) => {
            for (k, x) in o {
                walk(x, join(&at, k), out);
            }
        }
        _ => {}
    }
}

/// The value at `path` (as [`walk`] writes paths).
fn at_mut<'v>(mut v: &'v mut serde_json::Value, path: &str) -> Option<&'v mut serde_json::Value> {
    // Keys may hold dots or brackets only in hostile input; the walk's own paths are found
    // by walking again and comparing, which needs no parsing of the path.
    fn find<'v>(
        v: &'v mut serde_json::Value,
        at: String,
        path: &str,
    ) -> Option<&'v mut serde_json::Value> {
        if at == path {
            return Some(v);
        }
        if !at.is_empty() && !path.starts_with(&at) {
            return None;
        }
        match v {
            serde_json::Value::Array(a) => a
                .iter_mut()
                .enumerate()
                .find_map(|(i, x)| find(x, format!("{at}[{i}]"), path)),
            serde_json::Value::Object(o) => {
                o.iter_mut().find_map(|(k, x)| find(x, join(&at, k), path))
            }
            _ => None,
        }
    }
    v = find(v, String::new(), path)?;
    Some(v)
}

impl From<serde_json::Value> for GrpcMessage {
    fn from(json: serde_json::Value) -> Self {
        Self::new(json)
    }
}

/// The JSON with each template written back as it now is: a `${env:...}` the CLI resolved is
/// submitted as its value, so agents (which refuse environment references) never see it.
impl Serialize for GrpcMessage {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.templates.is_empty() {
            return self.json.serialize(s);
        }
        let mut json = self.json.clone();
        for (path, t) in &self.templates {
            if let Some(v) = at_mut(&mut json, path) {
                *v = serde_json::Value::String(t.to_string());
            }
        }
        json.serialize(s)
    }
}

impl<'de> Deserialize<'de> for GrpcMessage {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(d).map(Self::new)
    }
}

/// Any JSON value, as the message was before it held templates.
impl JsonSchema for GrpcMessage {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> std::borrow::Cow<'static, str> {
        <serde_json::Value as JsonSchema>::schema_name()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <serde_json::Value as JsonSchema>::json_schema(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn templates_are_found_by_path_and_plain_text_is_literal() {
        let m = GrpcMessage::new(json!({
            "text": "hi ${users.name}",
            "id": 7,
            "tags": ["a", "${uuid()}"],
            "inner": { "note": "cost $${x}" },
        }));
        let paths: Vec<&str> = m.templates().map(|(p, _)| p).collect();
        assert_eq!(paths, ["inner.note", "tags[1]", "text"]);
        assert!(m.has_references());
        assert!(m.has_references_in("tags"));
        assert!(!m.has_references_in("inner"));
        assert!(!m.has_references_in("tex"));
        assert_eq!(m.literal_json()["inner"]["note"], "cost ${x}");
        assert_eq!(m.literal_json()["text"], "hi ${users.name}");
        m.check().unwrap();
        // Serialized as written.
        assert_eq!(
            serde_json::to_value(&m).unwrap()["inner"]["note"],
            "cost $${x}"
        );

        // A resolved environment reference is written back as its value.
        let mut env = GrpcMessage::new(json!({ "a": { "b": "k=${env:KEY}" } }));
        for (_, t) in env.templates_mut() {
            t.resolve_env(&|_| Some("v${x}".into())).unwrap();
        }
        let back = GrpcMessage::new(serde_json::to_value(&env).unwrap());
        assert_eq!(back.json()["a"]["b"], "k=v$${x}");
        assert!(!back.has_references());
        assert_eq!(back.literal_json()["a"]["b"], "k=v${x}");

        let bad = GrpcMessage::new(json!({ "inner": { "note": "${nope" } }));
        assert_eq!(bad.check().unwrap_err().0, "inner.note");
        assert_eq!(GrpcMessage::new(json!([1])).check().unwrap_err().0, "");
        assert!(!GrpcMessage::new(json!({ "a": "$${b}" })).has_references());
    }
}
