//! rdma_cm: the event channel, CM ids (bind, listen, resolve, connect,
//! accept, reject, disconnect, the QP attributes rdma_cm computes), their
//! events, and librdmacm's own device list.

use std::cell::Cell;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, RawFd};
use std::os::raw::c_int;
use std::ptr::NonNull;
use std::sync::Arc;

use relink_verbs_sys as sys;

use super::device::Device;
use super::os::{sockaddr_to_std, CAddr};
use super::{last_errno, Raw};

/// The channel itself, held by its [`EventChannel`] and every CM id on it
/// (rule 2).
struct EvChanNode {
    raw: Raw<sys::rdma_event_channel>,
}

/// The rdma_cm event channel every CM id of a provider is on.
///
/// librdmacm writes an id's fields (its device, its addresses, its route)
/// inside calls on the id and inside `rdma_get_cm_event` on its channel,
/// and this module reads them. So every call on an id (but its destroy,
/// which librdmacm synchronises itself) and every read of its fields
/// borrows the id's channel, which is `Send` but not `Sync`: they all run
/// on one thread at a time, never concurrently with each other.
pub(crate) struct EventChannel {
    node: Arc<EvChanNode>,
    _not_sync: PhantomData<Cell<()>>,
}

impl EventChannel {
    /// A new event channel; the errno on failure.
    pub(crate) fn create() -> Result<EventChannel, i32> {
        // SAFETY: no preconditions; the channel is destroyed once, by
        // `EventChannel::destroy` (or leaked).
        let raw = Raw::new(unsafe { sys::rdma_create_event_channel() }).ok_or_else(last_errno)?;
        Ok(EventChannel {
            node: Arc::new(EvChanNode { raw }),
            _not_sync: PhantomData,
        })
    }

    /// The channel's fd (librdmacm's, open while the channel is).
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: a live channel (rule 1); the fd is a plain field.
        unsafe { (*self.node.raw.get()).fd }
    }

    /// The channel's fd, borrowed for as long as the channel.
    pub(crate) fn fd_borrowed(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd is the channel's, open until it is destroyed,
        // which the borrow of `self` prevents meanwhile (rule 1).
        unsafe { BorrowedFd::borrow_raw(self.fd()) }
    }

    /// A new CM id on the channel (TCP port space); the errno on failure.
    pub(crate) fn create_id(&self) -> Result<CmId, i32> {
        let mut id: *mut sys::rdma_cm_id = std::ptr::null_mut();
        // SAFETY: a live channel and a pointer to fill; the id is destroyed
        // once, by `CmId::destroy` (or leaked).
        let rc = unsafe {
            sys::rdma_create_id(
                self.node.raw.get(),
                &mut id,
                std::ptr::null_mut(),
                sys::RDMA_PS_TCP,
            )
        };
        let raw = if rc == 0 { Raw::new(id) } else { None };
        let raw = raw.ok_or_else(last_errno)?;
        Ok(CmId {
            raw,
            _chan: self.node.clone(),
        })
    }

    /// The next event waiting on the channel (it is nonblocking), or
    /// `None`; acknowledged when the guard is acked or dropped (rule 4).
    pub(crate) fn get_event(&self) -> Option<CmEventRef<'_>> {
        let mut ev: *mut sys::rdma_cm_event = std::ptr::null_mut();
        // SAFETY: a live channel and a pointer to fill.
        if unsafe { sys::rdma_get_cm_event(self.node.raw.get(), &mut ev) } != 0 {
            return None;
        }
        NonNull::new(ev).map(|raw| CmEventRef {
            raw,
            chan: self,
            id_taken: false,
        })
    }

    /// Destroy the channel: once no CM id holds it (rule 2; otherwise the
    /// channel is left open, and `false` returned).
    pub(crate) fn destroy(self) -> bool {
        let Ok(node) = Arc::try_unwrap(self.node) else {
            return false;
        };
        // SAFETY: a live channel with no id of ours on it, destroyed once
        // (`self` is consumed).
        unsafe { sys::rdma_destroy_event_channel(node.raw.get()) };
        true
    }
}

