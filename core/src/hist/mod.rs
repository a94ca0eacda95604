//! The one histogram spec (`docs/design.md`), its bucket layout and merge; its wire codec
//! (`codec`) and the sparse form the controller keeps (`sparse`) are submodules.
//!
//! Values are microseconds from 1 µs to 1 h with 3 significant digits. The codec is
//! HdrHistogram's V2 format, deflate-compressed (the same bytes `.hlog` files carry). On the
//! agent → controller wire ([`encode_wire`]) a small histogram goes uncompressed instead: V2's
//! own cookie says which form it is, and inflating a few hundred bytes cost the controller
//! more than everything else it does with them (a fresh inflate state per histogram, 13,000
//! a second with a thousand agents). The decoders accept both forms and trust nothing: they
//! check the size, the cookies, both length fields and the spec in the header before they
//! read the counts.
//!
//! A dense `hdrhistogram::Histogram` of this spec is 184 KiB whatever it holds. Everything the
//! controller stores or merges is a [`SparseHist`] instead (only non-empty buckets), decoded
//! straight from the wire bytes by [`decode_sparse`]; a dense histogram is built only
//! transiently, to encode ([`SparseHist::to_dense`]).

mod codec;
mod sparse;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

pub use codec::{
    decode, decode_sparse, encode, encode_sparse, encode_wire, encode_wire_sparse, from_text,
    to_text, MAX_ENCODED_BYTES, WIRE_RAW_MAX,
};
pub use sparse::SparseHist;

/// The histogram spec every part of Stampede uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistSpec {
    /// The lowest value recorded as itself, µs; smaller ones are recorded at it and counted out
    /// of range.
    pub lowest_us: u64,
    /// The largest value it records, µs; larger ones are recorded at it and counted out of range.
    pub highest_us: u64,
    /// Decimal digits of precision kept at every magnitude.
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

/// A histogram that cannot be decoded or merged. Encoded histograms arrive from agents and
/// from report files, so every variant but the encoding ones is hostile or broken input.
#[derive(Debug, thiserror::Error)]
pub enum HistError {
    /// Over [`MAX_ENCODED_BYTES`] encoded, or over what the spec's counts can inflate to.
    #[error("encoded histogram is {0} bytes, more than the limit of {MAX_ENCODED_BYTES}")]
    TooLarge(usize),
    /// Ends before its header or its counts do.
    #[error("encoded histogram is truncated")]
    Truncated,
    /// The first four bytes are not a V2 cookie, plain or compressed.
    #[error("not a compressed V2 histogram (cookie {0:#x})")]
    BadCookie(u32),
    /// The header's length is not the bytes that follow it.
    #[error("length field says {declared} bytes but {actual} are present")]
    LengthMismatch {
        /// Bytes the header says.
        declared: usize,
        /// Bytes there are.
        actual: usize,
    },
    /// The compressed form does not inflate.
    #[error("decompressing: {0}")]
    Inflate(std::io::Error),
    /// Another range or precision than [`SPEC`]: its buckets would not add up with ours.
    #[error("histogram spec {got:?} differs from the required {SPEC:?}")]
    SpecMismatch {
        /// The spec the header gives.
        got: HistSpec,
    },
    /// A normalizing offset or ratio other than none, which only other writers use.
    #[error("decoding counts: a normalizing offset or ratio, which Stampede never writes")]
    Normalized,
    /// The serializer refused (a count above `i64::MAX`).
    #[error("encoding: {0}")]
    Encode(hdrhistogram::serialization::V2SerializeError),
    /// The compressing serializer refused.
    #[error("encoding: {0}")]
    EncodeDeflate(hdrhistogram::serialization::V2DeflateSerializeError),
    /// Compressing the wire form failed.
    #[error("compressing: {0}")]
    Compress(std::io::Error),
    /// The two histograms cannot be added (a value out of the destination's range).
    #[error("merging: {0}")]
    Merge(hdrhistogram::AdditionError),
    /// A report's text form is not base64.
    #[error("not valid base64")]
    Base64,
    /// The counts run past the spec's last bucket.
    #[error("count at bucket {0} is beyond the spec's {COUNTS_LEN} buckets")]
    IndexOutOfRange(usize),
    /// The counts overflow the total a histogram can hold.
    #[error("the counts add up to more than 2^64")]
    CountOverflow,
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
    /// Inside [1 µs, 1 h]: recorded as it was.
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

/// Adds `src` into `dst`. Merge is addition, so order does not matter.
pub fn merge(dst: &mut Histogram<u64>, src: &Histogram<u64>) -> Result<(), HistError> {
    dst.add(src).map_err(HistError::Merge)
}

// The bucket layout of [`SPEC`], as hdrhistogram computes it: unit magnitude 0 (lowest 1 µs),
// 2048 sub-buckets (3 digits), of which the upper half (1024) is used past bucket 0, and 22
// buckets to reach 1 h. Checked against the library in the tests.
const SUB_BUCKET_HALF_COUNT_MAGNITUDE: u32 = 10;
const SUB_BUCKET_HALF_COUNT: u32 = 1 << SUB_BUCKET_HALF_COUNT_MAGNITUDE;
const SUB_BUCKET_MASK: u64 = (2 * SUB_BUCKET_HALF_COUNT as u64) - 1;
const LEADING_ZERO_COUNT_BASE: u32 = 64 - (SUB_BUCKET_HALF_COUNT_MAGNITUDE + 1);
/// Number of counts (buckets × half sub-buckets) of a [`SPEC`] histogram.
pub const COUNTS_LEN: usize = 23 * SUB_BUCKET_HALF_COUNT as usize;

/// The lowest value counted at `index` (hdrhistogram's `value_for`).
#[inline]
fn value_for(index: u32) -> u64 {
    let bucket = (index >> SUB_BUCKET_HALF_COUNT_MAGNITUDE) as i64 - 1;
    let sub = (index & (SUB_BUCKET_HALF_COUNT - 1)) + SUB_BUCKET_HALF_COUNT;
    if bucket < 0 {
        u64::from(sub - SUB_BUCKET_HALF_COUNT)
    } else {
        u64::from(sub) << bucket
    }
}

/// Width of the range of values counted at `index`.
#[inline]
fn range_for(index: u32) -> u64 {
    let v = value_for(index);
    let bucket = LEADING_ZERO_COUNT_BASE - (v | SUB_BUCKET_MASK).leading_zeros();
    1 << bucket
}

/// The bucket index a value in [0, 1 h] is counted at (hdrhistogram's `index_for`).
#[inline]
fn index_for(value: u64) -> u32 {
    let bucket = LEADING_ZERO_COUNT_BASE - (value | SUB_BUCKET_MASK).leading_zeros();
    let sub = (value >> bucket) as u32;
    let base = (bucket + 1) << SUB_BUCKET_HALF_COUNT_MAGNITUDE;
    base + sub - SUB_BUCKET_HALF_COUNT
}

/// The midpoint of the values counted at `index` (what `Histogram::mean` weighs a count by).
#[inline]
fn median_of(index: u32) -> u64 {
    value_for(index) + (range_for(index) >> 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_is_reported() {
        let mut h = new_histogram();
        assert_eq!(record(&mut h, 0), Recorded::OutOfRange);
        assert_eq!(record(&mut h, 4_000_000_000), Recorded::OutOfRange);
        assert_eq!(h.len(), 2);
        assert!(h.max() >= 3_599_000_000);
    }
}
