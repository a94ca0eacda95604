//! The JSON Pointers a gRPC step's `extract` and `check` read, compiled against the method's
//! reply type into field-number paths (`stampede_core::grpc::reply`), so an agent reads the
//! reply without a descriptor. A pointer names fields by their `.proto` or JSON name, and an
//! element of a repeated field by its index: `/items/0/sku`.

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use stampede_core::grpc::reply::{Hop, ReplyPath, MAX_HOPS};

/// Why a JSON Pointer names no scalar value of a reply: the message says what the pointer
/// meets instead (the caller names the step's field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct PointerError(String);

impl PointerError {
    #[cfg(test)]
    fn contains(&self, text: &str) -> bool {
        self.0.contains(text)
    }
}

/// The path of `pointer` in `reply`.
pub(crate) fn compile(reply: &MessageDescriptor, pointer: &str) -> Result<ReplyPath, PointerError> {
    let whole = || {
        PointerError(format!(
            "`{pointer}` names the whole reply ({}): point at one of its fields",
            reply.full_name()
        ))
    };
    let Some(tokens) = stampede_core::extract::pointer::tokens(pointer) else {
        return Err(PointerError(format!(
            "`{pointer}` is not a JSON Pointer (it starts with /)"
        )));
    };
    let mut segments = tokens.into_iter().peekable();
    let mut message = reply.clone();
    let mut hops = Vec::new();
    while let Some(name) = segments.next() {
        if hops.len() >= MAX_HOPS {
            return Err(PointerError(format!(
                "`{pointer}` goes deeper than {MAX_HOPS} fields"
            )));
        }
        let field = field_of(&message, &name).ok_or_else(|| {
            let known: Vec<String> = message.fields().map(|f| f.name().to_string()).collect();
            PointerError(format!(
                "`{pointer}`: {} has no field `{name}` (it has: {})",
                message.full_name(),
                known.join(", ")
            ))
        })?;
        let at = || format!("`{pointer}` at `{name}`");
        if field.is_map() {
            return Err(PointerError(format!(
                "{}: a map field cannot be read yet (read a message or scalar field)",
                at()
            )));
        }
        if field.is_group() {
            return Err(PointerError(format!(
                "{}: proto2 groups cannot be read",
                at()
            )));
        }
        let index = if field.is_list() {
            let Some(i) = segments.next() else {
                return Err(PointerError(format!(
                    "{}: a repeated field: give the element's index (`/{name}/0`)",
                    at()
                )));
            };
            Some(i.parse::<u32>().map_err(|_| {
                PointerError(format!(
                    "{}: `{i}` is not an index of the repeated field",
                    at()
                ))
            })?)
        } else {
            None
        };
        hops.push(Hop {
            field: field.number(),
            index,
        });
        match field.kind() {
            Kind::Message(inner) => {
                if segments.peek().is_none() {
                    return Err(PointerError(format!(
                        "{}: a message ({}): point at one of its fields",
                        at(),
                        inner.full_name()
                    )));
                }
                message = inner;
            }
            kind => {
                if let Some(next) = segments.next() {
                    return Err(PointerError(format!(
                        "{}: a {} value has no field `{next}`",
                        at(),
                        kind_name(&kind)
                    )));
                }
                return Ok(leaf(&field, hops, kind));
            }
        }
    }
    Err(whole())
}

/// A field by its `.proto` name or its JSON name, as protobuf's JSON parsers accept both.
fn field_of(message: &MessageDescriptor, name: &str) -> Option<FieldDescriptor> {
    message
        .get_field_by_name(name)
        .or_else(|| message.get_field_by_json_name(name))
}

fn leaf(field: &FieldDescriptor, hops: Vec<Hop>, kind: Kind) -> ReplyPath {
    let enum_names = match &kind {
        Kind::Enum(e) => e
            .values()
            .map(|v| (v.number(), v.name().to_string()))
            .collect(),
        _ => Default::default(),
    };
    let kind = crate::program::scalar(&kind);
    ReplyPath {
        hops,
        kind,
        // An element of a repeated field is there or not; a singular field with presence is
        // absent rather than its default.
        presence: !field.is_list() && field.supports_presence(),
        enum_names,
    }
}

