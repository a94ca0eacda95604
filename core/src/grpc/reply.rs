//! Values read out of a gRPC reply without its descriptor: the CLI, which holds the schema,
//! compiles each JSON Pointer of a step's `extract` and `check` (`/order/items/0/sku`) into a
//! [`ReplyPath`] of field numbers and the leaf's scalar type; an agent walks the reply's
//! protobuf wire format along it. So `extract: { id: { json: /order/id } }` reads a gRPC reply
//! as it reads a JSON body, and agents still never see a descriptor.
//!
//! The walk trusts no length: every varint, tag and length prefix is checked against the bytes
//! left, and a reply that is not well-formed protobuf along the path yields no value (the
//! extraction or the check fails), never a panic or a read past the message.
//!
//! Values come out as protobuf's JSON mapping gives them, with one exception: 64-bit integers
//! are JSON numbers (exact in serde_json), not strings, so `check: { json: { /count: 5 } }`
//! holds for an `int64 count = 5`. A scalar field without explicit presence that the reply
//! leaves out reads as its default (0, `false`, `""`, the enum's zero value), as protobuf
//! defines it; a field with presence (`optional`, a oneof member) or a message left out has no
//! value.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::program::Scalar;
use super::wire::{read_varint, wire_type, I32, I64, LEN, MAX_FIELD, VARINT};

/// The compiled pointers of one call: pointer → path.
pub type ReplyPaths = BTreeMap<String, ReplyPath>;

/// Most hops a path may take (protobuf's own decoders stop nesting at 100).
pub const MAX_HOPS: usize = 64;

/// One pointer of a step, compiled against the method's reply type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplyPath {
    /// Field numbers from the reply message down to the value: every hop but the last is a
    /// message field, the last is the value's own field.
    pub hops: Vec<Hop>,
    /// The value's type.
    pub kind: Scalar,
    /// The field has explicit presence (`optional`, a oneof member, proto2): left out, it has
    /// no value instead of its default.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub presence: bool,
    /// An enum's value names by number: a value reads as its name, as in protobuf's JSON.
    // JSON keys are strings, and the schema says so: `patternProperties` for numeric keys is
    // not structural, and the API server refuses a CRD that has it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(with = "BTreeMap<String, String>")]
    pub enum_names: BTreeMap<i32, String>,
}

/// One field along a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Hop {
    /// The field's number.
    pub field: u32,
    /// The element taken of a repeated field (from 0); absent for a singular field, whose
    /// last occurrence counts, as protobuf reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
}

/// Why a stored path cannot be used: the caller names the pointer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyPathError {
    /// No field at all.
    #[error("the path has no field")]
    Empty,
    /// Deeper than [`MAX_HOPS`].
    #[error("the path has {0} fields, more than {MAX_HOPS}")]
    TooDeep(usize),
    /// A field number protobuf cannot have.
    #[error("field number {0} is not between 1 and {MAX_FIELD}")]
    FieldNumber(u32),
    /// Value names for a type that is not an enum.
    #[error("enum_names is only for kind: enum")]
    NamesNotEnum,
}

impl ReplyPath {
    /// Checks what the types cannot.
    pub fn check(&self) -> Result<(), ReplyPathError> {
        if self.hops.is_empty() {
            return Err(ReplyPathError::Empty);
        }
        if self.hops.len() > MAX_HOPS {
            return Err(ReplyPathError::TooDeep(self.hops.len()));
        }
        if let Some(h) = self
            .hops
            .iter()
            .find(|h| !(1..=MAX_FIELD).contains(&h.field))
        {
            return Err(ReplyPathError::FieldNumber(h.field));
        }
        if self.kind != Scalar::Enum && !self.enum_names.is_empty() {
            return Err(ReplyPathError::NamesNotEnum);
        }
        Ok(())
    }

    /// The value at this path in `message` (a reply's protobuf bytes, without the gRPC
    /// prefix), or `None` when it is not there or the bytes are not well-formed on the way.
    pub fn lookup(&self, message: &[u8]) -> Option<serde_json::Value> {
        let (leaf, messages) = self.hops.split_last()?;
        let mut at = message;
        for hop in messages {
            at = match hop.index {
                Some(n) => nth(at, hop.field, LEN, n),
                None => last(at, hop.field, LEN),
            }
            .ok()??
            .as_len()?;
        }
        let raw = match leaf.index {
            Some(n) => self.element(at, leaf.field, n)?,
            None => match last(at, leaf.field, wire_type(self.kind)) {
                Ok(Some(raw)) => raw,
                // Malformed, or the field in another wire type than its schema's.
                Err(()) => return None,
                Ok(None) if self.presence => return None,
                Ok(None) => return Some(self.default_value()),
            },
        };
        self.value(raw)
    }

