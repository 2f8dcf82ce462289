//! What the provider offers, and how it answers `fi_getinfo`: one
//! [`Info`] per device that can carry the addresses asked for, each
//! checked against the application's hints.
//!
//! [`Info`] mirrors the parts of `struct fi_info` the provider reads or
//! fills, in Rust types; the FFI module copies hints into it and the
//! answer out of it. A field of the hints left 0 (or a sub-attribute left
//! NULL) means "any", as libfabric specifies. A hint the provider cannot
//! honour makes the device's answer `FI_ENODATA`, never a weaker answer.

#![forbid(unsafe_code)]

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, ToSocketAddrs};

use relink_fabric::DeviceInfo;

use crate::ffi::sys::*;
use crate::params::Params;

/// The provider's name in `fi_info`, `FI_PROVIDER` and `fi_fabric`.
pub const PROVIDER_NAME: &str = "relink";
/// The fabric name of every answer: one fabric, the devices relink sees.
pub const FABRIC_NAME: &str = "relink";

/// The libfabric API version the provider implements (1.17).
pub const API_VERSION: u32 = (1 << 16) | 17;

/// Capabilities offered: messages, RMA and atomics (8-byte add,
/// read and compare-and-swap), both directions.
pub const CAPS: u64 = FI_MSG
    | FI_RMA
    | FI_ATOMIC
    | FI_REMOTE_CQ_DATA
    | FI_SEND
    | FI_RECV
    | FI_READ
    | FI_WRITE
    | FI_REMOTE_READ
    | FI_REMOTE_WRITE
    | FI_LOCAL_COMM
    | FI_REMOTE_COMM;

/// Domain capabilities: peers in this process and in others.
pub const DOMAIN_CAPS: u64 = FI_LOCAL_COMM | FI_REMOTE_COMM;

/// Completion flags a transmit may ask for: relink completes a message
/// once the peer's application has it, and a WRITE or READ once the peer
/// acknowledged it, which meets all of them.
pub const TX_OP_FLAGS: u64 =
    FI_COMPLETION | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE;

/// Message ordering: messages are delivered in the order sent, each once.
pub const MSG_ORDER: u64 = FI_ORDER_SAS;

/// Bytes of remote CQ data a message (`fi_senddata`) or an RMA write
/// (`fi_writedata`) carries: 4, the immediate data of a verbs WRITE, which
/// relink's WRITE with immediate data keeps (libfabric's verbs provider
/// offers the same). Higher bytes the caller passes are not sent.
pub const CQ_DATA_SIZE: usize = 4;

/// The most ranges an iovec may have (relink's scatter/gather limit).
pub const IOV_LIMIT: usize = 4;

/// Memory registration modes the provider works in when the application
/// uses RMA: keys chosen by the provider (relink's registration ids, the
/// same across every reset and replacement). Remote addresses are the
/// peer's virtual addresses (`FI_MR_VIRT_ADDR`) when the application
/// takes them so — the provider turns one into an offset into the peer's
/// registration through its advertisement — else offsets (`ofi_rxm` needs
/// the virtual addresses: its rendezvous names a buffer inside a larger
/// registration by its address).
pub const MR_MODE_RMA: u64 = FI_MR_PROV_KEY;

/// The attributes of one answer (or one set of hints).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Info {
    /// `caps`.
    pub caps: u64,
    /// `mode`.
    pub mode: u64,
    /// `addr_format`.
    pub addr_format: u32,
    /// `src_addr` (IPv4 socket addresses only).
    pub src: Option<SocketAddrV4>,
    /// `dest_addr`.
    pub dest: Option<SocketAddrV4>,
    /// `tx_attr`.
    pub tx: TxAttr,
    /// `rx_attr`.
    pub rx: RxAttr,
    /// `ep_attr`.
    pub ep: EpAttr,
    /// `domain_attr`.
    pub domain: DomainAttr,
    /// `fabric_attr`.
    pub fabric: FabricAttr,
    /// Whether hints came with domain attributes: without, their
    /// `mr_mode` asks nothing and the provider chooses.
    pub domain_given: bool,
}

