//! The provider on rdma-core (see the crate docs for the design).

use std::collections::{HashMap, VecDeque};
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::raw::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, UNIX_EPOCH};

use relink_fabric::{
    check_private_data, Access, AsyncEvent, CmError, CmEvent, CmEventKind, CmId, ConnParams,
    ContextId, CqId, CreateError, DestroyError, Destroyed, DeviceEvent, DeviceEventKind, DeviceId,
    DeviceInfo, Event, Guid, IpNet, Memory, MemoryError, MrId, MrInfo, MwBind, MwId, MwInfo,
    MwType, ObjectCounts, OpenError, PdId, PollError, PortState, PostError, Provider, QpId, QpInit,
    QpState, RecvWr, SendOp, SendWr, Sge, SrqId, SrqInit, Timestamp, WcOpcode, WcStatus,
    WorkCompletion, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA,
};
use relink_verbs_sys as sys;

use crate::convert;
use crate::errno::{self, codes, CmOp};
use crate::identity::{DeviceBook, Generations, Observed, RegKey};
use crate::memory::{Allocations, MappedMemory};
use crate::track::{Notify, OnEvent, RecvQueue, SendQueue, SqEntry};
use crate::{init_environment, VerbsConfig, VerbsError};

/// `IBV_LINK_LAYER_INFINIBAND` (a `#define`, not in the bindings).
const LINK_LAYER_INFINIBAND: u8 = 1;
/// rdma_cm's workaround mask for IB ports (librdmacm `ucma_modify_qp_rtr`).
const IB_RTR_MASK_OFF: c_int = 0xe0_0000;
/// The vendor id rxe (Soft-RoCE) reports. Two rxe deviations are worked
/// around on its contexts: it reports a received SEND_WITH_INV with the
/// kernel's `IB_WC_WITH_INVALIDATE` bit (1 << 2, which is
/// `IBV_WC_IP_CSUM_OK` in user space) instead of `IBV_WC_WITH_INV`; and
/// (kernel 6.1) it raises no `IBV_EVENT_QP_LAST_WQE_REACHED` when an
/// SRQ-attached QP enters the error state, so the provider does.
const RXE_VENDOR_ID: u32 = 0x00ff_ffff;
/// The kernel's `IB_WC_WITH_INVALIDATE`, as rxe leaks it to user space.
const RXE_WC_WITH_INVALIDATE: u32 = 1 << 2;
/// Work completions polled per `ibv_poll_cq` call.
const POLL_BATCH: usize = 16;
/// How often CQs armed for solicited completions are checked for errors
/// (see `Notify::error_completion`).
const SOLICITED_SCAN: Duration = Duration::from_millis(20);
/// Longest a `wait` sleeps before looking again (a safety net only).
const MAX_SLEEP: Duration = Duration::from_millis(200);

/// Generations of device registrations, shared by every provider of the
/// process so that they agree on a device's `DeviceId`.
static GENERATIONS: Mutex<Option<Generations>> = Mutex::new(None);

fn with_generations<R>(f: impl FnOnce(&mut Generations) -> R) -> R {
    let mut g = GENERATIONS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Generations::new))
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(codes::EIO)
}

/// A non-null pointer to an rdma-core object.
struct Ptr<T>(NonNull<T>);

impl<T> Clone for Ptr<T> {
    fn clone(&self) -> Ptr<T> {
        *self
    }
}
impl<T> Copy for Ptr<T> {}

// SAFETY: rdma-core objects may be used from any thread (libibverbs and
// librdmacm are thread-safe); every use here happens under the provider's
// lock, and an object is destroyed exactly once, after which its `Ptr` is
// dropped from the tables.
unsafe impl<T> Send for Ptr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Ptr<T> {}

impl<T> Ptr<T> {
    fn new(p: *mut T) -> Option<Ptr<T>> {
        NonNull::new(p).map(Ptr)
    }
    fn get(self) -> *mut T {
        self.0.as_ptr()
    }
    fn key(self) -> usize {
        self.0.as_ptr() as usize
    }
}

impl<T> std::fmt::Debug for Ptr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:p}", self.0)
    }
}

// ---------------------------------------------------------------------
// device scanning
// ---------------------------------------------------------------------

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
fn port_down_listed(name: &str) -> bool {
    std::path::Path::new(&format!("/sys/class/infiniband/{name}")).exists()
        && sysfs_port_state(name) != PortState::Active
}

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
unsafe fn reg_key(dev: *mut sys::ibv_device) -> (RegKey, u32) {
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

/// Every device the kernel lists now.
fn scan_devices() -> Vec<Observed> {
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
fn resync_librdmacm() {
    let mut n: c_int = 0;
    // SAFETY: no preconditions; the list is given back below.
    let list = unsafe { sys::rdma_get_devices(&mut n) };
    if !list.is_null() {
        // SAFETY: the list came from rdma_get_devices and is freed once.
        unsafe { sys::rdma_free_devices(list) };
    }
}

// ---------------------------------------------------------------------
// socket addresses
// ---------------------------------------------------------------------

/// # Safety
/// `p` is null or points to a socket address valid for its family.
unsafe fn sockaddr_to_std(p: *const libc::sockaddr) -> Option<SocketAddr> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees `p` points to a sockaddr.
    let family = c_int::from(unsafe { (*p).sa_family });
    match family {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let s = unsafe { &*p.cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
                u16::from_be(s.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let s = unsafe { &*p.cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(s.sin6_addr.s6_addr),
                u16::from_be(s.sin6_port),
                s.sin6_flowinfo,
                s.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// A socket address in C form.
struct CAddr {
    storage: libc::sockaddr_storage,
}

impl CAddr {
    fn new(a: SocketAddr) -> CAddr {
        // SAFETY: sockaddr_storage is plain data; all-zero is valid.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        match a {
            SocketAddr::V4(v4) => {
                let s = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: v4.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from(*v4.ip()).to_be(),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is large and aligned enough for
                // any socket address.
                unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), s) };
            }
            SocketAddr::V6(v6) => {
                let s = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: v6.port().to_be(),
                    sin6_flowinfo: v6.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: v6.ip().octets(),
                    },
                    sin6_scope_id: v6.scope_id(),
                };
                // SAFETY: as above.
                unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), s) };
            }
        }
        CAddr { storage }
    }

    fn as_ptr(&mut self) -> *mut sys::sockaddr {
        (&mut self.storage as *mut libc::sockaddr_storage).cast()
    }
}

// ---------------------------------------------------------------------
// state
// ---------------------------------------------------------------------

struct Ctx {
    device: DeviceId,
    /// `None` once released (the device was lost).
    raw: Option<Ptr<sys::ibv_context>>,
    chan: Option<Ptr<sys::ibv_comp_channel>>,
    port: u8,
    link_layer: u8,
    max_qp_rd_atom: u8,
    max_qp_init_rd_atom: u8,
    /// Soft-RoCE (rxe) quirks apply (see [`RXE_VENDOR_ID`]).
    rxe: bool,
}

struct Pd {
    ctx: u64,
    raw: Option<Ptr<sys::ibv_pd>>,
}

struct Cq {
    ctx: u64,
    raw: Option<Ptr<sys::ibv_cq>>,
    depth: u32,
    pending: VecDeque<WorkCompletion>,
    notify: Notify,
}

struct Srq {
    ctx: u64,
    pd: u64,
    raw: Option<Ptr<sys::ibv_srq>>,
    init: SrqInit,
}

struct Mr {
    ctx: u64,
    pd: u64,
    raw: Option<Ptr<sys::ibv_mr>>,
    /// Keeps the memory mapped while registered.
    _memory: Memory,
}

struct Mw {
    ctx: u64,
    pd: u64,
    raw: Option<Ptr<sys::ibv_mw>>,
    kind: MwType,
}

struct Qp {
    ctx: u64,
    pd: u64,
    raw: Option<Ptr<sys::ibv_qp>>,
    qpn: u32,
    init: QpInit,
    state: QpState,
    sq: SendQueue,
    rq: RecvQueue,
    cm: Option<u64>,
    last_wqe_reported: bool,
}

struct CmRec {
    raw: Ptr<sys::rdma_cm_id>,
    device: Option<DeviceId>,
    qp: Option<u64>,
    params: ConnParams,
    /// From the connection request: what the initiator asked for.
    req_responder_resources: u8,
    req_initiator_depth: u8,
    removal_reported: bool,
    disconnect_reported: bool,
    lost: bool,
    /// A CM exchange began on this id (it sent a connection request or
    /// received one): destroying it, or disconnecting it, sends a message
    /// (DREQ, REJ) through the kernel's CM.
    wire: bool,
}

impl CmRec {
    /// Whether a CM message this id would send now must wait: an exchange
    /// began on it and its device is listed with its port down.
    fn must_defer_mads(&self) -> bool {
        self.wire
            && !self.lost
            && self
                .device
                .as_ref()
                .is_some_and(|d| port_down_listed(&d.name))
    }
}

/// A CM id the caller destroyed while its device's port was down, kept
/// until the port is ACTIVE again (or the device goes) and destroyed then.
struct ParkedId {
    raw: Ptr<sys::rdma_cm_id>,
    device: DeviceId,
}

struct Inner {
    next_handle: u64,
    book: DeviceBook,
    last_scan: Vec<RegKey>,
    resync_pending: bool,
    rescan_requested: bool,
    events: VecDeque<Event>,
    activity: bool,
    fds_changed: bool,
    ctxs: HashMap<u64, Ctx>,
    pds: HashMap<u64, Pd>,
    cqs: HashMap<u64, Cq>,
    srqs: HashMap<u64, Srq>,
    mrs: HashMap<u64, Mr>,
    mws: HashMap<u64, Mw>,
    qps: HashMap<u64, Qp>,
    cms: HashMap<u64, CmRec>,
    cq_by_ptr: HashMap<usize, u64>,
    qp_by_ptr: HashMap<usize, u64>,
    srq_by_ptr: HashMap<usize, u64>,
    qp_by_num: HashMap<(u64, u32), u64>,
    cm_by_ptr: HashMap<usize, u64>,
    /// CM ids destroyed by the caller while their port was down. Destroying
    /// a connected id sends a DREQ (a connecting one a REJ) through the
    /// port's GSI QP; with the netdev down the kernel finds no route, and
    /// rxe (6.1, 6.12) then moves QP1 to the error state for good: no
    /// connection can be made on that device again, and `rdma link delete`
    /// of it hangs. So such ids are destroyed once the port is ACTIVE again
    /// (at a re-scan), or at once when the device goes.
    parked: Vec<ParkedId>,
    allocs: Allocations,
}

struct Shared {
    inner: Mutex<Inner>,
    cond: Condvar,
    start: Instant,
    stop: AtomicBool,
    wake: OwnedFd,
    channel: Ptr<sys::rdma_event_channel>,
    rescan_interval: Duration,
    default_source: Option<IpAddr>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> Timestamp {
        Timestamp(self.start.elapsed().as_nanos() as u64)
    }

    /// Wake the event thread (the set of fds changed, a rescan is wanted,
    /// or it must stop).
    fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a live u64 to our own eventfd.
        let _ = unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }
}

/// Asks a provider's event thread to re-scan the device list now: the hook
/// for an external device watcher (RDMA netlink, uevents). Holds the
/// provider's state alive, not its thread.
#[derive(Clone)]
pub struct RescanHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RescanHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RescanHandle")
    }
}

impl RescanHandle {
    /// Re-scan soon (the event thread does it at once).
    pub fn rescan(&self) {
        self.shared.lock().rescan_requested = true;
        self.shared.kick();
    }
}

/// The rdma-core provider (see the crate docs).
pub struct VerbsProvider {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The device watcher that asks for re-scans (dropped first).
    watcher: Option<relink_devwatch::watch::DeviceWatcher>,
}

impl std::fmt::Debug for VerbsProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsProvider").finish_non_exhaustive()
    }
}

