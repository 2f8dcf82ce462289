//! The connection manager: CM ids, address and route resolution, the
//! REQ/REP/RTU/REJ/DREQ exchange, timeouts, and the end of a connection
//! (disconnect, destroy, or the transport losing it).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use relink_fabric::{check_private_data, ConnParams};
use relink_fabric::{
    CmError, CmEventKind, DestroyError, Destroyed, DeviceId, DeviceInfo, PortState, QpState,
    RejectReason, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA,
};
use relink_fabric::{CmId, QpId};

use super::{CmIdState, CmState, HostState};
use crate::outbox::{Control, Outbox, Outgoing, Timer};
use crate::packet::{Body, CmMsg, Packet};

impl HostState {
    fn cm(&self, id: CmId) -> Result<&CmIdState, CmError> {
        self.cm_ids
            .get(&id.0)
            .ok_or(CmError::InvalidHandle("CM id"))
    }

    fn cm_mut(&mut self, id: CmId) -> Result<&mut CmIdState, CmError> {
        self.cm_ids
            .get_mut(&id.0)
            .ok_or(CmError::InvalidHandle("CM id"))
    }

    fn send_cm(&self, conn: u64, src: IpAddr, dst: IpAddr, msg: CmMsg, out: &mut Outbox) {
        out.packets.push(Outgoing {
            conn,
            packet: Packet {
                src,
                dst,
                body: Body::Cm(msg),
            },
        });
    }

    fn arm_cm_timer(&mut self, id: u64, out: &mut Outbox) {
        let timeout = self.cfg.cm_timeout;
        let cm = self.cm_ids.get_mut(&id).expect("present");
        cm.timer_gen += 1;
        out.timers.push((
            out.now + timeout,
            Timer::Cm {
                id,
                gen: cm.timer_gen,
            },
        ));
    }

    fn ephemeral_port(&mut self) -> u16 {
        loop {
            let p = self.next_port;
            self.next_port = if self.next_port >= 60999 {
                40000
            } else {
                self.next_port + 1
            };
            if !self.index.bound().any(|h| {
                let c = &self.cm_ids[&h];
                c.bound && c.local.is_some_and(|a| a.port() == p)
            }) {
                return p;
            }
        }
    }

    /// A new CM id.
    pub fn cm_create_id(&mut self) -> CmId {
        let h = self.handle();
        self.cm_ids.insert(h, CmIdState::new());
        CmId(h)
    }

    /// Bind an id to a local address.
    pub fn cm_bind(&mut self, id: CmId, addr: SocketAddr) -> Result<SocketAddr, CmError> {
        if self.cm(id)?.state != CmState::Idle {
            return Err(CmError::BadState("bind needs a fresh id"));
        }
        let device = if addr.ip().is_unspecified() {
            None
        } else {
            Some(
                self.device_owning(addr.ip())
                    .ok_or(CmError::AddrNotAvailable(addr.ip()))?
                    .id
                    .clone(),
            )
        };
        let port = if addr.port() == 0 {
            self.ephemeral_port()
        } else {
            addr.port()
        };
        let clash = self.index.bound().map(|h| &self.cm_ids[&h]).any(|c| {
            c.bound
                && !matches!(c.state, CmState::Removed | CmState::Failed)
                && c.local.is_some_and(|l| {
                    l.port() == port
                        && (l.ip() == addr.ip()
                            || l.ip().is_unspecified()
                            || addr.ip().is_unspecified())
                })
        });
        let local = SocketAddr::new(addr.ip(), port);
        if clash {
            return Err(CmError::AddrInUse(local));
        }
        let cm = self.cm_mut(id)?;
        cm.local = Some(local);
        cm.device = device;
        cm.state = CmState::Bound;
        cm.bound = true;
        self.index.bind(id.0);
        Ok(local)
    }

