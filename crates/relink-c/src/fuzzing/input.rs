//! The input as the driver reads it, and the C strings it passes.

use std::ffi::c_char;
use std::ptr::null;

/// The input, read from the front; reads past its end give zeros.
pub(super) struct Input<'a> {
    pub(super) data: &'a [u8],
}

impl Input<'_> {
    pub(super) fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub(super) fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    pub(super) fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        for b in &mut out {
            *b = self.u8();
        }
        out
    }

    pub(super) fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.bytes())
    }

    pub(super) fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes())
    }

    pub(super) fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// One of `n` choices (0 when `n` is 0).
    pub(super) fn pick(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            usize::from(self.u8()) % n
        }
    }

    /// A number that is often at an edge: 0, 1, a limit and one past it,
    /// the type's largest, or any.
    pub(super) fn num(&mut self) -> u64 {
        const EDGES: [u64; 16] = [
            0,
            1,
            7,
            8,
            9,
            33,
            34,
            4096,
            (1 << 16) + 1,
            (1 << 30) + 1,
            u32::MAX as u64,
            u32::MAX as u64 + 1,
            i64::MAX as u64,
            u64::MAX,
            u64::MAX - 7,
            1 << 63,
        ];
        match self.u8() % 4 {
            0 => EDGES[self.pick(EDGES.len())],
            1 => u64::from(self.u8()),
            2 => u64::from(self.u32() % 8192),
            _ => self.u64(),
        }
    }

    pub(super) fn num_u32(&mut self) -> u32 {
        self.num() as u32
    }

    pub(super) fn num_i64(&mut self) -> i64 {
        match self.u8() % 3 {
            0 => -1,
            1 => i64::MIN,
            _ => self.num() as i64,
        }
    }

    pub(super) fn num_i32(&mut self) -> i32 {
        match self.u8() % 3 {
            0 => -1,
            1 => i32::MIN,
            _ => self.num() as i32,
        }
    }
}

/// A C string argument the driver keeps alive for the call.
pub(super) enum CArg {
    Null,
    Owned(Vec<u8>),
}

impl CArg {
    pub(super) fn ptr(&self) -> *const c_char {
        match self {
            CArg::Null => null(),
            CArg::Owned(v) => v.as_ptr().cast(),
        }
    }
}