fn kind_name(kind: &Kind) -> String {
    match kind {
        Kind::Enum(e) => format!("enum ({})", e.full_name()),
        other => format!("{other:?}").to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use prost_reflect::prost::Message as _;
    use prost_reflect::{DynamicMessage, MessageDescriptor};
    use stampede_core::grpc::GrpcOptions;

    use super::compile;
    use crate::{compile_sources, Sources};

    const PROTO: &str = r#"
syntax = "proto3";
package shop.v1;
enum Status { STATUS_UNKNOWN = 0; PAID = 1; SHIPPED = 2; }
message Item { string sku = 1; uint32 qty = 2; }
message Order {
  int64 id = 1;
  repeated Item items = 2;
  Status status = 3;
  optional string note = 4;
  map<string, string> labels = 5;
  repeated fixed64 codes = 6;
  oneof pay { string card = 7; string iban = 8; }
  bytes blob = 9;
  double total = 10;
  uint64 big_count = 11;
}
"#;

    fn order() -> MessageDescriptor {
        let options = GrpcOptions {
            proto_files: vec!["shop.proto".into()],
            ..Default::default()
        };
        let sources = Sources::new(BTreeMap::from([("shop.proto".into(), PROTO.into())]));
        compile_sources(&options, sources)
            .unwrap()
            .get_message_by_name("shop.v1.Order")
            .unwrap()
    }

    /// A real message encoded by prost-reflect from protobuf JSON, read back through every
    /// compiled path: the agent's walk agrees with the schema's own encoder.
    #[test]
    fn compiled_paths_read_what_the_schema_encodes() {
        let desc = order();
        let json = serde_json::json!({
            "id": "-42",
            "items": [{ "sku": "a-1", "qty": 2 }, { "sku": "b-2" }],
            "status": "SHIPPED",
            "codes": ["7", "18446744073709551615"],
            "iban": "DE00",
            "blob": "AAEC",
            "total": 12.5,
            "bigCount": "9007199254740993",
        });
        let text = json.to_string();
        let mut de = serde_json::Deserializer::from_str(&text);
        let message = DynamicMessage::deserialize(desc.clone(), &mut de).unwrap();
        let bytes = message.encode_to_vec();
        let read = |p: &str| compile(&desc, p).unwrap().lookup(&bytes);
        use serde_json::json;
        assert_eq!(read("/id"), Some(json!(-42)));
        assert_eq!(read("/items/0/sku"), Some(json!("a-1")));
        assert_eq!(read("/items/1/sku"), Some(json!("b-2")));
        assert_eq!(read("/items/1/qty"), Some(json!(0)));
        assert_eq!(read("/items/2/sku"), None);
        assert_eq!(read("/status"), Some(json!("SHIPPED")));
        assert_eq!(read("/codes/1"), Some(json!(u64::MAX)));
        assert_eq!(read("/iban"), Some(json!("DE00")));
        // A oneof member not set, and an optional field left out: no value, not a default.
        assert_eq!(read("/card"), None);
        assert_eq!(read("/note"), None);
        assert_eq!(read("/blob"), Some(json!("AAEC")));
        assert_eq!(read("/total"), Some(json!(12.5)));
        // The JSON name and the .proto name name the same field.
        assert_eq!(read("/bigCount"), Some(json!(9_007_199_254_740_993u64)));
        assert_eq!(read("/big_count"), read("/bigCount"));
    }

    #[test]
    fn pointers_that_name_no_scalar_are_refused_with_the_reason() {
        let desc = order();
        let why = |p: &str| compile(&desc, p).unwrap_err();
        assert!(why("/nope").contains("shop.v1.Order has no field `nope` (it has: id, items,"));
        assert!(why("/items").contains("a repeated field: give the element's index (`/items/0`)"));
        assert!(why("/items/x/sku").contains("`x` is not an index"));
        assert!(why("/items/0").contains("a message (shop.v1.Item): point at one of its fields"));
        assert!(why("/labels/k").contains("a map field"));
        assert!(why("/id/more").contains("has no field `more`"));
        assert!(why("").contains("names the whole reply (shop.v1.Order)"));
        assert!(why("id").contains("not a JSON Pointer"));
        assert!(why("/").contains("has no field ``"));
    }
}
