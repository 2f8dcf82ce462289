//! Feeds arbitrary text to relinkd's `Config::parse`: it never panics, and
//! a configuration it accepts holds what the daemon relies on (at least one
//! export or connection, engine settings in range, unique names and NBD
//! sockets).

#![no_main]

use std::collections::HashSet;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use relinkd::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(c) = Config::parse(Path::new("fuzz.toml"), text) else {
        return;
    };
    assert!(!c.exports.is_empty() || !c.connects.is_empty());
    let mut names = HashSet::new();
    for e in &c.exports {
        assert!(names.insert(e.name.clone()));
        assert!((1..=1024).contains(&e.queue_depth));
        assert!(e.max_io >= 4096 && e.max_io % 4096 == 0);
    }
    let mut names = HashSet::new();
    let mut sockets = HashSet::new();
    for k in &c.connects {
        assert!(names.insert(k.name.clone()));
        assert!(sockets.insert(k.nbd_socket.clone()));
        assert!(!k.targets.is_empty());
        assert!((1..=1024).contains(&k.queue_depth));
        assert!(k.max_io >= 4096 && k.max_io % 4096 == 0);
    }
});
