//! The encoding program of a gRPC message whose fields hold templates: what the CLI compiles
//! from the message and its descriptor, so agents can encode each call without one.
//!
//! A program is a flat list of operations: runs of bytes already encoded (every field without
//! a reference, encoded once by the CLI), scalar fields whose value is a template (field
//! number, scalar type, whether the field has presence, and for an enum its value names), and
//! `begin`/`end` around the fields of a nested message, whose length is counted when the call
//! is rendered. Fields come in field-number order, as protobuf encoders write them, so a
//! rendered program is byte for byte what an encoder makes of the rendered JSON.
//!
//! [`Encoder`] is the program decoded once per run; [`Encoder::encode_frame`] renders one
//! call into a reused buffer, the gRPC prefix included. A rendered value that is not a value of
//! its field's type (`id: '${users.id}'` holding `abc`) is an error of kind [`VALUE_ERROR`],
//! never a panic.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::wire::{put_key, put_varint, varint_into, I32, I64, LEN, MAX_FIELD, VARINT};
use super::{MAX_MESSAGE, PREFIX};
use crate::template::Template;

/// The error kind of a call whose rendered field value is not a value of the field's type (or
/// whose rendered message passes [`MAX_MESSAGE`]).
pub const VALUE_ERROR: &str = "grpc_field_value";

/// Deepest nesting of messages that hold templates.
pub const MAX_DEPTH: usize = 32;

/// A protobuf scalar type: of a templated field (how its rendered text is read and encoded),
/// or of the value a reply path reads ([`super::reply`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scalar {
    /// 64-bit float, fixed 8 bytes.
    Double,
    /// 32-bit float, fixed 4 bytes.
    Float,
    /// Varint; a negative value takes 10 bytes.
    Int32,
    /// Varint; a negative value takes 10 bytes.
    Int64,
    /// Varint.
    Uint32,
    /// Varint.
    Uint64,
    /// Zigzag varint: small negative values stay short.
    Sint32,
    /// Zigzag varint: small negative values stay short.
    Sint64,
    /// Fixed 4 bytes, unsigned.
    Fixed32,
    /// Fixed 8 bytes, unsigned.
    Fixed64,
    /// Fixed 4 bytes, signed.
    Sfixed32,
    /// Fixed 8 bytes, signed.
    Sfixed64,
    /// `true` or `false`, a one-byte varint.
    Bool,
    /// UTF-8 text, length-delimited.
    String,
    /// Rendered as base64, as protobuf JSON gives bytes.
    Bytes,
    /// Rendered as a value name or a number.
    Enum,
}

/// A scalar field whose value is rendered for each call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplatedField {
    /// The field number.
    pub number: u32,
    /// How the rendered text is encoded on the wire.
    pub scalar: Scalar,
    /// The value's text.
    pub value: Template,
    /// Sent even when the value is the type's default (proto2, `optional`, oneof members);
    /// plain proto3 fields leave a default value out, as protobuf encoders do.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub presence: bool,
    /// An enum's value names and numbers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub enum_values: BTreeMap<String, i32>,
}

/// One operation of a program. Written as a map of one key (`{ bytes: ... }`, `{ begin: 3 }`),
/// which YAML readers take as they take JSON (they want tags for enum variants).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "OpRepr", into = "OpRepr")]
pub enum Op {
    /// Fields encoded by the CLI, sent as they are (base64).
    Bytes(String),
    /// A scalar field whose value is a template.
    Field(TemplatedField),
    /// The start of the nested message in this field number; its fields follow up to the
    /// matching `end`.
    Begin(u32),
    /// The end of the nested message in this field number (the innermost one open).
    End(u32),
}

/// How an [`Op`] is written: exactly one key.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "an encoding step: a map of exactly one of its keys"
)]
struct OpRepr {
    /// Fields encoded by the CLI, sent as they are (base64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bytes: Option<String>,
    /// A scalar field whose value is a template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    field: Option<TemplatedField>,
    /// The start of the nested message in this field number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    begin: Option<u32>,
    /// The end of the nested message in this field number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    end: Option<u32>,
}

