//! The lean HTTP/2 client: the load path of a run whose HTTP/2 requests are all static (no
//! templates, checks, extraction, cookies or gRPC), where the `h2` crate's generality was most
//! of an h2 request's CPU (a header map built, cloned and encoded per request, a response's
//! header map decoded into, a stream store behind several locks, tracing spans). Here a
//! request's header block is encoded once per step ([`super::frame::request_block`]), an
//! answer's header block is decoded only for `:status` ([`super::hpack`], its dynamic table
//! kept in step), its body counted and not kept, and one driver task per connection does all
//! of the I/O: its streams' requests are appended to one buffer and leave in one write, and
//! one read completes every answer it holds.
//!
//! What a client must do is done: SETTINGS and their ACK, PING answered, the peer's
//! concurrency limit and flow-control windows kept for request bodies, the client's receive
//! windows given back in large steps, GOAWAY (the streams past its last one fail as reset,
//! none start after it), RST_STREAM, CONTINUATION, padding and priority fields. A frame or a
//! header block longer than the client accepts ends the connection before it is kept.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use stampede_core::stats::error_kind;
use tokio::io::{AsyncRead, AsyncWrite};

use super::frame::{self, code, flag, kind, setting, Head, HEAD_LEN, MAX_FRAME, MAX_WINDOW};
use crate::http1::Response;
use crate::net::{io_failure, Failure};

/// The receive window the client offers on each stream (SETTINGS_INITIAL_WINDOW_SIZE).
const STREAM_WINDOW: u32 = 1 << 24;
/// The connection's receive window, raised to this at the start.
const CONN_WINDOW: u32 = 1 << 30;
/// The protocol's initial windows, before any SETTINGS or WINDOW_UPDATE.
const DEFAULT_WINDOW: u32 = 65_535;
/// The largest header block (its frames' fragments together) the client takes.
const MAX_BLOCK: usize = 64 * 1024;
/// The read buffer's room: one whole frame at least, and a read then takes hundreds of small
/// answers.
const READ_BUF: usize = HEAD_LEN + MAX_FRAME;

/// A static request as the lean client sends it: its header block and its body.
#[derive(Debug, Clone)]
pub(crate) struct LeanRequest {
    /// The header block, HPACK without indexing: the same bytes on every stream.
    pub(crate) block: Bytes,
    /// The request's body (empty: END_STREAM on the HEADERS frame).
    pub(crate) body: Bytes,
}

/// What the streams of one connection share with its driver.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    /// Set once no stream can start on the connection (a GOAWAY, a failure, its end): read
    /// without the lock by a check of an idle connection.
    ended: AtomicBool,
}

#[derive(Debug)]
struct State {
    /// Frames waiting for the driver to write them.
    out: Vec<u8>,
    /// The driver, to wake when `out` gains frames.
    driver: Option<Waker>,
    /// The streams started and not yet collected by their requester.
    streams: Vec<Slot>,
    /// Streams whose answer has not ended (the peer's concurrency limit counts these).
    open: u32,
    next_id: u32,
    /// The peer's SETTINGS_MAX_CONCURRENT_STREAMS.
    max_streams: u32,
    /// The peer's SETTINGS_INITIAL_WINDOW_SIZE: the send window of a new stream.
    initial_window: i64,
    /// The connection's send window.
    send_window: i64,
    /// The peer's SETTINGS_MAX_FRAME_SIZE.
    max_frame: usize,
    /// Why no stream may start (set with [`Shared::ended`]).
    refused: Option<Failure>,
    /// Requesters waiting for a stream to end, or for a window.
    waiting: Vec<Waker>,
}

#[derive(Debug)]
struct Slot {
    id: u32,
    status: u16,
    received: u64,
    outcome: Option<Result<(), Failure>>,
    waker: Option<Waker>,
    /// The send window on this stream.
    window: i64,
    /// The request body, and how much of it has left.
    body: Option<(Bytes, usize)>,
    /// Bytes received on the stream not yet given back by a WINDOW_UPDATE.
    unacked: u32,
}

