//! Frame codecs for the TCP and Unix servers (and their clients).
//!
//! * [`Framing::Length`]: a 4-byte big-endian unsigned length `N`, then `N` payload bytes.
//!   `N = 0` is a valid, empty frame.
//! * [`Framing::Newline`]: payload bytes up to and excluding a `\n` (a `\r` before it is kept).
//!
//! Both refuse frames longer than a maximum *before* buffering them, so a peer that announces a
//! 4 GiB frame costs nothing. The decoder is a pure function over a buffer: it never reads from
//! a socket, never panics, and is fuzzed (see `fuzz/`).

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Size of the length prefix of [`Framing::Length`].
pub const LENGTH_PREFIX: usize = 4;

/// How frames are delimited on a byte stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Framing {
    /// 4-byte big-endian length prefix, then the payload.
    #[default]
    Length,
    /// Payload terminated by a newline (`\n`).
    Newline,
}

/// Why a byte stream could not be split into frames.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A length prefix announced more than the maximum frame size.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    Oversize {
        /// The announced length.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// No newline within the maximum frame size.
    #[error("no newline within {max} bytes")]
    LineTooLong {
        /// The limit.
        max: usize,
    },
    /// The stream ended in the middle of a frame.
    #[error("stream ended inside a frame ({buffered} bytes buffered)")]
    Truncated {
        /// Bytes of the incomplete frame.
        buffered: usize,
    },
    /// A payload to encode contains the delimiter (newline framing).
    #[error("payload contains a newline")]
    EmbeddedNewline,
}

/// A streaming frame decoder.
#[derive(Clone, Debug)]
pub struct Decoder {
    framing: Framing,
    max: usize,
    /// Newline framing: how much of the buffer is known to hold no `\n`.
    scanned: usize,
}

impl Decoder {
    /// A decoder refusing payloads longer than `max_frame` bytes.
    pub fn new(framing: Framing, max_frame: usize) -> Self {
        Self {
            framing,
            max: max_frame,
            scanned: 0,
        }
    }

    /// The most bytes a connection needs to buffer to make progress: one frame and its header.
    pub fn max_buffered(&self) -> usize {
        self.max.saturating_add(LENGTH_PREFIX)
    }

    /// Takes the next complete frame off the front of `buf`, if there is one.
    ///
    /// `Ok(None)` means more bytes are needed. After an `Err`, the stream is unusable.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        match self.framing {
            Framing::Length => {
                if buf.len() < LENGTH_PREFIX {
                    return Ok(None);
                }
                let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
                let len_usize = usize::try_from(len).unwrap_or(usize::MAX);
                if len_usize > self.max {
                    return Err(FrameError::Oversize {
                        len: u64::from(len),
                        max: self.max,
                    });
                }
                if buf.len() - LENGTH_PREFIX < len_usize {
                    return Ok(None);
                }
                buf.advance(LENGTH_PREFIX);
                Ok(Some(buf.split_to(len_usize).freeze()))
            }
            Framing::Newline => {
                let start = self.scanned.min(buf.len());
                match buf[start..].iter().position(|b| *b == b'\n') {
                    Some(i) => {
                        let end = start + i;
                        self.scanned = 0;
                        if end > self.max {
                            return Err(FrameError::LineTooLong { max: self.max });
                        }
                        let mut line = buf.split_to(end + 1);
                        line.truncate(end);
                        Ok(Some(line.freeze()))
                    }
                    None => {
                        if buf.len() > self.max {
                            return Err(FrameError::LineTooLong { max: self.max });
                        }
                        self.scanned = buf.len();
                        Ok(None)
                    }
                }
            }
        }
    }

    /// Like [`Decoder::decode`], for when the stream has ended: leftover bytes are an error.
    pub fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        match self.decode(buf)? {
            Some(frame) => Ok(Some(frame)),
            None if buf.is_empty() => Ok(None),
            None => Err(FrameError::Truncated {
                buffered: buf.len(),
            }),
        }
    }
}

