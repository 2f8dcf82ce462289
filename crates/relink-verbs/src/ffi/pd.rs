//! Protection domains, memory regions (only over the provider's own
//! mappings) and memory windows.

use std::os::raw::{c_int, c_void};
use std::sync::Arc;

use relink_fabric::HostMemory;
use relink_verbs_sys as sys;

use super::device::{Context, CtxNode};
use super::memory::MappedMemory;
use super::{last_errno, Raw};
use crate::errno::codes;

/// The PD itself, held by its [`Pd`] and every object on it (rule 2).
pub(super) struct PdNode {
    pub(super) raw: Raw<sys::ibv_pd>,
    _ctx: Arc<CtxNode>,
}

/// A protection domain.
pub(crate) struct Pd {
    pub(super) node: Arc<PdNode>,
}

pub(super) fn alloc_pd(ctx: &Context) -> Result<Pd, i32> {
    // SAFETY: a live context (rule 1); the PD is deallocated once, by
    // `Pd::dealloc` (or leaked).
    let raw = Raw::new(unsafe { sys::ibv_alloc_pd(ctx.node.raw.get()) }).ok_or_else(last_errno)?;
    Ok(Pd {
        node: Arc::new(PdNode {
            raw,
            _ctx: ctx.node.clone(),
        }),
    })
}

impl Pd {
    /// Deallocate the PD: once nothing on it holds it (rule 2; otherwise
    /// `EBUSY`, nothing called); on failure the handle comes back with the
    /// errno.
    pub(crate) fn dealloc(self) -> Result<(), (Pd, i32)> {
        let node = match Arc::try_unwrap(self.node) {
            Ok(node) => node,
            Err(node) => return Err((Pd { node }, codes::EBUSY)),
        };
        // SAFETY: a live PD with no object of ours on it (rule 2),
        // deallocated once: on success the node is dropped below.
        let rc = unsafe { sys::ibv_dealloc_pd(node.raw.get()) };
        if rc != 0 {
            return Err((
                Pd {
                    node: Arc::new(node),
                },
                rc,
            ));
        }
        Ok(())
    }

    /// Register `length` bytes at `addr` of the provider's mapping
    /// `memory` (rule 3: `EINVAL` unless the range lies inside it), with
    /// the verbs access flags `access`; the errno on failure. The MR keeps
    /// the mapping alive until it is deregistered.
    pub(crate) fn reg_mr(
        &self,
        memory: &Arc<MappedMemory>,
        addr: u64,
        length: u64,
        access: u32,
    ) -> Result<Mr, i32> {
        let start = memory.addr();
        let inside = addr >= start
            && addr
                .checked_add(length)
                .is_some_and(|end| end <= start + memory.len() as u64);
        if !inside {
            return Err(codes::EINVAL);
        }
        // SAFETY: a live PD; the range lies inside a live mapping of this
        // provider (checked above), which Rust only accesses by raw copies
        // and which the MR keeps mapped (`_memory`) until it is
        // deregistered (rule 3).
        let raw = Raw::new(unsafe {
            sys::ibv_reg_mr(
                self.node.raw.get(),
                addr as *mut c_void,
                length as usize,
                access as c_int,
            )
        })
        .ok_or_else(last_errno)?;
        Ok(Mr {
            raw,
            _pd: self.node.clone(),
            _memory: memory.clone(),
        })
    }

    /// Allocate a memory window of type `ty` (`IBV_MW_TYPE_*`); the errno
    /// on failure.
    pub(crate) fn alloc_mw(&self, ty: u32) -> Result<Mw, i32> {
        // SAFETY: a live PD; the window is deallocated once, by
        // `Mw::dealloc` (or leaked).
        let raw = Raw::new(unsafe { sys::ibv_alloc_mw(self.node.raw.get(), ty) })
            .ok_or_else(last_errno)?;
        Ok(Mw {
            raw,
            _pd: self.node.clone(),
        })
    }
}

/// A memory region.
pub(crate) struct Mr {
    pub(super) raw: Raw<sys::ibv_mr>,
    _pd: Arc<PdNode>,
    _memory: Arc<MappedMemory>,
}

impl Mr {
    /// The local and remote keys.
    pub(crate) fn keys(&self) -> (u32, u32) {
        // SAFETY: a live MR (rule 1); the keys are plain fields.
        unsafe { ((*self.raw.get()).lkey, (*self.raw.get()).rkey) }
    }

    /// Deregister the MR; on failure the handle comes back with the errno.
    pub(crate) fn dereg(self) -> Result<(), (Mr, i32)> {
        // SAFETY: a live MR, deregistered once: on success `self` is
        // dropped (rule 1).
        let rc = unsafe { sys::ibv_dereg_mr(self.raw.get()) };
        if rc != 0 {
            return Err((self, rc));
        }
        Ok(())
    }
}

/// A memory window.
pub(crate) struct Mw {
    pub(super) raw: Raw<sys::ibv_mw>,
    _pd: Arc<PdNode>,
}

impl Mw {
    /// The window's current rkey (rdma-core updates it at each bind).
    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: a live window (rule 1); the key is a plain field, which
        // rdma-core writes only in `Qp::bind_mw`, which borrows the window
        // mutably: no write races this read.
        unsafe { (*self.raw.get()).rkey }
    }

    /// Deallocate the window; on failure the handle comes back with the
    /// errno.
    pub(crate) fn dealloc(self) -> Result<(), (Mw, i32)> {
        // SAFETY: a live window, deallocated once: on success `self` is
        // dropped (rule 1).
        let rc = unsafe { sys::ibv_dealloc_mw(self.raw.get()) };
        if rc != 0 {
            return Err((self, rc));
        }
        Ok(())
    }
}