impl Shared {
    fn new() -> Self {
        let mut out = Vec::with_capacity(4096);
        out.extend_from_slice(frame::PREFACE);
        frame::put_settings(
            &mut out,
            &[
                (setting::ENABLE_PUSH, 0),
                (setting::INITIAL_WINDOW_SIZE, STREAM_WINDOW),
                (setting::MAX_HEADER_LIST_SIZE, MAX_BLOCK as u32),
            ],
        );
        frame::put_window_update(&mut out, 0, CONN_WINDOW - DEFAULT_WINDOW);
        Self {
            state: Mutex::new(State {
                out,
                driver: None,
                streams: Vec::new(),
                open: 0,
                next_id: 1,
                // Until the peer's SETTINGS say otherwise (RFC 9113 §6.5.2: no limit).
                max_streams: u32::MAX,
                initial_window: i64::from(DEFAULT_WINDOW),
                send_window: i64::from(DEFAULT_WINDOW),
                max_frame: MAX_FRAME,
                refused: None,
                waiting: Vec::new(),
            }),
            ended: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state as consistent as any other
        // moment's: every change to it is a few assignments.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a new stream would fail: the connection had a GOAWAY, failed or ended.
    pub(crate) fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Relaxed)
    }

    /// Starts a stream for `r` once the peer's concurrency limit allows it.
    fn poll_open(&self, cx: &mut Context<'_>, r: &LeanRequest) -> Poll<Result<u32, Failure>> {
        let mut s = self.lock();
        if let Some(f) = s.refused {
            return Poll::Ready(Err(f));
        }
        if s.open >= s.max_streams {
            wait(&mut s.waiting, cx);
            return Poll::Pending;
        }
        let id = s.next_id;
        if id > MAX_WINDOW {
            // Stream ids are spent: the connection ends, and the runner opens another.
            s.refuse(Failure(error_kind::RESET), &self.ended);
            return Poll::Ready(Err(Failure(error_kind::RESET)));
        }
        s.next_id += 2;
        let max_frame = s.max_frame;
        frame::put_headers(&mut s.out, id, &r.block, r.body.is_empty(), max_frame);
        let window = s.initial_window;
        s.streams.push(Slot {
            id,
            status: 0,
            received: 0,
            outcome: None,
            waker: None,
            window,
            body: (!r.body.is_empty()).then(|| (r.body.clone(), 0)),
            unacked: 0,
        });
        s.open += 1;
        if !r.body.is_empty() {
            s.pump();
        }
        s.wake_driver();
        Poll::Ready(Ok(id))
    }

