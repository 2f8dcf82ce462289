//! The provider's parameters: `FI_RELINK_*` environment variables,
//! defined with `fi_param_define` so `fi_info -e` lists them, and read
//! with `fi_param_get` when a fabric is opened or a getinfo answers.
//!
//! A value that does not parse is an error naming the variable (getinfo
//! then fails with `FI_EINVAL` and says why in libfabric's log); nothing
//! falls back to a default silently.

#![forbid(unsafe_code)]

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

/// One parameter: its name (after `FI_RELINK_`) and its help line.
#[derive(Debug, Clone, Copy)]
pub struct ParamDef {
    /// The name libfabric prefixes with `FI_RELINK_` (lower case here).
    pub name: &'static str,
    /// What `fi_info -e` prints for it.
    pub help: &'static str,
}

/// Every parameter, as `fi_info -e` lists them.
pub const DEFS: &[ParamDef] = &[
    ParamDef {
        name: "backend",
        help: "Where relink's sessions run: \"soft\" (the soft fabric over TCP, the soft \
               devices of FI_RELINK_SOFT_DIR) or \"verbs\" (rdma-core). (default: soft)",
    },
    ParamDef {
        name: "soft_dir",
        help: "The directory of soft devices (relink soft-device --dir). (default: \
               $RELINK_SOFT_DIR, else $XDG_RUNTIME_DIR/relink-soft, else /tmp/relink-soft-UID)",
    },
    ParamDef {
        name: "addr",
        help: "The IPv4 address whose device the provider offers and whose address \
               endpoints take: a rank's own device where a host has several. (default: \
               every device, each with its first IPv4 address)",
    },
    ParamDef {
        name: "give_up",
        help: "Seconds a connection keeps recovering from a device loss before its \
               endpoint is shut down (FI_SHUTDOWN, operations failed with FI_EIO); 0 \
               never gives up. (default: 600)",
    },
    ParamDef {
        name: "connect_timeout",
        help: "Seconds fi_connect keeps trying to reach a listener before FI_ECONNREFUSED; \
               0 tries until the give-up time. (default: 30)",
    },
    ParamDef {
        name: "max_msg_size",
        help: "The largest message in bytes (ep_attr->max_msg_size); larger ones travel in \
               fragments of FI_RELINK_SLOT_SIZE. (default: 1073741824)",
    },
    ParamDef {
        name: "slot_size",
        help: "Bytes of each of a connection's receive slots (relink's max_message): the \
               largest fragment of a message. (default: 65536)",
    },
    ParamDef {
        name: "queue_size",
        help: "Transmit and receive queue depth (tx_attr->size, rx_attr->size): the most \
               operations outstanding per endpoint. (default: 4096)",
    },
];

/// The parameters' values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    /// Where sessions run.
    pub backend: Backend,
    /// The soft devices' directory (`None`: relink's default).
    pub soft_dir: Option<PathBuf>,
    /// The one local address offered (`None`: every device's).
    pub addr: Option<Ipv4Addr>,
    /// The give-up deadline (`None`: never).
    pub give_up: Option<Duration>,
    /// How long a first connect tries (`None`: until the give-up time).
    pub connect_timeout: Option<Duration>,
    /// The largest message.
    pub max_msg_size: usize,
    /// A relink receive slot's bytes: the largest fragment.
    pub slot_size: usize,
    /// Queue depth.
    pub queue_size: usize,
}

/// Where the provider's sessions run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The soft fabric over TCP.
    Soft,
    /// rdma-core.
    Verbs,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            backend: Backend::Soft,
            soft_dir: None,
            addr: None,
            give_up: Some(Duration::from_secs(600)),
            connect_timeout: Some(Duration::from_secs(30)),
            max_msg_size: 1 << 30,
            slot_size: 64 * 1024,
            queue_size: 4096,
        }
    }
}

