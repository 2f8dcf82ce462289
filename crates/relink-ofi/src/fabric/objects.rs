//! The objects of a fabric: event and completion queues, memory
//! registrations, passive and active endpoints (opened, bound, closed).

use super::*;

impl Fabric {
    /// `fi_eq_open`.
    pub fn eq_open(&self) -> Id {
        let mut st = self.lock();
        let id = st.id();
        st.eqs.insert(id, EventQueue::default());
        id
    }

    /// `fi_eq_read`: the next event (taken unless `peek`), `Ok(None)` if
    /// none, `Err(FI_EAVAIL)` when an error entry is at the head.
    pub fn eq_read(&self, eq: Id, peek: bool) -> Result<Option<EqEvent>, FiError> {
        let mut st = self.app_lock();
        st.progress();
        let q = st.eqs.get_mut(&eq).ok_or_else(|| bad_fid("event queue"))?;
        match q.read(peek) {
            Head::Empty => Ok(None),
            Head::Entry(e) => Ok(Some(e)),
            Head::Error(()) => fail(FI_EAVAIL, "an error entry waits: fi_eq_readerr"),
        }
    }

    /// `fi_eq_readerr`.
    pub fn eq_readerr(&self, eq: Id) -> Option<EqError> {
        self.lock().eqs.get_mut(&eq)?.read_error()
    }

    /// `fi_close` of an event queue.
    pub fn eq_close(&self, eq: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        if st.eps.values().any(|e| e.eq == Some(eq)) || st.peps.values().any(|p| p.eq == Some(eq)) {
            return fail(FI_EBUSY, "an endpoint is still bound to the event queue");
        }
        st.eqs.remove(&eq);
        Ok(())
    }

    // ---- completion queues ----

    /// `fi_cq_open`.
    pub fn cq_open(&self) -> Id {
        let mut st = self.lock();
        let id = st.id();
        st.cqs.insert(id, CompletionQueue::default());
        id
    }

    /// `fi_cq_read`: up to `max` completions; empty when none.
    pub fn cq_read(&self, cq: Id, max: usize) -> Result<Vec<CqEntry>, FiError> {
        let mut st = self.app_lock();
        st.progress();
        let q = st
            .cqs
            .get_mut(&cq)
            .ok_or_else(|| bad_fid("completion queue"))?;
        match q.read(max) {
            Head::Empty => {
                drop(st);
                // Nothing yet: what comes next is carried by the fabric's
                // threads (the soft fabric's, the kernel's); an application
                // that polls in a loop gives them the CPU.
                std::thread::yield_now();
                Ok(Vec::new())
            }
            Head::Entry(v) => Ok(v),
            Head::Error(()) => fail(FI_EAVAIL, "an error completion waits: fi_cq_readerr"),
        }
    }

    /// `fi_cq_readerr`.
    pub fn cq_readerr(&self, cq: Id) -> Option<CqError> {
        self.lock().cqs.get_mut(&cq)?.read_error()
    }

    /// `fi_close` of a completion queue.
    pub fn cq_close(&self, cq: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        if st
            .eps
            .values()
            .any(|e| e.tx_cq == Some(cq) || e.rx_cq == Some(cq))
        {
            return fail(
                FI_EBUSY,
                "an endpoint is still bound to the completion queue",
            );
        }
        st.cqs.remove(&cq);
        Ok(())
    }

    // ---- memory ----

    /// `fi_mr_reg`: register `memory` with the node under a key every
    /// session uses; the key (relink's registration id) stays the same
    /// across every reset and replacement.
    pub fn mr_reg(
        &self,
        memory: relink::Memory,
        access: relink::Access,
    ) -> Result<(Id, u64), FiError> {
        let mut st = self.lock();
        let region = st
            .node
            .register(memory, access)
            .map_err(|e| FiError::new(FI_EINVAL, format!("fi_mr_reg: {e}")))?;
        let id = st.id();
        st.mrs.insert(id, region);
        Ok((id, u64::from(region.0)))
    }

    /// `fi_close` of a registration.
    pub fn mr_close(&self, mr: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        let Some(&region) = st.mrs.get(&mr) else {
            return Ok(());
        };
        st.node
            .deregister(region)
            .map_err(|e| FiError::new(FI_EBUSY, format!("fi_close(mr): {e}")))?;
        st.mrs.remove(&mr);
        Ok(())
    }

