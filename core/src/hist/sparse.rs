//! [`SparseHist`]: a [`SPEC`] histogram that holds only its non-empty buckets, which the
//! controller stores and merges.

use hdrhistogram::Histogram;

use super::codec::MAX_V2_COUNT;
use super::SUB_BUCKET_HALF_COUNT;
use super::{index_for, median_of, new_histogram, range_for, value_for, Recorded, SPEC};

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

    /// Adds these counts into a dense histogram of [`SPEC`] (saturating): how an agent adds a
    /// step's requests into the run-wide histograms, once per interval.
    pub fn add_to_dense(&self, h: &mut Histogram<u64>) {
        for (i, n) in self.iter() {
            h.saturating_record_n(value_for(i), n);
        }
    }

    /// The non-empty buckets as (bucket index, count), lowest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
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

    /// Adds `n` at bucket `index` (< [`COUNTS_LEN`](super::COUNTS_LEN)).
    pub(super) fn add_at(&mut self, index: u32, n: u64) {
        let (k, j) = (
            (index as usize / PAGE) as u8,
            (index as usize % PAGE) as u16,
        );
        self.page_mut(k).add(j, n);
        self.total = self.total.saturating_add(n);
    }

    /// The histogram of `buckets` (bucket index below [`COUNTS_LEN`](super::COUNTS_LEN),
    /// count), strictly ascending by index and without zero counts, as a decoder reads them:
    /// each page allocated once at its size, dense past [`LIST_MAX`] buckets as
    /// [`push_above`](Self::push_above) would have made it.
    pub(super) fn from_ascending(buckets: &[(u32, u64)]) -> Self {
        let page_of = |b: &(u32, u64)| (b.0 as usize / PAGE) as u8;
        let n_pages = buckets.chunk_by(|a, b| page_of(a) == page_of(b)).count();
        let mut pages = Vec::with_capacity(n_pages);
        let mut total = 0u64;
        for run in buckets.chunk_by(|a, b| page_of(a) == page_of(b)) {
            let k = page_of(&run[0]);
            let page = if run.len() > LIST_MAX {
                let mut d = vec![0u64; PAGE].into_boxed_slice();
                for &(i, n) in run {
                    d[i as usize % PAGE] = n;
                }
                Page::Dense(d)
            } else {
                Page::List(
                    run.iter()
                        .map(|&(i, n)| ((i as usize % PAGE) as u16, n))
                        .collect(),
                )
            };
            total = run.iter().fold(total, |t, b| t.saturating_add(b.1));
            pages.push((k, page));
        }
        Self { pages, total }
    }

    /// Total count.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// How many values were recorded above `us`, to the histogram's resolution: a bucket
    /// counts when its lowest value is above `us`, so values within one bucket's width of it
    /// (0.1 %) may be left out, never counted wrongly in.
    pub fn count_above(&self, us: u64) -> u64 {
        self.iter()
            .filter(|&(i, _)| value_for(i) > us)
            .map(|(_, n)| n)
            .fold(0, u64::saturating_add)
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

    /// Records `n` counts of `us` microseconds (clamped into the spec like
    /// [`record`](super::record)).
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

impl From<&Histogram<u64>> for SparseHist {
    fn from(h: &Histogram<u64>) -> Self {
        Self::from_dense(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values above the bound are counted, the bound itself and below are not, to the bucket.
    #[test]
    fn count_above_counts_what_lies_past_the_bound() {
        let mut h = SparseHist::default();
        for us in [5, 999_000, 1_000_000, 1_010_000, 2_000_000, 3_600_000_000] {
            h.record_n(us, 2);
        }
        assert_eq!(h.count_above(1_000_000), 6);
        assert_eq!(h.count_above(0), 12);
        assert_eq!(h.count_above(4_000_000_000), 0);
        assert_eq!(SparseHist::default().count_above(0), 0);
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

    proptest::proptest! {
        /// Buckets in a decoder's ascending order make the histogram adding them one by one
        /// makes, across pages and past a page's list limit.
        #[test]
        fn ascending_buckets_make_the_histogram_adding_them_makes(
            buckets in proptest::collection::vec((0u32..super::super::COUNTS_LEN as u32, 1u64..1000), 0..600),
        ) {
            let mut buckets = buckets;
            buckets.sort_by_key(|b| b.0);
            buckets.dedup_by_key(|b| b.0);
            let mut added = SparseHist::default();
            for &(i, n) in &buckets {
                added.add_at(i, n);
            }
            let built = SparseHist::from_ascending(&buckets);
            proptest::prop_assert_eq!(built.len(), added.len());
            proptest::prop_assert_eq!(&built, &added);
        }

        /// A page of more buckets than a list holds is built dense, and counts as before.
        #[test]
        fn a_full_page_is_built_dense(extra in 1u16..700) {
            let buckets: Vec<(u32, u64)> =
                (0..(LIST_MAX as u32 + 1 + u32::from(extra))).map(|j| (j, 2)).collect();
            let mut reference = SparseHist::default();
            for &(j, n) in &buckets {
                reference.add_at(j, n);
            }
            let h = SparseHist::from_ascending(&buckets);
            proptest::prop_assert!(matches!(h.pages[0].1, Page::Dense(_)));
            proptest::prop_assert_eq!(h, reference);
        }
    }
}