/// Appends `payload` to `out` as one frame.
pub fn encode(framing: Framing, payload: &[u8], out: &mut BytesMut) -> Result<(), FrameError> {
    match framing {
        Framing::Length => {
            let len = u32::try_from(payload.len()).map_err(|_| FrameError::Oversize {
                len: payload.len() as u64,
                max: u32::MAX as usize,
            })?;
            out.reserve(LENGTH_PREFIX + payload.len());
            out.put_u32(len);
            out.put_slice(payload);
        }
        Framing::Newline => {
            if payload.contains(&b'\n') {
                return Err(FrameError::EmbeddedNewline);
            }
            out.reserve(payload.len() + 1);
            out.put_slice(payload);
            out.put_u8(b'\n');
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_all(
        framing: Framing,
        max: usize,
        chunks: &[&[u8]],
    ) -> Result<Vec<Bytes>, FrameError> {
        let mut d = Decoder::new(framing, max);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for c in chunks {
            buf.extend_from_slice(c);
            while let Some(f) = d.decode(&mut buf)? {
                out.push(f);
            }
        }
        while let Some(f) = d.decode_eof(&mut buf)? {
            out.push(f);
        }
        Ok(out)
    }

    #[test]
    fn length_frames() {
        let got = decode_all(
            Framing::Length,
            8,
            &[b"\0\0\0\x02hi\0\0", b"\0\0\0\0\0\x01", b"x"],
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                Bytes::from_static(b"hi"),
                Bytes::new(),
                Bytes::from_static(b"x")
            ]
        );
    }

    #[test]
    fn length_oversize_is_refused_before_buffering() {
        let mut d = Decoder::new(Framing::Length, 8);
        let mut buf = BytesMut::from(&b"\xff\xff\xff\xff"[..]);
        assert_eq!(
            d.decode(&mut buf),
            Err(FrameError::Oversize {
                len: u32::MAX as u64,
                max: 8
            })
        );
    }

    #[test]
    fn length_truncated() {
        assert_eq!(
            decode_all(Framing::Length, 8, &[b"\0\0\0\x05abc"]),
            Err(FrameError::Truncated { buffered: 7 })
        );
        assert_eq!(
            decode_all(Framing::Length, 8, &[b"\0\0"]),
            Err(FrameError::Truncated { buffered: 2 })
        );
    }

    #[test]
    fn newline_frames() {
        let got = decode_all(Framing::Newline, 8, &[b"ab", b"c\n\nd\r", b"\n"]).unwrap();
        assert_eq!(
            got,
            vec![
                Bytes::from_static(b"abc"),
                Bytes::new(),
                Bytes::from_static(b"d\r")
            ]
        );
    }

    #[test]
    fn newline_too_long() {
        assert_eq!(
            decode_all(Framing::Newline, 4, &[b"abcde"]),
            Err(FrameError::LineTooLong { max: 4 })
        );
        assert_eq!(
            decode_all(Framing::Newline, 4, &[b"abc", b"de\n"]),
            Err(FrameError::LineTooLong { max: 4 })
        );
        assert_eq!(
            decode_all(Framing::Newline, 4, &[b"abcd\n"]).unwrap().len(),
            1
        );
    }

    #[test]
    fn encode_refuses_embedded_newline() {
        let mut out = BytesMut::new();
        assert_eq!(
            encode(Framing::Newline, b"a\nb", &mut out),
            Err(FrameError::EmbeddedNewline)
        );
    }

    proptest! {
        #[test]
        fn round_trip_any_chunking(
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..8),
            cut in proptest::collection::vec(1usize..16, 1..40),
            newline in any::<bool>(),
        ) {
            let framing = if newline { Framing::Newline } else { Framing::Length };
            let payloads: Vec<Vec<u8>> = payloads
                .into_iter()
                .map(|mut p| { if newline { p.retain(|b| *b != b'\n'); } p })
                .collect();
            let mut wire = BytesMut::new();
            for p in &payloads {
                encode(framing, p, &mut wire).unwrap();
            }
            let wire = wire.freeze();
            let mut chunks = Vec::new();
            let mut at = 0;
            let mut i = 0;
            while at < wire.len() {
                let n = cut[i % cut.len()].min(wire.len() - at);
                chunks.push(&wire[at..at + n]);
                at += n;
                i += 1;
            }
            let got = decode_all(framing, 64, &chunks).unwrap();
            prop_assert_eq!(got.iter().map(|b| b.to_vec()).collect::<Vec<_>>(), payloads);
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256), max in 0usize..64) {
            for framing in [Framing::Length, Framing::Newline] {
                let _ = decode_all(framing, max, &[&data]);
            }
        }
    }
}
