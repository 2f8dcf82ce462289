//! The watcher end to end on its re-scan backend, over a fake `/sys/class`:
//! a device is plugged, unplugged (uverbs first, as the kernel does) and
//! replaced, and the events arrive on the channel or the callback.

use std::fs;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use relink_devwatch::watch::{DeviceWatcher, WatchConfig};
use relink_devwatch::{Backend, DeviceEventKind, Guid, WatchEvent, WatchEventKind};

fn add(root: &Path, name: &str, guid: &str, uverbs: u32) {
    let d = root.join("infiniband").join(name);
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("node_guid"), format!("{guid}\n")).unwrap();
    let u = root.join(format!("infiniband_verbs/uverbs{uverbs}"));
    fs::create_dir_all(&u).unwrap();
    fs::write(u.join("ibdev"), format!("{name}\n")).unwrap();
}

fn config(root: &Path) -> WatchConfig {
    WatchConfig {
        backend: Some(Backend::Rescan),
        rescan_interval: Duration::from_millis(10),
        class_root: root.into(),
        netlink_index: false,
        ..WatchConfig::default()
    }
}

fn next(rx: &mpsc::Receiver<WatchEvent>) -> WatchEvent {
    rx.recv_timeout(Duration::from_secs(5))
        .expect("an event within 5 s")
}

#[test]
fn plug_unplug_replace_over_a_channel() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    fs::create_dir_all(r.join("infiniband_verbs")).unwrap();
    add(r, "rxe0", "5254:00ff:fe00:0001", 0);

    let (w, rx) = DeviceWatcher::channel(WatchConfig {
        report_existing: true,
        ..config(r)
    })
    .unwrap();
    assert_eq!(w.backend(), Backend::Rescan);
    assert!(w.info().prompt_removal);
    assert_eq!(w.info().initial.len(), 1);
    let ev = next(&rx);
    assert_eq!(ev.kind, WatchEventKind::Added);
    assert_eq!(ev.device.name, "rxe0");

    add(r, "rxe1", "5254:00ff:fe00:0002", 1);
    let ev = next(&rx);
    assert_eq!(
        (ev.kind, ev.device.name.as_str(), ev.node_guid),
        (
            WatchEventKind::Added,
            "rxe1",
            Some(Guid(0x5254_00ff_fe00_0002))
        )
    );

    fs::remove_dir_all(r.join("infiniband_verbs/uverbs0")).unwrap();
    let ev = next(&rx);
    assert_eq!(ev.kind, WatchEventKind::Removing);
    assert_eq!(ev.kind.fabric_kind(), Some(DeviceEventKind::Removed));
    fs::remove_dir_all(r.join("infiniband/rxe0")).unwrap();
    assert_eq!(next(&rx).kind, WatchEventKind::Removed);

    // A replacement: same name, new GUID.
    add(r, "rxe0", "5254:00ff:fe00:0003", 0);
    let ev = next(&rx);
    assert_eq!(ev.kind, WatchEventKind::Added);
    assert_eq!(ev.node_guid, Some(Guid(0x5254_00ff_fe00_0003)));
    assert!(
        rx.recv_timeout(Duration::from_millis(100)).is_err(),
        "nothing else"
    );
    w.stop();
}

#[test]
fn callback_delivery_and_stop_on_drop() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let (tx, rx) = mpsc::channel();
    let w = DeviceWatcher::with_callback(config(r), move |ev| {
        let _ = tx.send(ev.to_string());
    })
    .unwrap();
    add(r, "siw0", "0000:0000:0000:0007", 3);
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        "added siw0#? guid 0000:0000:0000:0007 [rescan]"
    );
    drop(w);
    // The callback (and its sender) is gone with the thread.
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(5)),
        Err(mpsc::RecvTimeoutError::Disconnected)
    ));
}

#[test]
fn watcher_ends_when_the_receiver_is_dropped() {
    let root = tempfile::tempdir().unwrap();
    let (w, rx) = DeviceWatcher::channel(config(root.path())).unwrap();
    drop(rx);
    add(root.path(), "rxe0", "0000:0000:0000:0001", 0);
    // stop() must not hang whether the thread already ended or not.
    w.stop();
}
