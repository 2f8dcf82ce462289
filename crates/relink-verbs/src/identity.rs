//! Device identity: which registration of a device is which.
//!
//! A device is told apart by **(name, kernel index)** plus a **generation**
//! this crate maintains — never by node GUID alone (a reset or an `rdma link
//! delete` + `add` of the same netdev keeps the GUID).
//!
//! - [`RegKey`] identifies one *registration* the way libibverbs does
//!   (`same_sysfs_dev` in rdma-core): the name plus the kernel's device index
//!   (`ibv_get_device_index`, allocated cyclically by the kernel, so a
//!   re-registered device gets a new one); where the kernel gives no index
//!   (-1, no RDMA netlink), the creation time of the device's sysfs directory
//!   stands in for it.
//! - [`Generations`] gives every registration a number, the first one seen
//!   first; it is process-wide in the provider, so two providers in one
//!   process agree on a device's [`DeviceId`].
//! - [`DeviceBook`] is one provider's view: the devices present, diffed scan
//!   by scan into [`DeviceEvent`]s, and registrations the provider declared
//!   lost (from a `DEVICE_REMOVAL`, a `DEVICE_FATAL`, or a failed call)
//!   that must stay hidden while the kernel still lists them.
//!
//! [`DeviceId::index`] is the *uverbs* index (`uverbsN`), which the kernel
//! reuses when the same device comes back, as the fabric's docs describe.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};

use relink_fabric::{DeviceEvent, DeviceEventKind, DeviceId, DeviceInfo, Guid, IpNet, PortState};

/// The identity of one registration of a device.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegKey {
    /// Device name, e.g. `rxe0`.
    pub name: String,
    /// The kernel's device index, or `None` where the kernel reports none.
    pub kernel_index: Option<u32>,
    /// Creation time of `/sys/class/infiniband/<name>` in nanoseconds; part
    /// of the identity only when there is no kernel index.
    pub created_ns: u64,
}

impl RegKey {
    /// The part that identifies the registration.
    fn identity(&self) -> (&str, Option<u32>, u64) {
        match self.kernel_index {
            Some(i) => (&self.name, Some(i), 0),
            None => (&self.name, None, self.created_ns),
        }
    }

    /// Whether two keys name the same registration.
    pub fn same_registration(&self, other: &RegKey) -> bool {
        self.identity() == other.identity()
    }
}

/// What one scan of the device list found about one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Which registration.
    pub key: RegKey,
    /// The uverbs index (`uverbsN`).
    pub uverbs_index: u32,
    /// Node GUID (host order).
    pub guid: Guid,
    /// The netdev of port 1, if any.
    pub netdev: Option<String>,
    /// The netdev's addresses.
    pub addrs: Vec<IpNet>,
    /// State of port 1.
    pub port_state: PortState,
}

/// Generation numbers of registrations, first seen first.
#[derive(Debug, Default)]
pub struct Generations {
    next: u64,
    map: HashMap<(String, Option<u32>, u64), u64>,
}

impl Generations {
    /// An empty table; the first generation handed out is 1.
    pub fn new() -> Generations {
        Generations {
            next: 1,
            map: HashMap::new(),
        }
    }

    /// The generation of `key`, assigning the next one if it is new.
    pub fn of(&mut self, key: &RegKey) -> u64 {
        let (n, i, c) = key.identity();
        let id = (n.to_string(), i, c);
        if let Some(g) = self.map.get(&id) {
            return *g;
        }
        let g = self.next.max(1);
        self.next = g + 1;
        self.map.insert(id, g);
        g
    }
}

#[derive(Debug, Clone)]
struct Entry {
    key: RegKey,
    info: DeviceInfo,
}

/// One provider's view of the devices (see the module docs).
#[derive(Debug, Default)]
pub struct DeviceBook {
    present: BTreeMap<String, Entry>,
    /// Registrations declared lost that the kernel may still list.
    hidden: BTreeSet<(String, Option<u32>, u64)>,
}

fn hidden_id(key: &RegKey) -> (String, Option<u32>, u64) {
    let (n, i, c) = key.identity();
    (n.to_string(), i, c)
}

impl DeviceBook {
    /// An empty book.
    pub fn new() -> DeviceBook {
        DeviceBook::default()
    }

    /// Devices present (not lost), by name.
    pub fn list(&self) -> Vec<DeviceInfo> {
        self.present.values().map(|e| e.info.clone()).collect()
    }

