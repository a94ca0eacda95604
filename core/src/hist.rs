//! The one histogram spec (design.md §3.2), its wire codec and merge.
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

use std::cell::RefCell;
use std::io::Read;

use hdrhistogram::serialization::{Serializer, V2DeflateSerializer, V2Serializer};
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
/// Largest count one V2 bucket carries (a zigzag-encoded `i64`).
const MAX_V2_COUNT: u64 = i64::MAX as u64;

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
    #[error("count at bucket {0} is beyond the spec's {COUNTS_LEN} buckets")]
    IndexOutOfRange(usize),
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

/// Largest uncompressed V2 encoding [`encode_wire`] sends as is. A histogram of a few dozen
/// distinct values is a few hundred bytes; past this, deflate pays for itself on the wire.
pub const WIRE_RAW_MAX: usize = 1024;

/// Encodes for the agent → controller wire: uncompressed V2 when that is at most
/// [`WIRE_RAW_MAX`] bytes (nothing to inflate on the controller), else compressed V2 as
/// [`encode`]. Both decoders accept either; the cookie tells them apart.
pub fn encode_wire(h: &Histogram<u64>) -> Result<Vec<u8>, HistError> {
    let mut out = Vec::with_capacity(256);
    V2Serializer::new()
        .serialize(h, &mut out)
        .map_err(|e| HistError::Encode(format!("{e:?}")))?;
    if out.len() <= WIRE_RAW_MAX {
        return Ok(out);
    }
    encode(h)
}

/// Decodes V2 bytes, compressed or not, refusing anything that is not exactly [`SPEC`]. The
/// counts are read by [`decode_sparse`], with its checks, then copied into a dense histogram:
/// hdrhistogram's own deserializer negates a run of zeros unchecked, and a run of `i64::MIN`
/// overflowed it.
pub fn decode(bytes: &[u8]) -> Result<Histogram<u64>, HistError> {
    decode_sparse(bytes).map(|s| s.to_dense())
}