    /// Listen on the bound address.
    pub fn cm_listen(&mut self, id: CmId, _backlog: u32, out: &mut Outbox) -> Result<(), CmError> {
        let cm = self.cm(id)?;
        if cm.state != CmState::Bound {
            return Err(CmError::BadState("listen needs a bound id"));
        }
        if let Some(d) = &cm.device {
            if !self.usable(d) {
                return Err(CmError::DeviceLost);
            }
        }
        let local = cm.local.expect("bound");
        self.cm_mut(id)?.state = CmState::Listening;
        out.controls.push(Control::Listen(local));
        Ok(())
    }

    /// Resolve a destination to a local device.
    pub fn cm_resolve_addr(
        &mut self,
        id: CmId,
        src: Option<IpAddr>,
        dst: SocketAddr,
        timeout: Duration,
        out: &mut Outbox,
    ) -> Result<(), CmError> {
        let cm = self.cm(id)?;
        if !matches!(cm.state, CmState::Idle | CmState::Bound) {
            return Err(CmError::BadState("resolve_addr needs a fresh or bound id"));
        }
        let bound_port = cm.local.map(|a| a.port());
        let src = src.or(cm.local.map(|a| a.ip()).filter(|i| !i.is_unspecified()));
        let dev = match src {
            Some(s) => Some(
                self.device_owning(s)
                    .ok_or(CmError::AddrNotAvailable(s))?
                    .clone(),
            ),
            None => self.route(dst.ip()).cloned(),
        };
        let Some(dev) = dev.filter(|d| d.port_state == PortState::Active && self.usable(&d.id))
        else {
            self.cm_mut(id)?.state = CmState::Failed;
            self.cm_event(id.0, CmEventKind::AddrError);
            return Ok(());
        };
        let lip = match src {
            Some(s) => s,
            None => dev
                .addrs
                .iter()
                .find(|n| n.contains(dst.ip()))
                .or(dev.addrs.first())
                .map(|n| n.addr)
                .ok_or(CmError::AddrNotAvailable(dst.ip()))?,
        };
        let port = match bound_port {
            Some(p) => p,
            None => self.ephemeral_port(),
        };
        let cm = self.cm_mut(id)?;
        cm.device = Some(dev.id.clone());
        cm.local = Some(SocketAddr::new(lip, port));
        cm.peer = Some(dst);
        cm.state = CmState::ResolvingAddr;
        cm.timer_gen += 1;
        out.timers.push((
            out.now + timeout,
            Timer::Cm {
                id: id.0,
                gen: cm.timer_gen,
            },
        ));
        self.send_cm_arp(id.0, lip, dst.ip(), out);
        Ok(())
    }

    fn send_cm_arp(&self, id: u64, src: IpAddr, dst: IpAddr, out: &mut Outbox) {
        out.packets.push(Outgoing {
            conn: 0,
            packet: Packet {
                src,
                dst,
                body: Body::ArpRequest { cookie: id },
            },
        });
    }

    /// The local device that reaches `dst`: one that owns it, else the
    /// longest matching prefix.
    fn route(&self, dst: IpAddr) -> Option<&DeviceInfo> {
        if let Some(d) = self.device_owning(dst) {
            return Some(d);
        }
        self.devices
            .values()
            .map(|d| &d.info)
            .filter_map(|i| {
                i.addrs
                    .iter()
                    .filter(|n| n.contains(dst))
                    .map(|n| n.prefix)
                    .max()
                    .map(|p| (p, i))
            })
            .max_by_key(|(p, _)| *p)
            .map(|(_, i)| i)
    }

    /// Resolve the route of a resolved id.
    pub fn cm_resolve_route(&mut self, id: CmId) -> Result<(), CmError> {
        let cm = self.cm(id)?;
        if cm.state != CmState::AddrResolved {
            return Err(CmError::BadState("resolve_route needs a resolved address"));
        }
        let ok = cm
            .device
            .as_ref()
            .is_some_and(|d| self.port_active(d) && self.usable(d));
        if ok {
            self.cm_mut(id)?.state = CmState::RouteResolved;
            self.cm_event(id.0, CmEventKind::RouteResolved);
        } else {
            self.cm_mut(id)?.state = CmState::Failed;
            self.cm_event(id.0, CmEventKind::RouteError);
        }
        Ok(())
    }

