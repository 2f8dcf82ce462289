//! The data path: messages in fragments, posted receives filled in
//! order, RMA by key, and each operation's one completion.

use super::*;

impl Fabric {
    /// `fi_send` (and `fi_sendv`, `fi_inject`, ...): the message's bytes
    /// are copied; the completion comes once the peer's application has
    /// the message.
    pub fn send(
        &self,
        ep: Id,
        bytes: &[u8],
        context: usize,
        flags: TxFlags,
    ) -> Result<(), FiError> {
        self.send_data(ep, bytes, None, context, flags)
    }

    /// `fi_senddata`/`fi_injectdata`: a message with remote CQ data, which
    /// the peer's receive completion carries (`FI_REMOTE_CQ_DATA`).
    pub fn send_data(
        &self,
        ep: Id,
        bytes: &[u8],
        data: Option<u64>,
        context: usize,
        flags: TxFlags,
    ) -> Result<(), FiError> {
        let mut st = self.lock();
        let max = self.params.max_msg_size;
        if bytes.len() > max {
            return fail(
                FI_EMSGSIZE,
                format!(
                    "a message of {} bytes is over max_msg_size ({max})",
                    bytes.len()
                ),
            );
        }
        let (s, selective) = st.connected(ep)?;
        let parts: Vec<_> = frame::fragments(bytes.len(), self.params.fragment()).collect();
        if st.node.room(s).unwrap_or(0) < parts.len() as u64 {
            return fail(
                FI_EAGAIN,
                "fi_send: the transmit queue is full (take completions)",
            );
        }
        let mut last = None;
        for (start, end, more) in parts {
            let first = start == 0;
            let d = data.filter(|_| first).map(|d| u64::from(cq_data(d)));
            let payload = frame::encode(more, d, &bytes[start..end]);
            last = Some(
                st.node
                    .submit(s, OpKind::Message { payload })
                    .map_err(|e| submit_error("fi_send", e))?,
            );
        }
        let report = !flags.inject && (!selective || flags.completion);
        let e = st.ep_mut(ep)?;
        let wait = flags.wait || e.tx_wait;
        let entry = CqEntry {
            context,
            flags: FI_SEND | FI_MSG,
            len: bytes.len(),
            data: 0,
        };
        if let Some(op) = last {
            e.pending.insert(
                op,
                Pending {
                    context,
                    flags: entry.flags,
                    len: entry.len,
                    // Reported now (the bytes are relink's: the buffer is
                    // free), or when the peer's application has them.
                    report: report && wait,
                },
            );
        }
        if report && !wait {
            let tx = e.tx_cq;
            if let Some(q) = tx.and_then(|c| st.cqs.get_mut(&c)) {
                q.push(entry);
            }
        }
        Ok(())
    }

    /// `fi_recv`/`fi_recvv` on endpoint `ep`, or on shared receive
    /// context `ep`: the next message is copied into `buf`.
    pub fn recv(
        &self,
        ep: Id,
        buf: UserIov,
        context: usize,
        completion: bool,
    ) -> Result<(), FiError> {
        let mut st = self.lock();
        let r = PostedRecv {
            buf,
            context,
            completion,
        };
        if let Some(srx) = st.srxs.get_mut(&ep) {
            if srx.recvs.len() >= self.params.queue_size {
                return fail(FI_EAGAIN, "fi_recv: the shared receive queue is full");
            }
            srx.recvs.push_back(r);
            let bound: Vec<Id> = st
                .eps
                .iter()
                .filter(|(_, e)| e.srx == Some(ep))
                .map(|(&id, _)| id)
                .collect();
            for e in bound {
                st.deliver(e);
            }
            return Ok(());
        }
        let e = st.ep_mut(ep)?;
        if e.conn == Conn::Down {
            return fail(FI_ENOTCONN, "fi_recv: the connection ended");
        }
        if e.recvs.len() >= self.params.queue_size {
            return fail(FI_EAGAIN, "fi_recv: the receive queue is full");
        }
        e.recvs.push_back(r);
        st.deliver(ep);
        Ok(())
    }

    /// `fi_write`/`fi_read`/`fi_writedata` (`kind`) of `len` bytes at
    /// `offset` of registration `mr` to/from offset `remote` of the peer's
    /// registration `key`.
    #[allow(clippy::too_many_arguments)]
    pub fn rma(
        &self,
        ep: Id,
        kind: Rma,
        mr: Id,
        offset: u64,
        len: usize,
        key: u64,
        remote: u64,
        context: usize,
        flags: TxFlags,
    ) -> Result<(), FiError> {
        let mut st = self.lock();
        let region = Self::region(&st, mr)?;
        let len32 =
            u32::try_from(len).map_err(|_| FiError::new(FI_EMSGSIZE, "an RMA of 4 GiB or more"))?;
        let local = LocalRange {
            region,
            offset,
            len: len32,
        };
        let report = !flags.inject && (!st.connected(ep)?.1 || flags.completion);
        st.rma(ep, kind, local, key, remote, context, report)
            .map(drop)
    }