/// `struct fi_tx_attr`, the fields the provider uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct TxAttr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: usize,
    pub size: usize,
    pub iov_limit: usize,
    pub rma_iov_limit: usize,
}

/// `struct fi_rx_attr`, the fields the provider uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct RxAttr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub total_buffered_recv: usize,
    pub size: usize,
    pub iov_limit: usize,
}

/// `struct fi_ep_attr`, the fields the provider uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct EpAttr {
    pub ep_type: u32,
    pub protocol: u32,
    pub protocol_version: u32,
    pub max_msg_size: usize,
    pub msg_prefix_size: usize,
    pub mem_tag_format: u64,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
}

/// `struct fi_domain_attr`, the fields the provider uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct DomainAttr {
    pub name: Option<String>,
    pub threading: u32,
    pub control_progress: u32,
    pub data_progress: u32,
    pub resource_mgmt: u32,
    pub av_type: u32,
    pub mr_mode: u64,
    pub mr_key_size: usize,
    pub cq_data_size: usize,
    pub cq_cnt: usize,
    pub ep_cnt: usize,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub max_ep_tx_ctx: usize,
    pub max_ep_rx_ctx: usize,
    pub max_ep_stx_ctx: usize,
    pub max_ep_srx_ctx: usize,
    pub mr_iov_limit: usize,
    pub caps: u64,
    pub mode: u64,
    pub mr_cnt: usize,
}

/// `struct fi_fabric_attr`, the fields the provider uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct FabricAttr {
    pub name: Option<String>,
    pub prov_name: Option<String>,
    pub prov_version: u32,
    pub api_version: u32,
}

/// The provider's version as libfabric shows it: relink's major.minor.
pub fn provider_version() -> u32 {
    let mut parts = env!("CARGO_PKG_VERSION")
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major << 16) | (minor & 0xffff)
}

/// Why a getinfo found nothing, as libfabric's errno.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GetinfoError {
    /// No device can carry what the hints ask (`FI_ENODATA`).
    #[error("no device fits: {0}")]
    NoData(String),
    /// The node or service does not name an IPv4 address and port
    /// (`FI_EINVAL`).
    #[error("{0}")]
    BadAddress(String),
}

impl GetinfoError {
    /// The negative errno libfabric expects.
    pub fn errno(&self) -> i32 {
        match self {
            GetinfoError::NoData(_) => -(FI_ENODATA as i32),
            GetinfoError::BadAddress(_) => -(FI_EINVAL as i32),
        }
    }
}

/// `fi_getinfo`'s node, service and flags, as the provider reads them.
#[derive(Debug, Clone, Default)]
pub struct Query<'a> {
    /// `node`: a host name or IPv4 address.
    pub node: Option<&'a str>,
    /// `service`: a port number.
    pub service: Option<&'a str>,
    /// `FI_SOURCE` in `flags`: node and service name the local address.
    pub source: bool,
    /// The API version the application asked for (`FI_VERSION(major,
    /// minor)`); 0 stands for the provider's own.
    pub version: u32,
}

/// `FI_VERSION(1, 5)`: before it, `mr_mode` was one of `FI_MR_UNSPEC`,
/// `FI_MR_BASIC` and `FI_MR_SCALABLE`, and a provider that needs local
/// buffers registered said so with `FI_LOCAL_MR` in `mode`.
const MR_BITS_VERSION: u32 = (1 << 16) | 5;

/// Whether `version` speaks the old `mr_mode` (see [`MR_BITS_VERSION`]).
fn old_mr_api(version: u32) -> bool {
    version != 0 && version < MR_BITS_VERSION
}

