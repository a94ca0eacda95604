//! The agent's HTTP/1.1 response parser (`http1::Conn`, the production code) on untrusted
//! bytes, fed from memory in pieces of a fuzzed size, over a keep-alive connection for up to
//! four exchanges. The first byte chooses the piece size, HEAD or not, and the discarding or
//! the capturing sink. Errors are fine; a panic or a hang is a bug, and no exchange may
//! claim more bytes than the server sent or capture more body than its limit.

#![no_main]

use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use libfuzzer_sys::fuzz_target;
use stampede_agent::http1::{Capture, Conn, Discard};
use tokio::io::{AsyncRead, ReadBuf};

/// Serves `data` at most `piece` bytes per read, then end of stream.
struct Pieces<'a> {
    data: &'a [u8],
    piece: usize,
}

impl AsyncRead for Pieces<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = self.data.len().min(self.piece).min(buf.remaining());
        let (now, rest) = self.data.split_at(n);
        buf.put_slice(now);
        self.data = rest;
        Poll::Ready(Ok(()))
    }
}

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: fuzz\r\n\r\n";
const LIMIT: usize = 64;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, response)) = data.split_first() else {
        return;
    };
    let piece = match ctl & 0x1f {
        0 => usize::MAX,
        n => usize::from(n),
    };
    let head = ctl & 0x20 != 0;
    let capture = ctl & 0x40 != 0;
    let stream = tokio::io::join(
        Pieces {
            data: response,
            piece,
        },
        tokio::io::sink(),
    );
    runtime().block_on(async {
        let mut conn = Conn::over(stream);
        let mut sink = Capture::default();
        let mut received = 0u64;
        for _ in 0..4 {
            sink.clear(LIMIT);
            let r = if capture {
                conn.exchange(REQUEST, head, &mut sink).await
            } else {
                conn.exchange(REQUEST, head, &mut Discard).await
            };
            let Ok(r) = r else { break };
            assert!(sink.body.len() <= LIMIT);
            received += r.bytes_received;
            assert!(
                received <= response.len() as u64,
                "{received} bytes received of {}",
                response.len()
            );
            if !r.keep_alive {
                break;
            }
        }
    });
});
