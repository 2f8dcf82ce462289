//! The volume a target serves: a file, read with `pread` and written with
//! `pwrite` ([`FileExt`]), made durable with `fdatasync`
//! ([`File::sync_data`]).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use relink::Memory;
use rustix::fs::{seek, SeekFrom};
use rustix::io::Errno;

use crate::error::TargetError;
use crate::wire::{Command, Extent, Opcode};

/// The block size unless set ([`Volume::with_block_size`]).
pub const DEFAULT_BLOCK_SIZE: u32 = 512;

/// Zeros are written in pieces of this many bytes (WRITE_ZEROES, TRIM).
const ZERO_CHUNK: usize = 64 * 1024;

/// A file served as a volume: its size (fixed when opened), its block
/// size, and whether it is read-only.
#[derive(Debug)]
pub struct Volume {
    file: File,
    size: u64,
    block_size: u32,
    read_only: bool,
}

impl Volume {
    /// Serve `file` (its present length is the volume's size), with the
    /// default block size ([`DEFAULT_BLOCK_SIZE`]). A read-only volume
    /// refuses writes, write-zeroes and trims (`ReadOnly`); the file of
    /// a writable one must be open for writing.
    ///
    /// # Errors
    /// The error of reading the file's metadata.
    pub fn new(file: File, read_only: bool) -> io::Result<Volume> {
        let size = file.metadata()?.len();
        Ok(Volume {
            file,
            size,
            block_size: DEFAULT_BLOCK_SIZE,
            read_only,
        })
    }

    /// Open the file at `path` (read and write, or read only) and serve it
    /// ([`Volume::new`]).
    ///
    /// # Errors
    /// The error of opening the file or reading its metadata.
    pub fn open(path: impl AsRef<Path>, read_only: bool) -> io::Result<Volume> {
        let file = OpenOptions::new().read(true).write(!read_only).open(path)?;
        Volume::new(file, read_only)
    }

    /// The same volume with offsets and lengths in multiples of
    /// `block_size` (a power of two, at least 1).
    ///
    /// # Panics
    /// If `block_size` is not a power of two.
    pub fn with_block_size(mut self, block_size: u32) -> Volume {
        assert!(block_size.is_power_of_two(), "block size {block_size}");
        self.block_size = block_size;
        self
    }

