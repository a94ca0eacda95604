//! HdrHistogram's V2 format for the [`SPEC`] histogram, compressed or not: the
//! encoders, and decoders that trust no length (they check the size, the cookies, both length
//! fields and the spec in the header before they read a count).

use std::cell::RefCell;
use std::io::Read;

use hdrhistogram::serialization::{Serializer, V2DeflateSerializer, V2Serializer};
use hdrhistogram::Histogram;

use super::{HistError, HistSpec, SparseHist, COUNTS_LEN, SPEC};

/// Largest encoded histogram accepted from the wire.
pub const MAX_ENCODED_BYTES: usize = 1 << 20;
/// Largest decompressed V2 payload accepted (a full histogram of this spec is far smaller).
const MAX_DECODED_BYTES: u64 = 1 << 21;
const V2_COOKIE: u32 = 0x1c84_9303 | 0x10;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9304 | 0x10;
const V2_HEADER_SIZE: usize = 40;
/// Largest count one V2 bucket carries (a zigzag-encoded `i64`).
pub(super) const MAX_V2_COUNT: u64 = i64::MAX as u64;

/// Encodes as compressed V2 (deflate).
pub fn encode(h: &Histogram<u64>) -> Result<Vec<u8>, HistError> {
    let mut out = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut out)
        .map_err(HistError::EncodeDeflate)?;
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

/// Largest uncompressed V2 encoding [`encode_wire`] sends as is. A histogram of a few dozen
/// distinct values is a few hundred bytes; past this, deflate pays for itself on the wire.
pub const WIRE_RAW_MAX: usize = 1024;

/// Encodes for the agent → controller wire: uncompressed V2 when that is at most
/// [`WIRE_RAW_MAX`] bytes (nothing to inflate on the controller), else those bytes
/// compressed ([`deflate_v2`]). Both decoders accept either; the cookie tells them apart.
pub fn encode_wire(h: &Histogram<u64>) -> Result<Vec<u8>, HistError> {
    let mut out = Vec::with_capacity(256);
    V2Serializer::new()
        .serialize(h, &mut out)
        .map_err(HistError::Encode)?;
    if out.len() <= WIRE_RAW_MAX {
        return Ok(out);
    }
    deflate_v2(&out)
}

/// Compressed V2 of an uncompressed V2 encoding: its cookie, the zlib stream's length, the
/// stream, at zlib's fastest level: the agent compresses every interval on the cores it
/// loads with, and the counts' varints leave little for a deeper search to find.
fn deflate_v2(raw: &[u8]) -> Result<Vec<u8>, HistError> {
    use std::io::Write;
    let mut out = Vec::with_capacity(8 + raw.len() / 2);
    out.extend_from_slice(&V2_COMPRESSED_COOKIE.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes()); // the stream's length, set below
    let mut z = flate2::write::ZlibEncoder::new(out, flate2::Compression::fast());
    z.write_all(raw).map_err(HistError::Compress)?;
    let mut out = z.finish().map_err(HistError::Compress)?;
    let len = u32::try_from(out.len() - 8).map_err(|_| HistError::TooLarge(out.len()))?;
    out[4..8].copy_from_slice(&len.to_be_bytes());
    Ok(out)
}

