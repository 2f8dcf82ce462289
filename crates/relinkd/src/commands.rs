//! The control commands on the node thread: each reads or changes the
//! node, an export or a connection, by name, and answers a typed result
//! ([`crate::control::protocol`]). Adding and removing connections and
//! exports by name is what a reload of the configuration calls too.

use relink::{PortState, RecoveryMode, SessionHandle};
use serde::Serialize;

use crate::config::{ConnectConfig, ExportConfig};
use crate::connection::{session_status, Conn};
use crate::control::protocol::{
    AckResult, Command, ControlError, DeviceStatus, DevicesResult, DrainResult, ErrorKind,
    EventRecord, ExportStatus, Mode, PolicyResult, StatusResult,
};
use crate::node_loop::{Export, Run};

type Reply<T> = tokio::sync::oneshot::Sender<Result<T, ControlError>>;

/// A request from the tokio side to the node thread.
pub(crate) enum Admin {
    /// A control command.
    Command(Command, Reply<serde_json::Value>),
    /// Send every event from now on here.
    Subscribe(tokio::sync::mpsc::UnboundedSender<EventRecord>),
    /// Serve another export.
    AddExport(ExportConfig, Reply<()>),
    /// Stop serving an export.
    RemoveExport(String, Reply<()>),
}

fn err(kind: ErrorKind, message: impl Into<String>) -> ControlError {
    ControlError::new(kind, message)
}

fn json(r: Result<impl Serialize, ControlError>) -> Result<serde_json::Value, ControlError> {
    r.and_then(|v| serde_json::to_value(v).map_err(|e| err(ErrorKind::Failed, e.to_string())))
}

fn ack(message: String) -> Result<AckResult, ControlError> {
    Ok(AckResult { message })
}

fn secs(d: Option<std::time::Duration>) -> Option<u64> {
    d.map(|d| d.as_secs())
}

/// relink's message of a refused policy in the words of relinkd's keys
/// (`fast_io_fail_tmo` is `fast_fail_secs`, `ctrl_loss_tmo` is
/// `give_up_secs`).
pub(crate) fn policy_error(message: &str) -> String {
    message
        .replace("fast_io_fail_tmo", "fast_fail_secs")
        .replace("ctrl_loss_tmo", "give_up_secs")
}

impl Run {
    /// Carry out `a` and answer it. While the daemon stops, commands that
    /// change something are refused.
    pub(crate) fn admin(&mut self, a: Admin, stopping: bool) {
        match a {
            Admin::Subscribe(tx) => self.subscribers.push(tx),
            Admin::AddExport(e, reply) => {
                let r = if stopping {
                    Err(err(ErrorKind::Failed, "relinkd is stopping"))
                } else {
                    self.add_export(&e)
                };
                let _ = reply.send(r);
            }
            Admin::RemoveExport(name, reply) => {
                let _ = reply.send(self.remove_export(&name));
            }
            Admin::Command(c, reply) => {
                let changes = !matches!(
                    c,
                    Command::Status {} | Command::Devices {} | Command::PolicyGet { .. }
                );
                let r = if stopping && changes {
                    Err(err(ErrorKind::Failed, "relinkd is stopping"))
                } else {
                    self.command(c)
                };
                let _ = reply.send(r);
            }
        }
    }

    fn command(&mut self, c: Command) -> Result<serde_json::Value, ControlError> {
        match c {
            Command::Status {} => json(Ok(self.status())),
            Command::Devices {} => json(Ok(self.devices())),
            Command::Connect {
                name,
                targets,
                nbd_socket,
                nbd_tcp,
                give_up_secs,
                fast_fail_secs,
                queue_depth,
                max_io,
            } => {
                let (give_up, fast_fail) =
                    crate::config::policy_settings(give_up_secs, fast_fail_secs).map_err(
                        |(key, reason)| err(ErrorKind::Invalid, format!("{key} {reason}")),
                    )?;
                let (queue_depth, max_io) =
                    crate::config::engine_settings("connect", queue_depth, max_io).map_err(
                        |(key, reason)| err(ErrorKind::Invalid, format!("{key} {reason}")),
                    )?;
                let c = ConnectConfig {
                    name,
                    targets,
                    nbd_socket,
                    nbd_tcp,
                    give_up,
                    fast_fail,
                    queue_depth,
                    max_io,
                    nbd: crate::config::NbdAccess::default(),
                };
                json(self.add_connect(&c).and_then(|()| {
                    ack(format!(
                        "connect {}: connecting; its NBD socket is served once the target identified the volume",
                        c.name
                    ))
                }))
            }
            Command::Disconnect { name } => json(self.remove_connect(&name)),
            Command::PolicyGet { name } => json(self.policy(&name)),
            Command::PolicySet {
                name,
                give_up_secs,
                fast_fail_secs,
                mode,
            } => json(self.set_policy(&name, |p| {
                if let Some(g) = give_up_secs {
                    p.ctrl_loss_tmo = g.duration();
                }
                if let Some(f) = fast_fail_secs {
                    p.fast_io_fail_tmo = f.duration();
                }
                if let Some(m) = mode {
                    p.recovery = match m {
                        Mode::Automatic => RecoveryMode::Automatic,
                        Mode::Manual => RecoveryMode::Manual,
                    };
                }
            })),
            Command::Hold { name } => json(
                self.set_policy(&name, |p| p.recovery = RecoveryMode::Manual)
                    .and_then(|_| {
                        ack(format!(
                            "connect {name}: manual recovery: held on its next loss until resume"
                        ))
                    }),
            ),
            Command::Resume { name, path } => json(self.resume(&name, path)),
            Command::Drain { device } => json(self.drain(&device)),
            Command::Undrain { device } => {
                let id = self.device(&device)?;
                self.node.undrain(&id);
                json(ack(format!("device {device}: undrained")))
            }
            Command::Events { .. } | Command::Metrics {} | Command::Reload {} => Err(err(
                ErrorKind::Invalid,
                "events, metrics and reload are served by the control socket",
            )),
        }
    }

