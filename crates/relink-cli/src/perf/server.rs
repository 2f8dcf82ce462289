//! `relink perf server`: listens (and listens again when its listener's
//! device returns), accepts each connection with a fresh buffer and
//! receives, counts what arrives, and prints one line per event.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anyhow::Context as _;
use relink_fabric::{
    Access, AsyncEvent, CmEvent, CmEventKind, CmId, DeviceEvent, DeviceEventKind, DeviceId,
    ErrorClass, Event, Provider, QpCaps, RecvWr, Timestamp, WorkCompletion,
    MAX_REJECT_PRIVATE_DATA,
};
use relink_soft::TcpHost;
use serde_json::json;

use super::args::{Op, ServerArgs};
use super::output::{cm_event_name, warn, Lines};
use super::private_data::{BufferInfo, Hello};
use super::resources::{destroy_id, EndSpec, Resources};
use super::{MAX_DEPTH, MAX_SERVER_RECVS, POLL_BATCH, RELISTEN_INTERVAL, TICK};

/// One connection the server holds.
struct ServerConn {
    res: Resources,
    /// What the client said it runs.
    hello: Hello,
    /// The client's address, from its connect request.
    peer: Option<SocketAddr>,
    device: DeviceId,
    /// When the connection was established (its request, until then).
    since: Timestamp,
    /// Messages received (SEND only: a WRITE completes nothing here).
    messages: u64,
    /// Bytes of those messages.
    bytes: u64,
}

/// The server: its listener, its connections, and when to stop.
pub(super) struct Server<'a> {
    p: &'a dyn Provider,
    dir: &'a std::path::Path,
    bind: SocketAddr,
    buf_size: u32,
    once: bool,
    listener: Option<CmId>,
    /// When to try listening again (the listener lost its device).
    relisten_at: Option<Timestamp>,
    conns: BTreeMap<CmId, ServerConn>,
    /// Connections that ended.
    ended: u64,
}

