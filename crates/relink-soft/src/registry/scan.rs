//! Reading the directory: [`Snapshot`]s of the devices and fatal markers,
//! strict (the first malformed file is an error) for callers, lenient (goes
//! on past faulty files) for the [`Watcher`](super::Watcher).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::PathBuf;

use relink_fabric::DeviceInfo;

use super::files::read_small;
use super::format::parse_fatal;
use super::{
    io_err, parse_device, validate_name, ParseError, Registry, RegistryError, DEVICE_EXT, FATAL_EXT,
};

/// What the registry holds at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Registered devices, sorted by name.
    pub devices: Vec<DeviceInfo>,
    /// Per device name, the generations of it that hit a fatal error (from
    /// `<name>.fatal`).
    pub fatal: BTreeMap<String, Vec<u64>>,
}

impl Snapshot {
    /// The device with this name.
    pub fn get(&self, name: &str) -> Option<&DeviceInfo> {
        self.devices.iter().find(|d| d.id.name == name)
    }

    pub(super) fn is_fatal(&self, name: &str, generation: u64) -> bool {
        self.fatal
            .get(name)
            .is_some_and(|gens| gens.contains(&generation))
    }
}

/// A scan of the directory that goes on past faulty files.
pub(super) struct Scan {
    /// What could be read.
    pub(super) snapshot: Snapshot,
    /// Names whose device file could not be read or parsed.
    pub(super) failed: BTreeSet<String>,
    /// The directory itself could not be read.
    pub(super) dir_failed: bool,
    /// Every fault met, in scan order (device files first, then markers).
    pub(super) errors: Vec<RegistryError>,
}

impl Registry {
    /// All registered devices, sorted by index. A malformed file is an error
    /// naming it.
    pub fn list(&self) -> Result<Vec<DeviceInfo>, RegistryError> {
        let mut devices = self.snapshot()?.devices;
        devices.sort_by(|a, b| (a.id.index, &a.id.name).cmp(&(b.id.index, &b.id.name)));
        Ok(devices)
    }

    /// The device named `name`, if registered.
    pub fn get(&self, name: &str) -> Result<Option<DeviceInfo>, RegistryError> {
        validate_name(name)?;
        self.read_device(name)
    }

    /// The devices and fatal markers; a malformed file is an error naming it.
    pub fn snapshot(&self) -> Result<Snapshot, RegistryError> {
        let scan = self.scan();
        match scan.errors.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(scan.snapshot),
        }
    }

    pub(super) fn read_device(&self, name: &str) -> Result<Option<DeviceInfo>, RegistryError> {
        let path = self.device_path(name);
        match read_small(&path)? {
            None => Ok(None),
            Some(text) => parse_device(name, &text)
                .map(Some)
                .map_err(|e| e.in_file(&path)),
        }
    }

    /// Lists the files of one kind: `(stem, path)` of every `*.<ext>` that is
    /// not hidden.
    fn entries(&self, ext: &str) -> Result<Vec<(String, PathBuf)>, RegistryError> {
        let rd = match fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&self.dir)(e)),
        };
        let mut out = Vec::new();
        for entry in rd {
            let entry = entry.map_err(io_err(&self.dir))?;
            let file_name = entry.file_name();
            let Some(file_name) = file_name.to_str() else {
                continue;
            };
            if file_name.starts_with('.') {
                continue; // temporary files
            }
            let Some(stem) = file_name
                .strip_suffix(ext)
                .and_then(|s| s.strip_suffix('.'))
            else {
                continue;
            };
            out.push((stem.to_string(), entry.path()));
        }
        out.sort();
        Ok(out)
    }

    /// Reads everything, going on past faulty files. Device files are read
    /// before fatal markers: [`Registry::reset`] writes the marker before the
    /// device file, so a scan that sees a reset's new generation also sees
    /// its marker.
    pub(super) fn scan(&self) -> Scan {
        let mut scan = Scan {
            snapshot: Snapshot::default(),
            failed: BTreeSet::new(),
            dir_failed: false,
            errors: Vec::new(),
        };
        let devs = match self.entries(DEVICE_EXT) {
            Ok(d) => d,
            Err(e) => {
                scan.dir_failed = true;
                scan.errors.push(e);
                return scan;
            }
        };
        for (stem, path) in devs {
            let result = match validate_name(&stem) {
                Err(e) => Err(
                    ParseError::file(format!("file name is not a device name: {e}")).in_file(&path),
                ),
                Ok(()) => read_small(&path).and_then(|t| match t {
                    None => Ok(None), // removed since the directory was read
                    Some(text) => parse_device(&stem, &text)
                        .map(Some)
                        .map_err(|e| e.in_file(&path)),
                }),
            };
            match result {
                Ok(Some(d)) => scan.snapshot.devices.push(d),
                Ok(None) => {}
                Err(e) => {
                    scan.failed.insert(stem);
                    scan.errors.push(e);
                }
            }
        }
        let markers = match self.entries(FATAL_EXT) {
            Ok(m) => m,
            Err(e) => {
                scan.dir_failed = true;
                scan.errors.push(e);
                return scan;
            }
        };
        for (stem, path) in markers {
            match read_small(&path) {
                Ok(None) => {}
                Ok(Some(text)) => match parse_fatal(&text) {
                    Ok(gens) => {
                        scan.snapshot.fatal.insert(stem, gens);
                    }
                    Err(e) => scan.errors.push(e.in_file(&path)),
                },
                Err(e) => scan.errors.push(e),
            }
        }
        scan
    }
}
