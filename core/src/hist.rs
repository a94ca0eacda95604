//! The one histogram spec (design.md §3.2), its wire codec and merge.
//!
//! Values are microseconds from 1 µs to 1 h with 3 significant digits. The codec is
//! HdrHistogram's V2 format, deflate-compressed (the same bytes `.hlog` files carry). The
//! decoder trusts nothing: it checks the size, the cookies, both length fields and the spec
//! in the header before it lets the library read the counts.

use std::io::Read;

use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The histogram spec every part of Stampede uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistSpec {
    pub lowest_us: u64,
    pub highest_us: u64,
    pub significant_digits: u8,
}

impl Default for HistSpec {
    fn default() -> Self {
        SPEC
    }
}

/// 1 µs to 1 h, 3 significant digits.
pub const SPEC: HistSpec = HistSpec {
    lowest_us: 1,
    highest_us: 3_600_000_000,
    significant_digits: 3,
};

/// Largest encoded histogram accepted from the wire.
pub const MAX_ENCODED_BYTES: usize = 1 << 20;
/// Largest decompressed V2 payload accepted (a full histogram of this spec is far smaller).
const MAX_DECODED_BYTES: u64 = 1 << 21;
const V2_COOKIE: u32 = 0x1c84_9303 | 0x10;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9304 | 0x10;
const V2_HEADER_SIZE: usize = 40;

/// A histogram that cannot be decoded or merged.
#[derive(Debug, thiserror::Error)]
pub enum HistError {
    #[error("encoded histogram is {0} bytes, more than the limit of {MAX_ENCODED_BYTES}")]
    TooLarge(usize),
    #[error("encoded histogram is truncated")]
    Truncated,
    #[error("not a compressed V2 histogram (cookie {0:#x})")]
    BadCookie(u32),
    #[error("length field says {declared} bytes but {actual} are present")]
    LengthMismatch { declared: usize, actual: usize },
    #[error("decompressing: {0}")]
    Inflate(String),
    #[error("histogram spec {got:?} differs from the required {SPEC:?}")]
    SpecMismatch { got: HistSpec },
    #[error("decoding counts: {0}")]
    Decode(String),
    #[error("encoding: {0}")]
    Encode(String),
    #[error("merging: {0}")]
    Merge(String),
}

impl HistSpec {
    /// A new empty histogram of this spec.
    pub fn histogram(&self) -> Histogram<u64> {
        Histogram::new_with_bounds(self.lowest_us, self.highest_us, self.significant_digits)
            .unwrap_or_else(|_| new_histogram())
    }
}

/// A new empty histogram of [`SPEC`].
pub fn new_histogram() -> Histogram<u64> {
    #[allow(clippy::expect_used)]
    Histogram::new_with_bounds(SPEC.lowest_us, SPEC.highest_us, SPEC.significant_digits)
        .expect("the constant spec is valid")
}

/// Whether a recorded value was inside the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    InRange,
    /// Outside [1 µs, 1 h]: recorded at the nearest bound and counted by the caller.
    OutOfRange,
}

/// Records `us` microseconds. Values outside the spec are recorded at the nearest bound
/// and reported, so the caller counts them (never silently clamped).
#[inline]
pub fn record(h: &mut Histogram<u64>, us: u64) -> Recorded {
    if us < SPEC.lowest_us {
        h.saturating_record(SPEC.lowest_us);
        Recorded::OutOfRange
    } else if us > SPEC.highest_us {
        h.saturating_record(SPEC.highest_us);
        Recorded::OutOfRange
    } else {
        h.saturating_record(us);
        Recorded::InRange
    }
}

/// Encodes as compressed V2 (deflate).
pub fn encode(h: &Histogram<u64>) -> Result<Vec<u8>, HistError> {
    let mut out = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut out)
        .map_err(|e| HistError::Encode(format!("{e:?}")))?;
    Ok(out)
}

fn be_u32(b: &[u8], at: usize) -> Result<u32, HistError> {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_be_bytes)
        .ok_or(HistError::Truncated)
}

fn be_u64(b: &[u8], at: usize) -> Result<u64, HistError> {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_be_bytes)
        .ok_or(HistError::Truncated)
}

