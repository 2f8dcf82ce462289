//! Tests of the registry: the file format, each change, watchers (also across
//! resets and malformed files), the lock and concurrent changes.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

use relink_fabric::{DeviceEvent, DeviceEventKind, DeviceId, DeviceInfo, IpNet, PortState};

use super::files::random_u64;
use super::format::{parse_counter, parse_fatal, parse_indexes};
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
    assert_eq!(fallback_dir(Some(7)), PathBuf::from("/tmp/relink-soft-7"));
    // This process can learn its uid without libc.
    assert!(current_uid().is_some());
}

#[test]
fn directory_faults() {
    use super::dir::{judge, DirFault};
    assert_eq!(judge(true, 7, 0o700, 7), None);
    assert_eq!(judge(true, 7, 0o755, 7), None);
    assert_eq!(judge(true, 7, 0o1700, 7), None);
    assert_eq!(judge(false, 7, 0o777, 7), Some(DirFault::NotADirectory));
    assert_eq!(judge(true, 0, 0o700, 7), Some(DirFault::ForeignOwner));
    assert_eq!(judge(true, 7, 0o770, 7), Some(DirFault::Writable));
    assert_eq!(judge(true, 7, 0o702, 7), Some(DirFault::Writable));
    assert_eq!(judge(true, 7, 0o1777, 7), Some(DirFault::Writable));
}

#[cfg(unix)]
#[test]
fn open_creates_the_directory_private() {
    use std::os::unix::fs::PermissionsExt;
    let t = TempDir::new();
    let reg = Registry::open(t.0.join("a/b/reg")).unwrap();
    for d in [reg.dir(), &t.0.join("a/b"), &t.0.join("a")] {
        let mode = fs::metadata(d).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{} has mode {mode:o}", d.display());
    }
}

#[cfg(unix)]
#[test]
fn an_unsafe_fallback_directory_is_refused_and_a_named_one_is_used() {
    use std::os::unix::fs::PermissionsExt;
    let t = TempDir::new();
    let uid = current_uid().unwrap();
    let reg = t.registry();
    let dir = reg.dir().to_path_buf();
    // Private and ours: fine either way.
    super::dir::check(&dir, Some(uid), true).unwrap();

    // Writable by others.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let e = super::dir::check(&dir, Some(uid), true).unwrap_err();
    match &e {
        RegistryError::UnsafeDir {
            path, owner, mode, ..
        } => {
            assert_eq!(path, &dir);
            assert_eq!(*owner, uid);
            assert_eq!(*mode, 0o777);
        }
        other => panic!("{other:?}"),
    }
    let msg = e.to_string();
    assert!(msg.contains(&dir.display().to_string()), "{msg}");
    assert!(msg.contains("group or others can write"), "{msg}");
    assert!(msg.contains(&format!("owner uid {uid}")), "{msg}");
    assert!(msg.contains("mode 0777"), "{msg}");
    // A directory named on purpose is used (with a warning).
    super::dir::check(&dir, Some(uid), false).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();

    // Owned by someone else (as far as this process can tell).
    let other = uid.wrapping_add(1);
    let e = super::dir::check(&dir, Some(other), true).unwrap_err();
    assert!(e.to_string().contains("another user owns it"), "{e}");
    super::dir::check(&dir, Some(other), false).unwrap();

    // A symbolic link standing where the fallback would be.
    let link = t.0.join("link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    let e = super::dir::check(&link, Some(uid), true).unwrap_err();
    assert!(e.to_string().contains("not a directory"), "{e}");
    super::dir::check(&link, Some(uid), false).unwrap();
    assert_eq!(Registry::open(&link).unwrap().list().unwrap(), vec![]);
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
    // An unbroken stale lock would fail the add after LOCK_TIMEOUT.
    reg.add("s", vec![], None, None).unwrap();
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
            .prop_map(
                |(name, index, generation, guid, addrs, netdev, up)| DeviceInfo {
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
                },
            )
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
