//! Over TCP, a device a host saw hit a fatal error takes no new work until
//! its new generation appears (issue 24, item 9).
//!
//! A reset writes the device's `.fatal` marker, then its new generation: a
//! watcher that scans in between reports the device `Fatal` while it is
//! still registered under its old generation, and `Removed`/`Added` one
//! scan later. Before, the device stayed usable in between: a peer's
//! reconnection was accepted on it and lost again when it left — two
//! losses for one reset. Here the window is held open (the marker written
//! by hand, the reset completed later) and every use of the fatal device
//! is refused; the new generation takes connections again.
//!
//! No timing is asserted: waits are bounded only so that a hang fails.

use std::fs;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use relink_fabric::{
    CmEventKind, CmId, ConnParams, CreateError, DeviceEventKind, DeviceInfo, Event, OpenError,
    PostError, Provider, QpCaps, QpInit, RecvWr, RejectReason, SgeList,
};
use relink_soft::{Registry, TcpHost};

const HANG: Duration = Duration::from_secs(30);

/// A runtime directory of its own, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(label: &str) -> Dir {
        let d = std::env::temp_dir().join(format!(
            "relink-soft-tcp-fatal-{label}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&d);
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Waits for the first event of `host` that `want` picks; fails after
/// [`HANG`] naming `what` and the events seen meanwhile.
fn wait_for<T>(host: &TcpHost, what: &str, mut want: impl FnMut(&Event) -> Option<T>) -> T {
    let give_up = Instant::now() + HANG;
    let mut seen = Vec::new();
    loop {
        while let Some(ev) = host.poll_event() {
            if let Some(t) = want(&ev) {
                return t;
            }
            seen.push(ev);
        }
        assert!(
            Instant::now() < give_up,
            "{what}: not in {HANG:?}; saw {seen:?}"
        );
        host.wait(Some(host.now() + Duration::from_millis(50)));
    }
}

fn device_event(kind: DeviceEventKind) -> impl FnMut(&Event) -> Option<DeviceInfo> {
    move |ev| match ev {
        Event::Device(d) if d.kind == kind => Some(d.device.clone()),
        _ => None,
    }
}

fn cm_event(id: CmId) -> impl FnMut(&Event) -> Option<CmEventKind> {
    move |ev| match ev {
        Event::Cm(c) if c.id == id => Some(c.kind.clone()),
        _ => None,
    }
}

/// Writes `<name>.fatal` naming `generation` as the registry does (a
/// hidden temporary file renamed over it): a reset caught between its two
/// writes.
fn write_fatal_marker(dir: &Path, name: &str, generation: u64) {
    let tmp = dir.join(format!(".{name}.fatal.test.tmp"));
    fs::write(&tmp, format!("generation={generation}\n")).unwrap();
    fs::rename(&tmp, dir.join(format!("{name}.fatal"))).unwrap();
}

/// Connects from `a` to `dst` on a new QP: the CM event that ends the
/// attempt (`Rejected`, or `Established` once the peer accepted).
fn connect(a: &TcpHost, dst: SocketAddr) -> CmEventKind {
    let id = a.cm_create_id().unwrap();
    a.cm_resolve_addr(id, None, dst, HANG).unwrap();
    assert_eq!(
        wait_for(a, "address resolved", cm_event(id)),
        CmEventKind::AddrResolved
    );
    a.cm_resolve_route(id, HANG).unwrap();
    assert_eq!(
        wait_for(a, "route resolved", cm_event(id)),
        CmEventKind::RouteResolved
    );
    let dev = a.cm_device(id).expect("resolved on a device");
    let ctx = a.open_device(&dev).unwrap();
    let pd = a.alloc_pd(ctx).unwrap();
    let cq = a.create_cq(ctx, 16).unwrap();
    let qp = a.create_qp(pd, qp_init(cq)).unwrap();
    a.cm_connect(id, qp, ConnParams::default(), b"").unwrap();
    wait_for(a, "the connect's answer", cm_event(id))
}

fn qp_init(cq: relink_fabric::CqId) -> QpInit {
    QpInit {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        caps: QpCaps {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
        },
        sq_sig_all: false,
    }
}

#[test]
fn a_device_seen_fatal_takes_no_new_work_until_its_new_generation() {
    let (dir_a, dir_b) = (Dir::new("a"), Dir::new("b"));
    let reg_a = Registry::open(&dir_a.0).unwrap();
    let reg_b = Registry::open(&dir_b.0).unwrap();
    reg_a
        .add("soft0", vec!["127.0.0.1/8".parse().unwrap()], None, None)
        .unwrap();
    let old = reg_b
        .add("soft0", vec!["127.0.0.2/8".parse().unwrap()], None, None)
        .unwrap();
    let a = TcpHost::open(&dir_a.0).unwrap();
    let b = TcpHost::open(&dir_b.0).unwrap();
    let b_ip: IpAddr = "127.0.0.2".parse().unwrap();

    // On b, before the fault: a context, a QP, and two listeners — one on
    // the device's address, one on the wildcard address.
    let ctx = b.open_device(&old.id).unwrap();
    let pd = b.alloc_pd(ctx).unwrap();
    let cq = b.create_cq(ctx, 16).unwrap();
    let qp = b.create_qp(pd, qp_init(cq)).unwrap();
    let listen = |ip: IpAddr| {
        let id = b.cm_create_id().unwrap();
        let bound = b.cm_bind(id, SocketAddr::new(ip, 0)).unwrap();
        b.cm_listen(id, 8).unwrap();
        SocketAddr::new(b_ip, bound.port())
    };
    let on_addr = listen(b_ip);
    let on_any = listen("0.0.0.0".parse().unwrap());

    // The first half of a reset: b's watcher sees soft0 fatal, still
    // registered under its old generation.
    write_fatal_marker(&dir_b.0, "soft0", old.id.generation);
    let fatal = wait_for(
        &b,
        "b sees soft0 fatal",
        device_event(DeviceEventKind::Fatal),
    );
    assert_eq!(fatal.id, old.id);
    assert!(
        b.devices().iter().any(|d| d.id == old.id),
        "still registered under its old generation"
    );

    // Nothing new starts on it.
    assert!(matches!(
        b.open_device(&old.id),
        Err(OpenError::NoDevice(_))
    ));
    assert!(matches!(b.alloc_pd(ctx), Err(CreateError::DeviceLost)));
    assert!(matches!(b.create_cq(ctx, 16), Err(CreateError::DeviceLost)));
    let recv = RecvWr {
        wr_id: 1,
        sgl: SgeList::default(),
    };
    assert!(matches!(
        b.post_recv(qp, &[recv]),
        Err(PostError::DeviceLost { .. })
    ));
    let id = b.cm_create_id().unwrap();
    b.cm_bind(id, SocketAddr::new(b_ip, 0)).unwrap();
    assert!(
        b.cm_listen(id, 8).is_err(),
        "no listening on a fatal device"
    );
    let id = b.cm_create_id().unwrap();
    b.cm_resolve_addr(
        id,
        None,
        SocketAddr::new("127.0.0.1".parse().unwrap(), 1),
        HANG,
    )
    .unwrap();
    assert_eq!(
        wait_for(&b, "b's resolution through its fatal device", cm_event(id)),
        CmEventKind::AddrError
    );
    // A peer's connection is refused, on either listener: accepted, it
    // would be lost again when the device leaves.
    for dst in [on_addr, on_any] {
        match connect(&a, dst) {
            CmEventKind::Rejected { reason, .. } => assert_eq!(reason, RejectReason::NoListener),
            other => panic!("a connection to {dst} on b's fatal device: {other:?}"),
        }
    }
    while let Some(ev) = b.poll_event() {
        assert!(
            !matches!(
                ev,
                Event::Cm(ref c) if matches!(c.kind, CmEventKind::ConnectRequest { .. })
            ),
            "b heard of a connection on its fatal device: {ev:?}"
        );
    }

    // The second half: the new generation takes connections again.
    let new = reg_b.reset("soft0").unwrap();
    let added = wait_for(
        &b,
        "b sees soft0 back",
        device_event(DeviceEventKind::Added),
    );
    assert_eq!(added.id, new.id);
    assert!(new.id.generation > old.id.generation);
    let ctx2 = b.open_device(&new.id).unwrap();
    assert!(b.alloc_pd(ctx2).is_ok());
    let id = b.cm_create_id().unwrap();
    let bound = b.cm_bind(id, SocketAddr::new(b_ip, 0)).unwrap();
    b.cm_listen(id, 8).unwrap();
    let a2 = std::thread::scope(|s| {
        let t = s.spawn(|| connect(&a, SocketAddr::new(b_ip, bound.port())));
        let (req, listener) = wait_for(&b, "b hears the connection", |ev| match ev {
            Event::Cm(c) => match &c.kind {
                CmEventKind::ConnectRequest { listener, .. } => Some((c.id, *listener)),
                _ => None,
            },
            _ => None,
        });
        assert_eq!(listener, id);
        assert_eq!(b.cm_device(req), Some(new.id.clone()));
        let pd = b.alloc_pd(ctx2).unwrap();
        let cq = b.create_cq(ctx2, 16).unwrap();
        let qp = b.create_qp(pd, qp_init(cq)).unwrap();
        b.cm_accept(req, qp, b"").unwrap();
        t.join().expect("the connecting thread")
    });
    assert!(
        matches!(a2, CmEventKind::Established { .. }),
        "a connection on the new generation: {a2:?}"
    );
}