/// Adds `src` into `dst`. Merge is addition, so order does not matter.
pub fn merge(dst: &mut Histogram<u64>, src: &Histogram<u64>) -> Result<(), HistError> {
    dst.add(src).map_err(|e| HistError::Merge(format!("{e:?}")))
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

/// Buckets per page: one half sub-bucket range (a factor of two in value).
const PAGE: usize = SUB_BUCKET_HALF_COUNT as usize;
/// A page's list becomes 1024 plain counters (8 KiB) past this many buckets (the list then
/// costs half as much).
const LIST_MAX: usize = 256;

/// A [`SPEC`] histogram whose memory follows what it holds, not the spec's 184 KiB.
///
/// The 23,552 buckets are split into 23 pages of 1024 (one factor of two in value each); only
/// pages that hold counts exist. A page is a sorted list of its non-empty buckets (16 bytes
/// each) until it holds more than 256, then 1024 plain counters (8 KiB). So what one agent
/// sends for an interval costs a few KiB, a histogram merging a whole fleet costs at most the
/// dense size, and a merge is O(buckets added) with no rebuild of the whole histogram.
/// Merging is exact addition (saturating instead of wrapping), and percentiles are computed
/// the way hdrhistogram computes them, to the same bits (property-tested).
#[derive(Debug, Clone, Default)]
pub struct SparseHist {
    /// (page number, page), sorted by page number.
    pages: Vec<(u8, Page)>,
    total: u64,
}

#[derive(Debug, Clone)]
enum Page {
    /// (bucket within the page, count), sorted, no zero counts.
    List(Vec<(u16, u64)>),
    /// `PAGE` counters.
    Dense(Box<[u64]>),
}

impl Page {
    fn add(&mut self, j: u16, n: u64) {
        match self {
            Page::List(l) => match l.binary_search_by_key(&j, |b| b.0) {
                Ok(at) => l[at].1 = l[at].1.saturating_add(n),
                Err(at) => {
                    l.insert(at, (j, n));
                    self.maybe_dense();
                }
            },
            Page::Dense(d) => d[j as usize] = d[j as usize].saturating_add(n),
        }
    }

    fn merge(&mut self, o: &Page) {
        match (&mut *self, o) {
            (Page::Dense(d), Page::Dense(od)) => {
                for (c, n) in d.iter_mut().zip(od.iter()) {
                    *c = c.saturating_add(*n);
                }
            }
            (Page::Dense(d), Page::List(ol)) => {
                for &(j, n) in ol {
                    d[j as usize] = d[j as usize].saturating_add(n);
                }
            }
            (Page::List(l), Page::List(ol)) => {
                list_add(l, ol);
                self.maybe_dense();
            }
            (Page::List(l), Page::Dense(od)) => {
                let mut d = od.clone();
                for &(j, n) in l.iter() {
                    d[j as usize] = d[j as usize].saturating_add(n);
                }
                *self = Page::Dense(d);
            }
        }
    }

    fn maybe_dense(&mut self) {
        if let Page::List(l) = self {
            if l.len() > LIST_MAX {
                let mut d = vec![0u64; PAGE].into_boxed_slice();
                for &(j, n) in l.iter() {
                    d[j as usize] = n;
                }
                *self = Page::Dense(d);
            }
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Page::List(l) => l.capacity() * std::mem::size_of::<(u16, u64)>(),
            Page::Dense(d) => d.len() * 8,
        }
    }
}

impl PartialEq for SparseHist {
    fn eq(&self, o: &Self) -> bool {
        self.total == o.total && self.iter().eq(o.iter())
    }
}

impl Eq for SparseHist {}

impl SparseHist {
    /// The non-empty buckets of a dense histogram of [`SPEC`].
    pub fn from_dense(h: &Histogram<u64>) -> Self {
        let mut s = Self::default();
        for v in h.iter_recorded() {
            let index = index_for(h.lowest_equivalent(v.value_iterated_to()));
            s.add_at(index, v.count_at_value());
        }
        s
    }

    /// A dense copy, for the codec (encoding it gives the same bytes as encoding the
    /// histogram the counts came from). V2 carries a count as a signed varint: a bucket that
    /// merging made larger than `i64::MAX` (only hostile agents' counts get there) is
    /// clamped to it, so the copy always encodes.
    pub fn to_dense(&self) -> Histogram<u64> {
        let mut h = new_histogram();
        for (i, n) in self.iter() {
            // In range by construction; saturates like every count here.
            let _ = h.record_n(value_for(i), n.min(MAX_V2_COUNT));
        }
        h
    }

    /// The non-empty buckets as (bucket index, count), lowest first.
    fn iter(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.pages.iter().flat_map(|(k, page)| {
            let base = u32::from(*k) * PAGE as u32;
            let (list, dense) = match page {
                Page::List(l) => (Some(l.iter()), None),
                Page::Dense(d) => (None, Some(d.iter().enumerate())),
            };
            let list = list
                .into_iter()
                .flatten()
                .map(move |&(j, n)| (base + u32::from(j), n));
            let dense = dense
                .into_iter()
                .flatten()
                .filter(|(_, n)| **n > 0)
                .map(move |(j, n)| (base + j as u32, *n));
            list.chain(dense)
        })
    }

    fn page_mut(&mut self, k: u8) -> &mut Page {
        let at = match self.pages.binary_search_by_key(&k, |p| p.0) {
            Ok(at) => at,
            Err(at) => {
                self.pages.insert(at, (k, Page::List(Vec::new())));
                at
            }
        };
        &mut self.pages[at].1
    }

    /// Adds `n` at bucket `index` (< [`COUNTS_LEN`]).
    fn add_at(&mut self, index: u32, n: u64) {
        let (k, j) = (
            (index as usize / PAGE) as u8,
            (index as usize % PAGE) as u16,
        );
        self.page_mut(k).add(j, n);
        self.total = self.total.saturating_add(n);
    }

    /// Total count.
    pub fn len(&self) -> u64 {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Bytes held on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.pages.capacity() * std::mem::size_of::<(u8, Page)>()
            + self
                .pages
                .iter()
                .map(|(_, p)| p.heap_bytes())
                .sum::<usize>()
    }

    /// Records `n` counts of `us` microseconds (clamped into the spec like [`record`]).
    pub fn record_n(&mut self, us: u64, n: u64) -> Recorded {
        let (v, r) = if us < SPEC.lowest_us {
            (SPEC.lowest_us, Recorded::OutOfRange)
        } else if us > SPEC.highest_us {
            (SPEC.highest_us, Recorded::OutOfRange)
        } else {
            (us, Recorded::InRange)
        };
        if n > 0 {
            self.add_at(index_for(v), n);
        }
        r
    }

    /// Adds `o` into this one. Counts saturate at `u64::MAX` instead of wrapping.
    pub fn add(&mut self, o: &SparseHist) {
        if o.is_empty() {
            return;
        }
        if self.pages.is_empty() {
            self.clone_from(o);
            return;
        }
        for (k, page) in &o.pages {
            self.page_mut(*k).merge(page);
        }
        self.total = self.total.saturating_add(o.total);
    }

    /// Lowest recorded value, 0 when empty (as `Histogram::min`).
    pub fn min(&self) -> u64 {
        self.iter().next().map_or(0, |(i, _)| value_for(i))
    }

    /// Highest equivalent of the highest recorded value, 0 when empty (as `Histogram::max`).
    pub fn max(&self) -> u64 {
        let last = self.pages.iter().rev().find_map(|(k, page)| {
            let j = match page {
                Page::List(l) => l.last().map(|b| usize::from(b.0)),
                Page::Dense(d) => d.iter().rposition(|n| *n > 0),
            }?;
            Some((usize::from(*k) * PAGE + j) as u32)
        });
        last.map_or(0, |i| value_for(i) + range_for(i) - 1)
    }

    /// The value at `quantile`, exactly as `Histogram::value_at_quantile`.
    pub fn value_at_quantile(&self, quantile: f64) -> u64 {
        self.values_at_quantiles([quantile])[0]
    }

    /// The values at several quantiles, each exactly as [`Self::value_at_quantile`] gives it,
    /// in one walk over the counts when the quantiles ascend (a report's percentile row does:
    /// seven walks became one, and the controller computes rows for every interval of a live
    /// run). Quantiles out of order are answered one walk each.
    pub fn values_at_quantiles<const N: usize>(&self, quantiles: [f64; N]) -> [u64; N] {
        let quantiles = quantiles.map(|q| if q > 1.0 { 1.0 } else { q });
        let targets = quantiles.map(|q| ((q * self.total as f64).ceil() as u64).max(1));
        let mut out = [0; N];
        if !targets.is_sorted() {
            for (o, q) in out.iter_mut().zip(quantiles) {
                *o = self.values_at_quantiles([q])[0];
            }
            return out;
        }
        let mut next = 0;
        let mut so_far: u64 = 0;
        for (i, n) in self.iter() {
            so_far = so_far.saturating_add(n);
            while next < N && so_far >= targets[next] {
                let v = value_for(i);
                out[next] = if quantiles[next] == 0.0 {
                    v
                } else {
                    v + range_for(i) - 1
                };
                next += 1;
            }
            if next == N {
                break;
            }
        }
        out
    }

    /// Mean of the bucket midpoints, exactly as `Histogram::mean` (same order of operations).
    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        self.iter().fold(0.0_f64, |acc, (i, n)| {
            acc + median_of(i) as f64 * n as f64 / self.total as f64
        })
    }

    /// Standard deviation, exactly as `Histogram::stdev`.
    pub fn stdev(&self) -> f64 {
        self.stdev_about(self.mean())
    }

    /// [`Self::stdev`] given the [`Self::mean`] already computed: one walk instead of two.
    pub fn stdev_about(&self, mean: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let dev_total = self.iter().fold(0.0_f64, |acc, (i, n)| {
            let dev = median_of(i) as f64 - mean;
            acc + (dev * dev) * n as f64
        });
        (dev_total / self.total as f64).sqrt()
    }

    /// The non-empty buckets as (midpoint value in µs, count), lowest first.
    pub fn iter_medians(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.iter().map(|(i, n)| (median_of(i), n))
    }
}

