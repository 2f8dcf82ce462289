//! What a reload changes: the difference between the running
//! configuration and the one read again, entry by entry (by name).

use crate::config::{Backend, Config, ConnectConfig, ExportConfig};

/// The changes that take a running daemon from one configuration to
/// another: an entry whose settings changed is removed and added again
/// (its sessions are closed as by an admin disconnect, then made anew).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigChange {
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
        for c in &self.connects {
            if !new.connects.contains(c) {
                change.remove_connects.push(c.name.clone());
            }
        }
        for c in &new.connects {
            if !self.connects.contains(c) {
                change.add_connects.push(c.clone());
            }
        }
        Ok(change)
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
    fn a_new_backend_is_refused() {
        let e = parse(BASE)
            .changes_to(&parse(&BASE.replace("/run/soft", "/run/other")))
            .unwrap_err();
        assert!(e.to_string().starts_with("backend: "), "{e}");
    }
}
