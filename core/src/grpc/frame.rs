//! The length-prefixed framing of gRPC messages: one request framed once by the CLI, checked
//! again wherever a scenario is read, and response bodies counted without trusting a length.

use super::{MAX_MESSAGE, PREFIX};
use crate::extract::MAX_CAPTURED_BODY;
use crate::protocol::PayloadError;

/// An encoded request message past [`MAX_MESSAGE`], which no server would accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the encoded message is {0} bytes, more than the limit of {MAX_MESSAGE}")]
pub struct MessageTooLong(pub usize);

/// Why a call's stored frame cannot be sent as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameBytesError {
    /// The frame is not base64.
    #[error(transparent)]
    Base64(#[from] PayloadError),
    /// The bytes are not well-formed gRPC framing.
    #[error(transparent)]
    Framing(#[from] FrameError),
    /// Well-formed, but not exactly one uncompressed message.
    #[error("is not one uncompressed gRPC message ({messages} messages)")]
    NotOneMessage {
        /// Messages the bytes frame (1 for one compressed message).
        messages: u32,
    },
}

/// The 5-byte prefix and `message`: one uncompressed gRPC message.
pub fn frame(message: &[u8]) -> Result<Vec<u8>, MessageTooLong> {
    if message.len() > MAX_MESSAGE {
        return Err(MessageTooLong(message.len()));
    }
    let mut out = Vec::with_capacity(PREFIX + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    Ok(out)
}

/// Why a response body is not a sequence of gRPC messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A message prefix declares more than [`MAX_MESSAGE`] bytes.
    #[error("a message of {0} bytes is more than the limit of {MAX_MESSAGE}")]
    TooLong(u32),
    /// A compression flag other than 0 (none) or 1 (compressed).
    #[error("compression flag {0} is neither 0 nor 1")]
    Flag(u8),
    /// The body ends before its last message does.
    #[error("the body ends inside a message")]
    Truncated,
}

/// Walks the length-prefixed messages of a response body as its chunks arrive, without
/// keeping them: it only counts whole messages. A prefix's length is never trusted beyond
/// the limit, so a hostile length cannot make anyone wait for, or buffer, gigabytes.
#[derive(Debug, Clone)]
pub struct FrameScanner {
    max: u32,
    prefix: [u8; PREFIX],
    /// Prefix bytes read of the current message.
    have: usize,
    /// Bytes of the current message still to come (after its prefix).
    remaining: u32,
    messages: u32,
}

impl FrameScanner {
    /// A scanner that refuses any message longer than `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            max: u32::try_from(max).unwrap_or(u32::MAX),
            prefix: [0; PREFIX],
            have: 0,
            remaining: 0,
            messages: 0,
        }
    }

    /// Reads the next chunk of the body.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), FrameError> {
        self.feed_keeping(chunk, None)
    }

    /// Reads the next chunk of the body, keeping the bytes of the message being read in
    /// `keep` when given (its first [`MAX_CAPTURED_BODY`] bytes, without its prefix): once
    /// the body has ended, `keep` holds its last message, for extraction and checks.
    pub fn feed_keeping(
        &mut self,
        mut chunk: &[u8],
        mut keep: Option<&mut Vec<u8>>,
    ) -> Result<(), FrameError> {
        while !chunk.is_empty() {
            if self.remaining > 0 {
                let n = chunk.len().min(self.remaining as usize);
                if let Some(k) = keep.as_deref_mut() {
                    let room = MAX_CAPTURED_BODY.saturating_sub(k.len());
                    k.extend_from_slice(&chunk[..n.min(room)]);
                }
                self.remaining -= n as u32;
                chunk = &chunk[n..];
                if self.remaining == 0 {
                    self.messages = self.messages.saturating_add(1);
                }
                continue;
            }
            let n = (PREFIX - self.have).min(chunk.len());
            self.prefix[self.have..self.have + n].copy_from_slice(&chunk[..n]);
            self.have += n;
            chunk = &chunk[n..];
            if self.have < PREFIX {
                break;
            }
            self.have = 0;
            if self.prefix[0] > 1 {
                return Err(FrameError::Flag(self.prefix[0]));
            }
            let len = u32::from_be_bytes([
                self.prefix[1],
                self.prefix[2],
                self.prefix[3],
                self.prefix[4],
            ]);
            if len > self.max {
                return Err(FrameError::TooLong(len));
            }
            if let Some(k) = keep.as_deref_mut() {
                k.clear();
            }
            if len == 0 {
                self.messages = self.messages.saturating_add(1);
            }
            self.remaining = len;
        }
        Ok(())
    }

    /// Whole messages read so far: a streamed answer times each one as the chunk that
    /// completes it arrives.
    pub fn messages(&self) -> u32 {
        self.messages
    }

    /// The number of whole messages, once the body has ended.
    pub fn finish(&self) -> Result<u32, FrameError> {
        if self.have > 0 || self.remaining > 0 {
            return Err(FrameError::Truncated);
        }
        Ok(self.messages)
    }
}