    /// The registration behind descriptor `mr` (for local ranges).
    pub(super) fn region(st: &State, mr: Id) -> Result<relink::RegionId, FiError> {
        st.mrs
            .get(&mr)
            .copied()
            .ok_or_else(|| FiError::new(FI_EINVAL, "unknown memory descriptor"))
    }

    // ---- passive endpoints ----

    /// `fi_passive_ep` at `addr` (its port 0: one is chosen at listen).
    pub fn pep_open(&self, fid: usize, addr: SocketAddrV4) -> Id {
        let mut st = self.lock();
        let id = st.id();
        st.peps.insert(
            id,
            Pep {
                fid,
                eq: None,
                addr,
                listener: None,
            },
        );
        id
    }

    /// `fi_pep_bind` of an event queue.
    pub fn pep_bind_eq(&self, pep: Id, eq: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        if !st.eqs.contains_key(&eq) {
            return Err(bad_fid("event queue"));
        }
        st.peps
            .get_mut(&pep)
            .ok_or_else(|| bad_fid("passive endpoint"))?
            .eq = Some(eq);
        Ok(())
    }

    /// `fi_setname` of a passive endpoint.
    pub fn pep_setname(&self, pep: Id, addr: SocketAddrV4) -> Result<(), FiError> {
        let mut st = self.lock();
        let p = st
            .peps
            .get_mut(&pep)
            .ok_or_else(|| bad_fid("passive endpoint"))?;
        if p.listener.is_some() {
            return fail(FI_EBUSY, "the passive endpoint listens already");
        }
        p.addr = addr;
        Ok(())
    }

    /// `fi_getname` of a passive endpoint.
    pub fn pep_getname(&self, pep: Id) -> Result<SocketAddrV4, FiError> {
        let st = self.lock();
        Ok(st
            .peps
            .get(&pep)
            .ok_or_else(|| bad_fid("passive endpoint"))?
            .addr)
    }

    /// `fi_close` of a passive endpoint. Connection requests whose event
    /// nobody read are refused (the requesters see `FI_ECONNREFUSED` at
    /// once instead of waiting out their give-up deadline); a request
    /// already read stays the application's to accept or reject.
    pub fn pep_close(&self, pep: Id) {
        let mut st = self.lock();
        if let Some(p) = st.peps.remove(&pep) {
            if let Some(l) = p.listener {
                st.node.close_listener(l);
            }
            let unread = match p.eq.and_then(|e| st.eqs.get_mut(&e)) {
                Some(eq) => eq.forget(p.fid),
                None => Vec::new(),
            };
            for c in unread {
                if let Some(req) = st.connreqs.remove(&c) {
                    st.refuse(req.session, &[]);
                }
            }
        }
    }

    // ---- endpoints ----

    /// `fi_endpoint`: at `local`, for `peer` (from the info), answering
    /// connection request `connreq` if the info came with one.
    pub fn ep_open(
        &self,
        fid: usize,
        local: SocketAddrV4,
        peer: Option<SocketAddrV4>,
        connreq: Option<Id>,
        tx_op_flags: u64,
        virt_addr: bool,
    ) -> Result<Id, FiError> {
        let mut st = self.lock();
        if let Some(c) = connreq {
            if !st.connreqs.contains_key(&c) {
                return fail(
                    FI_EINVAL,
                    "fi_endpoint: the info's handle is no pending request",
                );
            }
        }
        let id = st.id();
        st.eps.insert(
            id,
            Ep {
                fid,
                eq: None,
                tx_cq: None,
                rx_cq: None,
                tx_selective: false,
                rx_selective: false,
                local,
                peer,
                session: None,
                connreq,
                conn: Conn::Idle,
                pending: HashMap::new(),
                recvs: VecDeque::new(),
                srx: None,
                current: None,
                partial: 0,
                partial_data: None,
                virt_addr,
                peer_bases: HashMap::new(),
                tx_wait: tx_op_flags & (FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE) != 0,
            },
        );
        Ok(id)
    }

