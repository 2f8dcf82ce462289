//! Device contexts: `open_device` opens a verbs context of the provider's
//! own on the device (not librdmacm's, see the crate docs) with a
//! completion channel, and `close_device` closes it.

#![forbid(unsafe_code)]

use relink_fabric::{ContextId, DestroyError, Destroyed, DeviceId, OpenError};

use super::scan::reg_key;
use super::{log_rc, Ctx, VerbsProvider};
use crate::errno::{self, codes};
use crate::ffi::{self, DeviceList};

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
        let list = DeviceList::get().map_err(|e| errno::open_error(e, &device.name))?;
        let mut raw_ctx = None;
        let mut err = codes::ENODEV;
        for dev in list.iter() {
            let (k, _) = reg_key(dev);
            if k.same_registration(&key) {
                // The context holds its own reference to the device.
                match dev.open() {
                    Ok(c) => raw_ctx = Some(c),
                    Err(e) => err = e,
                }
                break;
            }
        }
        // The list is freed once; the context keeps its device.
        drop(list);
        let raw_ctx = raw_ctx.ok_or_else(|| errno::open_error(err, &device.name))?;
        // The context opened above, with nothing on it, is closed on failure.
        let close = |raw_ctx: ffi::Context, e: i32| {
            let _ = raw_ctx.close();
            errno::open_error(e, &device.name)
        };
        let dattr = match raw_ctx.query_device() {
            Ok(a) => a,
            Err(rc) => return Err(close(raw_ctx, rc)),
        };
        let link_layer = raw_ctx.query_port(1).map_or(0, |p| p.link_layer);
        let chan = match raw_ctx.create_comp_channel() {
            Ok(ch) => ch,
            Err(e) => return Err(close(raw_ctx, e)),
        };
        if let Err(e) = ffi::set_nonblocking(raw_ctx.async_fd_borrowed())
            .and_then(|()| ffi::set_nonblocking(chan.fd_borrowed()))
        {
            // The channel created above has no CQ.
            let _ = chan.destroy();
            return Err(close(raw_ctx, e.raw_os_error().unwrap_or(codes::EIO)));
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
            // No CQ is left on the channel.
            log_rc("ibv_destroy_comp_channel", ch.destroy().err().unwrap_or(0));
        }
        // No object is left on the context; closed once.
        let rc = raw.close().err().unwrap_or(0);
        inner.fds_changed = true;
        drop(inner);
        self.shared.kick();
        errno::destroy_result(rc, "context", alive)
    }

    pub(super) fn context_device(&self, ctx: ContextId) -> Option<DeviceId> {
        self.lock().ctxs.get(&ctx.0).map(|c| c.device.clone())
    }
}
