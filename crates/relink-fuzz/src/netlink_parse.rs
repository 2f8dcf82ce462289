//! Feeds arbitrary bytes to the RDMA netlink parser of `relink-devwatch`:
//! a datagram of `nlmsghdr` + `nlattr` messages, as the RDMA monitor
//! (`RDMA_NLDEV_CMD_MONITOR`), `RDMA_NLDEV_CMD_GET` and `SYS_GET` send them.
//!
//! Beyond "never panics", checks that every monitor event that parses
//! re-encodes (in the kernel's layout) to bytes that parse to the same
//! event, and that the framing iterators (`messages`, `attributes`) stop at
//! their first error. (`parse_datagram` goes on past a message whose content
//! is bad, as long as the framing holds.)

use relink_devwatch::netlink::{
    attributes, messages, parse_datagram, parse_monitor_event, MonitorEvent, RdmaMessage,
};

fn check_round_trip(ev: &MonitorEvent, seq: u32) {
    let bytes = ev.encode(seq);
    assert_eq!(bytes.len() % 4, 0, "encoding is not aligned");
    assert_eq!(
        parse_monitor_event(&bytes).as_ref(),
        Ok(ev),
        "monitor event does not round-trip"
    );
    let _ = ev.to_string();
}

/// Runs the target on one input: panics only when the code under test
/// breaks what this module checks (the crate's contract).
pub fn run(data: &[u8]) {
    for m in parse_datagram(data) {
        if let Ok((hdr, RdmaMessage::Monitor(ev))) = m {
            check_round_trip(&ev, hdr.seq);
        }
    }
    if let Ok(ev) = parse_monitor_event(data) {
        check_round_trip(&ev, 0);
    }
    let mut seen_error = false;
    for m in messages(data) {
        assert!(!seen_error, "messages went on after an error");
        let Ok((_, payload)) = m else {
            seen_error = true;
            continue;
        };
        let mut attr_error = false;
        for a in attributes(payload) {
            assert!(!attr_error, "attributes went on after an error");
            if let Ok((_, p)) = a {
                assert!(p.len() <= payload.len());
            } else {
                attr_error = true;
            }
        }
    }
}
