//! The registry directory itself: created private, and checked before use.
//!
//! Every process that attaches to the registry trusts its files (device
//! addresses and ports, the lock). In the fallback directory
//! `/tmp/relink-soft-<uid>`, under a directory every user can write, another
//! user could have created the directory (or a symbolic link) first, or a
//! permissive umask could have left it writable by others. So:
//!
//! - a missing directory is created with mode `0700` (parents too);
//! - the fallback directory is refused ([`RegistryError::UnsafeDir`]) unless
//!   it is a real directory (not a symbolic link) owned by this process's
//!   effective uid and not writable by group or others;
//! - any other directory — named with `RELINK_SOFT_DIR` or `--dir`, or
//!   `$XDG_RUNTIME_DIR/relink-soft`, which the user's private runtime
//!   directory protects — gets the same check but only a `tracing` warning:
//!   a directory named on purpose may be shared with a group on purpose.

use std::fs;
use std::io;
use std::path::Path;

use super::{current_uid, fallback_dir, io_err, RegistryError};

/// What is wrong with a registry directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DirFault {
    /// A symbolic link (or anything but a directory) stands at the path.
    NotADirectory,
    /// Another user owns it.
    ForeignOwner,
    /// Group or others may write it.
    Writable,
}

impl DirFault {
    pub(super) fn describe(self) -> &'static str {
        match self {
            DirFault::NotADirectory => "it is not a directory (a symbolic link?)",
            DirFault::ForeignOwner => "another user owns it",
            DirFault::Writable => "group or others can write to it",
        }
    }
}

/// The fault of a directory with these properties, used by `uid`.
pub(super) fn judge(is_dir: bool, owner: u32, mode: u32, uid: u32) -> Option<DirFault> {
    if !is_dir {
        Some(DirFault::NotADirectory)
    } else if owner != uid {
        Some(DirFault::ForeignOwner)
    } else if mode & 0o022 != 0 {
        Some(DirFault::Writable)
    } else {
        None
    }
}

/// Create `dir` (mode `0700`, parents too) if missing, then check it: a
/// fault refuses the fallback directory and is a warning for any other.
pub(super) fn prepare(dir: &Path) -> Result<(), RegistryError> {
    create_private(dir).map_err(io_err(dir))?;
    let uid = current_uid();
    let strict = *dir == fallback_dir(uid);
    check(dir, uid, strict)
}

#[cfg(unix)]
fn create_private(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)
}

#[cfg(unix)]
pub(super) fn check(dir: &Path, uid: Option<u32>, strict: bool) -> Result<(), RegistryError> {
    use std::os::unix::fs::MetadataExt;
    let Some(uid) = uid else {
        return Ok(());
    };
    // The fallback's own entry, not what a link there points to.
    let meta = if strict {
        fs::symlink_metadata(dir)
    } else {
        fs::metadata(dir)
    }
    .map_err(io_err(dir))?;
    let (owner, mode) = (meta.uid(), meta.mode() & 0o7777);
    let Some(fault) = judge(meta.is_dir(), owner, mode, uid) else {
        return Ok(());
    };
    if strict {
        return Err(RegistryError::UnsafeDir {
            path: dir.to_path_buf(),
            owner,
            mode,
            reason: fault.describe(),
        });
    }
    tracing::warn!(
        target: "relink_soft",
        "soft device registry {}: {} (owner uid {owner}, mode {mode:04o}, this process runs \
         as uid {uid}); whoever can write to it can change the soft devices every process \
         sees",
        dir.display(),
        fault.describe(),
    );
    Ok(())
}

#[cfg(not(unix))]
pub(super) fn check(_dir: &Path, _uid: Option<u32>, _strict: bool) -> Result<(), RegistryError> {
    Ok(())
}
