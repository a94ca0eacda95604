//! A message whose fields hold references, compiled against its descriptor into the
//! descriptor-free encoding program agents render per call
//! (`stampede_core::grpc::program`). Fields without a reference are checked and encoded here
//! once, by prost-reflect, one field at a time so the program keeps protobuf's field-number
//! order; a templated scalar becomes a `field` operation (its number, type, presence and enum
//! names); a nested message holding references becomes `begin`, its own fields, `end`.
//!
//! Templates fill scalar fields, singular or nested at any depth, and the elements of
//! repeated fields: a list is encoded element by element in its order, a fixed element as
//! prost-reflect encodes it alone, a templated scalar as one occurrence of the field, a
//! message holding references as `begin`..`end` (protobuf parsers merge the occurrences of a
//! repeated field, packed or not, in order). A map is encoded entry by entry, as protobuf
//! encodes it (each entry a nested message of its key and value): a fixed entry as
//! prost-reflect encodes it alone, an entry whose value holds references as `begin`, its key,
//! its value, `end`. A well-known type with a JSON form of its own (Timestamp, Duration,
//! wrappers) holding a template is refused with the field named: give those as fixed values.

use std::collections::{BTreeMap, BTreeSet};

use prost_reflect::prost::Message as _;
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, Value as ReflectValue,
};
use serde_json::Value;
use stampede_core::grpc::message::join;
use stampede_core::grpc::program::{
    MessageProgram, ProgramBuilder, Scalar, TemplatedField, MAX_DEPTH,
};
use stampede_core::grpc::{GrpcMessage, MAX_MESSAGE};

/// `(field path relative to the message, reason)`.
pub(crate) type FieldError = (String, String);

/// Compiles `message` (which holds references) against `desc`.
pub(crate) fn compile(
    desc: &MessageDescriptor,
    message: &GrpcMessage,
) -> Result<MessageProgram, FieldError> {
    let empty = serde_json::Map::new();
    let obj = message.json().as_object().unwrap_or(&empty);
    let mut b = ProgramBuilder::default();
    object(desc, obj, message, "", 0, &mut b)?;
    if b.literal_len() > MAX_MESSAGE {
        return Err((
            String::new(),
            format!(
                "the encoded fields are {} bytes, more than the limit of {MAX_MESSAGE}",
                b.literal_len()
            ),
        ));
    }
    Ok(b.finish())
}

/// The message of `json` (without references) against `desc`; the error's path is relative
/// to `at`.
pub(crate) fn decode(
    desc: &MessageDescriptor,
    json: Value,
    at: &str,
) -> Result<DynamicMessage, FieldError> {
    let value = match json {
        Value::Null => Value::Object(Default::default()),
        v => v,
    };
    let mut track = serde_path_to_error::Track::new();
    let de = serde_path_to_error::Deserializer::new(&value, &mut track);
    DynamicMessage::deserialize(desc.clone(), de).map_err(|e| {
        let path = track.path().to_string();
        let path = if path == "." { String::new() } else { path };
        (join_path(at, &path), without_values(e.to_string(), &value))
    })
}

