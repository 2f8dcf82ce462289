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
//!   re-registers, so that watchers report `Fatal`, `Removed`, `Added`);
//! - `lock`: held (created exclusively, removed on release) while a process
//!   changes the registry.
//!
//! Every file is replaced atomically (a temporary file renamed over it), so a
//! reader sees the old or the new contents, never a mix. Readers never lock.
//!
//! Processes watch the registry with a [`Watcher`], which diffs successive
//! [`Snapshot`]s into [`DeviceEvent`]s (see [`diff_snapshots`]).

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use relink_fabric::{DeviceEvent, DeviceEventKind, DeviceId, DeviceInfo, Guid, IpNet, PortState};
use thiserror::Error;

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

const GENERATION_FILE: &str = "generation";
const INDEX_FILE: &str = "indexes";
const LOCK_FILE: &str = "lock";
/// How long a mutation waits for the registry lock.
const LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// A lock older than this is stale even if its holder's pid is alive (the pid
/// may have been reused); mutations take milliseconds.
const LOCK_STALE_AFTER: Duration = Duration::from_secs(30);
/// How many fatal generations a `.fatal` marker remembers.
const FATAL_HISTORY: usize = 8;

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
        /// The file.
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
        /// The address.
        addr: IpAddr,
    },
    /// Another device owns the address.
    #[error("address {addr} already belongs to soft device {owner:?}")]
    AddrInUse {
        /// The address.
        addr: IpAddr,
        /// The device owning it.
        owner: String,
    },
    /// Another device has the GUID.
    #[error("GUID {guid} already belongs to soft device {owner:?}")]
    GuidInUse {
        /// The GUID.
        guid: Guid,
        /// The device having it.
        owner: String,
    },
    /// The registry lock could not be taken in time.
    #[error("timed out after {waited:?} waiting for the registry lock {}", .path.display())]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
        /// How long we waited.
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

/// A fault found while parsing one file (the path is added by the caller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The 1-based line at fault, if the fault is on one line.
    pub line: Option<usize>,
    /// What is wrong.
    pub msg: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(n) => write!(f, "line {n}: {}", self.msg),
            None => f.write_str(&self.msg),
        }
    }
}

impl std::error::Error for ParseError {}

impl ParseError {
    fn at(line: usize, msg: impl Into<String>) -> ParseError {
        ParseError {
            line: Some(line),
            msg: msg.into(),
        }
    }

    fn file(msg: impl Into<String>) -> ParseError {
        ParseError {
            line: None,
            msg: msg.into(),
        }
    }

    fn in_file(self, path: &Path) -> RegistryError {
        RegistryError::Malformed {
            path: path.to_path_buf(),
            line: self.line,
            msg: self.msg,
        }
    }
}

/// Checks a device name: 1 to 63 ASCII letters, digits, `_`, `-` or `.`,
/// not starting with `.` or `-`.
pub fn validate_name(name: &str) -> Result<(), RegistryError> {
    let bad = |reason| {
        Err(RegistryError::InvalidName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("longer than 63 bytes");
    }
    if name.starts_with('.') || name.starts_with('-') {
        return bad("starts with '.' or '-'");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return bad("only ASCII letters, digits, '_', '-' and '.' are allowed");
    }
    Ok(())
}

/// Checks a netdev name: 1 to 15 bytes, no whitespace, control characters,
/// `/` or `=`.
pub fn validate_netdev(name: &str) -> Result<(), RegistryError> {
    let bad = |reason| {
        Err(RegistryError::InvalidNetdev {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NETDEV_LEN {
        return bad("longer than 15 bytes");
    }
    if name
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '/' || c == '=')
    {
        return bad("contains whitespace, a control character, '/' or '='");
    }
    Ok(())
}

/// Parses a GUID written as `0x` and 1 to 16 hex digits, or in the
/// `0011:2233:4455:6677` form [`Guid`] displays as.
pub fn parse_guid(s: &str) -> Result<Guid, String> {
    let hex = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        if h.is_empty() || h.len() > 16 {
            return Err(format!(
                "bad GUID {s:?}: expected 1 to 16 hex digits after 0x"
            ));
        }
        h.to_string()
    } else {
        let groups: Vec<&str> = s.split(':').collect();
        if groups.len() != 4 || groups.iter().any(|g| g.len() != 4) {
            return Err(format!(
                "bad GUID {s:?}: expected 0x<hex> or xxxx:xxxx:xxxx:xxxx"
            ));
        }
        groups.concat()
    };
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("bad GUID {s:?}: not hexadecimal"));
    }
    u64::from_str_radix(&hex, 16)
        .map(Guid)
        .map_err(|e| format!("bad GUID {s:?}: {e}"))
}

/// Writes a GUID as the registry files (and `--guid`) spell it: `0x` and 16
/// hex digits.
pub fn format_guid(guid: Guid) -> String {
    format!("0x{:016x}", guid.0)
}

fn parse_port(s: &str) -> Option<PortState> {
    match s {
        "active" => Some(PortState::Active),
        "down" => Some(PortState::Down),
        _ => None,
    }
}

fn port_str(p: PortState) -> &'static str {
    match p {
        PortState::Active => "active",
        PortState::Down => "down",
    }
}

/// Splits a registry file into `(line number, key, value)`, skipping blank
/// lines and `#` comments.
fn key_values(text: &str) -> impl Iterator<Item = Result<(usize, &str, &str), ParseError>> {
    text.lines().enumerate().filter_map(|(i, raw)| {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        Some(match line.split_once('=') {
            Some((k, v)) => Ok((n, k.trim(), v.trim())),
            None => Err(ParseError::at(
                n,
                format!("expected key=value, got {line:?}"),
            )),
        })
    })
}

/// Parses the contents of a device file; `stem` is the file name without
/// `.dev`, which must equal the `name` key.
pub fn parse_device(stem: &str, text: &str) -> Result<DeviceInfo, ParseError> {
    let mut name = None;
    let mut index = None;
    let mut guid = None;
    let mut generation = None;
    let mut netdev = None;
    let mut port = None;
    let mut addrs: Vec<IpNet> = Vec::new();
    for kv in key_values(text) {
        let (n, key, value) = kv?;
        let dup = |seen: bool| {
            if seen {
                Err(ParseError::at(n, format!("key `{key}` given twice")))
            } else {
                Ok(())
            }
        };
        let bad = |what: &dyn fmt::Display| {
            ParseError::at(n, format!("bad value for key `{key}`: {what}"))
        };
        match key {
            "name" => {
                dup(name.is_some())?;
                validate_name(value).map_err(|e| bad(&e))?;
                if value != stem {
                    return Err(ParseError::at(
                        n,
                        format!("key `name` is {value:?} but the file is named for {stem:?}"),
                    ));
                }
                name = Some(value.to_string());
            }
            "index" => {
                dup(index.is_some())?;
                index = Some(value.parse::<u32>().map_err(|e| bad(&e))?);
            }
            "guid" => {
                dup(guid.is_some())?;
                guid = Some(parse_guid(value).map_err(|e| bad(&e))?);
            }
            "generation" => {
                dup(generation.is_some())?;
                generation = Some(value.parse::<u64>().map_err(|e| bad(&e))?);
            }
            "netdev" => {
                dup(netdev.is_some())?;
                validate_netdev(value).map_err(|e| bad(&e))?;
                netdev = Some(value.to_string());
            }
            "port" => {
                dup(port.is_some())?;
                port =
                    Some(parse_port(value).ok_or_else(|| {
                        bad(&format_args!("{value:?} (expected active or down)"))
                    })?);
            }
            "addr" => {
                let net: IpNet = value.parse().map_err(|e: String| bad(&e))?;
                if addrs.iter().any(|a| a.addr == net.addr) {
                    return Err(ParseError::at(
                        n,
                        format!("address {} given twice", net.addr),
                    ));
                }
                addrs.push(net);
            }
            // Unknown keys are allowed: a newer writer may add some.
            _ => {}
        }
    }
    let missing = |key: &str| ParseError::file(format!("missing key `{key}`"));
    Ok(DeviceInfo {
        id: DeviceId {
            name: name.ok_or_else(|| missing("name"))?,
            index: index.ok_or_else(|| missing("index"))?,
            generation: generation.ok_or_else(|| missing("generation"))?,
        },
        node_guid: guid.ok_or_else(|| missing("guid"))?,
        addrs,
        netdev,
        port_state: port.unwrap_or(PortState::Active),
    })
}