/// [`encode_wire`] of a sparse histogram, the same bytes, without ever building the 184 KiB
/// dense form: the V2 header, then the counts up to the last non-empty bucket as zigzag
/// varints, a run of more than one empty bucket as its negated length (hdrhistogram's V2
/// serializer, to the byte; property-tested), compressed as they are when past
/// [`WIRE_RAW_MAX`].
pub fn encode_wire_sparse(h: &SparseHist) -> Result<Vec<u8>, HistError> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&V2_COOKIE.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes()); // the counts' length, set below
    out.extend_from_slice(&0u32.to_be_bytes()); // normalizing index offset
    out.extend_from_slice(&u32::from(SPEC.significant_digits).to_be_bytes());
    out.extend_from_slice(&SPEC.lowest_us.to_be_bytes());
    out.extend_from_slice(&SPEC.highest_us.to_be_bytes());
    out.extend_from_slice(&1.0f64.to_be_bytes());
    let mut next = 0u32;
    for (i, n) in h.iter() {
        match i - next {
            0 => {}
            1 => put_varint(&mut out, 0),
            run => put_varint(&mut out, zigzag(-i64::from(run))),
        }
        put_varint(&mut out, zigzag(n.min(MAX_V2_COUNT) as i64));
        next = i + 1;
    }
    if next == 0 {
        // Empty: the serializer writes the one count at index 0.
        put_varint(&mut out, 0);
    }
    let len = (out.len() - V2_HEADER_SIZE) as u32;
    out[4..8].copy_from_slice(&len.to_be_bytes());
    if out.len() > WIRE_RAW_MAX {
        return deflate_v2(&out);
    }
    Ok(out)
}

fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

/// hdrhistogram's LEB128-64b9B varint (see [`varint`]).
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    for _ in 0..8 {
        if v < 0x80 {
            out.push(v as u8);
            return;
        }
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Decodes V2 bytes, compressed or not, refusing anything that is not exactly [`SPEC`]. The
/// counts are read by [`decode_sparse`], with its checks, then copied into a dense histogram:
/// hdrhistogram's own deserializer negates a run of zeros unchecked, and a run of `i64::MIN`
/// overflowed it.
pub fn decode(bytes: &[u8]) -> Result<Histogram<u64>, HistError> {
    decode_sparse(bytes).map(|s| s.to_dense())
}
/// A histogram as a report carries it (the `.hlog` cell): base64 of its compressed V2 bytes.
/// Every writer and reader of report files goes through this pair, so they agree.
pub fn to_text(h: &SparseHist) -> Result<String, HistError> {
    use base64::Engine as _;
    Ok(base64::engine::general_purpose::STANDARD.encode(encode_sparse(h)?))
}

/// The histogram of a report's text cell ([`to_text`]), with [`decode`]'s checks.
pub fn from_text(text: &str) -> Result<Histogram<u64>, HistError> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|_| HistError::Base64)?;
    decode(&bytes)
}

/// Encodes a sparse histogram as compressed V2 (the same bytes as its dense form).
pub fn encode_sparse(h: &SparseHist) -> Result<Vec<u8>, HistError> {
    encode(&h.to_dense())
}

