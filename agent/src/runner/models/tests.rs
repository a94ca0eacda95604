//! What the models' tests share: a keep-alive target that closes idle connections, and a
//! run driven to its end. Here so each model's tests can sit beside its code.

use std::sync::Arc;
use std::time::Duration;

/// What [`closing_target`] answers an HTTP/1.1 request with.
pub(super) const HTTP_OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

/// A keep-alive target on threads of its own that answers each read with `reply` and
/// closes each connection once it has been idle for `idle_close` (its keep-alive timeout;
/// `None`: never), counting the connections it accepted (at most 64, then it stops
/// accepting).
pub(super) fn closing_target(
    idle_close: Option<Duration>,
    reply: &'static [u8],
) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for s in listener.incoming().take(64) {
            let mut s = s.unwrap();
            s.set_nodelay(true).unwrap();
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::spawn(move || {
                s.set_read_timeout(idle_close).unwrap();
                let mut buf = [0u8; 1024];
                // A read that times out is the keep-alive timeout: the socket closes.
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(reply).is_err() {
                        break;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// Executes `run` to its end (within 20 s): how it ended, and its progress added up.
pub(super) async fn run_to_end(
    run: crate::runner::plan::ShardRun,
) -> (crate::runner::RunEnd, stampede_core::stats::SparseStats) {
    let (out, mut messages) = tokio::sync::mpsc::unbounded_channel();
    let stop = tokio_util::sync::CancellationToken::new();
    let start = tokio::time::Instant::now();
    let run = crate::runner::execute(Arc::new(run), start, out, stop);
    let end = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("the run ended within 20 s");
    let mut total: Option<stampede_core::stats::SparseStats> = None;
    while let Ok(m) = messages.try_recv() {
        if let Some(stampede_proto::v1::agent_message::Msg::Progress(p)) = m.msg {
            for w in &p.samples {
                let (_, s) = stampede_proto::convert::sample_from_wire(
                    stampede_proto::path::Path::root("s"),
                    w,
                    1,
                )
                .unwrap();
                match total.as_mut() {
                    Some(t) => t.add(&s),
                    None => total = Some(s),
                }
            }
        }
    }
    (end, total.expect("progress was sent"))
}