    /// The answer on stream `id`, once it has ended.
    fn poll_answer(&self, cx: &mut Context<'_>, id: u32) -> Poll<Result<Response, Failure>> {
        let mut s = self.lock();
        let Some(i) = s.slot(id) else {
            return Poll::Ready(Err(Failure(error_kind::PROTOCOL)));
        };
        let slot = &mut s.streams[i];
        match slot.outcome {
            Some(outcome) => {
                let slot = s.streams.swap_remove(i);
                Poll::Ready(outcome.map(|()| Response {
                    status: slot.status,
                    keep_alive: true,
                    bytes_received: slot.received,
                }))
            }
            None => {
                match &slot.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => slot.waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }

    /// A requester gave up on stream `id` (its timeout, or the run's stop): the stream is
    /// reset (CANCEL) and its place given to the next.
    fn abandon(&self, id: u32) {
        let mut s = self.lock();
        let Some(i) = s.slot(id) else {
            return;
        };
        let slot = s.streams.swap_remove(i);
        if slot.outcome.is_none() {
            s.open -= 1;
            if s.refused.is_none() {
                frame::put_rst_stream(&mut s.out, id, code::CANCEL);
                s.wake_driver();
            }
            s.wake_waiting();
        }
    }
}

/// Registers `cx`'s waker among `waiting` once (a connection's streams share one task).
fn wait(waiting: &mut Vec<Waker>, cx: &Context<'_>) {
    if !waiting.iter().any(|w| w.will_wake(cx.waker())) {
        waiting.push(cx.waker().clone());
    }
}

impl State {
    fn wake_driver(&mut self) {
        if let Some(w) = self.driver.take() {
            w.wake();
        }
    }

    fn wake_waiting(&mut self) {
        for w in self.waiting.drain(..) {
            w.wake();
        }
    }

    /// Ends stream `i` with `outcome` and wakes its requester.
    fn finish(&mut self, i: usize, outcome: Result<(), Failure>) {
        let slot = &mut self.streams[i];
        if slot.outcome.is_some() {
            return;
        }
        slot.outcome = Some(outcome);
        if slot.body.take().is_some() && outcome.is_ok() {
            // Answered before its body had all left (RFC 9113 §8.1): the rest is not sent, and
            // the stream is reset so that the peer stops waiting for it.
            let id = slot.id;
            frame::put_rst_stream(&mut self.out, id, code::CANCEL);
        }
        let slot = &mut self.streams[i];
        if let Some(w) = slot.waker.take() {
            w.wake();
        }
        self.open -= 1;
        if !self.waiting.is_empty() {
            self.wake_waiting();
        }
    }

    /// No stream starts from now on: `why` for them.
    fn refuse(&mut self, why: Failure, ended: &AtomicBool) {
        if self.refused.is_none() {
            self.refused = Some(why);
        }
        ended.store(true, Ordering::Relaxed);
        self.wake_waiting();
    }

    /// The connection failed: every stream not yet ended fails with `why`.
    fn fail(&mut self, why: Failure, ended: &AtomicBool) {
        self.refuse(why, ended);
        for i in 0..self.streams.len() {
            self.finish(i, Err(why));
        }
        self.out.clear();
    }

    /// Sends as much of the pending request bodies as the windows allow, in stream order.
    fn pump(&mut self) {
        let max_frame = self.max_frame;
        for i in 0..self.streams.len() {
            let slot = &mut self.streams[i];
            let Some((body, sent)) = slot.body.as_mut() else {
                continue;
            };
            while *sent < body.len() {
                let room = self.send_window.min(slot.window);
                if room <= 0 {
                    break;
                }
                let n = (body.len() - *sent).min(max_frame).min(room as usize);
                let end = *sent + n == body.len();
                frame::put_data(&mut self.out, slot.id, &body[*sent..*sent + n], end);
                *sent += n;
                self.send_window -= n as i64;
                slot.window -= n as i64;
            }
            if *sent == body.len() {
                slot.body = None;
            }
        }
    }

    fn slot(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|x| x.id == id)
    }
}

/// A request in flight on stream `id`: dropped before its answer (a timeout, a stop), it
/// resets the stream.
struct InFlight<'a> {
    shared: &'a Shared,
    id: u32,
    done: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.shared.abandon(self.id);
        }
    }
}

/// Sends `r` on a new stream of the connection and reads its whole answer.
pub(crate) async fn request(shared: &Shared, r: &LeanRequest) -> Result<Response, Failure> {
    let id = std::future::poll_fn(|cx| shared.poll_open(cx, r)).await?;
    let mut flight = InFlight {
        shared,
        id,
        done: false,
    };
    let answer = std::future::poll_fn(|cx| flight.shared.poll_answer(cx, id)).await;
    flight.done = true;
    answer
}

/// Starts the connection's driver on `io` (after its TLS handshake, if any) and returns what
/// its streams share with it, and the driver's task.
pub(crate) fn start<IO>(io: IO) -> (Arc<Shared>, tokio::task::JoinHandle<()>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let shared = Arc::new(Shared::new());
    // The client never raises SETTINGS_HEADER_TABLE_SIZE from its default.
    let hpack = super::hpack::Decoder::new(4096);
    let driver = Driver {
        io,
        shared: shared.clone(),
        rbuf: BytesMut::new(),
        wbuf: Vec::with_capacity(4096),
        written: 0,
        flush: false,
        hpack,
        block: Vec::new(),
        block_of: None,
        unacked: 0,
    };
    (shared, tokio::spawn(driver))
}