    /// `fi_inject_write`/`fi_inject_writedata`: `bytes` are copied into an
    /// inject slot at once (the caller's buffer is free at return), and
    /// written from there; no completion.
    pub fn rma_inject(
        &self,
        ep: Id,
        kind: Rma,
        bytes: &[u8],
        key: u64,
        remote: u64,
    ) -> Result<(), FiError> {
        let mut st = self.lock();
        st.connected(ep)?;
        let (i, local) = st.inject_slot(&self.params, bytes)?;
        let r = st.rma(ep, kind, local, key, remote, 0, false);
        st.hold_inject(i, r, ())
    }

    /// An atomic `op` on the peer's word at `remote` of registration
    /// `key`; the old value lands in `result` (a registration and an
    /// offset in it), or nowhere (`fi_atomic`, `fi_inject_atomic`: an
    /// inject slot takes it).
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(
        &self,
        ep: Id,
        op: Atomic,
        result: Option<(Id, u64)>,
        key: u64,
        remote: u64,
        context: usize,
        flags: TxFlags,
    ) -> Result<(), FiError> {
        let mut st = self.lock();
        let (s, selective) = st.connected(ep)?;
        let token = st.remote(ep, s, key, remote)?;
        let (local, slot) = match result {
            Some((mr, offset)) => (
                LocalRange {
                    region: Self::region(&st, mr)?,
                    offset,
                    len: 8,
                },
                None,
            ),
            None => {
                let (i, local) = st.inject_slot(&self.params, &[0; 8])?;
                (local, Some(i))
            }
        };
        let (kind, fetch) = match op {
            Atomic::Add(add) => (
                OpKind::FetchAdd {
                    local,
                    remote: token,
                    add,
                },
                result.is_some(),
            ),
            Atomic::Read => (
                OpKind::FetchAdd {
                    local,
                    remote: token,
                    add: 0,
                },
                true,
            ),
            Atomic::Swap { compare, swap } => (
                OpKind::CmpSwap {
                    local,
                    remote: token,
                    compare,
                    swap,
                },
                true,
            ),
        };
        let r = st
            .node
            .submit(s, kind)
            .map_err(|e| submit_error("fi_atomic", e));
        if let Ok(op) = r {
            let report = !flags.inject && (!selective || flags.completion);
            st.ep_mut(ep)?.pending.insert(
                op,
                Pending {
                    context,
                    flags: FI_ATOMIC | if fetch { FI_READ } else { FI_WRITE },
                    len: 8,
                    report,
                },
            );
        }
        match slot {
            Some(i) => st.hold_inject(i, r, ()),
            None => r.map(drop),
        }
    }
}

impl State {
    /// An RMA from or to `local` (see [`Fabric::rma`]): its operation.
    #[allow(clippy::too_many_arguments)]
    fn rma(
        &mut self,
        ep: Id,
        kind: Rma,
        local: LocalRange,
        key: u64,
        remote: u64,
        context: usize,
        report: bool,
    ) -> Result<relink::OpId, FiError> {
        let (s, _) = self.connected(ep)?;
        let token = self.remote(ep, s, key, remote)?;
        let len = local.len as usize;
        let local = local.into();
        let (op, name) = match kind {
            Rma::Read => (
                OpKind::Read {
                    local,
                    remote: token,
                },
                "fi_read",
            ),
            Rma::Write => (
                OpKind::Write {
                    local,
                    remote: token,
                },
                "fi_write",
            ),
            Rma::WriteData(data) => (
                OpKind::WriteImm {
                    local,
                    remote: token,
                    imm: cq_data(data),
                },
                "fi_writedata",
            ),
        };
        let op = self.node.submit(s, op).map_err(|e| submit_error(name, e))?;
        self.ep_mut(ep)?.pending.insert(
            op,
            Pending {
                context,
                flags: FI_RMA | if kind == Rma::Read { FI_READ } else { FI_WRITE },
                len,
                report,
            },
        );
        Ok(op)
    }

