//! The file backend: block operations on a regular file (or block device)
//! with positioned I/O, run on tokio's blocking pool.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use rustix::fs::{fallocate, seek, FallocateFlags, SeekFrom};
use rustix::io::Errno;
use tokio::sync::mpsc;

use crate::error::BlockError;
use crate::export::{BlockOp, BlockReply, BlockRequest, Export, ExportFlags, Extent};

/// The most extents one block status reply carries: the client asks again
/// from where it ends.
const MAX_EXTENTS: usize = 1024;

/// Largest buffer used to write zeroes where `fallocate` cannot.
const ZERO_CHUNK: u64 = 1 << 20;

/// Block operations on a file, synchronous (call from a blocking context).
///
/// - Read: `pread` of exactly the requested bytes (a short file reads as an
///   `EIO`).
/// - Write: `pwrite` of all bytes; with FUA, `fdatasync` before returning.
/// - Flush: `fdatasync`: every write that returned before it is durable.
/// - Trim: `fallocate(PUNCH_HOLE | KEEP_SIZE)`; where the file system does not
///   support it, nothing (a trim promises nothing about later reads).
/// - Write zeroes: `fallocate(PUNCH_HOLE | KEEP_SIZE)` when a hole is
///   allowed, else `fallocate(ZERO_RANGE)`; where neither works, `pwrite` of
///   zeroes in 1 MiB pieces. With FUA, `fdatasync` after.
/// - Block status: the file's holes and data (`lseek` `SEEK_HOLE` /
///   `SEEK_DATA`, [`allocation`]): a hole is `HOLE | ZERO`, data neither;
///   a file system that cannot tell says all of it is data.
#[derive(Debug, Clone)]
pub struct FileStore {
    file: Arc<File>,
    read_only: bool,
}

impl FileStore {
    /// A store over `file`; `read_only` refuses every modification with
    /// `EPERM`.
    #[must_use]
    pub fn new(file: File, read_only: bool) -> Self {
        FileStore {
            file: Arc::new(file),
            read_only,
        }
    }

    /// Opens `path` (read-write unless `read_only`).
    ///
    /// # Errors
    /// The `open` error.
    pub fn open(path: impl AsRef<Path>, read_only: bool) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(!read_only)
            .open(path)?;
        Ok(Self::new(file, read_only))
    }

    /// The file's size in bytes.
    ///
    /// # Errors
    /// The `fstat` error.
    pub fn size(&self) -> std::io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    /// Whether modifications are refused.
    #[must_use]
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Runs one operation (blocking).
    ///
    /// # Errors
    /// `EPERM` for a modification of a read-only store; otherwise the OS
    /// error mapped by `From<std::io::Error> for BlockError`.
    pub fn execute(&self, op: BlockOp) -> Result<BlockReply, BlockError> {
        let modifies = !matches!(op, BlockOp::Read { .. } | BlockOp::Flush);
        if modifies && self.read_only {
            return Err(BlockError::PermissionDenied);
        }
        let f = &*self.file;
        match op {
            BlockOp::Read { offset, len } => {
                let mut buf = vec![0u8; len as usize];
                f.read_exact_at(&mut buf, offset)?;
                return Ok(BlockReply::Data(buf));
            }
            BlockOp::Write { offset, data, fua } => {
                f.write_all_at(&data, offset)?;
                self.sync_if(fua)?;
            }
            BlockOp::Flush => {
                if !self.read_only {
                    f.sync_data()?;
                }
            }
            BlockOp::Trim { offset, len, fua } => {
                let mode = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
                if fallocate(f, mode, offset, u64::from(len)).is_ok() {
                    self.sync_if(fua)?;
                }
            }
            BlockOp::WriteZeroes {
                offset,
                len,
                fua,
                may_trim,
            } => {
                self.write_zeroes(offset, u64::from(len), may_trim)?;
                self.sync_if(fua)?;
            }
            BlockOp::BlockStatus { offset, len } => {
                return Ok(BlockReply::Extents(allocation(
                    f,
                    offset,
                    u64::from(len),
                    MAX_EXTENTS,
                )?));
            }
        }
        Ok(BlockReply::Done)
    }

    fn sync_if(&self, fua: bool) -> std::io::Result<()> {
        if fua {
            self.file.sync_data()?;
        }
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> std::io::Result<()> {
        let f = &*self.file;
        if may_trim
            && fallocate(
                f,
                FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                offset,
                len,
            )
            .is_ok()
        {
            return Ok(());
        }
        if fallocate(f, FallocateFlags::ZERO_RANGE, offset, len).is_ok() {
            return Ok(());
        }
        let zeroes = vec![0u8; len.min(ZERO_CHUNK) as usize];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(ZERO_CHUNK);
            f.write_all_at(&zeroes[..n as usize], offset + done)?;
            done += n;
        }
        Ok(())
    }
}

