//! Parser and encoder tests against messages laid out byte by byte as the
//! kernel writes them.

use relink_fabric::Guid;

use super::*;

/// Builds a message byte by byte, the way the kernel lays it out, without
/// going through this module's encoder.
struct Raw(Vec<u8>);

impl Raw {
    fn msg(kind: u16) -> Raw {
        let mut v = vec![0u8; 16];
        v[4..6].copy_from_slice(&kind.to_ne_bytes());
        Raw(v)
    }
    fn attr(mut self, ty: u16, payload: &[u8]) -> Raw {
        let len = (4 + payload.len()) as u16;
        self.0.extend_from_slice(&len.to_ne_bytes());
        self.0.extend_from_slice(&ty.to_ne_bytes());
        self.0.extend_from_slice(payload);
        while self.0.len() % 4 != 0 {
            self.0.push(0);
        }
        self
    }
    fn done(mut self) -> Vec<u8> {
        let len = self.0.len() as u32;
        self.0[0..4].copy_from_slice(&len.to_ne_bytes());
        self.0
    }
}

#[test]
fn constants_match_the_header() {
    // rdma_netlink.h: #define RDMA_NL_GET_TYPE(client, op) ((client << 10) + op)
    assert_eq!(MONITOR_MSG_TYPE, (5 << 10) + 28);
    assert_eq!(MONITOR_MSG_TYPE, 5148);
    assert_eq!(rdma_nl_get_client(MONITOR_MSG_TYPE), RDMA_NL_NLDEV);
    assert_eq!(rdma_nl_get_op(MONITOR_MSG_TYPE), RDMA_NLDEV_CMD_MONITOR);
    for v in 0..=255u8 {
        assert_eq!(NotifyEventType::from_u8(v).to_u8(), v);
    }
}

#[test]
fn register_event_as_the_kernel_sends_it() {
    // nldev.c rdma_nl_notify_event, RDMA_REGISTER_EVENT:
    //   fill_nldev_handle(): nla_put_u32(DEV_INDEX), nla_put_string(DEV_NAME)
    //   nla_put_u8(msg, RDMA_NLDEV_ATTR_EVENT_TYPE, type)
    let msg = Raw::msg(5148)
        .attr(1, &2u32.to_ne_bytes()) // RDMA_NLDEV_ATTR_DEV_INDEX = 1
        .attr(2, b"rxe0\0") // RDMA_NLDEV_ATTR_DEV_NAME = 2
        .attr(102, &[0]) // RDMA_NLDEV_ATTR_EVENT_TYPE = 102, RDMA_REGISTER_EVENT = 0
        .done();
    // 16 header + 8 + 12 (4 + "rxe0\0" padded to 8) + 8 (4 + u8 padded)
    assert_eq!(msg.len(), 44);
    let ev = parse_monitor_event(&msg).unwrap();
    assert_eq!(
        ev,
        MonitorEvent {
            event: NotifyEventType::Register,
            dev_index: Some(2),
            dev_name: Some("rxe0".into()),
            port: None,
            netdev_index: None,
            netdev_name: None,
        }
    );
    assert_eq!(ev.encode(0), msg, "encoder matches the kernel layout");
    assert_eq!(ev.to_string(), "[REGISTER]\tdev 2 rxe0");
}

#[test]
fn netdev_attach_event() {
    // fill_mon_netdev_association(): DEV_INDEX, DEV_NAME, PORT_INDEX (3),
    // then NDEV_INDEX (50) and NDEV_NAME (51) when the port has a netdev.
    let msg = Raw::msg(5148)
        .attr(1, &4u32.to_ne_bytes())
        .attr(2, b"mlx5_0\0")
        .attr(3, &30u32.to_ne_bytes())
        .attr(50, &4u32.to_ne_bytes())
        .attr(51, b"eth2\0")
        .attr(102, &[2]) // RDMA_NETDEV_ATTACH_EVENT = 2
        .done();
    let ev = parse_monitor_event(&msg).unwrap();
    assert_eq!(ev.event, NotifyEventType::NetdevAttach);
    assert_eq!(ev.port, Some(30));
    assert_eq!(ev.netdev_index, Some(4));
    assert_eq!(ev.netdev_name.as_deref(), Some("eth2"));
    // The line from the kernel commit message, in iproute2's current format.
    assert_eq!(
        ev.to_string(),
        "[NETDEV_ATTACH]\tdev 4 mlx5_0 port 30 netdev 4 eth2"
    );
    assert_eq!(ev.encode(0), msg);
}

#[test]
fn event_type_alone_is_valid() {
    // fill_mon_netdev_association() puts nothing when the netdev is in
    // another namespace; fill_mon_netdev_rename() puts only the netdev.
    let msg = Raw::msg(5148).attr(102, &[3]).done();
    let ev = parse_monitor_event(&msg).unwrap();
    assert_eq!(ev, MonitorEvent::new(NotifyEventType::NetdevDetach));
    let msg = Raw::msg(5148)
        .attr(50, &7u32.to_ne_bytes())
        .attr(51, b"eth9\0")
        .attr(102, &[5])
        .done();
    let ev = parse_monitor_event(&msg).unwrap();
    assert_eq!(ev.event, NotifyEventType::NetdevRename);
    assert_eq!(ev.to_string(), "[NETDEV_RENAME]\t netdev 7 eth9");
}

#[test]
fn flags_on_attribute_types_are_masked() {
    let msg = Raw::msg(5148).attr(102 | 0x4000, &[1]).done();
    assert_eq!(
        parse_monitor_event(&msg).unwrap().event,
        NotifyEventType::Unregister
    );
}

