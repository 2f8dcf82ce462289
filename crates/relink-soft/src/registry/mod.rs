//! The host-wide registry of soft devices, for the TCP (multi-process) mode —
//! what `rdma link add/delete` is for Soft-RoCE.
//!
//! The registry is a directory (see [`Registry::default_dir`]) holding one
//! small text file per device, `<name>.dev`:
//!
//! ```text
//! name=soft0
//! index=1
//! guid=0x02c3a1fffe4b5d6e
//! addr=127.0.0.2/8
//! netdev=lo
//! generation=7
//! port=active
//! ```
//!
//! `addr` may repeat; `netdev` and `port` are optional (`port` defaults to
//! `active`); blank lines and lines starting with `#` are ignored, and so are
//! unknown keys (a newer writer may add some). Beside the device files the
//! directory holds:
//!
//! - `generation`: the host-wide generation counter (every registration gets
//!   a strictly greater generation than any before it);
//! - `indexes`: `name=index` lines remembering each name's index, so a device
//!   that comes back under the same name gets its index back;
//! - `<name>.fatal`: `generation=N` lines naming the generations of `<name>`
//!   that hit a fatal error (written by [`Registry::reset`] before the device
//!   re-registers, so that watchers report `Fatal`, `Removed`, `Added`; a
//!   watcher that scans between the two writes reports `Fatal` one scan
//!   before the rest, and the [`TcpHost`](crate::TcpHost) takes no new work
//!   on a device it saw fatal, so nothing starts on it in between);
//! - `lock`: held (created exclusively, removed on release) while a process
//!   changes the registry.
//!
//! Every file is replaced atomically (a temporary file renamed over it), so a
//! reader sees the old or the new contents, never a mix. Readers never lock.
//!
//! Processes watch the registry with a [`Watcher`], which diffs successive
//! [`Snapshot`]s into [`DeviceEvent`](relink_fabric::DeviceEvent)s (see
//! [`diff_snapshots`]).
//!
//! The code lives by concern:
//!
//! | file        | concern                                                       |
//! |-------------|---------------------------------------------------------------|
//! | `mod.rs`    | constants, [`RegistryError`], [`Registry`] and its directory  |
//! | `dir.rs`    | creating the directory private, refusing an unsafe one        |
//! | `format.rs` | the files' text: parse and write, name/netdev/GUID checks     |
//! | `files.rs`  | bounded reads, atomic replacement, removal                    |
//! | `lock.rs`   | the `lock` file: take, release, break when stale              |
//! | `scan.rs`   | reading the directory into a [`Snapshot`]                     |
//! | `ops.rs`    | add, remove, reset, replace, set_port (under the lock)        |
//! | `watch.rs`  | [`diff_snapshots`] and the [`Watcher`]                        |

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use relink_fabric::Guid;
use thiserror::Error;

mod dir;
mod files;
mod format;
mod lock;
mod ops;
mod scan;
#[cfg(test)]
mod tests;
mod watch;

pub use format::{
    format_device, format_guid, parse_device, parse_guid, validate_name, validate_netdev,
    ParseError,
};
pub use scan::Snapshot;
pub use watch::{diff, diff_snapshots, Watcher};

/// Environment variable naming the registry directory.
pub const DIR_ENV: &str = "RELINK_SOFT_DIR";
/// Extension of device files (`<name>.dev`).
pub const DEVICE_EXT: &str = "dev";
/// Extension of fatal-error markers (`<name>.fatal`).
pub const FATAL_EXT: &str = "fatal";
/// Largest registry file accepted, in bytes.
pub const MAX_FILE_LEN: u64 = 64 * 1024;
/// Longest device name (the kernel's `IB_DEVICE_NAME_MAX` is 64 with the NUL).
pub const MAX_NAME_LEN: usize = 63;
/// Longest netdev name (the kernel's `IFNAMSIZ` is 16 with the NUL).
pub const MAX_NETDEV_LEN: usize = 15;