/// Adds the sorted list `o` into the sorted list `l`, in place: one forward pass adds the
/// buckets both hold and counts the new ones, then, only if there are new ones, one backward
/// pass from the end merges them in (no second list). A linear walk rather than a binary
/// search per bucket: the controller adds each agent's few dozen buckets into lists of up to
/// [`LIST_MAX`] thousands of times a second, and the searches' unpredictable branches were
/// most of its merge time.
fn list_add(l: &mut Vec<(u16, u64)>, o: &[(u16, u64)]) {
    let Some(first) = o.first() else { return };
    if l.is_empty() {
        l.extend_from_slice(o);
        return;
    }
    let mut i = l.partition_point(|b| b.0 < first.0);
    let mut missing = 0usize;
    for &(j, n) in o {
        while i < l.len() && l[i].0 < j {
            i += 1;
        }
        match l.get_mut(i) {
            Some(b) if b.0 == j => {
                b.1 = b.1.saturating_add(n);
                i += 1;
            }
            _ => missing += 1,
        }
    }
    if missing == 0 {
        return;
    }
    // Backward merge: `a` and `b` count what is left of `l` and `o`, `w` is where the next
    // bucket (from the top) goes. The buckets of `o` already in `l` were added above.
    let (mut a, mut b) = (l.len(), o.len());
    l.resize(a + missing, (0, 0));
    let mut w = l.len();
    while b > 0 {
        let y = o[b - 1];
        w -= 1;
        if a > 0 && l[a - 1].0 >= y.0 {
            if l[a - 1].0 == y.0 {
                b -= 1;
            }
            l[w] = l[a - 1];
            a -= 1;
        } else {
            l[w] = y;
            b -= 1;
        }
    }
}

