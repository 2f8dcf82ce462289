//! Connections: listening, connecting, accepting and rejecting, and
//! what a session's life becomes on the endpoint's event queue
//! (`FI_CONNREQ`, `FI_CONNECTED`, `FI_SHUTDOWN`); the progress round
//! that moves every session's outputs.

use super::*;

impl Fabric {
    /// `fi_listen`: relink listens at the address (a port is chosen if it
    /// is 0).
    pub fn listen(&self, pep: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        let opts = st.session_options(Vec::new())?;
        let p = st
            .peps
            .get(&pep)
            .ok_or_else(|| bad_fid("passive endpoint"))?;
        if p.eq.is_none() {
            return fail(FI_ENOEQ, "fi_listen: no event queue is bound");
        }
        if p.listener.is_some() {
            return Ok(());
        }
        let mut addr = p.addr;
        if addr.port() == 0 {
            addr.set_port(pick_port(addr));
        }
        let l = st
            .node
            .listen(SocketAddr::V4(addr), opts)
            .map_err(|e| match e {
                relink::ListenError::AddrInUse(_) => {
                    FiError::new(FI_EADDRINUSE, format!("fi_listen: {e}"))
                }
                _ => FiError::new(FI_EINVAL, format!("fi_listen: {e}")),
            })?;
        let p = st
            .peps
            .get_mut(&pep)
            .ok_or_else(|| bad_fid("passive endpoint"))?;
        p.listener = Some(l);
        p.addr = addr;
        Ok(())
    }

    /// `fi_reject`: the requester gets an error event with `data`.
    pub fn reject(&self, connreq: Id, data: &[u8]) -> Result<(), FiError> {
        check_cm_data(data)?;
        let mut st = self.lock();
        let c = st
            .connreqs
            .remove(&connreq)
            .ok_or_else(|| FiError::new(FI_EINVAL, "fi_reject: unknown connection request"))?;
        st.refuse(c.session, data);
        Ok(())
    }

    /// `fi_connect` to `dest` with CM `data`.
    pub fn connect(&self, ep: Id, dest: SocketAddrV4, data: &[u8]) -> Result<(), FiError> {
        check_cm_data(data)?;
        let mut st = self.lock();
        let opts = st.session_options(data.to_vec())?;
        let e = st.ep_mut(ep)?;
        if e.conn != Conn::Idle || e.connreq.is_some() {
            return fail(
                FI_EOPBADSTATE,
                "fi_connect: the endpoint is connected or connecting",
            );
        }
        let local = (!e.local.ip().is_unspecified()).then_some(std::net::IpAddr::V4(*e.local.ip()));
        let s = st
            .node
            .connect(
                vec![Path {
                    local,
                    peer: SocketAddr::V4(dest),
                }],
                opts,
            )
            .map_err(|e| FiError::new(FI_EINVAL, format!("fi_connect: {}", chain(&e))))?;
        st.by_session.insert(s, Owner::Ep(ep));
        let e = st.ep_mut(ep)?;
        e.session = Some(s);
        e.peer = Some(dest);
        e.conn = Conn::Connecting;
        Ok(())
    }

    /// `fi_accept` with CM `data`: the request the endpoint was opened
    /// for becomes its connection.
    pub fn accept(&self, ep: Id, data: &[u8]) -> Result<(), FiError> {
        check_cm_data(data)?;
        let mut st = self.lock();
        let e = st.ep_mut(ep)?;
        let Some(c) = e.connreq else {
            return fail(
                FI_EOPBADSTATE,
                "fi_accept: the endpoint was not opened for a request",
            );
        };
        if e.conn != Conn::Idle {
            return fail(FI_EOPBADSTATE, "fi_accept: accepted already");
        }
        let Some(req) = st.connreqs.remove(&c) else {
            return fail(FI_EINVAL, "fi_accept: the request is gone");
        };
        let s = req.session;
        st.node
            .send(s, &Answer::Accept(data.to_vec()).encode())
            .map_err(|e| submit_error("fi_accept", e))?;
        st.by_session.insert(s, Owner::Ep(ep));
        let e = st.ep_mut(ep)?;
        e.session = Some(s);
        e.conn = Conn::Accepting;
        // FI_CONNECTED once the session is up (`session_outputs`); the
        // answer's completion is the provider's, not the application's.
        st.session_outputs(ep, s);
        Ok(())
    }

