//! The last-resort watcher: successive listings of `/sys/class/infiniband`
//! (and `/sys/class/infiniband_verbs`), diffed into events.
//!
//! A listing holds each device's name, its node GUID (`node_guid`, as
//! `xxxx:xxxx:xxxx:xxxx`), its `uverbsN` character device (from
//! `infiniband_verbs/uverbsN/ibdev`) and, when a `NETLINK_RDMA` dump works,
//! its kernel index (sysfs does not show it).
//!
//! A device counts as present once its uverbs device exists (when the
//! uverbs class exists at all), since that is what `ibv_get_device_list`
//! lists. When the uverbs device vanishes while the `infiniband` entry
//! stays, the device is being unregistered and the kernel is waiting for its
//! users to close it: that is reported as
//! [`Removing`](crate::WatchEventKind::Removing), the entry's own
//! disappearance as [`Removed`](crate::WatchEventKind::Removed). A device
//! whose index or GUID changed between two listings was replaced: `Removed`
//! then `Added`.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use relink_fabric::Guid;

use crate::table::{DeviceTable, Enrich};
use crate::uevent::parse_uverbs_name;
use crate::{Backend, WatchEvent};

/// Where sysfs keeps device classes.
pub const SYSFS_CLASS: &str = "/sys/class";

/// One device of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListedDevice {
    /// Device name.
    pub name: String,
    /// Kernel `ib_device` index, when a netlink dump could tell it.
    pub index: Option<u32>,
    /// Node GUID, when `node_guid` could be read.
    pub node_guid: Option<Guid>,
    /// `N` of its `uverbsN` character device, if it has one.
    pub uverbs: Option<u32>,
}

impl ListedDevice {
    /// A device known by name only.
    pub fn named(name: impl Into<String>) -> ListedDevice {
        ListedDevice {
            name: name.into(),
            index: None,
            node_guid: None,
            uverbs: None,
        }
    }
}

/// A snapshot of the RDMA devices of the host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// Devices, sorted by name.
    pub devices: Vec<ListedDevice>,
    /// Whether the uverbs class exists (`ib_uverbs` loaded); if not, every
    /// device counts as present without a uverbs device.
    pub verbs_class: bool,
}

impl Listing {
    /// Whether `d` is usable from user space: listed by `ibv_get_device_list`.
    pub fn is_ready(&self, d: &ListedDevice) -> bool {
        !self.verbs_class || d.uverbs.is_some()
    }
}

/// Parses sysfs's `node_guid` text (`0011:2233:4455:6677`, newline allowed).
pub fn parse_node_guid(text: &str) -> Option<Guid> {
    let t = text.trim();
    let groups: Vec<&str> = t.split(':').collect();
    if groups.len() != 4
        || groups
            .iter()
            .any(|g| g.len() != 4 || !g.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return None;
    }
    u64::from_str_radix(&groups.concat(), 16).ok().map(Guid)
}

/// Reads device listings from sysfs.
#[derive(Debug, Clone)]
pub struct SysfsLister {
    class_root: PathBuf,
    netlink_index: bool,
}

impl Default for SysfsLister {
    fn default() -> Self {
        SysfsLister::new()
    }
}

impl SysfsLister {
    /// Lists `/sys/class`, with kernel indices from a netlink dump.
    pub fn new() -> SysfsLister {
        SysfsLister {
            class_root: PathBuf::from(SYSFS_CLASS),
            netlink_index: true,
        }
    }

    /// Lists a copy of sysfs's class directory (holding `infiniband/` and
    /// `infiniband_verbs/`), without netlink: for tests.
    pub fn with_class_root(root: impl Into<PathBuf>) -> SysfsLister {
        SysfsLister {
            class_root: root.into(),
            netlink_index: false,
        }
    }

    /// Whether to ask `RDMA_NLDEV_CMD_GET` for kernel indices.
    pub fn netlink_index(mut self, on: bool) -> SysfsLister {
        self.netlink_index = on;
        self
    }

    /// The class directory this lister reads.
    pub fn class_root(&self) -> &Path {
        &self.class_root
    }

    fn ib_dir(&self) -> PathBuf {
        self.class_root.join("infiniband")
    }

    fn verbs_dir(&self) -> PathBuf {
        self.class_root.join("infiniband_verbs")
    }

    /// `N` → device name, for every `uverbsN`; `None` without the class.
    fn uverbs_map(&self) -> io::Result<Option<BTreeMap<String, u32>>> {
        let dir = match fs::read_dir(self.verbs_dir()) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut map = BTreeMap::new();
        for entry in dir {
            let entry = entry?;
            let Some(n) = entry.file_name().to_str().and_then(parse_uverbs_name) else {
                continue; // abi_version, or anything else
            };
            // Gone between readdir and read: skip it, as the next listing will.
            if let Some(ibdev) = self.read_uverbs_ibdev(n) {
                map.insert(ibdev, n);
            }
        }
        Ok(Some(map))
    }