/// An operation map with no key, or more than one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an operation is one of bytes, field, begin or end")]
pub struct OpFormError;

impl TryFrom<OpRepr> for Op {
    type Error = OpFormError;
    fn try_from(r: OpRepr) -> Result<Self, OpFormError> {
        match r {
            OpRepr {
                bytes: Some(b),
                field: None,
                begin: None,
                end: None,
            } => Ok(Op::Bytes(b)),
            OpRepr {
                bytes: None,
                field: Some(f),
                begin: None,
                end: None,
            } => Ok(Op::Field(f)),
            OpRepr {
                bytes: None,
                field: None,
                begin: Some(n),
                end: None,
            } => Ok(Op::Begin(n)),
            OpRepr {
                bytes: None,
                field: None,
                begin: None,
                end: Some(n),
            } => Ok(Op::End(n)),
            _ => Err(OpFormError),
        }
    }
}

impl From<Op> for OpRepr {
    fn from(op: Op) -> Self {
        match op {
            Op::Bytes(b) => OpRepr {
                bytes: Some(b),
                ..Default::default()
            },
            Op::Field(f) => OpRepr {
                field: Some(f),
                ..Default::default()
            },
            Op::Begin(n) => OpRepr {
                begin: Some(n),
                ..Default::default()
            },
            Op::End(n) => OpRepr {
                end: Some(n),
                ..Default::default()
            },
        }
    }
}

impl JsonSchema for Op {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Op".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        OpRepr::json_schema(g)
    }
}

/// A message's encoding program (a flat list of [`Op`]s).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct MessageProgram(pub Vec<Op>);

/// Builds a program, merging adjacent byte runs.
#[derive(Debug, Default)]
pub struct ProgramBuilder {
    ops: Vec<Op>,
    pending: Vec<u8>,
    literal: usize,
    /// The field numbers of the messages begun and not yet ended.
    open: Vec<u32>,
}

impl ProgramBuilder {
    /// Encoded bytes sent as they are.
    pub fn bytes(&mut self, b: &[u8]) {
        self.pending.extend_from_slice(b);
        self.literal += b.len();
    }

    /// Adds a field rendered per call.
    pub fn field(&mut self, f: TemplatedField) {
        self.flush();
        self.ops.push(Op::Field(f));
    }

    /// Begins a nested message in field `number`; its length is known only per call, at its
    /// [`ProgramBuilder::end`].
    pub fn begin(&mut self, number: u32) {
        self.flush();
        self.open.push(number);
        self.ops.push(Op::Begin(number));
    }

    /// Ends the innermost message begun (nothing when none is open).
    pub fn end(&mut self) {
        self.flush();
        if let Some(n) = self.open.pop() {
            self.ops.push(Op::End(n));
        }
    }

    /// Bytes of encoded fields so far (not counting what is rendered per call).
    pub fn literal_len(&self) -> usize {
        self.literal
    }

    /// The program of everything added (messages still open are left as they are).
    pub fn finish(mut self) -> MessageProgram {
        self.flush();
        MessageProgram(self.ops)
    }

    fn flush(&mut self) {
        if !self.pending.is_empty() {
            let b = std::mem::take(&mut self.pending);
            self.ops.push(Op::Bytes(crate::protocol::encode_base64(&b)));
        }
    }
}

/// Why a rendered call could not be encoded; counted as [`VALUE_ERROR`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// A rendered text that does not read as the field's scalar type.
    #[error("field {number}: `{text}` is not a {scalar:?} value")]
    NotAValue {
        /// The field's number.
        number: u32,
        /// The type it was read as.
        scalar: Scalar,
        /// The text as rendered.
        text: String,
    },
    /// The encoded message is larger than [`MAX_MESSAGE`] bytes.
    #[error("the encoded message is {0} bytes, more than the limit of {MAX_MESSAGE}")]
    TooLong(usize),
}