/// What can go wrong with the registry.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// A registry file or the directory could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A registry file is malformed.
    #[error("{}{}: {msg}", .path.display(), LineSuffix(.line))]
    Malformed {
        /// The malformed file, inside the registry directory.
        path: PathBuf,
        /// The 1-based line at fault, if the fault is on one line.
        line: Option<usize>,
        /// What is wrong (names the key).
        msg: String,
    },
    /// A device name is not acceptable.
    #[error("invalid device name {name:?}: {reason}")]
    InvalidName {
        /// The name given.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A netdev name is not acceptable.
    #[error("invalid netdev name {name:?}: {reason}")]
    InvalidNetdev {
        /// The name given.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A GUID is not acceptable.
    #[error("invalid GUID {guid}: {reason}")]
    InvalidGuid {
        /// The GUID given.
        guid: Guid,
        /// Why it is refused.
        reason: &'static str,
    },
    /// No device has that name.
    #[error("no soft device named {0:?}")]
    NotFound(String),
    /// A device with that name exists already.
    #[error("a soft device named {0:?} already exists")]
    Exists(String),
    /// The same address was given twice.
    #[error("address {addr} is given twice")]
    DuplicateAddr {
        /// The address given twice.
        addr: IpAddr,
    },
    /// Another device owns the address.
    #[error("address {addr} already belongs to soft device {owner:?}")]
    AddrInUse {
        /// The address asked for.
        addr: IpAddr,
        /// Name of the device that owns it.
        owner: String,
    },
    /// Another device has the GUID.
    #[error("GUID {guid} already belongs to soft device {owner:?}")]
    GuidInUse {
        /// The GUID asked for.
        guid: Guid,
        /// Name of the device that has it.
        owner: String,
    },
    /// The registry directory is not safe to use: the fallback directory
    /// `/tmp/relink-soft-<uid>` is a symbolic link, belongs to another user
    /// or is writable by group or others (see [`Registry::open`]).
    #[error(
        "refusing the soft device registry {}: {reason} (owner uid {owner}, mode {mode:04o}); \
         remove it, or make it a directory of your own that only you can write (chmod 700), \
         or name another directory with --dir or {DIR_ENV}",
        .path.display()
    )]
    UnsafeDir {
        /// The directory.
        path: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// Its permission bits.
        mode: u32,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The registry lock could not be taken in time.
    #[error("timed out after {waited:?} waiting for the registry lock {}", .path.display())]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
        /// How long the change waited for the lock before giving up.
        waited: Duration,
    },
}

/// Formats `: line N` when there is a line.
struct LineSuffix<'a>(&'a Option<usize>);

impl fmt::Display for LineSuffix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self.0 {
            Some(n) => write!(f, ": line {n}"),
            None => Ok(()),
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> RegistryError + '_ {
    move |source| RegistryError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The registry directory a process uses, from its environment: `$RELINK_SOFT_DIR`
/// if set, else `$XDG_RUNTIME_DIR/relink-soft`, else [`fallback_dir`].
fn default_dir_from(relink: Option<OsString>, xdg: Option<OsString>, uid: Option<u32>) -> PathBuf {
    if let Some(d) = relink.filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = xdg.filter(|d| !d.is_empty() && Path::new(d).is_absolute()) {
        return PathBuf::from(d).join("relink-soft");
    }
    fallback_dir(uid)
}

/// The fallback directory: `/tmp/relink-soft-<uid>` (or `/tmp/relink-soft`
/// if the uid is unknown, off Unix). [`Registry::open`] refuses it unless it
/// is private to this user.
fn fallback_dir(uid: Option<u32>) -> PathBuf {
    match uid {
        Some(uid) => PathBuf::from(format!("/tmp/relink-soft-{uid}")),
        None => PathBuf::from("/tmp/relink-soft"),
    }
}

/// The effective uid of this process: the owner of the files it creates.
fn current_uid() -> Option<u32> {
    #[cfg(unix)]
    {
        Some(rustix::process::geteuid().as_raw())
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The registry of soft devices in one directory. Cheap to clone; holds no
/// open files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registry {
    dir: PathBuf,
}

impl Registry {
    /// The registry in `dir`, which is created (with its parents, mode
    /// `0700`) if missing.
    ///
    /// Whoever can write to the directory can change the soft devices every
    /// process sees, so it is checked: it must be a directory owned by this
    /// process's (effective) uid that group and others cannot write to. The
    /// fallback directory `/tmp/relink-soft-<uid>` (see
    /// [`Registry::default_dir`]), which lies in a directory every user can
    /// write to, is refused with [`RegistryError::UnsafeDir`] if it fails
    /// (a symbolic link there fails too). Any other directory — named with
    /// `RELINK_SOFT_DIR` or a `--dir` option, or the per-user
    /// `$XDG_RUNTIME_DIR/relink-soft` — is used anyway with a `tracing`
    /// warning: a directory named on purpose may be shared with a group on
    /// purpose.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Registry, RegistryError> {
        let dir = dir.into();
        dir::prepare(&dir)?;
        Ok(Registry { dir })
    }

    /// The registry in [`Registry::default_dir`].
    pub fn open_default() -> Result<Registry, RegistryError> {
        Registry::open(Registry::default_dir())
    }

    /// The directory this process uses by default: `$RELINK_SOFT_DIR` if set,
    /// else `$XDG_RUNTIME_DIR/relink-soft`, else `/tmp/relink-soft-<uid>`.
    pub fn default_dir() -> PathBuf {
        default_dir_from(
            std::env::var_os(DIR_ENV),
            std::env::var_os("XDG_RUNTIME_DIR"),
            current_uid(),
        )
    }

    /// The registry's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn device_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.{DEVICE_EXT}"))
    }

    fn fatal_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.{FATAL_EXT}"))
    }
}
