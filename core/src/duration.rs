//! Human durations in scenario files and flags: `250ms`, `10s`, `1.5m`, `2h`.

use std::fmt;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration written as a number followed by `ms`, `s`, `m` or `h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    /// Seconds as a duration; panics on a negative or non-finite value, as
    /// [`Duration::from_secs_f64`] does.
    pub fn from_secs_f64(secs: f64) -> Self {
        Self(Duration::from_secs_f64(secs))
    }
    /// The duration in seconds.
    pub fn as_secs_f64(&self) -> f64 {
        self.0.as_secs_f64()
    }
    /// The duration in nanoseconds, saturating at `u64::MAX` (about 584 years).
    pub fn as_nanos(&self) -> u64 {
        u64::try_from(self.0.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Why a duration's text was refused; each message quotes the text and says what to write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// A number without its unit: the one mistake a YAML author makes most.
    #[error("invalid duration `{text}`: a duration needs a unit: ms, s, m or h (e.g. {}s)", example(.num))]
    NoUnit {
        /// The duration as written.
        text: String,
        /// Its number, given back with the `s` the message suggests.
        num: String,
    },
    /// A spelled-out unit (`2 minutes`): the message gives the short form to write.
    #[error("invalid duration `{text}`: write `{num}{unit}` (units: ms, s, m, h)")]
    LongUnit {
        /// The duration as written.
        text: String,
        /// Its number.
        num: String,
        /// The short unit to write instead (`m` for `minutes`).
        unit: &'static str,
    },
    /// A unit that is no spelling of ms, s, m or h.
    #[error("invalid duration `{text}`: unknown unit `{unit}`; use ms, s, m or h")]
    UnknownUnit {
        /// The duration as written.
        text: String,
        /// The unit as written.
        unit: String,
    },
    /// The part before the unit does not parse as a number.
    #[error("invalid duration `{text}`: `{num}` is not a number")]
    NotANumber {
        /// The duration as written.
        text: String,
        /// The part before the unit.
        num: String,
    },
    /// Negative, infinite or NaN.
    #[error("invalid duration `{text}`: must be >= 0")]
    Negative {
        /// The duration as written.
        text: String,
    },
    /// Longer than a year: a typo rather than a test length.
    #[error("invalid duration `{text}`: longer than a year")]
    TooLong {
        /// The duration as written.
        text: String,
    },
}

fn example(num: &str) -> &str {
    if num.is_empty() {
        "10"
    } else {
        num
    }
}

/// Parses `250ms`, `10s`, `1.5m`, `2h`. The unit is mandatory, and the error lists the units.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(t.len());
    let (num, unit) = (t[..split].trim(), t[split..].trim());
    let mult_ns = match unit {
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        "h" => 3600e9,
        "" => {
            return Err(DurationError::NoUnit {
                text: text.into(),
                num: num.into(),
            })
        }
        other => {
            let hint = match other {
                "sec" | "secs" | "second" | "seconds" => Some("s"),
                "min" | "mins" | "minute" | "minutes" => Some("m"),
                "hr" | "hrs" | "hour" | "hours" => Some("h"),
                "msec" | "millis" | "millisecond" | "milliseconds" => Some("ms"),
                _ => None,
            };
            return Err(match hint {
                Some(unit) => DurationError::LongUnit {
                    text: text.into(),
                    num: num.into(),
                    unit,
                },
                None => DurationError::UnknownUnit {
                    text: text.into(),
                    unit: other.into(),
                },
            });
        }
    };
    let value: f64 = num.parse().map_err(|_| DurationError::NotANumber {
        text: text.into(),
        num: num.into(),
    })?;
    if !value.is_finite() || value < 0.0 {
        return Err(DurationError::Negative { text: text.into() });
    }
    let ns = value * mult_ns;
    if ns > 366.0 * 86_400e9 {
        return Err(DurationError::TooLong { text: text.into() });
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
        d.deserialize_any(DurationVisitor)
    }
}

/// Accepts text; a bare number is refused with the units to add, not a type error.
pub(crate) struct DurationVisitor;

impl serde::de::Visitor<'_> for DurationVisitor {
    type Value = HumanDuration;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a duration like 250ms, 10s, 1.5m or 2h")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<HumanDuration, E> {
        parse_duration(v).map(HumanDuration).map_err(E::custom)
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<HumanDuration, E> {
        Err(E::custom(no_unit(&v.to_string())))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<HumanDuration, E> {
        Err(E::custom(no_unit(&v.to_string())))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<HumanDuration, E> {
        Err(E::custom(no_unit(&v.to_string())))
    }
}

fn no_unit(n: &str) -> String {
    format!("`{n}` has no unit: write {n}ms or {n}s (units: ms, s, m, h)")
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
        let e = parse_duration("2 minutes").unwrap_err().to_string();
        assert!(e.contains("write `2m`"), "{e}");
        let e = parse_duration("3 fortnights").unwrap_err().to_string();
        assert!(e.contains("unknown unit `fortnights`"), "{e}");
        let e = parse_duration("500").unwrap_err().to_string();
        assert!(e.contains("needs a unit"), "{e}");
    }

    #[test]
    fn display_round_trips() {
        for d in ["10s", "250ms", "1500ms"] {
            let h = HumanDuration(parse_duration(d).unwrap());
            assert_eq!(parse_duration(&h.to_string()).unwrap(), h.0);
        }
    }
}
