//! Human durations in scenario files and flags: `250ms`, `10s`, `1.5m`, `2h`.

use std::fmt;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration written as a number followed by `ms`, `s`, `m` or `h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    pub fn from_secs_f64(secs: f64) -> Self {
        Self(Duration::from_secs_f64(secs))
    }
    pub fn as_secs_f64(&self) -> f64 {
        self.0.as_secs_f64()
    }
    pub fn as_nanos(&self) -> u64 {
        u64::try_from(self.0.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Parses `250ms`, `10s`, `1.5m`, `2h`. The unit is mandatory, and the error lists the units.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (num, mult_ns) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e9)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60e9)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600e9)
    } else {
        return Err(format!(
            "invalid duration `{text}`: expected a number followed by ms, s, m or h"
        ));
    };
    let value: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("invalid duration `{text}`: `{num}` is not a number"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("invalid duration `{text}`: must be >= 0"));
    }
    let ns = value * mult_ns;
    if ns > 366.0 * 86_400e9 {
        return Err(format!("invalid duration `{text}`: longer than a year"));
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0.as_nanos();
        if ns.is_multiple_of(1_000_000_000) {
            write!(f, "{}s", ns / 1_000_000_000)
        } else if ns.is_multiple_of(1_000_000) {
            write!(f, "{}ms", ns / 1_000_000)
        } else {
            write!(f, "{}ms", ns as f64 / 1e6)
        }
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text)
            .map(HumanDuration)
            .map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for HumanDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": r"^\s*[0-9]+(\.[0-9]+)?\s*(ms|s|m|h)\s*$",
            "description": "A duration: a number followed by ms, s, m or h, e.g. 250ms, 10s, 1.5m, 2h."
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("1.5m").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration(" 2 s ").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(
            parse_duration("8784h").unwrap(),
            Duration::from_secs(366 * 86_400)
        );
    }

    #[test]
    fn rejects_bad_input() {
        for bad in ["10", "abc", "-1s", "1d", "", "NaNs", "1e30m", "8785h"] {
            assert!(parse_duration(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn display_round_trips() {
        for d in ["10s", "250ms", "1500ms"] {
            let h = HumanDuration(parse_duration(d).unwrap());
            assert_eq!(parse_duration(&h.to_string()).unwrap(), h.0);
        }
    }
}