/// Writes a device file's contents (what [`parse_device`] reads back).
pub fn format_device(d: &DeviceInfo) -> String {
    let mut s = String::new();
    s.push_str(&format!("name={}\n", d.id.name));
    s.push_str(&format!("index={}\n", d.id.index));
    s.push_str(&format!("guid={}\n", format_guid(d.node_guid)));
    for a in &d.addrs {
        s.push_str(&format!("addr={a}\n"));
    }
    if let Some(n) = &d.netdev {
        s.push_str(&format!("netdev={n}\n"));
    }
    s.push_str(&format!("generation={}\n", d.id.generation));
    s.push_str(&format!("port={}\n", port_str(d.port_state)));
    s
}

/// Parses a `.fatal` marker: `generation=N` lines.
fn parse_fatal(text: &str) -> Result<Vec<u64>, ParseError> {
    let mut gens = Vec::new();
    for kv in key_values(text) {
        let (n, key, value) = kv?;
        if key == "generation" {
            let g = value
                .parse::<u64>()
                .map_err(|e| ParseError::at(n, format!("bad value for key `generation`: {e}")))?;
            gens.push(g);
        }
    }
    Ok(gens)
}

/// Parses the `indexes` file: `name=index` lines.
fn parse_indexes(text: &str) -> Result<BTreeMap<String, u32>, ParseError> {
    let mut map = BTreeMap::new();
    for kv in key_values(text) {
        let (n, key, value) = kv?;
        validate_name(key).map_err(|e| ParseError::at(n, format!("bad key: {e}")))?;
        let index = value
            .parse::<u32>()
            .map_err(|e| ParseError::at(n, format!("bad value for key `{key}`: {e}")))?;
        map.insert(key.to_string(), index);
    }
    Ok(map)
}

/// Parses the `generation` counter file: one decimal number.
fn parse_counter(text: &str) -> Result<u64, ParseError> {
    let t = text.trim();
    t.parse::<u64>()
        .map_err(|e| ParseError::file(format!("expected one decimal number, got {t:?}: {e}")))
}

