//! What a reference writes when a request is rendered: a value through its filter, the time
//! in each `${now...}` format, and the generators drawn from the session's seeded stream.
//! These run on the agent's request path for every reference; parsing, in the parent
//! module, runs once when the scenario is read, so the two live apart.

use super::{Filter, Generator, TimeFormat};

/// Writes `value` through `filter` to `out`.
pub fn apply_filter(filter: Option<Filter>, value: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match filter {
        None => out.extend_from_slice(value),
        Some(Filter::Hex) => {
            for &b in value {
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 15)]);
            }
        }
        Some(Filter::Url) => {
            for &b in value {
                if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                    out.push(b);
                } else {
                    out.extend_from_slice(&[
                        b'%',
                        HEX[usize::from(b >> 4)].to_ascii_uppercase(),
                        HEX[usize::from(b & 15)].to_ascii_uppercase(),
                    ]);
                }
            }
        }
        Some(Filter::Json) => {
            for &b in value {
                match b {
                    b'"' => out.extend_from_slice(b"\\\""),
                    b'\\' => out.extend_from_slice(b"\\\\"),
                    b'\n' => out.extend_from_slice(b"\\n"),
                    b'\r' => out.extend_from_slice(b"\\r"),
                    b'\t' => out.extend_from_slice(b"\\t"),
                    0..0x20 => out.extend_from_slice(&[
                        b'\\',
                        b'u',
                        b'0',
                        b'0',
                        HEX[usize::from(b >> 4)],
                        HEX[usize::from(b & 15)],
                    ]),
                    _ => out.push(b),
                }
            }
        }
    }
}

/// Writes `unix_ms` (milliseconds since the Unix epoch) to `out` in `format`.
pub fn write_time(unix_ms: u64, format: TimeFormat, out: &mut Vec<u8>) {
    use std::io::Write as _;
    let _ = match format {
        TimeFormat::Millis => write!(out, "{unix_ms}"),
        TimeFormat::Seconds => write!(out, "{}", unix_ms / 1000),
        TimeFormat::Iso => {
            let (secs, ms) = (unix_ms / 1000, unix_ms % 1000);
            let (days, rest) = (secs / 86_400, secs % 86_400);
            let (y, m, d) = civil_from_days(days);
            write!(
                out,
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
                rest / 3600,
                rest % 3600 / 60,
                rest % 60
            )
        }
    };
}

/// The proleptic Gregorian date of `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// The per-session generator: seeded from the run seed and the arrival index only, so the
/// same arrival draws the same values whatever the number of agents.
pub fn session_rng(seed: u64, index: u64) -> rand_chacha::ChaCha8Rng {
    keyed_rng(seed, index, b"sessions")
}

/// The `draw`-th value in [0, 1) of session `index`'s think times: a stream of its own beside
/// [`session_rng`]'s, so adding a think time does not change the values the session generates.
/// Each draw seeks the stream (ChaCha is a counter mode: a seek is one block's work) instead
/// of a session keeping a 300-byte generator for as long as it runs, which a held
/// connection in a think time would carry only to count its pauses.
pub fn think_fraction(seed: u64, index: u64, draw: u32) -> f64 {
    use rand::Rng as _;
    let mut rng = keyed_rng(seed, index, b"thinking");
    // Each draw takes one u64: two of the stream's 32-bit words.
    rng.set_word_pos(u128::from(draw) * 2);
    rng.random::<f64>()
}

fn keyed_rng(seed: u64, index: u64, domain: &[u8; 8]) -> rand_chacha::ChaCha8Rng {
    use rand::SeedableRng;
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&index.to_le_bytes());
    key[16..24].copy_from_slice(domain);
    rand_chacha::ChaCha8Rng::from_seed(key)
}

/// Writes a generated value for session `index` to `out` (unfiltered).
pub fn generate(g: Generator, index: u64, rng: &mut impl rand::Rng, out: &mut Vec<u8>) {
    match g {
        Generator::Uuid => {
            let bytes: [u8; 16] = rng.random();
            let id = uuid::Builder::from_random_bytes(bytes).into_uuid();
            let mut buf = uuid::Uuid::encode_buffer();
            out.extend_from_slice(id.hyphenated().encode_lower(&mut buf).as_bytes());
        }
        Generator::Int { min, max } => {
            let v = rng.random_range(min..=max);
            out.extend_from_slice(v.to_string().as_bytes());
        }
        Generator::Seq { start, step } => {
            let v = i128::from(start) + i128::from(step) * i128::from(index);
            out.extend_from_slice(v.to_string().as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeking the think stream gives the values a generator kept for the session would
    /// have given in turn, so a rerun of an older scenario pauses as it did.
    #[test]
    fn a_think_draw_is_the_streams_value_at_its_position() {
        use rand::Rng as _;
        let mut kept = keyed_rng(7, 3, b"thinking");
        for draw in 0..200 {
            assert_eq!(
                think_fraction(7, 3, draw),
                kept.random::<f64>(),
                "draw {draw}"
            );
        }
        assert_ne!(think_fraction(7, 3, 0), think_fraction(7, 4, 0));
        assert_ne!(think_fraction(7, 3, 0), think_fraction(8, 3, 0));
    }

    #[test]
    fn the_time_is_written_in_each_format() {
        let write = |ms, f| {
            let mut out = Vec::new();
            write_time(ms, f, &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            write(1_700_000_000_123, TimeFormat::Millis),
            "1700000000123"
        );
        assert_eq!(write(1_700_000_000_123, TimeFormat::Seconds), "1700000000");
        assert_eq!(
            write(1_700_000_000_123, TimeFormat::Iso),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(write(0, TimeFormat::Iso), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            write(951_782_400_000, TimeFormat::Iso),
            "2000-02-29T00:00:00.000Z"
        );
    }

    #[test]
    fn filters_escape() {
        let mut out = Vec::new();
        apply_filter(Some(Filter::Url), "a b/ü".as_bytes(), &mut out);
        assert_eq!(out, b"a%20b%2F%C3%BC");
        out.clear();
        apply_filter(Some(Filter::Json), b"q\"\\\n\x01", &mut out);
        assert_eq!(out, b"q\\\"\\\\\\n\\u0001");
        out.clear();
        apply_filter(Some(Filter::Hex), b"\x01\xab", &mut out);
        assert_eq!(out, b"01ab");
    }

    #[test]
    fn generators_depend_on_seed_and_index_only() {
        let draw = |seed, index| {
            let mut rng = session_rng(seed, index);
            let mut out = Vec::new();
            generate(Generator::Uuid, index, &mut rng, &mut out);
            generate(Generator::Int { min: 1, max: 6 }, index, &mut rng, &mut out);
            generate(
                Generator::Seq {
                    start: 100,
                    step: 3,
                },
                index,
                &mut rng,
                &mut out,
            );
            String::from_utf8(out).unwrap()
        };
        assert_eq!(draw(7, 42), draw(7, 42));
        assert_ne!(draw(7, 42), draw(7, 43));
        assert_ne!(draw(7, 42), draw(8, 42));
        let v = draw(7, 42);
        assert_eq!(&v[14..15], "4", "a version 4 UUID: {v}");
        assert!(v.ends_with("226"), "{v}");
    }
}