/// Why a program cannot be decoded; only a hand-edited or hostile scenario has one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    /// A field number outside protobuf's range.
    #[error("field number {0} is not 1 to {MAX_FIELD}")]
    FieldNumber(u32),
    /// A byte run that is not base64.
    #[error(transparent)]
    Bytes(#[from] crate::protocol::PayloadError),
    /// Nested messages deeper than [`MAX_DEPTH`].
    #[error("messages nest more than {MAX_DEPTH} deep")]
    TooDeep,
    /// An `end` that closes no open `begin` of its number.
    #[error("`end: {0}` without its `begin: {0}`")]
    UnmatchedEnd(u32),
    /// A `begin` left open at the end.
    #[error("a `begin` without its `end`")]
    UnclosedBegin,
    /// Fixed bytes alone already past [`MAX_MESSAGE`].
    #[error("the encoded fields are {0} bytes, more than the limit of {MAX_MESSAGE}")]
    TooLong(usize),
}

/// A step of the decoded program.
#[derive(Debug, Clone)]
enum Step {
    Bytes(Box<[u8]>),
    Field {
        number: u32,
        scalar: Scalar,
        presence: bool,
        enum_values: Box<[(Box<str>, i32)]>,
        /// The index of its template in [`Encoder::templates`].
        slot: usize,
    },
    /// The field's key (length-delimited).
    Begin(Box<[u8]>),
    End,
}

/// A program decoded once per run: byte runs decoded, keys precomputed.
#[derive(Debug, Clone)]
pub struct Encoder {
    steps: Vec<Step>,
    templates: Vec<Template>,
    literal: usize,
}

impl Encoder {
    /// Decodes `program`; the error says what is wrong with it (it is written by the CLI, so
    /// only a hand-edited or hostile scenario gets one).
    pub fn new(program: &MessageProgram) -> Result<Self, ProgramError> {
        let mut steps = Vec::with_capacity(program.0.len());
        let mut templates = Vec::new();
        let mut open: Vec<u32> = Vec::new();
        let mut literal = 0usize;
        let number_ok = |n: u32| {
            if (1..=MAX_FIELD).contains(&n) {
                Ok(())
            } else {
                Err(ProgramError::FieldNumber(n))
            }
        };
        for op in &program.0 {
            steps.push(match op {
                Op::Bytes(b64) => {
                    let b = crate::protocol::decode_base64(b64)?;
                    literal += b.len();
                    Step::Bytes(b.into())
                }
                Op::Field(f) => {
                    number_ok(f.number)?;
                    templates.push(f.value.clone());
                    Step::Field {
                        number: f.number,
                        scalar: f.scalar,
                        presence: f.presence,
                        enum_values: f
                            .enum_values
                            .iter()
                            .map(|(k, v)| (k.as_str().into(), *v))
                            .collect(),
                        slot: templates.len() - 1,
                    }
                }
                Op::Begin(n) => {
                    number_ok(*n)?;
                    open.push(*n);
                    if open.len() > MAX_DEPTH {
                        return Err(ProgramError::TooDeep);
                    }
                    let mut key = Vec::new();
                    put_key(*n, LEN, &mut key);
                    Step::Begin(key.into())
                }
                Op::End(n) => {
                    if open.pop() != Some(*n) {
                        return Err(ProgramError::UnmatchedEnd(*n));
                    }
                    Step::End
                }
            });
        }
        if !open.is_empty() {
            return Err(ProgramError::UnclosedBegin);
        }
        if literal > MAX_MESSAGE {
            return Err(ProgramError::TooLong(literal));
        }
        Ok(Self {
            steps,
            templates,
            literal,
        })
    }

    /// The templates of the program's fields, in order: `render`'s slot indexes this list.
    pub fn templates(&self) -> &[Template] {
        &self.templates
    }

    /// About how long a rendered message is: the encoded fields and room for each value.
    pub fn size_hint(&self) -> usize {
        PREFIX + self.literal + 16 * self.templates.len()
    }

