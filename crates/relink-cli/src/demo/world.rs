//! The demo's world: two hosts on the in-process soft fabric, each with two
//! devices on two subnets, and the two sessions between them.
//!
//! ```text
//!   initiator                                   target
//!   soft0 10.0.0.1/24  ───── subnet 0 ─────  soft0 10.0.0.2/24   :7471 (A)  :7472 (B)  :7473 (C)
//!   soft1 10.0.1.1/24  ───── subnet 1 ─────  soft1 10.0.1.2/24   :7471 (A)             :7473 (C)
//! ```
//!
//! Session A has two paths (one per subnet) and a data region at the
//! target; session B has one path (subnet 0) and a short give-up deadline;
//! session C has two paths and manual recovery (see [`super::manual`]).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{bail, Context as _};
use relink::{Path, Policy, RecoveryMode, SessionHandle, SessionOptions, State};
use relink_fabric::IpNet;
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::{Fault, LinkConfig};

use relink_sim::workload;

/// Session A's port at the target.
pub const PORT_A: u16 = 7471;
/// Session B's port at the target.
pub const PORT_B: u16 = 7472;
/// Session C's port at the target.
pub const PORT_C: u16 = 7473;

/// The addresses of the two subnets, `(initiator, target)` per device.
pub const ADDRS: [(&str, &str); 2] = [
    ("10.0.0.1/24", "10.0.0.2/24"),
    ("10.0.1.1/24", "10.0.1.2/24"),
];

/// The devices, in subnet order.
pub const DEVICES: [&str; 2] = ["soft0", "soft1"];

/// How many paths sessions A, B and C have: path `i` goes through
/// subnet `i` (soft0, then soft1).
pub const PATHS: [usize; 3] = [2, 1, 2];

/// The policy of session A: defaults, with attempts that time out and back
/// off on the scale of the demo.
pub fn policy_a() -> Policy {
    Policy::builder()
        .connect_timeout(Duration::from_millis(500))
        .reconnect_delay(Duration::from_secs(1))
        .build()
        .expect("valid policy")
}

/// The policy of session B: A's, with a short give-up deadline.
pub fn policy_b(give_up: Duration) -> Policy {
    policy_a()
        .to_builder()
        .ctrl_loss_tmo(Some(give_up))
        .build()
        .expect("valid policy")
}

/// The policy of session C's initiator: A's, with manual recovery (a
/// loss holds the session until its application resumes it). Its target
/// keeps A's policy: only an initiator is held.
pub fn policy_c() -> Policy {
    policy_a()
        .to_builder()
        .recovery(RecoveryMode::Manual)
        .build()
        .expect("valid policy")
}

fn net(s: &str) -> anyhow::Result<IpNet> {
    s.parse().map_err(|e| anyhow::anyhow!("address {s}: {e:?}"))
}

fn ip(s: &str) -> anyhow::Result<IpAddr> {
    Ok(net(s)?.addr)
}

/// The world with both sessions established.
pub struct World {
    /// Hosts, nodes and the virtual clock.
    pub sim: Sim,
    /// Session A at the initiator and at the target.
    pub a: (SessionHandle, SessionHandle),
    /// Session B at the initiator and at the target.
    pub b: (SessionHandle, SessionHandle),
    /// Session C at the initiator and at the target.
    pub c: (SessionHandle, SessionHandle),
}

fn wait_established(sim: &mut Sim, s: SessionHandle, what: &str) -> anyhow::Result<SessionHandle> {
    let ok = sim.run_until_cond(Duration::from_secs(2), |sim| {
        sim.node(INITIATOR).state(s) == Some(State::Established)
    });
    if !ok {
        bail!(
            "session {what} did not connect within 2 s of virtual time (state {:?})",
            sim.node(INITIATOR).state(s)
        );
    }
    let mut accepted = None;
    let found = sim.run_until_cond(Duration::from_secs(1), |sim| {
        accepted = sim.node(TARGET).accept().map(|a| a.session);
        accepted.is_some()
    });
    match accepted {
        Some(t) if found => Ok(t),
        _ => bail!("the target did not accept session {what}"),
    }
}

/// Build the world and connect the three sessions (B gives up `give_up`
/// after a loss).
pub fn build(seed: u64, give_up: Duration) -> anyhow::Result<World> {
    let mut sim = Sim::new(seed);
    // Sim::new gives each host soft0 on subnet 0; add soft1 on subnet 1.
    let fabric = sim.fabric().clone();
    // Packets take 2 to 5 µs, drawn from the seed (order per flow kept).
    fabric.inject(Fault::SetLink(LinkConfig {
        latency: Duration::from_micros(2),
        jitter: Duration::from_micros(3),
        drop_rate: 0.0,
    }));
    for (host, addr) in [(INITIATOR, ADDRS[1].0), (TARGET, ADDRS[1].1)] {
        fabric.add_device_with(sim.host(host).index(), DEVICES[1], vec![net(addr)?], None);
    }
    if sim.addr(INITIATOR) != ip(ADDRS[0].0)? || sim.addr(TARGET) != ip(ADDRS[0].1)? {
        bail!("the simulation's default addresses changed; update the demo's ADDRS");
    }

    let target_opts = |policy: Policy, regions| {
        SessionOptions::builder()
            .policy(policy)
            .regions(regions)
            .build()
            .expect("valid session options")
    };
    let peer = |i: usize, port| -> anyhow::Result<SocketAddr> {
        Ok(SocketAddr::new(ip(ADDRS[i].1)?, port))
    };
    let path = |i: usize, port| -> anyhow::Result<Path> {
        Ok(Path {
            local: Some(ip(ADDRS[i].0)?),
            peer: peer(i, port)?,
        })
    };
    // The target listens for A and C on both of its addresses, for B on
    // subnet 0.
    for (i, (_, addr)) in ADDRS.iter().enumerate() {
        sim.node(TARGET)
            .listen(
                peer(i, PORT_A)?,
                target_opts(policy_a(), workload::target_regions()),
            )
            .with_context(|| format!("listen for A on {addr}"))?;
        sim.node(TARGET)
            .listen(peer(i, PORT_C)?, target_opts(policy_a(), Vec::new()))
            .with_context(|| format!("listen for C on {addr}"))?;
    }
    sim.node(TARGET)
        .listen(peer(0, PORT_B)?, target_opts(policy_b(give_up), Vec::new()))
        .context("listen for B")?;

    let paths = |n: usize, port| {
        (0..n)
            .map(|i| path(i, port))
            .collect::<anyhow::Result<Vec<_>>>()
    };
    let paths_a = paths(PATHS[0], PORT_A)?;
    let a = sim
        .node(INITIATOR)
        .connect(
            paths_a,
            target_opts(policy_a(), workload::initiator_regions()),
        )
        .context("connect A")?;
    let ta = wait_established(&mut sim, a, "A")?;

    let paths_b = paths(PATHS[1], PORT_B)?;
    let b = sim
        .node(INITIATOR)
        .connect(paths_b, target_opts(policy_b(give_up), Vec::new()))
        .context("connect B")?;
    let tb = wait_established(&mut sim, b, "B")?;

    let paths_c = paths(PATHS[2], PORT_C)?;
    let c = sim
        .node(INITIATOR)
        .connect(paths_c, target_opts(policy_c(), Vec::new()))
        .context("connect C")?;
    let tc = wait_established(&mut sim, c, "C")?;
    Ok(World {
        sim,
        a: (a, ta),
        b: (b, tb),
        c: (c, tc),
    })
}