/// Decodes compressed V2 bytes, refusing anything that is not exactly [`SPEC`].
pub fn decode(bytes: &[u8]) -> Result<Histogram<u64>, HistError> {
    if bytes.len() > MAX_ENCODED_BYTES {
        return Err(HistError::TooLarge(bytes.len()));
    }
    let cookie = be_u32(bytes, 0)?;
    if cookie != V2_COMPRESSED_COOKIE {
        return Err(HistError::BadCookie(cookie));
    }
    let declared = be_u32(bytes, 4)? as usize;
    let body = &bytes[8..];
    if declared != body.len() {
        return Err(HistError::LengthMismatch {
            declared,
            actual: body.len(),
        });
    }
    let mut inner = Vec::new();
    flate2::read::ZlibDecoder::new(body)
        .take(MAX_DECODED_BYTES + 1)
        .read_to_end(&mut inner)
        .map_err(|e| HistError::Inflate(e.to_string()))?;
    if inner.len() as u64 > MAX_DECODED_BYTES {
        return Err(HistError::TooLarge(inner.len()));
    }
    let cookie = be_u32(&inner, 0)?;
    if cookie != V2_COOKIE {
        return Err(HistError::BadCookie(cookie));
    }
    let payload = be_u32(&inner, 4)? as usize;
    let actual = inner.len().saturating_sub(V2_HEADER_SIZE);
    if inner.len() < V2_HEADER_SIZE || payload != actual {
        return Err(HistError::LengthMismatch {
            declared: payload,
            actual,
        });
    }
    let got = HistSpec {
        significant_digits: u8::try_from(be_u32(&inner, 12)?).unwrap_or(u8::MAX),
        lowest_us: be_u64(&inner, 16)?,
        highest_us: be_u64(&inner, 24)?,
    };
    if got != SPEC {
        return Err(HistError::SpecMismatch { got });
    }
    Deserializer::new()
        .deserialize(&mut inner.as_slice())
        .map_err(|e| HistError::Decode(format!("{e:?}")))
}

/// Adds `src` into `dst`. Merge is addition, so order does not matter.
pub fn merge(dst: &mut Histogram<u64>, src: &Histogram<u64>) -> Result<(), HistError> {
    dst.add(src).map_err(|e| HistError::Merge(format!("{e:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_every_count() {
        let mut h = new_histogram();
        for v in [1, 5, 999, 5_000, 5_001, 1_000_000, 3_600_000_000] {
            assert_eq!(record(&mut h, v), Recorded::InRange);
        }
        let back = decode(&encode(&h).unwrap()).unwrap();
        assert_eq!(back, h);
    }

    #[test]
    fn out_of_range_is_reported() {
        let mut h = new_histogram();
        assert_eq!(record(&mut h, 0), Recorded::OutOfRange);
        assert_eq!(record(&mut h, 4_000_000_000), Recorded::OutOfRange);
        assert_eq!(h.len(), 2);
        assert!(h.max() >= 3_599_000_000);
    }

    #[test]
    fn hostile_bytes_are_errors() {
        let good = encode(&new_histogram()).unwrap();
        assert!(matches!(decode(&[]), Err(HistError::Truncated)));
        assert!(matches!(
            decode(&good[..good.len() - 1]),
            Err(HistError::LengthMismatch { .. })
        ));
        let mut lying = good.clone();
        lying[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            decode(&lying),
            Err(HistError::LengthMismatch { .. })
        ));
        let mut garbage = good.clone();
        for b in garbage.iter_mut().skip(8) {
            *b ^= 0x5a;
        }
        assert!(decode(&garbage).is_err());
        assert!(matches!(
            decode(&vec![0u8; MAX_ENCODED_BYTES + 1]),
            Err(HistError::TooLarge(_))
        ));
    }

    #[test]
    fn other_specs_are_refused() {
        let other = Histogram::<u64>::new_with_bounds(1, 1_000, 2).unwrap();
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&other, &mut bytes)
            .unwrap();
        assert!(matches!(
            decode(&bytes),
            Err(HistError::SpecMismatch { .. })
        ));
    }
}