#[test]
fn unknown_attributes_and_event_types_pass() {
    let msg = Raw::msg(5148)
        .attr(0, &[]) // RDMA_NLDEV_ATTR_PAD
        .attr(999, b"whatever")
        .attr(102, &[0x42])
        .done();
    let ev = parse_monitor_event(&msg).unwrap();
    assert_eq!(ev.event, NotifyEventType::Unknown(0x42));
    assert_eq!(ev.to_string(), "[UNKNOWN 0x42]\t");
}

#[test]
fn typed_errors() {
    assert_eq!(
        parse_monitor_event(&[0; 10]),
        Err(ParseError::TruncatedHeader { have: 10 })
    );
    let mut m = Raw::msg(5148).attr(102, &[0]).done();
    m[0..4].copy_from_slice(&100u32.to_ne_bytes());
    assert_eq!(
        parse_monitor_event(&m),
        Err(ParseError::BadMessageLength {
            len: 100,
            available: 24
        })
    );
    m[0..4].copy_from_slice(&8u32.to_ne_bytes());
    assert!(matches!(
        parse_monitor_event(&m),
        Err(ParseError::BadMessageLength { len: 8, .. })
    ));
    let m = Raw::msg(5148).attr(2, b"rxe0\0").done();
    assert_eq!(
        parse_monitor_event(&m),
        Err(ParseError::MissingAttr {
            attr: 102,
            name: "RDMA_NLDEV_ATTR_EVENT_TYPE"
        })
    );
    let m = Raw::msg(5148).attr(1, &[1, 2]).attr(102, &[0]).done();
    assert!(matches!(
        parse_monitor_event(&m),
        Err(ParseError::BadAttrSize {
            attr: 1,
            len: 2,
            ..
        })
    ));
    let m = Raw::msg(5148).attr(2, b"rxe0").attr(102, &[0]).done();
    assert_eq!(
        parse_monitor_event(&m),
        Err(ParseError::BadString { attr: 2 })
    );
    let m = Raw::msg(5148).attr(2, b"\xff\0").attr(102, &[0]).done();
    assert_eq!(
        parse_monitor_event(&m),
        Err(ParseError::BadString { attr: 2 })
    );
    let mut m = Raw::msg(5148).attr(102, &[0]).done();
    m[16..18].copy_from_slice(&40u16.to_ne_bytes());
    assert!(matches!(
        parse_monitor_event(&m),
        Err(ParseError::BadAttrLength {
            attr: 102,
            len: 40,
            ..
        })
    ));
    let m = Raw::msg(5121).attr(102, &[0]).done();
    assert_eq!(
        parse_monitor_event(&m),
        Err(ParseError::WrongType {
            kind: 5121,
            expected: 5148
        })
    );
}

#[test]
fn datagram_with_several_messages() {
    // A dump reply: two RDMA_NLDEV_CMD_GET messages and NLMSG_DONE.
    let get = rdma_nl_get_type(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET);
    let mut buf = Raw::msg(get)
        .attr(1, &0u32.to_ne_bytes())
        .attr(2, b"rxe0\0")
        .attr(0, &[]) // the pad nla_put_u64_64bit adds
        .attr(6, &0x0011_2233_4455_6677u64.to_ne_bytes())
        .done();
    buf.extend(
        Raw::msg(get)
            .attr(1, &3u32.to_ne_bytes())
            .attr(2, b"rxe1\0")
            .done(),
    );
    buf.extend(Raw::msg(NLMSG_DONE).attr(0, &[0, 0, 0, 0]).done());
    let msgs: Vec<_> = parse_datagram(&buf).map(|m| m.unwrap().1).collect();
    assert_eq!(
        msgs,
        vec![
            RdmaMessage::Device(NldevDevice {
                index: 0,
                name: "rxe0".into(),
                node_guid: Some(Guid(0x0011_2233_4455_6677)),
            }),
            RdmaMessage::Device(NldevDevice {
                index: 3,
                name: "rxe1".into(),
                node_guid: None,
            }),
            RdmaMessage::Done,
        ]
    );
}

#[test]
fn sys_get_reply_and_ack() {
    let sys = rdma_nl_get_type(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_SYS_GET);
    let mut buf = Raw::msg(sys)
        .attr(66, &[1]) // RDMA_NLDEV_SYS_ATTR_NETNS_MODE
        .attr(103, &[1]) // RDMA_NLDEV_SYS_ATTR_MONITOR_MODE
        .done();
    // NLMSG_ERROR with error 0 and the request's header: the ack.
    let mut ack = Raw::msg(NLMSG_ERROR);
    ack.0.extend_from_slice(&0i32.to_ne_bytes());
    ack.0.extend_from_slice(&sys_get_request(1));
    buf.extend(ack.done());
    let msgs: Vec<_> = parse_datagram(&buf).map(|m| m.unwrap().1).collect();
    assert_eq!(
        msgs,
        vec![
            RdmaMessage::Sys {
                monitor_mode: Some(1)
            },
            RdmaMessage::Error { errno: 0 }
        ]
    );
    let mut err = Raw::msg(NLMSG_ERROR);
    err.0.extend_from_slice(&(-95i32).to_ne_bytes());
    let m: Vec<_> = parse_datagram(&err.done()).collect();
    assert_eq!(m[0].as_ref().unwrap().1, RdmaMessage::Error { errno: 95 });
}

#[test]
fn requests_have_the_expected_header() {
    let r = sys_get_request(7);
    let h = NlMsgHeader::parse(&r).unwrap();
    assert_eq!(
        h,
        NlMsgHeader {
            len: 16,
            kind: 5126,
            flags: 0x5,
            seq: 7,
            pid: 0
        }
    );
    let h = NlMsgHeader::parse(&device_dump_request(9)).unwrap();
    assert_eq!((h.kind, h.flags), (5121, 0x301));
}