/// The connection's one task: writes what its streams queued, reads and handles every frame.
struct Driver<IO> {
    io: IO,
    shared: Arc<Shared>,
    /// Bytes read and not yet handled (at most a part of one frame between reads).
    rbuf: BytesMut,
    wbuf: Vec<u8>,
    /// Bytes of `wbuf` already written.
    written: usize,
    /// Bytes were written since the last flush (TLS holds them until it).
    flush: bool,
    hpack: super::hpack::Decoder,
    /// A header block whose CONTINUATION frames are still to come.
    block: Vec<u8>,
    /// The stream of `block`, and whether its HEADERS frame ended the stream.
    block_of: Option<(u32, bool)>,
    /// Bytes received on the connection not yet given back by a WINDOW_UPDATE.
    unacked: u32,
}

/// Why the driver stops: the connection failed (its streams fail with the kind), or it ended
/// after a GOAWAY with nothing left open.
enum Stop {
    Failed(Failure, Option<u32>),
    Done,
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Future for Driver<IO> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        match this.drive(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(stop) => {
                let mut s = this.shared.lock();
                match stop {
                    Stop::Failed(why, goaway) => {
                        if let Some(error) = goaway {
                            // Best effort: the peer learns why, if the socket still takes it.
                            let mut out = Vec::with_capacity(17);
                            frame::put_goaway(&mut out, 0, error);
                            let _ = Pin::new(&mut this.io).poll_write(cx, &out);
                        }
                        s.fail(why, &this.shared.ended);
                    }
                    Stop::Done => s.fail(Failure(error_kind::RESET), &this.shared.ended),
                }
                Poll::Ready(())
            }
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Driver<IO> {
    fn drive(&mut self, cx: &mut Context<'_>) -> Poll<Stop> {
        loop {
            let mut progress = false;
            if self.written == self.wbuf.len() {
                self.wbuf.clear();
                self.written = 0;
                let mut s = self.shared.lock();
                std::mem::swap(&mut s.out, &mut self.wbuf);
                match &s.driver {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => s.driver = Some(cx.waker().clone()),
                }
                if s.refused.is_some() && s.open == 0 && self.wbuf.is_empty() {
                    return Poll::Ready(Stop::Done);
                }
            }
            while self.written < self.wbuf.len() {
                match Pin::new(&mut self.io).poll_write(cx, &self.wbuf[self.written..]) {
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Stop::Failed(Failure(error_kind::RESET), None))
                    }
                    Poll::Ready(Ok(n)) => {
                        self.written += n;
                        self.flush = true;
                        progress = true;
                    }
                    Poll::Ready(Err(e)) => {
                        return Poll::Ready(Stop::Failed(io_failure(&e, true), None))
                    }
                    Poll::Pending => break,
                }
            }
            if self.flush && self.written == self.wbuf.len() {
                match Pin::new(&mut self.io).poll_flush(cx) {
                    Poll::Ready(Ok(())) => self.flush = false,
                    Poll::Ready(Err(e)) => {
                        return Poll::Ready(Stop::Failed(io_failure(&e, true), None))
                    }
                    Poll::Pending => {}
                }
            }
            match self.read(cx) {
                Poll::Ready(Ok(())) => progress = true,
                Poll::Ready(Err(stop)) => return Poll::Ready(stop),
                Poll::Pending => {}
            }
            if !progress {
                return Poll::Pending;
            }
        }
    }

