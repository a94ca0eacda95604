//! Percentages as a scenario writes them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A percentage as a scenario writes it: `50%`, or the bare number `50` (both mean one half).
/// Written back as the number.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Percent(pub f64);

impl<'de> Deserialize<'de> for Percent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Percent;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a percentage like 50% (or the number 50)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Percent, E> {
                let t = v.trim();
                t.strip_suffix('%')
                    .unwrap_or(t)
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|p| p.is_finite())
                    .map(Percent)
                    .ok_or_else(|| {
                        E::custom(format!(
                            "`{v}` is not a percentage like 50% (or the number 50)"
                        ))
                    })
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Percent, E> {
                Ok(Percent(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Percent, E> {
                Ok(Percent(v as f64))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Percent, E> {
                Ok(Percent(v as f64))
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for Percent {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Percent".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A percentage: `50%`, or the number 50.",
            "anyOf": [
                { "type": "number" },
                { "type": "string", "pattern": "^\\s*[0-9]+(\\.[0-9]+)?\\s*%\\s*$" }
            ]
        })
    }
}