/// `message` with every string of `json` that it quotes replaced by `…`. The decoder's
/// messages quote the value they refused (`invalid type: string "…", expected a boolean`),
/// and that value may be a secret read from the environment, which must never reach a log.
/// The path and the reason stay.
fn without_values(mut message: String, json: &Value) -> String {
    fn strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::String(s) if !s.is_empty() => out.push(s),
            Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
            Value::Object(o) => o.values().for_each(|x| strings(x, out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    strings(json, &mut found);
    for s in found {
        for quoted in [format!("{s:?}"), format!("'{s}'"), format!("`{s}`")] {
            if message.contains(&quoted) {
                message = message.replace(&quoted, "\"…\"");
            }
        }
    }
    message
}

/// `at` and a path serde_path_to_error wrote (`a.b`, `c[1]`).
fn join_path(at: &str, path: &str) -> String {
    match (at.is_empty(), path.is_empty()) {
        (_, true) => at.to_string(),
        (true, false) => path.to_string(),
        (false, false) if path.starts_with('[') => format!("{at}{path}"),
        _ => format!("{at}.{path}"),
    }
}

/// The field a JSON key names: its lowerCamelCase JSON name or its `.proto` name.
fn field_of(desc: &MessageDescriptor, key: &str) -> Option<FieldDescriptor> {
    desc.get_field_by_json_name(key)
        .or_else(|| desc.get_field_by_name(key))
}

/// Compiles the fields of one message (at `at`) into `b`, in field-number order.
fn object(
    desc: &MessageDescriptor,
    obj: &serde_json::Map<String, Value>,
    message: &GrpcMessage,
    at: &str,
    depth: usize,
    b: &mut ProgramBuilder,
) -> Result<(), FieldError> {
    if depth >= MAX_DEPTH {
        return Err((
            at.to_string(),
            format!("messages holding templates nest more than {MAX_DEPTH} deep"),
        ));
    }
    let mut fixed = serde_json::Map::new();
    let mut given: BTreeMap<u32, String> = BTreeMap::new();
    // Templated fields: (field, path, the JSON given for it).
    let mut templated: Vec<(FieldDescriptor, String, &Value)> = Vec::new();
    // The elements of repeated fields holding references, each list in its order.
    let mut lists: Vec<(u32, Part)> = Vec::new();
    for (key, value) in obj {
        let path = join(at, key);
        let field = field_of(desc, key);
        if let Some(f) = &field {
            if let Some(first) = given.insert(f.number(), key.clone()) {
                return Err((
                    path,
                    format!(
                        "field `{}` is given twice (as `{first}` and `{key}`)",
                        f.name()
                    ),
                ));
            }
        }
        if !message.has_references_in(&path) {
            fixed.insert(key.clone(), literal(message, &path, value));
            continue;
        }
        let Some(field) = field else {
            return Err((path, format!("`{}` has no field `{key}`", desc.full_name())));
        };
        if field.is_map() {
            let Some(entries) = value.as_object() else {
                return Err((path, "is a map field: give its entries as a map".into()));
            };
            for (k, v) in entries {
                let at_k = join(&path, k);
                let part = if message.has_references_in(&at_k) {
                    entry(&field, k, v, at_k)?
                } else {
                    let mut one = serde_json::Map::new();
                    one.insert(k.clone(), literal(message, &at_k, v));
                    let mut map = serde_json::Map::new();
                    map.insert(key.clone(), Value::Object(one));
                    Part::Bytes(decode(desc, Value::Object(map), at)?.encode_to_vec())
                };
                lists.push((field.number(), part));
            }
            continue;
        }
        if field.is_list() {
            let Some(items) = value.as_array() else {
                return Err((path, "is a repeated field: give a list".into()));
            };
            for (i, item) in items.iter().enumerate() {
                let at_i = format!("{path}[{i}]");
                if message.has_references_in(&at_i) {
                    check_templated(&field, key, item, &at_i)?;
                    lists.push((field.number(), Part::Templated(field.clone(), at_i, item)));
                } else {
                    let one = element(desc, key, literal(message, &at_i, item), at, i)?;
                    lists.push((field.number(), Part::Bytes(one)));
                }
            }
            continue;
        }
        check_templated(&field, key, value, &path)?;
        templated.push((field, path, value));
    }
    // Only one field of a oneof.
    for (f, path, _) in &templated {
        if let Some(o) = f.containing_oneof() {
            let others: BTreeSet<&str> = o
                .fields()
                .filter(|x| x.number() != f.number() && given.contains_key(&x.number()))
                .map(|x| given[&x.number()].as_str())
                .collect();
            if let Some(other) = others.first() {
                return Err((
                    path.clone(),
                    format!(
                        "`{}` and `{other}` are both in oneof `{}`: give one",
                        f.name(),
                        o.name()
                    ),
                ));
            }
        }
    }
    let fixed = decode(desc, Value::Object(fixed), at)?;
    // Every fixed field encoded alone, so templated ones fall in between in number order.
    let mut parts: Vec<(u32, Part)> = fixed
        .fields()
        .map(|(f, v)| {
            let mut one = DynamicMessage::new(desc.clone());
            one.set_field(&f, v.clone());
            (f.number(), Part::Bytes(one.encode_to_vec()))
        })
        .collect();
    parts.extend(
        templated
            .into_iter()
            .map(|(f, path, value)| (f.number(), Part::Templated(f, path, value))),
    );
    parts.extend(lists);
    // Stable: a list's elements keep their order under its one number.
    parts.sort_by_key(|(n, _)| *n);
    for (_, part) in parts {
        match part {
            Part::Bytes(bytes) => b.bytes(&bytes),
            Part::Templated(f, path, value) => {
                // A list's element is there even when it is zero or empty.
                let presence = f.supports_presence() || f.is_list();
                templated_field(&f, presence, &path, value, message, depth, b)?;
            }
            Part::Entry {
                map,
                key,
                value,
                path,
                json,
            } => {
                b.begin(map);
                b.bytes(&key);
                // An entry's value is written even when it is zero or empty, as protobuf
                // runtimes write it.
                templated_field(&value, true, &path, json, message, depth, b)?;
                b.end();
            }
        }
    }
    Ok(())
}

/// A field holding references: a nested message as `begin`, its fields, `end`; a scalar as
/// the template its value renders into.
fn templated_field(
    f: &FieldDescriptor,
    presence: bool,
    path: &str,
    value: &Value,
    message: &GrpcMessage,
    depth: usize,
    b: &mut ProgramBuilder,
) -> Result<(), FieldError> {
    match f.kind() {
        Kind::Message(m) => {
            let empty = serde_json::Map::new();
            let inner = value.as_object().unwrap_or(&empty);
            b.begin(f.number());
            object(&m, inner, message, path, depth + 1, b)?;
            b.end();
        }
        kind => {
            let Some(template) = message.template_at(path) else {
                return Err((
                    path.to_string(),
                    "a template fills a scalar field as a string".into(),
                ));
            };
            b.field(TemplatedField {
                number: f.number(),
                scalar: scalar(&kind),
                value: template.clone(),
                presence,
                enum_values: match &kind {
                    Kind::Enum(e) => e
                        .values()
                        .map(|v| (v.name().to_string(), v.number()))
                        .collect(),
                    _ => BTreeMap::new(),
                },
            });
        }
    }
    Ok(())
}

/// One piece of a message's program: encoded fixed fields, or a field (or a list's element)
/// holding references, with its path and the JSON given for it, or a map entry whose value
/// holds references.
enum Part<'v> {
    Bytes(Vec<u8>),
    Templated(FieldDescriptor, String, &'v Value),
    /// An entry of map field `map`: its key encoded, its value field with references.
    Entry {
        map: u32,
        key: Vec<u8>,
        value: FieldDescriptor,
        path: String,
        json: &'v Value,
    },
}

/// The entry `k` of map field `map` (at `path`), whose value `v` holds references: the key
/// (a JSON object's key, always text) read as the map's key type and encoded once.
fn entry<'v>(
    map: &FieldDescriptor,
    k: &str,
    v: &'v Value,
    path: String,
) -> Result<Part<'v>, FieldError> {
    let Kind::Message(entry) = map.kind() else {
        return Err((path, "is not a map field".into()));
    };
    let (key_field, value_field) = (entry.map_entry_key_field(), entry.map_entry_value_field());
    check_templated(&value_field, k, v, &path)?;
    let bad = |ty: &str| (path.clone(), format!("the key `{k}` is not a {ty}"));
    let key = match key_field.kind() {
        Kind::String => ReflectValue::String(k.to_string()),
        Kind::Bool => ReflectValue::Bool(k.parse().map_err(|_| bad("bool"))?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            ReflectValue::I32(k.parse().map_err(|_| bad("32-bit integer"))?)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            ReflectValue::I64(k.parse().map_err(|_| bad("64-bit integer"))?)
        }
        Kind::Uint32 | Kind::Fixed32 => {
            ReflectValue::U32(k.parse().map_err(|_| bad("32-bit unsigned integer"))?)
        }
        Kind::Uint64 | Kind::Fixed64 => {
            ReflectValue::U64(k.parse().map_err(|_| bad("64-bit unsigned integer"))?)
        }
        other => return Err((path, format!("a map key cannot be a {other:?}"))),
    };
    let mut one = DynamicMessage::new(entry.clone());
    one.set_field(&key_field, key);
    Ok(Part::Entry {
        map: map.number(),
        key: one.encode_to_vec(),
        value: value_field,
        path,
        json: v,
    })
}

