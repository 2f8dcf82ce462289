//! Tests of the outputs as C sees them: events, their texts and kinds.

use relink_rs::{DeviceId, DownCause, Path, SessionEvent, StandbyLoss};

use super::event::{event, relink_event, relink_event_kind::*, relink_standby_loss::*};

fn text(e: &relink_event) -> String {
    let bytes: Vec<u8> = e
        .text
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8(bytes).expect("UTF-8")
}

fn soft1() -> DeviceId {
    DeviceId {
        name: "soft1".into(),
        index: 3,
        generation: 7,
    }
}

#[test]
fn a_standby_up_names_its_device() {
    let e = event(&SessionEvent::StandbyUp { device: soft1() });
    assert_eq!(e.kind, RELINK_EVENT_STANDBY_UP);
    assert_eq!(e.standby_loss, RELINK_STANDBY_NONE);
    assert_eq!(text(&e), "standby up on soft1#3@7");
}

#[test]
fn a_standby_lost_has_its_cause_device_and_path() {
    let path = Path {
        local: Some("10.0.1.1".parse().expect("an address")),
        peer: "10.0.1.2:7471".parse().expect("an address"),
    };
    for (cause, want, said) in [
        (
            StandbyLoss::Silent,
            RELINK_STANDBY_SILENT,
            "silent for two keepalive periods",
        ),
        (
            StandbyLoss::Down(DownCause::CmDeviceRemoval),
            RELINK_STANDBY_DOWN,
            "lost: CM device removal",
        ),
        (
            StandbyLoss::Released,
            RELINK_STANDBY_RELEASED,
            "released by the session",
        ),
    ] {
        let e = event(&SessionEvent::StandbyLost {
            device: soft1(),
            path: Some(path),
            cause,
        });
        assert_eq!((e.kind, e.standby_loss), (RELINK_EVENT_STANDBY_LOST, want));
        assert_eq!(
            text(&e),
            format!("standby on soft1#3@7 (path 10.0.1.1 -> 10.0.1.2:7471) went: {said}")
        );
    }
    // At a target, which names no path.
    let e = event(&SessionEvent::StandbyLost {
        device: soft1(),
        path: None,
        cause: StandbyLoss::Down(DownCause::DeviceRemoved),
    });
    assert_eq!(e.standby_loss, RELINK_STANDBY_DOWN);
    assert_eq!(
        text(&e),
        "standby on soft1#3@7 (accepted) went: lost: device removed"
    );
}

#[test]
fn writable_is_its_own_event() {
    let e = event(&SessionEvent::Writable);
    assert_eq!(e.kind, RELINK_EVENT_WRITABLE);
    assert_eq!(e.standby_loss, RELINK_STANDBY_NONE);
    assert_eq!(text(&e), "writable: room for operations again");
}

#[test]
fn every_class_has_its_kind() {
    use super::completion::op_kind;
    use crate::ops::relink_op_kind::*;
    use relink_rs::OpClass;
    for (class, kind) in [
        (OpClass::Message, RELINK_OP_KIND_MESSAGE),
        (OpClass::Write, RELINK_OP_KIND_WRITE),
        (OpClass::Read, RELINK_OP_KIND_READ),
        (OpClass::FetchAdd, RELINK_OP_KIND_FETCH_ADD),
        (OpClass::CmpSwap, RELINK_OP_KIND_CMP_SWAP),
        (OpClass::Flush, RELINK_OP_KIND_FLUSH),
        (OpClass::WriteImm, RELINK_OP_KIND_WRITE_IMM),
    ] {
        assert_eq!(op_kind(class), kind, "{class:?}");
    }
}

#[test]
fn other_events_have_no_standby_loss() {
    let e = event(&SessionEvent::Disconnected);
    assert_eq!(e.kind, RELINK_EVENT_DISCONNECTED);
    assert_eq!(e.standby_loss, RELINK_STANDBY_NONE);
}