/// Reads a small registry file; `Ok(None)` if it does not exist.
fn read_small(path: &Path) -> Result<Option<String>, RegistryError> {
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
fn random_u64() -> u64 {
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
fn write_atomic(path: &Path, contents: &str) -> Result<(), RegistryError> {
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

fn remove_if_exists(path: &Path) -> Result<(), RegistryError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// The registry directory a process uses, from its environment: `$RELINK_SOFT_DIR`
/// if set, else `$XDG_RUNTIME_DIR/relink-soft`, else `/tmp/relink-soft-<uid>`
/// (or `/tmp/relink-soft` if the uid is unknown).
fn default_dir_from(relink: Option<OsString>, xdg: Option<OsString>, uid: Option<u32>) -> PathBuf {
    if let Some(d) = relink.filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = xdg.filter(|d| !d.is_empty() && Path::new(d).is_absolute()) {
        return PathBuf::from(d).join("relink-soft");
    }
    match uid {
        Some(uid) => PathBuf::from(format!("/tmp/relink-soft-{uid}")),
        None => PathBuf::from("/tmp/relink-soft"),
    }
}

/// The real uid of this process: the owner of `/proc/self`.
fn current_uid() -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        fs::metadata("/proc/self").ok().map(|m| m.uid())
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// What the registry holds at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Registered devices, sorted by name.
    pub devices: Vec<DeviceInfo>,
    /// Per device name, the generations of it that hit a fatal error (from
    /// `<name>.fatal`).
    pub fatal: BTreeMap<String, Vec<u64>>,
}

impl Snapshot {
    /// The device with this name.
    pub fn get(&self, name: &str) -> Option<&DeviceInfo> {
        self.devices.iter().find(|d| d.id.name == name)
    }

    fn is_fatal(&self, name: &str, generation: u64) -> bool {
        self.fatal
            .get(name)
            .is_some_and(|gens| gens.contains(&generation))
    }
}

/// A scan of the directory that goes on past faulty files.
struct Scan {
    snapshot: Snapshot,
    /// Names whose device file could not be read or parsed.
    failed: BTreeSet<String>,
    /// The directory itself could not be read.
    dir_failed: bool,
    errors: Vec<RegistryError>,
}

/// The registry of soft devices in one directory. Cheap to clone; holds no
/// open files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registry {
    dir: PathBuf,
}

impl Registry {
    /// The registry in `dir`, which is created (with its parents) if
    /// missing.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Registry, RegistryError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
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

    /// All registered devices, sorted by index. A malformed file is an error
    /// naming it.
    pub fn list(&self) -> Result<Vec<DeviceInfo>, RegistryError> {
        let mut devices = self.snapshot()?.devices;
        devices.sort_by(|a, b| (a.id.index, &a.id.name).cmp(&(b.id.index, &b.id.name)));
        Ok(devices)
    }

    /// The device named `name`, if registered.
    pub fn get(&self, name: &str) -> Result<Option<DeviceInfo>, RegistryError> {
        validate_name(name)?;
        self.read_device(name)
    }

    /// The devices and fatal markers; a malformed file is an error naming it.
    pub fn snapshot(&self) -> Result<Snapshot, RegistryError> {
        let scan = self.scan();
        match scan.errors.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(scan.snapshot),
        }
    }

    /// A watcher of this registry (see [`Watcher::new`]).
    pub fn watcher(&self) -> Watcher {
        Watcher::new(self.clone())
    }

    fn read_device(&self, name: &str) -> Result<Option<DeviceInfo>, RegistryError> {
        let path = self.device_path(name);
        match read_small(&path)? {
            None => Ok(None),
            Some(text) => parse_device(name, &text)
                .map(Some)
                .map_err(|e| e.in_file(&path)),
        }
    }

    /// Lists the files of one kind: `(stem, path)` of every `*.<ext>` that is
    /// not hidden.
    fn entries(&self, ext: &str) -> Result<Vec<(String, PathBuf)>, RegistryError> {
        let rd = match fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&self.dir)(e)),
        };
        let mut out = Vec::new();
        for entry in rd {
            let entry = entry.map_err(io_err(&self.dir))?;
            let file_name = entry.file_name();
            let Some(file_name) = file_name.to_str() else {
                continue;
            };
            if file_name.starts_with('.') {
                continue; // temporary files
            }
            let Some(stem) = file_name
                .strip_suffix(ext)
                .and_then(|s| s.strip_suffix('.'))
            else {
                continue;
            };
            out.push((stem.to_string(), entry.path()));
        }
        out.sort();
        Ok(out)
    }

    /// Reads everything, going on past faulty files. Device files are read
    /// before fatal markers: [`Registry::reset`] writes the marker before the
    /// device file, so a scan that sees a reset's new generation also sees
    /// its marker.
    fn scan(&self) -> Scan {
        let mut scan = Scan {
            snapshot: Snapshot::default(),
            failed: BTreeSet::new(),
            dir_failed: false,
            errors: Vec::new(),
        };
        let devs = match self.entries(DEVICE_EXT) {
            Ok(d) => d,
            Err(e) => {
                scan.dir_failed = true;
                scan.errors.push(e);
                return scan;
            }
        };
        for (stem, path) in devs {
            let result = match validate_name(&stem) {
                Err(e) => Err(
                    ParseError::file(format!("file name is not a device name: {e}")).in_file(&path),
                ),
                Ok(()) => read_small(&path).and_then(|t| match t {
                    None => Ok(None), // removed since the directory was read
                    Some(text) => parse_device(&stem, &text)
                        .map(Some)
                        .map_err(|e| e.in_file(&path)),
                }),
            };
            match result {
                Ok(Some(d)) => scan.snapshot.devices.push(d),
                Ok(None) => {}
                Err(e) => {
                    scan.failed.insert(stem);
                    scan.errors.push(e);
                }
            }
        }
        let markers = match self.entries(FATAL_EXT) {
            Ok(m) => m,
            Err(e) => {
                scan.dir_failed = true;
                scan.errors.push(e);
                return scan;
            }
        };
        for (stem, path) in markers {
            match read_small(&path) {
                Ok(None) => {}
                Ok(Some(text)) => match parse_fatal(&text) {
                    Ok(gens) => {
                        scan.snapshot.fatal.insert(stem, gens);
                    }
                    Err(e) => scan.errors.push(e.in_file(&path)),
                },
                Err(e) => scan.errors.push(e),
            }
        }
        scan
    }

    /// Takes the registry lock, creating the directory if needed.
    fn lock(&self) -> Result<LockGuard, RegistryError> {
        fs::create_dir_all(&self.dir).map_err(io_err(&self.dir))?;
        let path = self.dir.join(LOCK_FILE);
        let token = format!("{} {:016x}\n", std::process::id(), random_u64());
        let start = Instant::now();
        let mut pause = Duration::from_micros(200);
        loop {
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut f) => {
                    f.write_all(token.as_bytes()).map_err(io_err(&path))?;
                    return Ok(LockGuard { path });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err(&path)(e)),
            }
            if break_stale_lock(&path) {
                continue;
            }
            let waited = start.elapsed();
            if waited >= LOCK_TIMEOUT {
                return Err(RegistryError::LockTimeout { path, waited });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// All devices, strictly, for a change under the lock.
    fn devices_locked(&self) -> Result<Vec<DeviceInfo>, RegistryError> {
        Ok(self.snapshot()?.devices)
    }

    /// The next host-wide generation: above the counter file and above every
    /// registered device (in case the counter file was lost).
    fn next_generation(&self, devices: &[DeviceInfo]) -> Result<u64, RegistryError> {
        let path = self.dir.join(GENERATION_FILE);
        let counter = match read_small(&path)? {
            None => 0,
            Some(text) => parse_counter(&text).map_err(|e| e.in_file(&path))?,
        };
        let max_live = devices.iter().map(|d| d.id.generation).max().unwrap_or(0);
        let next = counter.max(max_live).saturating_add(1);
        write_atomic(&path, &format!("{next}\n"))?;
        Ok(next)
    }

    /// The index for a device named `name`: the one recorded for the name if
    /// no live device has it, else the smallest index (from 1) that no live
    /// device has and no other name has recorded.
    fn allocate_index(&self, name: &str, live: &[DeviceInfo]) -> Result<u32, RegistryError> {
        let path = self.dir.join(INDEX_FILE);
        let mut recorded = match read_small(&path)? {
            None => BTreeMap::new(),
            Some(text) => parse_indexes(&text).map_err(|e| e.in_file(&path))?,
        };
        let in_use: BTreeSet<u32> = live.iter().map(|d| d.id.index).collect();
        if let Some(&i) = recorded.get(name) {
            if !in_use.contains(&i) {
                return Ok(i);
            }
        }
        let reserved: BTreeSet<u32> = recorded
            .iter()
            .filter(|(n, _)| n.as_str() != name)
            .map(|(_, &i)| i)
            .collect();
        let index = (1..=u32::MAX)
            .find(|i| !in_use.contains(i) && !reserved.contains(i))
            .ok_or_else(|| ParseError::file("no free device index").in_file(&path))?;
        recorded.insert(name.to_string(), index);
        let mut text = String::new();
        for (n, i) in &recorded {
            text.push_str(&format!("{n}={i}\n"));
        }
        write_atomic(&path, &text)?;
        Ok(index)
    }

    /// A fresh random GUID no device in `avoid` has.
    fn fresh_guid(avoid: &[DeviceInfo], also: Option<Guid>) -> Guid {
        loop {
            let g = Guid(random_u64());
            if g.0 != 0
                && g.0 != u64::MAX
                && Some(g) != also
                && !avoid.iter().any(|d| d.node_guid == g)
            {
                return g;
            }
        }
    }

    /// Creates a registration under the lock. `live` are the other devices.
    fn create_locked(
        &self,
        live: &[DeviceInfo],
        name: &str,
        addrs: Vec<IpNet>,
        guid: Guid,
        netdev: Option<String>,
        port_state: PortState,
    ) -> Result<DeviceInfo, RegistryError> {
        let index = self.allocate_index(name, live)?;
        let generation = self.next_generation(live)?;
        let info = DeviceInfo {
            id: DeviceId {
                name: name.to_string(),
                index,
                generation,
            },
            node_guid: guid,
            addrs,
            netdev,
            port_state,
        };
        // A marker left from an earlier registration names only older
        // generations; drop it so it cannot be mistaken for this one's.
        remove_if_exists(&self.fatal_path(name))?;
        write_atomic(&self.device_path(name), &format_device(&info))?;
        Ok(info)
    }

    /// Registers a new device `name` owning `addrs` (at least one is expected
    /// by the TCP fabric, none is allowed). `guid` defaults to a fresh random
    /// one; the port starts active. The device gets the index it had before
    /// if the name was registered before (and the index is free), else the
    /// smallest free index, and a new host-wide generation.
    pub fn add(
        &self,
        name: &str,
        addrs: Vec<IpNet>,
        guid: Option<Guid>,
        netdev: Option<String>,
    ) -> Result<DeviceInfo, RegistryError> {
        validate_name(name)?;
        if let Some(n) = &netdev {
            validate_netdev(n)?;
        }
        for (i, a) in addrs.iter().enumerate() {
            if addrs[..i].iter().any(|b| b.addr == a.addr) {
                return Err(RegistryError::DuplicateAddr { addr: a.addr });
            }
        }
        if let Some(g) = guid {
            if g.0 == 0 {
                return Err(RegistryError::InvalidGuid {
                    guid: g,
                    reason: "a node GUID cannot be 0",
                });
            }
        }
        let _lock = self.lock()?;
        let live = self.devices_locked()?;
        if live.iter().any(|d| d.id.name == name) {
            return Err(RegistryError::Exists(name.to_string()));
        }
        for a in &addrs {
            if let Some(owner) = live.iter().find(|d| d.owns(a.addr)) {
                return Err(RegistryError::AddrInUse {
                    addr: a.addr,
                    owner: owner.id.name.clone(),
                });
            }
        }
        let guid = match guid {
            Some(g) => {
                if let Some(owner) = live.iter().find(|d| d.node_guid == g) {
                    return Err(RegistryError::GuidInUse {
                        guid: g,
                        owner: owner.id.name.clone(),
                    });
                }
                g
            }
            None => Registry::fresh_guid(&live, None),
        };
        self.create_locked(&live, name, addrs, guid, netdev, PortState::Active)
    }

    /// Unregisters `name`; returns the device as it was.
    pub fn remove(&self, name: &str) -> Result<DeviceInfo, RegistryError> {
        validate_name(name)?;
        let _lock = self.lock()?;
        let dev = self
            .read_device(name)?
            .ok_or_else(|| RegistryError::NotFound(name.to_string()))?;
        let path = self.device_path(name);
        fs::remove_file(&path).map_err(io_err(&path))?;
        remove_if_exists(&self.fatal_path(name))?;
        Ok(dev)
    }

    /// Resets `name`, like a device that hit a fatal error and re-registered:
    /// same name, index, GUID, addresses, netdev and port state, a new
    /// generation. The old generation is first recorded in `<name>.fatal`,
    /// so watchers report `Fatal`, `Removed`, `Added`. Returns the new
    /// registration.
    pub fn reset(&self, name: &str) -> Result<DeviceInfo, RegistryError> {
        validate_name(name)?;
        let _lock = self.lock()?;
        let live = self.devices_locked()?;
        let old = live
            .iter()
            .find(|d| d.id.name == name)
            .cloned()
            .ok_or_else(|| RegistryError::NotFound(name.to_string()))?;
        let generation = self.next_generation(&live)?;

        let marker = self.fatal_path(name);
        let mut gens = match read_small(&marker)? {
            None => Vec::new(),
            Some(text) => parse_fatal(&text).map_err(|e| e.in_file(&marker))?,
        };
        if !gens.contains(&old.id.generation) {
            gens.push(old.id.generation);
        }
        let skip = gens.len().saturating_sub(FATAL_HISTORY);
        let mut text = String::new();
        for g in gens.iter().skip(skip) {
            text.push_str(&format!("generation={g}\n"));
        }
        write_atomic(&marker, &text)?;

        let mut new = old;
        new.id.generation = generation;
        write_atomic(&self.device_path(name), &format_device(&new))?;
        Ok(new)
    }

    /// Replaces `name` by a new device — a new card in the same slot: a new
    /// GUID, the same addresses, netdev and port state, named `new_name` (or
    /// `name`), with a new generation. Watchers see `Removed` then `Added`.
    /// Returns the new registration.
    pub fn replace(&self, name: &str, new_name: Option<&str>) -> Result<DeviceInfo, RegistryError> {
        validate_name(name)?;
        let target = new_name.unwrap_or(name);
        validate_name(target)?;
        let _lock = self.lock()?;
        let all = self.devices_locked()?;
        let old = all
            .iter()
            .find(|d| d.id.name == name)
            .cloned()
            .ok_or_else(|| RegistryError::NotFound(name.to_string()))?;
        if target != name && all.iter().any(|d| d.id.name == target) {
            return Err(RegistryError::Exists(target.to_string()));
        }
        let others: Vec<DeviceInfo> = all.into_iter().filter(|d| d.id.name != name).collect();
        let guid = Registry::fresh_guid(&others, Some(old.node_guid));
        // The old registration no longer holds its index (a same-name
        // replacement takes it back), but its generation must be exceeded.
        let index = self.allocate_index(target, &others)?;
        let mut with_old = others;
        with_old.push(old.clone());
        let generation = self.next_generation(&with_old)?;
        if target != name {
            // Unregister the old device before the new one appears: its
            // addresses move to the new one and are never owned twice.
            let path = self.device_path(name);
            fs::remove_file(&path).map_err(io_err(&path))?;
            remove_if_exists(&self.fatal_path(name))?;
        }
        let info = DeviceInfo {
            id: DeviceId {
                name: target.to_string(),
                index,
                generation,
            },
            node_guid: guid,
            addrs: old.addrs,
            netdev: old.netdev,
            port_state: old.port_state,
        };
        remove_if_exists(&self.fatal_path(target))?;
        write_atomic(&self.device_path(target), &format_device(&info))?;
        Ok(info)
    }

    /// Sets the port state of `name` (the same registration: no new
    /// generation). Watchers see `PortDown` or `PortUp`; setting the state it
    /// already has changes nothing. Returns the device.
    pub fn set_port(&self, name: &str, state: PortState) -> Result<DeviceInfo, RegistryError> {
        validate_name(name)?;
        let _lock = self.lock()?;
        let mut dev = self
            .read_device(name)?
            .ok_or_else(|| RegistryError::NotFound(name.to_string()))?;
        if dev.port_state != state {
            dev.port_state = state;
            write_atomic(&self.device_path(name), &format_device(&dev))?;
        }
        Ok(dev)
    }
}