    /// Element `n` of a repeated scalar field: packed (one length-delimited run of values)
    /// or not (a field per value), or both mixed, as parsers must accept.
    fn element<'m>(&self, message: &'m [u8], field: u32, n: u32) -> Option<Raw<'m>> {
        let own = wire_type(self.kind);
        let mut seen = 0u32;
        for item in Fields::new(message) {
            let (number, raw) = item.ok()?;
            if number != field {
                continue;
            }
            match raw {
                Raw::Len(run) if own != LEN => {
                    let mut rest = run;
                    while !rest.is_empty() {
                        let (value, tail) = read_value(rest, own)?;
                        if seen == n {
                            return Some(value);
                        }
                        seen += 1;
                        rest = tail;
                    }
                }
                raw if raw.wire_type() == own => {
                    if seen == n {
                        return Some(raw);
                    }
                    seen += 1;
                }
                _ => return None,
            }
        }
        None
    }

    fn default_value(&self) -> serde_json::Value {
        use serde_json::Value;
        match self.kind {
            Scalar::String | Scalar::Bytes => Value::String(String::new()),
            Scalar::Bool => Value::Bool(false),
            Scalar::Enum => self.enum_value(0),
            Scalar::Double | Scalar::Float => float(0.0),
            _ => Value::from(0),
        }
    }

    fn enum_value(&self, n: i32) -> serde_json::Value {
        match self.enum_names.get(&n) {
            Some(name) => serde_json::Value::String(name.clone()),
            None => serde_json::Value::from(n),
        }
    }

    fn value(&self, raw: Raw<'_>) -> Option<serde_json::Value> {
        use serde_json::Value;
        Some(match (self.kind, raw) {
            (Scalar::String, Raw::Len(b)) => Value::String(std::str::from_utf8(b).ok()?.into()),
            (Scalar::Bytes, Raw::Len(b)) => Value::String(crate::protocol::encode_base64(b)),
            (Scalar::Bool, Raw::Varint(v)) => Value::Bool(v != 0),
            // Truncation to 32 bits is how protobuf reads a 32-bit varint.
            (Scalar::Int32, Raw::Varint(v)) => Value::from(v as i32),
            (Scalar::Int64, Raw::Varint(v)) => Value::from(v as i64),
            (Scalar::Uint32, Raw::Varint(v)) => Value::from(v as u32),
            (Scalar::Uint64, Raw::Varint(v)) => Value::from(v),
            (Scalar::Sint32, Raw::Varint(v)) => {
                let v = v as u32;
                Value::from((v >> 1) as i32 ^ -((v & 1) as i32))
            }
            (Scalar::Sint64, Raw::Varint(v)) => Value::from((v >> 1) as i64 ^ -((v & 1) as i64)),
            (Scalar::Enum, Raw::Varint(v)) => self.enum_value(v as i32),
            (Scalar::Fixed32, Raw::Fixed32(b)) => Value::from(u32::from_le_bytes(b)),
            (Scalar::Sfixed32, Raw::Fixed32(b)) => Value::from(i32::from_le_bytes(b)),
            (Scalar::Float, Raw::Fixed32(b)) => float(f64::from(f32::from_le_bytes(b))),
            (Scalar::Fixed64, Raw::Fixed64(b)) => Value::from(u64::from_le_bytes(b)),
            (Scalar::Sfixed64, Raw::Fixed64(b)) => Value::from(i64::from_le_bytes(b)),
            (Scalar::Double, Raw::Fixed64(b)) => float(f64::from_le_bytes(b)),
            _ => return None,
        })
    }
}

/// A float as protobuf's JSON writes it: a number, or `"NaN"`, `"Infinity"`, `"-Infinity"`.
fn float(v: f64) -> serde_json::Value {
    match serde_json::Number::from_f64(v) {
        Some(n) => serde_json::Value::Number(n),
        None if v.is_nan() => "NaN".into(),
        None if v > 0.0 => "Infinity".into(),
        None => "-Infinity".into(),
    }
}

/// One field's encoded value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Raw<'a> {
    Varint(u64),
    Fixed64([u8; 8]),
    Len(&'a [u8]),
    Fixed32([u8; 4]),
}

impl<'a> Raw<'a> {
    fn wire_type(self) -> u8 {
        match self {
            Raw::Varint(_) => VARINT,
            Raw::Fixed64(_) => I64,
            Raw::Len(_) => LEN,
            Raw::Fixed32(_) => I32,
        }
    }