    /// The size, bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The block size.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Whether it refuses writes.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Whether the target may carry out `cmd` (for a target whose longest
    /// READ or WRITE is `max_io`).
    ///
    /// # Errors
    /// `ReadOnly` for a write, write-zeroes or trim on a read-only volume;
    /// `Invalid` for a command of 0 bytes, a READ or WRITE above
    /// `max_io`, or an offset or length not a multiple of the block size;
    /// `OutOfRange` for a range past the end. IDENTIFY and FLUSH are
    /// always valid.
    pub fn check(&self, cmd: &Command, max_io: u32) -> Result<(), TargetError> {
        match cmd.opcode {
            Opcode::Identify | Opcode::Flush => return Ok(()),
            Opcode::Write | Opcode::WriteZeroes | Opcode::Trim if self.read_only => {
                return Err(TargetError::ReadOnly)
            }
            _ => {}
        }
        if cmd.len == 0 || (cmd.opcode.moves_data() && cmd.len > max_io) {
            return Err(TargetError::Invalid);
        }
        let bs = u64::from(self.block_size);
        if cmd.offset % bs != 0 || u64::from(cmd.len) % bs != 0 {
            return Err(TargetError::Invalid);
        }
        match cmd.offset.checked_add(u64::from(cmd.len)) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(TargetError::OutOfRange),
        }
    }

    /// Read `buf.len()` bytes at `offset` (a checked range: past the end
    /// of a file shorter than the volume reads zeros).
    ///
    /// # Errors
    /// `Io` if the file fails the read.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), TargetError> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => {
                    buf[done..].fill(0);
                    return Ok(());
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(TargetError::from_io(&e)),
            }
        }
        Ok(())
    }

    /// Read `len` bytes at `offset` straight into registered memory `mem`
    /// at `at` (`pread` into the memory: no copy in user space where its
    /// store allows, as the soft fabric's and verbs' do). Past the end of
    /// a file shorter than the volume reads zeros.
    ///
    /// # Errors
    /// `Io` if the file fails the read (or the range is outside `mem`).
    pub fn read_into(
        &self,
        offset: u64,
        len: u32,
        mem: &Memory,
        at: usize,
    ) -> Result<(), TargetError> {
        mem.read_file_at(at, len as usize, &self.file, offset)
            .map_err(|e| TargetError::from_io(&e))
    }

    /// Write `len` bytes of registered memory `mem` at `at` to the file
    /// at `offset` (`pwrite` from the memory, as
    /// [`read_into`](Self::read_into)), then make them durable if `fua`.
    ///
    /// # Errors
    /// As [`Volume::write`].
    pub fn write_from(
        &self,
        offset: u64,
        len: u32,
        mem: &Memory,
        at: usize,
        fua: bool,
    ) -> Result<(), TargetError> {
        mem.write_file_at(at, len as usize, &self.file, offset)
            .map_err(|e| TargetError::from_io(&e))?;
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    /// Write `data` at `offset`, then make it durable if `fua`.
    ///
    /// # Errors
    /// `NoSpace` or `Io` if the file fails the write or the sync.
    pub fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), TargetError> {
        self.file
            .write_all_at(data, offset)
            .map_err(|e| TargetError::from_io(&e))?;
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    /// Write `len` zeros at `offset`, then make them durable if `fua`.
    ///
    /// # Errors
    /// As [`Volume::write`].
    pub fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> Result<(), TargetError> {
        let zeros = vec![0u8; ZERO_CHUNK.min(len as usize)];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(zeros.len() as u64) as usize;
            self.write(offset + done, &zeros[..n], false)?;
            done += n as u64;
        }
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    /// The holes and data of `len` bytes at `offset`, in order, at most
    /// `max` extents (the last may end before the range): `lseek`'s
    /// `SEEK_DATA` and `SEEK_HOLE`. A file system that cannot tell
    /// (`EINVAL`, `EOPNOTSUPP`) says it is all data.
    ///
    /// # Errors
    /// `Io` for any other `lseek` error.
    pub fn allocation(
        &self,
        offset: u64,
        len: u64,
        max: usize,
    ) -> Result<Vec<Extent>, TargetError> {
        let end = offset.saturating_add(len);
        let mut out: Vec<Extent> = Vec::new();
        let mut at = offset;
        let io = |e: Errno| TargetError::from_io(&e.into());
        while at < end && out.len() < max.max(1) {
            // The next data at or after `at`: none left past the file's
            // last data (`ENXIO`, the hole at its end).
            let data = match seek(&self.file, SeekFrom::Data(at)) {
                Ok(d) => d.min(end),
                Err(Errno::NXIO) => end,
                Err(Errno::INVAL | Errno::OPNOTSUPP) if out.is_empty() => {
                    return Ok(vec![Extent { len, hole: false }]);
                }
                Err(e) => return Err(io(e)),
            };
            let (next, hole) = if data > at {
                (data, true)
            } else {
                let h = match seek(&self.file, SeekFrom::Hole(at)) {
                    Ok(h) => h,
                    Err(Errno::NXIO) => end,
                    Err(e) => return Err(io(e)),
                };
                (h.max(at + 1).min(end), false)
            };
            out.push(Extent {
                len: next - at,
                hole,
            });
            at = next;
        }
        Ok(out)
    }

    /// Make every write so far durable (`fdatasync`).
    ///
    /// # Errors
    /// `Io` (or `NoSpace`) if the sync fails.
    pub fn flush(&self) -> Result<(), TargetError> {
        self.file.sync_data().map_err(|e| TargetError::from_io(&e))
    }
}
