//! What a watcher knows of the host's devices, and how each kernel message
//! changes it. Every backend goes through this table, so they all report
//! the same events for the same changes; it also drops the duplicates that
//! come from listing the devices while the sockets are already open.

use std::collections::BTreeMap;

use relink_fabric::Guid;

use crate::netlink::{MonitorEvent, NotifyEventType};
use crate::rescan::{ListedDevice, Listing};
use crate::uevent::{RdmaUevent, UeventAction, UeventTarget};
use crate::{Backend, DeviceKey, Netdev, WatchEvent, WatchEventKind};

/// Reads what a kernel message leaves out (GUID, uverbs device, index).
pub(crate) trait Enrich {
    /// What can be read of device `name`; `index` if already known.
    fn device(&self, name: &str, index: Option<u32>) -> ListedDevice;
    /// The device behind `uverbsN`, while it exists.
    fn uverbs_ibdev(&self, n: u32) -> Option<String>;
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Entry {
    index: Option<u32>,
    node_guid: Option<Guid>,
    uverbs: Option<u32>,
    /// `Removing` was reported.
    removing: bool,
    /// Port → netdev ifindex, from attach events.
    netdevs: BTreeMap<u32, u32>,
}

impl Entry {
    fn from_listed(d: &ListedDevice) -> Entry {
        Entry {
            index: d.index,
            node_guid: d.node_guid,
            uverbs: d.uverbs,
            ..Entry::default()
        }
    }
}

/// Devices by name.
#[derive(Debug, Default)]
pub(crate) struct DeviceTable {
    devices: BTreeMap<String, Entry>,
}

fn event(kind: WatchEventKind, name: &str, e: &Entry, source: Backend) -> WatchEvent {
    WatchEvent {
        kind,
        device: DeviceKey::new(name, e.index),
        node_guid: e.node_guid,
        source,
    }
}

impl DeviceTable {
    /// Replaces the table by the ready devices of `listing`, silently.
    pub(crate) fn adopt(&mut self, listing: &Listing) {
        self.devices = listing
            .devices
            .iter()
            .filter(|d| listing.is_ready(d))
            .map(|d| (d.name.clone(), Entry::from_listed(d)))
            .collect();
    }

    /// The devices the table holds, as listed devices.
    pub(crate) fn devices(&self) -> Vec<ListedDevice> {
        self.devices
            .iter()
            .map(|(name, e)| ListedDevice {
                name: name.clone(),
                index: e.index,
                node_guid: e.node_guid,
                uverbs: e.uverbs,
            })
            .collect()
    }

    /// Events that turn the table into `listing`; removals first.
    pub(crate) fn diff(&mut self, listing: &Listing, source: Backend) -> Vec<WatchEvent> {
        let listed: BTreeMap<&str, &ListedDevice> = listing
            .devices
            .iter()
            .map(|d| (d.name.as_str(), d))
            .collect();
        let mut removals = Vec::new();
        let mut additions = Vec::new();
        let names: Vec<String> = self.devices.keys().cloned().collect();
        for name in names {
            let Some(entry) = self.devices.get_mut(&name) else {
                continue;
            };
            match listed.get(name.as_str()) {
                None => {
                    let e = self.devices.remove(&name).unwrap_or_default();
                    removals.push(event(WatchEventKind::Removed, &name, &e, source));
                }
                Some(d) if !listing.is_ready(d) => {
                    if !entry.removing {
                        entry.removing = true;
                        removals.push(event(WatchEventKind::Removing, &name, entry, source));
                    }
                }
                Some(d) => {
                    let replaced = entry.removing
                        || (entry.index.is_some() && d.index.is_some() && entry.index != d.index)
                        || (entry.node_guid.is_some()
                            && d.node_guid.is_some()
                            && entry.node_guid != d.node_guid);
                    if replaced {
                        let old = self.devices.remove(&name).unwrap_or_default();
                        removals.push(event(WatchEventKind::Removed, &name, &old, source));
                    } else {
                        entry.index = entry.index.or(d.index);
                        entry.node_guid = entry.node_guid.or(d.node_guid);
                        entry.uverbs = d.uverbs;
                    }
                }
            }
        }
        for d in &listing.devices {
            if listing.is_ready(d) && !self.devices.contains_key(&d.name) {
                let e = Entry::from_listed(d);
                additions.push(event(WatchEventKind::Added, &d.name, &e, source));
                self.devices.insert(d.name.clone(), e);
            }
        }
        removals.extend(additions);
        removals
    }

