//! The text of registry files: parsing and writing device files (see the
//! format in the [module docs](super)), `.fatal` markers, the `indexes` and
//! `generation` files, and the checks on names, netdevs and GUIDs.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use relink_fabric::{DeviceId, DeviceInfo, Guid, IpNet, PortState};

use super::{RegistryError, MAX_NAME_LEN, MAX_NETDEV_LEN};

/// A fault found while parsing one file (the path is added by the caller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The 1-based line at fault, if the fault is on one line.
    pub line: Option<usize>,
    /// What is wrong.
    pub msg: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(n) => write!(f, "line {n}: {}", self.msg),
            None => f.write_str(&self.msg),
        }
    }
}

impl std::error::Error for ParseError {}

impl ParseError {
    fn at(line: usize, msg: impl Into<String>) -> ParseError {
        ParseError {
            line: Some(line),
            msg: msg.into(),
        }
    }

    pub(super) fn file(msg: impl Into<String>) -> ParseError {
        ParseError {
            line: None,
            msg: msg.into(),
        }
    }

    pub(super) fn in_file(self, path: &Path) -> RegistryError {
        RegistryError::Malformed {
            path: path.to_path_buf(),
            line: self.line,
            msg: self.msg,
        }
    }
}

/// Checks a device name: 1 to 63 ASCII letters, digits, `_`, `-` or `.`,
/// not starting with `.` or `-`.
pub fn validate_name(name: &str) -> Result<(), RegistryError> {
    let bad = |reason| {
        Err(RegistryError::InvalidName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("longer than 63 bytes");
    }
    if name.starts_with('.') || name.starts_with('-') {
        return bad("starts with '.' or '-'");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return bad("only ASCII letters, digits, '_', '-' and '.' are allowed");
    }
    Ok(())
}

/// Checks a netdev name: 1 to 15 bytes, no whitespace, control characters,
/// `/` or `=`.
pub fn validate_netdev(name: &str) -> Result<(), RegistryError> {
    let bad = |reason| {
        Err(RegistryError::InvalidNetdev {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NETDEV_LEN {
        return bad("longer than 15 bytes");
    }
    if name
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '/' || c == '=')
    {
        return bad("contains whitespace, a control character, '/' or '='");
    }
    Ok(())
}

/// Parses a GUID written as `0x` and 1 to 16 hex digits, or in the
/// `0011:2233:4455:6677` form [`Guid`] displays as.
pub fn parse_guid(s: &str) -> Result<Guid, String> {
    let hex = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        if h.is_empty() || h.len() > 16 {
            return Err(format!(
                "bad GUID {s:?}: expected 1 to 16 hex digits after 0x"
            ));
        }
        h.to_string()
    } else {
        let groups: Vec<&str> = s.split(':').collect();
        if groups.len() != 4 || groups.iter().any(|g| g.len() != 4) {
            return Err(format!(
                "bad GUID {s:?}: expected 0x<hex> or xxxx:xxxx:xxxx:xxxx"
            ));
        }
        groups.concat()
    };
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("bad GUID {s:?}: not hexadecimal"));
    }
    u64::from_str_radix(&hex, 16)
        .map(Guid)
        .map_err(|e| format!("bad GUID {s:?}: {e}"))
}

/// Writes a GUID as the registry files (and `--guid`) spell it: `0x` and 16
/// hex digits.
pub fn format_guid(guid: Guid) -> String {
    format!("0x{:016x}", guid.0)
}

fn parse_port(s: &str) -> Option<PortState> {
    match s {
        "active" => Some(PortState::Active),
        "down" => Some(PortState::Down),
        _ => None,
    }
}

fn port_str(p: PortState) -> &'static str {
    match p {
        PortState::Active => "active",
        PortState::Down => "down",
    }
}

/// Splits a registry file into `(line number, key, value)`, skipping blank
/// lines and `#` comments.
fn key_values(text: &str) -> impl Iterator<Item = Result<(usize, &str, &str), ParseError>> {
    text.lines().enumerate().filter_map(|(i, raw)| {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        Some(match line.split_once('=') {
            Some((k, v)) => Ok((n, k.trim(), v.trim())),
            None => Err(ParseError::at(
                n,
                format!("expected key=value, got {line:?}"),
            )),
        })
    })
}

