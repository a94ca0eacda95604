//! The lean client's HPACK decoder (RFC 7541): an answer's header block read field by field,
//! its dynamic table kept in step with the server's encoder. Written here because the
//! decoders published apart from an HTTP/2 stack rebuild their Huffman table for every string
//! they decode (most of an answer's CPU against nginx, which Huffman-codes its `date`); the
//! Huffman code itself is `httlib-huffman`'s. A server sends the same few strings on every
//! answer (nginx indexes its `server`, `date`, `content-type` and `content-length` anew each
//! time), so the last few Huffman strings are kept decoded, and an evicted entry's buffers
//! hold the next one: an answer's block costs no allocation once the table is full. Lengths
//! are checked against the block before anything is read or kept, and the table never
//! outgrows the size the client allows.

use std::collections::VecDeque;

/// The static table (RFC 7541 Appendix A): index `i` is entry `i + 1`.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// What an entry costs in the table beyond its bytes (RFC 7541 §4.1).
const ENTRY_OVERHEAD: usize = 32;
/// Huffman strings kept decoded.
const MEMO: usize = 4;
/// The longest Huffman string kept decoded.
const MEMO_LEN: usize = 64;
/// Evicted entries whose buffers are kept for the next ones.
const SPARE: usize = 8;

/// Why a header block cannot be decoded: a connection error (COMPRESSION_ERROR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HpackError {
    /// A field, an integer or a string runs past the end of the block.
    #[error("the block ends inside a field")]
    Truncated,
    /// An integer longer than any length or index the client takes.
    #[error("an integer too large")]
    Integer,
    /// An index in neither table.
    #[error("index {0} is in neither table")]
    Index(usize),
    /// A string whose Huffman code is not valid.
    #[error("a Huffman string that does not decode")]
    Huffman,
    /// A table size update past the size the client allows, or after the block's first field.
    #[error("a table size update of {0} bytes where it is not allowed")]
    TableSize(usize),
}

/// One connection's decoder.
#[derive(Debug)]
pub(crate) struct Decoder {
    /// The dynamic table, newest entry first.
    table: VecDeque<Entry>,
    /// Evicted entries, their buffers kept for the next inserts.
    spare: Vec<Entry>,
    /// The last Huffman strings decoded.
    memo: Memo,
    /// Its size (RFC 7541 §4.1).
    size: usize,
    /// Its largest size now, as the encoder last set it.
    max: usize,
    /// The largest size the client allows (its SETTINGS_HEADER_TABLE_SIZE).
    allowed: usize,
    name: Vec<u8>,
    value: Vec<u8>,
}

impl Decoder {
    /// A decoder whose table may grow to `allowed` bytes.
    pub(crate) fn new(allowed: usize) -> Self {
        Self {
            table: VecDeque::new(),
            spare: Vec::new(),
            memo: Memo::default(),
            size: 0,
            max: allowed,
            allowed,
            name: Vec::new(),
            value: Vec::new(),
        }
    }

    /// Decodes the whole `block`, calling `field` with each field's name and value in order.
    pub(crate) fn decode(
        &mut self,
        block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut p = 0;
        let mut first = true;
        while let Some(&b) = block.get(p) {
            if b & 0x80 != 0 {
                let index = integer(block, &mut p, 7)?;
                let (n, v) = self.entry(index)?;
                field(n, v);
            } else if b & 0x40 != 0 {
                self.literal(block, &mut p, 6)?;
                field(&self.name, &self.value);
                self.insert();
            } else if b & 0x20 != 0 {
                let size = integer(block, &mut p, 5)?;
                // RFC 7541 §4.2: only at the start of a block, and within what was allowed.
                if !first || size > self.allowed {
                    return Err(HpackError::TableSize(size));
                }
                self.max = size;
                self.evict(0);
                continue;
            } else {
                // Without indexing (0000) or never indexed (0001): the same to a reader.
                self.literal(block, &mut p, 4)?;
                field(&self.name, &self.value);
            }
            first = false;
        }
        Ok(())
    }

    /// Entry `index` of the static table, or of the dynamic one after it.
    fn entry(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            1..=61 => {
                let (n, v) = STATIC[index - 1];
                Ok((n.as_bytes(), v.as_bytes()))
            }
            _ => self
                .table
                .get(index.wrapping_sub(62))
                .filter(|_| index >= 62)
                .map(|(n, v)| (&n[..], &v[..]))
                .ok_or(HpackError::Index(index)),
        }
    }

    /// A literal field whose name index has `prefix` bits: its name and value into `name` and
    /// `value`.
    fn literal(&mut self, block: &[u8], p: &mut usize, prefix: u8) -> Result<(), HpackError> {
        let index = integer(block, p, prefix)?;
        let mut name = std::mem::take(&mut self.name);
        name.clear();
        let named = if index == 0 {
            string(block, p, &mut name, &mut self.memo)
        } else {
            self.entry(index).map(|(n, _)| name.extend_from_slice(n))
        };
        self.name = name;
        named?;
        self.value.clear();
        string(block, p, &mut self.value, &mut self.memo)
    }

    /// Adds the field in `name` and `value` to the table.
    fn insert(&mut self) {
        let size = self.name.len() + self.value.len() + ENTRY_OVERHEAD;
        if size > self.max {
            // RFC 7541 §4.4: an entry larger than the table empties it and is not kept.
            self.evict(self.max + 1);
            return;
        }
        self.evict(size);
        self.size += size;
        let (mut name, mut value) = self.spare.pop().unwrap_or_default();
        name.clear();
        name.extend_from_slice(&self.name);
        value.clear();
        value.extend_from_slice(&self.value);
        self.table.push_front((name, value));
    }

    /// Evicts the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            let Some(entry) = self.table.pop_back() else {
                break;
            };
            self.size -= entry.0.len() + entry.1.len() + ENTRY_OVERHEAD;
            if self.spare.len() < SPARE {
                self.spare.push(entry);
            }
        }
    }
}