    /// The device of an id.
    pub fn cm_device(&self, id: CmId) -> Option<DeviceId> {
        self.cm_ids.get(&id.0).and_then(|c| c.device.clone())
    }

    /// Local and peer addresses of an id.
    pub fn cm_addrs(&self, id: CmId) -> (Option<SocketAddr>, Option<SocketAddr>) {
        self.cm_ids
            .get(&id.0)
            .map(|c| (c.local, c.peer))
            .unwrap_or((None, None))
    }

    fn check_cm_qp(&self, cm: &CmIdState, qp: QpId) -> Result<(), CmError> {
        let q = self.qps.get(&qp.0).ok_or(CmError::InvalidHandle("QP"))?;
        let dev = cm
            .device
            .as_ref()
            .ok_or(CmError::BadState("id has no device"))?;
        if !self.usable(dev) {
            return Err(CmError::DeviceLost);
        }
        if q.dev != *dev {
            return Err(CmError::BadState("QP is on another device than the id"));
        }
        if q.state != QpState::Init || q.conn != 0 {
            return Err(CmError::BadState("QP already used"));
        }
        Ok(())
    }

    /// Tie a QP to connection `conn`; returns its QP number.
    fn bind_qp(&mut self, qp: QpId, conn: u64, params: ConnParams, local: IpAddr) -> u32 {
        let q = self.qps.get_mut(&qp.0).expect("checked");
        q.conn = conn;
        q.params = params;
        q.retries_left = params.retry_count;
        q.rnr_left = params.rnr_retry_count;
        q.local_ip = Some(local);
        q.qpn
    }

    /// Connect to the resolved peer.
    pub fn cm_connect(
        &mut self,
        id: CmId,
        qp: QpId,
        params: ConnParams,
        private_data: &[u8],
        out: &mut Outbox,
    ) -> Result<(), CmError> {
        check_private_data(private_data, MAX_CONNECT_PRIVATE_DATA)?;
        let cm = self.cm(id)?;
        if cm.state != CmState::RouteResolved {
            return Err(CmError::BadState("connect needs a resolved route"));
        }
        self.check_cm_qp(cm, qp)?;
        let local = cm.local.expect("resolved");
        let peer = cm.peer.expect("resolved");
        let conn = (u64::from(self.cfg.tag) << 32) | u64::from(self.next_conn);
        self.next_conn += 1;
        let qpn = self.bind_qp(qp, conn, params, local.ip());
        let cm = self.cm_mut(id)?;
        cm.conn = conn;
        cm.qp = Some(qp.0);
        cm.initiator = true;
        cm.params = params;
        cm.state = CmState::Connecting;
        self.index.add_conn(conn, true, id.0);
        self.index.set_qp_cm(qp.0, id.0);
        self.arm_cm_timer(id.0, out);
        self.send_cm(
            conn,
            local.ip(),
            peer.ip(),
            CmMsg::Req {
                conn_id: conn,
                src_port: local.port(),
                dst_port: peer.port(),
                qpn,
                params,
                private_data: private_data.to_vec(),
            },
            out,
        );
        Ok(())
    }