/// Breaks the lock at `path` if its holder is gone: its pid no longer exists
/// or the lock is older than [`LOCK_STALE_AFTER`]. Returns whether the lock
/// was broken (then the caller retries at once).
fn break_stale_lock(path: &Path) -> bool {
    let Ok(meta) = fs::metadata(path) else {
        return true; // released meanwhile
    };
    let Ok(contents) = fs::read_to_string(path) else {
        return false;
    };
    let too_old = meta
        .modified()
        .ok()
        .and_then(|m| m.elapsed().ok())
        .is_some_and(|age| age > LOCK_STALE_AFTER);
    let holder_dead = contents
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|pid| {
            Path::new("/proc/self").exists() && !Path::new("/proc").join(pid.to_string()).exists()
        });
    // An empty lock is one being written right now: not stale unless old.
    if !(too_old || holder_dead) {
        return false;
    }
    // Move it aside, then check that what was moved is what was judged stale
    // (another process may have broken and re-taken it in between).
    let aside = path.with_file_name(format!(
        ".lock.stale.{}.{:016x}",
        std::process::id(),
        random_u64()
    ));
    if fs::rename(path, &aside).is_err() {
        return false;
    }
    let moved = fs::read_to_string(&aside).unwrap_or_default();
    if moved != contents {
        // We moved a live lock: put it back unless someone took the lock
        // since (hard_link fails if the path exists).
        let _ = fs::hard_link(&aside, path);
    }
    let _ = fs::remove_file(&aside);
    true
}