/// An integer with a `prefix`-bit prefix at `p` (RFC 7541 §5.1), at most 2^28: larger than
/// any block the client takes.
fn integer(block: &[u8], p: &mut usize, prefix: u8) -> Result<usize, HpackError> {
    let mask = (1usize << prefix) - 1;
    let first = *block.get(*p).ok_or(HpackError::Truncated)?;
    *p += 1;
    let mut value = usize::from(first) & mask;
    if value < mask {
        return Ok(value);
    }
    let mut shift = 0;
    loop {
        let b = *block.get(*p).ok_or(HpackError::Truncated)?;
        *p += 1;
        value += usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
        if shift > 21 {
            return Err(HpackError::Integer);
        }
    }
}

/// A table entry: a name and a value.
type Entry = (Vec<u8>, Vec<u8>);

/// The last few Huffman strings and what they decode to: the same bytes always decode the same.
#[derive(Debug, Default)]
struct Memo {
    /// Each as (coded, decoded).
    entries: Vec<Entry>,
    /// The entry the next new string replaces.
    next: usize,
}

impl Memo {
    /// Appends what the Huffman string `raw` decodes to.
    fn decode(&mut self, raw: &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
        if let Some((_, decoded)) = self.entries.iter().find(|(coded, _)| coded == raw) {
            out.extend_from_slice(decoded);
            return Ok(());
        }
        let start = out.len();
        httlib_huffman::decode(raw, out, httlib_huffman::DecoderSpeed::FiveBits)
            .map_err(|_| HpackError::Huffman)?;
        if raw.len() <= MEMO_LEN {
            if self.entries.len() < MEMO {
                self.entries.push(Entry::default());
                self.next = self.entries.len() - 1;
            }
            let (coded, decoded) = &mut self.entries[self.next];
            coded.clear();
            coded.extend_from_slice(raw);
            decoded.clear();
            decoded.extend_from_slice(&out[start..]);
            self.next = (self.next + 1) % MEMO;
        }
        Ok(())
    }
}

/// A string literal at `p` (RFC 7541 §5.2), appended to `out`; its length is checked against
/// the block before any of it is read.
fn string(
    block: &[u8],
    p: &mut usize,
    out: &mut Vec<u8>,
    memo: &mut Memo,
) -> Result<(), HpackError> {
    let huffman = block.get(*p).ok_or(HpackError::Truncated)? & 0x80 != 0;
    let len = integer(block, p, 7)?;
    let raw = block.get(*p..*p + len).ok_or(HpackError::Truncated)?;
    *p += len;
    if huffman {
        memo.decode(raw, out)
    } else {
        out.extend_from_slice(raw);
        Ok(())
    }
}