    /// The device registered under `name` now.
    pub fn by_name(&self, name: &str) -> Option<&DeviceInfo> {
        self.present.get(name).map(|e| &e.info)
    }

    /// The device of a registration, if it is present.
    pub fn by_key(&self, key: &RegKey) -> Option<&DeviceInfo> {
        self.present
            .get(&key.name)
            .filter(|e| e.key.same_registration(key))
            .map(|e| &e.info)
    }

    /// The registration key of a present device.
    pub fn key_of(&self, id: &DeviceId) -> Option<&RegKey> {
        self.present
            .get(&id.name)
            .filter(|e| e.info.id == *id)
            .map(|e| &e.key)
    }

    /// Whether `id` is present (its registration not gone, not lost).
    pub fn is_present(&self, id: &DeviceId) -> bool {
        self.present.get(&id.name).is_some_and(|e| e.info.id == *id)
    }

    /// Apply one full scan; returns the events, removals first.
    pub fn update(&mut self, scan: Vec<Observed>, gens: &mut Generations) -> Vec<DeviceEvent> {
        let mut removed = Vec::new();
        let mut added = Vec::new();
        let mut changed = Vec::new();
        // Lost registrations stay hidden only while they are still listed.
        self.hidden
            .retain(|h| scan.iter().any(|o| hidden_id(&o.key) == *h));
        // Gone: present entries whose registration the scan no longer has.
        let names: Vec<String> = self.present.keys().cloned().collect();
        for name in names {
            let still = scan
                .iter()
                .any(|o| o.key.same_registration(&self.present[&name].key));
            if !still {
                let e = self.present.remove(&name).expect("present");
                removed.push(DeviceEvent {
                    kind: DeviceEventKind::Removed,
                    device: e.info,
                });
            }
        }
        for o in scan {
            if self.hidden.contains(&hidden_id(&o.key)) {
                continue;
            }
            match self.present.get_mut(&o.key.name) {
                Some(e) if e.key.same_registration(&o.key) => {
                    let before = e.info.clone();
                    e.info.node_guid = o.guid;
                    e.info.port_state = o.port_state;
                    e.info.netdev = o.netdev.clone();
                    e.info.addrs = o.addrs.clone();
                    let after = e.info.clone();
                    if before.netdev != after.netdev {
                        let kind = if after.netdev.is_some() {
                            DeviceEventKind::NetdevAttach
                        } else {
                            DeviceEventKind::NetdevDetach
                        };
                        changed.push(DeviceEvent {
                            kind,
                            device: after.clone(),
                        });
                    }
                    if before.addrs != after.addrs {
                        changed.push(DeviceEvent {
                            kind: DeviceEventKind::AddrChange,
                            device: after.clone(),
                        });
                    }
                    if before.port_state != after.port_state {
                        let kind = match after.port_state {
                            PortState::Active => DeviceEventKind::PortUp,
                            PortState::Down => DeviceEventKind::PortDown,
                        };
                        changed.push(DeviceEvent {
                            kind,
                            device: after,
                        });
                    }
                }
                _ => {
                    // A new registration (a replaced one was removed above;
                    // a duplicate name in one scan replaces the earlier).
                    if let Some(old) = self.present.remove(&o.key.name) {
                        removed.push(DeviceEvent {
                            kind: DeviceEventKind::Removed,
                            device: old.info,
                        });
                    }
                    let info = DeviceInfo {
                        id: DeviceId {
                            name: o.key.name.clone(),
                            index: o.uverbs_index,
                            generation: gens.of(&o.key),
                        },
                        node_guid: o.guid,
                        addrs: o.addrs,
                        netdev: o.netdev,
                        port_state: o.port_state,
                    };
                    self.present.insert(
                        o.key.name.clone(),
                        Entry {
                            key: o.key,
                            info: info.clone(),
                        },
                    );
                    added.push(DeviceEvent {
                        kind: DeviceEventKind::Added,
                        device: info,
                    });
                }
            }
        }
        removed.extend(changed);
        removed.extend(added);
        removed
    }

