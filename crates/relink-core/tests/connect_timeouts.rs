//! Two behaviours of the core that real RDMA (Soft-RoCE in the VM tier)
//! showed were needed, checked on the sans-IO session alone:
//!
//! - a connection that rdma_cm established but whose in-band handshake
//!   never finishes is abandoned after the connect timeout, not after the
//!   keepalive (`DownCause::ResyncTimeout`);
//! - after `RDMA_CM_EVENT_DEVICE_REMOVAL`, while the device list may still
//!   show the device, the next attempt takes a path the device does not
//!   carry;
//! - attempts that get no answer (the peer's device is gone: its address
//!   answers nothing) time out after `initial_connect_timeout`, doubling up
//!   to `connect_timeout`, so that the initiator tries again soon after the
//!   peer's device is back (on rxe it waited out 3 s) — for a session never
//!   established; one that was established probes instead
//!   (`tests/peer_outage.rs`);
//! - attempts the peer's CM refuses for want of a listener (its device is
//!   back, its application is re-listening) are retried after
//!   `refused_backoff` (1 ms), doubling, not after the backoff (10–20 ms).

use std::time::Duration;

use relink_core::policy::Policy;
use relink_core::resources::SessionSpec;
use relink_core::session::{
    Action, LocalKeys, Path, RequestToken, Role, Session, SessionConfig, SessionEvent,
};
use relink_core::state::{DownCause, State};
use relink_core::wire::{AcceptData, ConnectData};
use relink_core::{Epoch, Incarnation, SessionId};
use relink_fabric::{DeviceId, DeviceInfo, Guid, IpNet, PortState, Timestamp};

fn device(name: &str, index: u32, addr: &str) -> DeviceInfo {
    DeviceInfo {
        id: DeviceId {
            name: name.into(),
            index,
            generation: u64::from(index) + 1,
        },
        node_guid: Guid(0x1000 + u64::from(index)),
        addrs: vec![IpNet {
            addr: addr.parse().expect("address"),
            prefix: 24,
        }],
        netdev: None,
        port_state: PortState::Active,
    }
}

fn spec() -> SessionSpec {
    SessionSpec {
        recv_slots: 16,
        slot_size: 256,
        send_slots: 32,
        max_one_sided: 8,
        max_outstanding: 1 << 20,
        regions: Vec::new(),
        shared_receive: false,
        rendezvous_min: 0,
    }
}

fn path(local: &str, peer: &str) -> Path {
    Path {
        local: Some(local.parse().expect("address")),
        peer: peer.parse().expect("address"),
    }
}

fn config(role: Role, paths: Vec<Path>) -> SessionConfig {
    SessionConfig {
        role,
        id: SessionId(0x5e55),
        incarnation: Incarnation(u64::from(role == Role::Target) + 1),
        paths,
        policy: Policy::default(),
        spec: spec(),
        seed: 7,
        connect_data: Default::default(),
    }
}

fn actions(s: &mut Session) -> Vec<Action> {
    std::iter::from_fn(|| s.poll_action()).collect()
}

fn connects(actions: &[Action]) -> Vec<(Epoch, Path, Vec<u8>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Connect {
                epoch,
                path,
                private_data,
            } => Some((*epoch, *path, private_data.clone())),
            _ => None,
        })
        .collect()
}

/// An initiator with two paths (one device each) whose first connection
/// rdma_cm has established on `rxe0`: the in-band handshake has not run.
fn connected_initiator(t0: Timestamp) -> (Session, Epoch, [Path; 2], [DeviceInfo; 2]) {
    let paths = [
        path("10.0.0.1", "10.0.0.2:7471"),
        path("10.0.1.1", "10.0.1.2:7471"),
    ];
    let devs = [device("rxe0", 0, "10.0.0.1"), device("rxe3", 3, "10.0.1.1")];
    let mut ini = Session::new(config(Role::Initiator, paths.to_vec()), t0).expect("session");
    ini.set_devices(devs.to_vec(), t0);
    ini.connect(t0).expect("connect");
    let first = connects(&actions(&mut ini));
    assert_eq!(first.len(), 1, "one immediate attempt");
    let (epoch, p, hello) = first[0].clone();
    assert_eq!(p, paths[0]);
    let Ok(ConnectData::Hello(h)) = ConnectData::decode(&hello) else {
        panic!("the first attempt carries a Hello");
    };
    let mut tgt = Session::accept_hello(
        config(Role::Target, Vec::new()),
        RequestToken(1),
        &h,
        [9; 32],
        t0,
    )
    .expect("target");
    let welcome = actions(&mut tgt)
        .into_iter()
        .find_map(|a| match a {
            Action::Accept { private_data, .. } => Some(private_data),
            _ => None,
        })
        .expect("the target accepts");
    assert!(matches!(
        AcceptData::decode(&welcome),
        Ok(AcceptData::Welcome(_))
    ));
    ini.handle_connected(
        epoch,
        devs[0].clone(),
        &welcome,
        Vec::<LocalKeys>::new(),
        t0,
    );
    actions(&mut ini);
    (ini, epoch, paths, devs)
}

