//! The `conf_dir` of a configuration: more `[[export]]` and `[[connect]]`
//! tables, one or more per file, merged into the main file's entries.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::config::{Config, ConfigError};

/// The keys a `conf_dir` file may hold.
const ENTRY_KEYS: [&str; 2] = ["export", "connect"];

/// `config` (read from `main`) with the entries of every `*.toml` file in
/// its `conf_dir`, in name order.
///
/// # Errors
/// [`ConfigError`] naming the directory when it cannot be read, or the
/// file and key of an entry that is wrong or whose name (or NBD socket)
/// another file already uses.
pub(crate) fn merge(main: &Path, mut config: Config) -> Result<Config, ConfigError> {
    let Some(dir) = config.conf_dir.clone() else {
        return Ok(config);
    };
    let dir = match main.parent() {
        Some(parent) if dir.is_relative() => parent.join(dir),
        _ => dir,
    };
    let unreadable = |file: &Path, e: std::io::Error| ConfigError::Read {
        file: file.to_path_buf(),
        reason: e.to_string(),
    };
    let mut files = std::fs::read_dir(&dir)
        .map_err(|e| unreadable(&dir, e))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<Vec<PathBuf>, _>>()
        .map_err(|e| unreadable(&dir, e))?;
    files.retain(|f| f.extension().is_some_and(|x| x == "toml") && f.is_file());
    files.sort();
    let mut exports: HashMap<String, PathBuf> = config
        .exports
        .iter()
        .map(|e| (e.name.clone(), main.to_path_buf()))
        .collect();
    let mut connects: HashMap<String, PathBuf> = config
        .connects
        .iter()
        .map(|c| (c.name.clone(), main.to_path_buf()))
        .collect();
    let mut sockets: HashMap<PathBuf, PathBuf> = config
        .connects
        .iter()
        .map(|c| (c.nbd_socket.clone(), main.to_path_buf()))
        .collect();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| unreadable(&file, e))?;
        let Some(part) = entries_of(&file, &text)? else {
            continue;
        };
        let taken = |key: String, what: &str, other: &Path| ConfigError::Invalid {
            file: file.clone(),
            key,
            reason: format!("{what} is also defined in {}", other.display()),
        };
        for (i, e) in part.exports.into_iter().enumerate() {
            if let Some(other) = exports.get(&e.name) {
                return Err(taken(
                    format!("export[{i}].name"),
                    &format!("{:?}", e.name),
                    other,
                ));
            }
            exports.insert(e.name.clone(), file.clone());
            config.exports.push(e);
        }
        for (i, c) in part.connects.into_iter().enumerate() {
            if let Some(other) = connects.get(&c.name) {
                return Err(taken(
                    format!("connect[{i}].name"),
                    &format!("{:?}", c.name),
                    other,
                ));
            }
            if let Some(other) = sockets.get(&c.nbd_socket) {
                let what = format!("{}", c.nbd_socket.display());
                return Err(taken(format!("connect[{i}].nbd_socket"), &what, other));
            }
            connects.insert(c.name.clone(), file.clone());
            sockets.insert(c.nbd_socket.clone(), file.clone());
            config.connects.push(c);
        }
    }
    Ok(config)
}