    fn as_len(self) -> Option<&'a [u8]> {
        match self {
            Raw::Len(b) => Some(b),
            _ => None,
        }
    }
}

/// The last occurrence of `field` (of wire type `wire`) in `message`: `Ok(None)` when
/// absent, `Err` when the message is malformed anywhere or the field has another wire type.
fn last(message: &[u8], field: u32, wire: u8) -> Result<Option<Raw<'_>>, ()> {
    let mut found = None;
    for item in Fields::new(message) {
        let (number, raw) = item?;
        if number == field {
            if raw.wire_type() != wire {
                return Err(());
            }
            found = Some(raw);
        }
    }
    Ok(found)
}

/// Occurrence `n` of `field` (of wire type `wire`): an element of a repeated field.
fn nth(message: &[u8], field: u32, wire: u8, n: u32) -> Result<Option<Raw<'_>>, ()> {
    let mut seen = 0u32;
    for item in Fields::new(message) {
        let (number, raw) = item?;
        if number == field {
            if raw.wire_type() != wire {
                return Err(());
            }
            if seen == n {
                return Ok(Some(raw));
            }
            seen += 1;
        }
    }
    Ok(None)
}

/// The fields of a message in order, each `(number, value)`; an `Err` ends a malformed one.
struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    fn new(message: &'a [u8]) -> Self {
        Self { rest: message }
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Raw<'a>), ()>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let item = (|| {
            let (tag, rest) = read_varint(self.rest)?;
            let number = u32::try_from(tag >> 3).ok().filter(|n| *n > 0)?;
            let (raw, rest) = read_value(rest, (tag & 7) as u8)?;
            self.rest = rest;
            Some((number, raw))
        })();
        if item.is_none() {
            // Malformed: nothing after it is read.
            self.rest = &[];
        }
        Some(item.ok_or(()))
    }
}