    /// Declare `id` lost (its context died, or rdma_cm reported its
    /// removal): it leaves the list at once and stays hidden until the
    /// kernel stops listing that registration. Returns the `Removed` event,
    /// or `None` if `id` was not present.
    pub fn mark_lost(&mut self, id: &DeviceId) -> Option<DeviceEvent> {
        if !self.is_present(id) {
            return None;
        }
        let e = self.present.remove(&id.name).expect("present");
        self.hidden.insert(hidden_id(&e.key));
        Some(DeviceEvent {
            kind: DeviceEventKind::Removed,
            device: e.info,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(name: &str, kidx: u32, uverbs: u32, guid: u64, addr: &str) -> Observed {
        Observed {
            key: RegKey {
                name: name.into(),
                kernel_index: Some(kidx),
                created_ns: 1000 + u64::from(kidx),
            },
            uverbs_index: uverbs,
            guid: Guid(guid),
            netdev: Some(format!("veth{uverbs}")),
            addrs: vec![addr.parse().unwrap()],
            port_state: PortState::Active,
        }
    }

    fn kinds(evs: &[DeviceEvent]) -> Vec<(DeviceEventKind, String, u64)> {
        evs.iter()
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
    fn add_remove_readd_gets_a_new_generation() {
        let mut gens = Generations::new();
        let mut book = DeviceBook::new();
        let evs = book.update(
            vec![
                obs("rxe0", 1, 0, 0xa, "10.0.0.1/24"),
                obs("rxe1", 2, 1, 0xb, "10.0.0.2/24"),
            ],
            &mut gens,
        );
        assert_eq!(
            kinds(&evs),
            vec![
                (DeviceEventKind::Added, "rxe0".into(), 1),
                (DeviceEventKind::Added, "rxe1".into(), 2)
            ]
        );
        let first = book.by_name("rxe0").unwrap().id.clone();
        assert_eq!(first.index, 0, "DeviceId.index is the uverbs index");
        // The same scan again: nothing.
        assert!(book
            .update(
                vec![
                    obs("rxe0", 1, 0, 0xa, "10.0.0.1/24"),
                    obs("rxe1", 2, 1, 0xb, "10.0.0.2/24")
                ],
                &mut gens
            )
            .is_empty());
        // rxe0 deleted.
        let evs = book.update(vec![obs("rxe1", 2, 1, 0xb, "10.0.0.2/24")], &mut gens);
        assert_eq!(
            kinds(&evs),
            vec![(DeviceEventKind::Removed, "rxe0".into(), 1)]
        );
        assert!(!book.is_present(&first));
        // Re-added: same name, same uverbs index and GUID, new kernel index.
        let evs = book.update(
            vec![
                obs("rxe0", 3, 0, 0xa, "10.0.0.1/24"),
                obs("rxe1", 2, 1, 0xb, "10.0.0.2/24"),
            ],
            &mut gens,
        );
        assert_eq!(
            kinds(&evs),
            vec![(DeviceEventKind::Added, "rxe0".into(), 3)]
        );
        let again = book.by_name("rxe0").unwrap();
        assert_eq!((again.id.index, again.node_guid), (0, Guid(0xa)));
        assert!(again.id.generation > first.generation);
    }

    #[test]
    fn a_reregistration_between_two_scans_is_removed_then_added() {
        let mut gens = Generations::new();
        let mut book = DeviceBook::new();
        book.update(vec![obs("rxe0", 1, 0, 0xa, "10.0.0.1/24")], &mut gens);
        // Deleted and added back within one scan period: a new kernel index.
        let evs = book.update(vec![obs("rxe0", 2, 0, 0xa, "10.0.0.1/24")], &mut gens);
        assert_eq!(
            kinds(&evs),
            vec![
                (DeviceEventKind::Removed, "rxe0".into(), 1),
                (DeviceEventKind::Added, "rxe0".into(), 2)
            ]
        );
    }

    #[test]
    fn without_a_kernel_index_the_creation_time_tells_registrations_apart() {
        let mut gens = Generations::new();
        let mut book = DeviceBook::new();
        let mut a = obs("mlx5_0", 0, 0, 0xa, "10.0.0.1/24");
        a.key.kernel_index = None;
        a.key.created_ns = 5;
        book.update(vec![a.clone()], &mut gens);
        assert!(book.update(vec![a.clone()], &mut gens).is_empty());
        a.key.created_ns = 6;
        let evs = book.update(vec![a], &mut gens);
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].kind, DeviceEventKind::Removed);
        assert_eq!(evs[1].kind, DeviceEventKind::Added);
    }

    #[test]
    fn with_a_kernel_index_the_creation_time_is_ignored() {
        let mut gens = Generations::new();
        let mut book = DeviceBook::new();
        let mut a = obs("rxe0", 4, 0, 0xa, "10.0.0.1/24");
        book.update(vec![a.clone()], &mut gens);
        a.key.created_ns += 77; // sysfs mtime moved: same registration
        assert!(book.update(vec![a], &mut gens).is_empty());
    }

    #[test]
    fn a_lost_device_stays_hidden_until_its_registration_goes() {
        let mut gens = Generations::new();
        let mut book = DeviceBook::new();
        book.update(vec![obs("rxe0", 1, 0, 0xa, "10.0.0.1/24")], &mut gens);
        let id = book.by_name("rxe0").unwrap().id.clone();
        let ev = book.mark_lost(&id).expect("present");
        assert_eq!(ev.kind, DeviceEventKind::Removed);
        assert!(book.mark_lost(&id).is_none(), "reported once");
        assert!(book.list().is_empty());
        // The kernel still lists it (removal in progress): stays hidden.
        assert!(book
            .update(vec![obs("rxe0", 1, 0, 0xa, "10.0.0.1/24")], &mut gens)
            .is_empty());
        assert!(book.list().is_empty());
        // Gone from the kernel's list, then back: a new registration.
        assert!(book.update(vec![], &mut gens).is_empty());
        let evs = book.update(vec![obs("rxe0", 5, 0, 0xa, "10.0.0.1/24")], &mut gens);
        assert_eq!(
            kinds(&evs),
            vec![(DeviceEventKind::Added, "rxe0".into(), 2)]
        );
    }

    #[test]
    fn a_lost_device_that_reregisters_before_a_scan_shows_up() {
        let mut gens = Generations::new();
        let mut book = DeviceBook::new();
        book.update(vec![obs("rxe0", 1, 0, 0xa, "10.0.0.1/24")], &mut gens);
        let id = book.by_name("rxe0").unwrap().id.clone();
        book.mark_lost(&id);
        let evs = book.update(vec![obs("rxe0", 2, 0, 0xa, "10.0.0.1/24")], &mut gens);
        assert_eq!(
            kinds(&evs),
            vec![(DeviceEventKind::Added, "rxe0".into(), 2)]
        );
    }

    #[test]
    fn port_and_address_changes() {
        let mut gens = Generations::new();
        let mut book = DeviceBook::new();
        let mut a = obs("rxe0", 1, 0, 0xa, "10.0.0.1/24");
        book.update(vec![a.clone()], &mut gens);
        a.port_state = PortState::Down;
        let evs = book.update(vec![a.clone()], &mut gens);
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].kind, DeviceEventKind::PortDown);
        assert_eq!(evs[0].device.port_state, PortState::Down);
        a.port_state = PortState::Active;
        a.addrs.clear();
        let evs = book.update(vec![a.clone()], &mut gens);
        let k: Vec<_> = evs.iter().map(|e| e.kind.clone()).collect();
        assert_eq!(
            k,
            vec![DeviceEventKind::AddrChange, DeviceEventKind::PortUp]
        );
        a.netdev = None;
        let evs = book.update(vec![a], &mut gens);
        assert_eq!(evs[0].kind, DeviceEventKind::NetdevDetach);
        assert_eq!(book.by_name("rxe0").unwrap().id.generation, 1);
    }

    #[test]
    fn generations_are_shared_and_stable() {
        let mut gens = Generations::new();
        let mut a = DeviceBook::new();
        let mut b = DeviceBook::new();
        a.update(vec![obs("rxe0", 1, 0, 0xa, "10.0.0.1/24")], &mut gens);
        b.update(
            vec![
                obs("rxe1", 2, 1, 0xb, "10.0.0.2/24"),
                obs("rxe0", 1, 0, 0xa, "10.0.0.1/24"),
            ],
            &mut gens,
        );
        assert_eq!(
            a.by_name("rxe0").unwrap().id,
            b.by_name("rxe0").unwrap().id,
            "two books in one process agree on a registration's id"
        );
        let key = b
            .key_of(&b.by_name("rxe1").unwrap().id.clone())
            .unwrap()
            .clone();
        assert_eq!(b.by_key(&key).unwrap().id.name, "rxe1");
    }
}
