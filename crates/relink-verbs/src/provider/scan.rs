//! The kernel's device list: a scan of `ibv_get_device_list` with each
//! device's registration key (see `crate::identity`), netdev, addresses and
//! port state from sysfs; the process-wide generations that turn a
//! registration into a `DeviceId`; [`Inner::rescan`], which reports what
//! changed; and re-syncing librdmacm's own device list.

use std::collections::HashMap;
use std::ffi::CStr;
use std::net::IpAddr;
use std::os::raw::c_int;
use std::sync::Mutex;
use std::time::UNIX_EPOCH;

use relink_fabric::{DeviceEventKind, Event, Guid, IpNet, PortState};
use relink_verbs_sys as sys;

use super::ffi::sockaddr_to_std;
use super::Inner;
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
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `ifa` with a list freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return out;
    }
    let mut cur = ifa;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive
        // until freeifaddrs.
        let node = unsafe { &*cur };
        cur = node.ifa_next;
        if node.ifa_addr.is_null() || node.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(node.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr and ifa_netmask point to socket addresses of the
        // family in sa_family (or are null), owned by the list.
        let (addr, mask) = unsafe {
            (
                sockaddr_to_std(node.ifa_addr.cast()),
                sockaddr_to_std(node.ifa_netmask.cast()),
            )
        };
        let Some(addr) = addr else { continue };
        let prefix = match mask.map(|m| m.ip()) {
            Some(IpAddr::V4(m)) => u32::from(m).count_ones() as u8,
            Some(IpAddr::V6(m)) => u128::from(m).count_ones() as u8,
            None if addr.is_ipv4() => 32,
            None => 128,
        };
        out.entry(name)
            .or_default()
            .push(IpNet::new(addr.ip(), prefix));
    }
    // SAFETY: the list came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(ifa) };
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

/// A fixed-size, NUL-terminated C string field as a string.
fn c_array_str(a: &[std::os::raw::c_char]) -> String {
    let bytes: Vec<u8> = a
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The registration key of a device, and its uverbs index.
///
/// # Safety
/// `dev` must be a valid `ibv_device` (from a live device list or a live
/// context).
pub(super) unsafe fn reg_key(dev: *mut sys::ibv_device) -> (RegKey, u32) {
    // SAFETY: the caller guarantees `dev` is valid; ibv_get_device_name
    // returns a string owned by it.
    let name = unsafe { CStr::from_ptr(sys::ibv_get_device_name(dev)) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: as above.
    let kidx = unsafe { sys::ibv_get_device_index(dev) };
    // SAFETY: as above; the fields are plain arrays inside the device.
    let (dev_name, ibdev_path) = unsafe {
        (
            c_array_str(&(*dev).dev_name),
            c_array_str(&(*dev).ibdev_path),
        )
    };
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

/// Every device the kernel lists now. Takes no lock of the provider's
/// (`ibv_get_device_list` has its own): the event thread scans without
/// holding the provider, so the caller's verbs calls do not wait for a
/// scan's system calls, and applies the result under it
/// ([`Inner::apply_scan`]).
pub(super) fn scan_devices() -> Vec<Observed> {
    let mut n: c_int = 0;
    // SAFETY: no preconditions; the list is freed below.
    let list = unsafe { sys::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Vec::new();
    }
    let addrs = interface_addrs();
    let mut out = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list holds `n` device pointers (NULL-terminated).
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: `dev` is an entry of the live list.
        let (key, uverbs_index) = unsafe { reg_key(dev) };
        // SAFETY: as above.
        let guid = Guid(u64::from_be(unsafe { sys::ibv_get_device_guid(dev) }));
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
    // SAFETY: the list came from ibv_get_device_list and is freed once; no
    // device pointer from it is kept.
    unsafe { sys::ibv_free_device_list(list) };
    out
}

/// Make librdmacm re-sync its device list: it closes its cached context of
/// every device that is gone and no longer used by an id. (It also opens a
/// context on every present device it has not opened yet; those are closed
/// at the next re-sync after that device goes.)
pub(super) fn resync_librdmacm() {
    let mut n: c_int = 0;
    // SAFETY: no preconditions; the list is given back below.
    let list = unsafe { sys::rdma_get_devices(&mut n) };
    if !list.is_null() {
        // SAFETY: the list came from rdma_get_devices and is freed once.
        unsafe { sys::rdma_free_devices(list) };
    }
}

impl Inner {
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