fn set_nonblocking(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl on an fd we own (or rdma-core owns for us) with
    // standard flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl VerbsProvider {
    /// A provider with the default settings.
    pub fn new() -> Result<VerbsProvider, VerbsError> {
        VerbsProvider::with_config(VerbsConfig::default())
    }

    /// A provider with `config`. Sets `RDMAV_ALLOW_DISASSOC_DESTROY=1`
    /// (unless set) before its first verbs call, opens an rdma_cm event
    /// channel, scans the devices and starts the event thread.
    pub fn with_config(config: VerbsConfig) -> Result<VerbsProvider, VerbsError> {
        init_environment();
        // SAFETY: no preconditions; destroyed in Drop.
        let channel = unsafe { sys::rdma_create_event_channel() };
        let channel = Ptr::new(channel).ok_or_else(|| {
            VerbsError::Unavailable(format!(
                "rdma_create_event_channel: {} (is the rdma_ucm module loaded?)",
                errno::describe(last_errno())
            ))
        })?;
        // SAFETY: the channel is valid; its fd is owned by librdmacm.
        let chan_fd = unsafe { (*channel.get()).fd };
        if let Err(e) = set_nonblocking(chan_fd) {
            // SAFETY: created above, no ids on it.
            unsafe { sys::rdma_destroy_event_channel(channel.get()) };
            return Err(e.into());
        }
        // SAFETY: eventfd has no preconditions; the fd is owned below.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: created above, no ids on it.
            unsafe { sys::rdma_destroy_event_channel(channel.get()) };
            return Err(e.into());
        }
        // SAFETY: `efd` is a fresh fd nobody else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(efd) };
        let mut inner = Inner {
            next_handle: 1,
            book: DeviceBook::new(),
            last_scan: Vec::new(),
            resync_pending: false,
            rescan_requested: false,
            events: VecDeque::new(),
            activity: false,
            fds_changed: true,
            ctxs: HashMap::new(),
            pds: HashMap::new(),
            cqs: HashMap::new(),
            srqs: HashMap::new(),
            mrs: HashMap::new(),
            mws: HashMap::new(),
            qps: HashMap::new(),
            cms: HashMap::new(),
            cq_by_ptr: HashMap::new(),
            qp_by_ptr: HashMap::new(),
            srq_by_ptr: HashMap::new(),
            qp_by_num: HashMap::new(),
            cm_by_ptr: HashMap::new(),
            parked: Vec::new(),
            allocs: Allocations::default(),
        };
        // Devices present now are known before the first call returns; they
        // are not reported as `Added`.
        inner.rescan();
        inner.events.clear();
        let shared = Arc::new(Shared {
            inner: Mutex::new(inner),
            cond: Condvar::new(),
            start: Instant::now(),
            stop: AtomicBool::new(false),
            wake,
            channel,
            rescan_interval: config.rescan_interval,
            default_source: config.default_source,
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("relink-verbs-events".into())
            .spawn(move || event_loop(&s))?;
        let watcher = if config.watch_devices {
            start_watcher(RescanHandle {
                shared: shared.clone(),
            })
        } else {
            None
        };
        Ok(VerbsProvider {
            shared,
            thread: Some(thread),
            watcher,
        })
    }

    /// The backend of the device watcher the provider runs, if one runs
    /// (`"rdma-netlink"` or `"uevent"`).
    pub fn watch_backend(&self) -> Option<&'static str> {
        self.watcher.as_ref().map(|w| match w.backend() {
            relink_devwatch::Backend::Netlink => "rdma-netlink",
            relink_devwatch::Backend::Uevent => "uevent",
            relink_devwatch::Backend::Rescan => "rescan",
        })
    }

    /// Re-scan the device list now (the event thread does it).
    pub fn rescan_now(&self) {
        self.rescan_handle().rescan();
    }

    /// A handle an external device watcher can keep to ask for re-scans.
    pub fn rescan_handle(&self) -> RescanHandle {
        RescanHandle {
            shared: self.shared.clone(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.shared.lock()
    }

    fn channel(&self) -> *mut sys::rdma_event_channel {
        self.shared.channel.get()
    }
}

/// A device watcher whose every event asks for a re-scan (the scan decides
/// what changed, so both watcher and periodic scan feed one bookkeeping).
fn start_watcher(handle: RescanHandle) -> Option<relink_devwatch::watch::DeviceWatcher> {
    use relink_devwatch::watch::{DeviceWatcher, WatchConfig};
    match DeviceWatcher::with_callback(WatchConfig::default(), move |ev| {
        tracing::debug!(event = %ev, "device watcher: re-scan");
        handle.rescan();
    }) {
        // A re-scanning watcher would only repeat the provider's own scan.
        Ok(w) if w.backend() == relink_devwatch::Backend::Rescan => None,
        Ok(w) => {
            tracing::debug!(backend = %w.backend(), "device watcher started");
            Some(w)
        }
        Err(e) => {
            tracing::warn!(
                error = %e,
                "no device watcher; device changes are seen at the periodic re-scan"
            );
            None
        }
    }
}

impl Drop for VerbsProvider {
    fn drop(&mut self) {
        drop(self.watcher.take());
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.kick();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let mut inner = self.shared.lock();
        inner.release_everything();
        // SAFETY: every id on the channel was destroyed above; the channel
        // is destroyed once, and the event thread has stopped.
        unsafe { sys::rdma_destroy_event_channel(self.shared.channel.get()) };
        resync_librdmacm();
    }
}

// ---------------------------------------------------------------------
// the event thread
// ---------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Src {
    Wake,
    Cm,
    Async(u64),
    Comp(u64),
}

fn event_loop(sh: &Arc<Shared>) {
    let mut next_scan = Instant::now() + sh.rescan_interval;
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut srcs: Vec<Src> = Vec::new();
    let chan_fd = {
        // SAFETY: the channel lives until the provider drops, after this
        // thread ended.
        unsafe { (*sh.channel.get()).fd }
    };
    while !sh.stop.load(Ordering::SeqCst) {
        {
            let mut inner = sh.lock();
            if inner.fds_changed || fds.is_empty() {
                inner.fds_changed = false;
                fds.clear();
                srcs.clear();
                let mut push = |fd: RawFd, s: Src| {
                    fds.push(libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    });
                    srcs.push(s);
                };
                push(sh.wake.as_raw_fd(), Src::Wake);
                push(chan_fd, Src::Cm);
                for (h, c) in &inner.ctxs {
                    if let (Some(raw), Some(ch)) = (c.raw, c.chan) {
                        // SAFETY: the context and channel are live (under
                        // the lock); their fds are read only.
                        let (afd, cfd) = unsafe { ((*raw.get()).async_fd, (*ch.get()).fd) };
                        push(afd, Src::Async(*h));
                        push(cfd, Src::Comp(*h));
                    }
                }
            }
        }
        let cap = if sh.lock().scan_solicited_cqs() {
            SOLICITED_SCAN
        } else {
            Duration::from_secs(1)
        };
        let timeout = next_scan
            .saturating_duration_since(Instant::now())
            .min(cap)
            .as_millis() as c_int;
        for p in &mut fds {
            p.revents = 0;
        }
        // SAFETY: `fds` is a valid array of pollfd of that length. An fd
        // closed meanwhile by another thread is harmless: poll holds its
        // own reference, and every close kicks the wake fd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        let mut inner = sh.lock();
        if n > 0 {
            for (p, s) in fds.iter().zip(&srcs) {
                if p.revents == 0 {
                    continue;
                }
                match *s {
                    Src::Wake => {
                        let mut buf = 0u64;
                        // SAFETY: reading 8 bytes into a live u64 from our
                        // nonblocking eventfd.
                        let _ = unsafe {
                            libc::read(
                                sh.wake.as_raw_fd(),
                                (&mut buf as *mut u64).cast(),
                                std::mem::size_of::<u64>(),
                            )
                        };
                    }
                    Src::Cm => inner.drain_cm_events(sh.channel),
                    Src::Async(h) => inner.drain_async_events(h),
                    Src::Comp(h) => inner.drain_cq_events(h),
                }
            }
        }
        if inner.rescan_requested || Instant::now() >= next_scan {
            inner.rescan_requested = false;
            inner.rescan();
            next_scan = Instant::now() + sh.rescan_interval;
        }
        let woke = inner.activity || !inner.events.is_empty();
        drop(inner);
        if woke {
            sh.cond.notify_all();
        }
    }
}

// ---------------------------------------------------------------------
// Inner: devices, loss, events
// ---------------------------------------------------------------------

impl Inner {
    fn handle(&mut self) -> u64 {
        let h = self.next_handle;
        self.next_handle += 1;
        h
    }

    fn push(&mut self, ev: Event) {
        tracing::debug!(target: "relink_verbs", event = ?ev, "event");
        self.events.push_back(ev);
        self.activity = true;
    }

    fn ctx_alive(&self, ctx: u64) -> bool {
        self.ctxs.get(&ctx).is_some_and(|c| c.raw.is_some())
    }