#[inline]
fn median_of(index: u32) -> u64 {
    value_for(index) + (range_for(index) >> 1)
}

impl From<&Histogram<u64>> for SparseHist {
    fn from(h: &Histogram<u64>) -> Self {
        Self::from_dense(h)
    }
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
        .map_err(|e| HistError::Inflate(e.to_string()))?;
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
        return Err(HistError::Decode(
            "unsupported normalizing offset or ratio".into(),
        ));
    }
    let counts = &inner[V2_HEADER_SIZE..];
    let (mut h, mut total) = (SparseHist::default(), 0u64);
    let (mut at, mut index) = (0usize, 0usize);
    while at < counts.len() {
        let zz = varint(counts, &mut at)?;
        let n = ((zz >> 1) as i64) ^ -((zz & 1) as i64);
        if n < 0 {
            index = index.saturating_add(usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX));
            continue;
        }
        if n > 0 {
            if index >= COUNTS_LEN {
                return Err(HistError::IndexOutOfRange(index));
            }
            let n = n as u64;
            total = total.checked_add(n).ok_or(HistError::CountOverflow)?;
            h.add_at(index as u32, n);
        }
        // Saturating: runs of zeros may have taken the index to usize::MAX.
        index = index.saturating_add(1);
    }
    Ok(h)
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
        assert_eq!(bytes, encode(&wide).unwrap());

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

    /// The in-place list merge against a plain map, on overlapping, disjoint, interleaved and
    /// edge lists.
    #[test]
    fn list_add_merges_like_a_map() {
        let cases: [(&[u16], &[u16]); 7] = [
            (&[1, 5, 9], &[0, 5, 10]),
            (&[1, 2, 3], &[4, 5]),
            (&[4, 5], &[1, 2, 3]),
            (&[2, 4, 6, 8], &[1, 3, 5, 7, 9]),
            (&[7], &[7]),
            (&[], &[3, 1000]),
            (&[0, 1023], &[]),
        ];
        for (x, y) in cases {
            let mut l: Vec<(u16, u64)> = x.iter().map(|&j| (j, u64::from(j) + 1)).collect();
            let o: Vec<(u16, u64)> = y.iter().map(|&j| (j, 10 * u64::from(j) + 3)).collect();
            let mut want = std::collections::BTreeMap::new();
            for &(j, n) in l.iter().chain(&o) {
                *want.entry(j).or_insert(0u64) += n;
            }
            list_add(&mut l, &o);
            assert_eq!(l, want.into_iter().collect::<Vec<_>>(), "{x:?} + {y:?}");
        }
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
