//! The gRPC listener's admission: which accepted TCP connections reach the gRPC server. Agents
//! hold one long stream each and CLIs come and go, so a connection is never closed for being
//! quiet once it speaks HTTP/2 (the server's HTTP/2 keepalive finds the dead ones); what is
//! bounded here is what the server cannot see: connections that never send a byte (a port
//! scan, a half-open client), and their number.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Connected;

/// Most connections the gRPC listener holds at once: every agent a run may ask for
/// (`MAX_AGENTS`) twice over, for CLIs and reconnections, within the process's open files.
pub(crate) const MAX_GRPC_CONNECTIONS: usize = 2 * stampede_core::scenario::MAX_AGENTS as usize;

/// How long an accepted connection may stay silent before its first byte (the TLS hello or
/// the HTTP/2 preface): a real client sends it at once.
pub(crate) const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);

/// TCP keepalive on every accepted connection: a peer gone without a FIN (a node lost, a
/// NAT entry expired) is found by the kernel even where no HTTP/2 ping is due.
pub(crate) const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

/// An admitted connection: the stream, and its place among [`MAX_GRPC_CONNECTIONS`], given
/// back when the server drops it.
pub(crate) struct Admitted {
    stream: TcpStream,
    _place: OwnedSemaphorePermit,
}

impl Connected for Admitted {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Admitted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Admitted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// The connections `listener` accepts that send a first byte within `first_byte`, at most
/// `max` at once, until `stop` is cancelled. Past the cap a connection is closed at once.
pub(crate) fn admit(
    listener: TcpListener,
    max: usize,
    first_byte: Duration,
    stop: CancellationToken,
) -> ReceiverStream<io::Result<Admitted>> {
    let (tx, rx) = mpsc::channel(64);
    let places = Arc::new(Semaphore::new(max));
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = stop.cancelled() => return,
                () = tx.closed() => return,
                a = listener.accept() => a,
            };
            let stream = match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "gRPC accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(place) = Arc::clone(&places).try_acquire_owned() else {
                tracing::warn!(max, "gRPC listener full: connection closed");
                continue;
            };
            let _ = stream.set_nodelay(true);
            let keepalive = socket2::TcpKeepalive::new()
                .with_time(TCP_KEEPALIVE)
                .with_interval(TCP_KEEPALIVE / 3);
            let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive);
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut one = [0u8; 1];
                match tokio::time::timeout(first_byte, stream.peek(&mut one)).await {
                    Ok(Ok(n)) if n > 0 => {
                        let _ = tx
                            .send(Ok(Admitted {
                                stream,
                                _place: place,
                            }))
                            .await;
                    }
                    _ => {}
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_stream::StreamExt;

    use super::*;

    #[tokio::test]
    async fn silent_connections_are_closed_and_speaking_ones_admitted() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let stop = CancellationToken::new();
        let mut incoming = admit(l, 4, Duration::from_millis(200), stop.clone());
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let mut speaker = TcpStream::connect(addr).await.unwrap();
        speaker.write_all(b"PRI").await.unwrap();
        let admitted = tokio::time::timeout(Duration::from_secs(5), incoming.next())
            .await
            .expect("the speaking connection is admitted")
            .unwrap()
            .unwrap();
        assert_eq!(
            admitted.stream.peer_addr().unwrap(),
            speaker.local_addr().unwrap()
        );
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf))
            .await
            .expect("the silent connection is closed after its first-byte timeout")
            .unwrap_or(0);
        assert_eq!(n, 0);
        stop.cancel();
    }

    #[tokio::test]
    async fn connections_past_the_cap_are_closed_until_a_place_frees() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let stop = CancellationToken::new();
        let mut incoming = admit(l, 2, Duration::from_secs(5), stop.clone());
        let (mut clients, mut held) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(b"x").await.unwrap();
            clients.push(c);
            held.push(incoming.next().await.unwrap().unwrap());
        }
        let mut extra = TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(5), extra.read(&mut buf))
            .await
            .expect("the third connection is closed at once")
            .unwrap_or(0);
        assert_eq!(n, 0);
        // The server drops one: its place serves the next connection.
        held.truncate(1);
        let mut next = TcpStream::connect(addr).await.unwrap();
        next.write_all(b"x").await.unwrap();
        let again = tokio::time::timeout(Duration::from_secs(5), incoming.next()).await;
        assert!(matches!(again, Ok(Some(Ok(_)))));
        stop.cancel();
    }
}