/// The answers for `query` and `hints` on `devices`: one per device
/// that fits, in the devices' order.
pub fn getinfo(
    devices: &[DeviceInfo],
    query: &Query<'_>,
    hints: Option<&Info>,
    params: &Params,
) -> Result<Vec<Info>, GetinfoError> {
    let default = Info::default();
    let hints = hints.unwrap_or(&default);
    check_hints(hints, params, query.version)?;
    let (mut src, mut dest) = (hints.src, hints.dest);
    if let Some(addr) = query_addr(query)? {
        if query.source {
            src = Some(addr);
        } else {
            dest = Some(addr);
        }
    }
    let mut out = Vec::new();
    let mut refusals = Vec::new();
    for d in devices {
        if let Some(want) = &hints.domain.name {
            if *want != d.id.name {
                refusals.push(format!("{}: not the domain {want}", d.id.name));
                continue;
            }
        }
        let Some(local) = local_addr(d, src, dest, params.addr) else {
            refusals.push(format!(
                "{}: owns no {} address{}",
                d.id.name,
                src.map(|s| *s.ip())
                    .filter(|ip| !ip.is_unspecified())
                    .or(params.addr)
                    .map(|ip| ip.to_string())
                    .unwrap_or_else(|| "IPv4".into()),
                dest.map(|a| format!(" that reaches {}", a.ip()))
                    .unwrap_or_default()
            ));
            continue;
        };
        out.push(answer(hints, d, local, dest, params, query.version));
    }
    if out.is_empty() {
        let why = if devices.is_empty() {
            "no relink device is present (add one: relink soft-device add)".to_string()
        } else {
            refusals.join("; ")
        };
        return Err(GetinfoError::NoData(why));
    }
    Ok(out)
}

/// The node and service as a socket address.
fn query_addr(q: &Query<'_>) -> Result<Option<SocketAddrV4>, GetinfoError> {
    if q.node.is_none() && q.service.is_none() {
        return Ok(None);
    }
    let port = match q.service {
        None => 0,
        Some(s) => s
            .parse::<u16>()
            .map_err(|_| GetinfoError::BadAddress(format!("service {s:?} is not a port number")))?,
    };
    let ip = match q.node {
        None => Ipv4Addr::UNSPECIFIED,
        Some(n) => match n.parse::<Ipv4Addr>() {
            Ok(ip) => ip,
            Err(_) => (n, port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut it| {
                    it.find_map(|a| match a {
                        SocketAddr::V4(v4) => Some(*v4.ip()),
                        SocketAddr::V6(_) => None,
                    })
                })
                .ok_or_else(|| {
                    GetinfoError::BadAddress(format!("node {n:?} has no IPv4 address"))
                })?,
        },
    };
    Ok(Some(SocketAddrV4::new(ip, port)))
}

/// The address of device `d` for an endpoint at `src` (its port kept)
/// talking to `dest`, if the device owns `src` (and `only`, the
/// `FI_RELINK_ADDR` parameter) and reaches `dest`.
fn local_addr(
    d: &DeviceInfo,
    src: Option<SocketAddrV4>,
    dest: Option<SocketAddrV4>,
    only: Option<Ipv4Addr>,
) -> Option<SocketAddrV4> {
    let port = src.map(|s| s.port()).unwrap_or(0);
    let wanted = src.map(|s| *s.ip()).filter(|ip| !ip.is_unspecified());
    d.addrs.iter().find_map(|net| {
        let std::net::IpAddr::V4(ip) = net.addr else {
            return None;
        };
        if wanted.is_some_and(|w| w != ip) || only.is_some_and(|o| o != ip) {
            return None;
        }
        if let Some(dest) = dest {
            if !net.contains((*dest.ip()).into()) {
                return None;
            }
        }
        Some(SocketAddrV4::new(ip, port))
    })
}