/// Holds the registry lock; releases it on drop.
#[derive(Debug)]
struct LockGuard {
    path: PathBuf,
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Whether two entries are the same registration of a device.
fn same_registration(a: &DeviceInfo, b: &DeviceInfo) -> bool {
    a.id == b.id && a.node_guid == b.node_guid
}

fn event(kind: DeviceEventKind, device: &DeviceInfo) -> DeviceEvent {
    DeviceEvent {
        kind,
        device: device.clone(),
    }
}

/// Events turning device list `old` into `new`, without fatal markers; see
/// [`diff_snapshots`].
pub fn diff(old: &[DeviceInfo], new: &[DeviceInfo]) -> Vec<DeviceEvent> {
    let old = Snapshot {
        devices: old.to_vec(),
        fatal: BTreeMap::new(),
    };
    let new = Snapshot {
        devices: new.to_vec(),
        fatal: BTreeMap::new(),
    };
    diff_snapshots(&old, &new)
}

/// Events turning snapshot `old` into `new`, in this order:
///
/// 1. `Fatal` for each old registration gone in `new` whose generation is
///    newly marked fatal;
/// 2. `Removed` for each old registration gone in `new` (a device whose
///    generation or GUID changed is gone: it was reset or replaced);
/// 3. `Added` for each new registration;
/// 4. for registrations in both: `PortDown`/`PortUp`, `NetdevDetach`/
///    `NetdevAttach` and `AddrChange` as their fields differ;
/// 5. `Fatal` for each registration in `new` whose generation is newly
///    marked fatal (a reset that has not re-registered yet).
///
/// Within each group devices come in name order. `Removed` carries the
/// device as it was, the others as it is.
pub fn diff_snapshots(old: &Snapshot, new: &Snapshot) -> Vec<DeviceEvent> {
    let old_by: BTreeMap<&str, &DeviceInfo> = old
        .devices
        .iter()
        .map(|d| (d.id.name.as_str(), d))
        .collect();
    let new_by: BTreeMap<&str, &DeviceInfo> = new
        .devices
        .iter()
        .map(|d| (d.id.name.as_str(), d))
        .collect();
    let newly_fatal = |d: &DeviceInfo| {
        new.is_fatal(&d.id.name, d.id.generation) && !old.is_fatal(&d.id.name, d.id.generation)
    };

    let mut fatal_gone = Vec::new();
    let mut removed = Vec::new();
    let mut added = Vec::new();
    let mut changed = Vec::new();
    let mut fatal_now = Vec::new();

    for (name, o) in &old_by {
        match new_by.get(name) {
            Some(n) if same_registration(o, n) => {
                if o.port_state != n.port_state {
                    let kind = match n.port_state {
                        PortState::Active => DeviceEventKind::PortUp,
                        PortState::Down => DeviceEventKind::PortDown,
                    };
                    changed.push(event(kind, n));
                }
                if o.netdev != n.netdev {
                    if o.netdev.is_some() {
                        changed.push(event(DeviceEventKind::NetdevDetach, n));
                    }
                    if n.netdev.is_some() {
                        changed.push(event(DeviceEventKind::NetdevAttach, n));
                    }
                }
                let oa: BTreeSet<String> = o.addrs.iter().map(|a| a.to_string()).collect();
                let na: BTreeSet<String> = n.addrs.iter().map(|a| a.to_string()).collect();
                if oa != na {
                    changed.push(event(DeviceEventKind::AddrChange, n));
                }
            }
            _ => {
                if newly_fatal(o) {
                    fatal_gone.push(event(DeviceEventKind::Fatal, o));
                }
                removed.push(event(DeviceEventKind::Removed, o));
            }
        }
    }
    for (name, n) in &new_by {
        let kept = old_by.get(name).is_some_and(|o| same_registration(o, n));
        if !kept {
            added.push(event(DeviceEventKind::Added, n));
        }
        if newly_fatal(n) {
            fatal_now.push(event(DeviceEventKind::Fatal, n));
        }
    }
    let mut out = fatal_gone;
    out.append(&mut removed);
    out.append(&mut added);
    out.append(&mut changed);
    out.append(&mut fatal_now);
    out
}

/// Turns registry changes into [`DeviceEvent`]s by diffing successive scans.
///
/// A provider creates one and calls [`Watcher::poll`] every few
/// milliseconds; the first poll reports every device registered at that
/// moment as `Added` (so nothing falls between listing and watching).
///
/// Faulty files do not stop the watcher: a device file that cannot be read
/// or parsed keeps the device as it was last seen (each fault is logged once
/// with `tracing`), and a directory that cannot be read yields no events.
/// A registry directory that does not exist holds no devices.
#[derive(Debug)]
pub struct Watcher {
    registry: Registry,
    last: Snapshot,
    logged: BTreeSet<String>,
}

impl Watcher {
    /// A watcher that has seen nothing yet: its first poll reports every
    /// registered device as `Added` (and `Fatal` for one whose current
    /// generation is marked fatal).
    pub fn new(registry: Registry) -> Watcher {
        Watcher::with_baseline(registry, Snapshot::default())
    }

    /// A watcher whose baseline is `baseline`: the first poll reports how
    /// the registry differs from it.
    pub fn with_baseline(registry: Registry, baseline: Snapshot) -> Watcher {
        Watcher {
            registry,
            last: baseline,
            logged: BTreeSet::new(),
        }
    }

    /// The registry watched.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The devices as of the last poll (or the baseline), sorted by name.
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.last.devices
    }

    /// The snapshot as of the last poll (or the baseline).
    pub fn snapshot(&self) -> &Snapshot {
        &self.last
    }

    /// Rescans the registry and returns what changed since the last poll.
    pub fn poll(&mut self) -> Vec<DeviceEvent> {
        let Some(next) = self.take_snapshot() else {
            return Vec::new();
        };
        let events = diff_snapshots(&self.last, &next);
        self.last = next;
        events
    }