    /// `fi_ep_bind` of an event queue.
    pub fn ep_bind_eq(&self, ep: Id, eq: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        if !st.eqs.contains_key(&eq) {
            return Err(bad_fid("event queue"));
        }
        st.ep_mut(ep)?.eq = Some(eq);
        Ok(())
    }

    /// `fi_ep_bind` of a completion queue with `FI_TRANSMIT`/`FI_RECV`
    /// and `FI_SELECTIVE_COMPLETION` flags.
    pub fn ep_bind_cq(&self, ep: Id, cq: Id, flags: u64) -> Result<(), FiError> {
        let mut st = self.lock();
        if !st.cqs.contains_key(&cq) {
            return Err(bad_fid("completion queue"));
        }
        if flags & (FI_TRANSMIT | FI_RECV) == 0 {
            return fail(FI_EINVAL, "fi_ep_bind(cq): neither FI_TRANSMIT nor FI_RECV");
        }
        let selective = flags & FI_SELECTIVE_COMPLETION != 0;
        let e = st.ep_mut(ep)?;
        if flags & FI_TRANSMIT != 0 {
            e.tx_cq = Some(cq);
            e.tx_selective = selective;
        }
        if flags & FI_RECV != 0 {
            e.rx_cq = Some(cq);
            e.rx_selective = selective;
        }
        Ok(())
    }

    /// `fi_srx_context`: a shared receive context.
    pub fn srx_open(&self) -> Id {
        let mut st = self.lock();
        let id = st.id();
        st.srxs.insert(
            id,
            Srx {
                recvs: VecDeque::new(),
            },
        );
        id
    }

    /// `fi_close` of a shared receive context: its receives are dropped
    /// (no completion: the application closes what it posted them to),
    /// and the endpoints bound to it take receives of their own again.
    pub fn srx_close(&self, srx: Id) {
        let mut st = self.lock();
        st.srxs.remove(&srx);
        for e in st.eps.values_mut() {
            if e.srx == Some(srx) {
                e.srx = None;
            }
        }
    }

    /// `fi_ep_bind` of a shared receive context: the endpoint's messages
    /// fill its receives.
    pub fn ep_bind_srx(&self, ep: Id, srx: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        if !st.srxs.contains_key(&srx) {
            return Err(bad_fid("shared receive context"));
        }
        st.ep_mut(ep)?.srx = Some(srx);
        Ok(())
    }

    /// `fi_enable`: the bindings an endpoint needs are there.
    pub fn ep_enable(&self, ep: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        let e = st.ep_mut(ep)?;
        if e.eq.is_none() {
            return fail(FI_ENOEQ, "fi_enable: no event queue is bound");
        }
        if e.tx_cq.is_none() && e.rx_cq.is_none() {
            return fail(FI_ENOCQ, "fi_enable: no completion queue is bound");
        }
        Ok(())
    }

    /// `fi_close` of an endpoint: its session is closed.
    pub fn ep_close(&self, ep: Id) {
        let mut st = self.lock();
        if let Some(e) = st.eps.remove(&ep) {
            if let Some(s) = e.session {
                st.by_session.insert(s, Owner::Orphan);
                let _ = st.node.close_gracefully(s, Duration::from_secs(5));
            }
            if let Some(c) = e.connreq {
                if let Some(req) = st.connreqs.remove(&c) {
                    let _ = st.node.close(req.session);
                }
            }
            if let Some(eq) = e.eq.and_then(|q| st.eqs.get_mut(&q)) {
                // An active endpoint's events hold no connection request.
                let _ = eq.forget(e.fid);
            }
        }
    }

    /// `fi_getname` of an endpoint.
    pub fn ep_getname(&self, ep: Id) -> Result<SocketAddrV4, FiError> {
        let mut st = self.lock();
        Ok(st.ep_mut(ep)?.local)
    }

    /// `fi_getpeer`.
    pub fn ep_getpeer(&self, ep: Id) -> Result<SocketAddrV4, FiError> {
        let mut st = self.lock();
        st.ep_mut(ep)?
            .peer
            .ok_or_else(|| FiError::new(FI_ENOTCONN, "fi_getpeer: not connected"))
    }

    // ---- data ----
}
