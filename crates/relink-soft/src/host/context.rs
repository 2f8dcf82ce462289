//! Device contexts, host memory, protection domains and completion queues;
//! [`HostState::complete`] is where every work completion enters a CQ.

use std::collections::VecDeque;

use relink_fabric::{
    AsyncEvent, CreateError, DestroyError, Destroyed, DeviceId, Event, Memory, OpenError,
    PollError, WorkCompletion,
};
use relink_fabric::{ContextId, CqId, PdId};

use super::{Cq, Ctx, HostState, Pd};
impl HostState {
    /// Open a device context.
    pub fn open_device(&mut self, id: &DeviceId) -> Result<ContextId, OpenError> {
        if !self.usable(id) {
            return Err(OpenError::NoDevice(id.to_string()));
        }
        let h = self.handle();
        self.ctxs.insert(h, Ctx { dev: id.clone() });
        Ok(ContextId(h))
    }

    /// Close a context.
    pub fn close_device(&mut self, ctx: ContextId) -> Result<Destroyed, DestroyError> {
        if !self.ctxs.contains_key(&ctx.0) {
            return Err(DestroyError::InvalidHandle("context"));
        }
        if self.index.in_use(ctx.0) {
            return Err(DestroyError::Busy(
                if self.pds.values().any(|p| p.ctx == ctx.0) {
                    "context (PDs)"
                } else {
                    "context (CQs)"
                },
            ));
        }
        let dev = self.ctxs.remove(&ctx.0).expect("present").dev;
        Ok(self.destroyed(&dev))
    }

    pub(super) fn destroyed(&self, dev: &DeviceId) -> Destroyed {
        if self.alive(dev) {
            Destroyed::Released
        } else {
            Destroyed::AlreadyReleased
        }
    }

    /// The device of a context.
    pub fn context_device(&self, ctx: ContextId) -> Option<DeviceId> {
        self.ctxs.get(&ctx.0).map(|c| c.dev.clone())
    }

    /// Host memory at a fresh, never reused, page-aligned address.
    pub fn alloc_memory(&mut self, len: usize) -> Result<Memory, relink_fabric::MemoryError> {
        let addr = self.next_mem;
        let memory = relink_fabric::HeapMemory::try_new(addr, len)?;
        let pages = (len as u64).div_ceil(4096).max(1);
        self.next_mem += (pages + 1) * 4096;
        Ok(Memory::new(std::sync::Arc::new(memory)))
    }

    fn ctx_dev(&self, ctx: ContextId) -> Result<DeviceId, CreateError> {
        let c = self
            .ctxs
            .get(&ctx.0)
            .ok_or(CreateError::InvalidHandle("context"))?;
        if !self.usable(&c.dev) {
            return Err(CreateError::DeviceLost);
        }
        Ok(c.dev.clone())
    }

    pub(super) fn pd_dev(&self, pd: PdId) -> Result<DeviceId, CreateError> {
        let p = self
            .pds
            .get(&pd.0)
            .ok_or(CreateError::InvalidHandle("PD"))?;
        if !self.usable(&p.dev) {
            return Err(CreateError::DeviceLost);
        }
        Ok(p.dev.clone())
    }

    /// Allocate a PD.
    pub fn alloc_pd(&mut self, ctx: ContextId) -> Result<PdId, CreateError> {
        let dev = self.ctx_dev(ctx)?;
        let h = self.handle();
        self.pds.insert(h, Pd { ctx: ctx.0, dev });
        self.index.use_object(ctx.0);
        Ok(PdId(h))
    }

    /// Free a PD.
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<Destroyed, DestroyError> {
        if !self.pds.contains_key(&pd.0) {
            return Err(DestroyError::InvalidHandle("PD"));
        }
        if self.index.in_use(pd.0) {
            return Err(DestroyError::Busy("PD"));
        }
        let p = self.pds.remove(&pd.0).expect("present");
        self.index.release_object(p.ctx);
        let dev = p.dev;
        Ok(self.destroyed(&dev))
    }

    /// Create a CQ.
    pub fn create_cq(&mut self, ctx: ContextId, depth: u32) -> Result<CqId, CreateError> {
        let dev = self.ctx_dev(ctx)?;
        if depth == 0 || depth > 1 << 20 {
            return Err(CreateError::InvalidArgument(format!(
                "CQ depth {depth} (1..=1048576)"
            )));
        }
        let h = self.handle();
        self.cqs.insert(
            h,
            Cq {
                ctx: ctx.0,
                dev,
                depth,
                entries: VecDeque::new(),
                armed: None,
            },
        );
        self.index.use_object(ctx.0);
        Ok(CqId(h))
    }

    /// Destroy a CQ.
    pub fn destroy_cq(&mut self, cq: CqId) -> Result<Destroyed, DestroyError> {
        if !self.cqs.contains_key(&cq.0) {
            return Err(DestroyError::InvalidHandle("CQ"));
        }
        if self.index.in_use(cq.0) {
            return Err(DestroyError::Busy("CQ"));
        }
        let c = self.cqs.remove(&cq.0).expect("present");
        self.index.release_object(c.ctx);
        let dev = c.dev;
        Ok(self.destroyed(&dev))
    }

    /// Arm a CQ for one notification.
    pub fn req_notify_cq(&mut self, cq: CqId, solicited_only: bool) -> Result<(), PollError> {
        let c = self.cqs.get_mut(&cq.0).ok_or(PollError::InvalidHandle)?;
        c.armed = Some(solicited_only);
        Ok(())
    }

    /// Moves up to `max` completions of a CQ, oldest first, to the end of
    /// `out`; returns how many.
    pub fn poll_cq(
        &mut self,
        cq: CqId,
        max: usize,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize, PollError> {
        let c = self.cqs.get_mut(&cq.0).ok_or(PollError::InvalidHandle)?;
        let n = max.min(c.entries.len());
        out.extend(c.entries.drain(..n));
        Ok(n)
    }

    pub(super) fn complete(&mut self, cq: CqId, wc: WorkCompletion, solicited: bool) {
        let Some(c) = self.cqs.get_mut(&cq.0) else {
            return;
        };
        c.entries.push_back(wc);
        let overflow = c.entries.len() > c.depth as usize;
        let notify = match c.armed {
            Some(true) => solicited || !wc.status.is_ok(),
            Some(false) => true,
            None => false,
        };
        if notify {
            c.armed = None;
        }
        let ctx = c.ctx;
        self.note_activity();
        if notify {
            self.push_event(Event::CqReady(cq));
        }
        if overflow {
            self.push_event(Event::Async {
                ctx: ContextId(ctx),
                event: AsyncEvent::CqErr(cq),
            });
        }
    }
}