thread_local! {
    /// One output buffer per thread, reused across decodes.
    static INFLATED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The zlib body of compressed V2 bytes, after checking their size, cookie and declared
/// length (no length is trusted).
fn compressed_body(bytes: &[u8]) -> Result<&[u8], HistError> {
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
    Ok(body)
}

/// Inflates a zlib stream into `out`, bounded. The same reader as [`decode`]'s: a fresh
/// decoder each time, because a reused inflate state driven with `Finish` fails for good on
/// the miniz backend once a first call runs out of output space (wide histograms did, and
/// their intervals were refused).
fn inflate_into(body: &[u8], out: &mut Vec<u8>) -> Result<(), HistError> {
    out.clear();
    flate2::read::ZlibDecoder::new(body)
        .take(MAX_DECODED_BYTES + 1)
        .read_to_end(out)
        .map_err(HistError::Inflate)?;
    if out.len() as u64 > MAX_DECODED_BYTES {
        return Err(HistError::TooLarge(out.len()));
    }
    Ok(())
}

/// hdrhistogram's LEB128-64b9B varint: 8 groups of 7 bits, then a 9th byte used whole.
fn varint(b: &[u8], at: &mut usize) -> Result<u64, HistError> {
    let mut value = 0u64;
    for k in 0..9 {
        let byte = *b.get(*at).ok_or(HistError::Truncated)?;
        *at += 1;
        if k == 8 {
            return Ok(value | (u64::from(byte) << 56));
        }
        value |= u64::from(byte & 0x7f) << (7 * k);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Ok(value)
}

/// Decodes V2 bytes, compressed or not, straight into a [`SparseHist`], with the checks of
/// [`decode`] and without ever building the 184 KiB dense form. Counts whose sum overflows
/// are refused. Uncompressed bytes are read in place (no copy, no inflate).
pub fn decode_sparse(bytes: &[u8]) -> Result<SparseHist, HistError> {
    if bytes.len() <= MAX_ENCODED_BYTES && be_u32(bytes, 0)? == V2_COOKIE {
        return sparse_from_v2(bytes);
    }
    let body = compressed_body(bytes)?;
    INFLATED.with(|cell| {
        let mut inner = cell.borrow_mut();
        inflate_into(body, &mut inner)?;
        sparse_from_v2(&inner)
    })
}

/// Checks an uncompressed V2 header: its cookie, that the declared payload is exactly what
/// follows, and that it was recorded with [`SPEC`].
fn check_v2_header(inner: &[u8]) -> Result<(), HistError> {
    let cookie = be_u32(inner, 0)?;
    if cookie != V2_COOKIE {
        return Err(HistError::BadCookie(cookie));
    }
    let payload = be_u32(inner, 4)? as usize;
    let actual = inner.len().saturating_sub(V2_HEADER_SIZE);
    if inner.len() < V2_HEADER_SIZE || payload != actual {
        return Err(HistError::LengthMismatch {
            declared: payload,
            actual,
        });
    }
    let got = HistSpec {
        significant_digits: u8::try_from(be_u32(inner, 12)?).unwrap_or(u8::MAX),
        lowest_us: be_u64(inner, 16)?,
        highest_us: be_u64(inner, 24)?,
    };
    if got != SPEC {
        return Err(HistError::SpecMismatch { got });
    }
    Ok(())
}

fn sparse_from_v2(inner: &[u8]) -> Result<SparseHist, HistError> {
    check_v2_header(inner)?;
    if be_u32(inner, 8)? != 0 || f64::from_bits(be_u64(inner, 32)?) != 1.0 {
        return Err(HistError::Normalized);
    }
    let counts = &inner[V2_HEADER_SIZE..];
    BUCKETS.with_borrow_mut(|buckets| {
        buckets.clear();
        let mut total = 0u64;
        let (mut at, mut index) = (0usize, 0usize);
        while at < counts.len() {
            let zz = varint(counts, &mut at)?;
            let n = ((zz >> 1) as i64) ^ -((zz & 1) as i64);
            if n < 0 {
                index =
                    index.saturating_add(usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX));
                continue;
            }
            if n > 0 {
                if index >= COUNTS_LEN {
                    return Err(HistError::IndexOutOfRange(index));
                }
                let n = n as u64;
                total = total.checked_add(n).ok_or(HistError::CountOverflow)?;
                buckets.push((index as u32, n));
            }
            // Saturating: runs of zeros may have taken the index to usize::MAX.
            index = index.saturating_add(1);
        }
        // Every count moves the index on: the buckets ascend strictly.
        Ok(SparseHist::from_ascending(buckets))
    })
}

thread_local! {
    /// A decode's buckets, one buffer per thread reused across decodes: the histogram is
    /// then built with every page at its size, where pushing bucket by bucket grew each
    /// page's list a reallocation at a time (most of a fleet merge's allocations).
    static BUCKETS: RefCell<Vec<(u32, u64)>> = const { RefCell::new(Vec::new()) };
}

#[cfg(test)]
mod tests {
    use super::super::{new_histogram, record, Recorded};
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

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

        /// The sparse encoder writes the dense one's bytes: few values (raw V2), many (past
        /// the raw limit, compressed), counts of one and of many, runs of one empty bucket.
        #[test]
        fn the_sparse_wire_encoding_is_the_dense_one(
            values in proptest::collection::vec(
                (proptest::prop_oneof![1u64..3, 1u64..5_000, 1u64..4_000_000_000], 1u64..70_000),
                0..300,
            )
        ) {
            let mut dense = new_histogram();
            let mut sparse = SparseHist::default();
            for &(v, n) in &values {
                dense.saturating_record_n(v.min(SPEC.highest_us), n);
                sparse.record_n(v, n);
            }
            let bytes = encode_wire_sparse(&sparse).unwrap();
            proptest::prop_assert_eq!(&bytes, &encode_wire(&dense).unwrap());
            proptest::prop_assert_eq!(decode_sparse(&bytes).unwrap(), sparse);
        }
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

    /// A run of `i64::MIN` zeros (nine 0xff bytes, zigzag-decoded) in an otherwise valid
    /// uncompressed histogram: found by the `hist_decode` fuzz target, it overflowed a
    /// negation in hdrhistogram's deserializer (a panic wherever overflow checks are on).
    #[test]
    fn zero_runs_of_i64_min_are_errors_or_nothing() {
        let mut bytes = encode_wire(&new_histogram()).unwrap();
        let counts = [
            0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
        ];
        bytes.truncate(V2_HEADER_SIZE);
        bytes[4..8].copy_from_slice(&(counts.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&counts);
        assert!(matches!(decode(&bytes), Err(HistError::IndexOutOfRange(_))));
        assert!(matches!(
            decode_sparse(&bytes),
            Err(HistError::IndexOutOfRange(_))
        ));
        // Two such runs (the index saturates), then a zero count: nothing is counted (the
        // index past the runs overflowed in `decode_sparse`; found by the fuzz target too).
        let mut counts = vec![0xff; 18];
        counts.push(0);
        bytes.truncate(V2_HEADER_SIZE);
        bytes[4..8].copy_from_slice(&(counts.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&counts);
        assert!(decode_sparse(&bytes).unwrap().is_empty());
        assert!(decode(&bytes).unwrap().is_empty());
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

    #[test]
    fn wide_histograms_decode_sparse_like_dense() {
        // Many distinct values: the decompressed V2 payload is far larger than 4 KiB.
        let mut h = new_histogram();
        for v in (1..3_000_000u64).step_by(37) {
            h.record(v).unwrap();
        }
        let bytes = encode(&h).unwrap();
        let sparse = decode_sparse(&bytes).unwrap();
        assert_eq!(sparse.len(), h.len());
        assert_eq!(encode_sparse(&sparse).unwrap(), bytes);
        // Reused inflate state: a small one after the wide one still decodes.
        let mut small = new_histogram();
        small.record(42).unwrap();
        assert_eq!(decode_sparse(&encode(&small).unwrap()).unwrap().len(), 1);
    }

    /// V2 carries a count as a signed varint, so a bucket holds at most `i64::MAX`; merging
    /// two such buckets (two agents sending the largest counts the decoder accepts) must not
    /// make the merged histogram impossible to encode, or the run's report cannot be built.
    #[test]
    fn merged_counts_beyond_what_v2_carries_still_encode() {
        let mut h = new_histogram();
        h.record_n(1_000, i64::MAX as u64).unwrap();
        h.record_n(5, 3).unwrap();
        let one = decode_sparse(&encode_wire(&h).unwrap()).unwrap();
        let mut merged = one.clone();
        merged.add(&one);
        assert_eq!(merged.len(), u64::MAX, "the total saturates");
        let back = decode_sparse(&encode_sparse(&merged).unwrap()).unwrap();
        let mut clamped = new_histogram();
        clamped.record_n(1_000, i64::MAX as u64).unwrap();
        clamped.record_n(5, 6).unwrap();
        assert_eq!(
            back,
            SparseHist::from_dense(&clamped),
            "clamped to what V2 carries"
        );
    }

    /// Small histograms cross the wire uncompressed, wide ones compressed; both decoders read
    /// either form to the same counts, and the uncompressed form is checked as strictly.
    #[test]
    fn wire_form_is_raw_when_small_and_decodes_like_compressed() {
        let mut small = new_histogram();
        for v in [3, 700, 2_500, 2_501, 90_000, 1_000_000] {
            small.record_n(v, v % 7 + 1).unwrap();
        }
        let raw = encode_wire(&small).unwrap();
        assert_eq!(be_u32(&raw, 0).unwrap(), V2_COOKIE, "small: uncompressed");
        assert!(raw.len() <= WIRE_RAW_MAX);
        assert_eq!(decode(&raw).unwrap(), small);
        let sparse = decode_sparse(&raw).unwrap();
        assert_eq!(sparse, decode_sparse(&encode(&small).unwrap()).unwrap());
        assert_eq!(encode_sparse(&sparse).unwrap(), encode(&small).unwrap());
        // The empty histogram too.
        let empty = encode_wire(&new_histogram()).unwrap();
        assert!(decode_sparse(&empty).unwrap().is_empty());

        let mut wide = new_histogram();
        for v in (1..3_000_000u64).step_by(37) {
            wide.record(v).unwrap();
        }
        let bytes = encode_wire(&wide).unwrap();
        assert_eq!(
            be_u32(&bytes, 0).unwrap(),
            V2_COMPRESSED_COOKIE,
            "wide: deflated"
        );
        assert_eq!(decode(&bytes).unwrap(), wide);
        assert_eq!(decode_sparse(&bytes).unwrap(), SparseHist::from(&wide));

        // Hostile uncompressed bytes: every length is checked, as for the compressed form.
        for d in [
            decode_sparse as fn(&[u8]) -> Result<SparseHist, HistError>,
            |b: &[u8]| decode(b).map(|h| SparseHist::from(&h)),
        ] {
            assert!(matches!(
                d(&raw[..raw.len() - 1]),
                Err(HistError::LengthMismatch { .. })
            ));
            assert!(d(&raw[..7]).is_err());
            let mut lying = raw.clone();
            lying[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
            assert!(matches!(d(&lying), Err(HistError::LengthMismatch { .. })));
            let mut other = raw.clone();
            other[24..32].copy_from_slice(&1_000u64.to_be_bytes());
            assert!(matches!(d(&other), Err(HistError::SpecMismatch { .. })));
            let mut big = raw.clone();
            big.resize(MAX_ENCODED_BYTES + 1, 0);
            assert!(matches!(d(&big), Err(HistError::TooLarge(_))));
        }
        // A count past the spec's last bucket is refused, not stored.
        let mut far = raw[..V2_HEADER_SIZE].to_vec();
        far.extend_from_slice(&[0xff, 0xff, 0x03, 0x02]); // skip 32,768 buckets, then count 1
        let len = (far.len() - V2_HEADER_SIZE) as u32;
        far[4..8].copy_from_slice(&len.to_be_bytes());
        assert!(matches!(
            decode_sparse(&far),
            Err(HistError::IndexOutOfRange(_))
        ));
    }

    #[test]
    fn a_sequence_of_wide_histograms_decodes_on_one_thread() {
        // Intervals of a 10,000-connection run: latencies from 50 µs to seconds, thousands of
        // counts, each decoded after the previous one on the same thread (the decoder's buffer
        // is reused). Every one must equal its dense decoding.
        for k in 1..40u64 {
            let mut h = new_histogram();
            let mut v = 50 + k;
            while v < 6_000_000 {
                h.record_n(v, 1 + (v % 97) * k).unwrap();
                v += 1 + v / (20 + k);
            }
            let bytes = encode(&h).unwrap();
            let sparse = decode_sparse(&bytes).unwrap();
            assert_eq!(sparse.len(), decode(&bytes).unwrap().len(), "histogram {k}");
            assert_eq!(encode_sparse(&sparse).unwrap(), bytes, "histogram {k}");
        }
    }
}
