//! Host memory that RDMA operations read and write.
//!
//! Registered memory belongs to the host, not to the device: it survives a
//! device loss and is registered again, at the same addresses, on the device
//! that replaces it. A provider hands out [`Memory`] from
//! [`Provider::alloc_memory`](crate::Provider::alloc_memory); the application
//! reads and writes it through safe, bounds-checked copies (a NIC may write
//! it at any time, so there is never a plain `&mut [u8]` into it).

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::MemoryError;

/// The backing store of a [`Memory`]. Providers implement it; every method
/// is bounds-checked by [`Memory`] before it is called.
pub trait HostMemory: Send + Sync + fmt::Debug {
    /// Virtual address of byte 0.
    fn addr(&self) -> u64;
    /// Size in bytes.
    fn len(&self) -> usize;
    /// Whether the memory has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copy `out.len()` bytes starting at `offset` into `out`.
    fn read(&self, offset: usize, out: &mut [u8]);
    /// Copy `data` to `offset`.
    fn write(&self, offset: usize, data: &[u8]);
    /// Copy `parts` one after the other to `offset` (a header and its
    /// payload, say). The default writes each; a store behind a lock
    /// overrides it to take the lock once.
    fn write_parts(&self, offset: usize, parts: &[&[u8]]) {
        let mut at = offset;
        for p in parts {
            self.write(at, p);
            at += p.len();
        }
    }
    /// Atomically add `add` to the u64 at `offset` (native endian) and return the old value.
    fn fetch_add(&self, offset: usize, add: u64) -> u64;
    /// Atomically replace the u64 at `offset` with `swap` if it equals `compare`; return the old value.
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64;
    /// Call `f` once with the `len` bytes at `offset` in place, if this
    /// store can lend them safely (no writer can touch them during the
    /// call); else do not call it. The default lends nothing:
    /// [`Memory::read_with`] then copies.
    fn lend(&self, offset: usize, len: usize, f: &mut dyn FnMut(&[u8])) {
        let _ = (offset, len, f);
    }
    /// Read bytes of `file` at `pos` into the `len` bytes at `offset`
    /// (one `pread`): how many it read, 0 at the end of the file. The
    /// default reads into a buffer and copies that in; a store the kernel
    /// can write in place overrides it (no copy).
    ///
    /// # Errors
    /// The `pread`'s.
    fn read_file_at(&self, offset: usize, len: usize, file: &File, pos: u64) -> io::Result<usize> {
        let mut buf = vec![0; len];
        let n = file.read_at(&mut buf, pos)?;
        self.write(offset, &buf[..n]);
        Ok(n)
    }
    /// Write the `len` bytes at `offset` to `file` at `pos` (one
    /// `pwrite`): how many it wrote. The default copies them out into a
    /// buffer first; a store the kernel can read in place overrides it.
    ///
    /// # Errors
    /// The `pwrite`'s.
    fn write_file_at(&self, offset: usize, len: usize, file: &File, pos: u64) -> io::Result<usize> {
        let mut buf = vec![0; len];
        self.read(offset, &mut buf);
        file.write_at(&buf, pos)
    }
}

/// A shared handle to host memory. Cloning it shares the bytes.
#[derive(Clone, Debug)]
pub struct Memory {
    /// The bytes.
    inner: Arc<dyn HostMemory>,
    /// Their number (a store's size never changes): the bounds check of
    /// every access reads it here, not through the store.
    len: usize,
}

impl Memory {
    /// Wrap a backing store.
    pub fn new(inner: Arc<dyn HostMemory>) -> Memory {
        let len = inner.len();
        Memory { inner, len }
    }

    /// Virtual address of byte 0.
    #[inline]
    pub fn addr(&self) -> u64 {
        self.inner.addr()
    }