/// One value of wire type `wire` at the start of `bytes`, and what follows it. Groups
/// (wire types 3 and 4, long deprecated) are refused.
fn read_value(bytes: &[u8], wire: u8) -> Option<(Raw<'_>, &[u8])> {
    match wire {
        VARINT => read_varint(bytes).map(|(v, rest)| (Raw::Varint(v), rest)),
        I64 => {
            let (head, rest) = bytes.split_first_chunk::<8>()?;
            Some((Raw::Fixed64(*head), rest))
        }
        I32 => {
            let (head, rest) = bytes.split_first_chunk::<4>()?;
            Some((Raw::Fixed32(*head), rest))
        }
        LEN => {
            let (len, rest) = read_varint(bytes)?;
            let len = usize::try_from(len).ok().filter(|l| *l <= rest.len())?;
            let (value, rest) = rest.split_at(len);
            Some((Raw::Len(value), rest))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::wire::{put_key, put_varint, I64, LEN, VARINT};
    use super::{Hop, ReplyPath, ReplyPathError, Scalar};
    use serde_json::json;

    fn len_field(field: u32, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_key(field, LEN, &mut out);
        put_varint(body.len() as u64, &mut out);
        out.extend_from_slice(body);
        out
    }

    fn var_field(field: u32, v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put_key(field, VARINT, &mut out);
        put_varint(v, &mut out);
        out
    }

    fn path(hops: &[(u32, Option<u32>)], kind: Scalar) -> ReplyPath {
        ReplyPath {
            hops: hops
                .iter()
                .map(|&(field, index)| Hop { field, index })
                .collect(),
            kind,
            presence: false,
            enum_names: Default::default(),
        }
    }

    /// `Order { int64 id = 1; Item items = 2 (repeated); string note = 3; Status status = 4;
    /// repeated sint32 deltas = 5 (packed); double price = 6; }`, `Item { string sku = 1; }`.
    fn order() -> Vec<u8> {
        let mut m = var_field(1, (-7i64) as u64);
        m.extend(len_field(2, &len_field(1, b"a-1")));
        m.extend(len_field(2, &len_field(1, b"b-2")));
        m.extend(len_field(3, "caf\u{e9}".as_bytes()));
        m.extend(var_field(4, 2));
        // zigzag: 3 -> 6, -2 -> 3.
        m.extend(len_field(5, &[6, 3]));
        // An unpacked element after the packed run: both are read, in order.
        m.extend(var_field(5, 1));
        put_key(6, I64, &mut m);
        m.extend(2.5f64.to_le_bytes());
        m
    }

    #[test]
    fn values_are_read_along_their_field_numbers() {
        let m = order();
        use Scalar::*;
        assert_eq!(path(&[(1, None)], Int64).lookup(&m), Some(json!(-7)));
        assert_eq!(
            path(&[(2, Some(1)), (1, None)], String).lookup(&m),
            Some(json!("b-2"))
        );
        assert_eq!(path(&[(2, Some(2)), (1, None)], String).lookup(&m), None);
        assert_eq!(path(&[(3, None)], String).lookup(&m), Some(json!("café")));
        assert_eq!(
            path(&[(3, None)], Bytes).lookup(&m),
            Some(json!("Y2Fmw6k="))
        );
        let mut status = path(&[(4, None)], Enum);
        assert_eq!(status.lookup(&m), Some(json!(2)));
        status.enum_names = [(0, "UNKNOWN".into()), (2, "SHIPPED".into())].into();
        assert_eq!(status.lookup(&m), Some(json!("SHIPPED")));
        assert_eq!(status.lookup(&[]), Some(json!("UNKNOWN")));
        assert_eq!(path(&[(5, Some(0))], Sint32).lookup(&m), Some(json!(3)));
        assert_eq!(path(&[(5, Some(1))], Sint32).lookup(&m), Some(json!(-2)));
        assert_eq!(path(&[(5, Some(2))], Sint32).lookup(&m), Some(json!(-1)));
        assert_eq!(path(&[(5, Some(3))], Sint32).lookup(&m), None);
        assert_eq!(path(&[(6, None)], Double).lookup(&m), Some(json!(2.5)));
    }

    #[test]
    fn absent_fields_read_as_protobuf_defines_them() {
        use Scalar::*;
        let m = order();
        // Left out, without presence: the default.
        assert_eq!(path(&[(9, None)], Int32).lookup(&m), Some(json!(0)));
        assert_eq!(path(&[(9, None)], Bool).lookup(&m), Some(json!(false)));
        assert_eq!(path(&[(9, None)], String).lookup(&m), Some(json!("")));
        // With presence, or under a message left out: nothing.
        let mut optional = path(&[(9, None)], Int32);
        optional.presence = true;
        assert_eq!(optional.lookup(&m), None);
        assert_eq!(path(&[(8, None), (1, None)], String).lookup(&m), None);
        // A field of another wire type than its schema's is not the value.
        assert_eq!(path(&[(3, None)], Int32).lookup(&m), None);
    }

    #[test]
    fn hostile_bytes_yield_no_value_and_never_panic() {
        use Scalar::*;
        let p = path(&[(2, Some(0)), (1, None)], String);
        // A length past the end, a varint of 11 bytes, a group, field number 0.
        let cases: Vec<Vec<u8>> = vec![
            vec![0x12, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2],
            std::iter::once(0x08).chain([0xff; 11]).collect(),
            vec![0x13, 0x14],
            vec![0x00, 0x01],
            vec![0x12],
        ];
        for c in &cases {
            assert_eq!(p.lookup(c), None, "{c:?}");
            assert_eq!(path(&[(1, None)], Int64).lookup(c), None, "{c:?}");
        }
        // Every prefix and every byte flipped of a real message: a value or none, no panic.
        let m = order();
        for cut in 0..m.len() {
            let _ = p.lookup(&m[..cut]);
            let mut flipped = m.clone();
            flipped[cut] ^= 0xa5;
            let _ = p.lookup(&flipped);
            let _ = path(&[(5, Some(1))], Sint32).lookup(&flipped);
        }
    }

    #[test]
    fn stored_paths_are_checked() {
        use Scalar::*;
        assert_eq!(path(&[], Int32).check(), Err(ReplyPathError::Empty));
        assert_eq!(
            path(&[(0, None)], Int32).check(),
            Err(ReplyPathError::FieldNumber(0))
        );
        let deep: Vec<_> = (0..65).map(|_| (1, None)).collect();
        assert_eq!(path(&deep, Int32).check(), Err(ReplyPathError::TooDeep(65)));
        let mut names = path(&[(1, None)], Int32);
        names.enum_names = [(0, "A".into())].into();
        assert_eq!(names.check(), Err(ReplyPathError::NamesNotEnum));
        assert_eq!(path(&[(1, None), (2, Some(3))], String).check(), Ok(()));
        let json = r#"{"hops":[{"field":2,"index":0},{"field":1}],"kind":"string"}"#;
        let parsed: ReplyPath = serde_json::from_str(json).unwrap();
        assert_eq!(parsed, path(&[(2, Some(0)), (1, None)], String));
        assert_eq!(serde_json::to_string(&parsed).unwrap(), json);
    }
}