    /// `fi_shutdown`: the connection ends (what was posted completes
    /// first, within a bound); the peer gets `FI_SHUTDOWN`.
    pub fn shutdown(&self, ep: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        let e = st.ep_mut(ep)?;
        let Some(s) = e.session else {
            return fail(FI_ENOTCONN, "fi_shutdown: not connected");
        };
        let was = std::mem::replace(&mut e.conn, Conn::Down);
        let (fid, eq) = (e.fid, e.eq);
        let _ = st.node.close_gracefully(s, Duration::from_secs(5));
        // The endpoint's own FI_SHUTDOWN, as rdma_cm's disconnect gives
        // both sides one (the peer's comes when its session closes).
        if was != Conn::Down {
            if let Some(q) = eq.and_then(|q| st.eqs.get_mut(&q)) {
                q.push(EqEvent::Shutdown { fid });
            }
        }
        Ok(())
    }
}

impl State {
    /// Poll the node and move outputs into the queues.
    pub(super) fn progress(&mut self) {
        self.node.poll();
        while let Some(a) = self.node.accept() {
            self.accepted(a);
        }
        let sessions: Vec<(SessionHandle, Owner)> =
            self.by_session.iter().map(|(s, o)| (*s, *o)).collect();
        for (s, owner) in sessions {
            match owner {
                Owner::Ep(ep) => self.session_outputs(ep, s),
                Owner::ConnReq(_) => {
                    // Outputs wait for the accept (events: a loss before it
                    // is relink's to recover).
                    while let Some(ev) = self.node.poll_event(s) {
                        if ends(&ev) {
                            self.request_gone(s);
                            break;
                        }
                    }
                }
                Owner::Orphan => {
                    while let Some(c) = self.node.poll_completion(s) {
                        self.release_inject(c.op);
                    }
                    while self.node.poll_delivery(s).is_some() {}
                    while let Some(ev) = self.node.poll_event(s) {
                        if ends(&ev) {
                            self.by_session.remove(&s);
                        }
                    }
                }
            }
        }
    }

    /// Answer a connection request's session with a rejection carrying
    /// `data`, and close it once the answer left.
    pub(super) fn refuse(&mut self, s: SessionHandle, data: &[u8]) {
        self.by_session.insert(s, Owner::Orphan);
        let _ = self.node.send(s, &Answer::Reject(data.to_vec()).encode());
        let _ = self.node.close_gracefully(s, Duration::from_secs(5));
    }

    /// A listener's new session: a connection request for its passive
    /// endpoint.
    pub(super) fn accepted(&mut self, a: relink::Accepted) {
        let Some((pep_id, pep)) = self
            .peps
            .iter()
            .find(|(_, p)| p.listener == Some(a.listener))
        else {
            let _ = self.node.close(a.session);
            return;
        };
        let (fid, eq) = (pep.fid, pep.eq);
        let _ = pep_id;
        let id = self.id();
        self.connreqs.insert(id, ConnReq { session: a.session });
        self.by_session.insert(a.session, Owner::ConnReq(id));
        if let Some(q) = eq.and_then(|q| self.eqs.get_mut(&q)) {
            q.push(EqEvent::ConnReq {
                fid,
                connreq: id,
                local: v4(a.local),
                peer: v4(a.peer),
                data: a.connect_data,
            });
        }
    }

    /// A request's session ended before it was accepted.
    pub(super) fn request_gone(&mut self, s: SessionHandle) {
        if let Some(Owner::ConnReq(c)) = self.by_session.remove(&s) {
            self.connreqs.remove(&c);
        }
    }

    /// Completions, the answer (connecting side), deliveries and events of
    /// endpoint `ep`'s session `s`.
    pub(super) fn session_outputs(&mut self, ep: Id, s: SessionHandle) {
        if self.eps.get(&ep).is_some_and(|e| e.conn == Conn::Accepting)
            && self.node.state(s) == Some(SessionState::Established)
        {
            if let Some(e) = self.eps.get_mut(&ep) {
                e.conn = Conn::Connected;
                let (fid, eq) = (e.fid, e.eq);
                if let Some(q) = eq.and_then(|q| self.eqs.get_mut(&q)) {
                    q.push(EqEvent::Connected {
                        fid,
                        data: Vec::new(),
                    });
                }
            }
        }
        while let Some(c) = self.node.poll_completion(s) {
            self.completed(ep, c);
        }
        if self
            .eps
            .get(&ep)
            .is_some_and(|e| e.conn == Conn::Connecting)
        {
            if let Some((_, m)) = self.node.poll_delivery(s) {
                self.answered(ep, s, &m);
            }
        }
        self.deliver(ep);
        while let Some(ev) = self.node.poll_event(s) {
            if ends(&ev) {
                self.ended(ep, s, &ev);
            }
        }
    }

