//! Tests of the data path: what submit refuses, and what a completion carries.

use relink_fabric::{Access, Timestamp};

use crate::ids::{BufferToken, Incarnation, RegionId, SessionId};
use crate::op::{LocalRange, OpClass, OpKind};
use crate::policy::Policy;
use crate::resources::{RegionSpec, SessionSpec};
use crate::session::{Role, Session, SessionConfig, SessionError, SessionEvent};
use crate::wire::{self, ConnectBytes};

const REGION: RegionId = RegionId(1);

/// An initiator that has not connected yet (submit validates all the
/// same) with one 64-byte region of every right.
fn session() -> Session {
    session_with(1 << 20)
}

/// [`session`] taking at most `max_outstanding` operations.
fn session_with(max_outstanding: u32) -> Session {
    let cfg = SessionConfig {
        role: Role::Initiator,
        id: SessionId(1),
        incarnation: Incarnation(1),
        paths: Vec::new(),
        policy: Policy::default(),
        spec: SessionSpec {
            recv_slots: 16,
            slot_size: 256 + wire::HEADER_LEN as u32,
            send_slots: 32,
            max_one_sided: 8,
            max_outstanding,
            regions: vec![RegionSpec {
                id: REGION,
                len: 64,
                access: Access::LOCAL_WRITE
                    | Access::REMOTE_WRITE
                    | Access::REMOTE_READ
                    | Access::REMOTE_ATOMIC,
                advertise: true,
                window: false,
            }],
            shared_receive: false,
            rendezvous_min: 0,
        },
        seed: 7,
        connect_data: ConnectBytes::EMPTY,
    };
    Session::new(cfg, Timestamp(0)).expect("a valid configuration")
}

fn fetch_add(local: u64, remote: u64) -> OpKind {
    OpKind::FetchAdd {
        local: LocalRange {
            region: REGION,
            offset: local,
            len: 8,
        },
        remote: BufferToken {
            region: REGION,
            offset: remote,
        },
        add: 1,
    }
}

fn cmp_swap(local: u64, remote: u64) -> OpKind {
    OpKind::CmpSwap {
        local: LocalRange {
            region: REGION,
            offset: local,
            len: 8,
        },
        remote: BufferToken {
            region: REGION,
            offset: remote,
        },
        compare: 0,
        swap: 1,
    }
}

fn write(offset: u64, len: u32) -> OpKind {
    OpKind::Write {
        local: LocalRange {
            region: REGION,
            offset,
            len,
        }
        .into(),
        remote: BufferToken {
            region: REGION,
            offset: 0,
        },
    }
}

#[test]
fn a_full_session_refuses_until_a_completion_is_taken_then_says_writable() {
    let mut s = session_with(3);
    let now = Timestamp(0);
    for i in 0..3 {
        s.submit_with(write(0, 8), 100 + i, now).expect("room");
    }
    assert_eq!(s.room(), 0);
    assert_eq!(
        s.submit(write(0, 8), now),
        Err(SessionError::Full {
            outstanding: 3,
            max: 3
        })
    );
    // Completed but not taken still counts.
    s.close(now);
    assert_eq!(s.outstanding(), 3);
    while s.poll_event().is_some() {}
    let c = s
        .poll_completion()
        .expect("closed: every operation completed");
    assert_eq!((c.context, c.class, c.len), (100, OpClass::Write, 8));
    assert_eq!(s.outstanding(), 2);
    let events: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert_eq!(
        events,
        vec![SessionEvent::Writable],
        "once, after the refusal"
    );
    s.poll_completion().expect("the second");
    assert_eq!(s.poll_event(), None, "no refusal since: no event");
}

#[test]
fn completions_carry_context_class_and_length() {
    let mut s = session();
    let now = Timestamp(0);
    let ops = [
        (
            OpKind::Message {
                payload: vec![7; 5],
            },
            OpClass::Message,
            5,
        ),
        (write(8, 16), OpClass::Write, 16),
        (fetch_add(0, 8), OpClass::FetchAdd, 8),
        (cmp_swap(8, 16), OpClass::CmpSwap, 8),
    ];
    let mut want = Vec::new();
    for (i, (kind, class, len)) in ops.into_iter().enumerate() {
        let context = u64::MAX - i as u64;
        let op = s.submit_with(kind, context, now).expect("accepted");
        want.push((op, context, class, len));
    }
    s.close(now);
    let got: Vec<_> = std::iter::from_fn(|| s.poll_completion())
        .map(|c| (c.op, c.context, c.class, c.len))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_misaligned_atomic_is_refused_at_submit() {
    let mut s = session();
    let now = Timestamp(0);
    for make in [fetch_add, cmp_swap] {
        assert_eq!(
            s.submit(make(4, 0), now),
            Err(SessionError::Misaligned {
                what: "local",
                offset: 4
            })
        );
        assert_eq!(
            s.submit(make(0, 12), now),
            Err(SessionError::Misaligned {
                what: "remote",
                offset: 12
            })
        );
        // The local offset is named first when both are off.
        assert_eq!(
            s.submit(make(1, 3), now),
            Err(SessionError::Misaligned {
                what: "local",
                offset: 1
            })
        );
        assert!(s.submit(make(8, 16), now).is_ok(), "aligned: accepted");
    }
    let e = s.submit(fetch_add(0, 0x1c), now).unwrap_err();
    assert_eq!(
        e.to_string(),
        "an atomic needs 8-byte alignment: its remote offset 0x1c is not a multiple of 8"
    );
    // Out of the region is still BadLocal, named plainly.
    let e = s.submit(fetch_add(64, 0), now).unwrap_err();
    assert!(matches!(e, SessionError::BadLocal(_)), "{e:?}");
    assert_eq!(
        e.to_string(),
        "local range 0x40+8 is not inside region 1: no such region, outside it, \
         or (for an atomic) not 8 bytes"
    );
    // Writes and reads need no alignment.
    let write = OpKind::Write {
        local: LocalRange {
            region: REGION,
            offset: 3,
            len: 5,
        }
        .into(),
        remote: BufferToken {
            region: REGION,
            offset: 7,
        },
    };
    assert!(s.submit(write, now).is_ok());
}