    /// Scan the kernel's device list and report what changed.
    fn rescan(&mut self) {
        let scan = scan_devices();
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
            resync_librdmacm();
        }
    }

    /// Declare `id` lost now (a fatal event, a CM removal): it leaves the
    /// list and everything the provider holds on it is released.
    fn lose_device(&mut self, id: &DeviceId) {
        if let Some(ev) = self.book.mark_lost(id) {
            self.push(Event::Device(ev));
        }
        self.device_gone(id);
    }

    /// Everything on a device that is gone: release the contexts, tell the
    /// CM ids, re-sync librdmacm.
    fn device_gone(&mut self, id: &DeviceId) {
        let ctxs: Vec<u64> = self
            .ctxs
            .iter()
            .filter(|(_, c)| c.device == *id && c.raw.is_some())
            .map(|(h, _)| *h)
            .collect();
        for c in ctxs {
            self.release_ctx(c);
        }
        let ids: Vec<u64> = self
            .cms
            .iter()
            .filter(|(_, c)| c.device.as_ref() == Some(id))
            .map(|(h, _)| *h)
            .collect();
        self.destroy_parked(|p| p.device == *id);
        for h in ids {
            let c = self.cms.get_mut(&h).expect("present");
            c.lost = true;
            if !c.removal_reported {
                c.removal_reported = true;
                self.push(Event::Cm(CmEvent {
                    id: CmId(h),
                    kind: CmEventKind::DeviceRemoval,
                }));
            }
        }
        self.resync_pending = true;
        resync_librdmacm();
    }

    /// Release everything on a context at once (its device is gone): QPs to
    /// error, CQs drained, every outstanding request flushed exactly once,
    /// then destroy in dependency order and close the context. The caller's
    /// handles stay, pointing at nothing.
    fn release_ctx(&mut self, ctx: u64) {
        let Some(c) = self.ctxs.get(&ctx) else { return };
        let Some(raw_ctx) = c.raw else { return };
        let dev = c.device.clone();
        tracing::info!(target: "relink_verbs", device = %dev, "device lost: releasing its context");
        let qps: Vec<u64> = self
            .qps
            .iter()
            .filter(|(_, q)| q.ctx == ctx)
            .map(|(h, _)| *h)
            .collect();
        for q in &qps {
            if let Some(raw) = self.qps[q].raw {
                modify_to_error(raw);
            }
        }
        let cqs: Vec<u64> = self
            .cqs
            .iter()
            .filter(|(_, q)| q.ctx == ctx)
            .map(|(h, _)| *h)
            .collect();
        for cq in &cqs {
            self.poll_hw(*cq, usize::MAX);
        }
        for q in &qps {
            self.flush_tracked(*q);
        }
        for cq in &cqs {
            let cqr = self.cqs.get_mut(cq).expect("present");
            if !cqr.pending.is_empty() && cqr.notify.user_armed() {
                // Flushes are errors: they notify any arming.
                cqr.notify = Notify::default();
                self.push(Event::CqReady(CqId(*cq)));
            }
        }
        self.activity = true;
        // Destroy in dependency order; errors are logged (EIO = released).
        for q in qps {
            let qr = self.qps.get_mut(&q).expect("present");
            if let Some(raw) = qr.raw.take() {
                self.qp_by_ptr.remove(&raw.key());
                // SAFETY: a live QP of this provider, destroyed once; its
                // pointer is dropped with `take()` above.
                let rc = unsafe { sys::ibv_destroy_qp(raw.get()) };
                log_rc("ibv_destroy_qp", rc);
            }
            qr.state = QpState::Err;
        }
        let srqs: Vec<u64> = self
            .srqs
            .iter()
            .filter(|(_, s)| s.ctx == ctx)
            .map(|(h, _)| *h)
            .collect();
        for s in srqs {
            if let Some(raw) = self.srqs.get_mut(&s).and_then(|s| s.raw.take()) {
                self.srq_by_ptr.remove(&raw.key());
                // SAFETY: a live SRQ with no QP left, destroyed once.
                let rc = unsafe { sys::ibv_destroy_srq(raw.get()) };
                log_rc("ibv_destroy_srq", rc);
            }
        }
        for w in self.mws.values_mut().filter(|w| w.ctx == ctx) {
            if let Some(raw) = w.raw.take() {
                // SAFETY: a live MW, deallocated once.
                let rc = unsafe { sys::ibv_dealloc_mw(raw.get()) };
                log_rc("ibv_dealloc_mw", rc);
            }
        }
        for m in self.mrs.values_mut().filter(|m| m.ctx == ctx) {
            if let Some(raw) = m.raw.take() {
                // SAFETY: a live MR with no MW left, deregistered once.
                let rc = unsafe { sys::ibv_dereg_mr(raw.get()) };
                log_rc("ibv_dereg_mr", rc);
            }
        }
        for cq in cqs {
            if let Some(raw) = self.cqs.get_mut(&cq).and_then(|c| c.raw.take()) {
                self.cq_by_ptr.remove(&raw.key());
                // SAFETY: a live CQ with no QP left and every event acked,
                // destroyed once.
                let rc = unsafe { sys::ibv_destroy_cq(raw.get()) };
                log_rc("ibv_destroy_cq", rc);
            }
        }
        for p in self.pds.values_mut().filter(|p| p.ctx == ctx) {
            if let Some(raw) = p.raw.take() {
                // SAFETY: a live PD with no child left, deallocated once.
                let rc = unsafe { sys::ibv_dealloc_pd(raw.get()) };
                log_rc("ibv_dealloc_pd", rc);
            }
        }
        self.qp_by_num.retain(|(c, _), _| *c != ctx);
        let c = self.ctxs.get_mut(&ctx).expect("present");
        c.raw = None;
        if let Some(ch) = c.chan.take() {
            // SAFETY: every CQ on the channel was destroyed above.
            let rc = unsafe { sys::ibv_destroy_comp_channel(ch.get()) };
            log_rc("ibv_destroy_comp_channel", rc);
        }
        // SAFETY: every object on the context was destroyed above; the
        // context is closed once.
        let rc = unsafe { sys::ibv_close_device(raw_ctx.get()) };
        log_rc("ibv_close_device", rc);
        self.fds_changed = true;
    }

    /// Every request of `qp` not completed yet gets one `WrFlushErr`.
    fn flush_tracked(&mut self, qp: u64) {
        let Some(q) = self.qps.get_mut(&qp) else {
            return;
        };
        let sq = q.sq.drain();
        let rq = q.rq.drain();
        let (send_cq, recv_cq) = (q.init.send_cq, q.init.recv_cq);
        let flush = |wr_id, opcode| WorkCompletion {
            wr_id,
            status: WcStatus::WrFlushErr,
            opcode,
            qp: QpId(qp),
            byte_len: 0,
            imm: None,
            invalidated_rkey: None,
        };
        if let Some(c) = self.cqs.get_mut(&send_cq.0) {
            c.pending
                .extend(sq.iter().map(|e| flush(e.wr_id, e.opcode)));
        }
        if let Some(c) = self.cqs.get_mut(&recv_cq.0) {
            c.pending
                .extend(rq.iter().map(|w| flush(*w, WcOpcode::Recv)));
        }
    }

    /// Destroy everything (the provider is dropped): objects the caller
    /// leaked, then CM ids.
    fn release_everything(&mut self) {
        let ctxs: Vec<u64> = self.ctxs.keys().copied().collect();
        for c in ctxs {
            self.release_ctx(c);
        }
        let ids: Vec<u64> = self.cms.keys().copied().collect();
        for h in ids {
            if let Some(c) = self.cms.remove(&h) {
                // SAFETY: a live id of this provider, destroyed once; no
                // event for it is unacknowledged.
                let rc = unsafe { sys::rdma_destroy_id(c.raw.get()) };
                if rc != 0 {
                    log_rc("rdma_destroy_id", last_errno());
                }
            }
        }
        self.cm_by_ptr.clear();
        self.destroy_parked(|_| true);
    }

    /// Destroy the parked CM ids `which` selects (their port is back, or
    /// their device is going). None of them has an unacknowledged event:
    /// every event is acked under this lock right after it is read.
    fn destroy_parked(&mut self, which: impl Fn(&ParkedId) -> bool) {
        let mut i = 0;
        while i < self.parked.len() {
            if !which(&self.parked[i]) {
                i += 1;
                continue;
            }
            let p = self.parked.swap_remove(i);
            tracing::debug!(target: "relink_verbs", device = %p.device.name, "destroying a CM id parked while its port was down");
            // SAFETY: a live id of this provider the caller gave up, kept
            // only here, destroyed once; its events were all acked.
            if unsafe { sys::rdma_destroy_id(p.raw.get()) } != 0 {
                log_rc("rdma_destroy_id", last_errno());
            }
        }
    }

    // ---- completions ----

    /// Move up to `max` completions from the hardware CQ into `pending`.
    fn poll_hw(&mut self, cq: u64, max: usize) -> usize {
        let Some(c) = self.cqs.get(&cq) else { return 0 };
        let Some(raw) = c.raw else { return 0 };
        let ctx = c.ctx;
        let mut got = 0;
        let mut wcs: [sys::ibv_wc; POLL_BATCH] = Default::default();
        while got < max {
            let want = (max - got).min(POLL_BATCH) as c_int;
            // SAFETY: a live CQ; `wcs` has room for `want` entries.
            let n = unsafe { sys::ibv_poll_cq(raw.get(), want, wcs.as_mut_ptr()) };
            if n <= 0 {
                if n < 0 {
                    tracing::warn!(target: "relink_verbs", cq, rc = n, "ibv_poll_cq failed");
                }
                break;
            }
            for wc in &wcs[..n as usize] {
                if let Some(w) = self.convert_wc(ctx, cq, wc) {
                    let c = self.cqs.get_mut(&cq).expect("present");
                    c.pending.push_back(w);
                    if !w.status.is_ok() && c.notify.error_completion() {
                        self.push(Event::CqReady(CqId(cq)));
                    }
                }
            }
            got += n as usize;
            if (n as usize) < want as usize {
                break;
            }
        }
        got
    }

    fn convert_wc(&mut self, ctx: u64, cq: u64, wc: &sys::ibv_wc) -> Option<WorkCompletion> {
        let Some(&qp) = self.qp_by_num.get(&(ctx, wc.qp_num)) else {
            tracing::debug!(target: "relink_verbs", qpn = wc.qp_num, "completion of a destroyed QP dropped");
            return None;
        };
        let q = self.qps.get_mut(&qp)?;
        let status = convert::status_from_raw(wc.status);
        let ok = status.is_ok();
        let raw_op = convert::opcode_from_raw(wc.opcode);
        // Which queue: by CQ if the QP's two CQs differ, else by what the
        // bookkeeping expects (an error completion's opcode is undefined).
        let is_recv = if q.init.send_cq != q.init.recv_cq {
            q.init.recv_cq.0 == cq
        } else if ok {
            convert::is_recv_opcode(wc.opcode)
        } else if q.sq.front_is(wc.wr_id) {
            false
        } else {
            q.rq.contains(wc.wr_id) || convert::is_recv_opcode(wc.opcode)
        };
        let opcode = if is_recv {
            if q.init.srq.is_none() {
                q.rq.complete(wc.wr_id);
            }
            match raw_op {
                Some(op) if ok && convert::is_recv(op) => op,
                _ => WcOpcode::Recv,
            }
        } else {
            let tracked = q.sq.complete(wc.wr_id, ok);
            match (ok, raw_op, tracked) {
                (true, Some(op), _) => op,
                (_, _, Some(op)) => op,
                (_, Some(op), None) => op,
                (_, None, None) => WcOpcode::Send,
            }
        };
        let flags = wc.wc_flags;
        // SAFETY: reading a plain u32 of a union filled by the provider.
        let imm_or_inv = unsafe { wc.__bindgen_anon_1.imm_data };
        let imm = (flags & sys::IBV_WC_WITH_IMM != 0).then(|| u32::from_be(imm_or_inv));
        let rxe = self.ctxs.get(&ctx).is_some_and(|c| c.rxe);
        let inv_flag = if rxe && is_recv {
            sys::IBV_WC_WITH_INV | RXE_WC_WITH_INVALIDATE
        } else {
            sys::IBV_WC_WITH_INV
        };
        let invalidated_rkey = (ok && flags & inv_flag != 0).then_some(imm_or_inv);
        if !ok {
            self.qp_entered_error(qp);
        }
        Some(WorkCompletion {
            wr_id: wc.wr_id,
            status,
            opcode,
            qp: QpId(qp),
            byte_len: wc.byte_len,
            imm,
            invalidated_rkey,
        })
    }

    /// A QP went to the error state (a failed completion, a transition the
    /// provider made). On rxe, an SRQ-attached QP gets the
    /// `QpLastWqeReached` the device does not raise.
    fn qp_entered_error(&mut self, qp: u64) {
        let Some(q) = self.qps.get_mut(&qp) else {
            return;
        };
        q.state = QpState::Err;
        let rxe = self.ctxs.get(&q.ctx).is_some_and(|c| c.rxe);
        if rxe && q.init.srq.is_some() && q.raw.is_some() && !q.last_wqe_reported {
            q.last_wqe_reported = true;
            let ctx = q.ctx;
            self.push(Event::Async {
                ctx: ContextId(ctx),
                event: AsyncEvent::QpLastWqeReached(QpId(qp)),
            });
        }
    }

    /// Look for error completions on CQs armed for solicited completions
    /// only (see [`Notify::error_completion`]); true if one was armed.
    fn scan_solicited_cqs(&mut self) -> bool {
        let armed: Vec<(u64, u32)> = self
            .cqs
            .iter()
            .filter(|(_, c)| c.raw.is_some() && c.notify.armed_solicited_only())
            .map(|(h, c)| (*h, c.depth))
            .collect();
        for (h, depth) in &armed {
            let room = (*depth as usize).saturating_sub(self.cqs[h].pending.len());
            if room > 0 {
                self.poll_hw(*h, room);
            }
        }
        !armed.is_empty()
    }

    fn drain_cq_events(&mut self, ctx: u64) {
        let Some(ch) = self.ctxs.get(&ctx).and_then(|c| c.chan) else {
            return;
        };
        loop {
            let mut cq: *mut sys::ibv_cq = std::ptr::null_mut();
            let mut cq_ctx: *mut c_void = std::ptr::null_mut();
            // SAFETY: a live channel with a nonblocking fd.
            if unsafe { sys::ibv_get_cq_event(ch.get(), &mut cq, &mut cq_ctx) } != 0 {
                break;
            }
            // SAFETY: the event names a live CQ of this channel; acked once.
            unsafe { sys::ibv_ack_cq_events(cq, 1) };
            let Some(&h) = self.cq_by_ptr.get(&(cq as usize)) else {
                continue;
            };
            self.activity = true;
            let action = self.cqs.get_mut(&h).expect("present").notify.on_event();
            match action {
                OnEvent::Activity => {}
                OnEvent::Ready => self.push(Event::CqReady(CqId(h))),
                OnEvent::Resolve => {
                    // Re-arm for solicited completions, then look at what
                    // came (see track::Notify).
                    // SAFETY: a live CQ.
                    let rc = unsafe { sys::ibv_req_notify_cq(cq, 1) };
                    log_rc("ibv_req_notify_cq", rc);
                    let before = self.cqs[&h].pending.len();
                    self.poll_hw(h, usize::MAX);
                    let found: Vec<(bool, bool)> = self.cqs[&h]
                        .pending
                        .iter()
                        .skip(before)
                        .map(|w| (convert::is_recv(w.opcode), w.status.is_ok()))
                        .collect();
                    if self.cqs.get_mut(&h).expect("present").notify.resolve(found) {
                        self.push(Event::CqReady(CqId(h)));
                    }
                }
            }
        }
    }

    /// Arm every CQ the caller does not arm itself, for `wait`; true if a
    /// completion is already there.
    fn arm_for_wait(&mut self) -> bool {
        let mut found = false;
        let cqs: Vec<u64> = self.cqs.keys().copied().collect();
        for h in cqs {
            let c = self.cqs.get_mut(&h).expect("present");
            let Some(raw) = c.raw else { continue };
            if !c.notify.arm_for_activity() {
                continue;
            }
            // SAFETY: a live CQ.
            let rc = unsafe { sys::ibv_req_notify_cq(raw.get(), 0) };
            log_rc("ibv_req_notify_cq", rc);
            if c.pending.len() < c.depth as usize && self.poll_hw(h, 1) > 0 {
                found = true;
            }
        }
        found
    }

    // ---- async events ----

    fn drain_async_events(&mut self, ctx: u64) {
        let Some(raw) = self.ctxs.get(&ctx).and_then(|c| c.raw) else {
            return;
        };
        loop {
            let mut ev = sys::ibv_async_event::default();
            // SAFETY: a live context with a nonblocking async fd.
            if unsafe { sys::ibv_get_async_event(raw.get(), &mut ev) } != 0 {
                break;
            }
            // Ack at once: handling the event may close the context
            // (DEVICE_FATAL), and only the element's address is used below.
            let copy = sys::ibv_async_event {
                element: ev.element,
                event_type: ev.event_type,
            };
            // SAFETY: the event came from ibv_get_async_event and is acked
            // once; its element is not dereferenced afterwards.
            unsafe { sys::ibv_ack_async_event(&mut ev) };
            self.on_async(ctx, &copy);
            if !self.ctx_alive(ctx) {
                break;
            }
        }
    }

    fn on_async(&mut self, ctx: u64, ev: &sys::ibv_async_event) {
        let ty = ev.event_type;
        // SAFETY: reading the pointer member of the element union; which
        // member is meant depends on the type, checked below before use.
        let (qp_ptr, cq_ptr) = unsafe { (ev.element.qp as usize, ev.element.cq as usize) };
        let qp = || self.qp_by_ptr.get(&qp_ptr).copied();
        let event = match ty {
            sys::IBV_EVENT_DEVICE_FATAL => Some(AsyncEvent::DeviceFatal),
            sys::IBV_EVENT_PORT_ERR => Some(AsyncEvent::PortErr),
            sys::IBV_EVENT_PORT_ACTIVE => Some(AsyncEvent::PortActive),
            sys::IBV_EVENT_GID_CHANGE => Some(AsyncEvent::GidChange),
            sys::IBV_EVENT_QP_FATAL | sys::IBV_EVENT_QP_REQ_ERR | sys::IBV_EVENT_QP_ACCESS_ERR => {
                qp().map(|q| AsyncEvent::QpFatal(QpId(q)))
            }
            sys::IBV_EVENT_QP_LAST_WQE_REACHED => qp()
                .filter(|q| self.qps.get(q).is_some_and(|q| !q.last_wqe_reported))
                .map(|q| AsyncEvent::QpLastWqeReached(QpId(q))),
            sys::IBV_EVENT_CQ_ERR => self
                .cq_by_ptr
                .get(&cq_ptr)
                .map(|c| AsyncEvent::CqErr(CqId(*c))),
            _ => None,
        };
        tracing::debug!(target: "relink_verbs", ctx, event_type = ty, ?event, "async event");
        match event {
            Some(AsyncEvent::QpFatal(q)) => {
                if let Some(q) = self.qps.get_mut(&q.0) {
                    q.state = QpState::Err;
                }
            }
            Some(AsyncEvent::QpLastWqeReached(q)) => {
                if let Some(q) = self.qps.get_mut(&q.0) {
                    q.last_wqe_reported = true;
                }
            }
            _ => {}
        }
        let Some(event) = event else { return };
        self.push(Event::Async {
            ctx: ContextId(ctx),
            event,
        });
        match event {
            AsyncEvent::DeviceFatal => {
                let dev = self.ctxs[&ctx].device.clone();
                if let Some(info) = self.book.by_name(&dev.name).filter(|i| i.id == dev) {
                    let device = info.clone();
                    self.push(Event::Device(DeviceEvent {
                        kind: DeviceEventKind::Fatal,
                        device,
                    }));
                }
                self.lose_device(&dev);
            }
            AsyncEvent::PortErr | AsyncEvent::PortActive | AsyncEvent::GidChange => {
                self.rescan_requested = true;
            }
            _ => {}
        }
    }

    // ---- CM events ----

    fn drain_cm_events(&mut self, channel: Ptr<sys::rdma_event_channel>) {
        loop {
            let mut ev: *mut sys::rdma_cm_event = std::ptr::null_mut();
            // SAFETY: our channel, nonblocking.
            if unsafe { sys::rdma_get_cm_event(channel.get(), &mut ev) } != 0 {
                break;
            }
            let Some(ev) = Ptr::new(ev) else { break };
            let orphan = self.on_cm(ev);
            // SAFETY: the event came from rdma_get_cm_event and is acked
            // once, after its last use.
            unsafe { sys::rdma_ack_cm_event(ev.get()) };
            if let Some(id) = orphan {
                // SAFETY: a request's new id nobody knows, destroyed once,
                // after its event was acked (destroy waits for that).
                unsafe { sys::rdma_destroy_id(id.get()) };
            }
        }
    }

    /// The device an id is bound to now (from its verbs context).
    fn id_device(&mut self, raw: Ptr<sys::rdma_cm_id>) -> Option<DeviceId> {
        // SAFETY: a live id; `verbs` is null or librdmacm's live context.
        let verbs = unsafe { (*raw.get()).verbs };
        if verbs.is_null() {
            return None;
        }
        // SAFETY: a live context names its live device.
        let (key, _) = unsafe { reg_key((*verbs).device) };
        if self.book.by_key(&key).is_none() {
            // A registration newer than the last scan.
            self.rescan();
        }
        self.book.by_key(&key).map(|i| i.id.clone())
    }

    /// Handle one CM event; returns a new id to destroy after the ack (a
    /// request on a listener this provider no longer knows).
    fn on_cm(&mut self, ev: Ptr<sys::rdma_cm_event>) -> Option<Ptr<sys::rdma_cm_id>> {
        // SAFETY: a live event; the union member `conn` is the one used for
        // RC ids (RDMA_PS_TCP); private data is copied out before the ack.
        let (id_ptr, listen_ptr, kind, status, private_data, resp_res, init_depth) = unsafe {
            let e = &*ev.get();
            let conn = &e.param.conn;
            let pd = if conn.private_data.is_null() || conn.private_data_len == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    usize::from(conn.private_data_len),
                )
                .to_vec()
            };
            (
                e.id,
                e.listen_id,
                e.event,
                e.status,
                pd,
                conn.responder_resources,
                conn.initiator_depth,
            )
        };
        let id_raw = Ptr::new(id_ptr)?;
        tracing::debug!(target: "relink_verbs", event = kind, status, "CM event");
        if kind == sys::RDMA_CM_EVENT_CONNECT_REQUEST {
            let Some(&listener) = self.cm_by_ptr.get(&(listen_ptr as usize)) else {
                return Some(id_raw);
            };
            let h = self.handle();
            let device = self.id_device(id_raw);
            // SAFETY: the new id is live; its addresses are plain data.
            let (local, peer) = unsafe {
                (
                    sockaddr_to_std(sys::rdma_get_local_addr(id_ptr).cast()),
                    sockaddr_to_std(sys::rdma_get_peer_addr(id_ptr).cast()),
                )
            };
            self.cms.insert(
                h,
                CmRec {
                    raw: id_raw,
                    device,
                    qp: None,
                    params: ConnParams::default(),
                    req_responder_resources: resp_res,
                    req_initiator_depth: init_depth,
                    removal_reported: false,
                    disconnect_reported: false,
                    lost: false,
                    wire: true,
                },
            );
            self.cm_by_ptr.insert(id_raw.key(), h);
            let unspecified = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
            self.push(Event::Cm(CmEvent {
                id: CmId(h),
                kind: CmEventKind::ConnectRequest {
                    listener: CmId(listener),
                    private_data,
                    peer: peer.unwrap_or(unspecified),
                    local: local.unwrap_or(unspecified),
                },
            }));
            return None;
        }
        if let Some(i) = self.parked.iter().position(|p| p.raw.key() == id_raw.key()) {
            // A parked id: its device going is the only event that matters
            // (destroy it once the event is acked, so that the device can go).
            if kind == sys::RDMA_CM_EVENT_DEVICE_REMOVAL {
                return Some(self.parked.swap_remove(i).raw);
            }
            return None;
        }
        let &h = self.cm_by_ptr.get(&id_raw.key())?;
        let kind = match kind {
            sys::RDMA_CM_EVENT_ADDR_RESOLVED => {
                let d = self.id_device(id_raw);
                self.cms.get_mut(&h).expect("present").device = d;
                CmEventKind::AddrResolved
            }
            sys::RDMA_CM_EVENT_ADDR_ERROR => CmEventKind::AddrError,
            sys::RDMA_CM_EVENT_ROUTE_RESOLVED => CmEventKind::RouteResolved,
            sys::RDMA_CM_EVENT_ROUTE_ERROR => CmEventKind::RouteError,
            sys::RDMA_CM_EVENT_CONNECT_RESPONSE => match self.complete_connect(h) {
                Ok(()) => CmEventKind::Established { private_data },
                Err(e) => {
                    tracing::warn!(target: "relink_verbs", id = h, error = %errno::describe(e), "completing the connection failed");
                    self.cm_qp_to_error(h);
                    CmEventKind::ConnectError
                }
            },
            sys::RDMA_CM_EVENT_ESTABLISHED => CmEventKind::Established {
                private_data: Vec::new(),
            },
            sys::RDMA_CM_EVENT_REJECTED => {
                self.cm_qp_to_error(h);
                CmEventKind::Rejected {
                    reason: convert::reject_reason(status),
                    private_data,
                }
            }
            sys::RDMA_CM_EVENT_UNREACHABLE => {
                self.cm_qp_to_error(h);
                CmEventKind::Unreachable
            }
            sys::RDMA_CM_EVENT_CONNECT_ERROR => {
                self.cm_qp_to_error(h);
                CmEventKind::ConnectError
            }
            sys::RDMA_CM_EVENT_DISCONNECTED => {
                self.cm_qp_to_error(h);
                let c = self.cms.get_mut(&h).expect("present");
                if std::mem::replace(&mut c.disconnect_reported, true) {
                    return None;
                }
                CmEventKind::Disconnected
            }
            sys::RDMA_CM_EVENT_DEVICE_REMOVAL => {
                let c = self.cms.get_mut(&h).expect("present");
                let first = !std::mem::replace(&mut c.removal_reported, true);
                c.lost = true;
                let dev = c.device.clone();
                if first {
                    self.push(Event::Cm(CmEvent {
                        id: CmId(h),
                        kind: CmEventKind::DeviceRemoval,
                    }));
                }
                if let Some(dev) = dev {
                    self.lose_device(&dev);
                }
                return None;
            }
            sys::RDMA_CM_EVENT_ADDR_CHANGE => CmEventKind::AddrChange,
            _ => return None,
        };
        self.push(Event::Cm(CmEvent { id: CmId(h), kind }));
        None
    }

    /// Active side, `CONNECT_RESPONSE`: RTR, RTS, then `rdma_establish`.
    fn complete_connect(&mut self, h: u64) -> Result<(), i32> {
        let c = &self.cms[&h];
        let (raw_id, params) = (c.raw, c.params);
        let qp = c.qp.ok_or(codes::EINVAL)?;
        let q = self.qps.get(&qp).ok_or(codes::EINVAL)?;
        let raw_qp = q.raw.ok_or(codes::EIO)?;
        let link_layer = self.ctxs[&q.ctx].link_layer;
        cm_modify(raw_id, raw_qp, convert::qp_state::RTR, |_, mask| {
            if link_layer == LINK_LAYER_INFINIBAND {
                *mask &= !IB_RTR_MASK_OFF;
            }
        })?;
        cm_modify(raw_id, raw_qp, convert::qp_state::RTS, |attr, mask| {
            attr.timeout = params.ack_timeout.min(31);
            attr.retry_cnt = params.retry_count.min(7);
            attr.rnr_retry = params.rnr_retry_count.min(7);
            *mask |= (sys::IBV_QP_TIMEOUT | sys::IBV_QP_RETRY_CNT | sys::IBV_QP_RNR_RETRY) as c_int;
        })?;
        self.qps.get_mut(&qp).expect("present").state = QpState::Rts;
        // SAFETY: a live id whose connect response arrived.
        if unsafe { sys::rdma_establish(raw_id.get()) } != 0 {
            return Err(last_errno());
        }
        Ok(())
    }

    /// The QP bound to a CM id goes to error (the connection ended).
    fn cm_qp_to_error(&mut self, h: u64) {
        let Some(qp) = self.cms.get(&h).and_then(|c| c.qp) else {
            return;
        };
        if let Some(raw) = self.qps.get(&qp).and_then(|q| q.raw) {
            modify_to_error(raw);
        }
        self.qp_entered_error(qp);
    }
}

