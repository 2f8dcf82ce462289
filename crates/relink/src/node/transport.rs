//! One epoch's provider objects of a session, built from the core's plan
//! and torn down with destroy calls only.

use std::collections::BTreeMap;

use relink_core::reason::{AttemptFailure, ProviderFailure, TransportObject};
use relink_core::resources::{build_plan, SessionSpec, Step};
use relink_core::session::LocalKeys;
use relink_core::{Epoch, RegionId};
use relink_fabric::{
    Access, CmId, ContextId, CqId, DeviceInfo, Memory, MrInfo, OpenError, PdId, Provider, QpId,
    QpInit,
};

use super::wr::{WrBatch, TAG_MASK, TAG_ONE_SIDED, TAG_SEND};

/// Host memory of a session: allocated once when the session is made (a
/// region of the application's memory is the application's handle, maybe
/// shared with other sessions), registered on every device the session
/// uses (same addresses every time). A clone shares the memory.
#[derive(Clone)]
pub(super) struct SessionMemory {
    pub send: Memory,
    pub recv: Memory,
    pub regions: BTreeMap<RegionId, Memory>,
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
            device: None,
            connected: false,
            free_slots: (0..send_slots).rev().collect(),
            slot_op: vec![None; send_slots as usize],
            posted: std::collections::VecDeque::new(),
            unsignaled: 0,
            cq_indexed: false,
        }
    }

    /// Run the core's plan on `device` (the device the CM id resolved to).
    pub fn build(
        &mut self,
        p: &dyn Provider,
        device: DeviceInfo,
        spec: &SessionSpec,
        mem: &SessionMemory,
    ) -> Result<(), AttemptFailure> {
        let e = |object, error| ProviderFailure::Create { object, error };
        for step in build_plan(spec) {
            match step {
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
                    let mr = p
                        .reg_mr(
                            self.pd.expect("pd"),
                            &mem.recv,
                            mem.recv.addr(),
                            len,
                            Access::LOCAL_WRITE,
                        )
                        .map_err(|x| e(TransportObject::RecvSlots, x))?;
                    self.recv_mr = Some(mr);
                }
                Step::RegisterRegion(r) => {
                    let m = &mem.regions[&r.id];
                    let mr = p
                        .reg_mr(self.pd.expect("pd"), m, m.addr(), r.len, r.access)
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
                                srq: None,
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

    /// rkeys of the regions, for the core's advertisements.
    pub fn local_keys(&self) -> Vec<LocalKeys> {
        self.region_mrs
            .iter()
            .map(|(id, mr)| LocalKeys {
                region: *id,
                addr: mr.addr,
                rkey: mr.rkey,
            })
            .collect()
    }

    /// Destroy everything, children first. After a device loss the
    /// provider reports "already released"; that is the normal case here.
    pub fn tear_down(&mut self, p: &dyn Provider) {
        if let Some(qp) = self.qp.take() {
            log_destroy("QP", p.destroy_qp(qp));
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

fn log_destroy(what: &str, r: Result<relink_fabric::Destroyed, relink_fabric::DestroyError>) {
    match r {
        Ok(relink_fabric::Destroyed::Released) => {}
        Ok(relink_fabric::Destroyed::AlreadyReleased) => {
            tracing::debug!("{what} already released with its device");
        }
        Err(e) => tracing::warn!("destroying {what}: {e}"),
    }
}