/// Refuses a reference where no template can go: in a well-known type, or in a message given
/// as anything but a map of its fields.
fn check_templated(
    field: &FieldDescriptor,
    key: &str,
    value: &Value,
    path: &str,
) -> Result<(), FieldError> {
    if let Kind::Message(m) = field.kind() {
        if m.full_name().starts_with("google.protobuf.") {
            return Err((
                path.to_string(),
                format!(
                    "templates fill scalar fields; `{key}` is a {} (give it as a fixed value)",
                    m.full_name()
                ),
            ));
        }
        if !value.is_object() {
            return Err((
                path.to_string(),
                format!("is a {} message: give its fields as a map", m.full_name()),
            ));
        }
    }
    Ok(())
}

/// Element `i` of repeated field `key`, fixed, encoded alone (its error names element `i`).
fn element(
    desc: &MessageDescriptor,
    key: &str,
    item: Value,
    at: &str,
    i: usize,
) -> Result<Vec<u8>, FieldError> {
    let mut one = serde_json::Map::new();
    one.insert(key.to_string(), Value::Array(vec![item]));
    decode(desc, Value::Object(one), at)
        .map(|m| m.encode_to_vec())
        .map_err(|(path, why)| {
            let first = format!("{}[0]", join(at, key));
            let path = match path.strip_prefix(&first) {
                Some(rest) => format!("{}[{i}]{rest}", join(at, key)),
                None => path,
            };
            (path, why)
        })
}

