//! The kernel's device list: a scan of `ibv_get_device_list` with each
//! device's registration key (see `crate::identity`), netdev, addresses and
//! port state from sysfs; the process-wide generations that turn a
//! registration into a `DeviceId`; [`Inner::rescan`], which reports what
//! changed; and when librdmacm's own device list is re-synced.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::UNIX_EPOCH;

use relink_fabric::{DeviceEventKind, DeviceId, Event, Guid, IpNet, PortState};

use super::Inner;
use crate::ffi::{self, Device, DeviceList, EventChannel};
use crate::identity::{Generations, Observed, RegKey};

/// Generations of device registrations, shared by every provider of the
/// process so that they agree on a device's `DeviceId`.
static GENERATIONS: Mutex<Option<Generations>> = Mutex::new(None);

/// Run `f` on the process-wide generations (created at first use).
fn with_generations<R>(f: impl FnOnce(&mut Generations) -> R) -> R {
    let mut g = GENERATIONS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Generations::new))
}

/// Addresses of every network interface, by name.
fn interface_addrs() -> HashMap<String, Vec<IpNet>> {
    let mut out: HashMap<String, Vec<IpNet>> = HashMap::new();
    ffi::interface_addrs(|name, addr, mask| {
        let prefix = match mask.map(|m| m.ip()) {
            Some(IpAddr::V4(m)) => u32::from(m).count_ones() as u8,
            Some(IpAddr::V6(m)) => u128::from(m).count_ones() as u8,
            None if addr.is_ipv4() => 32,
            None => 128,
        };
        out.entry(name)
            .or_default()
            .push(IpNet::new(addr.ip(), prefix));
    });
    out
}

/// A sysfs attribute, trimmed; `None` if it cannot be read.
fn sysfs_read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The netdev of port 1 of an RDMA device (RoCE/iWARP), from sysfs.
fn sysfs_netdev(name: &str) -> Option<String> {
    (0..16).find_map(|i| {
        sysfs_read(&format!(
            "/sys/class/infiniband/{name}/ports/1/gid_attrs/ndevs/{i}"
        ))
        .filter(|s| !s.is_empty())
    })
}

/// Port 1's state from sysfs: `Active` if it says ACTIVE, else `Down`
/// (also when it cannot be read).
fn sysfs_port_state(name: &str) -> PortState {
    match sysfs_read(&format!("/sys/class/infiniband/{name}/ports/1/state")) {
        Some(s) if s.contains("ACTIVE") => PortState::Active,
        _ => PortState::Down,
    }
}

/// Whether `name` is still listed with its port not ACTIVE (netdev down,
/// no carrier): a CM message sent through it now fails its route lookup,
/// and rxe then moves the port's GSI QP (QP1) to the error state for good
/// (see [`Inner::parked`]).
pub(super) fn port_down_listed(name: &str) -> bool {
    std::path::Path::new(&format!("/sys/class/infiniband/{name}")).exists()
        && sysfs_port_state(name) != PortState::Active
}

/// The registration key of a device, and its uverbs index.
pub(super) fn reg_key(dev: Device<'_>) -> (RegKey, u32) {
    let name = dev.name();
    let kidx = dev.kernel_index();
    let (dev_name, ibdev_path) = dev.dev_name_and_path();
    let uverbs = dev_name
        .trim_start_matches("uverbs")
        .parse::<u32>()
        .unwrap_or(u32::MAX);
    let created_ns = std::fs::metadata(&ibdev_path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    (
        RegKey {
            name,
            kernel_index: u32::try_from(kidx).ok(),
            created_ns,
        },
        uverbs,
    )
}

/// The registration key of the device CM id `id` (on channel `chan`) is
/// bound to now, if any.
pub(super) fn id_reg_key(chan: &EventChannel, id: &ffi::CmId) -> Option<RegKey> {
    id.device(chan).map(|d| reg_key(d).0)
}

/// Every device the kernel lists now. Takes no lock of the provider's
/// (`ibv_get_device_list` has its own): the event thread scans without
/// holding the provider, so the caller's verbs calls do not wait for a
/// scan's system calls, and applies the result under it
/// ([`Inner::apply_scan`]).
pub(super) fn scan_devices() -> Vec<Observed> {
    let Ok(list) = DeviceList::get() else {
        return Vec::new();
    };
    let addrs = interface_addrs();
    let mut out = Vec::new();
    for dev in list.iter() {
        let (key, uverbs_index) = reg_key(dev);
        let guid = Guid(u64::from_be(dev.guid_be()));
        let netdev = sysfs_netdev(&key.name);
        let port_state = sysfs_port_state(&key.name);
        let a = netdev
            .as_ref()
            .and_then(|n| addrs.get(n).cloned())
            .unwrap_or_default();
        out.push(Observed {
            key,
            uverbs_index,
            guid,
            netdev,
            addrs: a,
            port_state,
        });
    }
    // The list is freed here (no device pointer from it is kept).
    drop(list);
    out
}

impl Inner {
    /// The device of registration `key` (an id's, [`id_reg_key`]), if any;
    /// a registration newer than the last scan brings a re-scan first.
    pub(super) fn device_of_key(&mut self, key: Option<RegKey>) -> Option<DeviceId> {
        let key = key?;
        if self.book.by_key(&key).is_none() {
            // A registration newer than the last scan.
            self.rescan();
        }
        self.book.by_key(&key).map(|i| i.id.clone())
    }

    /// Scan the kernel's device list and report what changed.
    pub(super) fn rescan(&mut self) {
        self.apply_scan(scan_devices());
    }

    /// Report what changed since the last scan, given a new one.
    pub(super) fn apply_scan(&mut self, scan: Vec<Observed>) {
        let keys: Vec<RegKey> = scan.iter().map(|o| o.key.clone()).collect();
        // Only a registration that left matters to librdmacm's cache (a
        // re-sync opens every present device, so not for additions).
        let left = self
            .last_scan
            .iter()
            .any(|k| !keys.iter().any(|n| n.same_registration(k)));
        self.last_scan = keys;
        let events = with_generations(|g| self.book.update(scan, g));
        for ev in events {
            let gone = ev.kind == DeviceEventKind::Removed;
            let id = ev.device.id.clone();
            self.push(Event::Device(ev));
            if gone {
                self.device_gone(&id);
            }
        }
        self.destroy_parked(|p| !port_down_listed(&p.device.name));
        if left || self.resync_pending {
            // Forget librdmacm's contexts of devices that left the list.
            // While a lost device is still listed (its removal blocked on
            // contexts), keep re-syncing at every scan.
            self.resync_pending = self.cms.values().any(|c| c.lost);
            self.resync_librdmacm_soon();
        }
    }
}