    /// A lenient scan merged with the last snapshot; `None` if the
    /// directory could not be read.
    fn take_snapshot(&mut self) -> Option<Snapshot> {
        let scan = self.registry.scan();
        let messages: BTreeSet<String> = scan.errors.iter().map(|e| e.to_string()).collect();
        for m in messages.difference(&self.logged) {
            tracing::warn!(target: "relink_soft::registry", "soft device registry: {m}");
        }
        self.logged = messages;
        if scan.dir_failed {
            return None;
        }
        let mut snap = scan.snapshot;
        for name in &scan.failed {
            if let Some(prev) = self.last.get(name) {
                snap.devices.push(prev.clone());
            }
        }
        snap.devices.sort_by(|a, b| a.id.name.cmp(&b.id.name));
        Some(snap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory removed on drop (no tempfile dependency).
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            let p = std::env::temp_dir().join(format!(
                "relink-registry-test-{}-{:016x}",
                std::process::id(),
                random_u64()
            ));
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
        fn registry(&self) -> Registry {
            Registry::open(self.0.join("reg")).unwrap()
        }

        /// A registry whose directory does not exist yet.
        fn path(&self) -> PathBuf {
            self.0.join("reg")
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// A watcher that has taken in the registry as it is.
    fn primed(reg: &Registry) -> Watcher {
        let mut w = reg.watcher();
        w.poll();
        w
    }

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn kinds(events: &[DeviceEvent]) -> Vec<(DeviceEventKind, String, u64)> {
        events
            .iter()
            .map(|e| {
                (
                    e.kind.clone(),
                    e.device.id.name.clone(),
                    e.device.id.generation,
                )
            })
            .collect()
    }

    #[test]
    fn default_dir_precedence() {
        let d = default_dir_from(Some("/x/reg".into()), Some("/run/user/7".into()), Some(7));
        assert_eq!(d, PathBuf::from("/x/reg"));
        let d = default_dir_from(Some("".into()), Some("/run/user/7".into()), Some(7));
        assert_eq!(d, PathBuf::from("/run/user/7/relink-soft"));
        let d = default_dir_from(None, Some("relative".into()), Some(7));
        assert_eq!(d, PathBuf::from("/tmp/relink-soft-7"));
        let d = default_dir_from(None, None, None);
        assert_eq!(d, PathBuf::from("/tmp/relink-soft"));
        // This process can learn its uid without libc.
        assert!(current_uid().is_some());
    }

    #[test]
    fn add_list_and_file_format() {
        let t = TempDir::new();
        assert!(!t.path().exists());
        let reg = t.registry();
        assert!(t.path().is_dir(), "open creates the directory");
        assert_eq!(reg.list().unwrap(), vec![]);
        let d = reg
            .add(
                "soft0",
                vec![net("127.0.0.2/8"), net("fd00::2/64")],
                Some(Guid(0x0011_2233_4455_6677)),
                Some("lo".into()),
            )
            .unwrap();
        assert_eq!(d.id.name, "soft0");
        assert_eq!(d.id.index, 1);
        assert_eq!(d.id.generation, 1);
        assert_eq!(d.port_state, PortState::Active);
        let text = fs::read_to_string(reg.dir().join("soft0.dev")).unwrap();
        assert_eq!(
            text,
            "name=soft0\nindex=1\nguid=0x0011223344556677\naddr=127.0.0.2/8\n\
             addr=fd00::2/64\nnetdev=lo\ngeneration=1\nport=active\n"
        );
        assert_eq!(reg.list().unwrap(), vec![d.clone()]);
        assert_eq!(reg.get("soft0").unwrap(), Some(d.clone()));
        assert_eq!(reg.get("soft9").unwrap(), None);
        assert_eq!(
            fs::read_to_string(reg.dir().join("generation")).unwrap(),
            "1\n"
        );
        // No temporary files or lock are left behind.
        let mut names: Vec<String> = fs::read_dir(reg.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, vec!["generation", "indexes", "soft0.dev"]);

        let e = reg.add("soft1", vec![], None, None).unwrap();
        assert_eq!(e.id.index, 2);
        assert_eq!(e.id.generation, 2);
        assert_ne!(e.node_guid, Guid(0));
        assert_ne!(e.node_guid, d.node_guid);
        let list = reg.list().unwrap();
        assert_eq!(list.iter().map(|d| d.id.index).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn add_refuses_conflicts_and_bad_input() {
        let t = TempDir::new();
        let reg = t.registry();
        reg.add("soft0", vec![net("10.0.0.1/24")], Some(Guid(5)), None)
            .unwrap();
        assert!(matches!(
            reg.add("soft0", vec![], None, None),
            Err(RegistryError::Exists(n)) if n == "soft0"
        ));
        assert!(matches!(
            reg.add("soft1", vec![net("10.0.0.1/16")], None, None),
            Err(RegistryError::AddrInUse { owner, .. }) if owner == "soft0"
        ));
        assert!(matches!(
            reg.add("soft1", vec![], Some(Guid(5)), None),
            Err(RegistryError::GuidInUse { owner, .. }) if owner == "soft0"
        ));
        assert!(matches!(
            reg.add("soft1", vec![], Some(Guid(0)), None),
            Err(RegistryError::InvalidGuid { .. })
        ));
        assert!(matches!(
            reg.add(
                "soft1",
                vec![net("10.0.1.1/24"), net("10.0.1.1/16")],
                None,
                None
            ),
            Err(RegistryError::DuplicateAddr { .. })
        ));
        for bad in [
            "",
            ".hidden",
            "-x",
            "a/b",
            "a b",
            "soft0\n",
            &"x".repeat(64),
        ] {
            assert!(
                matches!(
                    reg.add(bad, vec![], None, None),
                    Err(RegistryError::InvalidName { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            reg.add("soft1", vec![], None, Some("a b".into())),
            Err(RegistryError::InvalidNetdev { .. })
        ));
        assert!(matches!(
            reg.add("soft1", vec![], None, Some("x".repeat(16))),
            Err(RegistryError::InvalidNetdev { .. })
        ));
        // Nothing was half-created.
        assert_eq!(reg.list().unwrap().len(), 1);
        assert!(reg.remove("soft1").is_err());
        assert!(matches!(reg.reset("nope"), Err(RegistryError::NotFound(_))));
        assert!(matches!(
            reg.set_port("nope", PortState::Down),
            Err(RegistryError::NotFound(_))
        ));
        assert!(matches!(
            reg.replace("nope", None),
            Err(RegistryError::NotFound(_))
        ));
    }

    #[test]
    fn index_reuse_and_allocation() {
        let t = TempDir::new();
        let reg = t.registry();
        let a = reg.add("a", vec![], None, None).unwrap();
        let b = reg.add("b", vec![], None, None).unwrap();
        let c = reg.add("c", vec![], None, None).unwrap();
        assert_eq!((a.id.index, b.id.index, c.id.index), (1, 2, 3));
        reg.remove("b").unwrap();
        // `b`'s index stays reserved for `b`: a new name gets a fresh one.
        let d = reg.add("d", vec![], None, None).unwrap();
        assert_eq!(d.id.index, 4);
        // `b` coming back gets index 2 again, with a new generation.
        let b2 = reg.add("b", vec![], None, None).unwrap();
        assert_eq!(b2.id.index, 2);
        assert!(b2.id.generation > d.id.generation);
        assert_ne!(b2.node_guid, b.node_guid);
    }

    #[test]
    fn generations_strictly_increase_even_if_counter_is_lost() {
        let t = TempDir::new();
        let reg = t.registry();
        let a = reg.add("a", vec![], None, None).unwrap();
        let a2 = reg.reset("a").unwrap();
        assert!(a2.id.generation > a.id.generation);
        fs::remove_file(reg.dir().join("generation")).unwrap();
        let b = reg.add("b", vec![], None, None).unwrap();
        assert!(b.id.generation > a2.id.generation);
        fs::write(reg.dir().join("generation"), "junk").unwrap();
        let err = reg.add("c", vec![], None, None).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("generation") && msg.contains("junk"), "{msg}");
    }

    #[test]
    fn reset_keeps_identity_and_watchers_see_fatal_removed_added() {
        let t = TempDir::new();
        let reg = t.registry();
        let old = reg
            .add("soft0", vec![net("10.0.0.1/24")], None, Some("lo".into()))
            .unwrap();
        reg.set_port("soft0", PortState::Down).unwrap();
        let mut w = primed(&reg);
        assert_eq!(w.devices().len(), 1);
        let new = reg.reset("soft0").unwrap();
        assert_eq!(new.id.name, old.id.name);
        assert_eq!(new.id.index, old.id.index);
        assert_eq!(new.node_guid, old.node_guid);
        assert_eq!(new.addrs, old.addrs);
        assert_eq!(new.netdev, old.netdev);
        assert_eq!(new.port_state, PortState::Down);
        assert!(new.id.generation > old.id.generation);
        assert_eq!(
            fs::read_to_string(reg.dir().join("soft0.fatal")).unwrap(),
            format!("generation={}\n", old.id.generation)
        );
        let ev = w.poll();
        assert_eq!(
            kinds(&ev),
            vec![
                (DeviceEventKind::Fatal, "soft0".into(), old.id.generation),
                (DeviceEventKind::Removed, "soft0".into(), old.id.generation),
                (DeviceEventKind::Added, "soft0".into(), new.id.generation),
            ]
        );
        assert_eq!(ev[2].device, new);
        assert!(w.poll().is_empty());
        // A new watcher does not replay the old fatal marker.
        assert_eq!(
            kinds(&reg.watcher().poll()),
            vec![(DeviceEventKind::Added, "soft0".into(), new.id.generation)]
        );
    }

    #[test]
    fn two_resets_between_polls_report_both_fatals() {
        let t = TempDir::new();
        let reg = t.registry();
        let g1 = reg.add("s", vec![], None, None).unwrap().id.generation;
        let mut w = primed(&reg);
        let g2 = reg.reset("s").unwrap().id.generation;
        let g3 = reg.reset("s").unwrap().id.generation;
        assert_eq!(
            kinds(&w.poll()),
            vec![
                (DeviceEventKind::Fatal, "s".into(), g1),
                (DeviceEventKind::Removed, "s".into(), g1),
                (DeviceEventKind::Added, "s".into(), g3),
            ]
        );
        // g2 was never seen, so no Fatal for it.
        let _ = g2;
        assert!(w.poll().is_empty());
    }

    #[test]
    fn fatal_seen_before_reregistration() {
        // A poll that lands between the marker and the new device file.
        let t = TempDir::new();
        let reg = t.registry();
        let d = reg.add("s", vec![], None, None).unwrap();
        let mut w = primed(&reg);
        fs::write(
            reg.dir().join("s.fatal"),
            format!("generation={}\n", d.id.generation),
        )
        .unwrap();
        assert_eq!(
            kinds(&w.poll()),
            vec![(DeviceEventKind::Fatal, "s".into(), d.id.generation)]
        );
        let new = reg.reset("s").unwrap();
        assert_eq!(
            kinds(&w.poll()),
            vec![
                (DeviceEventKind::Removed, "s".into(), d.id.generation),
                (DeviceEventKind::Added, "s".into(), new.id.generation),
            ]
        );
    }

    #[test]
    fn replace_changes_guid_keeps_addresses() {
        let t = TempDir::new();
        let reg = t.registry();
        let old = reg
            .add("soft0", vec![net("10.0.0.1/24")], None, None)
            .unwrap();
        reg.add("other", vec![net("10.0.1.1/24")], None, None)
            .unwrap();
        let mut w = primed(&reg);
        let new = reg.replace("soft0", None).unwrap();
        assert_eq!(new.id.name, "soft0");
        assert_eq!(new.id.index, old.id.index);
        assert_ne!(new.node_guid, old.node_guid);
        assert_eq!(new.addrs, old.addrs);
        assert!(new.id.generation > old.id.generation);
        assert_eq!(
            kinds(&w.poll()),
            vec![
                (DeviceEventKind::Removed, "soft0".into(), old.id.generation),
                (DeviceEventKind::Added, "soft0".into(), new.id.generation),
            ]
        );
        // Under a new name: the old one is gone, addresses move.
        let renamed = reg.replace("soft0", Some("soft1")).unwrap();
        assert_eq!(renamed.id.name, "soft1");
        assert_eq!(renamed.addrs, old.addrs);
        assert_ne!(renamed.node_guid, new.node_guid);
        assert_ne!(renamed.id.index, new.id.index);
        assert_eq!(reg.get("soft0").unwrap(), None);
        assert_eq!(
            kinds(&w.poll()),
            vec![
                (DeviceEventKind::Removed, "soft0".into(), new.id.generation),
                (
                    DeviceEventKind::Added,
                    "soft1".into(),
                    renamed.id.generation
                ),
            ]
        );
        assert!(matches!(
            reg.replace("soft1", Some("other")),
            Err(RegistryError::Exists(n)) if n == "other"
        ));
    }

    #[test]
    fn port_changes_and_removal() {
        let t = TempDir::new();
        let reg = t.registry();
        let d = reg.add("s", vec![], None, None).unwrap();
        let mut w = primed(&reg);
        let down = reg.set_port("s", PortState::Down).unwrap();
        assert_eq!(down.id, d.id);
        assert_eq!(
            kinds(&w.poll()),
            vec![(DeviceEventKind::PortDown, "s".into(), d.id.generation)]
        );
        reg.set_port("s", PortState::Down).unwrap();
        assert!(w.poll().is_empty());
        reg.set_port("s", PortState::Active).unwrap();
        assert_eq!(
            kinds(&w.poll()),
            vec![(DeviceEventKind::PortUp, "s".into(), d.id.generation)]
        );
        let removed = reg.remove("s").unwrap();
        assert_eq!(removed.id, d.id);
        let ev = w.poll();
        assert_eq!(
            kinds(&ev),
            vec![(DeviceEventKind::Removed, "s".into(), d.id.generation)]
        );
        assert!(reg.list().unwrap().is_empty());
        // Removing the whole directory removes every device too.
        reg.add("t", vec![], None, None).unwrap();
        assert_eq!(w.poll().len(), 1);
        fs::remove_dir_all(reg.dir()).unwrap();
        assert_eq!(
            kinds(&w.poll()),
            vec![(DeviceEventKind::Removed, "t".into(), 2)]
        );
    }

    #[test]
    fn new_watcher_first_reports_everything_added() {
        let t = TempDir::new();
        let reg = t.registry();
        reg.add("b", vec![], None, None).unwrap();
        reg.add("a", vec![], None, None).unwrap();
        let mut w = reg.watcher();
        assert!(w.devices().is_empty());
        let ev = w.poll();
        assert_eq!(
            kinds(&ev),
            vec![
                (DeviceEventKind::Added, "a".into(), 2),
                (DeviceEventKind::Added, "b".into(), 1),
            ]
        );
        assert_eq!(w.devices().len(), 2);
        assert!(w.poll().is_empty());
        // A baseline taken from a snapshot reports only later changes.
        let mut w = Watcher::with_baseline(reg.clone(), reg.snapshot().unwrap());
        assert!(w.poll().is_empty());
        reg.remove("a").unwrap();
        assert_eq!(
            kinds(&w.poll()),
            vec![(DeviceEventKind::Removed, "a".into(), 2)]
        );
    }

    #[test]
    fn diff_is_pure_and_complete() {
        let mk = |name: &str, gen: u64, guid: u64| DeviceInfo {
            id: DeviceId {
                name: name.into(),
                index: 1,
                generation: gen,
            },
            node_guid: Guid(guid),
            addrs: vec![net("10.0.0.1/24")],
            netdev: None,
            port_state: PortState::Active,
        };
        let a = mk("a", 1, 1);
        assert!(diff(std::slice::from_ref(&a), std::slice::from_ref(&a)).is_empty());
        assert_eq!(
            kinds(&diff(&[], std::slice::from_ref(&a))),
            vec![(DeviceEventKind::Added, "a".into(), 1)]
        );
        assert_eq!(
            kinds(&diff(std::slice::from_ref(&a), &[])),
            vec![(DeviceEventKind::Removed, "a".into(), 1)]
        );
        // Same generation, different GUID: a different registration.
        let a_guid = mk("a", 1, 2);
        assert_eq!(
            kinds(&diff(std::slice::from_ref(&a), &[a_guid])),
            vec![
                (DeviceEventKind::Removed, "a".into(), 1),
                (DeviceEventKind::Added, "a".into(), 1)
            ]
        );
        // Removals come before additions across devices (an address moving
        // from `z` to `b` is never owned twice).
        let z = mk("z", 2, 3);
        let b = mk("b", 3, 4);
        assert_eq!(
            kinds(&diff(&[z], &[b])),
            vec![
                (DeviceEventKind::Removed, "z".into(), 2),
                (DeviceEventKind::Added, "b".into(), 3)
            ]
        );
        // Field changes of one registration.
        let mut a2 = a.clone();
        a2.port_state = PortState::Down;
        a2.netdev = Some("eth0".into());
        a2.addrs.push(net("10.0.0.2/24"));
        let ev = diff(std::slice::from_ref(&a), std::slice::from_ref(&a2));
        assert_eq!(
            ev.iter().map(|e| e.kind.clone()).collect::<Vec<_>>(),
            vec![
                DeviceEventKind::PortDown,
                DeviceEventKind::NetdevAttach,
                DeviceEventKind::AddrChange
            ]
        );
        assert!(ev.iter().all(|e| e.device == a2));
        let back = diff(&[a2], &[a]);
        assert_eq!(
            back.iter().map(|e| e.kind.clone()).collect::<Vec<_>>(),
            vec![
                DeviceEventKind::PortUp,
                DeviceEventKind::NetdevDetach,
                DeviceEventKind::AddrChange
            ]
        );
    }

    #[test]
    fn malformed_files_name_file_line_and_key() {
        let t = TempDir::new();
        let reg = t.registry();
        reg.add("good", vec![], None, None).unwrap();
        let path = reg.dir().join("bad.dev");
        let cases: &[(&str, &str)] = &[
            ("name=bad\nindex=x\n", "line 2: bad value for key `index`"),
            (
                "name=bad\nindex=1\nguid=0xzz\n",
                "line 3: bad value for key `guid`",
            ),
            ("name=other\n", "line 1: key `name` is \"other\""),
            (
                "name=bad\nindex=1\nindex=2\n",
                "line 3: key `index` given twice",
            ),
            ("name=bad\njunk\n", "line 2: expected key=value"),
            (
                "name=bad\nport=sideways\n",
                "line 2: bad value for key `port`",
            ),
            (
                "name=bad\naddr=10.0.0.1/40\n",
                "line 2: bad value for key `addr`",
            ),
            ("name=bad\nindex=1\nguid=0x1\n", "missing key `generation`"),
            ("index=1\n", "missing key `name`"),
        ];
        for (text, want) in cases {
            fs::write(&path, text).unwrap();
            let msg = reg.list().unwrap_err().to_string();
            assert!(msg.contains("bad.dev"), "{msg}");
            assert!(msg.contains(want), "{text:?}: {msg} lacks {want}");
        }
        fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(reg.list().unwrap_err().to_string().contains("UTF-8"));
        fs::write(&path, "#".repeat(MAX_FILE_LEN as usize + 1)).unwrap();
        assert!(reg.list().unwrap_err().to_string().contains("larger than"));
        // Changes refuse to work over a malformed registry, naming the file.
        let msg = reg.add("x", vec![], None, None).unwrap_err().to_string();
        assert!(msg.contains("bad.dev"), "{msg}");
        // Comments, blank lines, spaces and unknown keys are fine.
        fs::write(
            &path,
            "# a comment\n\n name = bad \nindex=9\nguid=0011:2233:4455:6677\r\n\
             generation=4\nfuture=1\n",
        )
        .unwrap();
        let list = reg.list().unwrap();
        let bad = list.iter().find(|d| d.id.name == "bad").unwrap();
        assert_eq!(bad.id.index, 9);
        assert_eq!(bad.node_guid, Guid(0x0011_2233_4455_6677));
        assert_eq!(bad.port_state, PortState::Active);
        // A device file whose name is not a device name.
        fs::write(reg.dir().join("a b.dev"), "").unwrap();
        assert!(reg.list().unwrap_err().to_string().contains("a b.dev"));
    }

    #[test]
    fn watcher_survives_malformed_files() {
        let t = TempDir::new();
        let reg = t.registry();
        let d = reg.add("s", vec![], None, None).unwrap();
        let mut w = primed(&reg);
        let path = reg.dir().join("s.dev");
        fs::write(&path, "garbage").unwrap();
        // The broken file keeps the device as last seen.
        assert!(w.poll().is_empty());
        assert_eq!(w.devices(), std::slice::from_ref(&d));
        fs::write(reg.dir().join("junk.dev"), "garbage").unwrap();
        assert!(w.poll().is_empty());
        fs::write(&path, format_device(&d)).unwrap();
        assert!(w.poll().is_empty());
        fs::remove_file(&path).unwrap();
        assert_eq!(
            kinds(&w.poll()),
            vec![(DeviceEventKind::Removed, "s".into(), 1)]
        );
    }

    #[test]
    fn stale_lock_is_broken() {
        let t = TempDir::new();
        let reg = t.registry();
        // A pid above the kernel's maximum (2^22) never exists.
        fs::write(reg.dir().join("lock"), "99999999 0\n").unwrap();
        let start = Instant::now();
        reg.add("s", vec![], None, None).unwrap();
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(!reg.dir().join("lock").exists());
    }

    #[test]
    fn concurrent_changes_are_serialized() {
        let t = TempDir::new();
        let reg = t.registry();
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let reg = reg.clone();
                std::thread::spawn(move || {
                    for j in 0..5 {
                        let name = format!("d{i}x{j}");
                        reg.add(&name, vec![net(&format!("10.{i}.{j}.1/24"))], None, None)
                            .unwrap();
                        reg.reset(&name).unwrap();
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        let list = reg.list().unwrap();
        assert_eq!(list.len(), 20);
        let idx: BTreeSet<u32> = list.iter().map(|d| d.id.index).collect();
        assert_eq!(idx, (1..=20).collect());
        let gens: BTreeSet<u64> = list.iter().map(|d| d.id.generation).collect();
        assert_eq!(gens.len(), 20);
        assert_eq!(
            fs::read_to_string(reg.dir().join("generation")).unwrap(),
            "40\n"
        );
    }

    #[test]
    fn guid_parsing() {
        assert_eq!(parse_guid("0x1"), Ok(Guid(1)));
        assert_eq!(parse_guid("0XFFFFFFFFFFFFFFFF"), Ok(Guid(u64::MAX)));
        assert_eq!(
            parse_guid("0011:2233:4455:6677"),
            Ok(Guid(0x0011_2233_4455_6677))
        );
        for bad in [
            "",
            "0x",
            "0x+1",
            "0x11111111111111111",
            "12",
            "0011:2233:4455",
            "gggg:2233:4455:6677",
            "+011:2233:4455:6677",
        ] {
            assert!(parse_guid(bad).is_err(), "{bad:?}");
        }
        let g = Guid(0xdead_beef);
        assert_eq!(parse_guid(&format_guid(g)), Ok(g));
        assert_eq!(parse_guid(&g.to_string()), Ok(g));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn device() -> impl Strategy<Value = DeviceInfo> {
            (
                "[a-z][a-z0-9_.-]{0,20}",
                any::<u32>(),
                any::<u64>(),
                any::<u64>(),
                proptest::collection::btree_map(any::<[u8; 4]>(), 0u8..=32, 0..4),
                proptest::option::of("[a-z][a-z0-9]{0,14}"),
                any::<bool>(),
            )
                .prop_map(|(name, index, generation, guid, addrs, netdev, up)| {
                    DeviceInfo {
                        id: DeviceId {
                            name,
                            index,
                            generation,
                        },
                        node_guid: Guid(guid),
                        addrs: addrs
                            .into_iter()
                            .map(|(a, p)| IpNet::new(IpAddr::from(a), p))
                            .collect(),
                        netdev,
                        port_state: if up {
                            PortState::Active
                        } else {
                            PortState::Down
                        },
                    }
                })
        }

        proptest! {
            #[test]
            fn device_file_round_trips(d in device()) {
                let text = format_device(&d);
                prop_assert_eq!(parse_device(&d.id.name, &text), Ok(d));
            }

            #[test]
            fn parsing_never_panics(stem in "\\PC{0,8}", text in "\\PC{0,200}") {
                let _ = parse_device(&stem, &text);
                let _ = parse_fatal(&text);
                let _ = parse_indexes(&text);
                let _ = parse_counter(&text);
                let _ = parse_guid(&text);
            }

            #[test]
            fn parsing_mangled_files_never_panics(d in device(), cut in any::<usize>(), junk in "[=\n#a-z0-9:./x]{0,12}") {
                let text = format_device(&d);
                let mut cut = cut % (text.len() + 1);
                while !text.is_char_boundary(cut) { cut -= 1; }
                let mangled = format!("{}{}{}", &text[..cut], junk, &text[cut..]);
                let _ = parse_device(&d.id.name, &mangled);
            }
        }
    }
}