/// An rdma_cm id.
pub(crate) struct CmId {
    raw: Raw<sys::rdma_cm_id>,
    _chan: Arc<EvChanNode>,
}

/// The parameters of `rdma_connect` and `rdma_accept` other than the
/// private data (`rdma_conn_param`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ConnParam {
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
    pub(crate) flow_control: u8,
    pub(crate) retry_count: u8,
    pub(crate) rnr_retry_count: u8,
    pub(crate) srq: u8,
    pub(crate) qp_num: u32,
}

impl ConnParam {
    /// As C's, with `private_data` (at most 255 bytes are sent).
    fn to_raw(self, private_data: &[u8]) -> sys::rdma_conn_param {
        sys::rdma_conn_param {
            private_data: private_data.as_ptr().cast(),
            private_data_len: private_data.len() as u8,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: self.flow_control,
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            srq: self.srq,
            qp_num: self.qp_num,
        }
    }
}

/// `Ok` for a zero return code, else `errno`.
fn check(rc: c_int) -> Result<(), i32> {
    if rc != 0 {
        return Err(last_errno());
    }
    Ok(())
}

impl CmId {
    /// The address (the key of the provider's table of ids by pointer).
    pub(crate) fn key(&self) -> usize {
        self.raw.key()
    }

    /// The id's pointer, for a call made while `chan`, its channel, is
    /// borrowed (see [`EventChannel`]). Panics if `chan` is another
    /// channel.
    #[inline]
    fn on(&self, chan: &EventChannel) -> *mut sys::rdma_cm_id {
        assert!(
            Arc::ptr_eq(&self._chan, &chan.node),
            "a CM id used with another provider's event channel"
        );
        self.raw.get()
    }

    /// The device the id is bound to now (from librdmacm's verbs context
    /// of it), if any.
    pub(crate) fn device<'a>(&'a self, chan: &'a EventChannel) -> Option<Device<'a>> {
        let id = self.on(chan);
        // SAFETY: a live id (rule 1), whose fields nothing writes meanwhile
        // (its channel is borrowed, see `EventChannel`); `verbs` is null or
        // librdmacm's context of the id's device, which librdmacm keeps
        // open while the id is bound to it, so as long as the id lives and
        // its channel is borrowed.
        unsafe { Device::of_context((*id).verbs) }
    }

    /// The id's local address, if known.
    pub(crate) fn local_addr(&self, chan: &EventChannel) -> Option<SocketAddr> {
        let id = self.on(chan);
        // SAFETY: a live id, whose fields nothing writes meanwhile (its
        // channel is borrowed); the address is plain data inside it, of the
        // family it names.
        unsafe { sockaddr_to_std(sys::rdma_get_local_addr(id).cast()) }
    }

    /// The id's peer address, if known.
    pub(crate) fn peer_addr(&self, chan: &EventChannel) -> Option<SocketAddr> {
        let id = self.on(chan);
        // SAFETY: as in `local_addr`.
        unsafe { sockaddr_to_std(sys::rdma_get_peer_addr(id).cast()) }
    }

    /// `rdma_bind_addr`; the errno on failure.
    pub(crate) fn bind_addr(&self, chan: &EventChannel, addr: SocketAddr) -> Result<(), i32> {
        let mut c = CAddr::new(addr);
        let id = self.on(chan);
        // SAFETY: a live id (calls on it serialised by its borrowed channel)
        // and a valid socket address.
        check(unsafe { sys::rdma_bind_addr(id, c.as_ptr()) })
    }

    /// `rdma_listen`; the errno on failure.
    pub(crate) fn listen(&self, chan: &EventChannel, backlog: c_int) -> Result<(), i32> {
        let id = self.on(chan);
        // SAFETY: a live id (rule 1; calls on it serialised by its borrowed
        // channel).
        check(unsafe { sys::rdma_listen(id, backlog) })
    }

