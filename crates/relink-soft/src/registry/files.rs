//! File primitives every registry change goes through: bounded reads of
//! small files, atomic replacement (a temporary file renamed over the old
//! one) and removal that tolerates a missing file.

use std::collections::hash_map::RandomState;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{io_err, ParseError, RegistryError, MAX_FILE_LEN};

/// Reads a small registry file; `Ok(None)` if it does not exist.
pub(super) fn read_small(path: &Path) -> Result<Option<String>, RegistryError> {
    let file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
    };
    let mut buf = Vec::new();
    file.take(MAX_FILE_LEN + 1)
        .read_to_end(&mut buf)
        .map_err(io_err(path))?;
    if buf.len() as u64 > MAX_FILE_LEN {
        return Err(ParseError::file(format!("larger than {MAX_FILE_LEN} bytes")).in_file(path));
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| ParseError::file("not valid UTF-8").in_file(path))
}

/// A random 64-bit value from std's randomly keyed hasher (no `unsafe`, no
/// extra dependency).
pub(super) fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.write_u128(now);
    h.finish()
}

/// Replaces `path` atomically with `contents`.
pub(super) fn write_atomic(path: &Path, contents: &str) -> Result<(), RegistryError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{file_name}.{}.{:016x}.tmp",
        std::process::id(),
        random_u64()
    ));
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        f.write_all(contents.as_bytes()).map_err(io_err(&tmp))?;
        drop(f);
        fs::rename(&tmp, path).map_err(io_err(path))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

pub(super) fn remove_if_exists(path: &Path) -> Result<(), RegistryError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(path)(e)),
    }
}
