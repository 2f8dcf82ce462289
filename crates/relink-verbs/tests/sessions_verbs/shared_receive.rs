//! Shared receive queues and type 2 memory windows on real verbs, across
//! `rdma link delete/add` of either side's device.

use relink::{Access, MemoryError, SharedReceiveHandle, SharedReceiveOptions};
use relink_fabric::{MwType, ObjectCounts};
use relink_sim::workload::MAX_MESSAGE;

use super::*;

/// Why the device `name` of `p` cannot give relink a type 2 window over a
/// region (an MR with `MW_BIND`, a type 2 window in its PD), if it cannot.
fn type2_windows_refused(p: &dyn Provider, name: &str) -> Option<String> {
    let Some(dev) = p.devices().into_iter().find(|d| d.id.name == name) else {
        return Some(format!("no device {name}"));
    };
    let ctx = match p.open_device(&dev.id) {
        Ok(c) => c,
        Err(e) => return Some(format!("open {name}: {e}")),
    };
    let mut why = None;
    match p.alloc_pd(ctx) {
        Ok(pd) => {
            let mem: Result<_, MemoryError> = p.alloc_memory(4096);
            match mem {
                Ok(m) => {
                    match p.reg_mr(
                        pd,
                        &m,
                        m.addr(),
                        4096,
                        Access::LOCAL_WRITE | Access::MW_BIND,
                    ) {
                        Ok(mr) => {
                            match p.alloc_mw(pd, MwType::Type2) {
                                Ok(mw) => {
                                    let _ = p.dealloc_mw(mw.id);
                                }
                                Err(e) => why = Some(format!("alloc_mw(type 2): {e}")),
                            }
                            let _ = p.dereg_mr(mr.id);
                        }
                        Err(e) => why = Some(format!("reg_mr with MW_BIND: {e}")),
                    }
                }
                Err(e) => why = Some(format!("alloc_memory: {e}")),
            }
            let _ = p.dealloc_pd(pd);
        }
        Err(e) => why = Some(format!("alloc_pd: {e}")),
    }
    let _ = p.close_device(ctx);
    why
}

/// Objects of `node`'s provider now.
fn counts(node: &Node) -> ObjectCounts {
    node.provider().object_counts()
}

/// Both sides receive through a shared receive queue (one SRQ per node,
/// on the device its session is on) and the target's data region is
/// exposed through a type 2 memory window relink binds on the session's
/// QP. The checked workload (messages, WRITEs, READs and fetch-adds through
/// the window's tokens) runs across `rdma link delete/add` of the target's
/// device and then of the initiator's: every operation completes once,
/// every message arrives once and in order, every block holds its last
/// write; after each recovery each node has one SRQ (the deleted device's
/// is gone) and the target one window (the old one freed). If the device
/// refuses type 2 windows, the scenario says why and runs with the region
/// advertised through its MR.
#[test]
fn shared_receive_and_windows_across_unplug_replug() {
    let env = env_or_skip!(need_nothing);
    let (listen, paths) = main_pair(&env, port());
    let queue = || {
        SharedReceiveOptions::builder()
            .depth(64)
            .max_message(MAX_MESSAGE)
            .build()
            .expect("valid options")
    };
    let (mut qa, mut qb): (Option<SharedReceiveHandle>, Option<SharedReceiveHandle>) = (None, None);
    let mut windows_refused = None;
    let target_device = env.target.device.clone();
    let mut d = Duo::start_with(
        env.clone(),
        listen,
        paths,
        |a| {
            let q = a.create_shared_receive(queue()).expect("queue");
            qa = Some(q);
            options(INITIATOR, Policy::default())
                .to_builder()
                .shared_receive(q)
                .build()
                .expect("options")
        },
        |b| {
            let q = b.create_shared_receive(queue()).expect("queue");
            qb = Some(q);
            windows_refused = type2_windows_refused(&**b.provider(), &target_device);
            let mut o = options(TARGET, Policy::default());
            if windows_refused.is_none() {
                for r in o.regions.iter_mut().filter(|r| r.advertise) {
                    *r = r.clone().window(true);
                }
            }
            o.to_builder().shared_receive(q).build().expect("options")
        },
    );
    let windows = match &windows_refused {
        Some(why) => {
            relink_skip::skip_part(
                "shared_receive_and_windows_across_unplug_replug on verbs",
                &relink_skip::Skip::new(format!(
                    "type 2 windows: {target_device} refuses them ({why}); the region is \
                     advertised through its MR, the shared receive queues are checked"
                )),
            );
            0
        }
        None => 1,
    };
    let (qa, qb) = (qa.expect("made"), qb.expect("made"));
    let check = |d: &mut Duo, when: &str| {
        let (a, b) = (counts(&d.a), counts(&d.b));
        if (a.srqs, b.srqs) != (1, 1) {
            d.problems.push(format!(
                "{when}: SRQs initiator {} target {} (one each)",
                a.srqs, b.srqs
            ));
        }
        if (a.mws, b.mws) != (0, windows) {
            d.problems.push(format!(
                "{when}: windows initiator {} target {} (0 and {windows})",
                a.mws, b.mws
            ));
        }
        for (who, node, q) in [("initiator", &d.a, qa), ("target", &d.b, qb)] {
            let u = node.shared_receive_usage(q).expect("the queue");
            if (u.devices, u.reserved) != (1, 32) {
                d.problems.push(format!("{when}: the {who}'s queue: {u:?}"));
            }
        }
        eprintln!(
            "  [{:>8.3}s] {when}: initiator {a:?}, target {b:?}",
            d.secs()
        );
    };
    d.pump(Duration::from_millis(500));
    check(&mut d, "established");
    for (dev, netdev) in [
        (env.target.device.clone(), env.target.netdev.clone()),
        (env.init.device.clone(), env.init.netdev.clone()),
    ] {
        d.delete(&dev);
        d.pump(Duration::from_millis(200));
        d.add(&dev, &netdev);
        d.wait_resumed(&format!("{dev} back"));
        d.pump(Duration::from_millis(300));
        check(&mut d, &format!("after {dev} came back"));
    }
    d.finish("shared_receive_and_windows");
}
