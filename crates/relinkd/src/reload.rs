//! A reload (`relink reload`, SIGHUP): the configuration file and its
//! `conf_dir` read again, the difference from the configuration in force
//! computed entry by entry (by name) and applied through the node thread.
//!
//! The difference is taken from the configuration last loaded, not from
//! the live set: a connection added or removed with `relink connect` /
//! `relink disconnect` stays as it is unless the files change that name.

use std::sync::Mutex;
use std::time::Duration;

use relink_block::Policy;

use crate::config::{Backend, Config, ConnectConfig, ControlConfig, ExportConfig};
use crate::control::protocol::{Command, ControlError, ErrorKind, Limit, Never, ReloadResult};
use crate::node_loop::DaemonHandle;
use crate::serve::{unserve, Served};

/// The changes that take a running daemon from one configuration to
/// another: an entry whose settings changed is removed and added again
/// (its sessions are closed as by an admin disconnect, then made anew),
/// except a connection whose policy alone changed (`give_up_secs`,
/// `fast_fail_secs`): that is set on its live session, as `relink policy
/// set` does, and the session stays.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigChange {
    /// Connections whose policy alone changed, as they are now.
    pub policy_connects: Vec<ConnectConfig>,
    /// Exports to stop serving (their sessions are closed), by name.
    pub remove_exports: Vec<String>,
    /// Connections to disconnect (an explicit admin disconnect), by name.
    pub remove_connects: Vec<String>,
    /// Exports to start serving.
    pub add_exports: Vec<ExportConfig>,
    /// Connections to make.
    pub add_connects: Vec<ConnectConfig>,
}

impl ConfigChange {
    /// Whether the configuration is the same.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.remove_exports.is_empty()
            && self.remove_connects.is_empty()
            && self.add_exports.is_empty()
            && self.add_connects.is_empty()
            && self.policy_connects.is_empty()
    }
}

/// Whether `a` and `b` differ at most in their policy keys.
fn same_but_policy(a: &ConnectConfig, b: &ConnectConfig) -> bool {
    let strip = |c: &ConnectConfig| ConnectConfig {
        give_up: None,
        fast_fail: None,
        ..c.clone()
    };
    strip(a) == strip(b)
}

/// A configured deadline as `policy_set` takes it: `default` where the
/// file sets none (relink's default for the give-up deadline; none for
/// fast-fail).
fn limit(configured: Option<Duration>, default: Option<Duration>) -> Limit {
    match configured.or(default) {
        Some(d) => Limit::Secs(d.as_secs()),
        None => Limit::Off(Never::None),
    }
}

/// Why a configuration read again cannot be applied to the running
/// daemon (which keeps its configuration).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The backend differs: it is chosen once, at start.
    #[error(
        "backend: differs from the running daemon's ({running:?}); restart relinkd to change it"
    )]
    Backend {
        /// The running daemon's backend.
        running: Backend,
    },
    /// The `[control]` table differs: the socket and the metrics listener
    /// are set up once, at start.
    #[error(
        "control: differs from the running daemon's ({running:?}); restart relinkd to change it"
    )]
    Control {
        /// The running daemon's control settings.
        running: ControlConfig,
    },
}

impl Config {
    /// The changes from `self` (running) to `new`.
    ///
    /// # Errors
    /// [`ReloadError`] for a change only a restart can make.
    pub fn changes_to(&self, new: &Config) -> Result<ConfigChange, ReloadError> {
        if self.backend != new.backend {
            return Err(ReloadError::Backend {
                running: self.backend.clone(),
            });
        }
        if self.control != new.control {
            return Err(ReloadError::Control {
                running: self.control.clone(),
            });
        }
        let mut change = ConfigChange::default();
        for e in &self.exports {
            if !new.exports.contains(e) {
                change.remove_exports.push(e.name.clone());
            }
        }
        for e in &new.exports {
            if !self.exports.contains(e) {
                change.add_exports.push(e.clone());
            }
        }
        // A connection of the same name in both whose policy alone
        // changed (names are unique in a configuration).
        let policy_only = |c: &ConnectConfig| {
            let find = |list: &[ConnectConfig]| list.iter().find(|x| x.name == c.name).cloned();
            match (find(&self.connects), find(&new.connects)) {
                (Some(old), Some(now)) => old != now && same_but_policy(&old, &now),
                _ => false,
            }
        };
        for c in &self.connects {
            if !new.connects.contains(c) && !policy_only(c) {
                change.remove_connects.push(c.name.clone());
            }
        }
        for c in &new.connects {
            if self.connects.contains(c) {
                continue;
            }
            if policy_only(c) {
                change.policy_connects.push(c.clone());
            } else {
                change.add_connects.push(c.clone());
            }
        }
        Ok(change)
    }
}

