//! The host's test topology around the rig's devices, from the environment:
//! the main pair, a spare netdev for a replacement device, a second pair for
//! failover, and the policy-routing tables that make two addresses of one
//! kernel talk over the wire. The VM tier (`tests/vm/guest/run.sh`) sets it
//! up and exports it:
//!
//! ```text
//! RELINK_VERBS_INITIATOR=rxe0@10.10.0.1@veth0   the initiator's device
//! RELINK_VERBS_TARGET=rxe1@10.10.0.2@veth1      the target's device
//! RELINK_VERBS_SPARE=rxe2@veth2                 replacement: a device name and a spare netdev
//! RELINK_VERBS_SECOND_INITIATOR=rxe3@10.10.1.1@veth3   failover: a second pair,
//! RELINK_VERBS_SECOND_TARGET=rxe4@10.10.1.2@veth4      already added
//! RELINK_VERBS_ROUTE_TABLES=102,101             policy-routing tables holding each side's
//!                                               route to the other (re-pointed when an
//!                                               address moves or a netdev comes back up)
//! RELINK_VERBS_PREFIX=24                        prefix length of the addresses
//! ```

use std::net::IpAddr;
use std::time::Duration;

use super::{
    ip, parse_spec, rdma, run, uverbs_listed, wait_until, SideCfg, INITIATOR_ENV, TARGET_ENV,
};

/// Environment variable of the replacement device's `DEV@NETDEV`.
pub const SPARE_ENV: &str = "RELINK_VERBS_SPARE";
/// Environment variables of the second pair's `DEV@ADDR@NETDEV`.
pub const SECOND_ENV: [&str; 2] = [
    "RELINK_VERBS_SECOND_INITIATOR",
    "RELINK_VERBS_SECOND_TARGET",
];
/// Environment variable of the policy-routing tables `TABLE,TABLE`
/// (initiator -> target, target -> initiator).
pub const ROUTE_TABLES_ENV: &str = "RELINK_VERBS_ROUTE_TABLES";
/// Environment variable of the addresses' prefix length (default 24).
pub const PREFIX_ENV: &str = "RELINK_VERBS_PREFIX";

/// The host's test topology read from the `RELINK_VERBS_*` variables: the
/// main pair, the spare netdev for a replacement, the second pair for
/// failover and the policy-routing tables (see the
/// [`verbs_rig`](crate::verbs_rig) docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// The initiator's device, address and netdev.
    pub init: SideCfg,
    /// The target's device, address and netdev.
    pub target: SideCfg,
    /// Replacement device name and spare netdev.
    pub spare: Option<(String, String)>,
    /// The second pair (initiator, target).
    pub second: Option<(SideCfg, SideCfg)>,
    /// Policy-routing tables of (initiator -> target, target -> initiator).
    pub tables: Option<(String, String)>,
    /// Prefix length of the addresses.
    pub prefix: u8,
}

/// `DEV@ADDR@NETDEV` from `var`.
fn side_from_env(var: &str) -> Result<SideCfg, String> {
    let v = std::env::var(var).map_err(|_| format!("{var} is not set"))?;
    let (device, addr, netdev) = parse_spec(var, &v)?;
    let netdev = netdev.ok_or_else(|| format!("{var}={v:?}: give DEV@ADDR@NETDEV"))?;
    Ok(SideCfg {
        device,
        addr,
        netdev,
    })
}

/// `A<sep>B` from `var`, if set.
fn pair_from_env(var: &str, sep: char, what: &str) -> Result<Option<(String, String)>, String> {
    match std::env::var(var) {
        Ok(v) => v
            .split_once(sep)
            .filter(|(a, b)| !a.is_empty() && !b.is_empty())
            .map(|(a, b)| Some((a.to_string(), b.to_string())))
            .ok_or_else(|| format!("{var}={v:?} is not {what}")),
        Err(_) => Ok(None),
    }
}

impl Topology {
    /// The topology the environment describes.
    ///
    /// # Errors
    /// Why there is none (to be reported as a skip): the crate was built
    /// without `rdma`, or a variable is missing or malformed.
    pub fn from_env() -> Result<Topology, String> {
        if !relink_verbs::BUILT_WITH_RDMA {
            return Err(relink_verbs::VerbsError::NotBuilt.to_string());
        }
        let init = side_from_env(INITIATOR_ENV)?;
        let target = side_from_env(TARGET_ENV)?;
        let spare = pair_from_env(SPARE_ENV, '@', "DEV@NETDEV")?;
        let second = match (std::env::var(SECOND_ENV[0]), std::env::var(SECOND_ENV[1])) {
            (Ok(_), Ok(_)) => Some((side_from_env(SECOND_ENV[0])?, side_from_env(SECOND_ENV[1])?)),
            _ => None,
        };
        let tables = pair_from_env(ROUTE_TABLES_ENV, ',', "TABLE,TABLE")?;
        let prefix = match std::env::var(PREFIX_ENV) {
            Ok(v) => v
                .parse()
                .ok()
                .filter(|p| *p <= 128)
                .ok_or_else(|| format!("{PREFIX_ENV}={v:?} is not a prefix length"))?,
            Err(_) => 24,
        };
        Ok(Topology {
            init,
            target,
            spare,
            second,
            tables,
            prefix,
        })
    }

