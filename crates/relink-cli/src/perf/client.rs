//! `relink perf client`: connects (resolve, route, open the device,
//! connect with the hello), runs the traffic, then leaves in order:
//! disconnect, destroy the objects, destroy the CM id.

use anyhow::{anyhow, bail, Context as _};
use relink_fabric::{
    Access, CmEvent, CmEventKind, CmId, ConnParams, DeviceId, Event, Provider, QpCaps,
    RejectReason, Timestamp,
};
use relink_soft::TcpHost;

use super::args::ClientArgs;
use super::output::{cm_event_name, warn, Lines};
use super::private_data::{BufferInfo, Hello};
use super::resources::{destroy_id, EndSpec, Resources};
use super::traffic::traffic;
use super::{RESOLVE_TIMEOUT, SETUP_TIMEOUT, TICK};

/// The client's connection: CM id, verbs objects and the server's buffer.
pub(super) struct ClientConn {
    pub(super) id: CmId,
    pub(super) res: Resources,
    pub(super) remote: BufferInfo,
    pub(super) device: DeviceId,
}

/// Waits for the next CM event on `id` until `deadline`; other events are
/// dropped (a device event is of no use before the connection is up).
fn next_cm(
    p: &dyn Provider,
    id: CmId,
    deadline: Timestamp,
    what: &str,
) -> anyhow::Result<CmEventKind> {
    loop {
        while let Some(ev) = p.poll_event() {
            if let Event::Cm(CmEvent { id: eid, kind }) = ev {
                if eid == id {
                    return Ok(kind);
                }
            }
        }
        if p.now() >= deadline {
            bail!(
                "timed out after {} s waiting for {what}",
                SETUP_TIMEOUT.as_secs()
            );
        }
        p.wait(Some(deadline.min(p.now() + TICK)));
    }
}

/// Resolves, opens the device and connects; on failure everything created
/// is destroyed.
fn connect(p: &dyn Provider, a: &ClientArgs, dir: &str) -> anyhow::Result<ClientConn> {
    let deadline = p.now() + SETUP_TIMEOUT;
    let dst = a.connect;
    let id = p.cm_create_id().context("cannot create a CM id")?;
    let mut res: Option<Resources> = None;
    let r = connect_id(p, a, dir, id, deadline, &mut res);
    match r {
        Ok((remote, device)) => Ok(ClientConn {
            id,
            res: res.expect("set on success"),
            remote,
            device,
        }),
        Err(e) => {
            if let Some(res) = res {
                for f in res.destroy(p) {
                    warn(&f);
                }
            }
            destroy_id(p, id);
            Err(e.context(format!("cannot connect to {dst}")))
        }
    }
}

fn connect_id(
    p: &dyn Provider,
    a: &ClientArgs,
    dir: &str,
    id: CmId,
    deadline: Timestamp,
    res: &mut Option<Resources>,
) -> anyhow::Result<(BufferInfo, DeviceId)> {
    let dst = a.connect;
    p.cm_resolve_addr(id, None, dst, RESOLVE_TIMEOUT)
        .context("address resolution failed")?;
    match next_cm(p, id, deadline, "address resolution")? {
        CmEventKind::AddrResolved => {}
        CmEventKind::AddrError => {
            bail!("no soft device in {dir} reaches {} (ADDR_ERROR)", dst.ip())
        }
        other => bail!("address resolution ended with {}", cm_event_name(&other)),
    }
    p.cm_resolve_route(id, RESOLVE_TIMEOUT)
        .context("route resolution failed")?;
    match next_cm(p, id, deadline, "route resolution")? {
        CmEventKind::RouteResolved => {}
        other => bail!("route resolution ended with {}", cm_event_name(&other)),
    }
    let device = p
        .cm_device(id)
        .ok_or_else(|| anyhow!("the resolved CM id has no device"))?;
    let spec = EndSpec {
        cq_depth: a.depth + 1,
        caps: QpCaps {
            max_send_wr: a.depth,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
        },
        buf_len: a.size,
        access: Access::LOCAL_WRITE,
    };
    let r = res.insert(Resources::open(p, &device, &spec)?);
    // A recognisable pattern, for anyone looking at the server's buffer.
    let pattern: Vec<u8> = (0..a.size).map(|i| (i % 251) as u8).collect();
    r.mem
        .write(0, &pattern)
        .context("cannot fill the send buffer")?;
    let hello = Hello {
        op: a.op,
        size: a.size,
        depth: a.depth,
    };
    p.cm_connect(id, r.qp, ConnParams::default(), &hello.encode())
        .context("connect failed")?;
    let remote = match next_cm(p, id, deadline, "the server's answer")? {
        CmEventKind::Established { private_data } => {
            BufferInfo::decode(&private_data).map_err(|e| anyhow!("bad answer: {e}"))?
        }
        CmEventKind::Rejected {
            reason: RejectReason::Consumer,
            private_data,
        } => bail!(
            "the server rejected the connection: {}",
            String::from_utf8_lossy(&private_data)
        ),
        CmEventKind::Rejected {
            reason: RejectReason::NoListener,
            ..
        } => bail!("nobody listens on {dst}"),
        CmEventKind::Rejected { reason, .. } => bail!("rejected ({reason:?})"),
        CmEventKind::Unreachable => bail!(
            "the server did not answer (UNREACHABLE): is `relink perf server` listening on {dst}?"
        ),
        other => bail!("the connection failed with {}", cm_event_name(&other)),
    };
    if remote.len < a.size {
        // The server checked too, but do not trust it with our bounds.
        let _ = p.cm_disconnect(id);
        bail!(
            "--size {} exceeds the server's buffer of {} bytes",
            a.size,
            remote.len
        );
    }
    Ok((remote, device))
}

/// Runs the client; returns the exit status (0, 3 or 4).
pub(super) fn run(host: &TcpHost, a: &ClientArgs, out: &mut Lines<'_>) -> anyhow::Result<i32> {
    let p: &dyn Provider = host;
    let dir = host.dir().display().to_string();
    let conn = connect(p, a, &dir)?;
    let result = traffic(p, a, &conn, out);
    // Leave in order: disconnect (if still up), then destroy everything.
    let _ = p.cm_disconnect(conn.id);
    for f in conn.res.destroy(p) {
        warn(&f);
    }
    destroy_id(p, conn.id);
    result
}
