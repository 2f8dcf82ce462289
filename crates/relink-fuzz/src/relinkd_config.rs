//! Feeds arbitrary text to relinkd's `Config::parse`: it never panics, and
//! a configuration it accepts holds what the daemon relies on
//! ([`check_accepted`]).

use std::collections::HashSet;
use std::path::Path;

use relinkd::Config;

/// Runs the target on one input: panics only when the code under test
/// breaks what this module checks (the crate's contract).
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(c) = Config::parse(Path::new("fuzz.toml"), text) else {
        return;
    };
    check_accepted(&c);
}

/// What an accepted configuration holds: something to do (an export, a
/// connection, or a `conf_dir` to find them in), engine settings in range,
/// unique export names, unique connection names and NBD sockets, at least
/// one target per connection.
///
/// # Panics
/// When `c` breaks one of those.
pub fn check_accepted(c: &Config) {
    assert!(
        !c.exports.is_empty() || !c.connects.is_empty() || c.conf_dir.is_some(),
        "an accepted configuration has nothing to do"
    );
    let mut names = HashSet::new();
    for e in &c.exports {
        assert!(names.insert(e.name.clone()), "export {:?} twice", e.name);
        assert!((1..=1024).contains(&e.queue_depth));
        assert!(e.max_io >= 4096 && e.max_io % 4096 == 0);
    }
    let mut names = HashSet::new();
    let mut sockets = HashSet::new();
    for k in &c.connects {
        assert!(names.insert(k.name.clone()), "connect {:?} twice", k.name);
        assert!(
            sockets.insert(k.nbd_socket.clone()),
            "NBD socket {} twice",
            k.nbd_socket.display()
        );
        assert!(!k.targets.is_empty());
        assert!((1..=1024).contains(&k.queue_depth));
        assert!(k.max_io >= 4096 && k.max_io % 4096 == 0);
    }
}
