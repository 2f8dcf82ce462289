//! One epoch's provider objects of a session, built from the core's plan
//! and torn down with destroy calls only.

use std::collections::BTreeMap;
use std::sync::Arc;

use relink_core::reason::{AttemptFailure, ProviderFailure, TransportObject};
use relink_core::resources::{build_plan, SessionSpec, Step};
use relink_core::session::LocalKeys;
use relink_core::{Epoch, RegionId};
use relink_fabric::{
    Access, CmId, ContextId, CqId, DeviceInfo, Memory, MrInfo, OpenError, PdId, Provider, QpId,
    QpInit, WorkCompletion,
};

use super::destroy::log_destroy;
use super::shared_receive::{Attached, Reservation};
use super::windows::Windows;
use super::wr::{WrBatch, TAG_MASK, TAG_ONE_SIDED, TAG_RECV, TAG_SEND};

/// Host memory of a session: allocated once when the session is made (a
/// region of the application's memory is the application's handle, maybe
/// shared with other sessions), registered on every device the session
/// uses (same addresses every time). A clone shares the memory.
#[derive(Clone)]
pub(super) struct SessionMemory {
    pub send: Memory,
    pub recv: Memory,
    /// The second receive area, allocated with the session's first
    /// standby: a standby and the current transport never share receive
    /// slots (a message on one would overwrite one of the other), so a
    /// transport takes the area the other one does not use.
    pub recv_alt: Option<Memory>,
    pub regions: BTreeMap<RegionId, Memory>,
}

impl SessionMemory {
    /// The receive area of a transport (`alt`: the second one).
    pub fn recv_of(&self, alt: bool) -> &Memory {
        match (&self.recv_alt, alt) {
            (Some(m), true) => m,
            _ => &self.recv,
        }
    }
}

/// Provider objects of one epoch.
pub(super) struct Transport {
    pub epoch: Epoch,
    pub cm: Option<CmId>,
    pub ctx: Option<ContextId>,
    pub pd: Option<PdId>,
    pub cq: Option<CqId>,
    pub qp: Option<QpId>,
    pub send_mr: Option<MrInfo>,
    pub recv_mr: Option<MrInfo>,
    pub region_mrs: BTreeMap<RegionId, MrInfo>,
    /// The type 2 windows of the regions exposed through one
    /// (`windows.rs`).
    pub windows: Windows,
    /// The device's shared receive queue (with its context and PD), for a
    /// session on one (`shared_receive.rs`): `ctx` and `pd` are then its.
    pub shared: Option<Attached>,
    pub device: Option<DeviceInfo>,
    /// The CM says the connection is up.
    pub connected: bool,
    /// Free send slots.
    pub free_slots: Vec<u32>,
    /// What each send slot carries (the operation, if any).
    pub slot_op: Vec<Option<relink_core::OpId>>,
    /// wr_ids posted on the send queue and not yet completed, in order.
    pub posted: std::collections::VecDeque<u64>,
    /// Work requests posted since the last signaled one.
    pub unsignaled: u32,
    /// The node maps `cq` to its session (set once per transport).
    pub cq_indexed: bool,
    /// `cq` was armed and its event has not come yet (an event marks the
    /// CQ for the next round: a busy-polling node need not look at it).
    pub cq_armed: bool,
    /// Its receives land in the session's second receive area
    /// ([`SessionMemory::recv_alt`]).
    pub recv_alt: bool,
}

impl Transport {
    /// The transport of `epoch`, nothing built yet, every one of its
    /// `send_slots` send slots free.
    pub fn new(epoch: Epoch, cm: Option<CmId>, send_slots: u32) -> Transport {
        Transport {
            epoch,
            cm,
            ctx: None,
            pd: None,
            cq: None,
            qp: None,
            send_mr: None,
            recv_mr: None,
            region_mrs: BTreeMap::new(),
            windows: Windows::default(),
            shared: None,
            device: None,
            connected: false,
            free_slots: (0..send_slots).rev().collect(),
            slot_op: vec![None; send_slots as usize],
            posted: std::collections::VecDeque::new(),
            unsignaled: 0,
            cq_indexed: false,
            cq_armed: false,
            recv_alt: false,
        }
    }

