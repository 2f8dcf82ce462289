//! The [`Provider`](relink_fabric::Provider) methods both soft modes
//! implement the same way: lock the host, call [`HostState`](crate::host::HostState),
//! hand the [`Outbox`](crate::outbox::Outbox) to the transport. The
//! implementing type provides `fn with(&self, f)` (mutable access plus an
//! outbox) and `fn read(&self, f)`.

/// Expands, inside `impl Provider for T`, to every method that only
/// delegates to the host engine (all but `kind`, `now`, `wait`,
/// `poll_event`, `cm_bind` and `cm_listen`).
macro_rules! delegate_to_host {
    () => {
        fn devices(&self) -> Vec<DeviceInfo> {
            self.read(|h| h.devices())
        }

        fn open_device(&self, device: &DeviceId) -> Result<ContextId, OpenError> {
            self.with(|h, _| h.open_device(device))
        }

        fn close_device(&self, ctx: ContextId) -> Result<Destroyed, DestroyError> {
            self.with(|h, _| h.close_device(ctx))
        }

        fn context_device(&self, ctx: ContextId) -> Option<DeviceId> {
            self.read(|h| h.context_device(ctx))
        }

        fn alloc_memory(&self, len: usize) -> Result<Memory, MemoryError> {
            if len > 1 << 34 {
                return Err(MemoryError::Exhausted(len));
            }
            self.with(|h, _| h.alloc_memory(len))
        }

        fn alloc_pd(&self, ctx: ContextId) -> Result<PdId, CreateError> {
            self.with(|h, _| h.alloc_pd(ctx))
        }

        fn dealloc_pd(&self, pd: PdId) -> Result<Destroyed, DestroyError> {
            self.with(|h, _| h.dealloc_pd(pd))
        }

        fn create_cq(&self, ctx: ContextId, depth: u32) -> Result<CqId, CreateError> {
            self.with(|h, _| h.create_cq(ctx, depth))
        }

        fn destroy_cq(&self, cq: CqId) -> Result<Destroyed, DestroyError> {
            self.with(|h, _| h.destroy_cq(cq))
        }

        fn req_notify_cq(&self, cq: CqId, solicited_only: bool) -> Result<(), PollError> {
            self.with(|h, _| h.req_notify_cq(cq, solicited_only))
        }

        fn poll_cq(
            &self,
            cq: CqId,
            max: usize,
            out: &mut Vec<WorkCompletion>,
        ) -> Result<usize, PollError> {
            self.with(|h, _| h.poll_cq(cq, max, out))
        }

        fn create_srq(&self, pd: PdId, init: SrqInit) -> Result<SrqId, CreateError> {
            self.with(|h, _| h.create_srq(pd, init))
        }

        fn destroy_srq(&self, srq: SrqId) -> Result<Destroyed, DestroyError> {
            self.with(|h, _| h.destroy_srq(srq))
        }

        fn post_srq_recv(&self, srq: SrqId, wrs: &[RecvWr]) -> Result<(), PostError> {
            self.with(|h, _| h.post_srq_recv(srq, wrs))
        }

        fn reg_mr(
            &self,
            pd: PdId,
            memory: &Memory,
            addr: u64,
            length: u64,
            access: Access,
        ) -> Result<MrInfo, CreateError> {
            self.with(|h, _| h.reg_mr(pd, memory, addr, length, access))
        }

        fn dereg_mr(&self, mr: MrId) -> Result<Destroyed, DestroyError> {
            self.with(|h, _| h.dereg_mr(mr))
        }

        fn alloc_mw(&self, pd: PdId, kind: MwType) -> Result<MwInfo, CreateError> {
            self.with(|h, _| h.alloc_mw(pd, kind))
        }

        fn bind_mw(&self, qp: QpId, mw: MwId, wr_id: u64, bind: MwBind) -> Result<u32, PostError> {
            self.with(|h, o| h.bind_mw(qp, mw, wr_id, bind, o))
        }

        fn dealloc_mw(&self, mw: MwId) -> Result<Destroyed, DestroyError> {
            self.with(|h, _| h.dealloc_mw(mw))
        }

        fn create_qp(&self, pd: PdId, init: QpInit) -> Result<QpId, CreateError> {
            self.with(|h, _| h.create_qp(pd, init))
        }

        fn destroy_qp(&self, qp: QpId) -> Result<Destroyed, DestroyError> {
            self.with(|h, _| h.destroy_qp(qp))
        }

        fn qp_state(&self, qp: QpId) -> Result<QpState, PollError> {
            self.read(|h| h.qp_state(qp))
        }

        fn qp_to_error(&self, qp: QpId) -> Result<(), PostError> {
            self.with(|h, _| h.qp_to_error(qp))
        }

        fn post_send(&self, qp: QpId, wrs: &[SendWr]) -> Result<(), PostError> {
            self.with(|h, o| h.post_send(qp, wrs, o))
        }

        fn post_recv(&self, qp: QpId, wrs: &[RecvWr]) -> Result<(), PostError> {
            self.with(|h, _| h.post_recv(qp, wrs))
        }

        fn cm_create_id(&self) -> Result<CmId, CmError> {
            Ok(self.with(|h, _| h.cm_create_id()))
        }

        fn cm_resolve_addr(
            &self,
            id: CmId,
            src: Option<IpAddr>,
            dst: SocketAddr,
            timeout: Duration,
        ) -> Result<(), CmError> {
            self.with(|h, o| h.cm_resolve_addr(id, src, dst, timeout, o))
        }

        fn cm_resolve_route(&self, id: CmId, _timeout: Duration) -> Result<(), CmError> {
            self.with(|h, _| h.cm_resolve_route(id))
        }

        fn cm_device(&self, id: CmId) -> Option<DeviceId> {
            self.read(|h| h.cm_device(id))
        }

        fn cm_addrs(&self, id: CmId) -> (Option<SocketAddr>, Option<SocketAddr>) {
            self.read(|h| h.cm_addrs(id))
        }

        fn cm_connect(
            &self,
            id: CmId,
            qp: QpId,
            params: ConnParams,
            private_data: &[u8],
        ) -> Result<(), CmError> {
            self.with(|h, o| h.cm_connect(id, qp, params, private_data, o))
        }

        fn cm_accept(&self, id: CmId, qp: QpId, private_data: &[u8]) -> Result<(), CmError> {
            self.with(|h, o| h.cm_accept(id, qp, private_data, o))
        }

        fn cm_reject(&self, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
            self.with(|h, o| h.cm_reject(id, private_data, o))
        }

        fn cm_disconnect(&self, id: CmId) -> Result<(), CmError> {
            self.with(|h, o| h.cm_disconnect(id, o))
        }

        fn cm_destroy_id(&self, id: CmId) -> Result<Destroyed, DestroyError> {
            self.with(|h, o| h.cm_destroy_id(id, o))
        }

        fn object_counts(&self) -> ObjectCounts {
            self.read(|h| h.object_counts())
        }
    };
}

pub(crate) use delegate_to_host;
