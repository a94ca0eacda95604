//! The datagram driver (`udp:` steps over `udp://` targets): one connected socket per session,
//! one datagram out, one back.
//!
//! A reply that does not come within the step's timeout counts as `timeout`, and the session's
//! socket is dropped with the failure (the runner drops a connection on any error), so the
//! next request goes out from a fresh socket on a new local port: a late reply to the old
//! one lands on a closed port and can never be taken for the answer to a later request. The
//! socket is connected, so the kernel drops datagrams from any other peer. A target that
//! answers one datagram twice leaves the copy queued: it is drained before the next send, so
//! it is never taken for the next request's answer (which would time that request at ~0).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use stampede_core::protocol::{UdpRequest, MAX_DATAGRAM};
use stampede_core::stats::error_kind;
use tokio::net::UdpSocket;
use tokio::time::Instant;

use crate::net::{self, io_failure, Failure};
use crate::stream::{ReplyCheck, RequestError};

/// A `udp:` step compiled once.
#[derive(Debug, Clone)]
pub struct DatagramRequest {
    bytes: Bytes,
    timeout: Option<Duration>,
    check: Option<ReplyCheck>,
}

impl DatagramRequest {
    /// A templated payload is rendered per request ([`UdpConn::exchange`]): this keeps the
    /// step's timeout and check.
    pub fn new(u: &UdpRequest) -> Result<Self, RequestError> {
        let bytes = match u.send.template() {
            Some(_) => Vec::new(),
            None => u.send.bytes().map_err(RequestError::Send)?,
        };
        if bytes.len() > MAX_DATAGRAM {
            return Err(RequestError::SendTooLong { max: MAX_DATAGRAM });
        }
        let check = u
            .expect
            .as_ref()
            .map(ReplyCheck::new)
            .transpose()
            .map_err(RequestError::Expect)?;
        Ok(Self {
            bytes: Bytes::from(bytes),
            timeout: u.timeout.map(|t| t.0),
            check,
        })
    }

    /// Bytes of the datagram, for the bytes-sent count.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The datagram, when its payload is not a template.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether the datagram is empty (UDP allows it).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// One session's connected UDP socket and its receive buffer.
#[derive(Debug)]
pub struct UdpConn {
    socket: UdpSocket,
    buf: Box<[u8]>,
}

impl UdpConn {
    /// A UDP socket connected to `addr`, so it reads only that peer's replies.
    pub async fn connect(addr: SocketAddr) -> Result<Self, Failure> {
        Ok(Self {
            socket: net::connect_udp(addr).await?,
            // One byte more than the largest datagram, to tell a truncated one.
            buf: vec![0u8; MAX_DATAGRAM + 1].into_boxed_slice(),
        })
    }

    /// Sends the datagram and waits for the reply until `deadline` or the step's own timeout,
    /// whichever is first. Returns the reply's size.
    pub async fn request(
        &mut self,
        req: &DatagramRequest,
        deadline: Instant,
    ) -> Result<u64, Failure> {
        self.exchange(&req.bytes, req, deadline, None).await
    }

    /// [`Self::request`] with the datagram rendered elsewhere (one longer than
    /// [`MAX_DATAGRAM`] is a `template` error), and the reply copied into `reply` when a step
    /// extracts from it or checks it.
    pub async fn exchange(
        &mut self,
        bytes: &[u8],
        req: &DatagramRequest,
        deadline: Instant,
        reply: Option<&mut Vec<u8>>,
    ) -> Result<u64, Failure> {
        if bytes.len() > MAX_DATAGRAM {
            return Err(Failure(error_kind::TEMPLATE));
        }
        let until = match req.timeout {
            Some(t) => deadline.min(Instant::now() + t),
            None => deadline,
        };
        self.drain_stale();
        self.socket
            .send(bytes)
            .await
            .map_err(|e| udp_failure(&e, true))?;
        let n = tokio::time::timeout_at(until, self.socket.recv(&mut self.buf))
            .await
            .map_err(|_| Failure(error_kind::TIMEOUT))?
            .map_err(|e| udp_failure(&e, false))?;
        if n > MAX_DATAGRAM {
            return Err(Failure(error_kind::PROTOCOL));
        }
        if let Some(check) = &req.check {
            if !check.accepts(&self.buf[..n]) {
                return Err(Failure(error_kind::PROTOCOL));
            }
        }
        if let Some(reply) = reply {
            reply.clear();
            reply.extend_from_slice(&self.buf[..n]);
        }
        Ok(n as u64)
    }
}

impl UdpConn {
    /// Discards datagrams already queued (duplicates of earlier replies); returns how many.
    fn drain_stale(&mut self) -> usize {
        let mut n = 0;
        while self.socket.try_recv(&mut self.buf).is_ok() {
            n += 1;
        }
        n
    }
}

/// An ICMP port-unreachable surfaces on a connected socket as "connection refused".
fn udp_failure(e: &std::io::Error, writing: bool) -> Failure {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => Failure(error_kind::CONNECT_REFUSED),
        _ => io_failure(e, writing),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_duplicated_reply_is_not_taken_for_the_next_answer() {
        // A target that answers the first datagram twice (3 bytes), the second once (5 bytes).
        let server = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        tokio::spawn(async move {
            let mut b = [0u8; 64];
            let (_, peer) = server.recv_from(&mut b).await.unwrap();
            server.send_to(b"one", peer).await.unwrap();
            server.send_to(b"one", peer).await.unwrap();
            let (_, peer) = server.recv_from(&mut b).await.unwrap();
            server.send_to(b"two!!", peer).await.unwrap();
        });
        let req = DatagramRequest {
            bytes: Bytes::from_static(b"ping"),
            timeout: None,
            check: None,
        };
        let mut c = UdpConn::connect(addr).await.unwrap();
        let far = Instant::now() + Duration::from_secs(5);
        assert_eq!(c.request(&req, far).await.unwrap(), 3);
        // Wait until the duplicate is queued (peek does not consume it).
        let mut b = [0u8; 8];
        c.socket.peek(&mut b).await.unwrap();
        assert_eq!(c.request(&req, far).await.unwrap(), 5);
    }
}