    /// Run the core's plan on `device` (the device the CM id resolved to);
    /// `shared` is the session's share of its shared receive queue, if it
    /// has one.
    pub fn build(
        &mut self,
        provider: &Arc<dyn Provider>,
        device: DeviceInfo,
        spec: &SessionSpec,
        mem: &SessionMemory,
        shared: Option<&Arc<Reservation>>,
    ) -> Result<(), AttemptFailure> {
        let p = &**provider;
        let e = |object, error| ProviderFailure::Create { object, error };
        for step in build_plan(spec) {
            match step {
                Step::AttachSharedReceive => {
                    let r = shared.expect("a session on a shared receive queue has its share");
                    let a = r.attach(provider, &device)?;
                    self.ctx = a.device.ctx;
                    self.pd = a.device.pd;
                    self.shared = Some(a);
                    self.device = Some(device.clone());
                }
                Step::AllocWindow(r) => self.windows.alloc(p, self.pd.expect("pd"), r)?,
                Step::OpenDevice => {
                    self.ctx = Some(p.open_device(&device.id).map_err(|x| match x {
                        // The registration the route resolved to is gone.
                        OpenError::NoDevice(_) => AttemptFailure::DeviceLost,
                        OpenError::Io(io) => ProviderFailure::OpenDevice(io.kind()).into(),
                        _ => AttemptFailure::DeviceLost,
                    })?);
                    self.device = Some(device.clone());
                }
                Step::AllocPd => {
                    self.pd = Some(
                        p.alloc_pd(self.ctx.expect("ctx"))
                            .map_err(|x| e(TransportObject::Pd, x))?,
                    );
                }
                Step::CreateCq { depth } => {
                    self.cq = Some(
                        p.create_cq(self.ctx.expect("ctx"), depth)
                            .map_err(|x| e(TransportObject::Cq, x))?,
                    );
                }
                Step::RegisterSendSlots { len } => {
                    let mr = p
                        .reg_mr(
                            self.pd.expect("pd"),
                            &mem.send,
                            mem.send.addr(),
                            len,
                            Access::LOCAL_WRITE,
                        )
                        .map_err(|x| e(TransportObject::SendSlots, x))?;
                    self.send_mr = Some(mr);
                }
                Step::RegisterRecvSlots { len } => {
                    let recv = mem.recv_of(self.recv_alt);
                    let mr = p
                        .reg_mr(
                            self.pd.expect("pd"),
                            recv,
                            recv.addr(),
                            len,
                            Access::LOCAL_WRITE,
                        )
                        .map_err(|x| e(TransportObject::RecvSlots, x))?;
                    self.recv_mr = Some(mr);
                }
                Step::RegisterRegion(r) => {
                    let m = &mem.regions[&r.id];
                    let mr = p
                        .reg_mr(self.pd.expect("pd"), m, m.addr(), r.len, r.mr_access())
                        .map_err(|x| e(TransportObject::Region(r.id), x))?;
                    self.region_mrs.insert(r.id, mr);
                }
                Step::CreateQp { caps } => {
                    let cq = self.cq.expect("cq");
                    self.qp = Some(
                        p.create_qp(
                            self.pd.expect("pd"),
                            QpInit {
                                send_cq: cq,
                                recv_cq: cq,
                                srq: self.shared.as_ref().and_then(|a| a.device.srq),
                                caps,
                                sq_sig_all: false,
                            },
                        )
                        .map_err(|x| e(TransportObject::Qp, x))?,
                    );
                }
                Step::PostReceives { count } => {
                    let mr = self.recv_mr.expect("recv mr");
                    let mut wrs = WrBatch::default();
                    for slot in 0..count {
                        wrs.push_recv(&mr, spec.slot_size, slot);
                    }
                    p.post_recv(self.qp.expect("qp"), wrs.as_slice())
                        .map_err(ProviderFailure::PostRecv)?;
                }
            }
        }
        Ok(())
    }