fn log_rc(what: &str, rc: c_int) {
    if rc != 0 {
        tracing::debug!(target: "relink_verbs", call = what, error = %errno::describe(rc.abs()), "ignored during release");
    }
}

fn modify_to_error(qp: Ptr<sys::ibv_qp>) -> c_int {
    let mut attr = sys::ibv_qp_attr {
        qp_state: convert::qp_state::ERR,
        ..Default::default()
    };
    // SAFETY: a live QP; the attribute struct is initialised.
    unsafe { sys::ibv_modify_qp(qp.get(), &mut attr, sys::IBV_QP_STATE as c_int) }
}

/// Move `qp` to `state` with the attributes rdma_cm computes for `id`,
/// adjusted by `tweak`. Returns the errno on failure.
fn cm_modify(
    id: Ptr<sys::rdma_cm_id>,
    qp: Ptr<sys::ibv_qp>,
    state: u32,
    tweak: impl FnOnce(&mut sys::ibv_qp_attr, &mut c_int),
) -> Result<(), i32> {
    let mut attr = sys::ibv_qp_attr {
        qp_state: state,
        ..Default::default()
    };
    let mut mask: c_int = 0;
    // SAFETY: a live id and a valid attribute struct to fill.
    if unsafe { sys::rdma_init_qp_attr(id.get(), &mut attr, &mut mask) } != 0 {
        return Err(last_errno());
    }
    tweak(&mut attr, &mut mask);
    // SAFETY: a live QP on the id's device with the attributes the kernel
    // gave for this id.
    let rc = unsafe { sys::ibv_modify_qp(qp.get(), &mut attr, mask) };
    if rc != 0 {
        return Err(rc);
    }
    Ok(())
}