    /// Reads what the socket holds and handles every whole frame in it.
    fn read(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Stop>> {
        // Room for at least one whole frame; once the buffer is all handled this takes no
        // allocation, only the space back.
        self.rbuf.reserve(READ_BUF);
        match tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.rbuf) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Err(Stop::Failed(io_failure(&e, false), None))),
            Poll::Ready(Ok(0)) => Poll::Ready(Err(Stop::Failed(Failure(error_kind::RESET), None))),
            Poll::Ready(Ok(_)) => Poll::Ready(self.frames()),
        }
    }

    /// Handles every whole frame in the read buffer, under one lock of the shared state.
    fn frames(&mut self) -> Result<(), Stop> {
        let shared = self.shared.clone();
        let mut s = shared.lock();
        let mut buf = std::mem::take(&mut self.rbuf);
        let mut parsed = 0;
        let handled = loop {
            let head = match Head::parse(&buf[parsed..]) {
                Ok(Some(h)) => h,
                Ok(None) => break Ok(()),
                Err(e) => break Err(protocol(e.code())),
            };
            let start = parsed + HEAD_LEN;
            if buf.len() < start + head.len {
                break Ok(());
            }
            if let Err(e) = head.check() {
                break Err(protocol(e.code()));
            }
            if let Err(stop) = self.frame(&mut s, &head, &buf[start..start + head.len]) {
                break Err(stop);
            }
            parsed = start + head.len;
        };
        bytes::Buf::advance(&mut buf, parsed);
        self.rbuf = buf;
        handled
    }

    fn frame(&mut self, s: &mut State, head: &Head, payload: &[u8]) -> Result<(), Stop> {
        if let Some((stream, _)) = self.block_of {
            // RFC 9113 §6.10: nothing may come between a header block's frames.
            if head.kind != kind::CONTINUATION || head.stream != stream {
                return Err(protocol(code::PROTOCOL_ERROR));
            }
        }
        match head.kind {
            kind::DATA => {
                let data = frame::content(head, payload).map_err(|e| protocol(e.code()))?;
                self.unacked += head.len as u32;
                if self.unacked >= CONN_WINDOW / 2 {
                    frame::put_window_update(&mut s.out, 0, self.unacked);
                    self.unacked = 0;
                }
                let end = head.flags & flag::END_STREAM != 0;
                if let Some(i) = s.slot(head.stream) {
                    let slot = &mut s.streams[i];
                    slot.received += data.len() as u64;
                    slot.unacked += head.len as u32;
                    if !end && slot.unacked >= STREAM_WINDOW / 2 {
                        frame::put_window_update(&mut s.out, head.stream, slot.unacked);
                        slot.unacked = 0;
                    }
                    if end {
                        s.finish(i, Ok(()));
                    }
                }
            }
            kind::HEADERS => {
                let fragment = frame::content(head, payload).map_err(|e| protocol(e.code()))?;
                let end = head.flags & flag::END_STREAM != 0;
                if head.flags & flag::END_HEADERS != 0 {
                    self.headers(s, head.stream, end, fragment)?;
                } else {
                    self.block.clear();
                    self.block.extend_from_slice(fragment);
                    self.block_of = Some((head.stream, end));
                }
            }
            kind::CONTINUATION => {
                let Some((stream, end)) = self.block_of else {
                    return Err(protocol(code::PROTOCOL_ERROR));
                };
                if self.block.len() + payload.len() > MAX_BLOCK {
                    return Err(protocol(code::PROTOCOL_ERROR));
                }
                self.block.extend_from_slice(payload);
                if head.flags & flag::END_HEADERS != 0 {
                    self.block_of = None;
                    let block = std::mem::take(&mut self.block);
                    let handled = self.headers(s, stream, end, &block);
                    self.block = block;
                    handled?;
                }
            }
            kind::RST_STREAM => {
                if let Some(i) = s.slot(head.stream) {
                    let kind = match frame::u32_at(payload, 0) {
                        code::REFUSED_STREAM => error_kind::RESET,
                        _ => error_kind::PROTOCOL,
                    };
                    s.finish(i, Err(Failure(kind)));
                }
            }
            kind::SETTINGS if head.flags & flag::ACK != 0 => {}
            kind::SETTINGS => {
                for (id, value) in frame::settings(payload) {
                    match id {
                        setting::MAX_CONCURRENT_STREAMS => s.max_streams = value,
                        setting::INITIAL_WINDOW_SIZE => {
                            if value > MAX_WINDOW {
                                return Err(protocol(code::FLOW_CONTROL_ERROR));
                            }
                            let delta = i64::from(value) - s.initial_window;
                            s.initial_window = i64::from(value);
                            for slot in &mut s.streams {
                                slot.window += delta;
                            }
                        }
                        setting::MAX_FRAME_SIZE => {
                            if !(MAX_FRAME as u32..=(1 << 24) - 1).contains(&value) {
                                return Err(protocol(code::PROTOCOL_ERROR));
                            }
                            s.max_frame = value as usize;
                        }
                        // The client's header blocks never index, so the peer's table size
                        // does not matter to them; push is off; the rest is advisory.
                        _ => {}
                    }
                }
                frame::head(&mut s.out, 0, kind::SETTINGS, flag::ACK, 0);
                s.pump();
                s.wake_waiting();
            }
            kind::PING if head.flags & flag::ACK != 0 => {}
            kind::PING => {
                frame::head(&mut s.out, 8, kind::PING, flag::ACK, 0);
                s.out.extend_from_slice(payload);
            }
            kind::GOAWAY => {
                let last = frame::u32_at(payload, 0) & MAX_WINDOW;
                s.refuse(Failure(error_kind::RESET), &self.shared.ended);
                for i in 0..s.streams.len() {
                    if s.streams[i].id > last {
                        s.finish(i, Err(Failure(error_kind::RESET)));
                    }
                }
            }
            kind::WINDOW_UPDATE => {
                let increment = i64::from(frame::u32_at(payload, 0) & MAX_WINDOW);
                if head.stream == 0 {
                    s.send_window += increment;
                } else if let Some(i) = s.slot(head.stream) {
                    s.streams[i].window += increment;
                }
                s.pump();
            }
            // Push is off (SETTINGS_ENABLE_PUSH 0): a promise is a protocol error.
            kind::PUSH_PROMISE => return Err(protocol(code::PROTOCOL_ERROR)),
            // PRIORITY and unknown types are ignored (RFC 9113 §4.1, §5.5).
            _ => {}
        }
        Ok(())
    }

    /// A whole header block on `stream`: decoded (for `:status`, and to keep the decoder's
    /// table in step whoever it is for), then an answer's head or its trailers.
    fn headers(&mut self, s: &mut State, stream: u32, end: bool, block: &[u8]) -> Result<(), Stop> {
        let mut status = None;
        self.hpack
            .decode(block, |name, value| {
                if name == b":status" {
                    status = std::str::from_utf8(value)
                        .ok()
                        .and_then(|v| v.parse::<u16>().ok());
                }
            })
            .map_err(|_| protocol(code::COMPRESSION_ERROR))?;
        let Some(i) = s.slot(stream) else {
            // A stream given up on (reset by the client): its answer is only decoded.
            return Ok(());
        };
        let slot = &mut s.streams[i];
        if slot.status == 0 {
            match status {
                // An interim answer (100 Continue, 103 Early Hints): the final one follows.
                Some(100..=199) if !end => return Ok(()),
                Some(code @ 200..=599) => slot.status = code,
                _ => {
                    s.finish(i, Err(Failure(error_kind::PROTOCOL)));
                    return Ok(());
                }
            }
        }
        if end {
            s.finish(i, Ok(()));
        }
        Ok(())
    }
}

/// A connection error: the driver stops, its streams fail as a protocol error, and the peer
/// gets a GOAWAY with `error`.
fn protocol(error: u32) -> Stop {
    Stop::Failed(Failure(error_kind::PROTOCOL), Some(error))
}
