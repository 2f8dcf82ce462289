//! The configuration file: TOML, read by [`Config::load`] or
//! [`Config::parse`], checked as a whole before anything starts.
//!
//! ```toml
//! [backend]
//! kind = "soft"                      # or "rdma-core" (the `rdma` feature)
//! soft_dir = "/run/relink/soft"      # soft: the soft device registry
//! # source = "10.0.0.1"              # rdma-core: source of connections
//!
//! [[export]]                         # target role: serve a file
//! name = "disk0"
//! listen = "10.0.0.2:7471"
//! file = "/srv/disk0.img"
//! read_only = false
//! allow = ["10.0.0.1", "10.0.1.0/24"]  # optional: the initiators that may connect
//! queue_depth = 32                   # optional: commands worked on at once per session
//! max_io = 131072                    # optional: the longest read or write, bytes
//!
//! [[connect]]                        # initiator role: an NBD front end
//! name = "disk0"
//! targets = ["10.0.0.2:7471", "10.0.1.2:7471"]
//! nbd_socket = "/run/relinkd/disk0.sock"
//! nbd_tcp = "127.0.0.1:10809"        # optional
//! give_up_secs = 600                 # optional
//! fast_fail_secs = 10                # optional: fail I/O this long into an outage
//! queue_depth = 32                   # optional: commands outstanding at once
//! max_io = 131072                    # optional: the longest command, bytes
//! nbd_socket_mode = 0o660            # optional: the socket's mode (default 0o600)
//! nbd_socket_group = "disk"          # optional: the socket's group (name or number)
//! max_clients = 16                   # optional: NBD clients served at once (1 to 1024)
//!
//! [control]                          # optional
//! socket = "/run/relinkd/control.sock"
//! metrics_listen = "127.0.0.1:9477"  # optional: GET /metrics over HTTP
//! ```
//!
//! `queue_depth` is 1 to 1024 and `max_io` a multiple of 4096 from 4096
//! to 16 MiB; both default to relink-block's engine defaults (32 and 128
//! KiB). `max_io` is the longest command on the relink session (each
//! side registers `queue_depth` slots of it); NBD clients are not bound
//! by it: a connection advertises a maximum block size of 32 MiB
//! ([`crate::NBD_MAX_REQUEST`]) and splits a longer request into
//! commands of at most the smaller of its own and the target's `max_io`.
//!
//! `give_up_secs` (relink's `ctrl_loss_tmo`; 600 s by default) and
//! `fast_fail_secs` (`fast_io_fail_tmo`; none by default) are at least
//! 1, and `fast_fail_secs` is at most the give-up deadline. Both are the
//! connection's initial policy; `relink policy set` changes them live.
//!
//! A top-level `conf_dir = "/etc/relinkd/conf.d"` (relative paths are
//! taken from the file's directory) adds the `[[export]]` and
//! `[[connect]]` tables of every `*.toml` file in that directory, in name
//! order; those files hold nothing else. Names and NBD sockets are unique
//! across all the files. [`Config::load`] reads them all; `relink reload`
//! and SIGHUP read them again and apply the difference.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// A configuration that cannot be used: the file, the key and what is
/// wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("{file}: cannot read: {reason}")]
    Read {
        /// The file.
        file: PathBuf,
        /// The OS's reason.
        reason: String,
    },
    /// The file is not valid TOML, or has a key of the wrong type or an
    /// unknown key (the parser's message names it).
    #[error("{file}: {reason}")]
    Syntax {
        /// The file.
        file: PathBuf,
        /// The parser's message.
        reason: String,
    },
    /// A value is out of place: `key` is its path (`connect[0].targets[1]`).
    #[error("{file}: {key}: {reason}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// The key, with the index of its table.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

/// Which fabric the daemon's node runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// The soft fabric over TCP, with the host's soft device registry in
    /// this directory (the one `relink soft-device` manages).
    Soft {
        /// The registry directory.
        dir: PathBuf,
    },
    /// The host's RDMA devices through rdma-core (libibverbs and
    /// librdmacm); only in a binary built with the `rdma` feature.
    RdmaCore {
        /// The source address of the initiator's connections (`source`;
        /// it picks the local device); `None`: the kernel's routing picks
        /// it.
        source: Option<IpAddr>,
    },
}