/// The entries of one `conf_dir` file; `None` for a file with none.
fn entries_of(file: &Path, text: &str) -> Result<Option<Config>, ConfigError> {
    let table: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Syntax {
        file: file.to_path_buf(),
        reason: e.to_string().trim_end().replace('\n', " "),
    })?;
    if let Some(key) = table.keys().find(|k| !ENTRY_KEYS.contains(&k.as_str())) {
        return Err(ConfigError::Invalid {
            file: file.to_path_buf(),
            key: key.clone(),
            reason: "a conf_dir file holds only [[export]] and [[connect]] tables".into(),
        });
    }
    // A file of empty lists (`export = []`: every entry commented out, say)
    // holds nothing, as an empty file does; the main file's "nothing to
    // do" check is not this file's business.
    if table
        .values()
        .all(|v| v.as_array().is_some_and(|a| a.is_empty()))
    {
        return Ok(None);
    }
    Config::parse(file, text).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAIN: &str = r#"
        conf_dir = "conf.d"
        [backend]
        soft_dir = "/run/soft"
        [[export]]
        name = "d0"
        listen = "10.0.0.2:7471"
        file = "/srv/d0.img"
    "#;

    fn connect(name: &str, socket: &str) -> String {
        format!(
            "[[connect]]\nname = \"{name}\"\ntargets = [\"10.0.0.2:7471\"]\nnbd_socket = \"{socket}\"\n"
        )
    }

    fn setup(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("relinkd.toml");
        std::fs::write(&main, MAIN).unwrap();
        std::fs::create_dir(dir.path().join("conf.d")).unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join("conf.d").join(name), text).unwrap();
        }
        (dir, main)
    }

    #[test]
    fn entries_of_every_file_are_added_in_name_order() {
        let (_dir, main) = setup(&[
            ("20-b.toml", &connect("b", "/run/b.sock")),
            ("10-a.toml", &connect("a", "/run/a.sock")),
            ("empty.toml", ""),
            ("notes.txt", "not toml"),
        ]);
        let c = Config::load(&main).unwrap();
        assert_eq!(c.exports.len(), 1);
        let names: Vec<_> = c.connects.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn a_name_or_socket_defined_twice_names_both_files() {
        let (dir, main) = setup(&[
            ("a.toml", &connect("a", "/run/a.sock")),
            ("b.toml", &connect("a", "/run/other.sock")),
        ]);
        let e = Config::load(&main).unwrap_err().to_string();
        let b = dir.path().join("conf.d/b.toml");
        assert!(
            e.starts_with(&format!("{}: connect[0].name", b.display())),
            "{e}"
        );
        assert!(e.contains("a.toml"), "{e}");
        let (_dir, main) = setup(&[
            ("a.toml", &connect("a", "/run/a.sock")),
            ("b.toml", &connect("b", "/run/a.sock")),
        ]);
        let e = Config::load(&main).unwrap_err().to_string();
        assert!(e.contains("connect[0].nbd_socket"), "{e}");
    }

    #[test]
    fn a_file_with_other_tables_or_bad_entries_is_refused_by_key() {
        let (_dir, main) = setup(&[("x.toml", "[backend]\nsoft_dir = \"/x\"\n")]);
        let e = Config::load(&main).unwrap_err();
        assert!(
            matches!(&e, ConfigError::Invalid { key, .. } if key == "backend"),
            "{e:?}"
        );
        let bad = connect("a", "/run/a.sock").replace("10.0.0.2:7471", "nowhere");
        let (_dir, main) = setup(&[("x.toml", &bad)]);
        let e = Config::load(&main).unwrap_err();
        assert!(
            matches!(&e, ConfigError::Invalid { key, file, .. }
                if key == "connect[0].targets[0]" && file.ends_with("conf.d/x.toml")),
            "{e:?}"
        );
    }

    #[test]
    fn a_missing_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("relinkd.toml");
        std::fs::write(&main, MAIN).unwrap();
        let e = Config::load(&main).unwrap_err().to_string();
        assert!(e.contains("conf.d: cannot read"), "{e}");
    }

    #[test]
    fn a_file_of_empty_lists_adds_nothing_and_is_no_error() {
        let (_dir, main) = setup(&[
            ("a.toml", "export = []\n"),
            ("b.toml", "export = []\nconnect = []\n"),
            ("c.toml", &connect("c", "/run/c.sock")),
        ]);
        let c = Config::load(&main).unwrap();
        let names: Vec<&str> = c.connects.iter().map(|c| c.name.as_str()).collect();
        assert!(names.ends_with(&["c"]), "{names:?}");
        // A list that is not empty is still checked.
        let (_dir, main) = setup(&[("d.toml", "export = [3]\n")]);
        let e = Config::load(&main).unwrap_err().to_string();
        assert!(e.contains("d.toml") && e.contains("export"), "{e}");
    }

    #[test]
    fn a_main_file_with_only_a_conf_dir_is_valid() {
        let (dir, _) = setup(&[]);
        let main = dir.path().join("only.toml");
        std::fs::write(&main, "conf_dir = \"conf.d\"\n").unwrap();
        let c = Config::load(&main).unwrap();
        assert!(c.exports.is_empty() && c.connects.is_empty());
    }
}