    /// The acceptor's answer reached the connecting endpoint.
    pub(super) fn answered(&mut self, ep: Id, s: SessionHandle, m: &[u8]) {
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        let (fid, eq) = (e.fid, e.eq);
        let q = eq.and_then(|q| self.eqs.get_mut(&q));
        match Answer::decode(m) {
            Ok(Answer::Accept(data)) => {
                e.conn = Conn::Connected;
                if let Some(q) = q {
                    q.push(EqEvent::Connected { fid, data });
                }
            }
            Ok(Answer::Reject(data)) => {
                e.conn = Conn::Down;
                if let Some(q) = q {
                    q.push_error(EqError {
                        fid,
                        err: FI_ECONNREFUSED as u32,
                        data,
                        message: "the peer rejected the connection".into(),
                    });
                }
                let _ = self.node.close(s);
            }
            Err(err) => {
                e.conn = Conn::Down;
                if let Some(q) = q {
                    q.push_error(EqError {
                        fid,
                        err: FI_EOTHER,
                        data: Vec::new(),
                        message: err.to_string(),
                    });
                }
                let _ = self.node.close(s);
            }
        }
    }

    /// The session of endpoint `ep` ended for good.
    pub(super) fn ended(&mut self, ep: Id, s: SessionHandle, ev: &SessionEvent) {
        self.by_session.remove(&s);
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        let was = e.conn;
        e.conn = Conn::Down;
        // Receives posted and not filled are done with (a shared
        // context's stay for its other endpoints). After the peer's
        // orderly close they are discarded without a completion, as
        // fi_shutdown(3) allows: the application has FI_SHUTDOWN, and an
        // error entry per receive in a CQ shared with live endpoints
        // would read as their failure. When the connection failed
        // (give-up, a peer that lost its state) each is cancelled with
        // an error completion.
        let rx = e.rx_cq;
        let mut cancelled: Vec<PostedRecv> = e
            .current
            .take()
            .into_iter()
            .chain(e.recvs.drain(..))
            .collect();
        let orderly = match ev {
            SessionEvent::Disconnected => true,
            SessionEvent::Transition(t) => t.to == SessionState::Closed,
            _ => false,
        };
        if orderly {
            cancelled.clear();
        }
        let (fid, eq) = (e.fid, e.eq);
        if let Some(q) = rx.and_then(|c| self.cqs.get_mut(&c)) {
            for r in cancelled {
                q.push_error(r.failed(FI_ECANCELED as u32, "the connection ended".into()));
            }
        }
        let Some(q) = eq.and_then(|q| self.eqs.get_mut(&q)) else {
            return;
        };
        match was {
            Conn::Connecting | Conn::Accepting => q.push_error(EqError {
                fid,
                err: match ev {
                    SessionEvent::GaveUp => FI_ETIMEDOUT,
                    _ => FI_ECONNREFUSED,
                } as u32,
                data: Vec::new(),
                message: format!("the connection could not be made: {ev}"),
            }),
            Conn::Connected => q.push(EqEvent::Shutdown { fid }),
            Conn::Idle | Conn::Down => {}
        }
    }
}

/// Whether an event ends the session.
pub(super) fn ends(ev: &SessionEvent) -> bool {
    match ev {
        SessionEvent::GaveUp | SessionEvent::PeerLost { .. } | SessionEvent::Disconnected => true,
        SessionEvent::Transition(t) => matches!(t.to, SessionState::Failed | SessionState::Closed),
        _ => false,
    }
}

pub(super) fn check_cm_data(data: &[u8]) -> Result<(), FiError> {
    if data.len() > CM_DATA_SIZE {
        return fail(
            FI_EINVAL,
            format!(
                "CM data of {} bytes is over FI_OPT_CM_DATA_SIZE ({CM_DATA_SIZE})",
                data.len()
            ),
        );
    }
    Ok(())
}

/// A free port for a listener at `addr`: a TCP port the kernel hands
/// out, so two processes of one host pick different ones.
pub(super) fn pick_port(addr: SocketAddrV4) -> u16 {
    std::net::TcpListener::bind(SocketAddrV4::new(*addr.ip(), 0))
        .or_else(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(40_000)
}
