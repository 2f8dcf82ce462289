//! Byte-level reading and writing shared by every format: a [`Cursor`]
//! whose reads are all length-checked, and the big-endian writers.

use super::{WireError, VERSION};
use crate::auth::AUTH_LEN;
use crate::ids::{Epoch, Incarnation, Seq, SessionId};

/// A reader over a byte slice: every read checks the length first and
/// fails with [`WireError::Truncated`] instead of panicking.
pub(super) struct Cursor<'a> {
    /// The whole input; `pos` indexes into it.
    buf: &'a [u8],
    /// Offset of the next byte to read (reported in errors).
    pub(super) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf, pos: 0 }
    }

    #[inline]
    pub(super) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    #[inline]
    pub(super) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if n > self.remaining() {
            return Err(WireError::Truncated {
                what,
                offset: self.pos,
                needed: n,
                available: self.remaining(),
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    #[inline]
    pub(super) fn array<const N: usize>(
        &mut self,
        what: &'static str,
    ) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    #[inline]
    pub(super) fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.array::<1>(what)?[0])
    }

    #[inline]
    pub(super) fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }

    #[inline]
    pub(super) fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    #[inline]
    pub(super) fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    pub(super) fn version(&mut self) -> Result<(), WireError> {
        match self.u8("version")? {
            VERSION => Ok(()),
            found => Err(WireError::UnsupportedVersion { found }),
        }
    }

    pub(super) fn session(&mut self) -> Result<SessionId, WireError> {
        self.u64("session").map(SessionId)
    }

    pub(super) fn epoch(&mut self) -> Result<Epoch, WireError> {
        self.u32("epoch").map(Epoch)
    }

    pub(super) fn seq(&mut self, what: &'static str) -> Result<Seq, WireError> {
        self.u64(what).map(Seq)
    }

    pub(super) fn incarnation(&mut self) -> Result<Incarnation, WireError> {
        self.u64("incarnation").map(Incarnation)
    }

    pub(super) fn auth(&mut self) -> Result<[u8; AUTH_LEN], WireError> {
        self.array("authenticator")
    }

    /// Nothing may follow.
    pub(super) fn finish(self, what: &'static str) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(WireError::TrailingBytes {
                what,
                offset: self.pos,
                count,
            }),
        }
    }

    /// Only zero padding may follow.
    pub(super) fn finish_padded(self, what: &'static str) -> Result<(), WireError> {
        let rest = &self.buf[self.pos..];
        match rest.iter().position(|&b| b != 0) {
            None => Ok(()),
            Some(first) => Err(WireError::TrailingBytes {
                what,
                offset: self.pos + first,
                count: rest.len() - first,
            }),
        }
    }
}

/// Appends `v`, big-endian.
pub(super) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends `v`, big-endian.
pub(super) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}