    /// The peer's registration `key` at `remote` (its address with
    /// `FI_MR_VIRT_ADDR`, else an offset) as a relink token.
    fn remote(
        &mut self,
        ep: Id,
        s: SessionHandle,
        key: u64,
        remote: u64,
    ) -> Result<relink::BufferToken, FiError> {
        let key32 = u32::try_from(key)
            .map_err(|_| FiError::new(FI_EKEYREJECTED, format!("key {key:#x} is no relink key")))?;
        let region = relink::RegionId(key32);
        let offset = if self.ep_mut(ep)?.virt_addr {
            remote
                .checked_sub(self.peer_base(ep, s, region)?)
                .ok_or_else(|| {
                    FiError::new(
                        FI_EINVAL,
                        format!("address {remote:#x} is below the start of key {key:#x}"),
                    )
                })?
        } else {
            remote
        };
        Ok(relink::BufferToken { region, offset })
    }

    /// A slot of the inject pool (made at the first use), for `bytes`.
    fn inject_slot(&mut self, params: &Params, bytes: &[u8]) -> Result<(u32, LocalRange), FiError> {
        let slot = params.inject_size();
        if bytes.len() > slot {
            return fail(
                FI_EMSGSIZE,
                format!(
                    "an inject of {} bytes is over inject_size ({slot})",
                    bytes.len()
                ),
            );
        }
        // Enough for a window of small writes; 1 MiB at the default 4 KiB.
        let slots = params.queue_size.min(256);
        if self.inject.is_none() {
            let memory = self
                .node
                .alloc_memory(slots * slot)
                .map_err(|e| FiError::new(FI_ENOMEM, format!("the inject buffers: {e}")))?;
            let region = self
                .node
                .register(memory.clone(), relink::Access::LOCAL_WRITE)
                .map_err(|e| FiError::new(FI_ENOMEM, format!("the inject buffers: {e}")))?;
            self.inject = Some(InjectPool {
                memory,
                region,
                slot,
                free: (0..slots as u32).rev().collect(),
                held: HashMap::new(),
            });
        }
        let pool = self.inject.as_mut().expect("made above");
        let Some(i) = pool.free.pop() else {
            return fail(
                FI_EAGAIN,
                "every inject buffer is in flight (take completions)",
            );
        };
        let offset = i as usize * pool.slot;
        if let Err(e) = pool.memory.write(offset, bytes) {
            pool.free.push(i);
            return fail(FI_EINVAL, format!("the inject buffers: {e}"));
        }
        let local = LocalRange {
            region: pool.region,
            offset: offset as u64,
            len: bytes.len() as u32,
        };
        Ok((i, local))
    }

    /// Operation `op` (or its failure to start) holds inject slot `i`
    /// until it completes.
    fn hold_inject<T>(
        &mut self,
        i: u32,
        r: Result<relink::OpId, FiError>,
        v: T,
    ) -> Result<T, FiError> {
        if let Some(p) = self.inject.as_mut() {
            match &r {
                Ok(op) => {
                    p.held.insert(*op, i);
                }
                Err(_) => p.free.push(i),
            }
        }
        r.map(|_| v)
    }

    /// The inject slot operation `op` held is free again: it completed.
    pub(super) fn release_inject(&mut self, op: relink::OpId) {
        if let Some(p) = self.inject.as_mut() {
            if let Some(i) = p.held.remove(&op) {
                p.free.push(i);
            }
        }
    }

    /// The address of the first byte of the peer's registration `region`
    /// (`FI_MR_VIRT_ADDR`: remote addresses are the peer's), kept once
    /// known: a registration's memory stays where it is across every
    /// reconnection. `FI_EAGAIN` while the session is between connections
    /// and the address was never seen (the next connection advertises it).
    pub(super) fn peer_base(
        &mut self,
        ep: Id,
        s: SessionHandle,
        region: relink::RegionId,
    ) -> Result<u64, FiError> {
        if let Some(&b) = self.ep_mut(ep)?.peer_bases.get(&region) {
            return Ok(b);
        }
        match self.node.peer_region(s, region) {
            Some((addr, _)) => {
                self.ep_mut(ep)?.peer_bases.insert(region, addr);
                Ok(addr)
            }
            None if self.node.state(s) == Some(SessionState::Established) => fail(
                FI_EKEYREJECTED,
                format!("the peer advertised no registration of key {:#x}", region.0),
            ),
            None => fail(FI_EAGAIN, "the connection is being recovered: try again"),
        }
    }

    /// The session of a connected endpoint and its transmit selectivity.
    pub(super) fn connected(&mut self, ep: Id) -> Result<(SessionHandle, bool), FiError> {
        let e = self.ep_mut(ep)?;
        match (e.conn, e.session) {
            (Conn::Connected, Some(s)) => Ok((s, e.tx_selective)),
            (Conn::Down, _) => fail(FI_ENOTCONN, "the connection ended"),
            _ => fail(FI_ENOTCONN, "not connected yet"),
        }
    }