#[test]
fn a_connection_whose_handshake_never_finishes_is_abandoned_at_the_connect_timeout() {
    let t0 = Timestamp(1_000_000);
    let (mut ini, _, _, _) = connected_initiator(t0);
    // The first connection is attempt 1.
    let timeout = Policy::default().attempt_timeout(1);
    assert!(
        timeout < Policy::default().keepalive.unwrap_or(Duration::MAX),
        "the point: the connect timeout is shorter than the keepalive"
    );
    ini.handle_timeout(t0 + (timeout - Duration::from_millis(1)));
    assert!(
        !std::iter::from_fn(|| ini.poll_event())
            .any(|e| matches!(e, SessionEvent::DeviceLost { .. })),
        "nothing is lost before the connect timeout"
    );
    ini.handle_timeout(t0 + timeout);
    let events: Vec<SessionEvent> = std::iter::from_fn(|| ini.poll_event()).collect();
    assert!(
        events.contains(&SessionEvent::DeviceLost {
            cause: DownCause::ResyncTimeout
        }),
        "the stalled handshake is a transport loss at the connect timeout: {events:?}"
    );
    assert_ne!(ini.state(), State::Connecting);
    assert!(
        actions(&mut ini)
            .iter()
            .any(|a| matches!(a, Action::TearDown { .. })),
        "the dead transport is torn down"
    );
}

#[test]
fn after_a_cm_device_removal_the_next_attempt_takes_the_other_path() {
    let t0 = Timestamp(1_000_000);
    let (mut ini, epoch, paths, _) = connected_initiator(t0);
    // rdma_cm says rxe0 is going away; the device list still shows it.
    ini.handle_transport_down(epoch, DownCause::CmDeviceRemoval, t0);
    let mut next = connects(&actions(&mut ini));
    let mut t = t0;
    while next.is_empty() && t < t0 + Duration::from_secs(1) {
        t += Duration::from_millis(1);
        ini.handle_timeout(t);
        next = connects(&actions(&mut ini));
    }
    assert_eq!(next.len(), 1, "one new attempt within 1 s");
    assert_eq!(
        next[0].1, paths[1],
        "the attempt avoids the path of the device being removed"
    );
    assert!(t - t0 < Duration::from_millis(100), "and it is prompt");
}

#[test]
fn unanswered_attempts_time_out_soon_then_later_and_later() {
    let t0 = Timestamp(1_000_000);
    let (mut ini, epoch, _, devs) = connected_initiator(t0);
    ini.handle_transport_down(epoch, DownCause::CmDisconnected, t0);
    // Both devices stay; nothing ever answers: note when each attempt
    // starts, on a 1 ms clock, for 12 s.
    ini.set_devices(devs.to_vec(), t0);
    let mut starts = Vec::new();
    let mut t = t0;
    while t < t0 + Duration::from_secs(12) {
        if !connects(&actions(&mut ini)).is_empty() {
            starts.push(t - t0);
        }
        t += Duration::from_millis(1);
        ini.handle_timeout(t);
    }
    assert!(starts.len() >= 5, "attempts: {starts:?}");
    let p = Policy::default();
    for (i, w) in starts.windows(2).enumerate() {
        let timeout = p.attempt_timeout(i as u32 + 1);
        let gap = w[1] - w[0];
        // The next attempt: this one's timeout, then a backoff of at most
        // the (doubling) backoff delay.
        let max_backoff = p
            .initial_backoff
            .saturating_mul(1 << (i + 1))
            .min(p.reconnect_delay);
        assert!(
            gap >= timeout && gap <= timeout + max_backoff + Duration::from_millis(2),
            "attempt {} started {gap:?} after the one before, its timeout is {timeout:?}: {starts:?}",
            i + 2
        );
    }
    assert_eq!(p.attempt_timeout(1), p.initial_connect_timeout);
    assert!(
        starts[1] < Duration::from_secs(1),
        "the second attempt comes within 1 s, not after the whole connect timeout: {starts:?}"
    );
    assert_eq!(p.attempt_timeout(30), p.connect_timeout, "capped");
}

#[test]
fn attempts_refused_for_want_of_a_listener_are_retried_soon() {
    let t0 = Timestamp(1_000_000);
    let (mut ini, epoch, _, _) = connected_initiator(t0);
    ini.handle_transport_down(epoch, DownCause::CmDisconnected, t0);
    // Every attempt is refused by the peer's CM (a REJ without relink's
    // reply): note when each starts, on a 10 us clock, for 100 ms.
    let mut starts = Vec::new();
    let mut t = t0;
    while t < t0 + Duration::from_millis(100) {
        for (e, _, _) in connects(&actions(&mut ini)) {
            starts.push(t - t0);
            ini.handle_rejected(e, &[], t);
        }
        t += Duration::from_micros(10);
        ini.handle_timeout(t);
    }
    let p = Policy::default();
    assert!(starts.len() >= 5, "attempts: {starts:?}");
    for (i, w) in starts.windows(2).enumerate() {
        let refusals = i as u32 + 1;
        let quick = p.refused_backoff * (1 << (refusals - 1));
        let gap = w[1] - w[0];
        assert!(
            gap >= quick / 2
                && gap
                    <= quick.min(p.initial_backoff * (1 << refusals)) + Duration::from_micros(20),
            "after {refusals} refusals the next attempt came {gap:?} later: {starts:?}"
        );
    }
    assert!(
        starts[2] < Duration::from_millis(3),
        "the second retry comes within a few ms, not after the backoff: {starts:?}"
    );
}