const QP_ACCESS: u32 = convert::access::LOCAL_WRITE
    | convert::access::REMOTE_WRITE
    | convert::access::REMOTE_READ
    | convert::access::REMOTE_ATOMIC;

// ---------------------------------------------------------------------
// the Provider
// ---------------------------------------------------------------------

impl VerbsProvider {
    fn cm(&self, inner: &Inner, id: CmId) -> Result<Ptr<sys::rdma_cm_id>, CmError> {
        inner
            .cms
            .get(&id.0)
            .map(|c| c.raw)
            .ok_or(CmError::InvalidHandle("CM id"))
    }

    /// INIT -> INIT with the id's port and pkey (and our access flags).
    fn init_for_id(
        inner: &Inner,
        raw_id: Ptr<sys::rdma_cm_id>,
        qp: u64,
        what: &'static str,
    ) -> Result<Ptr<sys::ibv_qp>, CmError> {
        let q = inner.qps.get(&qp).ok_or(CmError::InvalidHandle("QP"))?;
        let raw_qp = q.raw.ok_or(CmError::DeviceLost)?;
        if q.state != QpState::Init {
            return Err(CmError::BadState("the QP must be in Init to connect"));
        }
        cm_modify(raw_id, raw_qp, convert::qp_state::INIT, |attr, _| {
            attr.qp_access_flags = QP_ACCESS;
        })
        .map_err(|e| errno::cm_error(e, CmOp::Connect(what), true))?;
        Ok(raw_qp)
    }

    fn check_qp_for_id(inner: &Inner, id: CmId, qp: QpId) -> Result<(), CmError> {
        let c = inner
            .cms
            .get(&id.0)
            .ok_or(CmError::InvalidHandle("CM id"))?;
        let q = inner.qps.get(&qp.0).ok_or(CmError::InvalidHandle("QP"))?;
        if c.lost || !inner.ctx_alive(q.ctx) {
            return Err(CmError::DeviceLost);
        }
        let dev = &inner.ctxs[&q.ctx].device;
        match &c.device {
            Some(d) if d == dev => Ok(()),
            Some(_) => Err(CmError::BadState("the QP is on another device than the id")),
            None => Err(CmError::BadState("the id is not bound to a device")),
        }
    }
}