    /// Messages into the receives posted, in order, while both are there.
    pub(super) fn deliver(&mut self, ep: Id) {
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        let (Some(s), Conn::Connected | Conn::Accepting) = (e.session, e.conn) else {
            return;
        };
        loop {
            // A peer's fi_writedata, in order with its messages: no
            // receive is consumed (no FI_RX_CQ_DATA mode).
            if let Some((_, w)) = self.node.poll_written(s) {
                if let Some(q) = e.rx_cq.and_then(|c| self.cqs.get_mut(&c)) {
                    q.push(CqEntry {
                        context: 0,
                        flags: FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA,
                        len: w.len as usize,
                        data: u64::from(w.imm),
                    });
                }
                continue;
            }
            // A message needs a receive: the one under way, else the
            // next of the endpoint's (or of its shared context).
            let ready = e.current.is_some()
                || match e.srx {
                    Some(x) => self.srxs.get(&x).is_some_and(|q| !q.recvs.is_empty()),
                    None => !e.recvs.is_empty(),
                };
            if !ready || self.node.poll_delivery_into(s, &mut self.scratch).is_none() {
                break;
            }
            if e.current.is_none() {
                e.current = match e.srx {
                    Some(x) => self.srxs.get_mut(&x).and_then(|q| q.recvs.pop_front()),
                    None => e.recvs.pop_front(),
                };
            }
            let f = match frame::decode(&self.scratch) {
                Ok(f) => f,
                Err(err) => {
                    let Some(r) = e.current.take() else { break };
                    e.partial = 0;
                    if let Some(q) = e.rx_cq.and_then(|c| self.cqs.get_mut(&c)) {
                        q.push_error(r.failed(FI_EOTHER, err.to_string()));
                    }
                    continue;
                }
            };
            let Some(r) = e.current.as_ref() else { break };
            r.buf.write_at(e.partial, f.part);
            e.partial += f.part.len();
            if f.data.is_some() {
                e.partial_data = f.data;
            }
            if f.more > 0 {
                continue;
            }
            let total = std::mem::take(&mut e.partial);
            let data = e.partial_data.take();
            let Some(r) = e.current.take() else { break };
            let n = total.min(r.buf.len());
            let entry = CqEntry {
                context: r.context,
                flags: FI_RECV | FI_MSG | if data.is_some() { FI_REMOTE_CQ_DATA } else { 0 },
                len: n,
                data: data.unwrap_or(0),
            };
            let Some(q) = e.rx_cq.and_then(|c| self.cqs.get_mut(&c)) else {
                continue;
            };
            if n < total {
                q.push_error(CqError {
                    entry,
                    err: FI_ETRUNC,
                    olen: total - n,
                    message: format!(
                        "a message of {total} bytes was cut to the {n} bytes of the receive buffer"
                    ),
                });
            } else if !e.rx_selective || r.completion {
                q.push(entry);
            }
        }
    }

    /// An operation's one completion into its queue.
    pub(super) fn completed(&mut self, ep: Id, c: Completion) {
        self.release_inject(c.op);
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        let Some(p) = e.pending.remove(&c.op) else {
            // The provider's own message (the answer).
            return;
        };

        let Some(q) = e.tx_cq.and_then(|c| self.cqs.get_mut(&c)) else {
            return;
        };
        let entry = CqEntry {
            context: p.context,
            flags: p.flags,
            len: p.len,
            data: 0,
        };
        match c.outcome {
            Outcome::Success { .. } => {
                if p.report {
                    q.push(entry);
                }
            }
            Outcome::Failed(err) => q.push_error(CqError {
                entry,
                err: match err {
                    relink::OpError::Disconnected => FI_ECANCELED,
                    relink::OpError::Remote(_) => FI_EREMOTEIO,
                    relink::OpError::TooLargeForPeer => FI_EMSGSIZE,
                    _ => FI_EIO,
                } as u32,
                olen: 0,
                message: err.to_string(),
            }),
            Outcome::Indeterminate { executed } => q.push_error(CqError {
                entry,
                err: FI_EIO as u32,
                olen: 0,
                message: format!(
                    "the connection ended before the operation was confirmed \
                     (it may have taken effect{})",
                    match executed {
                        Some(true) => ": it did",
                        _ => "",
                    }
                ),
            }),
            _ => q.push_error(CqError {
                entry,
                err: FI_EIO as u32,
                olen: 0,
                message: "the operation ended without success".into(),
            }),
        }
    }
}
