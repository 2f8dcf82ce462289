//! relinkd configuration files for the tests, built table by table.

use std::fmt;
use std::path::Path;

/// The text of a relinkd configuration file, built in the order the
/// calls come: `[backend]`, `[control]`, `[[export]]` and `[[connect]]`
/// tables, and `key = value` lines in the table last begun (at the top
/// level before the first). Paths are written as `{:?}` strings.
///
/// ```ignore
/// ConfigFile::new()
///     .backend(&soft.dir_b)
///     .control(&root.0.join("b.ctl"))
///     .export("disk", &addr, &volume)
///     .set("allow", r#"["127.0.0.1/32"]"#)
///     .write(&root.0.join("target.toml"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct ConfigFile {
    text: String,
}

impl ConfigFile {
    /// An empty file.
    pub fn new() -> ConfigFile {
        ConfigFile::default()
    }

    /// `[backend]` with the soft device registry `soft_dir`.
    pub fn backend(self, soft_dir: &Path) -> ConfigFile {
        self.push(&format!("[backend]\nsoft_dir = {soft_dir:?}\n"))
    }

    /// `[control]` with the control socket `socket`.
    pub fn control(self, socket: &Path) -> ConfigFile {
        self.push(&format!("[control]\nsocket = {socket:?}\n"))
    }

    /// An `[[export]]` `name` listening on `listen` (`IP:PORT`), serving
    /// `file`.
    pub fn export(self, name: &str, listen: &str, file: &Path) -> ConfigFile {
        self.push(&format!(
            "[[export]]\nname = \"{name}\"\nlisten = \"{listen}\"\nfile = {file:?}\n"
        ))
    }

    /// A `[[connect]]` `name` to the one target `target` (`IP:PORT`),
    /// offered on the NBD Unix socket `nbd_socket`.
    pub fn connect(self, name: &str, target: &str, nbd_socket: &Path) -> ConfigFile {
        self.push(&format!(
            "[[connect]]\nname = \"{name}\"\ntargets = [\"{target}\"]\nnbd_socket = {nbd_socket:?}\n"
        ))
    }

    /// A `key = value` line; `value` is TOML as written (a string needs
    /// its quotes: `"\"conf.d\""`).
    pub fn set(self, key: &str, value: impl fmt::Display) -> ConfigFile {
        self.push(&format!("{key} = {value}\n"))
    }

    /// `text` (whole lines of TOML, or nothing) as it is.
    pub fn push(mut self, text: &str) -> ConfigFile {
        self.text.push_str(text);
        self
    }

    /// Writes the text to `path`.
    #[track_caller]
    pub fn write(&self, path: &Path) {
        std::fs::write(path, &self.text)
            .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
}