impl Provider for VerbsProvider {
    fn kind(&self) -> &'static str {
        "verbs"
    }

    fn now(&self) -> Timestamp {
        self.shared.now()
    }

    fn wait(&self, deadline: Option<Timestamp>) {
        let mut inner = self.lock();
        loop {
            if !inner.events.is_empty() || std::mem::take(&mut inner.activity) {
                return;
            }
            if inner.arm_for_wait() {
                inner.activity = false;
                return;
            }
            let now = self.shared.now();
            let left = match deadline {
                Some(d) if d <= now => return,
                Some(d) => d.saturating_since(now),
                None => MAX_SLEEP,
            };
            inner = self
                .shared
                .cond
                .wait_timeout(inner, left.min(MAX_SLEEP))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn poll_event(&self) -> Option<Event> {
        self.lock().events.pop_front()
    }

    fn devices(&self) -> Vec<DeviceInfo> {
        self.lock().book.list()
    }

    fn open_device(&self, device: &DeviceId) -> Result<ContextId, OpenError> {
        let mut inner = self.lock();
        let Some(key) = inner.book.key_of(device).cloned() else {
            return Err(OpenError::NoDevice(device.to_string()));
        };
        let mut n: c_int = 0;
        // SAFETY: no preconditions; freed below.
        let list = unsafe { sys::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(errno::open_error(last_errno(), &device.name));
        }
        let mut raw_ctx = None;
        let mut err = codes::ENODEV;
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list holds `n` device pointers.
            let dev = unsafe { *list.add(i) };
            if dev.is_null() {
                break;
            }
            // SAFETY: an entry of the live list.
            let (k, _) = unsafe { reg_key(dev) };
            if k.same_registration(&key) {
                // SAFETY: an entry of the live list; the context holds its
                // own reference to the device.
                raw_ctx = Ptr::new(unsafe { sys::ibv_open_device(dev) });
                if raw_ctx.is_none() {
                    err = last_errno();
                }
                break;
            }
        }
        // SAFETY: the list is freed once; the context keeps its device.
        unsafe { sys::ibv_free_device_list(list) };
        let raw_ctx = raw_ctx.ok_or_else(|| errno::open_error(err, &device.name))?;
        let close = |e: i32| {
            // SAFETY: the context opened above, with nothing on it.
            unsafe { sys::ibv_close_device(raw_ctx.get()) };
            errno::open_error(e, &device.name)
        };
        let mut dattr = sys::ibv_device_attr::default();
        // SAFETY: a live context and a struct to fill.
        let rc = unsafe { sys::ibv_query_device(raw_ctx.get(), &mut dattr) };
        if rc != 0 {
            return Err(close(rc));
        }
        let mut pattr = sys::ibv_port_attr::default();
        // SAFETY: as above (the inline wrapper, not the compat symbol).
        let rc = unsafe { sys::___ibv_query_port(raw_ctx.get(), 1, &mut pattr) };
        let link_layer = if rc == 0 { pattr.link_layer } else { 0 };
        // SAFETY: a live context.
        let chan = Ptr::new(unsafe { sys::ibv_create_comp_channel(raw_ctx.get()) });
        let Some(chan) = chan else {
            return Err(close(last_errno()));
        };
        // SAFETY: live context and channel; their fds are rdma-core's.
        let (afd, cfd) = unsafe { ((*raw_ctx.get()).async_fd, (*chan.get()).fd) };
        if let Err(e) = set_nonblocking(afd).and_then(|()| set_nonblocking(cfd)) {
            // SAFETY: the channel created above has no CQ.
            unsafe { sys::ibv_destroy_comp_channel(chan.get()) };
            return Err(close(e.raw_os_error().unwrap_or(codes::EIO)));
        }
        let h = inner.handle();
        inner.ctxs.insert(
            h,
            Ctx {
                device: device.clone(),
                raw: Some(raw_ctx),
                chan: Some(chan),
                port: 1,
                link_layer,
                max_qp_rd_atom: u8::try_from(dattr.max_qp_rd_atom.clamp(0, 255)).unwrap_or(0),
                max_qp_init_rd_atom: u8::try_from(dattr.max_qp_init_rd_atom.clamp(0, 255))
                    .unwrap_or(0),
                rxe: dattr.vendor_id == RXE_VENDOR_ID,
            },
        );
        inner.fds_changed = true;
        drop(inner);
        self.shared.kick();
        Ok(ContextId(h))
    }

    fn close_device(&self, ctx: ContextId) -> Result<Destroyed, DestroyError> {
        let mut inner = self.lock();
        if !inner.ctxs.contains_key(&ctx.0) {
            return Err(DestroyError::InvalidHandle("context"));
        }
        if inner.pds.values().any(|p| p.ctx == ctx.0) {
            return Err(DestroyError::Busy("context (PDs)"));
        }
        if inner.cqs.values().any(|c| c.ctx == ctx.0) {
            return Err(DestroyError::Busy("context (CQs)"));
        }
        let c = inner.ctxs.remove(&ctx.0).expect("present");
        let alive = inner.book.is_present(&c.device);
        let Some(raw) = c.raw else {
            return Ok(Destroyed::AlreadyReleased);
        };
        if let Some(ch) = c.chan {
            // SAFETY: no CQ is left on the channel.
            let rc = unsafe { sys::ibv_destroy_comp_channel(ch.get()) };
            log_rc("ibv_destroy_comp_channel", rc);
        }
        // SAFETY: no object is left on the context; closed once.
        let rc = unsafe { sys::ibv_close_device(raw.get()) };
        inner.fds_changed = true;
        drop(inner);
        self.shared.kick();
        let rc = if rc != 0 { last_errno() } else { 0 };
        errno::destroy_result(rc, "context", alive)
    }

    fn context_device(&self, ctx: ContextId) -> Option<DeviceId> {
        self.lock().ctxs.get(&ctx.0).map(|c| c.device.clone())
    }

    fn alloc_memory(&self, len: usize) -> Result<Memory, MemoryError> {
        let allocs = self.lock().allocs.clone();
        Ok(Memory::new(Arc::new(MappedMemory::new(len, allocs)?)))
    }

    fn alloc_pd(&self, ctx: ContextId) -> Result<PdId, CreateError> {
        let mut inner = self.lock();
        let c = inner
            .ctxs
            .get(&ctx.0)
            .ok_or(CreateError::InvalidHandle("context"))?;
        let raw_ctx = c.raw.ok_or(CreateError::DeviceLost)?;
        // SAFETY: a live context.
        let raw = Ptr::new(unsafe { sys::ibv_alloc_pd(raw_ctx.get()) })
            .ok_or_else(|| errno::create_error(last_errno(), "PD", true))?;
        let h = inner.handle();
        inner.pds.insert(
            h,
            Pd {
                ctx: ctx.0,
                raw: Some(raw),
            },
        );
        Ok(PdId(h))
    }

    fn dealloc_pd(&self, pd: PdId) -> Result<Destroyed, DestroyError> {
        let mut inner = self.lock();
        let p = inner
            .pds
            .get(&pd.0)
            .ok_or(DestroyError::InvalidHandle("PD"))?;
        if inner.mrs.values().any(|m| m.pd == pd.0)
            || inner.mws.values().any(|m| m.pd == pd.0)
            || inner.qps.values().any(|q| q.pd == pd.0)
            || inner.srqs.values().any(|s| s.pd == pd.0)
        {
            return Err(DestroyError::Busy("PD"));
        }
        let alive = inner.ctx_alive(p.ctx);
        // SAFETY: a live PD with no children; destroyed once (the
        // record goes below unless the call failed).
        let r = unsafe { destroy_raw(p.raw, sys::ibv_dealloc_pd, "PD", alive) };
        if r.is_ok() {
            inner.pds.remove(&pd.0);
        }
        r
    }

    fn create_cq(&self, ctx: ContextId, depth: u32) -> Result<CqId, CreateError> {
        let mut inner = self.lock();
        let c = inner
            .ctxs
            .get(&ctx.0)
            .ok_or(CreateError::InvalidHandle("context"))?;
        let (raw_ctx, chan) = match (c.raw, c.chan) {
            (Some(r), Some(ch)) => (r, ch),
            _ => return Err(CreateError::DeviceLost),
        };
        if depth == 0 || depth > i32::MAX as u32 {
            return Err(CreateError::InvalidArgument(format!("CQ depth {depth}")));
        }
        // SAFETY: a live context and its completion channel.
        let raw = Ptr::new(unsafe {
            sys::ibv_create_cq(
                raw_ctx.get(),
                depth as c_int,
                std::ptr::null_mut(),
                chan.get(),
                0,
            )
        })
        .ok_or_else(|| errno::create_error(last_errno(), "CQ", true))?;
        let h = inner.handle();
        inner.cq_by_ptr.insert(raw.key(), h);
        inner.cqs.insert(
            h,
            Cq {
                ctx: ctx.0,
                raw: Some(raw),
                depth,
                pending: VecDeque::new(),
                notify: Notify::default(),
            },
        );
        Ok(CqId(h))
    }

    fn destroy_cq(&self, cq: CqId) -> Result<Destroyed, DestroyError> {
        let mut inner = self.lock();
        let c = inner
            .cqs
            .get(&cq.0)
            .ok_or(DestroyError::InvalidHandle("CQ"))?;
        if inner
            .qps
            .values()
            .any(|q| q.init.send_cq == cq || q.init.recv_cq == cq)
        {
            return Err(DestroyError::Busy("CQ"));
        }
        let alive = inner.ctx_alive(c.ctx);
        // SAFETY: a live CQ with no QP; every event on it was acked.
        let r = unsafe { destroy_raw(c.raw, sys::ibv_destroy_cq, "CQ", alive) };
        if r.is_ok() {
            if let Some(c) = inner.cqs.remove(&cq.0) {
                if let Some(raw) = c.raw {
                    inner.cq_by_ptr.remove(&raw.key());
                }
            }
        }
        r
    }

    fn req_notify_cq(&self, cq: CqId, solicited_only: bool) -> Result<(), PollError> {
        let mut inner = self.lock();
        let c = inner.cqs.get_mut(&cq.0).ok_or(PollError::InvalidHandle)?;
        c.notify.user_arm(solicited_only);
        if let Some(raw) = c.raw {
            // SAFETY: a live CQ.
            let rc = unsafe { sys::ibv_req_notify_cq(raw.get(), c_int::from(solicited_only)) };
            log_rc("ibv_req_notify_cq", rc);
        }
        Ok(())
    }

    fn poll_cq(
        &self,
        cq: CqId,
        max: usize,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize, PollError> {
        let mut inner = self.lock();
        let have = inner
            .cqs
            .get(&cq.0)
            .ok_or(PollError::InvalidHandle)?
            .pending
            .len();
        if have < max {
            inner.poll_hw(cq.0, max - have);
        }
        let c = inner.cqs.get_mut(&cq.0).expect("present");
        let n = max.min(c.pending.len());
        out.extend(c.pending.drain(..n));
        Ok(n)
    }

    fn create_srq(&self, pd: PdId, init: SrqInit) -> Result<SrqId, CreateError> {
        let mut inner = self.lock();
        let p = inner
            .pds
            .get(&pd.0)
            .ok_or(CreateError::InvalidHandle("PD"))?;
        let raw_pd = p.raw.ok_or(CreateError::DeviceLost)?;
        let ctx = p.ctx;
        if init.max_wr == 0 || init.max_sge == 0 {
            return Err(CreateError::InvalidArgument(
                "SRQ max_wr and max_sge must be > 0".into(),
            ));
        }
        let mut attr = sys::ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: sys::ibv_srq_attr {
                max_wr: init.max_wr,
                max_sge: init.max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: a live PD and an initialised attribute struct.
        let raw = Ptr::new(unsafe { sys::ibv_create_srq(raw_pd.get(), &mut attr) })
            .ok_or_else(|| errno::create_error(last_errno(), "SRQ", true))?;
        let h = inner.handle();
        inner.srq_by_ptr.insert(raw.key(), h);
        inner.srqs.insert(
            h,
            Srq {
                ctx,
                pd: pd.0,
                raw: Some(raw),
                init,
            },
        );
        Ok(SrqId(h))
    }

    fn destroy_srq(&self, srq: SrqId) -> Result<Destroyed, DestroyError> {
        let mut inner = self.lock();
        let s = inner
            .srqs
            .get(&srq.0)
            .ok_or(DestroyError::InvalidHandle("SRQ"))?;
        if inner.qps.values().any(|q| q.init.srq == Some(srq)) {
            return Err(DestroyError::Busy("SRQ"));
        }
        let alive = inner.ctx_alive(s.ctx);
        // SAFETY: a live SRQ with no QP; destroyed once.
        let r = unsafe { destroy_raw(s.raw, sys::ibv_destroy_srq, "SRQ", alive) };
        if r.is_ok() {
            if let Some(raw) = inner.srqs.remove(&srq.0).and_then(|s| s.raw) {
                inner.srq_by_ptr.remove(&raw.key());
            }
        }
        r
    }

    fn post_srq_recv(&self, srq: SrqId, wrs: &[RecvWr]) -> Result<(), PostError> {
        let inner = self.lock();
        let s = inner
            .srqs
            .get(&srq.0)
            .ok_or(PostError::InvalidHandle("SRQ"))?;
        let raw = s.raw.ok_or(PostError::DeviceLost { posted: 0 })?;
        for (i, wr) in wrs.iter().enumerate() {
            wr.check(s.init.max_sge, i)?;
        }
        let mut batch = RecvBatch::of(wrs);
        let posted = batch.post(|first, bad| {
            // SAFETY: a live SRQ and a well-formed, linked list of receive
            // requests whose SGE arrays outlive the call.
            unsafe { sys::ibv_post_srq_recv(raw.get(), first, bad) }
        });
        match posted {
            Ok(()) => Ok(()),
            Err((rc, n)) => Err(errno::post_error(rc, n, inner.ctx_alive(s.ctx))),
        }
    }

    fn reg_mr(
        &self,
        pd: PdId,
        memory: &Memory,
        addr: u64,
        length: u64,
        access: Access,
    ) -> Result<MrInfo, CreateError> {
        let mut inner = self.lock();
        let p = inner
            .pds
            .get(&pd.0)
            .ok_or(CreateError::InvalidHandle("PD"))?;
        let raw_pd = p.raw.ok_or(CreateError::DeviceLost)?;
        let ctx = p.ctx;
        relink_fabric::check_reg_mr(memory, addr, length, access)?;
        let ours = inner
            .allocs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&memory.addr())
            == Some(&memory.len());
        if !ours {
            return Err(CreateError::InvalidArgument(
                "memory not allocated by this provider (use alloc_memory)".into(),
            ));
        }
        // SAFETY: a live PD; the range lies inside a live mapping of this
        // provider that the MR record keeps alive (`_memory`).
        let raw = Ptr::new(unsafe {
            sys::ibv_reg_mr(
                raw_pd.get(),
                addr as *mut c_void,
                length as usize,
                convert::access_to_raw(access) as c_int,
            )
        })
        .ok_or_else(|| errno::create_error(last_errno(), "MR", true))?;
        // SAFETY: a live MR; keys are plain fields.
        let (lkey, rkey) = unsafe { ((*raw.get()).lkey, (*raw.get()).rkey) };
        let h = inner.handle();
        inner.mrs.insert(
            h,
            Mr {
                ctx,
                pd: pd.0,
                raw: Some(raw),
                _memory: memory.clone(),
            },
        );
        Ok(MrInfo {
            id: MrId(h),
            addr,
            length,
            lkey,
            rkey,
            access,
        })
    }

    fn dereg_mr(&self, mr: MrId) -> Result<Destroyed, DestroyError> {
        let mut inner = self.lock();
        let m = inner
            .mrs
            .get(&mr.0)
            .ok_or(DestroyError::InvalidHandle("MR"))?;
        let alive = inner.ctx_alive(m.ctx);
        // SAFETY: a live MR, deregistered once.
        let r = unsafe { destroy_raw(m.raw, sys::ibv_dereg_mr, "MR", alive) };
        if r.is_ok() {
            inner.mrs.remove(&mr.0);
        }
        r
    }

    fn alloc_mw(&self, pd: PdId, kind: MwType) -> Result<MwInfo, CreateError> {
        let mut inner = self.lock();
        let p = inner
            .pds
            .get(&pd.0)
            .ok_or(CreateError::InvalidHandle("PD"))?;
        let raw_pd = p.raw.ok_or(CreateError::DeviceLost)?;
        let ctx = p.ctx;
        let ty = match kind {
            MwType::Type1 => sys::IBV_MW_TYPE_1,
            MwType::Type2 => sys::IBV_MW_TYPE_2,
        };
        // SAFETY: a live PD.
        let raw = Ptr::new(unsafe { sys::ibv_alloc_mw(raw_pd.get(), ty) })
            .ok_or_else(|| errno::create_error(last_errno(), "MW", true))?;
        // SAFETY: a live MW.
        let rkey = unsafe { (*raw.get()).rkey };
        let h = inner.handle();
        inner.mws.insert(
            h,
            Mw {
                ctx,
                pd: pd.0,
                raw: Some(raw),
                kind,
            },
        );
        Ok(MwInfo {
            id: MwId(h),
            rkey,
            kind,
        })
    }

    fn bind_mw(&self, qp: QpId, mw: MwId, wr_id: u64, bind: MwBind) -> Result<u32, PostError> {
        let mut inner = self.lock();
        let q = inner.qps.get(&qp.0).ok_or(PostError::InvalidHandle("QP"))?;
        let w = inner.mws.get(&mw.0).ok_or(PostError::InvalidHandle("MW"))?;
        if w.kind != MwType::Type1 {
            return Err(PostError::InvalidArgument {
                reason: "bind_mw is for type 1 windows; use SendOp::BindMw".into(),
                posted: 0,
            });
        }
        let m = inner
            .mrs
            .get(&bind.mr.0)
            .ok_or(PostError::InvalidHandle("MR"))?;
        let alive = inner.ctx_alive(q.ctx);
        let (Some(raw_qp), Some(raw_mw), Some(raw_mr)) = (q.raw, w.raw, m.raw) else {
            return Err(PostError::DeviceLost { posted: 0 });
        };
        let mut b = sys::ibv_mw_bind {
            wr_id,
            send_flags: sys::IBV_SEND_SIGNALED,
            bind_info: sys::ibv_mw_bind_info {
                mr: raw_mr.get(),
                addr: bind.addr,
                length: bind.length,
                mw_access_flags: convert::access_to_raw(bind.access),
            },
        };
        // SAFETY: live QP, MW and MR of this provider; the bind struct is
        // initialised and only read during the call.
        let rc = unsafe { sys::ibv_bind_mw(raw_qp.get(), raw_mw.get(), &mut b) };
        if rc != 0 {
            return Err(errno::post_error(rc, 0, alive));
        }
        // SAFETY: a live MW; the provider stored the new rkey in it.
        let rkey = unsafe { (*raw_mw.get()).rkey };
        inner.qps.get_mut(&qp.0).expect("present").sq.push(SqEntry {
            wr_id,
            opcode: WcOpcode::BindMw,
            signaled: true,
        });
        Ok(rkey)
    }

    fn dealloc_mw(&self, mw: MwId) -> Result<Destroyed, DestroyError> {
        let mut inner = self.lock();
        let w = inner
            .mws
            .get(&mw.0)
            .ok_or(DestroyError::InvalidHandle("MW"))?;
        let alive = inner.ctx_alive(w.ctx);
        // SAFETY: a live MW, deallocated once.
        let r = unsafe { destroy_raw(w.raw, sys::ibv_dealloc_mw, "MW", alive) };
        if r.is_ok() {
            inner.mws.remove(&mw.0);
        }
        r
    }

    fn create_qp(&self, pd: PdId, init: QpInit) -> Result<QpId, CreateError> {
        let mut inner = self.lock();
        let p = inner
            .pds
            .get(&pd.0)
            .ok_or(CreateError::InvalidHandle("PD"))?;
        let ctx = p.ctx;
        let raw_pd = p.raw.ok_or(CreateError::DeviceLost)?;
        let mut cq_raw = [std::ptr::null_mut(); 2];
        for (i, cq) in [init.send_cq, init.recv_cq].into_iter().enumerate() {
            let c = inner
                .cqs
                .get(&cq.0)
                .ok_or(CreateError::InvalidHandle("CQ"))?;
            if c.ctx != ctx {
                return Err(CreateError::Mismatch("CQ on another device"));
            }
            cq_raw[i] = c.raw.ok_or(CreateError::DeviceLost)?.get();
        }
        let srq_raw = match init.srq {
            Some(s) => {
                let s = inner
                    .srqs
                    .get(&s.0)
                    .ok_or(CreateError::InvalidHandle("SRQ"))?;
                if s.pd != pd.0 {
                    return Err(CreateError::Mismatch("SRQ of another PD"));
                }
                s.raw.ok_or(CreateError::DeviceLost)?.get()
            }
            None => std::ptr::null_mut(),
        };
        let c = init.caps;
        if c.max_send_wr == 0 || c.max_send_sge == 0 {
            return Err(CreateError::InvalidArgument(
                "max_send_wr and max_send_sge must be > 0".into(),
            ));
        }
        if init.srq.is_none() && (c.max_recv_wr == 0 || c.max_recv_sge == 0) {
            return Err(CreateError::InvalidArgument(
                "max_recv_wr and max_recv_sge must be > 0 without an SRQ".into(),
            ));
        }
        let mut attr = sys::ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq_raw[0],
            recv_cq: cq_raw[1],
            srq: srq_raw,
            cap: sys::ibv_qp_cap {
                max_send_wr: c.max_send_wr,
                max_recv_wr: if init.srq.is_some() { 0 } else { c.max_recv_wr },
                max_send_sge: c.max_send_sge,
                max_recv_sge: if init.srq.is_some() {
                    0
                } else {
                    c.max_recv_sge
                },
                max_inline_data: 0,
            },
            qp_type: sys::IBV_QPT_RC,
            sq_sig_all: c_int::from(init.sq_sig_all),
        };
        // SAFETY: a live PD, CQs and SRQ of one context; the attribute
        // struct is initialised.
        let raw = Ptr::new(unsafe { sys::ibv_create_qp(raw_pd.get(), &mut attr) })
            .ok_or_else(|| errno::create_error(last_errno(), "QP", true))?;
        // Init at once (port 1, pkey 0, our access), so receives can be
        // posted before a connection; cm_connect/cm_accept redo Init with
        // the id's port.
        let port = inner.ctxs[&ctx].port;
        let mut a = sys::ibv_qp_attr {
            qp_state: convert::qp_state::INIT,
            pkey_index: 0,
            port_num: port,
            qp_access_flags: QP_ACCESS,
            ..Default::default()
        };
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_PKEY_INDEX
            | sys::IBV_QP_PORT
            | sys::IBV_QP_ACCESS_FLAGS;
        // SAFETY: the QP just created; the attribute struct is initialised.
        let rc = unsafe { sys::ibv_modify_qp(raw.get(), &mut a, mask as c_int) };
        if rc != 0 {
            // SAFETY: the QP just created, destroyed once.
            unsafe { sys::ibv_destroy_qp(raw.get()) };
            return Err(errno::create_error(rc, "QP", true));
        }
        // SAFETY: a live QP.
        let qpn = unsafe { (*raw.get()).qp_num };
        let h = inner.handle();
        inner.qp_by_ptr.insert(raw.key(), h);
        inner.qp_by_num.insert((ctx, qpn), h);
        inner.qps.insert(
            h,
            Qp {
                ctx,
                pd: pd.0,
                raw: Some(raw),
                qpn,
                init,
                state: QpState::Init,
                sq: SendQueue::default(),
                rq: RecvQueue::default(),
                cm: None,
                last_wqe_reported: false,
            },
        );
        Ok(QpId(h))
    }

    fn destroy_qp(&self, qp: QpId) -> Result<Destroyed, DestroyError> {
        let mut inner = self.lock();
        let q = inner
            .qps
            .get(&qp.0)
            .ok_or(DestroyError::InvalidHandle("QP"))?;
        let alive = inner.ctx_alive(q.ctx);
        // SAFETY: a live QP (no MW bound through it is used after);
        // every async event on it was acked.
        let r = unsafe { destroy_raw(q.raw, sys::ibv_destroy_qp, "QP", alive) };
        if r.is_ok() {
            let q = inner.qps.remove(&qp.0).expect("present");
            if let Some(raw) = q.raw {
                inner.qp_by_ptr.remove(&raw.key());
            }
            if inner.qp_by_num.get(&(q.ctx, q.qpn)) == Some(&qp.0) {
                inner.qp_by_num.remove(&(q.ctx, q.qpn));
            }
            if let Some(c) = q.cm.and_then(|c| inner.cms.get_mut(&c)) {
                c.qp = None;
            }
        }
        r
    }

    fn qp_state(&self, qp: QpId) -> Result<QpState, PollError> {
        let mut inner = self.lock();
        let q = inner.qps.get_mut(&qp.0).ok_or(PollError::InvalidHandle)?;
        let Some(raw) = q.raw else {
            return Ok(QpState::Err);
        };
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        // SAFETY: a live QP and structs to fill.
        let rc = unsafe {
            sys::ibv_query_qp(raw.get(), &mut attr, sys::IBV_QP_STATE as c_int, &mut init)
        };
        if rc == 0 {
            q.state = convert::qp_state_from_raw(attr.qp_state);
        }
        Ok(q.state)
    }

    fn qp_to_error(&self, qp: QpId) -> Result<(), PostError> {
        let mut inner = self.lock();
        let q = inner.qps.get(&qp.0).ok_or(PostError::InvalidHandle("QP"))?;
        if let Some(raw) = q.raw {
            let rc = modify_to_error(raw);
            if rc != 0 && !errno::is_device_gone(rc) {
                return Err(errno::post_error(rc, 0, true));
            }
        }
        inner.qp_entered_error(qp.0);
        Ok(())
    }

    fn post_send(&self, qp: QpId, wrs: &[SendWr]) -> Result<(), PostError> {
        let mut inner = self.lock();
        let q = inner.qps.get(&qp.0).ok_or(PostError::InvalidHandle("QP"))?;
        let raw = q.raw.ok_or(PostError::DeviceLost { posted: 0 })?;
        let alive = inner.ctx_alive(q.ctx);
        if matches!(q.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(PostError::BadState {
                state: q.state,
                posted: 0,
            });
        }
        let caps = q.init.caps;
        let sig_all = q.init.sq_sig_all;
        let mut batch = SendBatch::new();
        for (i, wr) in wrs.iter().enumerate() {
            wr.check(caps.max_send_sge, i)?;
            let raw_wr = build_send_wr(&inner, wr)
                .map_err(|reason| PostError::InvalidArgument { reason, posted: i })?;
            batch.push(raw_wr, &wr.sgl);
        }
        let result = batch.post(|first, bad| {
            // SAFETY: a live QP and a well-formed, linked list of send
            // requests whose SGE arrays outlive the call.
            unsafe { sys::ibv_post_send(raw.get(), first, bad) }
        });
        let posted = match &result {
            Ok(()) => wrs.len(),
            Err((_, n)) => *n,
        };
        let q = inner.qps.get_mut(&qp.0).expect("present");
        for wr in &wrs[..posted] {
            q.sq.push(SqEntry {
                wr_id: wr.wr_id,
                opcode: wr.op.wc_opcode(),
                signaled: wr.signaled || sig_all,
            });
        }
        result.map_err(|(rc, n)| errno::post_error(rc, n, alive))
    }

    fn post_recv(&self, qp: QpId, wrs: &[RecvWr]) -> Result<(), PostError> {
        let mut inner = self.lock();
        let q = inner.qps.get(&qp.0).ok_or(PostError::InvalidHandle("QP"))?;
        let raw = q.raw.ok_or(PostError::DeviceLost { posted: 0 })?;
        let alive = inner.ctx_alive(q.ctx);
        if q.init.srq.is_some() {
            return Err(PostError::InvalidArgument {
                reason: "QP uses an SRQ".into(),
                posted: 0,
            });
        }
        let caps = q.init.caps;
        for (i, wr) in wrs.iter().enumerate() {
            wr.check(caps.max_recv_sge, i)?;
        }
        let mut batch = RecvBatch::of(wrs);
        let result = batch.post(|first, bad| {
            // SAFETY: a live QP and a well-formed, linked list of receive
            // requests whose SGE arrays outlive the call.
            unsafe { sys::ibv_post_recv(raw.get(), first, bad) }
        });
        let posted = match &result {
            Ok(()) => wrs.len(),
            Err((_, n)) => *n,
        };
        let q = inner.qps.get_mut(&qp.0).expect("present");
        for wr in &wrs[..posted] {
            q.rq.push(wr.wr_id);
        }
        result.map_err(|(rc, n)| errno::post_error(rc, n, alive))
    }

    // ---- connection management ----

    fn cm_create_id(&self) -> Result<CmId, CmError> {
        let mut inner = self.lock();
        let mut id: *mut sys::rdma_cm_id = std::ptr::null_mut();
        // SAFETY: our live channel; the id is destroyed by cm_destroy_id or
        // when the provider drops.
        let rc = unsafe {
            sys::rdma_create_id(
                self.channel(),
                &mut id,
                std::ptr::null_mut(),
                sys::RDMA_PS_TCP,
            )
        };
        let raw = if rc == 0 { Ptr::new(id) } else { None };
        let raw = raw.ok_or_else(|| errno::cm_error(last_errno(), CmOp::Create, true))?;
        let h = inner.handle();
        inner.cm_by_ptr.insert(raw.key(), h);
        inner.cms.insert(
            h,
            CmRec {
                raw,
                device: None,
                qp: None,
                params: ConnParams::default(),
                req_responder_resources: 0,
                req_initiator_depth: 0,
                removal_reported: false,
                disconnect_reported: false,
                lost: false,
                wire: false,
            },
        );
        Ok(CmId(h))
    }

    fn cm_bind(&self, id: CmId, addr: SocketAddr) -> Result<SocketAddr, CmError> {
        let mut inner = self.lock();
        let raw = self.cm(&inner, id)?;
        let mut c = CAddr::new(addr);
        // SAFETY: a live id and a valid socket address.
        if unsafe { sys::rdma_bind_addr(raw.get(), c.as_ptr()) } != 0 {
            return Err(errno::cm_error(last_errno(), CmOp::Bind(addr), true));
        }
        let d = inner.id_device(raw);
        inner.cms.get_mut(&id.0).expect("present").device = d;
        // SAFETY: a live, bound id.
        let local = unsafe { sockaddr_to_std(sys::rdma_get_local_addr(raw.get()).cast()) };
        Ok(local.unwrap_or(addr))
    }

    fn cm_listen(&self, id: CmId, backlog: u32) -> Result<(), CmError> {
        let inner = self.lock();
        let raw = self.cm(&inner, id)?;
        // SAFETY: a live id.
        let local = unsafe { sockaddr_to_std(sys::rdma_get_local_addr(raw.get()).cast()) }
            .unwrap_or(SocketAddr::new(errno::unspecified(false), 0));
        let backlog = c_int::try_from(backlog).unwrap_or(c_int::MAX);
        // SAFETY: a live id.
        if unsafe { sys::rdma_listen(raw.get(), backlog) } != 0 {
            return Err(errno::cm_error(last_errno(), CmOp::Listen(local), true));
        }
        Ok(())
    }

    fn cm_resolve_addr(
        &self,
        id: CmId,
        src: Option<IpAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<(), CmError> {
        let inner = self.lock();
        let raw = self.cm(&inner, id)?;
        let mut d = CAddr::new(dst);
        let mut s = src
            .or(self.shared.default_source)
            .map(|ip| CAddr::new(SocketAddr::new(ip, 0)));
        let sp = s.as_mut().map_or(std::ptr::null_mut(), |s| s.as_ptr());
        let ms = c_int::try_from(timeout.as_millis())
            .unwrap_or(c_int::MAX)
            .max(1);
        // SAFETY: a live id and valid socket addresses.
        if unsafe { sys::rdma_resolve_addr(raw.get(), sp, d.as_ptr(), ms) } != 0 {
            return Err(errno::cm_error(last_errno(), CmOp::ResolveAddr(dst), true));
        }
        Ok(())
    }

    fn cm_resolve_route(&self, id: CmId, timeout: Duration) -> Result<(), CmError> {
        let inner = self.lock();
        let raw = self.cm(&inner, id)?;
        let ms = c_int::try_from(timeout.as_millis())
            .unwrap_or(c_int::MAX)
            .max(1);
        // SAFETY: a live id.
        if unsafe { sys::rdma_resolve_route(raw.get(), ms) } != 0 {
            let lost = inner.cms[&id.0].lost;
            return Err(errno::cm_error(last_errno(), CmOp::ResolveRoute, !lost));
        }
        Ok(())
    }

    fn cm_device(&self, id: CmId) -> Option<DeviceId> {
        let mut inner = self.lock();
        let c = inner.cms.get(&id.0)?;
        if c.device.is_some() || c.lost {
            return c.device.clone();
        }
        let raw = c.raw;
        let d = inner.id_device(raw);
        inner.cms.get_mut(&id.0).expect("present").device = d.clone();
        d
    }

    fn cm_addrs(&self, id: CmId) -> (Option<SocketAddr>, Option<SocketAddr>) {
        let inner = self.lock();
        let Some(c) = inner.cms.get(&id.0) else {
            return (None, None);
        };
        // SAFETY: a live id; its addresses are plain data inside it.
        let (l, p) = unsafe {
            (
                sockaddr_to_std(sys::rdma_get_local_addr(c.raw.get()).cast()),
                sockaddr_to_std(sys::rdma_get_peer_addr(c.raw.get()).cast()),
            )
        };
        let known = |a: Option<SocketAddr>| a.filter(|a| !a.ip().is_unspecified() || a.port() != 0);
        (known(l), known(p))
    }

    fn cm_connect(
        &self,
        id: CmId,
        qp: QpId,
        params: ConnParams,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        check_private_data(private_data, MAX_CONNECT_PRIVATE_DATA)?;
        let mut inner = self.lock();
        Self::check_qp_for_id(&inner, id, qp)?;
        let raw_id = self.cm(&inner, id)?;
        let raw_qp = Self::init_for_id(&inner, raw_id, qp.0, "connect")?;
        let q = &inner.qps[&qp.0];
        let c = &inner.ctxs[&q.ctx];
        let mut p = sys::rdma_conn_param {
            private_data: private_data.as_ptr().cast(),
            private_data_len: private_data.len() as u8,
            responder_resources: c.max_qp_rd_atom,
            initiator_depth: c.max_qp_init_rd_atom,
            flow_control: 1,
            retry_count: params.retry_count.min(7),
            rnr_retry_count: params.rnr_retry_count.min(7),
            srq: u8::from(q.init.srq.is_some()),
            // SAFETY: a live QP.
            qp_num: unsafe { (*raw_qp.get()).qp_num },
        };
        // SAFETY: a live, route-resolved id and an initialised parameter
        // struct whose private data outlives the call.
        if unsafe { sys::rdma_connect(raw_id.get(), &mut p) } != 0 {
            return Err(errno::cm_error(
                last_errno(),
                CmOp::Connect("connect"),
                true,
            ));
        }
        let crec = inner.cms.get_mut(&id.0).expect("present");
        crec.qp = Some(qp.0);
        crec.params = params;
        crec.wire = true;
        inner.qps.get_mut(&qp.0).expect("present").cm = Some(id.0);
        Ok(())
    }

    fn cm_accept(&self, id: CmId, qp: QpId, private_data: &[u8]) -> Result<(), CmError> {
        check_private_data(private_data, MAX_ACCEPT_PRIVATE_DATA)?;
        let mut inner = self.lock();
        Self::check_qp_for_id(&inner, id, qp)?;
        let raw_id = self.cm(&inner, id)?;
        let raw_qp = Self::init_for_id(&inner, raw_id, qp.0, "accept")?;
        let crec = &inner.cms[&id.0];
        let q = &inner.qps[&qp.0];
        let c = &inner.ctxs[&q.ctx];
        let resp_res = crec.req_responder_resources.min(c.max_qp_rd_atom);
        let init_depth = crec.req_initiator_depth.min(c.max_qp_init_rd_atom);
        let link_layer = c.link_layer;
        let srq = u8::from(q.init.srq.is_some());
        let fail = |e: i32| errno::cm_error(e, CmOp::Connect("accept"), true);
        cm_modify(raw_id, raw_qp, convert::qp_state::RTR, |attr, mask| {
            if link_layer == LINK_LAYER_INFINIBAND {
                *mask &= !IB_RTR_MASK_OFF;
            }
            attr.max_dest_rd_atomic = resp_res;
        })
        .map_err(fail)?;
        cm_modify(raw_id, raw_qp, convert::qp_state::RTS, |attr, _| {
            attr.max_rd_atomic = init_depth;
        })
        .map_err(fail)?;
        let mut p = sys::rdma_conn_param {
            private_data: private_data.as_ptr().cast(),
            private_data_len: private_data.len() as u8,
            responder_resources: resp_res,
            initiator_depth: init_depth,
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq,
            // SAFETY: a live QP.
            qp_num: unsafe { (*raw_qp.get()).qp_num },
        };
        // SAFETY: a live id with a pending request and an initialised
        // parameter struct whose private data outlives the call.
        if unsafe { sys::rdma_accept(raw_id.get(), &mut p) } != 0 {
            let e = last_errno();
            modify_to_error(raw_qp);
            return Err(fail(e));
        }
        inner.cms.get_mut(&id.0).expect("present").qp = Some(qp.0);
        let q = inner.qps.get_mut(&qp.0).expect("present");
        q.cm = Some(id.0);
        q.state = QpState::Rts;
        Ok(())
    }

    fn cm_reject(&self, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        check_private_data(private_data, MAX_REJECT_PRIVATE_DATA)?;
        let inner = self.lock();
        let raw = self.cm(&inner, id)?;
        // SAFETY: a live id; the private data outlives the call.
        let rc = unsafe {
            sys::rdma_reject(
                raw.get(),
                private_data.as_ptr().cast(),
                private_data.len() as u8,
            )
        };
        if rc != 0 {
            return Err(errno::cm_error(last_errno(), CmOp::Connect("reject"), true));
        }
        Ok(())
    }

    fn cm_disconnect(&self, id: CmId) -> Result<(), CmError> {
        let mut inner = self.lock();
        let raw = self.cm(&inner, id)?;
        inner.cm_qp_to_error(id.0);
        if inner.cms[&id.0].must_defer_mads() {
            // The DREQ would wedge the port's GSI QP (see `Inner::parked`);
            // the peer learns of the end from its own QP's retries, or from
            // the DREQ sent when the id is destroyed after the port's return.
            tracing::debug!(target: "relink_verbs", id = id.0, "port down: no DREQ now");
            return Ok(());
        }
        // SAFETY: a live id.
        if unsafe { sys::rdma_disconnect(raw.get()) } != 0 {
            let e = last_errno();
            if inner.cms[&id.0].lost {
                return Ok(());
            }
            return Err(errno::cm_error(e, CmOp::Connect("not connected"), true));
        }
        Ok(())
    }

    fn cm_destroy_id(&self, id: CmId) -> Result<Destroyed, DestroyError> {
        let mut inner = self.lock();
        let c = inner
            .cms
            .get(&id.0)
            .ok_or(DestroyError::InvalidHandle("CM id"))?;
        let (raw, lost, qp) = (c.raw, c.lost, c.qp);
        let park = c.must_defer_mads().then(|| c.device.clone()).flatten();
        if qp.is_some() && !lost {
            inner.cm_qp_to_error(id.0);
        }
        if let Some(device) = park {
            tracing::debug!(target: "relink_verbs", id = id.0, device = %device.name, "port down: CM id parked until the port is back");
            inner.cms.remove(&id.0);
            inner.cm_by_ptr.remove(&raw.key());
            if let Some(q) = qp.and_then(|q| inner.qps.get_mut(&q)) {
                q.cm = None;
            }
            inner.parked.push(ParkedId { raw, device });
            return Ok(Destroyed::Released);
        }
        // SAFETY: a live id of this provider, destroyed once; its events
        // were all acked under this lock.
        let rc = unsafe { sys::rdma_destroy_id(raw.get()) };
        if rc != 0 {
            let e = last_errno();
            tracing::warn!(target: "relink_verbs", id = id.0, error = %errno::describe(e), "rdma_destroy_id failed");
        }
        inner.cms.remove(&id.0);
        inner.cm_by_ptr.remove(&raw.key());
        if let Some(q) = qp.and_then(|q| inner.qps.get_mut(&q)) {
            q.cm = None;
        }
        if lost {
            // librdmacm closes its context of a dead device with the last id.
            inner.resync_pending = true;
            drop(inner);
            self.shared.kick();
            return Ok(Destroyed::AlreadyReleased);
        }
        Ok(Destroyed::Released)
    }

    fn object_counts(&self) -> ObjectCounts {
        let inner = self.lock();
        ObjectCounts {
            contexts: inner.ctxs.len(),
            pds: inner.pds.len(),
            cqs: inner.cqs.len(),
            srqs: inner.srqs.len(),
            mrs: inner.mrs.len(),
            mws: inner.mws.len(),
            qps: inner.qps.len(),
            cm_ids: inner.cms.len(),
        }
    }
}

// ---------------------------------------------------------------------
// work request lists
// ---------------------------------------------------------------------

fn raw_sges(sgl: &[Sge]) -> Vec<sys::ibv_sge> {
    sgl.iter()
        .map(|s| sys::ibv_sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect()
}

/// One `ibv_send_wr` for `wr` (without SGEs and links).
fn build_send_wr(inner: &Inner, wr: &SendWr) -> Result<sys::ibv_send_wr, String> {
    let mut w = sys::ibv_send_wr {
        wr_id: wr.wr_id,
        ..Default::default()
    };
    let mut flags = 0;
    if wr.signaled {
        flags |= sys::IBV_SEND_SIGNALED;
    }
    if wr.solicited {
        flags |= sys::IBV_SEND_SOLICITED;
    }
    if wr.fence {
        flags |= sys::IBV_SEND_FENCE;
    }
    w.send_flags = flags;
    let rdma = |w: &mut sys::ibv_send_wr, addr: u64, rkey: u32| {
        w.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
            remote_addr: addr,
            rkey,
        };
    };
    match wr.op {
        SendOp::Send => w.opcode = sys::IBV_WR_SEND,
        SendOp::SendWithImm { imm } => {
            w.opcode = sys::IBV_WR_SEND_WITH_IMM;
            w.__bindgen_anon_1.imm_data = imm.to_be();
        }
        SendOp::SendWithInv { rkey } => {
            w.opcode = sys::IBV_WR_SEND_WITH_INV;
            w.__bindgen_anon_1.invalidate_rkey = rkey;
        }
        SendOp::Write { remote } => {
            w.opcode = sys::IBV_WR_RDMA_WRITE;
            rdma(&mut w, remote.addr, remote.rkey);
        }
        SendOp::WriteWithImm { remote, imm } => {
            w.opcode = sys::IBV_WR_RDMA_WRITE_WITH_IMM;
            w.__bindgen_anon_1.imm_data = imm.to_be();
            rdma(&mut w, remote.addr, remote.rkey);
        }
        SendOp::Read { remote } => {
            w.opcode = sys::IBV_WR_RDMA_READ;
            rdma(&mut w, remote.addr, remote.rkey);
        }
        SendOp::FetchAdd { remote, add } => {
            w.opcode = sys::IBV_WR_ATOMIC_FETCH_AND_ADD;
            w.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                remote_addr: remote.addr,
                compare_add: add,
                swap: 0,
                rkey: remote.rkey,
            };
        }
        SendOp::CmpSwap {
            remote,
            compare,
            swap,
        } => {
            w.opcode = sys::IBV_WR_ATOMIC_CMP_AND_SWP;
            w.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                remote_addr: remote.addr,
                compare_add: compare,
                swap,
                rkey: remote.rkey,
            };
        }
        SendOp::BindMw { mw, rkey, bind } => {
            let m = inner
                .mws
                .get(&mw.0)
                .and_then(|m| m.raw)
                .ok_or_else(|| format!("unknown or lost {mw}"))?;
            let r = inner
                .mrs
                .get(&bind.mr.0)
                .and_then(|m| m.raw)
                .ok_or_else(|| format!("unknown or lost {}", bind.mr))?;
            w.opcode = sys::IBV_WR_BIND_MW;
            w.__bindgen_anon_2.bind_mw = sys::ibv_send_wr__bindgen_ty_4__bindgen_ty_1 {
                mw: m.get(),
                rkey,
                bind_info: sys::ibv_mw_bind_info {
                    mr: r.get(),
                    addr: bind.addr,
                    length: bind.length,
                    mw_access_flags: convert::access_to_raw(bind.access),
                },
            };
        }
        SendOp::LocalInv { rkey } => {
            w.opcode = sys::IBV_WR_LOCAL_INV;
            w.__bindgen_anon_1.invalidate_rkey = rkey;
        }
    }
    Ok(w)
}