    /// Post the bind of every window on the QP before anything else is
    /// posted on the connection (`windows.rs`); the windows' new rkeys are
    /// what [`local_keys`](Transport::local_keys) advertises.
    pub fn bind_windows(&mut self, p: &dyn Provider) -> Result<(), AttemptFailure> {
        if self.windows.is_empty() {
            return Ok(());
        }
        let qp = self.qp.expect("built");
        self.windows
            .bind(p, qp, &self.region_mrs, &mut self.posted)?;
        // Each bind is signaled: the count of unsignaled requests starts
        // again.
        self.unsignaled = 0;
        Ok(())
    }

    /// A send-queue request finished: free its slot; the operation it
    /// carried, if any.
    pub fn retire(&mut self, wr_id: u64) -> Option<relink_core::OpId> {
        match wr_id & TAG_MASK {
            TAG_SEND => {
                let s = (wr_id & !TAG_MASK) as usize;
                let op = self.slot_op.get_mut(s).and_then(Option::take);
                self.free_slots.push(s as u32);
                op
            }
            TAG_ONE_SIDED => Some(relink_core::OpId(wr_id & !TAG_MASK)),
            _ => None,
        }
    }

    /// rkeys of the regions, for the core's advertisements: a bound
    /// window's, or the MR's.
    pub fn local_keys(&self) -> Vec<LocalKeys> {
        self.region_mrs
            .iter()
            .map(|(id, mr)| LocalKeys {
                region: *id,
                addr: mr.addr,
                rkey: self.windows.rkey(*id).unwrap_or(mr.rkey),
            })
            .collect()
    }

    /// Post the receives of shared-receive-queue slots that completed
    /// (`wcs`, any status: each left the SRQ) to the SRQ again; nothing for
    /// a transport with receives of its own. Returns whether the post
    /// worked (it fails when the device has gone).
    pub fn return_shared_receives(
        &self,
        p: &dyn Provider,
        wcs: &[WorkCompletion],
        batch: &mut WrBatch<relink_fabric::RecvWr>,
    ) -> bool {
        let Some(a) = &self.shared else {
            return true;
        };
        let (Some(srq), Some(mr)) = (a.device.srq, a.device.recv_mr) else {
            return true;
        };
        batch.clear();
        for wc in wcs.iter().filter(|wc| wc.wr_id & TAG_MASK == TAG_RECV) {
            batch.push_recv(&mr, a.device.slot_size, (wc.wr_id & !TAG_MASK) as u32);
        }
        batch.is_empty() || p.post_srq_recv(srq, batch.as_slice()).is_ok()
    }

    /// Destroy everything, children first. After a device loss the
    /// provider reports "already released"; that is the normal case here.
    /// A session on a shared receive queue gives back the slots its CQ
    /// still holds, and leaves the context, PD and SRQ to the device's
    /// last transport.
    pub fn tear_down(&mut self, p: &dyn Provider) {
        self.windows.free(p);
        if let Some(qp) = self.qp.take() {
            log_destroy("QP", p.destroy_qp(qp));
        }
        if let (Some(cq), Some(_)) = (self.cq, &self.shared) {
            // The QP is gone: nothing more completes. Receives it took
            // from the SRQ and nobody read go back to the SRQ.
            let mut wcs = Vec::new();
            while p.poll_cq(cq, 64, &mut wcs).unwrap_or(0) > 0 {}
            let mut batch = WrBatch::default();
            self.return_shared_receives(p, &wcs, &mut batch);
        }
        for (_, mr) in std::mem::take(&mut self.region_mrs) {
            log_destroy("MR", p.dereg_mr(mr.id));
        }
        for mr in [self.send_mr.take(), self.recv_mr.take()]
            .into_iter()
            .flatten()
        {
            log_destroy("MR", p.dereg_mr(mr.id));
        }
        if let Some(cq) = self.cq.take() {
            log_destroy("CQ", p.destroy_cq(cq));
        }
        if self.shared.take().is_some() {
            // The device's shared objects: destroyed by their last holder.
            self.pd = None;
            self.ctx = None;
        }
        if let Some(pd) = self.pd.take() {
            log_destroy("PD", p.dealloc_pd(pd));
        }
        if let Some(ctx) = self.ctx.take() {
            log_destroy("context", p.close_device(ctx));
        }
        if let Some(cm) = self.cm.take() {
            log_destroy("CM id", p.cm_destroy_id(cm));
        }
        self.connected = false;
    }
}