/// Appends an integer with a `prefix`-bit prefix, the prefix's other bits `bits`.
pub(crate) fn put_integer(out: &mut Vec<u8>, mut value: usize, prefix: u8, bits: u8) {
    let mask = (1usize << prefix) - 1;
    if value < mask {
        out.push(bits | value as u8);
        return;
    }
    out.push(bits | mask as u8);
    value -= mask;
    while value >= 0x80 {
        out.push(0x80 | (value & 0x7f) as u8);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decoded field: its name and value.
    type Field = (Vec<u8>, Vec<u8>);

    fn fields(d: &mut Decoder, block: &[u8]) -> Result<Vec<Field>, HpackError> {
        let mut got = Vec::new();
        d.decode(block, |n, v| got.push((n.to_vec(), v.to_vec())))?;
        Ok(got)
    }

    #[test]
    fn the_static_table_reads_as_another_decoder_reads_it() {
        let block: Vec<u8> = (1..=61u8).map(|i| 0x80 | i).collect();
        let ours = fields(&mut Decoder::new(4096), &block).unwrap();
        let theirs = loona_hpack::Decoder::new().decode(&block).unwrap();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn rfc_7541_c4_three_requests_with_huffman_and_the_dynamic_table() {
        // RFC 7541 Appendix C.4: the same decoder for three blocks in a row.
        let mut d = Decoder::new(4096);
        let hex = |s: &str| {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect::<Vec<u8>>()
        };
        let one = fields(&mut d, &hex("828684418cf1e3c2e5f23a6ba0ab90f4ff")).unwrap();
        assert_eq!(
            one[3],
            (b":authority".to_vec(), b"www.example.com".to_vec())
        );
        assert_eq!(d.size, 57);
        let two = fields(&mut d, &hex("828684be5886a8eb10649cbf")).unwrap();
        assert_eq!(
            two[3],
            (b":authority".to_vec(), b"www.example.com".to_vec())
        );
        assert_eq!(two[4], (b"cache-control".to_vec(), b"no-cache".to_vec()));
        assert_eq!(d.size, 110);
        let three = fields(
            &mut d,
            &hex("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"),
        )
        .unwrap();
        assert_eq!(three[4], (b"custom-key".to_vec(), b"custom-value".to_vec()));
        assert_eq!(three[2], (b":path".to_vec(), b"/index.html".to_vec()));
        assert_eq!(d.size, 164);
    }

    #[test]
    fn bad_blocks_are_errors_not_reads_past_their_end() {
        let mut d = Decoder::new(4096);
        assert_eq!(fields(&mut d, &[0x80]), Err(HpackError::Index(0)));
        assert_eq!(fields(&mut d, &[0x80 | 62]), Err(HpackError::Index(62)));
        // A literal whose value claims 100 bytes of a 3-byte block.
        assert_eq!(
            fields(&mut d, &[0x04, 100, b'a']),
            Err(HpackError::Truncated)
        );
        assert_eq!(
            fields(&mut d, &[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]),
            Err(HpackError::Integer)
        );
        // A size update past the allowed 4,096, and one after a field.
        assert_eq!(
            fields(&mut d, &[0x3f, 0xe2, 0x1f]),
            Err(HpackError::TableSize(4097))
        );
        assert_eq!(fields(&mut d, &[0x82, 0x20]), Err(HpackError::TableSize(0)));
        // A Huffman string of all ones past the padding: not a code.
        assert_eq!(
            fields(&mut d, &[0x04, 0x84, 0xff, 0xff, 0xff, 0xff]),
            Err(HpackError::Huffman)
        );
    }

    #[test]
    fn a_repeated_block_decodes_the_same_from_memo_and_spare_buffers() {
        // nginx's answer head: `:status 200`, and `server`, `date`, `content-type` and
        // `content-length` indexed anew each time, Huffman-coded but the length.
        let hex = "887689aa6355e580ae212e1f6196d07abe9403aa5f29141004e2816ae361b8d894c5a37f5f87497ca58ae819aa5c0132";
        let block: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let mut d = Decoder::new(4096);
        let first = fields(&mut d, &block).unwrap();
        assert_eq!(first[0], (b":status".to_vec(), b"200".to_vec()));
        assert_eq!(first[4], (b"content-length".to_vec(), b"2".to_vec()));
        let theirs = loona_hpack::Decoder::new().decode(&block).unwrap();
        assert_eq!(first, theirs);
        // Past the table's 4,096 bytes: entries evicted and their buffers reused.
        for _ in 0..100 {
            assert_eq!(fields(&mut d, &block).unwrap(), first);
            assert!(d.size <= 4096);
        }
        // The newest entries are this block's, newest first (RFC 7541 §2.3.3).
        assert_eq!(fields(&mut d, &[0x80 | 62]).unwrap()[0], first[4]);
        assert_eq!(fields(&mut d, &[0x80 | 65]).unwrap()[0], first[1]);
    }

    #[test]
    fn put_integer_is_read_back() {
        for v in [0usize, 14, 15, 16, 127, 128, 1337, 1 << 20] {
            let mut out = Vec::new();
            put_integer(&mut out, v, 4, 0x10);
            assert_eq!(out[0] & 0xf0, 0x10);
            let mut p = 0;
            assert_eq!(integer(&out, &mut p, 4), Ok(v));
            assert_eq!(p, out.len());
        }
    }

    proptest::proptest! {
        /// Blocks from another encoder, which indexes every new field: the same fields come out,
        /// block after block, while its table fills and evicts (a 256-byte table here).
        #[test]
        fn another_encoders_blocks_decode_to_their_fields(
            blocks in proptest::collection::vec(
                proptest::collection::vec(("[a-d]{1,3}", "[a-z0-9]{0,40}"), 1..8), 1..12)
        ) {
            let mut enc = loona_hpack::Encoder::new();
            enc.set_max_table_size(256);
            let mut d = Decoder::new(256);
            for block in &blocks {
                let headers: Vec<(&[u8], &[u8])> =
                    block.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())).collect();
                // The encoder signals its table size in the first block.
                let bytes = enc.encode(headers.iter().copied());
                let got = fields(&mut d, &bytes).unwrap();
                let want: Vec<(Vec<u8>, Vec<u8>)> =
                    headers.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
                proptest::prop_assert_eq!(got, want);
                proptest::prop_assert!(d.size <= 256);
            }
        }

        /// Any bytes: decoded or refused, never a panic, the table within its bound.
        #[test]
        fn any_bytes_are_decoded_or_refused(b in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let mut d = Decoder::new(128);
            let _ = d.decode(&b, |_, _| {});
            proptest::prop_assert!(d.size <= 128);
        }
    }
}