    /// `rdma_resolve_addr` from `src` (or the kernel's choice) to `dst`
    /// within `timeout_ms`; the errno on failure.
    pub(crate) fn resolve_addr(
        &self,
        chan: &EventChannel,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: c_int,
    ) -> Result<(), i32> {
        let mut d = CAddr::new(dst);
        let mut s = src.map(CAddr::new);
        let sp = s.as_mut().map_or(std::ptr::null_mut(), |s| s.as_ptr());
        let id = self.on(chan);
        // SAFETY: a live id (calls on it serialised by its borrowed channel)
        // and valid socket addresses (or null for the source).
        check(unsafe { sys::rdma_resolve_addr(id, sp, d.as_ptr(), timeout_ms) })
    }

    /// `rdma_resolve_route`; the errno on failure.
    pub(crate) fn resolve_route(&self, chan: &EventChannel, timeout_ms: c_int) -> Result<(), i32> {
        let id = self.on(chan);
        // SAFETY: a live id (rule 1; calls on it serialised by its borrowed
        // channel).
        check(unsafe { sys::rdma_resolve_route(id, timeout_ms) })
    }

    /// The attributes and mask rdma_cm computes to move a QP connected
    /// through this id to `attr.qp_state` (`rdma_init_qp_attr`); the errno
    /// on failure.
    pub(crate) fn init_qp_attr(
        &self,
        chan: &EventChannel,
        attr: &mut sys::ibv_qp_attr,
        mask: &mut c_int,
    ) -> Result<(), i32> {
        let id = self.on(chan);
        // SAFETY: a live id (calls on it serialised by its borrowed channel)
        // and a plain struct and int to fill.
        check(unsafe { sys::rdma_init_qp_attr(id, attr, mask) })
    }

    /// `rdma_connect` with `param` and `private_data`; the errno on failure.
    pub(crate) fn connect(
        &self,
        chan: &EventChannel,
        param: ConnParam,
        private_data: &[u8],
    ) -> Result<(), i32> {
        let mut p = param.to_raw(private_data);
        let id = self.on(chan);
        // SAFETY: a live id (calls on it serialised by its borrowed channel)
        // and an initialised parameter struct whose private data (borrowed)
        // outlives the call.
        check(unsafe { sys::rdma_connect(id, &mut p) })
    }

    /// `rdma_accept` with `param` and `private_data`; the errno on failure.
    pub(crate) fn accept(
        &self,
        chan: &EventChannel,
        param: ConnParam,
        private_data: &[u8],
    ) -> Result<(), i32> {
        let mut p = param.to_raw(private_data);
        let id = self.on(chan);
        // SAFETY: as in `connect`.
        check(unsafe { sys::rdma_accept(id, &mut p) })
    }

    /// `rdma_reject` with `private_data`; the errno on failure.
    pub(crate) fn reject(&self, chan: &EventChannel, private_data: &[u8]) -> Result<(), i32> {
        let id = self.on(chan);
        // SAFETY: a live id (calls on it serialised by its borrowed
        // channel); the private data (borrowed) outlives the call.
        check(unsafe {
            sys::rdma_reject(id, private_data.as_ptr().cast(), private_data.len() as u8)
        })
    }

    /// `rdma_establish`; the errno on failure.
    pub(crate) fn establish(&self, chan: &EventChannel) -> Result<(), i32> {
        let id = self.on(chan);
        // SAFETY: a live id (rule 1; calls on it serialised by its borrowed
        // channel).
        check(unsafe { sys::rdma_establish(id) })
    }

    /// `rdma_disconnect`; the errno on failure.
    pub(crate) fn disconnect(&self, chan: &EventChannel) -> Result<(), i32> {
        let id = self.on(chan);
        // SAFETY: a live id (rule 1; calls on it serialised by its borrowed
        // channel).
        check(unsafe { sys::rdma_disconnect(id) })
    }

