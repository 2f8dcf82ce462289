//! `relink soft-device`: the host-wide registry of soft devices
//! ([`relink_soft::registry`]).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use relink_fabric::{DeviceInfo, Guid, IpNet, PortState};
use relink_soft::registry::{self, Registry};
use serde::Serialize;

/// `relink soft-device [--dir DIR] [--json] <action>`.
// The field docs are the `--help` text: `<uid>` is a placeholder there.
#[allow(rustdoc::invalid_html_tags)]
#[derive(Debug, Args)]
pub struct SoftDeviceArgs {
    /// Registry directory [default: $RELINK_SOFT_DIR, else
    /// $XDG_RUNTIME_DIR/relink-soft, else /tmp/relink-soft-<uid>].
    #[arg(long, value_name = "DIR", global = true)]
    dir: Option<PathBuf>,
    /// Print JSON instead of text (the device, or the list of devices).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    action: Action,
}

/// What to do.
// The variants' docs are the `--help` text: `<hex>` is a placeholder there.
#[allow(rustdoc::invalid_html_tags)]
#[derive(Debug, Subcommand)]
enum Action {
    /// Register a new soft device.
    Add {
        /// Device name, e.g. soft0.
        #[arg(value_parser = parse_name)]
        name: String,
        /// An address the device owns, with its prefix length (repeatable).
        #[arg(long = "addr", value_name = "ADDR/PREFIX", required = true)]
        addrs: Vec<IpNet>,
        /// Node GUID, as 0x<hex> or xxxx:xxxx:xxxx:xxxx [default: random].
        #[arg(long, value_parser = parse_guid)]
        guid: Option<Guid>,
        /// The netdev the device is attached to, e.g. lo.
        #[arg(long, value_parser = parse_netdev)]
        netdev: Option<String>,
    },
    /// Unregister a soft device (like unplugging it).
    Remove {
        /// Device name.
        #[arg(value_parser = parse_name)]
        name: String,
    },
    /// Reset a soft device: a fatal error, then the same device (name,
    /// index, GUID, addresses) comes back with a new generation.
    Reset {
        /// Device name.
        #[arg(value_parser = parse_name)]
        name: String,
    },
    /// Replace a soft device by a new one (new GUID, same addresses).
    Replace {
        /// Device name.
        #[arg(value_parser = parse_name)]
        name: String,
        /// Name of the replacement [default: the same name].
        #[arg(long, value_parser = parse_name)]
        new_name: Option<String>,
    },
    /// Set a soft device's port up or down.
    Port {
        /// Device name.
        #[arg(value_parser = parse_name)]
        name: String,
        /// The new port state.
        state: PortArg,
    },
    /// List the soft devices.
    List,
}

/// Port state on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PortArg {
    /// The port carries traffic.
    Up,
    /// The link is down.
    Down,
}

impl From<PortArg> for PortState {
    fn from(p: PortArg) -> PortState {
        match p {
            PortArg::Up => PortState::Active,
            PortArg::Down => PortState::Down,
        }
    }
}

fn parse_name(s: &str) -> Result<String, String> {
    registry::validate_name(s)
        .map(|()| s.to_string())
        .map_err(|e| e.to_string())
}

fn parse_netdev(s: &str) -> Result<String, String> {
    registry::validate_netdev(s)
        .map(|()| s.to_string())
        .map_err(|e| e.to_string())
}

fn parse_guid(s: &str) -> Result<Guid, String> {
    registry::parse_guid(s)
}

/// A device as `--json` prints it.
#[derive(Debug, Serialize)]
struct DeviceJson<'a> {
    name: &'a str,
    index: u32,
    generation: u64,
    /// `0x` and 16 hex digits (a JSON number cannot hold every u64).
    guid: String,
    addrs: Vec<String>,
    netdev: Option<&'a str>,
    port: &'static str,
}

fn port_word(p: PortState) -> &'static str {
    match p {
        PortState::Active => "active",
        PortState::Down => "down",
    }
}

impl<'a> From<&'a DeviceInfo> for DeviceJson<'a> {
    fn from(d: &'a DeviceInfo) -> DeviceJson<'a> {
        DeviceJson {
            name: &d.id.name,
            index: d.id.index,
            generation: d.id.generation,
            guid: registry::format_guid(d.node_guid),
            addrs: d.addrs.iter().map(|a| a.to_string()).collect(),
            netdev: d.netdev.as_deref(),
            port: port_word(d.port_state),
        }
    }
}