    fn read_uverbs_ibdev(&self, n: u32) -> Option<String> {
        let text = fs::read_to_string(self.verbs_dir().join(format!("uverbs{n}/ibdev"))).ok()?;
        let name = text.trim();
        (!name.is_empty()).then(|| name.to_owned())
    }

    fn read_guid(&self, name: &str) -> Option<Guid> {
        fs::read_to_string(self.ib_dir().join(name).join("node_guid"))
            .ok()
            .and_then(|t| parse_node_guid(&t))
    }

    fn netlink_indices(&self) -> BTreeMap<String, u32> {
        if !self.netlink_index {
            return BTreeMap::new();
        }
        match crate::netlink::list_devices() {
            Ok(devs) => devs.into_iter().map(|d| (d.name, d.index)).collect(),
            Err(e) => {
                tracing::trace!(error = %e, "no kernel indices from netlink");
                BTreeMap::new()
            }
        }
    }

    /// The current listing. A missing `infiniband` class (no `ib_core`) is
    /// an empty listing, not an error.
    pub fn list(&self) -> io::Result<Listing> {
        let uverbs = self.uverbs_map()?;
        let mut names = Vec::new();
        match fs::read_dir(self.ib_dir()) {
            Ok(dir) => {
                for entry in dir {
                    if let Some(n) = entry?.file_name().to_str() {
                        names.push(n.to_owned());
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        names.sort();
        let indices = if names.is_empty() {
            BTreeMap::new()
        } else {
            self.netlink_indices()
        };
        let devices = names
            .into_iter()
            .map(|name| ListedDevice {
                index: indices.get(&name).copied(),
                node_guid: self.read_guid(&name),
                uverbs: uverbs.as_ref().and_then(|m| m.get(&name).copied()),
                name,
            })
            .collect();
        Ok(Listing {
            devices,
            verbs_class: uverbs.is_some(),
        })
    }
}

impl Enrich for SysfsLister {
    fn device(&self, name: &str, index: Option<u32>) -> ListedDevice {
        let index = index.or_else(|| self.netlink_indices().get(name).copied());
        let uverbs = self
            .uverbs_map()
            .ok()
            .flatten()
            .and_then(|m| m.get(name).copied());
        ListedDevice {
            name: name.to_owned(),
            index,
            node_guid: self.read_guid(name),
            uverbs,
        }
    }

    fn uverbs_ibdev(&self, n: u32) -> Option<String> {
        self.read_uverbs_ibdev(n)
    }
}

/// Diffs successive listings into events.
#[derive(Debug)]
pub struct Rescanner {
    lister: SysfsLister,
    table: DeviceTable,
}

impl Rescanner {
    /// A rescanner that has seen nothing yet: its first
    /// [`scan`](Rescanner::scan) reports every device as added, unless
    /// [`prime`](Rescanner::prime) is called first.
    pub fn new(lister: SysfsLister) -> Rescanner {
        Rescanner {
            lister,
            table: DeviceTable::default(),
        }
    }

    /// Takes the current listing as the baseline, without events.
    pub fn prime(&mut self) -> io::Result<Listing> {
        let l = self.lister.list()?;
        self.table.adopt(&l);
        Ok(l)
    }

    /// Lists again and returns what changed since the last listing.
    pub fn scan(&mut self) -> io::Result<Vec<WatchEvent>> {
        let l = self.lister.list()?;
        Ok(self.diff(&l))
    }

    /// What changed between the last listing and `listing`, which becomes
    /// the new baseline.
    pub fn diff(&mut self, listing: &Listing) -> Vec<WatchEvent> {
        self.table.diff(listing, Backend::Rescan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WatchEventKind;

    #[test]
    fn node_guid_text() {
        assert_eq!(
            parse_node_guid("0011:2233:4455:6677\n"),
            Some(Guid(0x0011_2233_4455_6677))
        );
        assert_eq!(
            parse_node_guid("5254:00ff:fe12:3456"),
            Some(Guid(0x5254_00ff_fe12_3456))
        );
        assert_eq!(parse_node_guid("0011:2233:4455"), None);
        assert_eq!(parse_node_guid("0011:2233:4455:66778"), None);
        assert_eq!(parse_node_guid("0011:2233:4455:+677"), None);
        assert_eq!(parse_node_guid(""), None);
    }

    /// A fake `/sys/class` with the files the lister reads.
    struct FakeSysfs(tempfile::TempDir);

    impl FakeSysfs {
        fn new() -> FakeSysfs {
            let d = tempfile::tempdir().unwrap();
            fs::create_dir_all(d.path().join("infiniband")).unwrap();
            fs::create_dir_all(d.path().join("infiniband_verbs")).unwrap();
            fs::write(d.path().join("infiniband_verbs/abi_version"), "6\n").unwrap();
            FakeSysfs(d)
        }
        fn add(&self, name: &str, guid: &str, uverbs: Option<u32>) {
            let p = self.0.path().join("infiniband").join(name);
            fs::create_dir_all(&p).unwrap();
            fs::write(p.join("node_guid"), format!("{guid}\n")).unwrap();
            if let Some(n) = uverbs {
                let u = self.0.path().join(format!("infiniband_verbs/uverbs{n}"));
                fs::create_dir_all(&u).unwrap();
                fs::write(u.join("ibdev"), format!("{name}\n")).unwrap();
            }
        }
        fn remove_uverbs(&self, n: u32) {
            fs::remove_dir_all(self.0.path().join(format!("infiniband_verbs/uverbs{n}"))).unwrap();
        }
        fn remove(&self, name: &str) {
            fs::remove_dir_all(self.0.path().join("infiniband").join(name)).unwrap();
        }
        fn lister(&self) -> SysfsLister {
            SysfsLister::with_class_root(self.0.path())
        }
    }

    fn kinds(evs: &[WatchEvent]) -> Vec<String> {
        evs.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn lists_a_fake_sysfs() {
        let fs_ = FakeSysfs::new();
        fs_.add("rxe1", "5254:00ff:fe00:0002", Some(1));
        fs_.add("rxe0", "5254:00ff:fe00:0001", Some(0));
        fs_.add("kern0", "0000:0000:0000:0003", None);
        let l = fs_.lister().list().unwrap();
        assert!(l.verbs_class);
        assert_eq!(
            l.devices,
            vec![
                ListedDevice {
                    name: "kern0".into(),
                    index: None,
                    node_guid: Some(Guid(3)),
                    uverbs: None
                },
                ListedDevice {
                    name: "rxe0".into(),
                    index: None,
                    node_guid: Some(Guid(0x5254_00ff_fe00_0001)),
                    uverbs: Some(0)
                },
                ListedDevice {
                    name: "rxe1".into(),
                    index: None,
                    node_guid: Some(Guid(0x5254_00ff_fe00_0002)),
                    uverbs: Some(1)
                },
            ]
        );
        assert!(!l.is_ready(&l.devices[0]));
        assert!(l.is_ready(&l.devices[1]));
    }

    #[test]
    fn missing_classes_are_an_empty_listing() {
        let d = tempfile::tempdir().unwrap();
        let l = SysfsLister::with_class_root(d.path()).list().unwrap();
        assert_eq!(l, Listing::default());
    }

    #[test]
    fn unplug_and_replug_cycle() {
        let fs_ = FakeSysfs::new();
        fs_.add("rxe0", "5254:00ff:fe00:0001", Some(0));
        let mut r = Rescanner::new(fs_.lister());
        assert_eq!(r.prime().unwrap().devices.len(), 1);
        assert!(r.scan().unwrap().is_empty(), "no change, no event");

        // `rdma link delete rxe0`: the uverbs device goes first, and the
        // kernel waits for users.
        fs_.remove_uverbs(0);
        assert_eq!(
            kinds(&r.scan().unwrap()),
            ["removing rxe0#? guid 5254:00ff:fe00:0001 [rescan]"]
        );
        assert!(r.scan().unwrap().is_empty(), "reported once");
        fs_.remove("rxe0");
        assert_eq!(
            kinds(&r.scan().unwrap()),
            ["removed rxe0#? guid 5254:00ff:fe00:0001 [rescan]"]
        );

        // Registration in progress: ib entry without uverbs is not yet added.
        fs_.add("rxe0", "5254:00ff:fe00:0009", None);
        assert!(r.scan().unwrap().is_empty());
        fs_.add("rxe0", "5254:00ff:fe00:0009", Some(0));
        assert_eq!(
            kinds(&r.scan().unwrap()),
            ["added rxe0#? guid 5254:00ff:fe00:0009 [rescan]"]
        );
    }

    #[test]
    fn replacement_between_scans() {
        let fs_ = FakeSysfs::new();
        fs_.add("rxe0", "5254:00ff:fe00:0001", Some(0));
        let mut r = Rescanner::new(fs_.lister());
        r.prime().unwrap();
        fs_.remove("rxe0");
        fs_.remove_uverbs(0);
        fs_.add("rxe0", "5254:00ff:fe00:0002", Some(0));
        let evs = r.scan().unwrap();
        assert_eq!(
            evs.iter().map(|e| e.kind.clone()).collect::<Vec<_>>(),
            [WatchEventKind::Removed, WatchEventKind::Added]
        );
        assert_eq!(evs[0].node_guid, Some(Guid(0x5254_00ff_fe00_0001)));
        assert_eq!(evs[1].node_guid, Some(Guid(0x5254_00ff_fe00_0002)));
    }

    #[test]
    fn first_scan_without_prime_reports_everything() {
        let fs_ = FakeSysfs::new();
        fs_.add("rxe0", "5254:00ff:fe00:0001", Some(0));
        fs_.add("rxe1", "5254:00ff:fe00:0002", Some(1));
        let mut r = Rescanner::new(fs_.lister());
        assert_eq!(r.scan().unwrap().len(), 2);
    }
}