    /// Destroy the id; the errno on failure (the handle is gone either way:
    /// an id the kernel refused to destroy is left behind). Its events must
    /// all be acked, or `rdma_destroy_id` waits for them (rule 4: the
    /// provider acks each one right after reading it).
    pub(crate) fn destroy(self) -> Result<(), i32> {
        // SAFETY: a live id, destroyed once (`self` is consumed, rule 1).
        check(unsafe { sys::rdma_destroy_id(self.raw.get()) })
    }
}

/// A CM event read from the channel, acknowledged by [`ack`](Self::ack) or
/// when dropped (rule 4).
pub(crate) struct CmEventRef<'ch> {
    raw: NonNull<sys::rdma_cm_event>,
    chan: &'ch EventChannel,
    /// The new id of a connection request was taken.
    id_taken: bool,
}

impl CmEventRef<'_> {
    fn ev(&self) -> &sys::rdma_cm_event {
        // SAFETY: the event is live until it is acked, which consumes
        // `self`.
        unsafe { self.raw.as_ref() }
    }

    /// `RDMA_CM_EVENT_*`.
    pub(crate) fn kind(&self) -> u32 {
        self.ev().event
    }

    /// The event's status.
    pub(crate) fn status(&self) -> i32 {
        self.ev().status
    }

    /// The address of the id the event is for (0 for none): compare with
    /// [`CmId::key`].
    pub(crate) fn id_key(&self) -> usize {
        self.ev().id as usize
    }

    /// The address of the listening id of a connection request (0 for
    /// none).
    pub(crate) fn listen_key(&self) -> usize {
        self.ev().listen_id as usize
    }

    /// The connection parameters' private data (copied), responder
    /// resources and initiator depth.
    pub(crate) fn conn(&self) -> (Vec<u8>, u8, u8) {
        // SAFETY: the `conn` member of the parameter union is the one used
        // for RC ids (RDMA_PS_TCP, the only port space of this provider).
        let conn = unsafe { &self.ev().param.conn };
        let pd = if conn.private_data.is_null() || conn.private_data_len == 0 {
            Vec::new()
        } else {
            // SAFETY: librdmacm's private data of the event: that many bytes,
            // alive until the ack (copied here, before it).
            unsafe {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    usize::from(conn.private_data_len),
                )
            }
            .to_vec()
        };
        (pd, conn.responder_resources, conn.initiator_depth)
    }

    /// The new id of a connection request, owned by the caller from now
    /// on; `None` for any other event, for a null id, or if taken already.
    /// Destroy it only after the ack (`rdma_destroy_id` waits for it).
    pub(crate) fn take_request_id(&mut self) -> Option<CmId> {
        if self.id_taken || self.kind() != sys::RDMA_CM_EVENT_CONNECT_REQUEST {
            return None;
        }
        self.id_taken = true;
        Raw::new(self.ev().id).map(|raw| CmId {
            raw,
            _chan: self.chan.node.clone(),
        })
    }

    /// Acknowledge the event (`rdma_ack_cm_event`).
    pub(crate) fn ack(self) {
        drop(self);
    }
}

impl Drop for CmEventRef<'_> {
    fn drop(&mut self) {
        // SAFETY: the event came from rdma_get_cm_event and is acked once,
        // here, after its last use (the guard is gone, rule 4).
        unsafe { sys::rdma_ack_cm_event(self.raw.as_ptr()) };
    }
}

/// Make librdmacm re-sync its device list (`rdma_get_devices` +
/// `rdma_free_devices`): it closes its cached context of every device that
/// is gone and no longer used by an id (and opens one on every present
/// device it has not opened yet).
pub(crate) fn resync_librdmacm() {
    let mut n: c_int = 0;
    // SAFETY: no preconditions; `n` is a live int to fill. The list is
    // given back below.
    let list = unsafe { sys::rdma_get_devices(&mut n) };
    if !list.is_null() {
        // SAFETY: the list came from rdma_get_devices and is freed once.
        unsafe { sys::rdma_free_devices(list) };
    }
}