fn addrs_text(d: &DeviceInfo) -> String {
    if d.addrs.is_empty() {
        "-".to_string()
    } else {
        d.addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// One line describing a device.
fn describe(d: &DeviceInfo) -> String {
    format!(
        "{}: index {}, generation {}, guid {}, port {}, netdev {}, addrs {}",
        d.id.name,
        d.id.index,
        d.id.generation,
        d.node_guid,
        port_word(d.port_state),
        d.netdev.as_deref().unwrap_or("-"),
        addrs_text(d)
    )
}

/// Prints the device list as an aligned table.
fn print_table(devices: &[DeviceInfo], out: &mut dyn Write) -> std::io::Result<()> {
    let header = [
        "NAME",
        "INDEX",
        "GENERATION",
        "GUID",
        "PORT",
        "NETDEV",
        "ADDRS",
    ];
    let rows: Vec<[String; 7]> = devices
        .iter()
        .map(|d| {
            [
                d.id.name.clone(),
                d.id.index.to_string(),
                d.id.generation.to_string(),
                d.node_guid.to_string(),
                port_word(d.port_state).to_string(),
                d.netdev.clone().unwrap_or_else(|| "-".into()),
                addrs_text(d),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &[&str]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s
    };
    writeln!(out, "{}", line(&header))?;
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        writeln!(out, "{}", line(&cells))?;
    }
    Ok(())
}

fn print_device(json: bool, verb: &str, d: &DeviceInfo, out: &mut dyn Write) -> anyhow::Result<()> {
    if json {
        serde_json::to_writer_pretty(&mut *out, &DeviceJson::from(d))?;
        writeln!(out)?;
    } else {
        writeln!(out, "{verb} {}", describe(d))?;
    }
    Ok(())
}

/// Runs `relink soft-device ...`, printing to `out`.
pub fn run(args: SoftDeviceArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let dir = args.dir.unwrap_or_else(Registry::default_dir);
    let reg = Registry::open(&dir)
        .with_context(|| format!("cannot open the soft device registry {}", dir.display()))?;
    let json = args.json;
    match args.action {
        Action::Add {
            name,
            addrs,
            guid,
            netdev,
        } => {
            let d = reg
                .add(&name, addrs, guid, netdev)
                .with_context(|| format!("cannot add soft device {name:?}"))?;
            print_device(json, "added", &d, out)
        }
        Action::Remove { name } => {
            let d = reg
                .remove(&name)
                .with_context(|| format!("cannot remove soft device {name:?}"))?;
            print_device(json, "removed", &d, out)
        }
        Action::Reset { name } => {
            let d = reg
                .reset(&name)
                .with_context(|| format!("cannot reset soft device {name:?}"))?;
            print_device(json, "reset", &d, out)
        }
        Action::Replace { name, new_name } => {
            let d = reg
                .replace(&name, new_name.as_deref())
                .with_context(|| format!("cannot replace soft device {name:?}"))?;
            print_device(json, &format!("replaced {name} by"), &d, out)
        }
        Action::Port { name, state } => {
            let d = reg
                .set_port(&name, state.into())
                .with_context(|| format!("cannot set the port of soft device {name:?}"))?;
            let verb = match d.port_state {
                PortState::Active => "port up on",
                PortState::Down => "port down on",
            };
            print_device(json, verb, &d, out)
        }
        Action::List => {
            let devices = reg
                .list()
                .with_context(|| format!("cannot list soft devices in {}", dir.display()))?;
            if json {
                let list: Vec<DeviceJson<'_>> = devices.iter().map(DeviceJson::from).collect();
                serde_json::to_writer_pretty(&mut *out, &list)?;
                writeln!(out)?;
            } else if devices.is_empty() {
                writeln!(out, "no soft devices in {}", dir.display())?;
            } else {
                print_table(&devices, out)?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relink_fabric::DeviceId;

    fn dev() -> DeviceInfo {
        DeviceInfo {
            id: DeviceId {
                name: "soft0".into(),
                index: 1,
                generation: 12,
            },
            node_guid: Guid(0x0011_2233_4455_6677),
            addrs: vec![
                "10.0.0.1/24".parse().unwrap(),
                "fd00::1/64".parse().unwrap(),
            ],
            netdev: Some("lo".into()),
            port_state: PortState::Down,
        }
    }

    #[test]
    fn json_shape() {
        let v = serde_json::to_value(DeviceJson::from(&dev())).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "name": "soft0",
                "index": 1,
                "generation": 12,
                "guid": "0x0011223344556677",
                "addrs": ["10.0.0.1/24", "fd00::1/64"],
                "netdev": "lo",
                "port": "down",
            })
        );
    }

    #[test]
    fn table_is_aligned() {
        let mut other = dev();
        other.id.name = "a-much-longer-name".into();
        other.netdev = None;
        other.addrs.clear();
        let mut out = Vec::new();
        print_table(&[dev(), other], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        // NAME is as wide as the longest name plus two spaces.
        assert_eq!(lines[0].find("INDEX"), Some(20));
        assert!(lines[1].starts_with("soft0   "));
        assert_eq!(&lines[2][20..21], "1");
        assert!(lines[1].ends_with("10.0.0.1/24,fd00::1/64"));
        assert!(lines[2].ends_with("  -"));
        assert!(lines[1].contains("0011:2233:4455:6677"));
    }

    #[test]
    fn describe_line() {
        assert_eq!(
            describe(&dev()),
            "soft0: index 1, generation 12, guid 0011:2233:4455:6677, port down, \
             netdev lo, addrs 10.0.0.1/24,fd00::1/64"
        );
    }
}
