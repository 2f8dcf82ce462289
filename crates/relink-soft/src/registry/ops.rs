//! The changes to the registry, each under the lock: [`Registry::add`],
//! [`Registry::remove`], [`Registry::reset`], [`Registry::replace`] and
//! [`Registry::set_port`], with index and generation allocation and fresh
//! GUIDs.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;

use relink_fabric::{DeviceId, DeviceInfo, Guid, IpNet, PortState};

use super::files::{random_u64, read_small, remove_if_exists, write_atomic};
use super::format::{parse_counter, parse_fatal, parse_indexes};
use super::{
    format_device, io_err, validate_name, validate_netdev, ParseError, Registry, RegistryError,
};

const GENERATION_FILE: &str = "generation";
const INDEX_FILE: &str = "indexes";
/// How many fatal generations a `.fatal` marker remembers.
const FATAL_HISTORY: usize = 8;

impl Registry {
    /// All devices, strictly, for a change under the lock.
    fn devices_locked(&self) -> Result<Vec<DeviceInfo>, RegistryError> {
        Ok(self.snapshot()?.devices)
    }

    /// The next host-wide generation: above the counter file and above every
    /// registered device (in case the counter file was lost).
    fn next_generation(&self, devices: &[DeviceInfo]) -> Result<u64, RegistryError> {
        let path = self.dir.join(GENERATION_FILE);
        let counter = match read_small(&path)? {
            None => 0,
            Some(text) => parse_counter(&text).map_err(|e| e.in_file(&path))?,
        };
        let max_live = devices.iter().map(|d| d.id.generation).max().unwrap_or(0);
        let next = counter.max(max_live).saturating_add(1);
        write_atomic(&path, &format!("{next}\n"))?;
        Ok(next)
    }

    /// The index for a device named `name`: the one recorded for the name if
    /// no live device has it, else the smallest index (from 1) that no live
    /// device has and no other name has recorded.
    fn allocate_index(&self, name: &str, live: &[DeviceInfo]) -> Result<u32, RegistryError> {
        let path = self.dir.join(INDEX_FILE);
        let mut recorded = match read_small(&path)? {
            None => BTreeMap::new(),
            Some(text) => parse_indexes(&text).map_err(|e| e.in_file(&path))?,
        };
        let in_use: BTreeSet<u32> = live.iter().map(|d| d.id.index).collect();
        if let Some(&i) = recorded.get(name) {
            if !in_use.contains(&i) {
                return Ok(i);
            }
        }
        let reserved: BTreeSet<u32> = recorded
            .iter()
            .filter(|(n, _)| n.as_str() != name)
            .map(|(_, &i)| i)
            .collect();
        let index = (1..=u32::MAX)
            .find(|i| !in_use.contains(i) && !reserved.contains(i))
            .ok_or_else(|| ParseError::file("no free device index").in_file(&path))?;
        recorded.insert(name.to_string(), index);
        let mut text = String::new();
        for (n, i) in &recorded {
            text.push_str(&format!("{n}={i}\n"));
        }
        write_atomic(&path, &text)?;
        Ok(index)
    }

    /// A fresh random GUID no device in `avoid` has.
    fn fresh_guid(avoid: &[DeviceInfo], also: Option<Guid>) -> Guid {
        loop {
            let g = Guid(random_u64());
            if g.0 != 0
                && g.0 != u64::MAX
                && Some(g) != also
                && !avoid.iter().any(|d| d.node_guid == g)
            {
                return g;
            }
        }
    }

    /// Creates a registration under the lock. `live` are the other devices.
    fn create_locked(
        &self,
        live: &[DeviceInfo],
        name: &str,
        addrs: Vec<IpNet>,
        guid: Guid,
        netdev: Option<String>,
        port_state: PortState,
    ) -> Result<DeviceInfo, RegistryError> {
        let index = self.allocate_index(name, live)?;
        let generation = self.next_generation(live)?;
        let info = DeviceInfo {
            id: DeviceId {
                name: name.to_string(),
                index,
                generation,
            },
            node_guid: guid,
            addrs,
            netdev,
            port_state,
        };
        // A marker left from an earlier registration names only older
        // generations; drop it so it cannot be mistaken for this one's.
        remove_if_exists(&self.fatal_path(name))?;
        write_atomic(&self.device_path(name), &format_device(&info))?;
        Ok(info)
    }

    /// Registers a new device `name` owning `addrs` (at least one is expected
    /// by the TCP fabric, none is allowed). `guid` defaults to a fresh random
    /// one; the port starts active. The device gets the index it had before
    /// if the name was registered before (and the index is free), else the
    /// smallest free index, and a new host-wide generation.
    pub fn add(
        &self,
        name: &str,
        addrs: Vec<IpNet>,
        guid: Option<Guid>,
        netdev: Option<String>,
    ) -> Result<DeviceInfo, RegistryError> {
        validate_name(name)?;
        if let Some(n) = &netdev {
            validate_netdev(n)?;
        }
        for (i, a) in addrs.iter().enumerate() {
            if addrs[..i].iter().any(|b| b.addr == a.addr) {
                return Err(RegistryError::DuplicateAddr { addr: a.addr });
            }
        }
        if let Some(g) = guid {
            if g.0 == 0 {
                return Err(RegistryError::InvalidGuid {
                    guid: g,
                    reason: "a node GUID cannot be 0",
                });
            }
        }
        let _lock = self.lock()?;
        let live = self.devices_locked()?;
        if live.iter().any(|d| d.id.name == name) {
            return Err(RegistryError::Exists(name.to_string()));
        }
        for a in &addrs {
            if let Some(owner) = live.iter().find(|d| d.owns(a.addr)) {
                return Err(RegistryError::AddrInUse {
                    addr: a.addr,
                    owner: owner.id.name.clone(),
                });
            }
        }
        let guid = match guid {
            Some(g) => {
                if let Some(owner) = live.iter().find(|d| d.node_guid == g) {
                    return Err(RegistryError::GuidInUse {
                        guid: g,
                        owner: owner.id.name.clone(),
                    });
                }
                g
            }
            None => Registry::fresh_guid(&live, None),
        };
        self.create_locked(&live, name, addrs, guid, netdev, PortState::Active)
    }