/// Parses the contents of a device file; `stem` is the file name without
/// `.dev`, which must equal the `name` key.
pub fn parse_device(stem: &str, text: &str) -> Result<DeviceInfo, ParseError> {
    let mut name = None;
    let mut index = None;
    let mut guid = None;
    let mut generation = None;
    let mut netdev = None;
    let mut port = None;
    let mut addrs: Vec<IpNet> = Vec::new();
    for kv in key_values(text) {
        let (n, key, value) = kv?;
        let dup = |seen: bool| {
            if seen {
                Err(ParseError::at(n, format!("key `{key}` given twice")))
            } else {
                Ok(())
            }
        };
        let bad = |what: &dyn fmt::Display| {
            ParseError::at(n, format!("bad value for key `{key}`: {what}"))
        };
        match key {
            "name" => {
                dup(name.is_some())?;
                validate_name(value).map_err(|e| bad(&e))?;
                if value != stem {
                    return Err(ParseError::at(
                        n,
                        format!("key `name` is {value:?} but the file is named for {stem:?}"),
                    ));
                }
                name = Some(value.to_string());
            }
            "index" => {
                dup(index.is_some())?;
                index = Some(value.parse::<u32>().map_err(|e| bad(&e))?);
            }
            "guid" => {
                dup(guid.is_some())?;
                guid = Some(parse_guid(value).map_err(|e| bad(&e))?);
            }
            "generation" => {
                dup(generation.is_some())?;
                generation = Some(value.parse::<u64>().map_err(|e| bad(&e))?);
            }
            "netdev" => {
                dup(netdev.is_some())?;
                validate_netdev(value).map_err(|e| bad(&e))?;
                netdev = Some(value.to_string());
            }
            "port" => {
                dup(port.is_some())?;
                port =
                    Some(parse_port(value).ok_or_else(|| {
                        bad(&format_args!("{value:?} (expected active or down)"))
                    })?);
            }
            "addr" => {
                let net: IpNet = value.parse().map_err(|e: String| bad(&e))?;
                if addrs.iter().any(|a| a.addr == net.addr) {
                    return Err(ParseError::at(
                        n,
                        format!("address {} given twice", net.addr),
                    ));
                }
                addrs.push(net);
            }
            // Unknown keys are allowed: a newer writer may add some.
            _ => {}
        }
    }
    let missing = |key: &str| ParseError::file(format!("missing key `{key}`"));
    Ok(DeviceInfo {
        id: DeviceId {
            name: name.ok_or_else(|| missing("name"))?,
            index: index.ok_or_else(|| missing("index"))?,
            generation: generation.ok_or_else(|| missing("generation"))?,
        },
        node_guid: guid.ok_or_else(|| missing("guid"))?,
        addrs,
        netdev,
        port_state: port.unwrap_or(PortState::Active),
    })
}

/// Writes a device file's contents (what [`parse_device`] reads back).
pub fn format_device(d: &DeviceInfo) -> String {
    let mut s = String::new();
    s.push_str(&format!("name={}\n", d.id.name));
    s.push_str(&format!("index={}\n", d.id.index));
    s.push_str(&format!("guid={}\n", format_guid(d.node_guid)));
    for a in &d.addrs {
        s.push_str(&format!("addr={a}\n"));
    }
    if let Some(n) = &d.netdev {
        s.push_str(&format!("netdev={n}\n"));
    }
    s.push_str(&format!("generation={}\n", d.id.generation));
    s.push_str(&format!("port={}\n", port_str(d.port_state)));
    s
}

/// Parses a `.fatal` marker: `generation=N` lines.
pub(super) fn parse_fatal(text: &str) -> Result<Vec<u64>, ParseError> {
    let mut gens = Vec::new();
    for kv in key_values(text) {
        let (n, key, value) = kv?;
        if key == "generation" {
            let g = value
                .parse::<u64>()
                .map_err(|e| ParseError::at(n, format!("bad value for key `generation`: {e}")))?;
            gens.push(g);
        }
    }
    Ok(gens)
}

/// Parses the `indexes` file: `name=index` lines.
pub(super) fn parse_indexes(text: &str) -> Result<BTreeMap<String, u32>, ParseError> {
    let mut map = BTreeMap::new();
    for kv in key_values(text) {
        let (n, key, value) = kv?;
        validate_name(key).map_err(|e| ParseError::at(n, format!("bad key: {e}")))?;
        let index = value
            .parse::<u32>()
            .map_err(|e| ParseError::at(n, format!("bad value for key `{key}`: {e}")))?;
        map.insert(key.to_string(), index);
    }
    Ok(map)
}

/// Parses the `generation` counter file: one decimal number.
pub(super) fn parse_counter(text: &str) -> Result<u64, ParseError> {
    let t = text.trim();
    t.parse::<u64>()
        .map_err(|e| ParseError::file(format!("expected one decimal number, got {t:?}: {e}")))
}