/// The configuration in force, which a reload replaces.
pub(crate) struct Reloader {
    running: Mutex<Config>,
}

impl Reloader {
    pub(crate) fn new(config: Config) -> Reloader {
        Reloader {
            running: Mutex::new(config),
        }
    }

    /// Read the configuration again and apply the difference: removals
    /// first (connections as by an admin disconnect, then exports), then
    /// the new exports and connections. An entry that cannot be added is
    /// reported in [`ReloadResult::failed`] and left out of the
    /// configuration in force, so the next reload tries it again.
    ///
    /// # Errors
    /// [`ErrorKind::Invalid`] when the files are wrong (the message names
    /// the file and the key) or change what only a restart can; nothing is
    /// applied then.
    pub(crate) async fn reload(
        &self,
        handle: &DaemonHandle,
        served: &Served,
    ) -> Result<ReloadResult, ControlError> {
        let invalid =
            |e: &dyn std::fmt::Display| ControlError::new(ErrorKind::Invalid, e.to_string());
        let old = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(file) = old.file.clone() else {
            return Err(invalid(&"the configuration was not read from a file"));
        };
        let mut new = Config::load(&file).map_err(|e| invalid(&e))?;
        let change = old.changes_to(&new).map_err(|e| invalid(&e))?;
        let mut result = ReloadResult::default();
        let gone = |e: &ControlError| e.kind == ErrorKind::NotFound;
        for name in &change.remove_connects {
            match handle
                .command(Command::Disconnect { name: name.clone() })
                .await
            {
                Ok(_) => unserve(served, name),
                Err(e) if gone(&e) => {}
                Err(e) => {
                    result.failed.push(format!("connect {name}: {}", e.message));
                    continue;
                }
            }
            result.removed.push(format!("connect {name}"));
        }
        for name in &change.remove_exports {
            match handle.remove_export(name).await {
                Ok(()) => {}
                Err(e) if gone(&e) => {}
                Err(e) => {
                    result.failed.push(format!("export {name}: {}", e.message));
                    continue;
                }
            }
            result.removed.push(format!("export {name}"));
        }
        for e in change.add_exports {
            let name = e.name.clone();
            match handle.add_export(e).await {
                Ok(()) => result.added.push(format!("export {name}")),
                Err(err) => {
                    result
                        .failed
                        .push(format!("export {name}: {}", err.message));
                    new.exports.retain(|x| x.name != name);
                }
            }
        }
        for c in change.policy_connects {
            let name = c.name.clone();
            let defaults = Policy::default();
            let command = Command::PolicySet {
                name: c.name,
                give_up_secs: Some(limit(c.give_up, defaults.ctrl_loss_tmo)),
                fast_fail_secs: Some(limit(c.fast_fail, None)),
                mode: None,
            };
            match handle.command(command).await {
                Ok(_) => result.changed.push(format!("connect {name}")),
                Err(err) => {
                    result
                        .failed
                        .push(format!("connect {name}: {}", err.message));
                    // The old entry stays in force: the next reload tries again.
                    if let Some(old_entry) = old.connects.iter().find(|x| x.name == name) {
                        if let Some(slot) = new.connects.iter_mut().find(|x| x.name == name) {
                            *slot = old_entry.clone();
                        }
                    }
                }
            }
        }
        for c in change.add_connects {
            let name = c.name.clone();
            let command = Command::Connect {
                name: c.name,
                targets: c.targets,
                nbd_socket: c.nbd_socket,
                nbd_tcp: c.nbd_tcp,
                give_up_secs: c.give_up.map(|d| d.as_secs()),
                fast_fail_secs: c.fast_fail.map(|d| d.as_secs()),
                queue_depth: Some(u64::from(c.queue_depth)),
                max_io: Some(u64::from(c.max_io)),
            };
            match handle.command(command).await {
                Ok(_) => result.added.push(format!("connect {name}")),
                Err(err) => {
                    result
                        .failed
                        .push(format!("connect {name}: {}", err.message));
                    new.connects.retain(|x| x.name != name);
                }
            }
        }
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = new;
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn parse(text: &str) -> Config {
        Config::parse(Path::new("/etc/relinkd.toml"), text).unwrap()
    }

    const BASE: &str = r#"
        [backend]
        soft_dir = "/run/soft"
        [[export]]
        name = "d0"
        listen = "10.0.0.2:7471"
        file = "/srv/d0.img"
        [[connect]]
        name = "r0"
        targets = ["10.0.0.2:7471"]
        nbd_socket = "/run/r0.sock"
        [[connect]]
        name = "r1"
        targets = ["10.0.0.3:7471"]
        nbd_socket = "/run/r1.sock"
    "#;

    #[test]
    fn the_same_configuration_changes_nothing() {
        assert!(parse(BASE).changes_to(&parse(BASE)).unwrap().is_empty());
    }

    #[test]
    fn added_removed_and_changed_entries_by_name() {
        let new = BASE
            .replace("10.0.0.3:7471", "10.0.0.4:7471")
            .replace("name = \"d0\"", "name = \"d1\"");
        let new = format!(
            "{new}\n[[connect]]\nname = \"r2\"\ntargets = [\"10.0.0.2:7471\"]\nnbd_socket = \"/run/r2.sock\"\n"
        );
        let c = parse(BASE).changes_to(&parse(&new)).unwrap();
        assert_eq!(c.remove_exports, ["d0"]);
        assert_eq!(c.add_exports.len(), 1);
        assert_eq!(c.add_exports[0].name, "d1");
        assert_eq!(c.remove_connects, ["r1"]);
        let added: Vec<_> = c.add_connects.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(added, ["r1", "r2"]);
    }

    #[test]
    fn a_connection_whose_policy_alone_changed_keeps_its_session() {
        let with = |keys: &str| {
            parse(&BASE.replace(
                "nbd_socket = \"/run/r0.sock\"",
                &format!("nbd_socket = \"/run/r0.sock\"\n{keys}"),
            ))
        };
        let c = parse(BASE)
            .changes_to(&with("give_up_secs = 30\nfast_fail_secs = 5"))
            .unwrap();
        assert!(
            c.remove_connects.is_empty() && c.add_connects.is_empty(),
            "{c:?}"
        );
        assert_eq!(c.policy_connects.len(), 1);
        assert_eq!(c.policy_connects[0].name, "r0");
        assert_eq!(
            c.policy_connects[0].give_up,
            Some(std::time::Duration::from_secs(30))
        );
        // Anything else as well: removed and added again.
        let c = parse(BASE)
            .changes_to(&with("give_up_secs = 30\nqueue_depth = 4"))
            .unwrap();
        assert!(c.policy_connects.is_empty(), "{c:?}");
        assert_eq!(c.remove_connects, ["r0"]);
        assert_eq!(c.add_connects.len(), 1);
        // A policy key dropped: relink's default give-up, no fast-fail.
        assert_eq!(
            limit(None, Policy::default().ctrl_loss_tmo),
            Limit::Secs(600)
        );
        assert_eq!(limit(None, None), Limit::Off(Never::None));
    }

    #[test]
    fn a_new_backend_is_refused() {
        let e = parse(BASE)
            .changes_to(&parse(&BASE.replace("/run/soft", "/run/other")))
            .unwrap_err();
        assert!(e.to_string().starts_with("backend: "), "{e}");
    }
}