/// Hints the provider can never meet, whatever the device.
fn check_hints(h: &Info, params: &Params, version: u32) -> Result<(), GetinfoError> {
    let no = |why: String| Err(GetinfoError::NoData(why));
    if h.caps & !CAPS != 0 {
        return no(format!(
            "capabilities {:#x} are not offered (FI_MSG, FI_RMA and FI_ATOMIC are)",
            h.caps & !CAPS
        ));
    }
    if !matches!(h.ep.ep_type, FI_EP_UNSPEC | FI_EP_MSG) {
        return no("only FI_EP_MSG endpoints are offered (FI_EP_RDM through ofi_rxm)".into());
    }
    if !matches!(
        h.addr_format,
        FI_FORMAT_UNSPEC | FI_SOCKADDR | FI_SOCKADDR_IN
    ) {
        return no("only FI_SOCKADDR_IN addresses are offered".into());
    }
    if let Some(name) = &h.fabric.name {
        if name != FABRIC_NAME {
            return no(format!("not the fabric {name}"));
        }
    }
    if h.ep.mem_tag_format != 0 {
        return no("tagged messages are ofi_rxm's (FI_PROVIDER=\"relink;ofi_rxm\")".into());
    }
    if h.ep.max_msg_size > params.max_msg_size.min(crate::frame::MAX_MESSAGE) {
        return no(format!(
            "max_msg_size {} is over FI_RELINK_MAX_MSG_SIZE ({})",
            h.ep.max_msg_size, params.max_msg_size
        ));
    }
    if h.domain.caps & !DOMAIN_CAPS != 0 {
        return no(format!(
            "domain capabilities {:#x} are not offered (FI_LOCAL_COMM and FI_REMOTE_COMM are)",
            h.domain.caps & !DOMAIN_CAPS
        ));
    }
    if h.domain.cq_data_size > CQ_DATA_SIZE {
        return no(format!("remote CQ data of more than {CQ_DATA_SIZE} bytes"));
    }
    let tx = &h.tx;
    if tx.op_flags & !TX_OP_FLAGS != 0 {
        return no(format!(
            "tx op_flags {:#x} are not offered",
            tx.op_flags & !TX_OP_FLAGS
        ));
    }
    if tx.msg_order & !MSG_ORDER != 0 || h.rx.msg_order & !MSG_ORDER != 0 {
        return no("only FI_ORDER_SAS is offered".into());
    }
    if tx.size > params.queue_size || h.rx.size > params.queue_size {
        return no(format!(
            "queue sizes over FI_RELINK_QUEUE_SIZE ({})",
            params.queue_size
        ));
    }
    if tx.iov_limit > IOV_LIMIT || h.rx.iov_limit > IOV_LIMIT {
        return no(format!("iovecs of more than {IOV_LIMIT} ranges"));
    }
    if tx.inject_size > params.inject_size() {
        return no(format!("inject_size over {}", params.inject_size()));
    }
    if h.rx.op_flags & !FI_COMPLETION != 0 {
        return no("rx op_flags other than FI_COMPLETION (no FI_MULTI_RECV)".into());
    }
    mr_mode(h, version).map(|_| ())
}

/// The memory registration mode for these hints and API `version`: what
/// RMA needs ([`MR_MODE_RMA`]) when the application asks for RMA, plus
/// `FI_MR_LOCAL` when the application can register its buffers (then
/// messages from and to them are not copied; without it every buffer is
/// taken as it is). Hints without domain attributes get the provider's
/// own; `FI_MR_BASIC` (virtual addresses, provider keys, allocated
/// memory) is relink's RMA as well; `FI_MR_SCALABLE` (keys of the
/// application's choosing) is not offered. An API before 1.5 gets
/// `FI_MR_BASIC`, as it knows no bits.
pub fn mr_mode(h: &Info, version: u32) -> Result<u64, GetinfoError> {
    let user = if h.domain_given {
        h.domain.mr_mode
    } else {
        FI_MR_UNSPEC as u64
    };
    let rma = h.caps == 0 || h.caps & (FI_RMA | FI_ATOMIC) != 0;
    let basic = FI_MR_BASIC as u64;
    let scalable = FI_MR_SCALABLE as u64;
    if old_mr_api(version) {
        if user != FI_MR_UNSPEC as u64 && user != basic {
            return Err(GetinfoError::NoData(
                "FI_MR_SCALABLE is not offered: keys are the provider's (FI_MR_BASIC)".into(),
            ));
        }
        if rma && h.mode & FI_LOCAL_MR == 0 {
            return Err(GetinfoError::NoData(
                "RMA needs its local buffers registered (FI_LOCAL_MR in mode)".into(),
            ));
        }
        return Ok(basic);
    }
    if !h.domain_given {
        return Ok(if rma {
            MR_MODE_RMA | FI_MR_VIRT_ADDR
        } else {
            0
        });
    }
    if user & basic != 0 {
        if user != basic {
            return Err(GetinfoError::NoData(
                "FI_MR_BASIC with other mr_mode bits".into(),
            ));
        }
        return Ok(basic);
    }
    if user & scalable != 0 {
        return Err(GetinfoError::NoData(
            "FI_MR_SCALABLE is not offered: keys are the provider's (FI_MR_PROV_KEY)".into(),
        ));
    }
    let mut mode = user & FI_MR_LOCAL;
    if rma {
        if user & MR_MODE_RMA != MR_MODE_RMA {
            return Err(GetinfoError::NoData(
                "RMA needs FI_MR_PROV_KEY in mr_mode".into(),
            ));
        }
        mode |= MR_MODE_RMA | (user & FI_MR_VIRT_ADDR);
    }
    Ok(mode)
}

