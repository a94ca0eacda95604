//! What a run does when an agent is lost mid-run.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Percent;

/// What to do when an agent is lost mid-run: `fail`, or `{ tolerate: PCT }`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(into = "LossPolicyRepr")]
pub enum AgentLossPolicy {
    /// Abort the whole run.
    #[default]
    Fail,
    /// Go on while at most this percentage of the planned load is lost with lost agents.
    Tolerate(f64),
}

/// The file form of [`AgentLossPolicy`]: the word `fail`, or a map `{ tolerate: PCT }`. It
/// gives the JSON Schema and the serialised form; reading is by hand (below), so that a
/// mistake names the accepted forms rather than "did not match any variant".
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
enum LossPolicyRepr {
    /// `fail`: abort the run when an agent is lost.
    Word(LossWord),
    /// `{ tolerate: PCT }`: go on while at most PCT % of the load is lost (`50%` or `50`).
    Tolerate {
        #[serde(rename = "tolerate")]
        pct: Percent,
    },
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum LossWord {
    Fail,
}

impl From<AgentLossPolicy> for LossPolicyRepr {
    fn from(p: AgentLossPolicy) -> Self {
        match p {
            AgentLossPolicy::Fail => Self::Word(LossWord::Fail),
            AgentLossPolicy::Tolerate(pct) => Self::Tolerate { pct: Percent(pct) },
        }
    }
}

impl<'de> Deserialize<'de> for AgentLossPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        const FORMS: &str = "`fail`, or `{ tolerate: PCT }` with PCT a percentage like 50%";
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Tolerate {
            tolerate: Percent,
        }
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = AgentLossPolicy;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(FORMS)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<AgentLossPolicy, E> {
                match v.trim() {
                    "fail" => Ok(AgentLossPolicy::Fail),
                    _ => Err(E::custom(format!("`{v}` is not a policy: {FORMS}"))),
                }
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                m: A,
            ) -> Result<AgentLossPolicy, A::Error> {
                let t = Tolerate::deserialize(serde::de::value::MapAccessDeserializer::new(m))?;
                Ok(AgentLossPolicy::Tolerate(t.tolerate.0))
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for AgentLossPolicy {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "AgentLossPolicy".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        LossPolicyRepr::json_schema(g)
    }
}
