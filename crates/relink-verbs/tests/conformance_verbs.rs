//! The conformance suite on real verbs (rdma-core), with real device
//! faults: `rdma link delete` / `rdma link add` (Soft-RoCE).
//!
//! Needs the `rdma` feature, RDMA devices and two environment variables
//! naming the device and address of each side:
//!
//! ```text
//! RELINK_VERBS_INITIATOR=rxe0@10.10.0.1 RELINK_VERBS_TARGET=rxe1@10.10.0.2 \
//!     cargo test -p relink-verbs --features rdma --test conformance_verbs -- --test-threads=1
//! ```
//!
//! (`DEV@ADDR[@NETDEV]`; the netdev, needed to add a deleted rxe device
//! back, defaults to the one the device is attached to.) The rig is
//! [`VerbsRig`] (`relink_testkit::verbs_rig`, relink-testkit's feature `verbs`,
//! which this crate's tests always have): both hosts are `VerbsProvider`s in this process;
//! cases run one at a time (a process lock) because faults act on the
//! host's real devices. A removed device is added back when the case's rig
//! drops, so the next case finds it.
//!
//! On a machine without RDMA, the project's VM tier runs it on Soft-RoCE
//! (`tests/vm/run.sh`, docs/VM-TIER.md): it builds this test with
//! `--features rdma` on the host and runs it in a qemu guest with the two
//! variables set to `rxe0@10.10.0.1` and `rxe1@10.10.0.2`.
//!
//! The test is built only with the `rdma` feature. Without the variables
//! or the devices, every case reports `SKIPPED: <case> on verbs: <why>`
//! through relink-skip and returns — never a silent pass;
//! `RELINK_FAIL_ON_SKIP=1` turns skips into failures.

use relink_fabric::PortState;
use relink_testkit::verbs_rig::VerbsRig;
use relink_testkit::{Rig, Side};

/// Report the running case as skipped (or fail, if skips must fail).
fn skip_case(why: &str) {
    let case = std::thread::current()
        .name()
        .map(|n| n.rsplit("::").next().unwrap_or(n).to_string())
        .filter(|n| n != "main")
        .unwrap_or_else(|| "a conformance case".to_string());
    relink_skip::skip_test(&format!("{case} on verbs"), &relink_skip::Skip::new(why));
}

/// The rig, or a loud skip of the calling test.
macro_rules! verbs_rig {
    () => {
        match VerbsRig::from_env() {
            Ok(rig) => rig,
            Err(why) => {
                skip_case(&why);
                return;
            }
        }
    };
}

/// The rig the suite below runs on: each side's named device is visible
/// to its provider, owns the side's address and has an active port (or
/// the test says SKIPPED, like every case, where there is no rig).
#[test]
fn verbs_rig_matches_its_environment() {
    let rig = verbs_rig!();
    for side in Side::ALL {
        let name = rig.device_name(side);
        let addr = rig.addr(side);
        let devices = rig.host(side).devices();
        eprintln!(
            "verbs rig: {side}: {name} at {addr} — devices: {:?}",
            devices
                .iter()
                .map(|d| format!("{} guid {} {:?}", d.id, d.node_guid, d.addrs))
                .collect::<Vec<_>>()
        );
        let dev = devices
            .iter()
            .find(|d| d.id.name == name)
            .unwrap_or_else(|| panic!("{side}: device {name} is not among the provider's devices"));
        assert!(
            dev.owns(addr),
            "{side}: {name} does not own {addr}: {:?}",
            dev.addrs
        );
        assert_eq!(dev.port_state, PortState::Active, "{side}: {name}'s port");
    }
}

relink_testkit::conformance_tests!(verbs_rig!());
