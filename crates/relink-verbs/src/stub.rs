//! The provider as built without the `rdma` feature: it cannot be created,
//! so every method is unreachable (the type is uninhabited).

#![forbid(unsafe_code)]

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use relink_fabric::{
    Access, CmError, CmId, ConnParams, ContextId, CqId, CreateError, DestroyError, Destroyed,
    DeviceId, DeviceInfo, Event, Memory, MemoryError, MrId, MrInfo, MwBind, MwId, MwInfo, MwType,
    ObjectCounts, OpenError, PdId, PollError, PostError, Provider, QpId, QpInit, QpState, RecvWr,
    SendWr, SrqId, SrqInit, Timestamp, WorkCompletion,
};

use crate::{VerbsConfig, VerbsError};

/// The rdma-core provider. This build has no `rdma` feature:
/// [`VerbsProvider::new`] always fails with [`VerbsError::NotBuilt`].
#[derive(Debug)]
pub struct VerbsProvider {
    never: Infallible,
}

/// Asks a provider's event thread to re-scan the device list now.
#[derive(Debug, Clone)]
pub struct RescanHandle {
    never: Infallible,
}

impl RescanHandle {
    /// Re-scan soon.
    pub fn rescan(&self) {
        match self.never {}
    }
}

impl VerbsProvider {
    /// Fails: this build has no `rdma` feature.
    pub fn new() -> Result<VerbsProvider, VerbsError> {
        VerbsProvider::with_config(VerbsConfig::default())
    }

    /// Fails: this build has no `rdma` feature.
    pub fn with_config(_config: VerbsConfig) -> Result<VerbsProvider, VerbsError> {
        Err(VerbsError::NotBuilt)
    }

    /// Re-scan the device list now.
    pub fn rescan_now(&self) {
        match self.never {}
    }

    /// A handle for an external device watcher.
    pub fn rescan_handle(&self) -> RescanHandle {
        match self.never {}
    }

    /// The backend of the provider's device watcher.
    pub fn watch_backend(&self) -> Option<&'static str> {
        match self.never {}
    }
}

impl Provider for VerbsProvider {
    fn kind(&self) -> &'static str {
        match self.never {}
    }
    fn now(&self) -> Timestamp {
        match self.never {}
    }
    fn wait(&self, _deadline: Option<Timestamp>) {
        match self.never {}
    }
    fn poll_event(&self) -> Option<Event> {
        match self.never {}
    }
    fn devices(&self) -> Vec<DeviceInfo> {
        match self.never {}
    }
    fn open_device(&self, _device: &DeviceId) -> Result<ContextId, OpenError> {
        match self.never {}
    }
    fn close_device(&self, _ctx: ContextId) -> Result<Destroyed, DestroyError> {
        match self.never {}
    }
    fn context_device(&self, _ctx: ContextId) -> Option<DeviceId> {
        match self.never {}
    }
    fn alloc_memory(&self, _len: usize) -> Result<Memory, MemoryError> {
        match self.never {}
    }
    fn alloc_pd(&self, _ctx: ContextId) -> Result<PdId, CreateError> {
        match self.never {}
    }
    fn dealloc_pd(&self, _pd: PdId) -> Result<Destroyed, DestroyError> {
        match self.never {}
    }
    fn create_cq(&self, _ctx: ContextId, _depth: u32) -> Result<CqId, CreateError> {
        match self.never {}
    }
    fn destroy_cq(&self, _cq: CqId) -> Result<Destroyed, DestroyError> {
        match self.never {}
    }
    fn req_notify_cq(&self, _cq: CqId, _solicited_only: bool) -> Result<(), PollError> {
        match self.never {}
    }
    fn poll_cq(
        &self,
        _cq: CqId,
        _max: usize,
        _out: &mut Vec<WorkCompletion>,
    ) -> Result<usize, PollError> {
        match self.never {}
    }
    fn create_srq(&self, _pd: PdId, _init: SrqInit) -> Result<SrqId, CreateError> {
        match self.never {}
    }
    fn destroy_srq(&self, _srq: SrqId) -> Result<Destroyed, DestroyError> {
        match self.never {}
    }
    fn post_srq_recv(&self, _srq: SrqId, _wrs: &[RecvWr]) -> Result<(), PostError> {
        match self.never {}
    }
    fn reg_mr(
        &self,
        _pd: PdId,
        _memory: &Memory,
        _addr: u64,
        _length: u64,
        _access: Access,
    ) -> Result<MrInfo, CreateError> {
        match self.never {}
    }
    fn dereg_mr(&self, _mr: MrId) -> Result<Destroyed, DestroyError> {
        match self.never {}
    }
    fn alloc_mw(&self, _pd: PdId, _kind: MwType) -> Result<MwInfo, CreateError> {
        match self.never {}
    }
    fn bind_mw(&self, _qp: QpId, _mw: MwId, _wr_id: u64, _bind: MwBind) -> Result<u32, PostError> {
        match self.never {}
    }
    fn dealloc_mw(&self, _mw: MwId) -> Result<Destroyed, DestroyError> {
        match self.never {}
    }
    fn create_qp(&self, _pd: PdId, _init: QpInit) -> Result<QpId, CreateError> {
        match self.never {}
    }
    fn destroy_qp(&self, _qp: QpId) -> Result<Destroyed, DestroyError> {
        match self.never {}
    }
    fn qp_state(&self, _qp: QpId) -> Result<QpState, PollError> {
        match self.never {}
    }
    fn qp_to_error(&self, _qp: QpId) -> Result<(), PostError> {
        match self.never {}
    }
    fn post_send(&self, _qp: QpId, _wrs: &[SendWr]) -> Result<(), PostError> {
        match self.never {}
    }
    fn post_recv(&self, _qp: QpId, _wrs: &[RecvWr]) -> Result<(), PostError> {
        match self.never {}
    }
    fn cm_create_id(&self) -> Result<CmId, CmError> {
        match self.never {}
    }
    fn cm_bind(&self, _id: CmId, _addr: SocketAddr) -> Result<SocketAddr, CmError> {
        match self.never {}
    }
    fn cm_listen(&self, _id: CmId, _backlog: u32) -> Result<(), CmError> {
        match self.never {}
    }
    fn cm_resolve_addr(
        &self,
        _id: CmId,
        _src: Option<IpAddr>,
        _dst: SocketAddr,
        _timeout: Duration,
    ) -> Result<(), CmError> {
        match self.never {}
    }
    fn cm_resolve_route(&self, _id: CmId, _timeout: Duration) -> Result<(), CmError> {
        match self.never {}
    }
    fn cm_device(&self, _id: CmId) -> Option<DeviceId> {
        match self.never {}
    }
    fn cm_addrs(&self, _id: CmId) -> (Option<SocketAddr>, Option<SocketAddr>) {
        match self.never {}
    }
    fn cm_connect(
        &self,
        _id: CmId,
        _qp: QpId,
        _params: ConnParams,
        _private_data: &[u8],
    ) -> Result<(), CmError> {
        match self.never {}
    }
    fn cm_accept(&self, _id: CmId, _qp: QpId, _private_data: &[u8]) -> Result<(), CmError> {
        match self.never {}
    }
    fn cm_reject(&self, _id: CmId, _private_data: &[u8]) -> Result<(), CmError> {
        match self.never {}
    }
    fn cm_disconnect(&self, _id: CmId) -> Result<(), CmError> {
        match self.never {}
    }
    fn cm_destroy_id(&self, _id: CmId) -> Result<Destroyed, DestroyError> {
        match self.never {}
    }
    fn object_counts(&self) -> ObjectCounts {
        match self.never {}
    }
}