    /// Renders one call into `out` (cleared first): the 5-byte gRPC prefix and the message.
    /// `render(slot, buf)` appends the text of template `slot` to `buf`; `scratch` is a
    /// buffer the caller reuses from call to call.
    pub fn encode_frame(
        &self,
        out: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
        render: &mut dyn FnMut(usize, &mut Vec<u8>),
    ) -> Result<(), ValueError> {
        out.clear();
        out.extend_from_slice(&[0; PREFIX]);
        let mut starts = [0usize; MAX_DEPTH];
        let mut depth = 0;
        for step in &self.steps {
            match step {
                Step::Bytes(b) => out.extend_from_slice(b),
                Step::Field {
                    number,
                    scalar,
                    presence,
                    enum_values,
                    slot,
                } => {
                    scratch.clear();
                    render(*slot, scratch);
                    encode_scalar(*number, *scalar, *presence, enum_values, scratch, out)?;
                }
                Step::Begin(key) => {
                    out.extend_from_slice(key);
                    // One byte of length, widened at `end` if the message is longer.
                    out.push(0);
                    starts[depth] = out.len();
                    depth += 1;
                }
                Step::End => {
                    depth -= 1;
                    let start = starts[depth];
                    let len = out.len() - start;
                    let mut v = [0u8; 10];
                    let n = varint_into(len as u64, &mut v);
                    if n > 1 {
                        out.resize(out.len() + n - 1, 0);
                        out.copy_within(start..start + len, start + n - 1);
                    }
                    out[start - 1..start - 1 + n].copy_from_slice(&v[..n]);
                }
            }
            if out.len() - PREFIX > MAX_MESSAGE {
                return Err(ValueError::TooLong(out.len() - PREFIX));
            }
        }
        let len = (out.len() - PREFIX) as u32;
        out[1..PREFIX].copy_from_slice(&len.to_be_bytes());
        Ok(())
    }
}