    /// `addr/prefix`.
    pub fn cidr(&self, addr: IpAddr) -> String {
        format!("{addr}/{}", self.prefix)
    }

    /// Move `addr` from the netdev `from` to the netdev `to`.
    ///
    /// # Errors
    /// The failing `ip` command.
    pub fn move_address(&self, addr: IpAddr, from: &str, to: &str) -> Result<(), String> {
        let cidr = self.cidr(addr);
        ip(&["addr", "del", &cidr, "dev", from])?;
        ip(&["addr", "add", &cidr, "dev", to])
    }

    /// An `ip -batch` script that sets `netdev` up and points the policy
    /// routes of the main pair at `init_netdev` and `target_netdev` at
    /// once: one `ip` process, so nothing can send between the link
    /// coming up and its routes coming back. (The kernel drops a
    /// netdev's routes when it goes down; with both ends in one host, a
    /// lookup without them falls through to the local table, where the
    /// peer's address is local — a rig artifact a network of hosts does
    /// not have.) Run it with `ip -batch FILE`, then [`Topology::routes`]
    /// for the neighbours.
    #[must_use]
    pub fn up_with_routes(&self, netdev: &str, init_netdev: &str, target_netdev: &str) -> String {
        let mut script = format!("link set {netdev} up\n");
        if let Some((ti, tt)) = &self.tables {
            let (a, b) = (self.init.addr, self.target.addr);
            script.push_str(&format!(
                "route replace {b} dev {init_netdev} src {a} table {ti}\n\
                 route replace {a} dev {target_netdev} src {b} table {tt}\n"
            ));
        }
        script
    }

    /// Point the policy routes of the main pair at these netdevs, flush the
    /// neighbour tables and warm them again ([`Topology::warm_neighbours`]).
    ///
    /// # Errors
    /// The failing `ip` command.
    pub fn routes(&self, init_netdev: &str, target_netdev: &str) -> Result<(), String> {
        let Some((ti, tt)) = &self.tables else {
            return Ok(());
        };
        let (a, b) = (self.init.addr.to_string(), self.target.addr.to_string());
        ip(&[
            "route",
            "replace",
            &b,
            "dev",
            init_netdev,
            "src",
            &a,
            "table",
            ti,
        ])?;
        ip(&[
            "route",
            "replace",
            &a,
            "dev",
            target_netdev,
            "src",
            &b,
            "table",
            tt,
        ])?;
        ip(&["neigh", "flush", "all"])?;
        self.warm_neighbours();
        Ok(())
    }

    /// One ping each way between each pair's addresses. Both sides share
    /// this kernel: after a neighbour flush (ours, or a netdev going down),
    /// rdma_cm's address resolution was seen to stall past the connect
    /// timeout and the first connection's data path to stay dead (6.12,
    /// rxe); relink then recovers through its connect and resync timeouts,
    /// which would be counted as recovery latency. Hosts of their own
    /// resolve each other normally.
    pub fn warm_neighbours(&self) {
        let mut pairs = vec![(self.init.addr, self.target.addr)];
        if let Some((a, b)) = &self.second {
            pairs.push((a.addr, b.addr));
        }
        for (a, b) in pairs {
            let (a, b) = (a.to_string(), b.to_string());
            for (from, to) in [(&a, &b), (&b, &a)] {
                if let Err(e) = run("ping", &["-c", "1", "-W", "1", "-I", from, to]) {
                    eprintln!("warming the neighbour tables: {e}");
                }
            }
        }
    }

    /// Put the host back as the settings describe it: the spare device
    /// gone, every address on its own netdev, every device present.
    ///
    /// # Errors
    /// The failing command, or a device that did not come back.
    pub fn restore(&self) -> Result<(), String> {
        if let Some((spare, spare_nd)) = &self.spare {
            if uverbs_listed(spare) {
                rdma(&["link", "delete", spare])?;
            }
            for a in [self.init.addr, self.target.addr] {
                let _ = ip(&["addr", "del", &self.cidr(a), "dev", spare_nd]);
            }
        }
        let mut sides = vec![&self.init, &self.target];
        if let Some((a, b)) = &self.second {
            sides.extend([a, b]);
        }
        for s in sides {
            ip(&["link", "set", &s.netdev, "up"])?;
            ip(&["addr", "replace", &self.cidr(s.addr), "dev", &s.netdev])?;
            if !uverbs_listed(&s.device) {
                rdma(&["link", "add", &s.device, "type", "rxe", "netdev", &s.netdev])?;
                if !wait_until(Duration::from_secs(10), || uverbs_listed(&s.device)) {
                    return Err(format!("{} did not come back", s.device));
                }
            }
        }
        self.routes(&self.init.netdev, &self.target.netdev)
    }
}
