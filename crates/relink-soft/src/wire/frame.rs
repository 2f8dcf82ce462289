//! [`FrameReader`]: cuts the byte stream of a TCP connection into frames,
//! refusing an oversized frame as soon as its header is in.

use super::{WireError, HEADER_LEN, MAX_FRAME};

/// Cuts a byte stream into frames.
///
/// Feed it what the socket gives ([`FrameReader::push`] or
/// [`FrameReader::read_from`]) and take complete frames out with
/// [`FrameReader::next_frame`] or [`FrameReader::next_packet`]. A header
/// announcing a body larger than the maximum is an error as soon as the
/// header is in, before the body is buffered; the stream cannot be
/// resynchronised after it, so the reader stays failed (drop the
/// connection). A frame that is well delimited but does not decode fails
/// only that frame.
#[derive(Debug, Clone)]
pub struct FrameReader {
    buf: Vec<u8>,
    /// Start of the unconsumed bytes in `buf`.
    start: usize,
    max_frame: usize,
    failed: Option<WireError>,
}

impl Default for FrameReader {
    fn default() -> FrameReader {
        FrameReader::new()
    }
}

impl FrameReader {
    /// How much [`FrameReader::read_from`] reads at most per call.
    #[cfg(test)]
    pub const READ_CHUNK: usize = 64 * 1024;

    /// A reader accepting bodies up to [`MAX_FRAME`] bytes.
    pub fn new() -> FrameReader {
        FrameReader::with_max_frame(MAX_FRAME)
    }

    /// A reader accepting bodies up to `max_frame` bytes (at most
    /// [`MAX_FRAME`] is useful: [`decode`] rejects larger ones).
    pub fn with_max_frame(max_frame: usize) -> FrameReader {
        FrameReader {
            buf: Vec::new(),
            start: 0,
            max_frame,
            failed: None,
        }
    }

    /// Bytes received and not yet taken out as frames.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Whether the reader has failed on an oversized frame.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn is_failed(&self) -> bool {
        self.failed.is_some()
    }

    /// Drops consumed bytes from the front of the buffer once they are
    /// half of it (keeps `push` + `next_frame` linear).
    fn compact(&mut self) {
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }

    /// Appends received bytes (ignored once the reader has failed).
    pub fn push(&mut self, bytes: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        self.compact();
        self.buf.extend_from_slice(bytes);
    }

    /// Reads once from `r` (at most [`FrameReader::READ_CHUNK`] bytes) into
    /// the buffer; returns what `read` returned (0 = end of stream).
    #[cfg(test)]
    pub fn read_from<R: std::io::Read + ?Sized>(&mut self, r: &mut R) -> std::io::Result<usize> {
        self.compact();
        let old = self.buf.len();
        self.buf.resize(old + Self::READ_CHUNK, 0);
        let result = match self.buf.get_mut(old..) {
            Some(space) => r.read(space),
            None => Ok(0),
        };
        let n = *result.as_ref().unwrap_or(&0);
        self.buf.truncate(old + n.min(Self::READ_CHUNK));
        if self.failed.is_some() {
            self.buf.truncate(old);
        }
        result
    }

    /// The next complete frame (header included, ready for [`decode`]), or
    /// `None` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let pending = self.buf.get(self.start..).unwrap_or_default();
        let Some(header) = pending.get(..HEADER_LEN) else {
            return Ok(None);
        };
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(header);
        let len = usize::try_from(u32::from_be_bytes(h)).unwrap_or(usize::MAX);
        if len > self.max_frame {
            let e = WireError::FrameTooLarge {
                len,
                max: self.max_frame,
            };
            self.failed = Some(e.clone());
            self.buf = Vec::new();
            self.start = 0;
            return Err(e);
        }
        let total = HEADER_LEN + len;
        let Some(frame) = pending.get(..total) else {
            return Ok(None);
        };
        let frame = frame.to_vec();
        self.start += total;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        Ok(Some(frame))
    }

    /// The next complete frame, decoded; `None` if more bytes are needed. A
    /// frame that does not decode is consumed and its error returned; the
    /// next call goes on with the following frame.
    #[cfg(test)]
    pub fn next_packet(&mut self) -> Result<Option<crate::packet::Packet>, WireError> {
        match self.next_frame()? {
            None => Ok(None),
            Some(frame) => super::decode(&frame).map(Some),
        }
    }
}