/// One volume served to initiators (the target role).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportConfig {
    /// Its name (unique among exports; for messages).
    pub name: String,
    /// The address of a local device to listen on.
    pub listen: SocketAddr,
    /// The file holding the volume.
    pub file: PathBuf,
    /// Whether writes are refused.
    pub read_only: bool,
    /// Commands moving data the target works on at once per session.
    pub queue_depth: u16,
    /// The longest READ or WRITE, bytes.
    pub max_io: u32,
    /// The initiators that may connect: addresses or subnets
    /// (`"10.0.0.1"`, `"10.0.1.0/24"`); `None`: every one. An initiator
    /// whose first connection comes from elsewhere is closed at once.
    pub allow: Option<Vec<relink::IpNet>>,
}

impl ExportConfig {
    /// Whether an initiator at `ip` may connect to this export.
    #[must_use]
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.allow
            .as_ref()
            .is_none_or(|nets| nets.iter().any(|n| n.contains(ip)))
    }
}

/// One remote volume offered to local NBD clients (the initiator role).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectConfig {
    /// Its name: the NBD export name clients ask for (unique among
    /// connections).
    pub name: String,
    /// The target's addresses, tried in order (several paths).
    pub targets: Vec<SocketAddr>,
    /// The NBD Unix socket to serve on.
    pub nbd_socket: PathBuf,
    /// An NBD TCP address to serve on as well.
    pub nbd_tcp: Option<SocketAddr>,
    /// How long the session keeps recovering after a loss before it gives
    /// up (then requests fail); `None`: relink's default policy.
    pub give_up: Option<Duration>,
    /// How long into an outage the requests waiting on it fail (`EIO`)
    /// while the session keeps recovering (`fast_fail_secs`); `None`:
    /// they wait until the session is back or gives up.
    pub fast_fail: Option<Duration>,
    /// Commands outstanding at once on the session.
    pub queue_depth: u16,
    /// The longest command, bytes (the target's may be smaller).
    pub max_io: u32,
    /// Who may use the NBD socket, and how many at once.
    pub nbd: NbdAccess,
}

/// Who may connect to a connection's NBD socket, and how many clients it
/// serves at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NbdAccess {
    /// The Unix socket's mode (`nbd_socket_mode`; default `0o600`: the
    /// daemon's user only). A client needs write permission to connect.
    pub mode: u32,
    /// The Unix socket's group (`nbd_socket_group`, a name or a number,
    /// resolved when the configuration is read); `None`: the daemon's.
    pub group: Option<u32>,
    /// NBD clients served at once, over the socket and `nbd_tcp`
    /// (`max_clients`; default 16); one more is closed at once, with a
    /// warning in the log.
    pub max_clients: usize,
}

impl Default for NbdAccess {
    fn default() -> NbdAccess {
        NbdAccess {
            mode: 0o600,
            group: None,
            max_clients: 16,
        }
    }
}

/// The NBD access of the table at `key` (`connect[0]`), checked:
/// `Err((key, reason))` names the offending one.
pub(crate) fn nbd_access(
    key: &str,
    mode: Option<i64>,
    group: Option<&str>,
    max_clients: Option<u64>,
) -> Result<NbdAccess, (String, String)> {
    let d = NbdAccess::default();
    let mode = match mode {
        None => d.mode,
        Some(m @ 0..=0o777) => m as u32,
        Some(_) => {
            return Err((
                format!("{key}.nbd_socket_mode"),
                "must be a file mode from 0o000 to 0o777 (write it 0o660)".into(),
            ))
        }
    };
    let group = match group {
        None => None,
        Some(g) => Some(match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => match nix::unistd::Group::from_name(g) {
                Ok(Some(found)) => found.gid.as_raw(),
                Ok(None) => {
                    return Err((
                        format!("{key}.nbd_socket_group"),
                        format!("no group named {g:?}"),
                    ))
                }
                Err(e) => {
                    return Err((
                        format!("{key}.nbd_socket_group"),
                        format!("cannot look up group {g:?}: {e}"),
                    ))
                }
            },
        }),
    };
    let max_clients = match max_clients {
        None => d.max_clients,
        Some(n @ 1..=1024) => n as usize,
        Some(_) => return Err((format!("{key}.max_clients"), "must be 1 to 1024".into())),
    };
    Ok(NbdAccess {
        mode,
        group,
        max_clients,
    })
}

