//! The fabric's connection management on the soft TCP fabric, driven
//! through its own methods (the FFI layer's calls without libfabric).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use relink_soft::Registry;

use super::*;
use crate::params::{Backend, Params};

/// A fabric on a soft device of its own at `addr` (a registry directory
/// under `root`).
fn fabric(root: &std::path::Path, name: &str, addr: Ipv4Addr) -> Arc<Fabric> {
    let dir = root.join(name);
    Registry::open(&dir)
        .expect("registry")
        .add(
            "soft0",
            vec![format!("{addr}/8").parse().expect("an address")],
            None,
            None,
        )
        .expect("add soft0");
    Fabric::open(Params {
        backend: Backend::Soft,
        soft_dir: Some(dir),
        addr: Some(addr),
        ..Params::default()
    })
    .expect("open the fabric")
}

/// Drive `f` until `want` gives something, for at most `limit`.
fn wait<T>(f: &Fabric, limit: Duration, mut want: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        f.progress();
        if let Some(t) = want() {
            return Some(t);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

#[test]
fn closing_a_passive_endpoint_refuses_the_requests_nobody_read() {
    let root = tempfile::tempdir().expect("a temporary directory");
    let server = fabric(root.path(), "server", Ipv4Addr::new(127, 0, 0, 2));
    let client = fabric(root.path(), "client", Ipv4Addr::new(127, 0, 0, 1));

    let seq = server.eq_open();
    let pep = server.pep_open(1, SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 0));
    server.pep_bind_eq(pep, seq).expect("bind the EQ");
    server.listen(pep).expect("listen");
    let at = server.pep_getname(pep).expect("the listening address");

    let ceq = client.eq_open();
    let ccq = client.cq_open();
    let ep = client
        .ep_open(
            2,
            SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 0),
            Some(at),
            None,
            0,
            false,
        )
        .expect("an endpoint");
    client.ep_bind_eq(ep, ceq).expect("bind the EQ");
    client
        .ep_bind_cq(ep, ccq, FI_TRANSMIT | FI_RECV)
        .expect("bind the CQ");
    client.ep_enable(ep).expect("enable");
    client.connect(ep, at, b"hello").expect("connect");

    // The request reaches the server; nobody reads it, and the passive
    // endpoint closes.
    let arrived = wait(&server, Duration::from_secs(20), || {
        matches!(server.eq_read(seq, true), Ok(Some(EqEvent::ConnReq { .. }))).then_some(())
    });
    assert!(arrived.is_some(), "no connection request within 20 s");
    server.pep_close(pep);

    // The requester hears the refusal now, not at its give-up deadline.
    let t = Instant::now();
    let refused = wait(&client, Duration::from_secs(20), || client.eq_readerr(ceq));
    let e = refused.expect("no refusal within 20 s of the close (the request was left to give up)");
    assert_eq!(e.err, FI_ECONNREFUSED as u32, "{e:?}");
    println!(
        "refused {:?} after the passive endpoint closed",
        t.elapsed()
    );
}