    /// Unregisters `name`; returns the device as it was.
    pub fn remove(&self, name: &str) -> Result<DeviceInfo, RegistryError> {
        validate_name(name)?;
        let _lock = self.lock()?;
        let dev = self
            .read_device(name)?
            .ok_or_else(|| RegistryError::NotFound(name.to_string()))?;
        let path = self.device_path(name);
        fs::remove_file(&path).map_err(io_err(&path))?;
        remove_if_exists(&self.fatal_path(name))?;
        Ok(dev)
    }

    /// Resets `name`, like a device that hit a fatal error and re-registered:
    /// same name, index, GUID, addresses, netdev and port state, a new
    /// generation. The old generation is first recorded in `<name>.fatal`,
    /// so watchers report `Fatal`, `Removed`, `Added`. Returns the new
    /// registration.
    pub fn reset(&self, name: &str) -> Result<DeviceInfo, RegistryError> {
        validate_name(name)?;
        let _lock = self.lock()?;
        let live = self.devices_locked()?;
        let old = live
            .iter()
            .find(|d| d.id.name == name)
            .cloned()
            .ok_or_else(|| RegistryError::NotFound(name.to_string()))?;
        let generation = self.next_generation(&live)?;

        let marker = self.fatal_path(name);
        let mut gens = match read_small(&marker)? {
            None => Vec::new(),
            Some(text) => parse_fatal(&text).map_err(|e| e.in_file(&marker))?,
        };
        if !gens.contains(&old.id.generation) {
            gens.push(old.id.generation);
        }
        let skip = gens.len().saturating_sub(FATAL_HISTORY);
        let mut text = String::new();
        for g in gens.iter().skip(skip) {
            text.push_str(&format!("generation={g}\n"));
        }
        write_atomic(&marker, &text)?;

        let mut new = old;
        new.id.generation = generation;
        write_atomic(&self.device_path(name), &format_device(&new))?;
        Ok(new)
    }

    /// Replaces `name` by a new device — a new card in the same slot: a new
    /// GUID, the same addresses, netdev and port state, named `new_name` (or
    /// `name`), with a new generation. Watchers see `Removed` then `Added`.
    /// Returns the new registration.
    pub fn replace(&self, name: &str, new_name: Option<&str>) -> Result<DeviceInfo, RegistryError> {
        validate_name(name)?;
        let target = new_name.unwrap_or(name);
        validate_name(target)?;
        let _lock = self.lock()?;
        let all = self.devices_locked()?;
        let old = all
            .iter()
            .find(|d| d.id.name == name)
            .cloned()
            .ok_or_else(|| RegistryError::NotFound(name.to_string()))?;
        if target != name && all.iter().any(|d| d.id.name == target) {
            return Err(RegistryError::Exists(target.to_string()));
        }
        let others: Vec<DeviceInfo> = all.into_iter().filter(|d| d.id.name != name).collect();
        let guid = Registry::fresh_guid(&others, Some(old.node_guid));
        // The old registration no longer holds its index (a same-name
        // replacement takes it back), but its generation must be exceeded.
        let index = self.allocate_index(target, &others)?;
        let mut with_old = others;
        with_old.push(old.clone());
        let generation = self.next_generation(&with_old)?;
        if target != name {
            // Unregister the old device before the new one appears: its
            // addresses move to the new one and are never owned twice.
            let path = self.device_path(name);
            fs::remove_file(&path).map_err(io_err(&path))?;
            remove_if_exists(&self.fatal_path(name))?;
        }
        let info = DeviceInfo {
            id: DeviceId {
                name: target.to_string(),
                index,
                generation,
            },
            node_guid: guid,
            addrs: old.addrs,
            netdev: old.netdev,
            port_state: old.port_state,
        };
        remove_if_exists(&self.fatal_path(target))?;
        write_atomic(&self.device_path(target), &format_device(&info))?;
        Ok(info)
    }

    /// Sets the port state of `name` (the same registration: no new
    /// generation). Watchers see `PortDown` or `PortUp`; setting the state it
    /// already has changes nothing. Returns the device.
    pub fn set_port(&self, name: &str, state: PortState) -> Result<DeviceInfo, RegistryError> {
        validate_name(name)?;
        let _lock = self.lock()?;
        let mut dev = self
            .read_device(name)?
            .ok_or_else(|| RegistryError::NotFound(name.to_string()))?;
        if dev.port_state != state {
            dev.port_state = state;
            write_atomic(&self.device_path(name), &format_device(&dev))?;
        }
        Ok(dev)
    }
}