    /// Every export and connection.
    pub(crate) fn status(&self) -> StatusResult {
        StatusResult {
            exports: self
                .targets
                .iter()
                .map(|e| ExportStatus {
                    name: e.config.name.clone(),
                    listen: e.config.listen,
                    listening: e.listening,
                    sessions: e
                        .engine
                        .sessions()
                        .into_iter()
                        .map(|s| session_status(&self.node, s))
                        .collect(),
                })
                .collect(),
            connections: self.connects.iter().map(|c| c.status(&self.node)).collect(),
        }
    }

    fn devices(&self) -> DevicesResult {
        let draining = self.node.draining();
        DevicesResult {
            devices: self
                .node
                .provider()
                .devices()
                .into_iter()
                .map(|d| DeviceStatus {
                    name: d.id.name.clone(),
                    id: d.id.to_string(),
                    guid: d.node_guid.to_string(),
                    addresses: d.addrs.iter().map(ToString::to_string).collect(),
                    port: match d.port_state {
                        PortState::Active => "active".into(),
                        PortState::Down => "down".into(),
                    },
                    draining: draining.contains(&d.id),
                })
                .collect(),
        }
    }

    fn conn(&mut self, name: &str) -> Result<&mut Conn, ControlError> {
        self.connects
            .iter_mut()
            .find(|c| c.name() == name)
            .ok_or_else(|| err(ErrorKind::NotFound, format!("no connection {name:?}")))
    }

    /// Add a connection: its session connects at once, its NBD socket is
    /// served once its IDENTIFY completed ([`crate::Ready`]).
    pub(crate) fn add_connect(&mut self, c: &ConnectConfig) -> Result<(), ControlError> {
        if c.name.is_empty() || c.name.len() > 4096 || c.name.contains('\0') {
            return Err(err(
                ErrorKind::Invalid,
                "a name must be 1 to 4096 bytes, without NUL",
            ));
        }
        if c.targets.is_empty() {
            return Err(err(
                ErrorKind::Invalid,
                "targets: needs at least one address",
            ));
        }
        if c.nbd_socket.as_os_str().is_empty() {
            return Err(err(ErrorKind::Invalid, "nbd_socket must not be empty"));
        }
        if self.connects.iter().any(|x| x.name() == c.name) {
            return Err(err(
                ErrorKind::Exists,
                format!("a connection {:?} exists", c.name),
            ));
        }
        if self
            .connects
            .iter()
            .any(|x| x.config.nbd_socket == c.nbd_socket)
        {
            return Err(err(
                ErrorKind::Exists,
                format!(
                    "nbd_socket {} is served by another connection",
                    c.nbd_socket.display()
                ),
            ));
        }
        let policy = Conn::initial_policy(c).map_err(|e| err(ErrorKind::Invalid, e))?;
        let conn = Conn::connect(&mut self.node, self.next_id, c, policy)
            .map_err(|e| err(ErrorKind::Failed, e.to_string()))?;
        self.next_id += 1;
        println!("connect {} added", c.name);
        self.connects.push(conn);
        Ok(())
    }

