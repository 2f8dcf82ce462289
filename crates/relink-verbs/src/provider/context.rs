//! Device contexts: `open_device` opens a verbs context of the provider's
//! own on the device (not librdmacm's, see the crate docs) with a
//! completion channel, and `close_device` closes it.

use std::os::raw::c_int;

use relink_fabric::{ContextId, DestroyError, Destroyed, DeviceId, OpenError};
use relink_verbs_sys as sys;

use super::ffi::{last_errno, log_rc, set_nonblocking, Ptr};
use super::scan::reg_key;
use super::{Ctx, VerbsProvider};
use crate::errno::{self, codes};

/// The vendor id rxe (Soft-RoCE) reports. Two rxe deviations are worked
/// around on its contexts: it reports a received SEND_WITH_INV with the
/// kernel's `IB_WC_WITH_INVALIDATE` bit (1 << 2, which is
/// `IBV_WC_IP_CSUM_OK` in user space) instead of `IBV_WC_WITH_INV`; and
/// (kernel 6.1) it raises no `IBV_EVENT_QP_LAST_WQE_REACHED` when an
/// SRQ-attached QP enters the error state, so the provider does.
pub(super) const RXE_VENDOR_ID: u32 = 0x00ff_ffff;

impl VerbsProvider {
    pub(super) fn open_device(&self, device: &DeviceId) -> Result<ContextId, OpenError> {
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

    pub(super) fn close_device(&self, ctx: ContextId) -> Result<Destroyed, DestroyError> {
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

    pub(super) fn context_device(&self, ctx: ContextId) -> Option<DeviceId> {
        self.lock().ctxs.get(&ctx.0).map(|c| c.device.clone())
    }
}
