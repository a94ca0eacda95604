//! WebSocket frames on the client's side: taken whole from the bytes a connection has read,
//! and written masked. The header's wire form is tungstenite's; what a connection keeps
//! between frames is this module's choice: only bytes the server sent past the last frame
//! taken, and no buffer at all when there are none, so a held, idle connection costs no read
//! buffer (at 1 KiB it was a fifth of an agent's memory per held connection).

use std::io::Cursor;

use stampede_core::stats::error_kind;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Control, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::FrameHeader;

use crate::net::Failure;

/// The kinds of frame a client reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The first frame of a text message.
    Text,
    /// The first frame of a binary message.
    Binary,
    /// A later frame of a fragmented message.
    Continue,
    /// A close; its payload is the code and reason.
    Close,
    /// A ping, to be answered with its payload.
    Ping,
    /// A pong.
    Pong,
}

/// One frame read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    /// What it carries.
    pub kind: Kind,
    /// The last frame of its message.
    pub fin: bool,
    /// Its payload.
    pub payload: Vec<u8>,
    /// Bytes it took on the wire, header included.
    pub wire: u64,
}

/// What the bytes read so far hold.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// No whole frame yet: at least this many more bytes are needed (0 when the header
    /// itself is not complete, so its length is unknown).
    Need(usize),
    /// A whole frame, removed from the front of the bytes.
    Frame(Frame),
}

/// Takes the frame at the front of `buf`, never trusting its length: a frame longer than
/// `max` is an error before any of it is buffered. A server's frames are not masked and use
/// no extension (none is negotiated); a reserved opcode, a masked frame, reserved bits, or a
/// control frame that is fragmented or longer than 125 bytes is a protocol error. When the
/// frame was all of `buf`, its allocation is released.
pub(crate) fn take(buf: &mut Vec<u8>, max: usize) -> Result<Taken, Failure> {
    let protocol = Failure(error_kind::PROTOCOL);
    let mut cursor = Cursor::new(&buf[..]);
    let Some((header, len)) = FrameHeader::parse(&mut cursor).map_err(|_| protocol)? else {
        return Ok(Taken::Need(0));
    };
    let head = cursor.position() as usize;
    if header.mask.is_some() || header.rsv1 || header.rsv2 || header.rsv3 {
        return Err(protocol);
    }
    let kind = match header.opcode {
        OpCode::Data(Data::Text) => Kind::Text,
        OpCode::Data(Data::Binary) => Kind::Binary,
        OpCode::Data(Data::Continue) => Kind::Continue,
        OpCode::Control(Control::Close) => Kind::Close,
        OpCode::Control(Control::Ping) => Kind::Ping,
        OpCode::Control(Control::Pong) => Kind::Pong,
        OpCode::Data(Data::Reserved(_)) | OpCode::Control(Control::Reserved(_)) => {
            return Err(protocol)
        }
    };
    let control = matches!(kind, Kind::Close | Kind::Ping | Kind::Pong);
    if control && (!header.is_final || len > 125) {
        return Err(protocol);
    }
    let len = usize::try_from(len)
        .ok()
        .filter(|&n| n <= max)
        .ok_or(protocol)?;
    let total = head + len;
    if buf.len() < total {
        return Ok(Taken::Need(total - buf.len()));
    }
    // The frame is all of `buf` when nothing came past it (the usual case, and always for a
    // frame read straight into its buffer): its allocation becomes the payload, not a copy.
    let payload = if total == buf.len() {
        let mut whole = std::mem::take(buf);
        whole.drain(..head);
        whole
    } else {
        let payload = buf[head..total].to_vec();
        buf.drain(..total);
        payload
    };
    Ok(Taken::Frame(Frame {
        kind,
        fin: header.is_final,
        payload,
        wire: total as u64,
    }))
}

