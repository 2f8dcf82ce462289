//! Property tests: the parsers never panic, whatever the bytes, and what the
//! encoder writes parses back to the same value.

use proptest::prelude::*;
use relink_devwatch::netlink::{
    attributes, messages, parse_datagram, parse_monitor_event, MonitorEvent, NotifyEventType,
};
use relink_devwatch::uevent::{classify, parse_rdma_uevent, parse_uevent};

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,15}"
}

fn monitor_event() -> impl Strategy<Value = MonitorEvent> {
    (
        any::<u8>(),
        proptest::option::of(any::<u32>()),
        proptest::option::of(name()),
        proptest::option::of(any::<u32>()),
        proptest::option::of(any::<u32>()),
        proptest::option::of(name()),
    )
        .prop_map(
            |(t, dev_index, dev_name, port, netdev_index, netdev_name)| MonitorEvent {
                event: NotifyEventType::from_u8(t),
                dev_index,
                dev_name,
                port,
                netdev_index,
                netdev_name,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn netlink_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        for m in parse_datagram(&data) {
            let _ = m;
        }
        let _ = parse_monitor_event(&data);
        for m in messages(&data).flatten() {
            for a in attributes(m.1) {
                let _ = a;
            }
        }
    }

    #[test]
    fn monitor_events_round_trip(ev in monitor_event(), seq in any::<u32>()) {
        let bytes = ev.encode(seq);
        prop_assert_eq!(bytes.len() % 4, 0);
        prop_assert_eq!(parse_monitor_event(&bytes), Ok(ev.clone()));
        let mut twice = bytes.clone();
        twice.extend_from_slice(&bytes);
        let all: Vec<_> = parse_datagram(&twice).collect();
        prop_assert_eq!(all.len(), 2);
    }

    /// Valid messages with one byte changed, or cut short: errors, not panics.
    #[test]
    fn mutated_monitor_events_never_panic(
        ev in monitor_event(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = ev.encode(1);
        let i = at.index(bytes.len());
        bytes[i] = byte;
        let _ = parse_monitor_event(&bytes);
        let _ = parse_monitor_event(&bytes[..cut.index(bytes.len())]);
    }

    #[test]
    fn uevent_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_rdma_uevent(&data);
        if let Ok(u) = parse_uevent(&data) {
            let _ = classify(&u);
        }
    }

    /// Uevent-shaped text: `action@path` and variables from a small alphabet.
    #[test]
    fn uevent_shaped_text_never_panics(
        action in "(add|remove|move|change|)",
        path in "/?[a-z_/0-9]{0,30}",
        vars in proptest::collection::vec(
            "(SUBSYSTEM=infiniband(_verbs)?|NAME=[a-z0-9/]{0,6}|DEVPATH_OLD=[a-z/]{0,8}|SEQNUM=[0-9a-z]{0,4}|ACTION=add|[A-Z=]{0,5})",
            0..6,
        ),
    ) {
        let mut s = format!("{action}@{path}\0");
        for v in vars {
            s.push_str(&v);
            s.push('\0');
        }
        let _ = parse_rdma_uevent(s.as_bytes());
    }
}