/// The answer of device `d`, at `local`, for `hints`.
fn answer(
    hints: &Info,
    d: &DeviceInfo,
    local: SocketAddrV4,
    dest: Option<SocketAddrV4>,
    params: &Params,
    version: u32,
) -> Info {
    // The primary capabilities asked (all with none), and the secondary
    // ones that come with them; remote CQ data only when asked (it is no
    // capability fi_getinfo(3) lists, and an application that did not
    // ask for it must not find it among the answer's).
    let caps = if hints.caps == 0 {
        CAPS & !FI_REMOTE_CQ_DATA
    } else {
        hints.caps | (CAPS & !(FI_MSG | FI_RMA | FI_ATOMIC | FI_REMOTE_CQ_DATA))
    };
    let queue = |asked: usize| if asked == 0 { params.queue_size } else { asked };
    Info {
        caps,
        // The old API's way to say "register local buffers" (RMA's).
        mode: if old_mr_api(version) && (hints.caps == 0 || hints.caps & (FI_RMA | FI_ATOMIC) != 0)
        {
            FI_LOCAL_MR
        } else {
            0
        },
        addr_format: FI_SOCKADDR_IN,
        src: Some(local),
        dest,
        tx: TxAttr {
            caps: caps & (FI_MSG | FI_RMA | FI_ATOMIC | FI_SEND | FI_READ | FI_WRITE),
            mode: 0,
            op_flags: hints.tx.op_flags & TX_OP_FLAGS,
            msg_order: MSG_ORDER,
            comp_order: FI_ORDER_NONE,
            inject_size: params.inject_size(),
            size: queue(hints.tx.size),
            iov_limit: IOV_LIMIT,
            rma_iov_limit: 1,
        },
        rx: RxAttr {
            caps: caps
                & (FI_MSG
                    | FI_RMA
                    | FI_ATOMIC
                    | FI_RECV
                    | FI_REMOTE_READ
                    | FI_REMOTE_WRITE
                    | FI_REMOTE_CQ_DATA),
            mode: 0,
            op_flags: hints.rx.op_flags & FI_COMPLETION,
            msg_order: MSG_ORDER,
            comp_order: FI_ORDER_NONE,
            total_buffered_recv: 0,
            size: queue(hints.rx.size),
            iov_limit: IOV_LIMIT,
        },
        ep: EpAttr {
            ep_type: FI_EP_MSG,
            protocol: FI_PROTO_UNSPEC,
            protocol_version: relink::wire::VERSION as u32,
            max_msg_size: params.max_msg_size,
            msg_prefix_size: 0,
            mem_tag_format: 0,
            // One context each, or a shared one when asked
            // (`fi_stx_context`, `fi_srx_context`).
            tx_ctx_cnt: if hints.ep.tx_ctx_cnt as u64 == FI_SHARED_CONTEXT {
                hints.ep.tx_ctx_cnt
            } else {
                1
            },
            rx_ctx_cnt: if hints.ep.rx_ctx_cnt as u64 == FI_SHARED_CONTEXT {
                hints.ep.rx_ctx_cnt
            } else {
                1
            },
        },
        domain: DomainAttr {
            name: Some(d.id.name.clone()),
            threading: FI_THREAD_SAFE,
            // Both: a thread of the provider's makes progress, and so
            // does every call (the hint's choice is echoed).
            control_progress: progress(hints.domain.control_progress),
            data_progress: progress(hints.domain.data_progress),
            resource_mgmt: FI_RM_ENABLED,
            av_type: FI_AV_UNSPEC,
            mr_mode: mr_mode(hints, version).unwrap_or(MR_MODE_RMA),
            mr_key_size: 4,
            cq_data_size: CQ_DATA_SIZE,
            cq_cnt: 1024,
            ep_cnt: 65536,
            tx_ctx_cnt: 65536,
            rx_ctx_cnt: 65536,
            max_ep_tx_ctx: 1,
            max_ep_rx_ctx: 1,
            max_ep_stx_ctx: 1,
            max_ep_srx_ctx: 1,
            mr_iov_limit: 1,
            caps: DOMAIN_CAPS,
            mode: 0,
            mr_cnt: 1 << 20,
        },
        fabric: FabricAttr {
            name: Some(FABRIC_NAME.into()),
            prov_name: None,
            prov_version: provider_version(),
            api_version: API_VERSION,
        },
        domain_given: true,
    }
}