/// A whole frame of `kind` (not `Continue`) with `payload`, masked with `mask` as a client's
/// frames must be.
pub(crate) fn encode(kind: Kind, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let opcode = match kind {
        Kind::Text => OpCode::Data(Data::Text),
        Kind::Binary => OpCode::Data(Data::Binary),
        Kind::Continue => OpCode::Data(Data::Continue),
        Kind::Close => OpCode::Control(Control::Close),
        Kind::Ping => OpCode::Control(Control::Ping),
        Kind::Pong => OpCode::Control(Control::Pong),
    };
    let header = FrameHeader {
        is_final: true,
        rsv1: false,
        rsv2: false,
        rsv3: false,
        opcode,
        mask: Some(mask),
    };
    let len = payload.len() as u64;
    let mut out = Vec::with_capacity(header.len(len) + payload.len());
    // Writing into a Vec cannot fail.
    let _ = header.format(len, &mut out);
    let start = out.len();
    out.extend_from_slice(payload);
    for (i, b) in out[start..].iter_mut().enumerate() {
        *b ^= mask[i & 3];
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A server's frame: unmasked.
    fn server(first: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![first];
        match payload.len() {
            n @ 0..=125 => f.push(n as u8),
            n @ 126..=65_535 => {
                f.push(126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn frames_are_taken_whole_and_the_rest_is_kept() {
        let mut buf = server(0x81, b"hi");
        buf.extend_from_slice(&server(0x89, b"p")[..2]);
        let Taken::Frame(f) = take(&mut buf, 1 << 20).unwrap() else {
            panic!("a whole frame")
        };
        assert_eq!(
            (f.kind, f.fin, &f.payload[..], f.wire),
            (Kind::Text, true, &b"hi"[..], 4)
        );
        // The ping's header is here, its payload not yet.
        assert_eq!(take(&mut buf, 1 << 20).unwrap(), Taken::Need(1));
        buf.push(b'p');
        let Taken::Frame(f) = take(&mut buf, 1 << 20).unwrap() else {
            panic!("a whole frame")
        };
        assert_eq!((f.kind, &f.payload[..]), (Kind::Ping, &b"p"[..]));
        // All taken: nothing is held.
        assert_eq!(buf.capacity(), 0);
        assert_eq!(take(&mut buf, 1 << 20).unwrap(), Taken::Need(0));
    }

    #[test]
    fn long_forms_and_fragments() {
        let big = vec![7u8; 70_000];
        let mut buf = server(0x02, &big);
        let Taken::Frame(f) = take(&mut buf, 1 << 20).unwrap() else {
            panic!("a whole frame")
        };
        assert_eq!(
            (f.kind, f.fin, f.payload.len(), f.wire),
            (Kind::Binary, false, 70_000, 70_010)
        );
        let mut buf = server(0x80, &[1; 300]);
        let Taken::Frame(f) = take(&mut buf, 1 << 20).unwrap() else {
            panic!("a whole frame")
        };
        assert_eq!((f.kind, f.fin, f.wire), (Kind::Continue, true, 304));
    }

    #[test]
    fn what_a_server_may_not_send_is_refused() {
        let refused = |b: Vec<u8>| {
            let mut b = b;
            take(&mut b, 1 << 20) == Err(Failure(error_kind::PROTOCOL))
        };
        // Masked, a reserved bit, reserved opcodes.
        assert!(refused(vec![0x81, 0x81, 1, 2, 3, 4, b'x']));
        assert!(refused(server(0xC1, b"x")));
        assert!(refused(server(0x83, b"x")));
        assert!(refused(server(0x8B, b"x")));
        // A fragmented or long control frame.
        assert!(refused(server(0x09, b"x")));
        assert!(refused(server(0x89, &[0; 126])));
        // Longer than the limit, known from the header alone.
        let mut head = vec![0x82, 127];
        head.extend_from_slice(&u64::MAX.to_be_bytes());
        assert!(refused(head));
        let mut buf = server(0x82, &[0; 200]);
        assert_eq!(take(&mut buf, 100), Err(Failure(error_kind::PROTOCOL)));
    }

    #[test]
    fn a_client_frame_is_masked() {
        let f = encode(Kind::Text, b"hello", [1, 2, 3, 4]);
        assert_eq!(&f[..6], &[0x81, 0x85, 1, 2, 3, 4]);
        let clear: Vec<u8> = f[6..]
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ [1, 2, 3, 4][i & 3])
            .collect();
        assert_eq!(clear, b"hello");
        assert_eq!(f.len() as u64, crate::ws::frame_bytes(5, true));
        let long = encode(Kind::Binary, &[0; 70_000], [0; 4]);
        assert_eq!(long.len() as u64, crate::ws::frame_bytes(70_000, true));
    }

    proptest! {
        /// However hostile or cut the bytes, taking never panics, and a frame taken is never
        /// longer than the bytes or the limit.
        #[test]
        fn hostile_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut buf = bytes.clone();
            if let Ok(Taken::Frame(f)) = take(&mut buf, 256) {
                prop_assert!(f.payload.len() <= 256);
                prop_assert_eq!(f.wire as usize + buf.len(), bytes.len());
            }
        }
    }
}