/// A parameter's value that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("FI_RELINK_{}={value:?}: {why}", .name.to_uppercase())]
pub struct ParamError {
    /// The parameter (after `FI_RELINK_`, lower case).
    pub name: &'static str,
    /// Its value.
    pub value: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// Bounds of `max_msg_size`: relink's message limits.
const MIN_MSG: usize = 64;
const MAX_MSG: usize = 1 << 30;

impl Params {
    /// The values `get` gives for each parameter's name (`None`: unset).
    pub fn read(get: impl Fn(&'static str) -> Option<String>) -> Result<Params, ParamError> {
        let mut p = Params::default();
        let err = |name, value: &str, why| ParamError {
            name,
            value: value.to_string(),
            why,
        };
        if let Some(v) = get("backend") {
            p.backend = match v.as_str() {
                "soft" => Backend::Soft,
                "verbs" => Backend::Verbs,
                _ => return Err(err("backend", &v, "not \"soft\" or \"verbs\"")),
            };
        }
        if let Some(v) = get("soft_dir").filter(|v| !v.is_empty()) {
            p.soft_dir = Some(PathBuf::from(v));
        }
        if let Some(v) = get("addr").filter(|v| !v.is_empty()) {
            p.addr = Some(
                v.trim()
                    .parse::<Ipv4Addr>()
                    .map_err(|_| err("addr", &v, "not an IPv4 address"))?,
            );
        }
        let secs = |name: &'static str, v: &str| {
            v.trim()
                .parse::<u64>()
                .map(|s| (s > 0).then(|| Duration::from_secs(s)))
                .map_err(|_| err(name, v, "not a whole number of seconds"))
        };
        if let Some(v) = get("give_up") {
            p.give_up = secs("give_up", &v)?;
        }
        if let Some(v) = get("connect_timeout") {
            p.connect_timeout = secs("connect_timeout", &v)?;
        }
        if let Some(v) = get("max_msg_size") {
            p.max_msg_size = v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (MIN_MSG..=MAX_MSG).contains(n))
                .ok_or_else(|| err("max_msg_size", &v, "not a size from 64 bytes to 1 GiB"))?;
        }
        if let Some(v) = get("slot_size") {
            p.slot_size = v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (MIN_MSG..=MAX_MSG).contains(n))
                .ok_or_else(|| err("slot_size", &v, "not a size from 64 bytes to 1 GiB"))?;
        }
        if let Some(v) = get("queue_size") {
            p.queue_size = v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=1 << 20).contains(n))
                .ok_or_else(|| err("queue_size", &v, "not a depth from 1 to 1048576"))?;
        }
        Ok(p)
    }

    /// The most bytes `fi_inject` takes: relink copies every message it
    /// is given, so any message up to 4 KiB.
    pub fn inject_size(&self) -> usize {
        self.max_msg_size.min(4096)
    }

    /// The most payload bytes of one fragment (a slot less the header).
    pub fn fragment(&self) -> usize {
        self.slot_size - crate::frame::HEADER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&'static str, &str)]) -> Result<Params, ParamError> {
        Params::read(|n| {
            pairs
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn defaults_and_values() {
        assert_eq!(with(&[]).unwrap(), Params::default());
        let p = with(&[
            ("backend", "verbs"),
            ("give_up", "0"),
            ("connect_timeout", "5"),
            ("max_msg_size", "1048576"),
            ("slot_size", "4096"),
            ("queue_size", "128"),
            ("soft_dir", "/tmp/x"),
            ("addr", "10.10.0.1"),
        ])
        .unwrap();
        assert_eq!(p.addr, Some(Ipv4Addr::new(10, 10, 0, 1)));
        assert_eq!(p.backend, Backend::Verbs);
        assert_eq!(p.give_up, None);
        assert_eq!(p.connect_timeout, Some(Duration::from_secs(5)));
        assert_eq!(
            (p.max_msg_size, p.slot_size, p.queue_size),
            (1 << 20, 4096, 128)
        );
        assert_eq!(p.soft_dir, Some(PathBuf::from("/tmp/x")));
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = with(&[("max_msg_size", "12")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "FI_RELINK_MAX_MSG_SIZE=\"12\": not a size from 64 bytes to 1 GiB"
        );
        assert!(with(&[("backend", "rxe")]).is_err());
        assert!(with(&[("give_up", "-1")]).is_err());
        assert!(with(&[("queue_size", "0")]).is_err());
        assert_eq!(
            with(&[("addr", "rxe0")]).unwrap_err().to_string(),
            "FI_RELINK_ADDR=\"rxe0\": not an IPv4 address"
        );
    }

    #[test]
    fn every_parameter_is_defined() {
        let names: Vec<_> = DEFS.iter().map(|d| d.name).collect();
        // Each name `read` asks for is listed for `fi_info -e`.
        let asked = std::cell::RefCell::new(Vec::new());
        let _ = Params::read(|n| {
            asked.borrow_mut().push(n);
            None
        });
        assert_eq!(*asked.borrow(), names);
    }
}