    /// Remove a connection: recovery stops (its session closes), its NBD
    /// requests under way fail at once.
    pub(crate) fn remove_connect(&mut self, name: &str) -> Result<AckResult, ControlError> {
        let i = self
            .connects
            .iter()
            .position(|c| c.name() == name)
            .ok_or_else(|| err(ErrorKind::NotFound, format!("no connection {name:?}")))?;
        let mut c = self.connects.remove(i);
        let failed = c.bridge.in_progress();
        c.bridge.fail_all(&relink_nbd::BlockError::Io(
            "the connection was disconnected by the administrator".into(),
        ));
        let _ = self.node.close(c.engine.session());
        println!("connect {name} disconnected");
        Ok(AckResult {
            message: format!("connect {name}: disconnected ({failed} request(s) under way failed)"),
        })
    }

    /// Serve another export.
    pub(crate) fn add_export(&mut self, e: &ExportConfig) -> Result<(), ControlError> {
        if self.targets.iter().any(|t| t.config.name == e.name) {
            return Err(err(
                ErrorKind::Exists,
                format!("an export {:?} exists", e.name),
            ));
        }
        let export =
            Export::listen(&mut self.node, e).map_err(|x| err(ErrorKind::Failed, x.to_string()))?;
        self.targets.push(export);
        Ok(())
    }

    /// Stop serving an export: its listener and its sessions close.
    pub(crate) fn remove_export(&mut self, name: &str) -> Result<(), ControlError> {
        let i = self
            .targets
            .iter()
            .position(|t| t.config.name == name)
            .ok_or_else(|| err(ErrorKind::NotFound, format!("no export {name:?}")))?;
        let t = self.targets.remove(i);
        self.node.close_listener(t.engine.listener());
        for s in t.engine.sessions() {
            let _ = self.node.close(s);
        }
        if let Err(e) = t.engine.volume().flush() {
            tracing::error!(export = %name, error = %e, "sync failed");
        }
        println!("export {name} removed");
        Ok(())
    }

    fn policy(&mut self, name: &str) -> Result<PolicyResult, ControlError> {
        let c = self.conn(name)?;
        let p = &c.policy;
        Ok(PolicyResult {
            name: name.to_string(),
            give_up_secs: secs(p.ctrl_loss_tmo),
            fast_fail_secs: secs(p.fast_io_fail_tmo),
            mode: match p.recovery {
                RecoveryMode::Manual => Mode::Manual,
                _ => Mode::Automatic,
            },
        })
    }

    /// Change a connection's policy, on its live session too (its block
    /// engine follows the session's: a `fast_fail_secs` set or cancelled
    /// applies to the outage under way as well, from the loss).
    fn set_policy(
        &mut self,
        name: &str,
        change: impl FnOnce(&mut relink::Policy),
    ) -> Result<PolicyResult, ControlError> {
        let c = self.conn(name)?;
        let mut p = c.policy.clone();
        change(&mut p);
        p.validate()
            .map_err(|e| err(ErrorKind::Invalid, policy_error(&e.to_string())))?;
        let session = c.engine.session();
        c.policy = p.clone();
        if let Err(e) = self.node.set_policy(session, p) {
            // The session ended: the next one takes the policy.
            tracing::error!(connect = %name, error = %e, "cannot set the session's policy");
        }
        self.policy(name)
    }

    fn resume(&mut self, name: &str, path: Option<usize>) -> Result<AckResult, ControlError> {
        let session = self.conn(name)?.engine.session();
        let r = match path {
            Some(p) => self.node.resume_on(session, p),
            None => self.node.resume(session),
        };
        r.map_err(|e| err(ErrorKind::Invalid, format!("connect {name}: {e}")))?;
        ack(format!("connect {name}: resumed"))
    }

    /// The present device named `name`.
    fn device(&self, name: &str) -> Result<relink::DeviceId, ControlError> {
        self.node
            .provider()
            .devices()
            .into_iter()
            .find(|d| d.id.name == name)
            .map(|d| d.id)
            .ok_or_else(|| err(ErrorKind::NotFound, format!("no device {name:?}")))
    }

    fn session_name(&self, s: SessionHandle) -> String {
        if let Some(c) = self.connects.iter().find(|c| c.engine.session() == s) {
            return c.name().to_string();
        }
        if let Some(e) = self
            .targets
            .iter()
            .find(|e| e.engine.sessions().contains(&s))
        {
            return format!("export {}", e.config.name);
        }
        format!("{s:?}")
    }

    fn drain(&mut self, device: &str) -> Result<DrainResult, ControlError> {
        let id = self.device(device)?;
        let report = self.node.drain(&id);
        Ok(DrainResult {
            device: device.to_string(),
            moving: report
                .moving
                .iter()
                .map(|&s| self.session_name(s))
                .collect(),
            blocked: report
                .blocked
                .iter()
                .map(|&s| self.session_name(s))
                .collect(),
        })
    }
}