/// Destroy a verbs object with `destroy` unless its device released it
/// already (`raw` is `None`): the shared tail of every destroy call.
///
/// # Safety
/// `raw`, if any, is a live object of the kind `destroy` frees, with no
/// dependants left, destroyed only here.
unsafe fn destroy_raw<T>(
    raw: Option<Ptr<T>>,
    destroy: unsafe extern "C" fn(*mut T) -> c_int,
    what: &'static str,
    ctx_alive: bool,
) -> Result<Destroyed, DestroyError> {
    match raw {
        None => Ok(Destroyed::AlreadyReleased),
        Some(raw) => {
            // SAFETY: the caller's contract.
            let rc = unsafe { destroy(raw.get()) };
            errno::destroy_result(rc, what, ctx_alive)
        }
    }
}

/// An rdma-core work request (send or receive): the fields linking a batch
/// sets.
trait RawWr {
    fn link(&mut self, sg_list: *mut sys::ibv_sge, num_sge: c_int, next: *mut Self);
}

impl RawWr for sys::ibv_send_wr {
    fn link(&mut self, sg_list: *mut sys::ibv_sge, num_sge: c_int, next: *mut Self) {
        self.sg_list = sg_list;
        self.num_sge = num_sge;
        self.next = next;
    }
}

impl RawWr for sys::ibv_recv_wr {
    fn link(&mut self, sg_list: *mut sys::ibv_sge, num_sge: c_int, next: *mut Self) {
        self.sg_list = sg_list;
        self.num_sge = num_sge;
        self.next = next;
    }
}