/// The control plane: the control socket (`relink status`, ...) and an
/// optional HTTP listener for Prometheus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlConfig {
    /// The control socket (default [`relinkd_control::DEFAULT_SOCKET`]).
    pub socket: PathBuf,
    /// Whether the file names the socket: a configured socket that cannot
    /// listen stops the daemon; the default one is skipped with a message.
    pub configured: bool,
    /// Where `GET /metrics` is served, if anywhere.
    pub metrics_listen: Option<SocketAddr>,
}

impl Default for ControlConfig {
    fn default() -> ControlConfig {
        ControlConfig {
            socket: PathBuf::from(relinkd_control::DEFAULT_SOCKET),
            configured: false,
            metrics_listen: None,
        }
    }
}

/// A checked configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The fabric.
    pub backend: Backend,
    /// The target role's volumes.
    pub exports: Vec<ExportConfig>,
    /// The initiator role's connections.
    pub connects: Vec<ConnectConfig>,
    /// The directory of further `*.toml` files of exports and
    /// connections, as given (resolved against the file's directory by
    /// [`Config::load`]).
    pub conf_dir: Option<PathBuf>,
    /// The control plane.
    pub control: ControlConfig,
    /// The file [`Config::load`] read (`None` from [`Config::parse`]): what
    /// a reload reads again.
    pub file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    backend: Option<RawBackend>,
    conf_dir: Option<PathBuf>,
    #[serde(default)]
    export: Vec<RawExport>,
    #[serde(default)]
    connect: Vec<RawConnect>,
    control: Option<RawControl>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawControl {
    socket: Option<PathBuf>,
    metrics_listen: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBackend {
    kind: Option<String>,
    soft_dir: Option<PathBuf>,
    source: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExport {
    name: String,
    listen: String,
    file: PathBuf,
    #[serde(default)]
    read_only: bool,
    queue_depth: Option<u64>,
    max_io: Option<u64>,
    allow: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConnect {
    name: String,
    targets: Vec<String>,
    nbd_socket: PathBuf,
    nbd_tcp: Option<String>,
    give_up_secs: Option<u64>,
    fast_fail_secs: Option<u64>,
    queue_depth: Option<u64>,
    max_io: Option<u64>,
    nbd_socket_mode: Option<i64>,
    nbd_socket_group: Option<String>,
    max_clients: Option<u64>,
}

/// The longest `max_io` accepted.
const MAX_IO_LIMIT: u64 = 16 << 20;
/// The deepest `queue_depth` accepted.
const QUEUE_DEPTH_LIMIT: u64 = 1024;

/// A connection's give-up and fast-fail deadlines (`None`: not set).
pub(crate) type Deadlines = (Option<Duration>, Option<Duration>);

/// A connection's `give_up_secs` and `fast_fail_secs`, checked:
/// `Err((key, reason))` names the offending one.
pub(crate) fn policy_settings(
    give_up_secs: Option<u64>,
    fast_fail_secs: Option<u64>,
) -> Result<Deadlines, (&'static str, String)> {
    if give_up_secs == Some(0) {
        return Err(("give_up_secs", "must be at least 1".into()));
    }
    if fast_fail_secs == Some(0) {
        return Err(("fast_fail_secs", "must be at least 1".into()));
    }
    let give_up = give_up_secs.map(Duration::from_secs);
    let fast_fail = fast_fail_secs.map(Duration::from_secs);
    let deadline = give_up.or(relink::Policy::default().ctrl_loss_tmo);
    if let (Some(f), Some(d)) = (fast_fail, deadline) {
        if f > d {
            let reason = match give_up_secs {
                Some(g) => format!("must not exceed give_up_secs ({g})"),
                None => format!(
                    "must not exceed the give-up deadline (give_up_secs, {} by default)",
                    d.as_secs()
                ),
            };
            return Err(("fast_fail_secs", reason));
        }
    }
    Ok((give_up, fast_fail))
}

/// `queue_depth` and `max_io` of the table at `key` (`export[0]`), or
/// relink-block's defaults; `Err((key, reason))` for a value out of range.
pub(crate) fn engine_settings(
    key: &str,
    queue_depth: Option<u64>,
    max_io: Option<u64>,
) -> Result<(u16, u32), (String, &'static str)> {
    let defaults = relink_block::InitiatorConfig::default();
    let depth = match queue_depth {
        None => defaults.queue_depth,
        Some(n @ 1..=QUEUE_DEPTH_LIMIT) => n as u16,
        Some(_) => return Err((format!("{key}.queue_depth"), "must be 1 to 1024")),
    };
    let io = match max_io {
        None => defaults.max_io,
        Some(n) if (4096..=MAX_IO_LIMIT).contains(&n) && n % 4096 == 0 => n as u32,
        Some(_) => {
            return Err((
                format!("{key}.max_io"),
                "must be a multiple of 4096 from 4096 to 16777216",
            ))
        }
    };
    Ok((depth, io))
}

impl Config {
    /// Read and check the file at `path`.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file, and the key when a value is wrong.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            file: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let mut config = Config::parse(path, &text)?;
        config.file = Some(path.to_path_buf());
        crate::conf_dir::merge(path, config)
    }

    /// Check `text`, the contents of `file` (named in errors).
    ///
    /// # Errors
    /// [`ConfigError`] naming the file, and the key when a value is wrong.
    pub fn parse(file: &Path, text: &str) -> Result<Config, ConfigError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            file: file.to_path_buf(),
            reason: e.to_string().trim_end().replace('\n', " "),
        })?;
        let bad = |key: String, reason: &str| ConfigError::Invalid {
            file: file.to_path_buf(),
            key,
            reason: reason.to_string(),
        };
        let backend = match raw.backend {
            None => Backend::Soft {
                dir: relink_soft::Registry::default_dir(),
            },
            Some(b) => match b.kind.as_deref() {
                None | Some("soft") => {
                    if b.source.is_some() {
                        return Err(bad(
                            "backend.source".into(),
                            "applies to kind = \"rdma-core\" only",
                        ));
                    }
                    let dir = b
                        .soft_dir
                        .unwrap_or_else(relink_soft::Registry::default_dir);
                    if dir.as_os_str().is_empty() {
                        return Err(bad("backend.soft_dir".into(), "must not be empty"));
                    }
                    Backend::Soft { dir }
                }
                Some("rdma-core") => {
                    if !relink_verbs::BUILT_WITH_RDMA {
                        return Err(bad(
                            "backend.kind".into(),
                            "\"rdma-core\": this relinkd was built without rdma-core support (build it with the `rdma` cargo feature)",
                        ));
                    }
                    if b.soft_dir.is_some() {
                        return Err(bad(
                            "backend.soft_dir".into(),
                            "applies to kind = \"soft\" only",
                        ));
                    }
                    let source = match b.source.as_deref() {
                        None => None,
                        Some(s) => Some(s.parse::<IpAddr>().map_err(|_| {
                            bad(
                                "backend.source".into(),
                                &format!("{s:?} is not an IP address"),
                            )
                        })?),
                    };
                    Backend::RdmaCore { source }
                }
                Some(_) => {
                    return Err(bad(
                        "backend.kind".into(),
                        "must be \"soft\" or \"rdma-core\"",
                    ))
                }
            },
        };
        let addr = |key: String, s: &str| -> Result<SocketAddr, ConfigError> {
            s.parse()
                .map_err(|_| bad(key, &format!("{s:?} is not an IP:PORT address")))
        };
        let name_ok = |key: String, name: &str, seen: &mut HashSet<String>| {
            if name.is_empty() || name.len() > 4096 || name.contains('\0') {
                return Err(bad(key, "must be 1 to 4096 bytes, without NUL"));
            }
            if !seen.insert(name.to_string()) {
                return Err(bad(key, &format!("{name:?} is used twice")));
            }
            Ok(())
        };
        let mut seen = HashSet::new();
        let mut exports = Vec::new();
        for (i, e) in raw.export.into_iter().enumerate() {
            name_ok(format!("export[{i}].name"), &e.name, &mut seen)?;
            let listen = addr(format!("export[{i}].listen"), &e.listen)?;
            if e.file.as_os_str().is_empty() {
                return Err(bad(format!("export[{i}].file"), "must not be empty"));
            }
            let (queue_depth, max_io) =
                engine_settings(&format!("export[{i}]"), e.queue_depth, e.max_io)
                    .map_err(|(key, reason)| bad(key, reason))?;
            let allow = match e.allow {
                None => None,
                Some(list) if list.is_empty() => {
                    return Err(bad(
                        format!("export[{i}].allow"),
                        "lists no initiator (leave it out to allow every one)",
                    ))
                }
                Some(list) => Some(
                    list.iter()
                        .enumerate()
                        .map(|(j, a)| {
                            a.parse::<relink::IpNet>().map_err(|why| {
                                bad(format!("export[{i}].allow[{j}]"), &format!("{a:?}: {why}"))
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                ),
            };
            exports.push(ExportConfig {
                name: e.name,
                listen,
                file: e.file,
                read_only: e.read_only,
                queue_depth,
                max_io,
                allow,
            });
        }
        let mut seen = HashSet::new();
        let mut connects = Vec::new();
        for (i, c) in raw.connect.into_iter().enumerate() {
            name_ok(format!("connect[{i}].name"), &c.name, &mut seen)?;
            if c.targets.is_empty() {
                return Err(bad(
                    format!("connect[{i}].targets"),
                    "needs at least one address",
                ));
            }
            let targets = c
                .targets
                .iter()
                .enumerate()
                .map(|(j, t)| addr(format!("connect[{i}].targets[{j}]"), t))
                .collect::<Result<Vec<_>, _>>()?;
            if c.nbd_socket.as_os_str().is_empty() {
                return Err(bad(format!("connect[{i}].nbd_socket"), "must not be empty"));
            }
            let nbd_tcp = c
                .nbd_tcp
                .as_deref()
                .map(|t| addr(format!("connect[{i}].nbd_tcp"), t))
                .transpose()?;
            let (give_up, fast_fail) = policy_settings(c.give_up_secs, c.fast_fail_secs)
                .map_err(|(key, reason)| bad(format!("connect[{i}].{key}"), &reason))?;
            let (queue_depth, max_io) =
                engine_settings(&format!("connect[{i}]"), c.queue_depth, c.max_io)
                    .map_err(|(key, reason)| bad(key, reason))?;
            let nbd = nbd_access(
                &format!("connect[{i}]"),
                c.nbd_socket_mode,
                c.nbd_socket_group.as_deref(),
                c.max_clients,
            )
            .map_err(|(key, reason)| bad(key, &reason))?;
            connects.push(ConnectConfig {
                name: c.name,
                targets,
                nbd_socket: c.nbd_socket,
                nbd_tcp,
                give_up,
                fast_fail,
                queue_depth,
                max_io,
                nbd,
            });
        }
        let mut sockets = HashSet::new();
        for (i, c) in connects.iter().enumerate() {
            if !sockets.insert(c.nbd_socket.clone()) {
                return Err(bad(
                    format!("connect[{i}].nbd_socket"),
                    "is used by another connection",
                ));
            }
        }
        if let Some(dir) = &raw.conf_dir {
            if dir.as_os_str().is_empty() {
                return Err(bad("conf_dir".into(), "must not be empty"));
            }
        }
        if exports.is_empty() && connects.is_empty() && raw.conf_dir.is_none() {
            return Err(bad(
                "export, connect".into(),
                "nothing to do: give at least one [[export]] or [[connect]], or a conf_dir",
            ));
        }
        let mut control = ControlConfig::default();
        if let Some(c) = raw.control {
            if let Some(socket) = c.socket {
                if socket.as_os_str().is_empty() {
                    return Err(bad("control.socket".into(), "must not be empty"));
                }
                control.socket = socket;
                control.configured = true;
            }
            control.metrics_listen = c
                .metrics_listen
                .as_deref()
                .map(|m| addr("control.metrics_listen".into(), m))
                .transpose()?;
        }
        Ok(Config {
            backend,
            exports,
            connects,
            conf_dir: raw.conf_dir,
            control,
            file: None,
        })
    }
}

#[cfg(test)]
mod tests;
