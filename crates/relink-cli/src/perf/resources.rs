//! The verbs objects of one end of a connection (context, PD, CQ, QP and
//! one registered buffer): created together, undone if creation fails half
//! way, destroyed in dependency order.

use anyhow::Context as _;
use relink_fabric::{
    Access, CmId, ContextId, CqId, DestroyError, Destroyed, DeviceId, Memory, MrId, MrInfo, PdId,
    Provider, QpCaps, QpId, QpInit, Sge,
};

use super::output::warn;

/// What to create for one end of a connection.
pub(super) struct EndSpec {
    /// Entries of the one CQ (sends and receives share it).
    pub(super) cq_depth: u32,
    /// The QP's queue sizes.
    pub(super) caps: QpCaps,
    /// Bytes of the one registered buffer.
    pub(super) buf_len: u32,
    /// The buffer's rights.
    pub(super) access: Access,
}

/// The verbs objects of one end of a connection (the CM id is held apart).
#[derive(Debug)]
pub(super) struct Resources {
    ctx: ContextId,
    pd: PdId,
    pub(super) cq: CqId,
    pub(super) qp: QpId,
    /// The buffer, `buf_len` bytes: the client sends from its start, the
    /// server receives (or is written) into it.
    pub(super) mem: Memory,
    /// The buffer's registration.
    pub(super) mr: MrInfo,
}

/// Destroys whatever of a connection's objects exist, in dependency order
/// (QP, MR, CQ, PD, context). After a device loss the calls report
/// [`Destroyed::AlreadyReleased`], which is fine. Returns the failures.
fn destroy_objects(
    p: &dyn Provider,
    qp: Option<QpId>,
    mr: Option<MrId>,
    cq: Option<CqId>,
    pd: Option<PdId>,
    ctx: Option<ContextId>,
) -> Vec<String> {
    let mut failures = Vec::new();
    let mut check = |what: String, r: Result<Destroyed, DestroyError>| {
        if let Err(e) = r {
            failures.push(format!("destroying {what}: {e}"));
        }
    };
    if let Some(qp) = qp {
        check(qp.to_string(), p.destroy_qp(qp));
    }
    if let Some(mr) = mr {
        check(mr.to_string(), p.dereg_mr(mr));
    }
    if let Some(cq) = cq {
        check(cq.to_string(), p.destroy_cq(cq));
    }
    if let Some(pd) = pd {
        check(pd.to_string(), p.dealloc_pd(pd));
    }
    if let Some(ctx) = ctx {
        check(ctx.to_string(), p.close_device(ctx));
    }
    failures
}

/// Destroys what [`Resources::open`] created so far if it fails half way.
struct Undo<'a> {
    p: &'a dyn Provider,
    ctx: Option<ContextId>,
    pd: Option<PdId>,
    cq: Option<CqId>,
    qp: Option<QpId>,
    mr: Option<MrId>,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        for f in destroy_objects(self.p, self.qp, self.mr, self.cq, self.pd, self.ctx) {
            warn(&f);
        }
    }
}

impl Resources {
    /// Opens `device` and creates a PD, one CQ (for sends and receives), an
    /// RC QP, and `buf_len` bytes of memory registered as one MR.
    pub(super) fn open(
        p: &dyn Provider,
        device: &DeviceId,
        spec: &EndSpec,
    ) -> anyhow::Result<Resources> {
        let mut undo = Undo {
            p,
            ctx: None,
            pd: None,
            cq: None,
            qp: None,
            mr: None,
        };
        let ctx = p
            .open_device(device)
            .with_context(|| format!("cannot open device {device}"))?;
        undo.ctx = Some(ctx);
        let pd = p
            .alloc_pd(ctx)
            .with_context(|| format!("cannot allocate a PD on {device}"))?;
        undo.pd = Some(pd);
        let cq = p
            .create_cq(ctx, spec.cq_depth)
            .with_context(|| format!("cannot create a CQ of {} on {device}", spec.cq_depth))?;
        undo.cq = Some(cq);
        let qp = p
            .create_qp(
                pd,
                QpInit {
                    send_cq: cq,
                    recv_cq: cq,
                    srq: None,
                    caps: spec.caps,
                    sq_sig_all: false,
                },
            )
            .with_context(|| format!("cannot create a QP on {device}"))?;
        undo.qp = Some(qp);
        let len = spec.buf_len as usize;
        let mem = p
            .alloc_memory(len)
            .with_context(|| format!("cannot allocate {len} bytes of memory"))?;
        let mr = p
            .reg_mr(pd, &mem, mem.addr(), u64::from(spec.buf_len), spec.access)
            .with_context(|| format!("cannot register {len} bytes on {device}"))?;
        undo.mr = Some(mr.id);
        // Everything exists: nothing to undo.
        undo.ctx = None;
        undo.pd = None;
        undo.cq = None;
        undo.qp = None;
        undo.mr = None;
        Ok(Resources {
            ctx,
            pd,
            cq,
            qp,
            mem,
            mr,
        })
    }

    /// Destroys everything in dependency order; returns the failures.
    pub(super) fn destroy(self, p: &dyn Provider) -> Vec<String> {
        destroy_objects(
            p,
            Some(self.qp),
            Some(self.mr.id),
            Some(self.cq),
            Some(self.pd),
            Some(self.ctx),
        )
    }

    /// One SGE over `len` bytes at the start of the buffer.
    pub(super) fn sge(&self, len: u32) -> Sge {
        Sge {
            addr: self.mem.addr(),
            length: len,
            lkey: self.mr.lkey,
        }
    }
}

/// Destroys a CM id, warning on failure.
pub(super) fn destroy_id(p: &dyn Provider, id: CmId) {
    if let Err(e) = p.cm_destroy_id(id) {
        warn(&format!("destroying {id}: {e}"));
    }
}