/// A batch of work requests linked for one post (`ibv_post_send`,
/// `ibv_post_recv`, `ibv_post_srq_recv`).
struct WrBatch<W> {
    wrs: Vec<W>,
    sges: Vec<Vec<sys::ibv_sge>>,
}

type SendBatch = WrBatch<sys::ibv_send_wr>;
type RecvBatch = WrBatch<sys::ibv_recv_wr>;

impl<W: RawWr> WrBatch<W> {
    fn new() -> WrBatch<W> {
        WrBatch {
            wrs: Vec::new(),
            sges: Vec::new(),
        }
    }

    fn push(&mut self, wr: W, sgl: &[Sge]) {
        self.wrs.push(wr);
        self.sges.push(raw_sges(sgl));
    }

    /// Link and post; on failure, the errno and how many were accepted.
    fn post(&mut self, f: impl FnOnce(*mut W, *mut *mut W) -> c_int) -> Result<(), (i32, usize)> {
        if self.wrs.is_empty() {
            return Ok(());
        }
        let n = self.wrs.len();
        let base = self.wrs.as_mut_ptr();
        for (i, sg) in self.sges.iter_mut().enumerate() {
            let list = if sg.is_empty() {
                std::ptr::null_mut()
            } else {
                sg.as_mut_ptr()
            };
            let next = if i + 1 < n {
                base.wrapping_add(i + 1)
            } else {
                std::ptr::null_mut()
            };
            // SAFETY: `i < n` (one SGE list per request): the element is
            // inside the vector, which is not touched otherwise until the
            // post returns; `next` is the following element or null.
            unsafe { (*base.add(i)).link(list, sg.len() as c_int, next) };
        }
        let mut bad: *mut W = std::ptr::null_mut();
        let rc = f(base, &mut bad);
        if rc == 0 {
            return Ok(());
        }
        let posted = if bad.is_null() {
            0
        } else {
            (bad as usize - base as usize) / std::mem::size_of::<W>()
        };
        Err((rc.abs(), posted.min(n)))
    }
}

impl RecvBatch {
    fn of(wrs: &[RecvWr]) -> RecvBatch {
        let mut b = RecvBatch::new();
        for w in wrs {
            b.push(
                sys::ibv_recv_wr {
                    wr_id: w.wr_id,
                    next: std::ptr::null_mut(),
                    sg_list: std::ptr::null_mut(),
                    num_sge: 0,
                },
                &w.sgl,
            );
        }
        b
    }
}