impl<'a> Server<'a> {
    pub(super) fn new(host: &'a TcpHost, a: &ServerArgs) -> Server<'a> {
        Server {
            p: host,
            dir: host.dir(),
            bind: a.bind,
            buf_size: a.buf_size,
            once: a.once,
            listener: None,
            relisten_at: None,
            conns: BTreeMap::new(),
            ended: 0,
        }
    }

    pub(super) fn run(mut self, out: &mut Lines<'_>) -> anyhow::Result<()> {
        let id = self.listen().with_context(|| {
            format!(
                "cannot listen on {} with the soft devices in {}",
                self.bind,
                self.dir.display()
            )
        })?;
        self.listener = Some(id);
        self.print_listening(out)?;
        let result = self.serve(out);
        // Whatever happened, release what is left.
        let ids: Vec<CmId> = self.conns.keys().copied().collect();
        for id in ids {
            self.close_conn(id);
        }
        if let Some(l) = self.listener.take() {
            destroy_id(self.p, l);
        }
        result
    }

    fn serve(&mut self, out: &mut Lines<'_>) -> anyhow::Result<()> {
        let mut wcs = Vec::with_capacity(POLL_BATCH);
        loop {
            while let Some(ev) = self.p.poll_event() {
                self.on_event(ev, out)?;
            }
            self.poll_cqs(&mut wcs);
            if self.listener.is_none() && self.relisten_at.is_some_and(|t| self.p.now() >= t) {
                self.try_relisten(out)?;
            }
            if self.once && self.ended > 0 && self.conns.is_empty() {
                return Ok(());
            }
            let mut deadline = self.p.now() + TICK;
            if let Some(t) = self.relisten_at {
                deadline = deadline.min(t);
            }
            self.p.wait(Some(deadline));
        }
    }

    /// Creates a CM id, binds it to the address and listens. A port 0 is
    /// replaced by the port bound, which later listens reuse.
    fn listen(&mut self) -> Result<CmId, relink_fabric::CmError> {
        let id = self.p.cm_create_id()?;
        let bound = self.p.cm_bind(id, self.bind).and_then(|local| {
            self.p.cm_listen(id, 64)?;
            Ok(local)
        });
        match bound {
            Ok(local) => {
                self.bind = local;
                Ok(id)
            }
            Err(e) => {
                destroy_id(self.p, id);
                Err(e)
            }
        }
    }

    fn print_listening(&self, out: &mut Lines<'_>) -> std::io::Result<()> {
        out.event(
            &format!("listening on {} ({})", self.bind, self.p.kind()),
            json!({"event": "listening", "addr": self.bind.to_string()}),
        )
    }

    /// Whether some device now owns the address to listen on.
    fn address_present(&self) -> bool {
        self.bind.ip().is_unspecified() || self.p.devices().iter().any(|d| d.owns(self.bind.ip()))
    }

    fn try_relisten(&mut self, out: &mut Lines<'_>) -> anyhow::Result<()> {
        self.relisten_at = None;
        if !self.address_present() {
            // A Device(Added) event brings us back.
            return Ok(());
        }
        match self.listen() {
            Ok(id) => {
                self.listener = Some(id);
                self.print_listening(out)?;
            }
            Err(e) if e.class() == ErrorClass::Retryable => {
                self.relisten_at = Some(self.p.now() + RELISTEN_INTERVAL);
            }
            Err(e) => return Err(e).with_context(|| format!("cannot listen on {}", self.bind)),
        }
        Ok(())
    }

    fn on_event(&mut self, ev: Event, out: &mut Lines<'_>) -> anyhow::Result<()> {
        match ev {
            Event::Cm(CmEvent { id, kind }) => self.on_cm(id, kind, out)?,
            Event::Device(DeviceEvent { kind, device }) => match kind {
                DeviceEventKind::Added => {
                    out.event(
                        &format!("device added {}", device.id),
                        json!({"event": "device_added", "device": device.id.to_string()}),
                    )?;
                    if self.listener.is_none() {
                        self.relisten_at = Some(self.p.now());
                    }
                }
                DeviceEventKind::Removed => out.event(
                    &format!("device removed {}", device.id),
                    json!({"event": "device_removed", "device": device.id.to_string()}),
                )?,
                DeviceEventKind::Fatal => out.event(
                    &format!("device fatal error on {}", device.id),
                    json!({"event": "device_fatal", "device": device.id.to_string()}),
                )?,
                _ => {}
            },
            Event::Async { ctx, event } => {
                if let AsyncEvent::CqErr(cq) = event {
                    warn(&format!("{cq} on {ctx} overran"));
                }
            }
            Event::CqReady(_) => {}
        }
        Ok(())
    }

    fn on_cm(&mut self, id: CmId, kind: CmEventKind, out: &mut Lines<'_>) -> anyhow::Result<()> {
        if Some(id) == self.listener {
            if kind == CmEventKind::DeviceRemoval {
                let device = self.p.cm_device(id);
                destroy_id(self.p, id);
                self.listener = None;
                let dev = device.map(|d| d.to_string()).unwrap_or_else(|| "-".into());
                out.event(
                    &format!(
                        "device removal on listener {} ({dev}): listening again once a device owns {}",
                        self.bind,
                        self.bind.ip()
                    ),
                    json!({"event": "device_removal", "listener": self.bind.to_string(), "device": dev}),
                )?;
                self.relisten_at = Some(self.p.now());
            }
            return Ok(());
        }
        match kind {
            CmEventKind::ConnectRequest {
                private_data, peer, ..
            } => self.on_request(id, &private_data, peer, out)?,
            CmEventKind::Established { .. } => {
                if let Some(c) = self.conns.get_mut(&id) {
                    c.since = self.p.now();
                    let (local, peer) = self.p.cm_addrs(id);
                    let peer = peer.or(c.peer);
                    let c = &self.conns[&id];
                    out.event(
                        &format!(
                            "connected {} -> {} on {}: op {}, size {}, depth {}",
                            addr_text(peer),
                            addr_text(local),
                            c.device,
                            c.hello.op.name(),
                            c.hello.size,
                            c.hello.depth
                        ),
                        json!({
                            "event": "connected",
                            "peer": addr_text(peer),
                            "local": addr_text(local),
                            "device": c.device.to_string(),
                            "op": c.hello.op.name(),
                            "size": c.hello.size,
                            "depth": c.hello.depth,
                        }),
                    )?;
                }
            }
            CmEventKind::Disconnected | CmEventKind::DeviceRemoval => {
                if let Some(c) = self.conns.get_mut(&id) {
                    // Count the messages that completed before the end.
                    poll_conn(self.p, self.buf_size, c, &mut Vec::new());
                    let (word, key) = if kind == CmEventKind::Disconnected {
                        ("disconnected", "disconnected")
                    } else {
                        ("device removal on connection", "device_removal")
                    };
                    let secs = self.p.now().saturating_since(c.since).as_secs_f64();
                    out.event(
                        &format!(
                            "{word} {} ({}): {} messages, {} bytes received in {secs:.2} s",
                            addr_text(c.peer),
                            c.device,
                            c.messages,
                            c.bytes
                        ),
                        json!({
                            "event": key,
                            "peer": addr_text(c.peer),
                            "device": c.device.to_string(),
                            "messages": c.messages,
                            "bytes": c.bytes,
                            "seconds": secs,
                        }),
                    )?;
                    self.close_conn(id);
                    self.ended += 1;
                }
            }
            CmEventKind::ConnectError | CmEventKind::Unreachable | CmEventKind::Rejected { .. } => {
                if let Some(c) = self.conns.get(&id) {
                    let name = cm_event_name(&kind);
                    out.event(
                        &format!("connection from {} failed: {name}", addr_text(c.peer)),
                        json!({"event": "connect_failed", "peer": addr_text(c.peer), "cm_event": name}),
                    )?;
                    self.close_conn(id);
                    self.ended += 1;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn on_request(
        &mut self,
        id: CmId,
        private_data: &[u8],
        peer: SocketAddr,
        out: &mut Lines<'_>,
    ) -> anyhow::Result<()> {
        match self.accept(id, private_data, peer) {
            Ok(conn) => {
                self.conns.insert(id, conn);
            }
            Err(reason) => {
                let mut msg = reason.clone().into_bytes();
                msg.truncate(MAX_REJECT_PRIVATE_DATA);
                if let Err(e) = self.p.cm_reject(id, &msg) {
                    warn(&format!("rejecting {peer}: {e}"));
                }
                destroy_id(self.p, id);
                out.event(
                    &format!("rejected {peer}: {reason}"),
                    json!({"event": "rejected", "peer": peer.to_string(), "reason": reason}),
                )?;
            }
        }
        Ok(())
    }

    /// Sets a connection up and accepts it; the error is the reason to
    /// reject it with.
    fn accept(
        &mut self,
        id: CmId,
        private_data: &[u8],
        peer: SocketAddr,
    ) -> Result<ServerConn, String> {
        let hello = Hello::decode(private_data)?;
        if hello.size > self.buf_size {
            return Err(format!(
                "message size {} exceeds the server's buffer of {} bytes",
                hello.size, self.buf_size
            ));
        }
        if !(1..=MAX_DEPTH).contains(&hello.depth) {
            return Err(format!("depth {} is not in 1..={MAX_DEPTH}", hello.depth));
        }
        let device = self
            .p
            .cm_device(id)
            .ok_or_else(|| "the request has no device".to_string())?;
        let recvs = match hello.op {
            Op::Send => (2 * hello.depth).min(MAX_SERVER_RECVS),
            Op::Write => 0,
        };
        let spec = EndSpec {
            cq_depth: recvs + 1,
            caps: QpCaps {
                max_send_wr: 1,
                max_recv_wr: recvs.max(1),
                max_send_sge: 1,
                max_recv_sge: 1,
            },
            buf_len: self.buf_size,
            access: Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
        };
        let res = Resources::open(self.p, &device, &spec).map_err(|e| format!("{e:#}"))?;
        let info = BufferInfo {
            addr: res.mr.addr,
            rkey: res.mr.rkey,
            len: self.buf_size,
        };
        let wrs: Vec<RecvWr> = (0..recvs)
            .map(|i| RecvWr {
                wr_id: u64::from(i),
                sgl: res.sge(self.buf_size).into(),
            })
            .collect();
        let setup = self
            .p
            .post_recv(res.qp, &wrs)
            .map_err(|e| format!("cannot post receives: {e}"))
            .and_then(|()| {
                self.p
                    .cm_accept(id, res.qp, &info.encode())
                    .map_err(|e| format!("cannot accept: {e}"))
            });
        if let Err(e) = setup {
            for f in res.destroy(self.p) {
                warn(&f);
            }
            return Err(e);
        }
        Ok(ServerConn {
            res,
            hello,
            peer: Some(peer),
            device,
            since: self.p.now(),
            messages: 0,
            bytes: 0,
        })
    }

    /// Polls every connection's CQ, counting messages and reposting
    /// receives.
    fn poll_cqs(&mut self, wcs: &mut Vec<WorkCompletion>) {
        for c in self.conns.values_mut() {
            poll_conn(self.p, self.buf_size, c, wcs);
        }
    }

    /// Destroys a connection's objects and CM id.
    fn close_conn(&mut self, id: CmId) {
        if let Some(c) = self.conns.remove(&id) {
            for f in c.res.destroy(self.p) {
                warn(&f);
            }
            destroy_id(self.p, id);
        }
    }
}

/// Polls one connection's CQ until it is empty, counting messages and
/// reposting their receives.
fn poll_conn(p: &dyn Provider, buf_size: u32, c: &mut ServerConn, wcs: &mut Vec<WorkCompletion>) {
    loop {
        wcs.clear();
        match p.poll_cq(c.res.cq, POLL_BATCH, wcs) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                warn(&format!("polling {}: {e}", c.res.cq));
                return;
            }
        }
        let mut repost = Vec::new();
        for wc in wcs.iter() {
            if wc.status.is_ok() {
                c.messages += 1;
                c.bytes += u64::from(wc.byte_len);
                repost.push(RecvWr {
                    wr_id: wc.wr_id,
                    sgl: c.res.sge(buf_size).into(),
                });
            }
        }
        if !repost.is_empty() {
            if let Err(e) = p.post_recv(c.res.qp, &repost) {
                // A lost device: the CM event that follows cleans up.
                if e.class() != ErrorClass::DeviceFatal {
                    warn(&format!("reposting receives: {e}"));
                }
            }
        }
    }
}

fn addr_text(a: Option<SocketAddr>) -> String {
    a.map(|a| a.to_string()).unwrap_or_else(|| "-".into())
}