    fn add(&mut self, d: ListedDevice, source: Backend, out: &mut Vec<WatchEvent>) {
        if let Some(old) = self.devices.get(&d.name) {
            let same =
                !old.removing && (old.index.is_none() || d.index.is_none() || old.index == d.index);
            if same {
                // Seen already (the initial listing raced with the event).
                let e = self.devices.get_mut(&d.name).expect("just looked up");
                e.index = e.index.or(d.index);
                e.node_guid = e.node_guid.or(d.node_guid);
                e.uverbs = e.uverbs.or(d.uverbs);
                return;
            }
            // The removal was missed: report it before the new device.
            let old = self.devices.remove(&d.name).unwrap_or_default();
            out.push(event(WatchEventKind::Removed, &d.name, &old, source));
        }
        let e = Entry::from_listed(&d);
        out.push(event(WatchEventKind::Added, &d.name, &e, source));
        self.devices.insert(d.name, e);
    }

    fn remove(&mut self, name: &str, index: Option<u32>, source: Backend) -> WatchEvent {
        let mut e = self.devices.remove(name).unwrap_or_default();
        e.index = e.index.or(index);
        event(WatchEventKind::Removed, name, &e, source)
    }

    fn rename(
        &mut self,
        old: Option<String>,
        new: &str,
        index: Option<u32>,
        source: Backend,
    ) -> WatchEvent {
        let old = old.or_else(|| {
            index.and_then(|i| {
                self.devices
                    .iter()
                    .find(|(n, e)| e.index == Some(i) && n.as_str() != new)
                    .map(|(n, _)| n.clone())
            })
        });
        let mut e = old
            .as_ref()
            .and_then(|o| self.devices.remove(o))
            .unwrap_or_default();
        e.index = e.index.or(index);
        let ev = event(
            WatchEventKind::Renamed {
                old_name: old.clone(),
            },
            new,
            &e,
            source,
        );
        self.devices.insert(new.to_owned(), e);
        ev
    }

    /// Applies a netlink monitor event.
    pub(crate) fn on_monitor(&mut self, m: &MonitorEvent, enrich: &dyn Enrich) -> Vec<WatchEvent> {
        let source = Backend::Netlink;
        let mut out = Vec::new();
        if m.event == NotifyEventType::NetdevRename {
            // fill_mon_netdev_rename(): the netdev only; find its device.
            let Some(ifindex) = m.netdev_index else {
                return out;
            };
            let found = self.devices.iter().find_map(|(n, e)| {
                e.netdevs
                    .iter()
                    .find(|(_, i)| **i == ifindex)
                    .map(|(p, _)| (n.clone(), *p, e.clone()))
            });
            if let Some((name, port, e)) = found {
                out.push(event(
                    WatchEventKind::NetdevRenamed {
                        port: Some(port),
                        netdev: Netdev {
                            ifindex: Some(ifindex),
                            name: m.netdev_name.clone(),
                        },
                    },
                    &name,
                    &e,
                    source,
                ));
            }
            return out;
        }
        let Some(name) = m.dev_name.as_deref() else {
            // Another namespace's netdev, or a malformed event.
            tracing::debug!(event = %m, "RDMA monitor event without a device name, ignored");
            return out;
        };
        match m.event {
            NotifyEventType::Register => {
                let d = enrich.device(name, m.dev_index);
                let d = ListedDevice {
                    index: m.dev_index.or(d.index),
                    ..d
                };
                self.add(d, source, &mut out);
            }
            NotifyEventType::Unregister => out.push(self.remove(name, m.dev_index, source)),
            NotifyEventType::Rename => out.push(self.rename(None, name, m.dev_index, source)),
            NotifyEventType::NetdevAttach | NotifyEventType::NetdevDetach => {
                let Some(port) = m.port else {
                    return out;
                };
                let e = self.devices.entry(name.to_owned()).or_default();
                e.index = e.index.or(m.dev_index);
                let kind = if m.event == NotifyEventType::NetdevAttach {
                    let netdev =
                        (m.netdev_index.is_some() || m.netdev_name.is_some()).then(|| Netdev {
                            ifindex: m.netdev_index,
                            name: m.netdev_name.clone(),
                        });
                    match m.netdev_index {
                        Some(i) => e.netdevs.insert(port, i),
                        None => e.netdevs.remove(&port),
                    };
                    WatchEventKind::NetdevAttached { port, netdev }
                } else {
                    e.netdevs.remove(&port);
                    WatchEventKind::NetdevDetached { port }
                };
                let e = e.clone();
                out.push(event(kind, name, &e, source));
            }
            NotifyEventType::NetdevRename | NotifyEventType::Unknown(_) => {}
        }
        out
    }