    /// Accept a connection request.
    pub fn cm_accept(
        &mut self,
        id: CmId,
        qp: QpId,
        private_data: &[u8],
        out: &mut Outbox,
    ) -> Result<(), CmError> {
        check_private_data(private_data, MAX_ACCEPT_PRIVATE_DATA)?;
        let cm = self.cm(id)?;
        if cm.state != CmState::RequestReceived {
            return Err(CmError::BadState("accept needs a connection request"));
        }
        self.check_cm_qp(cm, qp)?;
        let local = cm.local.expect("request");
        let peer = cm.peer.expect("request");
        let (conn, rqpn, params) = (cm.conn, cm.remote_qpn, cm.params);
        let qpn = self.bind_qp(qp, conn, params, local.ip());
        let q = self.qps.get_mut(&qp.0).expect("checked");
        q.remote = Some((peer.ip(), rqpn));
        q.state = QpState::Rts;
        let cm = self.cm_mut(id)?;
        cm.qp = Some(qp.0);
        cm.state = CmState::Accepting;
        self.index.set_qp_cm(qp.0, id.0);
        self.arm_cm_timer(id.0, out);
        self.send_cm(
            conn,
            local.ip(),
            peer.ip(),
            CmMsg::Rep {
                conn_id: conn,
                qpn,
                private_data: private_data.to_vec(),
            },
            out,
        );
        Ok(())
    }

    /// Reject a connection request.
    pub fn cm_reject(
        &mut self,
        id: CmId,
        private_data: &[u8],
        out: &mut Outbox,
    ) -> Result<(), CmError> {
        check_private_data(private_data, MAX_REJECT_PRIVATE_DATA)?;
        let cm = self.cm(id)?;
        if cm.state != CmState::RequestReceived {
            return Err(CmError::BadState("reject needs a connection request"));
        }
        let (local, peer, conn) = (cm.local.expect("req"), cm.peer.expect("req"), cm.conn);
        self.send_cm(
            conn,
            local.ip(),
            peer.ip(),
            CmMsg::Rej {
                conn_id: conn,
                reason: RejectReason::Consumer,
                private_data: private_data.to_vec(),
            },
            out,
        );
        out.controls.push(Control::Close(conn));
        self.cm_mut(id)?.state = CmState::Failed;
        Ok(())
    }

    fn end_connection(&mut self, id: u64, notify_peer: bool, out: &mut Outbox) {
        let cm = &self.cm_ids[&id];
        let (conn, initiator, local, peer, qp) = (cm.conn, cm.initiator, cm.local, cm.peer, cm.qp);
        let dev_alive = cm.device.as_ref().is_some_and(|d| self.alive(d));
        if notify_peer && dev_alive {
            if let (Some(l), Some(p)) = (local, peer) {
                self.send_cm(
                    conn,
                    l.ip(),
                    p.ip(),
                    CmMsg::Dreq {
                        conn_id: conn,
                        from_initiator: initiator,
                    },
                    out,
                );
            }
        }
        out.controls.push(Control::Close(conn));
        if let Some(qp) = qp {
            self.qp_error(qp, None);
        }
        let cm = self.cm_ids.get_mut(&id).expect("present");
        cm.state = CmState::Disconnected;
        cm.timer_gen += 1;
    }

    /// Disconnect a connected (or connecting) id: the peer is sent a
    /// disconnect request, the id's QP goes to error and the id sees
    /// `Disconnected`. Disconnecting an id already disconnected does nothing.
    pub fn cm_disconnect(&mut self, id: CmId, out: &mut Outbox) -> Result<(), CmError> {
        match self.cm(id)?.state {
            CmState::Connected | CmState::Accepting | CmState::Connecting => {
                self.end_connection(id.0, true, out);
                self.cm_event(id.0, CmEventKind::Disconnected);
                Ok(())
            }
            CmState::Disconnected | CmState::Removed => Ok(()),
            _ => Err(CmError::BadState("not connected")),
        }
    }

