//! Fuzz entry points, shared by the cargo-fuzz targets in `fuzz/` and by the stable-toolchain
//! property tests. Not a stable API.

use bytes::{Bytes, BytesMut};

use crate::frame::{Decoder, Framing};
use crate::login::{self, UserTable};

/// Splits `data` into frames fed in chunks whose sizes come from the first byte; checks that
/// the decoder never buffers more than it may and never panics.
fn drive(framing: Framing, data: &[u8], mut on_frame: impl FnMut(Bytes)) {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let max = usize::from(ctl & 0x3f) * 8;
    let chunk = usize::from(ctl >> 6) * 7 + 1;
    let mut dec = Decoder::new(framing, max);
    let mut buf = BytesMut::new();
    for piece in rest.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match dec.decode(&mut buf) {
                Ok(Some(frame)) => {
                    assert!(frame.len() <= max, "frame over the limit");
                    on_frame(frame);
                }
                Ok(None) => {
                    assert!(buf.len() <= dec.max_buffered(), "buffered past the limit");
                    break;
                }
                Err(_) => return,
            }
        }
    }
    let _ = dec.decode_eof(&mut buf);
}

/// The echo decoder on arbitrary bytes, for both framings; echoed frames re-decode identically.
pub fn echo_decoder(data: &[u8]) {
    for framing in [Framing::Length, Framing::Newline] {
        drive(framing, data, |frame| {
            let mut out = BytesMut::new();
            if crate::frame::encode(framing, &frame, &mut out).is_ok() {
                let mut dec = Decoder::new(framing, frame.len());
                assert_eq!(dec.decode(&mut out).ok().flatten(), Some(frame));
            }
        });
    }
}

/// The login decoder on arbitrary bytes: frames, then request parsing and the table lookup.
pub fn login_decoder(data: &[u8]) {
    let users = UserTable::builtin();
    drive(Framing::Length, data, |frame| {
        if let Ok(req) = login::decode_request(&frame) {
            let action = users.check(&req);
            let mut out = BytesMut::new();
            assert!(login::encode_message(&action, &mut out).is_ok());
        }
    });
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn echo_decoder_never_panics(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            super::echo_decoder(&data);
        }

        #[test]
        fn login_decoder_never_panics(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            super::login_decoder(&data);
        }
    }

    #[test]
    fn login_decoder_handles_valid_requests() {
        let mut data = vec![0x3f];
        let json = br#"{"username":"alice","password":"wonderland"}"#;
        data.extend_from_slice(&(json.len() as u32).to_be_bytes());
        data.extend_from_slice(json);
        super::login_decoder(&data);
    }
}
