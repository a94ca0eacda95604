//! Protobuf's wire format, the pieces both directions use: the encoding program writes keys
//! and varints ([`super::program`]), the reply paths read them ([`super::reply`]).

use super::program::Scalar;

/// Wire types of the protobuf encoding.
pub(super) const VARINT: u8 = 0;
pub(super) const I64: u8 = 1;
pub(super) const LEN: u8 = 2;
pub(super) const I32: u8 = 5;

/// Largest field number protobuf allows.
pub(super) const MAX_FIELD: u32 = (1 << 29) - 1;

/// The wire type of one unpacked value of type `scalar`.
pub(super) fn wire_type(scalar: Scalar) -> u8 {
    match scalar {
        Scalar::Double | Scalar::Fixed64 | Scalar::Sfixed64 => I64,
        Scalar::Float | Scalar::Fixed32 | Scalar::Sfixed32 => I32,
        Scalar::String | Scalar::Bytes => LEN,
        _ => VARINT,
    }
}

/// Writes `v` as a varint into `buf`; returns its length.
pub(super) fn varint_into(mut v: u64, buf: &mut [u8; 10]) -> usize {
    let mut i = 0;
    loop {
        if v < 0x80 {
            buf[i] = v as u8;
            return i + 1;
        }
        buf[i] = (v as u8 & 0x7f) | 0x80;
        v >>= 7;
        i += 1;
    }
}

pub(super) fn put_varint(v: u64, out: &mut Vec<u8>) {
    let mut b = [0u8; 10];
    let n = varint_into(v, &mut b);
    out.extend_from_slice(&b[..n]);
}

pub(super) fn put_key(number: u32, wire: u8, out: &mut Vec<u8>) {
    put_varint((u64::from(number) << 3) | u64::from(wire), out);
}

/// A base-128 varint of at most 10 bytes at the start of `bytes`, and what follows it;
/// `None` when the bytes end first or it runs longer.
pub(super) fn read_varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut v = 0u64;
    for (i, b) in bytes.iter().take(10).enumerate() {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, &bytes[i + 1..]));
        }
    }
    None
}