/// `value` (at `path`) with its plain-text templates replaced by their text.
fn literal(message: &GrpcMessage, path: &str, value: &Value) -> Value {
    match value {
        Value::String(_) => match message.template_at(path).and_then(|t| t.as_static()) {
            Some(text) => Value::String(text.to_string()),
            None => value.clone(),
        },
        Value::Array(a) => Value::Array(
            a.iter()
                .enumerate()
                .map(|(i, x)| literal(message, &format!("{path}[{i}]"), x))
                .collect(),
        ),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), literal(message, &join(path, k), x)))
                .collect(),
        ),
        v => v.clone(),
    }
}

/// The scalar type of a field of kind `kind` (a message is never asked for).
pub(crate) fn scalar(kind: &Kind) -> Scalar {
    match kind {
        Kind::Double => Scalar::Double,
        Kind::Float => Scalar::Float,
        Kind::Int32 => Scalar::Int32,
        Kind::Int64 => Scalar::Int64,
        Kind::Uint32 => Scalar::Uint32,
        Kind::Uint64 => Scalar::Uint64,
        Kind::Sint32 => Scalar::Sint32,
        Kind::Sint64 => Scalar::Sint64,
        Kind::Fixed32 => Scalar::Fixed32,
        Kind::Fixed64 => Scalar::Fixed64,
        Kind::Sfixed32 => Scalar::Sfixed32,
        Kind::Sfixed64 => Scalar::Sfixed64,
        Kind::Bool => Scalar::Bool,
        Kind::String => Scalar::String,
        Kind::Bytes => Scalar::Bytes,
        Kind::Enum(_) => Scalar::Enum,
        // Messages are compiled as `begin`/`end`, never asked for here.
        Kind::Message(_) => Scalar::Bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use stampede_core::grpc::program::Encoder;

    const PROTO: &str = r#"
syntax = "proto3";
package p.v1;
enum Color { COLOR_UNSET = 0; RED = 1; BLUE = 2; }
message All {
  double d = 1; float f = 2; int32 i32 = 3; int64 i64 = 4; uint32 u32 = 5; uint64 u64 = 6;
  sint32 s32 = 7; sint64 s64 = 8; fixed32 x32 = 9; fixed64 x64 = 10; sfixed32 sx32 = 11;
  sfixed64 sx64 = 12; bool b = 13; string s = 14; bytes by = 15; Color color = 16;
  optional int64 maybe = 17; Inner inner = 18; repeated string tags = 19;
  oneof pick { string left = 20; int32 right = 21; }
  repeated Inner items = 22; repeated uint32 nums = 23;
  map<string, string> labels = 24; map<int32, Inner> byid = 25; map<bool, uint32> flags = 26;
}
message Inner { string note = 1; Inner deeper = 2; uint32 n = 3; }
"#;

    fn desc() -> MessageDescriptor {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("all.proto"), PROTO).unwrap();
        let mut c = protox::Compiler::new([dir.path()]).unwrap();
        c.open_file("all.proto").unwrap();
        c.descriptor_pool().get_message_by_name("p.v1.All").unwrap()
    }

    /// A field's value: as JSON (a fixed field), and as the text a template renders.
    #[derive(Debug, Clone)]
    struct V {
        json: Value,
        text: String,
    }

    fn v(json: Value, text: String) -> V {
        V { json, text }
    }

    fn num<T: ToString + Into<serde_json::Number> + Copy>(x: T) -> V {
        v(Value::Number(x.into()), x.to_string())
    }

    /// protobuf JSON gives 64-bit integers as strings.
    fn big<T: ToString>(x: T) -> V {
        v(Value::String(x.to_string()), x.to_string())
    }

    fn values() -> impl Strategy<Value = Vec<(&'static str, V)>> {
        let b64 = |b: Vec<u8>| stampede_core::protocol::encode_base64(&b);
        (
            (
                prop_oneof![
                    Just(0.0f64),
                    Just(-0.0),
                    any::<f64>().prop_filter("finite", |d| d.is_finite())
                ],
                prop_oneof![
                    Just(0.0f32),
                    any::<f32>().prop_filter("finite", |f| f.is_finite())
                ],
                any::<i32>(),
                any::<i64>(),
                any::<u32>(),
                any::<u64>(),
                any::<i32>(),
                any::<i64>(),
            ),
            (
                any::<u32>(),
                any::<u64>(),
                any::<i32>(),
                any::<i64>(),
                any::<bool>(),
                ".{0,20}",
                proptest::collection::vec(any::<u8>(), 0..12),
                0..3i32,
            ),
            (
                prop::option::of(-2..3i64),
                ".{0,8}",
                0u32..300,
                prop::option::of(".{0,3}"),
            ),
        )
            .prop_map(
                move |(
                    (d, f, i32_, i64_, u32_, u64_, s32, s64),
                    (x32, x64, sx32, sx64, b, s, by, color),
                    (maybe, note, n, left),
                )| {
                    let dv = serde_json::Number::from_f64(d).map_or(Value::Null, Value::Number);
                    let fv = serde_json::Number::from_f64(f64::from(f))
                        .map_or(Value::Null, Value::Number);
                    let names = ["COLOR_UNSET", "RED", "BLUE"];
                    let mut out = vec![
                        ("d", v(dv, d.to_string())),
                        ("f", v(fv, f64::from(f).to_string())),
                        ("i32", num(i32_)),
                        ("i64", big(i64_)),
                        ("u32", num(u32_)),
                        ("u64", big(u64_)),
                        ("s32", num(s32)),
                        ("s64", big(s64)),
                        ("x32", num(x32)),
                        ("x64", big(x64)),
                        ("sx32", num(sx32)),
                        ("sx64", big(sx64)),
                        ("b", v(Value::Bool(b), b.to_string())),
                        ("s", v(Value::String(s.clone()), s)),
                        ("by", v(Value::String(b64(by.clone())), b64(by))),
                        (
                            "color",
                            v(
                                Value::String(names[color as usize].into()),
                                names[color as usize].into(),
                            ),
                        ),
                        ("inner.note", v(Value::String(note.clone()), note)),
                        ("inner.deeper.n", num(n)),
                    ];
                    if let Some(m) = maybe {
                        out.push(("maybe", big(m)));
                    }
                    if let Some(l) = left {
                        out.push(("left", v(Value::String(l.clone()), l)));
                    }
                    out
                },
            )
    }

    /// Sets `path` (dotted) in `obj` to `value`.
    fn set(obj: &mut Value, path: &str, value: Value) {
        let mut at = obj;
        let mut parts = path.split('.').peekable();
        while let Some(p) = parts.next() {
            if parts.peek().is_none() {
                at[p] = value;
                return;
            }
            if at.get(p).is_none() {
                at[p] = Value::Object(Default::default());
            }
            at = &mut at[p];
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Whichever fields are templated, the program rendered with their values is byte
        /// for byte prost-reflect's encoding of the same message given in JSON.
        #[test]
        fn a_rendered_program_is_the_encoding_of_the_rendered_json(
            values in values(),
            templated in proptest::collection::vec(any::<bool>(), 20),
        ) {
            let desc = desc();
            let mut written = Value::Object(Default::default());
            let mut rendered = Value::Object(Default::default());
            let mut texts = BTreeMap::new();
            for (i, (path, v)) in values.iter().enumerate() {
                if v.json.is_null() {
                    continue;
                }
                rendered_set(&mut rendered, path, v.json.clone());
                if templated[i] {
                    let name = format!("f{i}");
                    set(&mut written, path, Value::String(format!("${{d.{name}}}")));
                    texts.insert(format!("${{d.{name}}}"), v.text.clone());
                } else {
                    set(&mut written, path, v.json.clone());
                }
            }
            // A fixed list beside the templated fields.
            set(&mut written, "tags", serde_json::json!(["a", "b"]));
            set(&mut rendered, "tags", serde_json::json!(["a", "b"]));
            let message = GrpcMessage::new(written);
            let want = decode(&desc, rendered, "").unwrap().encode_to_vec();
            if !message.has_references() {
                return Ok(());
            }
            let program = compile(&desc, &message).unwrap();
            let enc = Encoder::new(&program).unwrap();
            let mut out = Vec::new();
            let mut scratch = Vec::new();
            enc.encode_frame(&mut out, &mut scratch, &mut |i, buf| {
                let t = enc.templates()[i].to_string();
                buf.extend_from_slice(texts[&t].as_bytes());
            }).unwrap();
            prop_assert_eq!(&out[5..], &want[..]);
        }
    }

    fn rendered_set(obj: &mut Value, path: &str, value: Value) {
        set(obj, path, value);
    }

    /// Compiles `written`, renders it with `${d.t}` = `bee`, `${d.empty}` = ``, `${d.zero}` =
    /// `0` and `${d.n}` = `300`, and checks that prost-reflect decodes it into the message
    /// `rendered` gives.
    fn renders_as(desc: &MessageDescriptor, written: Value, rendered: Value) {
        let texts = BTreeMap::from([
            ("${d.t}", "bee"),
            ("${d.empty}", ""),
            ("${d.zero}", "0"),
            ("${d.n}", "300"),
        ]);
        let program = compile(desc, &GrpcMessage::new(written)).unwrap();
        let enc = Encoder::new(&program).unwrap();
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        enc.encode_frame(&mut out, &mut scratch, &mut |i, buf| {
            let t = enc.templates()[i].to_string();
            buf.extend_from_slice(texts[t.as_str()].as_bytes());
        })
        .unwrap();
        let got = DynamicMessage::decode(desc.clone(), &out[5..]).unwrap();
        let want = decode(desc, rendered, "").unwrap();
        assert_eq!(got, want);
    }

    /// Templates in lists: each element in its place, fixed ones beside them, scalars (zero
    /// included) and messages, decoded by prost-reflect into the message the rendered JSON
    /// gives.
    #[test]
    fn a_refused_value_is_never_quoted_back() {
        let desc = desc();
        for (json, reason) in [
            (
                serde_json::json!({ "b": "Sup3r\"S3cret" }),
                "expected a boolean",
            ),
            (serde_json::json!({ "inner": { "n": "Sup3rS3cret" } }), ""),
            (serde_json::json!({ "color": "Sup3rS3cret" }), "enum"),
            (
                serde_json::json!({ "items": [{ "deeper": { "n": true } }], "s": 5, "b": "Sup3rS3cret" }),
                "",
            ),
        ] {
            let (path, why) = decode(&desc, json.clone(), "grpc.message").unwrap_err();
            assert!(!why.contains("Sup3r"), "{json}: {why}");
            assert!(why.contains(reason), "{json}: {why}");
            assert!(path.starts_with("grpc.message"), "{path}");
        }
    }

    #[test]
    fn templates_fill_the_elements_of_repeated_fields_in_order() {
        let desc = desc();
        let written = serde_json::json!({
            "tags": ["a", "${d.t}", "c", "${d.empty}"],
            "nums": [7, "${d.zero}", "${d.n}", 9],
            "items": [{ "note": "fixed" }, { "note": "${d.t}", "n": 2 }, { "deeper": { "n": "${d.n}" } }],
            "s": "${d.t}"
        });
        let rendered = serde_json::json!({
            "tags": ["a", "bee", "c", ""],
            "nums": [7, 0, 300, 9],
            "items": [{ "note": "fixed" }, { "note": "bee", "n": 2 }, { "deeper": { "n": 300 } }],
            "s": "bee"
        });
        renders_as(&desc, written, rendered);
    }

    /// Templates in map values: each entry a message of its key and value, fixed entries beside
    /// templated ones, keys read as the map's key type, scalar values (zero and empty
    /// included) and message values; decoded by prost-reflect into the message the rendered
    /// JSON gives.
    #[test]
    fn templates_fill_the_values_of_map_entries() {
        let desc = desc();
        let written = serde_json::json!({
            "labels": { "a": "fixed", "b": "${d.t}", "c": "${d.empty}" },
            "byid": { "7": { "note": "${d.t}", "n": 1 }, "-3": { "n": 4 } },
            "flags": { "true": "${d.zero}", "false": "${d.n}" },
            "s": "${d.t}"
        });
        let rendered = serde_json::json!({
            "labels": { "a": "fixed", "b": "bee", "c": "" },
            "byid": { "7": { "note": "bee", "n": 1 }, "-3": { "n": 4 } },
            "flags": { "true": 0, "false": 300 },
            "s": "bee"
        });
        renders_as(&desc, written, rendered);

        for (msg, at, why) in [
            (
                serde_json::json!({ "byid": { "x": { "note": "${d.t}" } } }),
                "byid.x",
                "the key `x` is not a 32-bit integer",
            ),
            (
                serde_json::json!({ "flags": { "yes": "${d.n}" } }),
                "flags.yes",
                "the key `yes` is not a bool",
            ),
            (
                serde_json::json!({ "labels": "${d.t}" }),
                "labels",
                "is a map field: give its entries as a map",
            ),
            (
                serde_json::json!({ "byid": { "1": "${d.t}" } }),
                "byid.1",
                "give its fields as a map",
            ),
        ] {
            let (path, reason) = compile(&desc, &GrpcMessage::new(msg.clone())).unwrap_err();
            assert_eq!(path, at, "{msg}: {reason}");
            assert!(reason.contains(why), "{msg}: {reason}");
        }
    }

    #[test]
    fn fixed_and_templated_fields_keep_field_number_order() {
        let desc = desc();
        let message = GrpcMessage::new(serde_json::json!({
            "s": "${d.s}", "i64": "5", "inner": { "note": "${d.n}", "n": 3 }, "color": "BLUE"
        }));
        let p = compile(&desc, &message).unwrap();
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(
            json,
            serde_json::json!([
                { "bytes": "IAU=" },
                { "field": { "number": 14, "scalar": "string", "value": "${d.s}" } },
                { "bytes": "gAEC" },
                { "begin": 18 },
                { "field": { "number": 1, "scalar": "string", "value": "${d.n}" } },
                { "bytes": "GAM=" },
                { "end": 18 }
            ])
        );
        for (msg, at, why) in [
            (
                serde_json::json!({ "left": "x", "right": "${d.r}" }),
                "right",
                "oneof `pick`",
            ),
            (serde_json::json!({ "s": "${d.s}", "nope": 1 }), "", "nope"),
            (
                serde_json::json!({ "inner": "${d.x}" }),
                "inner",
                "give its fields as a map",
            ),
            (serde_json::json!({ "i64": 1, "i_64": "${d.x}" }), "", ""),
        ] {
            let e = compile(&desc, &GrpcMessage::new(msg.clone()));
            if why.is_empty() {
                continue;
            }
            let (path, reason) = e.unwrap_err();
            assert_eq!(path, at, "{msg}: {reason}");
            assert!(reason.contains(why), "{msg}: {reason}");
        }
    }
}