    /// Destroy an id: a connection it holds is ended as by
    /// [`cm_disconnect`](Self::cm_disconnect) (without a `Disconnected`
    /// event), a listener stops listening.
    pub fn cm_destroy_id(&mut self, id: CmId, out: &mut Outbox) -> Result<Destroyed, DestroyError> {
        let Some(cm) = self.cm_ids.get(&id.0) else {
            return Err(DestroyError::InvalidHandle("CM id"));
        };
        match cm.state {
            CmState::Connected | CmState::Accepting | CmState::Connecting => {
                self.end_connection(id.0, true, out)
            }
            CmState::Listening => out
                .controls
                .push(Control::Unlisten(cm.local.expect("bound"))),
            _ => {}
        }
        let cm = self.cm_ids.remove(&id.0).expect("present");
        self.index.forget_cm(id.0, cm.conn, cm.initiator);
        Ok(match cm.device {
            Some(d) => self.destroyed(&d),
            None => Destroyed::Released,
        })
    }

    pub(super) fn cm_timeout(&mut self, id: u64, gen: u64, out: &mut Outbox) {
        let Some(cm) = self.cm_ids.get(&id) else {
            return;
        };
        if cm.timer_gen != gen {
            return;
        }
        match cm.state {
            CmState::ResolvingAddr => {
                self.cm_ids.get_mut(&id).expect("present").state = CmState::Failed;
                self.cm_event(id, CmEventKind::AddrError);
            }
            CmState::Connecting => {
                let conn = cm.conn;
                out.controls.push(Control::Close(conn));
                self.cm_ids.get_mut(&id).expect("present").state = CmState::Failed;
                self.cm_event(id, CmEventKind::Unreachable);
            }
            CmState::Accepting => {
                self.end_connection(id, false, out);
                self.cm_ids.get_mut(&id).expect("present").state = CmState::Failed;
                self.cm_event(id, CmEventKind::ConnectError);
            }
            _ => {}
        }
    }

    fn find_conn(&self, conn: u64, initiator: bool) -> Option<u64> {
        self.index.conn(conn, initiator)
    }