/// The progress model answered for a hint: the one asked, else
/// `FI_PROGRESS_AUTO`.
fn progress(asked: u32) -> u32 {
    match asked {
        FI_PROGRESS_MANUAL => FI_PROGRESS_MANUAL,
        _ => FI_PROGRESS_AUTO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relink_fabric::{DeviceId, Guid, PortState};

    /// Two devices on one subnet, as rxe0 and rxe1 in the VM tier.
    fn two() -> Vec<DeviceInfo> {
        [("rxe0", "10.10.0.1/24"), ("rxe1", "10.10.0.2/24")]
            .iter()
            .enumerate()
            .map(|(i, (name, net))| DeviceInfo {
                id: DeviceId {
                    name: name.to_string(),
                    index: i as u32,
                    generation: 1,
                },
                node_guid: Guid(i as u64 + 1),
                addrs: vec![net.parse().unwrap()],
                netdev: None,
                port_state: PortState::Active,
            })
            .collect()
    }

    fn srcs(out: &[Info]) -> Vec<String> {
        out.iter().map(|i| i.src.unwrap().to_string()).collect()
    }

    #[test]
    fn every_device_answers_unless_fi_relink_addr_names_one() {
        let dest = Query {
            node: Some("10.10.0.2"),
            service: Some("7000"),
            source: false,
            version: 0,
        };
        let all = getinfo(&two(), &dest, None, &Params::default()).unwrap();
        assert_eq!(srcs(&all), ["10.10.0.1:0", "10.10.0.2:0"]);

        let p = Params {
            addr: Some(Ipv4Addr::new(10, 10, 0, 1)),
            ..Params::default()
        };
        let one = getinfo(&two(), &dest, None, &p).unwrap();
        assert_eq!(srcs(&one), ["10.10.0.1:0"]);
        assert_eq!(one[0].dest.unwrap().to_string(), "10.10.0.2:7000");

        // A listener at an address the parameter excludes: nothing, and
        // why.
        let listen = Query {
            node: Some("10.10.0.2"),
            service: Some("7000"),
            source: true,
            version: 0,
        };
        match getinfo(&two(), &listen, None, &p) {
            Err(GetinfoError::NoData(why)) => {
                assert!(why.contains("rxe0: owns no 10.10.0.2 address"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        let other = Params {
            addr: Some(Ipv4Addr::new(10, 10, 9, 9)),
            ..Params::default()
        };
        match getinfo(&two(), &Query::default(), None, &other) {
            Err(GetinfoError::NoData(why)) => {
                assert!(why.contains("rxe1: owns no 10.10.9.9 address"), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }
}