    /// Size in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the memory is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `[addr, addr+len)` lies inside this memory.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        addr >= self.addr()
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.addr() + self.len() as u64)
    }

    #[inline]
    fn check(&self, offset: usize, len: usize) -> Result<(), MemoryError> {
        if offset.checked_add(len).is_some_and(|end| end <= self.len()) {
            Ok(())
        } else {
            Err(MemoryError::OutOfBounds {
                offset,
                len,
                size: self.len(),
            })
        }
    }

    /// Copy bytes out.
    #[inline]
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), MemoryError> {
        self.check(offset, out.len())?;
        self.inner.read(offset, out);
        Ok(())
    }

    /// Call `f` with the `len` bytes at `offset`: in place where the
    /// backing store lends them (the soft fabric's heap memory, under its
    /// lock: keep `f` short), else copied into `scratch` (its allocation
    /// reused).
    pub fn read_with<R>(
        &self,
        offset: usize,
        len: usize,
        scratch: &mut Vec<u8>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, MemoryError> {
        self.check(offset, len)?;
        let mut f = Some(f);
        let mut out = None;
        self.inner.lend(offset, len, &mut |bytes| {
            out = f.take().map(|f| f(bytes));
        });
        match (out, f) {
            (Some(r), _) => Ok(r),
            (None, Some(f)) => {
                scratch.resize(len, 0);
                self.inner.read(offset, scratch);
                Ok(f(scratch))
            }
            (None, None) => unreachable!("f ran and gave a result"),
        }
    }

    /// Copy `len` bytes out into a new vector.
    pub fn read_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>, MemoryError> {
        self.check(offset, len)?;
        // From lent bytes: one copy into a fresh vector, not zero-filled
        // first.
        let mut lent = None;
        self.inner
            .lend(offset, len, &mut |bytes| lent = Some(bytes.to_vec()));
        if let Some(v) = lent {
            return Ok(v);
        }
        let mut v = vec![0; len];
        self.inner.read(offset, &mut v);
        Ok(v)
    }

    /// Copy bytes in.
    #[inline]
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), MemoryError> {
        self.check(offset, data.len())?;
        self.inner.write(offset, data);
        Ok(())
    }

    /// Copy `parts` in one after the other from `offset`, as one write of
    /// their concatenation (nothing is written if it does not fit).
    #[inline]
    pub fn write_parts(&self, offset: usize, parts: &[&[u8]]) -> Result<(), MemoryError> {
        let len = parts.iter().map(|p| p.len()).sum();
        self.check(offset, len)?;
        self.inner.write_parts(offset, parts);
        Ok(())
    }

    /// Read `len` bytes of `file` from `pos` into the memory at
    /// `offset`, straight from the kernel where the store allows (the
    /// soft fabric's heap memory, verbs' mapped memory: no copy in user
    /// space), looping over short reads. Past the end of the file the
    /// rest of the range is zero-filled.
    ///
    /// # Errors
    /// `InvalidInput` for a range outside the memory; else the first
    /// failed `pread` (not `EINTR`).
    pub fn read_file_at(&self, offset: usize, len: usize, file: &File, pos: u64) -> io::Result<()> {
        self.file_loop(
            offset,
            len,
            pos,
            |o, l, p| self.inner.read_file_at(o, l, file, p),
            |o, rest| {
                self.inner.write(o, &vec![0; rest]);
                Ok(())
            },
        )
    }

    /// Write the `len` bytes at `offset` to `file` at `pos`, straight to
    /// the kernel where the store allows (as
    /// [`read_file_at`](Self::read_file_at)), looping over short writes.
    ///
    /// # Errors
    /// `InvalidInput` for a range outside the memory; `WriteZero` if a
    /// `pwrite` wrote nothing; else the first failed `pwrite` (not
    /// `EINTR`).
    pub fn write_file_at(
        &self,
        offset: usize,
        len: usize,
        file: &File,
        pos: u64,
    ) -> io::Result<()> {
        self.file_loop(
            offset,
            len,
            pos,
            |o, l, p| self.inner.write_file_at(o, l, file, p),
            |_, _| Err(io::ErrorKind::WriteZero.into()),
        )
    }

    /// `len` bytes at `offset` (checked) moved by `step(offset, len, pos)`
    /// calls, each for what is left, until all moved; `EINTR` retried.
    /// A step that moves nothing ends it with `at_zero(offset, left)`.
    fn file_loop(
        &self,
        offset: usize,
        len: usize,
        pos: u64,
        mut step: impl FnMut(usize, usize, u64) -> io::Result<usize>,
        at_zero: impl FnOnce(usize, usize) -> io::Result<()>,
    ) -> io::Result<()> {
        self.check(offset, len)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut done = 0;
        while done < len {
            match step(offset + done, len - done, pos + done as u64) {
                Ok(0) => return at_zero(offset + done, len - done),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Read the native-endian u64 at `offset`.
    pub fn read_u64(&self, offset: usize) -> Result<u64, MemoryError> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    /// Write a native-endian u64 at `offset`.
    pub fn write_u64(&self, offset: usize, v: u64) -> Result<(), MemoryError> {
        self.write(offset, &v.to_ne_bytes())
    }

    /// Atomic fetch-and-add on the u64 at `offset` (must be 8-byte aligned).
    pub fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, MemoryError> {
        self.check_atomic(offset)?;
        Ok(self.inner.fetch_add(offset, add))
    }

    /// Atomic compare-and-swap on the u64 at `offset` (must be 8-byte aligned).
    pub fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, MemoryError> {
        self.check_atomic(offset)?;
        Ok(self.inner.compare_swap(offset, compare, swap))
    }

    fn check_atomic(&self, offset: usize) -> Result<(), MemoryError> {
        self.check(offset, 8)?;
        if (self.addr() + offset as u64) % 8 != 0 {
            return Err(MemoryError::Misaligned { offset });
        }
        Ok(())
    }

    /// Whether two handles share the same bytes.
    pub fn same(&self, other: &Memory) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// Plain heap memory behind a mutex: the backing store of the soft fabric,
/// usable by any provider that does not need pinned pages.
pub struct HeapMemory {
    addr: u64,
    /// The bytes' length, fixed: kept beside the lock, so that a bounds
    /// check takes no lock (every access checks first).
    len: usize,
    bytes: Mutex<Box<[u8]>>,
}

impl HeapMemory {
    /// `len` zeroed bytes that claim virtual address `addr`. Aborts if the
    /// allocation fails, as `vec!` does: sizes a caller chose go through
    /// [`HeapMemory::try_new`].
    pub fn new(addr: u64, len: usize) -> HeapMemory {
        HeapMemory {
            addr,
            len,
            bytes: Mutex::new(vec![0; len].into_boxed_slice()),
        }
    }

    /// [`HeapMemory::new`], or [`MemoryError::Exhausted`] if the bytes
    /// cannot be allocated (instead of aborting the process).
    pub fn try_new(addr: u64, len: usize) -> Result<HeapMemory, MemoryError> {
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(len)
            .map_err(|_| MemoryError::Exhausted(len))?;
        bytes.resize(len, 0);
        Ok(HeapMemory {
            addr,
            len,
            bytes: Mutex::new(bytes.into_boxed_slice()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Box<[u8]>> {
        // A panic while holding the lock cannot leave the bytes invalid.
        self.bytes.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Debug for HeapMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeapMemory")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len())
            .finish()
    }
}

impl HostMemory for HeapMemory {
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, out: &mut [u8]) {
        out.copy_from_slice(&self.lock()[offset..offset + out.len()]);
    }
    fn lend(&self, offset: usize, len: usize, f: &mut dyn FnMut(&[u8])) {
        f(&self.lock()[offset..offset + len]);
    }
    fn read_file_at(&self, offset: usize, len: usize, file: &File, pos: u64) -> io::Result<usize> {
        file.read_at(&mut self.lock()[offset..offset + len], pos)
    }
    fn write_file_at(&self, offset: usize, len: usize, file: &File, pos: u64) -> io::Result<usize> {
        file.write_at(&self.lock()[offset..offset + len], pos)
    }
    fn write(&self, offset: usize, data: &[u8]) {
        self.lock()[offset..offset + data.len()].copy_from_slice(data);
    }
    fn write_parts(&self, offset: usize, parts: &[&[u8]]) {
        let mut b = self.lock();
        let mut at = offset;
        for p in parts {
            b[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
    }
    fn fetch_add(&self, offset: usize, add: u64) -> u64 {
        let mut b = self.lock();
        let cell: &mut [u8; 8] = (&mut b[offset..offset + 8]).try_into().expect("8 bytes");
        let old = u64::from_ne_bytes(*cell);
        *cell = old.wrapping_add(add).to_ne_bytes();
        old
    }
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64 {
        let mut b = self.lock();
        let cell: &mut [u8; 8] = (&mut b[offset..offset + 8]).try_into().expect("8 bytes");
        let old = u64::from_ne_bytes(*cell);
        if old == compare {
            *cell = swap.to_ne_bytes();
        }
        old
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store that does not lend its bytes (as verbs' mapped memory).
    #[derive(Debug)]
    struct Unlending(HeapMemory);

    impl HostMemory for Unlending {
        fn addr(&self) -> u64 {
            self.0.addr()
        }
        fn len(&self) -> usize {
            self.0.len()
        }
        fn read(&self, offset: usize, out: &mut [u8]) {
            self.0.read(offset, out);
        }
        fn write(&self, offset: usize, data: &[u8]) {
            self.0.write(offset, data);
        }
        fn fetch_add(&self, offset: usize, add: u64) -> u64 {
            self.0.fetch_add(offset, add)
        }
        fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64 {
            self.0.compare_swap(offset, compare, swap)
        }
    }

    #[test]
    fn read_with_lends_or_copies_the_same_bytes() {
        for (m, lends) in [
            (Memory::new(Arc::new(HeapMemory::new(0x1000, 32))), true),
            (
                Memory::new(Arc::new(Unlending(HeapMemory::new(0x1000, 32)))),
                false,
            ),
        ] {
            m.write(4, b"relink").unwrap();
            let mut scratch = vec![0xAA; 64];
            let got = m.read_with(4, 6, &mut scratch, <[u8]>::to_vec).unwrap();
            assert_eq!(got, b"relink");
            // Lent bytes are read in place: the scratch buffer is untouched.
            if lends {
                assert_eq!(scratch, [0xAA; 64]);
            } else {
                assert_eq!(scratch, b"relink");
            }
            assert_eq!(m.read_with(4, 0, &mut scratch, <[u8]>::len).unwrap(), 0);
            assert!(m.read_with(30, 3, &mut scratch, |_| ()).is_err());
        }
    }

    #[test]
    fn file_io_moves_the_same_bytes_in_place_or_through_a_copy() {
        for m in [
            Memory::new(Arc::new(HeapMemory::new(0x1000, 64))),
            Memory::new(Arc::new(Unlending(HeapMemory::new(0x1000, 64)))),
        ] {
            let file = tempfile::tempfile().unwrap();
            file.write_all_at(b"0123456789", 0).unwrap();
            m.write(0, &[0xAA; 64]).unwrap();
            // 6 bytes from file offset 4, the last 2 past its end: zeros.
            m.read_file_at(8, 8, &file, 4).unwrap();
            assert_eq!(m.read_vec(6, 12).unwrap(), b"\xAA\xAA456789\0\0\xAA\xAA");
            m.write_file_at(8, 4, &file, 20).unwrap();
            let mut back = [0u8; 4];
            file.read_exact_at(&mut back, 20).unwrap();
            assert_eq!(&back, b"4567");
            for bad in [
                m.read_file_at(60, 8, &file, 0),
                m.write_file_at(usize::MAX, 2, &file, 0),
            ] {
                assert_eq!(bad.unwrap_err().kind(), io::ErrorKind::InvalidInput);
            }
        }
    }

    #[test]
    fn bounds_and_atomics() {
        let m = Memory::new(Arc::new(HeapMemory::new(0x1000, 64)));
        m.write(0, b"hello").unwrap();
        assert_eq!(m.read_vec(0, 5).unwrap(), b"hello");
        assert!(m.write(60, b"hello").is_err());
        assert!(m.read_vec(usize::MAX, 2).is_err());
        assert_eq!(m.fetch_add(8, 5).unwrap(), 0);
        assert_eq!(m.fetch_add(8, 5).unwrap(), 5);
        assert_eq!(m.compare_swap(8, 10, 1).unwrap(), 10);
        let mut scratch = Vec::new();
        assert_eq!(
            m.read_with(1, 3, &mut scratch, <[u8]>::to_vec).unwrap(),
            b"ell"
        );
        assert!(m.read_with(62, 3, &mut scratch, |_| ()).is_err());
        assert_eq!(m.compare_swap(8, 10, 2).unwrap(), 1);
        assert_eq!(m.read_u64(8).unwrap(), 1);
        assert!(matches!(
            m.fetch_add(4, 1),
            Err(MemoryError::Misaligned { .. })
        ));
        assert!(m.contains(0x1000, 64));
        assert!(!m.contains(0x1000, 65));
        assert!(!m.contains(u64::MAX, 2));
    }

    #[test]
    fn parts_are_written_as_one_write_of_their_concatenation() {
        for store in [
            Arc::new(HeapMemory::new(0x1000, 16)) as Arc<dyn HostMemory>,
            Arc::new(Unlending(HeapMemory::new(0x1000, 16))),
        ] {
            let m = Memory::new(store);
            m.write_parts(3, &[b"ab", b"", b"cde"]).expect("fits");
            let mut out = [0u8; 8];
            m.read(2, &mut out).expect("in bounds");
            assert_eq!(&out, b"\0abcde\0\0");
            // One byte too many: nothing is written.
            assert!(m.write_parts(12, &[b"xy", b"zw", b"!"]).is_err());
            let mut rest = [0u8; 4];
            m.read(12, &mut rest).expect("in bounds");
            assert_eq!(rest, [0; 4]);
        }
    }
}