/// The holes and data of `[offset, offset + len)` of `file`, in order, at
/// most `max` extents (the last may end before the range does): holes
/// (`lseek` `SEEK_HOLE`) are `hole` and `zero`, data neither. A file system
/// without `SEEK_DATA` (`EINVAL`, `EOPNOTSUPP`) gives one extent of data.
///
/// # Errors
/// Any other `lseek` error.
pub fn allocation(file: &File, offset: u64, len: u64, max: usize) -> std::io::Result<Vec<Extent>> {
    let end = offset.saturating_add(len);
    let mut out = Vec::new();
    let mut at = offset;
    while at < end && out.len() < max.max(1) {
        let data = match seek(file, SeekFrom::Data(at)) {
            Ok(d) => d.min(end),
            // In the hole at the end of the file.
            Err(Errno::NXIO) => end,
            Err(Errno::INVAL | Errno::OPNOTSUPP) if out.is_empty() => {
                return Ok(vec![Extent {
                    len,
                    hole: false,
                    zero: false,
                }]);
            }
            Err(e) => return Err(e.into()),
        };
        if data > at {
            out.push(Extent {
                len: data - at,
                hole: true,
                zero: true,
            });
            at = data;
            continue;
        }
        let hole = match seek(file, SeekFrom::Hole(at)) {
            Ok(h) => h.min(end),
            Err(Errno::NXIO) => end,
            Err(e) => return Err(e.into()),
        };
        // `SEEK_HOLE` from data never returns `at` itself; be sure to move.
        let next = hole.max(at + 1).min(end);
        out.push(Extent {
            len: next - at,
            hole: false,
            zero: false,
        });
        at = next;
    }
    Ok(out)
}

/// Serves `store` as an export named `name`: spawns a task on the current
/// tokio runtime that takes requests from the export's channel and runs
/// each on the blocking pool, so many run at once and complete in any order.
/// The export offers flush, FUA, trim and write-zeroes (unless read-only),
/// `CAN_MULTI_CONN` (one file descriptor serves every connection, so a
/// flush covers writes completed on any of them) and `base:allocation`
/// (block status: the file's holes). The task ends when every
/// clone of the export is dropped.
///
/// # Errors
/// The error of reading the file's size.
///
/// # Panics
/// Outside a tokio runtime.
pub fn spawn_file_export(name: impl Into<String>, store: FileStore) -> std::io::Result<Export> {
    let size = store.size()?;
    let flags = if store.is_read_only() {
        ExportFlags::read_only()
    } else {
        ExportFlags::read_write()
    }
    .with_multi_conn(true)
    .with_block_status(true);
    let (tx, mut rx) = mpsc::channel::<BlockRequest>(256);
    tokio::spawn(async move {
        while let Some(req) = rx.recv().await {
            let store = store.clone();
            tokio::task::spawn_blocking(move || {
                let result = store.execute(req.op);
                let _ = req.reply.send(result);
            });
        }
    });
    Ok(Export::new(name, size, flags, tx))
}