    pub(super) fn on_cm(&mut self, src: IpAddr, dst: IpAddr, msg: CmMsg, out: &mut Outbox) {
        match msg {
            CmMsg::Req {
                conn_id,
                src_port,
                dst_port,
                qpn,
                params,
                private_data,
            } => {
                if self.find_conn(conn_id, false).is_some() {
                    return; // a retransmitted request
                }
                let Some(dev) = self.device_owning(dst).map(|d| d.id.clone()) else {
                    return;
                };
                // A device that hit a fatal error takes no connection: one
                // accepted on it now would be lost again when it leaves.
                let listener = self
                    .listener_for(dst, dst_port)
                    .filter(|_| self.usable(&dev))
                    .filter(|l| self.cm_ids[l].device.as_ref().is_none_or(|d| self.alive(d)));
                let Some(listener) = listener else {
                    self.send_cm(
                        conn_id,
                        dst,
                        src,
                        CmMsg::Rej {
                            conn_id,
                            reason: RejectReason::NoListener,
                            private_data: Vec::new(),
                        },
                        out,
                    );
                    out.controls.push(Control::Close(conn_id));
                    return;
                };
                let h = self.handle();
                let local = SocketAddr::new(dst, dst_port);
                let peer = SocketAddr::new(src, src_port);
                let mut cm = CmIdState::new();
                cm.state = CmState::RequestReceived;
                cm.device = Some(dev);
                cm.local = Some(local);
                cm.peer = Some(peer);
                cm.conn = conn_id;
                cm.remote_qpn = qpn;
                cm.params = params;
                self.cm_ids.insert(h, cm);
                self.index.add_conn(conn_id, false, h);
                self.cm_event(
                    h,
                    CmEventKind::ConnectRequest {
                        listener: CmId(listener),
                        private_data,
                        peer,
                        local,
                    },
                );
            }
            CmMsg::Rep {
                conn_id,
                qpn,
                private_data,
            } => {
                let Some(id) = self.find_conn(conn_id, true) else {
                    return;
                };
                let cm = &self.cm_ids[&id];
                if cm.state != CmState::Connecting {
                    return;
                }
                let local = cm.local.expect("connecting");
                let Some(qp) = cm.qp.filter(|q| self.qps.contains_key(q)) else {
                    self.send_cm(
                        conn_id,
                        local.ip(),
                        src,
                        CmMsg::Rej {
                            conn_id,
                            reason: RejectReason::NoResources,
                            private_data: Vec::new(),
                        },
                        out,
                    );
                    return;
                };
                let q = self.qps.get_mut(&qp).expect("present");
                q.remote = Some((src, qpn));
                q.state = QpState::Rts;
                let cm = self.cm_ids.get_mut(&id).expect("present");
                cm.state = CmState::Connected;
                cm.remote_qpn = qpn;
                cm.timer_gen += 1;
                self.send_cm(conn_id, local.ip(), src, CmMsg::Rtu { conn_id }, out);
                self.cm_event(id, CmEventKind::Established { private_data });
                self.pump(qp, out);
            }
            CmMsg::Rtu { conn_id } => {
                let Some(id) = self.find_conn(conn_id, false) else {
                    return;
                };
                let cm = self.cm_ids.get_mut(&id).expect("present");
                if cm.state != CmState::Accepting {
                    return;
                }
                cm.state = CmState::Connected;
                cm.timer_gen += 1;
                self.cm_event(
                    id,
                    CmEventKind::Established {
                        private_data: Vec::new(),
                    },
                );
            }
            CmMsg::Rej {
                conn_id,
                reason,
                private_data,
            } => {
                let Some(id) = self.find_conn(conn_id, true) else {
                    return;
                };
                let cm = self.cm_ids.get_mut(&id).expect("present");
                if cm.state != CmState::Connecting {
                    return;
                }
                cm.state = CmState::Failed;
                cm.timer_gen += 1;
                out.controls.push(Control::Close(conn_id));
                self.cm_event(
                    id,
                    CmEventKind::Rejected {
                        reason,
                        private_data,
                    },
                );
            }
            CmMsg::Dreq {
                conn_id,
                from_initiator,
            } => {
                let Some(id) = self.find_conn(conn_id, !from_initiator) else {
                    return;
                };
                if !matches!(
                    self.cm_ids[&id].state,
                    CmState::Connected | CmState::Accepting | CmState::Connecting
                ) {
                    return;
                }
                self.end_connection(id, false, out);
                self.cm_event(id, CmEventKind::Disconnected);
            }
        }
    }

    fn listener_for(&self, ip: IpAddr, port: u16) -> Option<u64> {
        let listening = |c: &CmIdState| c.state == CmState::Listening;
        let bound = || self.index.bound().map(|h| (h, &self.cm_ids[&h]));
        bound()
            .find(|(_, c)| listening(c) && c.local == Some(SocketAddr::new(ip, port)))
            .or_else(|| {
                bound().find(|(_, c)| {
                    listening(c)
                        && c.local.is_some_and(|l| {
                            l.port() == port
                                && l.ip().is_unspecified()
                                && l.ip().is_ipv4() == ip.is_ipv4()
                        })
                })
            })
            .map(|(h, _)| h)
    }

    /// The transport lost connection `conn` (TCP stream closed).
    pub fn conn_lost(&mut self, conn: u64, out: &mut Outbox) {
        let mut ids: Vec<u64> = [true, false]
            .into_iter()
            .filter_map(|initiator| self.index.conn(conn, initiator))
            .collect();
        ids.sort_unstable();
        for id in ids {
            match self.cm_ids[&id].state {
                CmState::Connected | CmState::Accepting => {
                    self.end_connection(id, false, out);
                    self.cm_event(id, CmEventKind::Disconnected);
                }
                CmState::Connecting => {
                    self.cm_ids.get_mut(&id).expect("present").state = CmState::Failed;
                    self.cm_event(id, CmEventKind::Unreachable);
                }
                _ => {}
            }
        }
    }
}
