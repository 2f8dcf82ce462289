//! Watching the registry: [`diff_snapshots`] turns two snapshots into
//! [`DeviceEvent`]s, and a [`Watcher`] polls the directory and diffs each
//! scan against the last.

use std::collections::{BTreeMap, BTreeSet};

use relink_fabric::{DeviceEvent, DeviceEventKind, DeviceInfo, PortState};

use super::{Registry, Snapshot};

impl Registry {
    /// A watcher of this registry (see [`Watcher::new`]).
    pub fn watcher(&self) -> Watcher {
        Watcher::new(self.clone())
    }
}

/// Whether two entries are the same registration of a device.
fn same_registration(a: &DeviceInfo, b: &DeviceInfo) -> bool {
    a.id == b.id && a.node_guid == b.node_guid
}

fn event(kind: DeviceEventKind, device: &DeviceInfo) -> DeviceEvent {
    DeviceEvent {
        kind,
        device: device.clone(),
    }
}

/// Events turning device list `old` into `new`, without fatal markers; see
/// [`diff_snapshots`].
pub fn diff(old: &[DeviceInfo], new: &[DeviceInfo]) -> Vec<DeviceEvent> {
    let old = Snapshot {
        devices: old.to_vec(),
        fatal: BTreeMap::new(),
    };
    let new = Snapshot {
        devices: new.to_vec(),
        fatal: BTreeMap::new(),
    };
    diff_snapshots(&old, &new)
}

/// Events turning snapshot `old` into `new`, in this order:
///
/// 1. `Fatal` for each old registration gone in `new` whose generation is
///    newly marked fatal;
/// 2. `Removed` for each old registration gone in `new` (a device whose
///    generation or GUID changed is gone: it was reset or replaced);
/// 3. `Added` for each new registration;
/// 4. for registrations in both: `PortDown`/`PortUp`, `NetdevDetach`/
///    `NetdevAttach` and `AddrChange` as their fields differ;
/// 5. `Fatal` for each registration in `new` whose generation is newly
///    marked fatal (a reset that has not re-registered yet).
///
/// Within each group devices come in name order. `Removed` carries the
/// device as it was, the others as it is.
pub fn diff_snapshots(old: &Snapshot, new: &Snapshot) -> Vec<DeviceEvent> {
    let old_by: BTreeMap<&str, &DeviceInfo> = old
        .devices
        .iter()
        .map(|d| (d.id.name.as_str(), d))
        .collect();
    let new_by: BTreeMap<&str, &DeviceInfo> = new
        .devices
        .iter()
        .map(|d| (d.id.name.as_str(), d))
        .collect();
    let newly_fatal = |d: &DeviceInfo| {
        new.is_fatal(&d.id.name, d.id.generation) && !old.is_fatal(&d.id.name, d.id.generation)
    };

    let mut fatal_gone = Vec::new();
    let mut removed = Vec::new();
    let mut added = Vec::new();
    let mut changed = Vec::new();
    let mut fatal_now = Vec::new();

    for (name, o) in &old_by {
        match new_by.get(name) {
            Some(n) if same_registration(o, n) => {
                if o.port_state != n.port_state {
                    let kind = match n.port_state {
                        PortState::Active => DeviceEventKind::PortUp,
                        PortState::Down => DeviceEventKind::PortDown,
                    };
                    changed.push(event(kind, n));
                }
                if o.netdev != n.netdev {
                    if o.netdev.is_some() {
                        changed.push(event(DeviceEventKind::NetdevDetach, n));
                    }
                    if n.netdev.is_some() {
                        changed.push(event(DeviceEventKind::NetdevAttach, n));
                    }
                }
                let oa: BTreeSet<String> = o.addrs.iter().map(|a| a.to_string()).collect();
                let na: BTreeSet<String> = n.addrs.iter().map(|a| a.to_string()).collect();
                if oa != na {
                    changed.push(event(DeviceEventKind::AddrChange, n));
                }
            }
            _ => {
                if newly_fatal(o) {
                    fatal_gone.push(event(DeviceEventKind::Fatal, o));
                }
                removed.push(event(DeviceEventKind::Removed, o));
            }
        }
    }
    for (name, n) in &new_by {
        let kept = old_by.get(name).is_some_and(|o| same_registration(o, n));
        if !kept {
            added.push(event(DeviceEventKind::Added, n));
        }
        if newly_fatal(n) {
            fatal_now.push(event(DeviceEventKind::Fatal, n));
        }
    }
    let mut out = fatal_gone;
    out.append(&mut removed);
    out.append(&mut added);
    out.append(&mut changed);
    out.append(&mut fatal_now);
    out
}

/// Turns registry changes into [`DeviceEvent`]s by diffing successive scans.
///
/// A provider creates one and calls [`Watcher::poll`] every few
/// milliseconds; the first poll reports every device registered at that
/// moment as `Added` (so nothing falls between listing and watching).
///
/// Faulty files do not stop the watcher: a device file that cannot be read
/// or parsed keeps the device as it was last seen (each fault is logged once
/// with `tracing`), and a directory that cannot be read yields no events.
/// A registry directory that does not exist holds no devices.
#[derive(Debug)]
pub struct Watcher {
    registry: Registry,
    last: Snapshot,
    logged: BTreeSet<String>,
}

impl Watcher {
    /// A watcher that has seen nothing yet: its first poll reports every
    /// registered device as `Added` (and `Fatal` for one whose current
    /// generation is marked fatal).
    pub fn new(registry: Registry) -> Watcher {
        Watcher::with_baseline(registry, Snapshot::default())
    }

    /// A watcher whose baseline is `baseline`: the first poll reports how
    /// the registry differs from it.
    pub fn with_baseline(registry: Registry, baseline: Snapshot) -> Watcher {
        Watcher {
            registry,
            last: baseline,
            logged: BTreeSet::new(),
        }
    }

    /// The registry watched.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The devices as of the last poll (or the baseline), sorted by name.
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.last.devices
    }

    /// The snapshot as of the last poll (or the baseline).
    pub fn snapshot(&self) -> &Snapshot {
        &self.last
    }

    /// Rescans the registry and returns what changed since the last poll.
    pub fn poll(&mut self) -> Vec<DeviceEvent> {
        let Some(next) = self.take_snapshot() else {
            return Vec::new();
        };
        let events = diff_snapshots(&self.last, &next);
        self.last = next;
        events
    }

    /// A lenient scan merged with the last snapshot; `None` if the
    /// directory could not be read.
    fn take_snapshot(&mut self) -> Option<Snapshot> {
        let scan = self.registry.scan();
        let messages: BTreeSet<String> = scan.errors.iter().map(|e| e.to_string()).collect();
        for m in messages.difference(&self.logged) {
            tracing::warn!(target: "relink_soft::registry", "soft device registry: {m}");
        }
        self.logged = messages;
        if scan.dir_failed {
            return None;
        }
        let mut snap = scan.snapshot;
        for name in &scan.failed {
            if let Some(prev) = self.last.get(name) {
                snap.devices.push(prev.clone());
            }
        }
        snap.devices.sort_by(|a, b| a.id.name.cmp(&b.id.name));
        Some(snap)
    }
}