/// Encodes the field `number` of type `scalar` from its rendered `text`, leaving out a default
/// value of a field without presence.
fn encode_scalar(
    number: u32,
    scalar: Scalar,
    presence: bool,
    enum_values: &[(Box<str>, i32)],
    text: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ValueError> {
    let bad = || ValueError::NotAValue {
        number,
        scalar,
        text: String::from_utf8_lossy(&text[..text.len().min(64)]).into_owned(),
    };
    let s = std::str::from_utf8(text).map_err(|_| bad())?;
    // An integer's text: what protobuf JSON reads for the 64-bit types given as strings.
    fn int<T: std::str::FromStr>(s: &str) -> Option<T> {
        s.parse().ok()
    }
    let varint_field = |v: u64, out: &mut Vec<u8>| {
        if v != 0 || presence {
            put_key(number, VARINT, out);
            put_varint(v, out);
        }
    };
    match scalar {
        Scalar::String => {
            if !s.is_empty() || presence {
                put_key(number, LEN, out);
                put_varint(s.len() as u64, out);
                out.extend_from_slice(text);
            }
        }
        Scalar::Bytes => {
            let b = crate::protocol::decode_base64(s).map_err(|_| bad())?;
            if !b.is_empty() || presence {
                put_key(number, LEN, out);
                put_varint(b.len() as u64, out);
                out.extend_from_slice(&b);
            }
        }
        Scalar::Bool => {
            let v = match s {
                "true" => true,
                "false" => false,
                _ => return Err(bad()),
            };
            varint_field(u64::from(v), out);
        }
        // Negative int32 values are sign-extended to 64 bits, as protobuf encodes them.
        Scalar::Int32 => varint_field(int::<i32>(s).ok_or_else(bad)? as i64 as u64, out),
        Scalar::Int64 => varint_field(int::<i64>(s).ok_or_else(bad)? as u64, out),
        Scalar::Uint32 => varint_field(u64::from(int::<u32>(s).ok_or_else(bad)?), out),
        Scalar::Uint64 => varint_field(int::<u64>(s).ok_or_else(bad)?, out),
        Scalar::Sint32 => {
            let v = int::<i32>(s).ok_or_else(bad)?;
            varint_field(u64::from(((v << 1) ^ (v >> 31)) as u32), out);
        }
        Scalar::Sint64 => {
            let v = int::<i64>(s).ok_or_else(bad)?;
            varint_field(((v << 1) ^ (v >> 63)) as u64, out);
        }
        Scalar::Enum => {
            let v = match enum_values.iter().find(|(name, _)| &**name == s) {
                Some((_, v)) => *v,
                None => int::<i32>(s).ok_or_else(bad)?,
            };
            varint_field(v as i64 as u64, out);
        }
        Scalar::Fixed32 | Scalar::Sfixed32 | Scalar::Float => {
            let bytes = match scalar {
                Scalar::Fixed32 => int::<u32>(s).ok_or_else(bad)?.to_le_bytes(),
                Scalar::Sfixed32 => int::<i32>(s).ok_or_else(bad)?.to_le_bytes(),
                _ => {
                    // Read as a double, then narrowed, as protobuf JSON reads a float.
                    let d = s.parse::<f64>().map_err(|_| bad())?;
                    let f = d as f32;
                    if d.is_finite() && !f.is_finite() {
                        return Err(bad());
                    }
                    if f == 0.0 && !presence {
                        return Ok(());
                    }
                    f.to_le_bytes()
                }
            };
            if bytes != [0; 4] || presence || scalar == Scalar::Float {
                put_key(number, I32, out);
                out.extend_from_slice(&bytes);
            }
        }
        Scalar::Fixed64 | Scalar::Sfixed64 | Scalar::Double => {
            let bytes = match scalar {
                Scalar::Fixed64 => int::<u64>(s).ok_or_else(bad)?.to_le_bytes(),
                Scalar::Sfixed64 => int::<i64>(s).ok_or_else(bad)?.to_le_bytes(),
                _ => {
                    let d = s.parse::<f64>().map_err(|_| bad())?;
                    if d == 0.0 && !presence {
                        return Ok(());
                    }
                    d.to_le_bytes()
                }
            };
            if bytes != [0; 8] || presence || scalar == Scalar::Double {
                put_key(number, I64, out);
                out.extend_from_slice(&bytes);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(number: u32, scalar: Scalar, value: &str) -> TemplatedField {
        TemplatedField {
            number,
            scalar,
            value: Template::parse(value).unwrap(),
            presence: false,
            enum_values: BTreeMap::new(),
        }
    }

    /// Renders `program` with `values` standing for its templates, in order.
    fn render(program: MessageProgram, values: &[&str]) -> Result<Vec<u8>, ValueError> {
        let enc = Encoder::new(&program).unwrap();
        let mut out = Vec::new();
        let mut scratch = Vec::new();
        enc.encode_frame(&mut out, &mut scratch, &mut |i, buf| {
            buf.extend_from_slice(values[i].as_bytes())
        })?;
        assert_eq!(
            u32::from_be_bytes(out[1..5].try_into().unwrap()) as usize,
            out.len() - 5
        );
        Ok(out[5..].to_vec())
    }

    #[test]
    fn scalars_encode_as_protobuf_does() {
        let one = |scalar, text: &str| {
            let mut b = ProgramBuilder::default();
            b.field(field(1, scalar, "${x}"));
            render(b.finish(), &[text])
        };
        assert_eq!(one(Scalar::String, "hi").unwrap(), [0x0a, 2, b'h', b'i']);
        assert_eq!(one(Scalar::String, "").unwrap(), [0u8; 0]);
        assert_eq!(one(Scalar::Int64, "150").unwrap(), [0x08, 0x96, 0x01]);
        assert_eq!(one(Scalar::Int32, "-1").unwrap().len(), 11);
        assert_eq!(one(Scalar::Sint32, "-1").unwrap(), [0x08, 1]);
        assert_eq!(one(Scalar::Sint64, "1").unwrap(), [0x08, 2]);
        assert_eq!(one(Scalar::Bool, "true").unwrap(), [0x08, 1]);
        assert_eq!(one(Scalar::Bool, "false").unwrap(), [0u8; 0]);
        assert_eq!(one(Scalar::Fixed32, "1").unwrap(), [0x0d, 1, 0, 0, 0]);
        assert_eq!(
            one(Scalar::Double, "1.5").unwrap(),
            [0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f]
        );
        assert_eq!(one(Scalar::Double, "-0").unwrap(), [0u8; 0]);
        assert_eq!(
            one(Scalar::Bytes, "3q2+7w==").unwrap(),
            [0x0a, 4, 0xde, 0xad, 0xbe, 0xef]
        );
        for (scalar, text) in [
            (Scalar::Int64, "abc"),
            (Scalar::Int64, " 1"),
            (Scalar::Uint32, "-1"),
            (Scalar::Int32, "2147483648"),
            (Scalar::Bool, "yes"),
            (Scalar::Float, "1e39"),
            (Scalar::Bytes, "!!"),
            (Scalar::Enum, "NOPE"),
        ] {
            let e = one(scalar, text).unwrap_err();
            assert!(
                matches!(e, ValueError::NotAValue { .. }),
                "{scalar:?} {text}"
            );
        }
        let mut b = ProgramBuilder::default();
        let mut f = field(3, Scalar::Enum, "${x}");
        f.enum_values.insert("BLUE".into(), 2);
        f.presence = true;
        b.field(f);
        assert_eq!(render(b.finish(), &["BLUE"]).unwrap(), [0x18, 2]);
    }

    #[test]
    fn nested_lengths_are_counted_when_rendered() {
        // { a: 1, inner: { note: <text>, deeper: { n: <text> } }, z: 2 }
        let mut b = ProgramBuilder::default();
        b.bytes(&[0x08, 1]);
        b.begin(2);
        b.field(field(1, Scalar::String, "${x}"));
        b.begin(2);
        b.field(field(1, Scalar::Int64, "${y}"));
        b.end();
        b.end();
        b.bytes(&[0x18, 2]);
        let p = b.finish();
        assert_eq!(p.0.len(), 8);
        let short = render(p.clone(), &["ab", "1"]).unwrap();
        assert_eq!(
            short,
            [0x08, 1, 0x12, 8, 0x0a, 2, b'a', b'b', 0x12, 2, 0x08, 1, 0x18, 2]
        );
        // 200 bytes of text: the outer length takes two bytes, shifting what follows.
        let long = "x".repeat(200);
        let out = render(p, &[&long, "0"]).unwrap();
        assert_eq!(&out[..5], [0x08, 1, 0x12, 0xcd, 0x01]);
        assert_eq!(&out[5..8], [0x0a, 0xc8, 0x01]);
        assert_eq!(&out[out.len() - 4..], [0x12, 0, 0x18, 2]);
    }

    #[test]
    fn programs_are_checked_and_bounded() {
        let bad = |ops: Vec<Op>| Encoder::new(&MessageProgram(ops)).unwrap_err().to_string();
        assert!(bad(vec![Op::End(1)]).contains("without its `begin: 1`"));
        assert!(bad(vec![Op::Begin(2), Op::End(1)]).contains("without its `begin: 1`"));
        assert!(bad(vec![Op::Begin(1)]).contains("without its `end`"));
        assert!(bad(vec![Op::Begin(0), Op::End(0)]).contains("field number"));
        assert!(bad(vec![Op::Bytes("!!".into())]).contains("base64"));
        let deep: Vec<Op> = (0..=MAX_DEPTH)
            .map(|_| Op::Begin(1))
            .chain((0..=MAX_DEPTH).map(|_| Op::End(1)))
            .collect();
        assert!(bad(deep).contains("nest"));
        // A rendered value past the limit is an error of the call, not a panic.
        let mut b = ProgramBuilder::default();
        b.field(field(1, Scalar::String, "${x}"));
        let big = "y".repeat(MAX_MESSAGE);
        assert!(matches!(
            render(b.finish(), &[&big]),
            Err(ValueError::TooLong(_))
        ));
        // The JSON form is the operations as named.
        let mut b = ProgramBuilder::default();
        b.bytes(&[8, 1]);
        b.begin(5);
        b.end();
        let json = serde_json::to_value(b.finish()).unwrap();
        assert_eq!(
            json,
            serde_json::json!([{ "bytes": "CAE=" }, { "begin": 5 }, { "end": 5 }])
        );
        let back: MessageProgram = serde_json::from_value(json).unwrap();
        assert_eq!(back.0[1], Op::Begin(5));
        assert!(serde_json::from_value::<MessageProgram>(
            serde_json::json!([{ "begin": 5, "end": 5 }])
        )
        .is_err());
    }
}