    /// Applies a uevent. With `devices_too` false only the uverbs events
    /// are used (the netlink monitor reports the devices themselves).
    pub(crate) fn on_uevent(
        &mut self,
        u: &RdmaUevent,
        enrich: &dyn Enrich,
        devices_too: bool,
    ) -> Vec<WatchEvent> {
        let source = Backend::Uevent;
        let mut out = Vec::new();
        match (&u.target, &u.action) {
            (UeventTarget::Device { name }, action) if devices_too => match action {
                UeventAction::Add => {
                    let d = enrich.device(name, None);
                    self.add(d, source, &mut out);
                }
                UeventAction::Remove => out.push(self.remove(name, None, source)),
                UeventAction::Move { old_name } => {
                    out.push(self.rename(old_name.clone(), name, None, source))
                }
                UeventAction::Other(_) => {}
            },
            (UeventTarget::Uverbs { index }, UeventAction::Add) => {
                if let Some(name) = enrich.uverbs_ibdev(*index) {
                    if let Some(e) = self.devices.get_mut(&name) {
                        e.uverbs = Some(*index);
                    }
                }
            }
            (UeventTarget::Uverbs { index }, UeventAction::Remove) => {
                let found = self
                    .devices
                    .iter_mut()
                    .find(|(_, e)| e.uverbs == Some(*index));
                if let Some((name, e)) = found {
                    e.uverbs = None;
                    if !e.removing {
                        e.removing = true;
                        out.push(event(WatchEventKind::Removing, name, e, source));
                    }
                } else {
                    tracing::debug!(uverbs = index, "removal of an unknown uverbs device");
                }
            }
            _ => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uevent::parse_rdma_uevent;

    /// Enrichment from a fixed table.
    #[derive(Default)]
    struct Fake {
        devices: Vec<ListedDevice>,
    }

    impl Enrich for Fake {
        fn device(&self, name: &str, index: Option<u32>) -> ListedDevice {
            let mut d = self
                .devices
                .iter()
                .find(|d| d.name == name)
                .cloned()
                .unwrap_or_else(|| ListedDevice::named(name));
            d.index = index.or(d.index);
            d
        }
        fn uverbs_ibdev(&self, n: u32) -> Option<String> {
            self.devices
                .iter()
                .find(|d| d.uverbs == Some(n))
                .map(|d| d.name.clone())
        }
    }

    fn dev(name: &str, index: u32, guid: u64, uverbs: u32) -> ListedDevice {
        ListedDevice {
            name: name.into(),
            index: Some(index),
            node_guid: Some(Guid(guid)),
            uverbs: Some(uverbs),
        }
    }

    fn mon(event: NotifyEventType, index: u32, name: &str) -> MonitorEvent {
        MonitorEvent {
            dev_index: Some(index),
            dev_name: Some(name.into()),
            ..MonitorEvent::new(event)
        }
    }

    fn lines(evs: &[WatchEvent]) -> Vec<String> {
        evs.iter().map(|e| e.to_string()).collect()
    }

    fn uev(strings: &[&str]) -> RdmaUevent {
        let mut v = Vec::new();
        for s in strings {
            v.extend_from_slice(s.as_bytes());
            v.push(0);
        }
        parse_rdma_uevent(&v).unwrap().unwrap()
    }

    #[test]
    fn netlink_unplug_replug_with_uverbs_removal() {
        let mut t = DeviceTable::default();
        let mut fake = Fake {
            devices: vec![dev("rxe0", 0, 0xaa, 0)],
        };
        t.adopt(&Listing {
            devices: fake.devices.clone(),
            verbs_class: true,
        });
        // The REGISTER that raced with the initial listing is dropped.
        assert!(t
            .on_monitor(&mon(NotifyEventType::Register, 0, "rxe0"), &fake)
            .is_empty());

        let gone = uev(&[
            "remove@/devices/virtual/infiniband_verbs/uverbs0",
            "SUBSYSTEM=infiniband_verbs",
        ]);
        assert_eq!(
            lines(&t.on_uevent(&gone, &fake, false)),
            ["removing rxe0#0 guid 0000:0000:0000:00aa [uevent]"]
        );
        assert!(t.on_uevent(&gone, &fake, false).is_empty());
        assert_eq!(
            lines(&t.on_monitor(&mon(NotifyEventType::Unregister, 0, "rxe0"), &fake)),
            ["removed rxe0#0 guid 0000:0000:0000:00aa [rdma-netlink]"]
        );

        // Re-added: new kernel index, same uverbs index.
        fake.devices = vec![dev("rxe0", 1, 0xaa, 0)];
        assert_eq!(
            lines(&t.on_monitor(&mon(NotifyEventType::Register, 1, "rxe0"), &fake)),
            ["added rxe0#1 guid 0000:0000:0000:00aa [rdma-netlink]"]
        );
        let mut attach = mon(NotifyEventType::NetdevAttach, 1, "rxe0");
        attach.port = Some(1);
        attach.netdev_index = Some(7);
        attach.netdev_name = Some("veth0".into());
        assert_eq!(
            lines(&t.on_monitor(&attach, &fake)),
            ["netdev-attached rxe0#1 port 1 netdev 7 veth0 guid 0000:0000:0000:00aa [rdma-netlink]"]
        );
        let rename = MonitorEvent {
            netdev_index: Some(7),
            netdev_name: Some("eth5".into()),
            ..MonitorEvent::new(NotifyEventType::NetdevRename)
        };
        assert_eq!(
            lines(&t.on_monitor(&rename, &fake)),
            ["netdev-renamed rxe0#1 port 1 netdev 7 eth5 guid 0000:0000:0000:00aa [rdma-netlink]"]
        );
        assert_eq!(
            lines(&t.on_monitor(&mon(NotifyEventType::Rename, 1, "roce0"), &fake)),
            ["renamed roce0#1 (was rxe0) guid 0000:0000:0000:00aa [rdma-netlink]"]
        );
        // The ib device's own uevents are ignored next to netlink.
        let add = uev(&[
            "add@/devices/virtual/infiniband/rxe9",
            "SUBSYSTEM=infiniband",
        ]);
        assert!(t.on_uevent(&add, &fake, false).is_empty());
    }

    #[test]
    fn missed_unregister_is_reported_before_the_new_device() {
        let mut t = DeviceTable::default();
        let fake = Fake::default();
        t.on_monitor(&mon(NotifyEventType::Register, 0, "rxe0"), &fake);
        let evs = t.on_monitor(&mon(NotifyEventType::Register, 4, "rxe0"), &fake);
        assert_eq!(
            lines(&evs),
            [
                "removed rxe0#0 [rdma-netlink]",
                "added rxe0#4 [rdma-netlink]"
            ]
        );
    }

    #[test]
    fn uevent_backend_cycle() {
        let mut t = DeviceTable::default();
        let fake = Fake {
            devices: vec![ListedDevice {
                index: None,
                ..dev("rxe0", 0, 0xbb, 2)
            }],
        };
        let uverbs_add = uev(&[
            "add@/devices/virtual/infiniband_verbs/uverbs2",
            "SUBSYSTEM=infiniband_verbs",
        ]);
        assert!(t.on_uevent(&uverbs_add, &fake, true).is_empty());
        let add = uev(&[
            "add@/devices/virtual/infiniband/rxe0",
            "SUBSYSTEM=infiniband",
            "NAME=rxe0",
        ]);
        assert_eq!(
            lines(&t.on_uevent(&add, &fake, true)),
            ["added rxe0#? guid 0000:0000:0000:00bb [uevent]"]
        );
        let uverbs_rm = uev(&[
            "remove@/devices/virtual/infiniband_verbs/uverbs2",
            "SUBSYSTEM=infiniband_verbs",
        ]);
        assert_eq!(
            lines(&t.on_uevent(&uverbs_rm, &fake, true)),
            ["removing rxe0#? guid 0000:0000:0000:00bb [uevent]"]
        );
        let rm = uev(&[
            "remove@/devices/virtual/infiniband/rxe0",
            "SUBSYSTEM=infiniband",
            "NAME=rxe0",
        ]);
        assert_eq!(
            lines(&t.on_uevent(&rm, &fake, true)),
            ["removed rxe0#? guid 0000:0000:0000:00bb [uevent]"]
        );
        assert!(t.devices().is_empty());
    }

    #[test]
    fn events_without_a_device_are_dropped() {
        let mut t = DeviceTable::default();
        let fake = Fake::default();
        assert!(t
            .on_monitor(&MonitorEvent::new(NotifyEventType::NetdevDetach), &fake)
            .is_empty());
        assert!(t
            .on_monitor(&MonitorEvent::new(NotifyEventType::NetdevRename), &fake)
            .is_empty());
        assert!(t
            .on_monitor(&mon(NotifyEventType::Unknown(9), 0, "x"), &fake)
            .is_empty());
    }
}
