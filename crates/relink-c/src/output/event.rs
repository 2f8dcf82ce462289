//! Events: what happened to a session (`relink_event_kind`,
//! `relink_event`) and why a standby went (`relink_standby_loss`), made
//! from relink's.

use std::ffi::c_char;

use relink_rs::{SessionEvent, StandbyLoss};

use crate::session::{c_text, relink_state};

/// What happened to a session.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_event_kind {
    /// It moved from `from` to `to`.
    RELINK_EVENT_TRANSITION = 1,
    /// Its transport was lost (a device reset or removed, a port down, a
    /// completion error, the peer silent); recovery starts.
    RELINK_EVENT_DEVICE_LOST = 2,
    /// Reconnection attempt number `attempt` started.
    RELINK_EVENT_RECOVERING = 3,
    /// Traffic flows again after `downtime_ns`; `replayed` operations were
    /// posted again.
    RELINK_EVENT_RESUMED = 4,
    /// The give-up deadline passed; its operations failed.
    RELINK_EVENT_GAVE_UP = 5,
    /// The peer refused an attempt; `retrying` says whether it tries again.
    RELINK_EVENT_REFUSED = 6,
    /// The peer lost its state or refused for good; the session failed.
    RELINK_EVENT_PEER_LOST = 7,
    /// The session was closed (by this side, or the peer said goodbye).
    RELINK_EVENT_DISCONNECTED = 8,
    /// Connection attempt number `attempt` failed (`text` says why); the
    /// policy retries until its deadline.
    RELINK_EVENT_ATTEMPT_FAILED = 9,
    /// Manual recovery: the transport was lost and the session waits for
    /// the application (`relink_resume`, `relink_close`); `attempt` is the
    /// number of paths a present device can carry now, `text` names them.
    RELINK_EVENT_AWAITING_DECISION = 10,
    /// A planned outage begins (`relink_suspend`, `relink_drain`, or the
    /// peer's): nothing new is posted until the session is suspended or
    /// moved; `text` says which.
    RELINK_EVENT_QUIESCING = 11,
    /// The session is suspended (`RELINK_STATE_SUSPENDED`) until the
    /// initiator resumes it (`relink_resume`).
    RELINK_EVENT_SUSPENDED = 12,
    /// A drain found no other present path: the session stays on the
    /// drained device.
    RELINK_EVENT_DRAIN_BLOCKED = 13,
    /// A hot standby connection is up (`relink_options_set_standby`) on
    /// the device `text` names (`name#index@generation`): a loss of the
    /// current one switches to it. Reported at each end that has it: at
    /// a target, for the standby its initiator built (whatever the
    /// target's options), and at an initiator with a path through a
    /// second device (not one of `relink_connect`, which gives one path).
    RELINK_EVENT_STANDBY_UP = 14,
    /// The standby connection that was up (`RELINK_EVENT_STANDBY_UP`) is
    /// gone; the current one is unaffected. `standby_loss` says why (a
    /// `relink_standby_loss`); `text` names its device, the initiator's
    /// path it took, and for `RELINK_STANDBY_DOWN` how it was lost.
    /// Reported once per standby; until a new one is up (the initiator
    /// builds one when a device allows), a loss reconnects.
    RELINK_EVENT_STANDBY_LOST = 15,
    /// The session takes operations again: a submit was refused with
    /// `RELINK_ERR_AGAIN` (`max_outstanding` operations outstanding), and
    /// since then the application took a completion that made room
    /// (`relink_room`). Once per refusal.
    RELINK_EVENT_WRITABLE = 16,
    /// An event this header does not name; `text` describes it.
    RELINK_EVENT_OTHER = 99,
}

/// An event of a session. Fields that do not apply to its kind are zero.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct relink_event {
    /// What happened.
    pub kind: relink_event_kind,
    /// TRANSITION: the state left.
    pub from: relink_state,
    /// TRANSITION: the state entered.
    pub to: relink_state,
    /// RECOVERING, ATTEMPT_FAILED: the attempt's number (from 1).
    pub attempt: u32,
    /// RESUMED: the time without a transport, in nanoseconds.
    pub downtime_ns: u64,
    /// RESUMED: operations posted again.
    pub replayed: u64,
    /// REFUSED: whether the session tries again.
    pub retrying: i32,
    /// The event in words, NUL-terminated (cut to fit).
    pub text: [c_char; 128],
    /// STANDBY_LOST: why the standby went (a `relink_standby_loss`). Added
    /// last, in what was the struct's tail padding: on 64-bit targets
    /// `sizeof(relink_event)` and every other member's offset are as
    /// before it.
    pub standby_loss: relink_standby_loss,
}

// The member added last took the tail padding: the struct's size is the
// one programs built before it allocate (x86-64, AArch64: 168 bytes).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(
    std::mem::size_of::<relink_event>() == 168
        && std::mem::offset_of!(relink_event, standby_loss) == 164
);

/// Why a standby connection went (`RELINK_EVENT_STANDBY_LOST`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_standby_loss {
    /// Not a STANDBY_LOST event.
    RELINK_STANDBY_NONE = 0,
    /// Silent: no keepalive heard on it for two keepalive periods
    /// (`relink_options_set_keepalive_ms`) — its peer's half or its path
    /// died without telling this end, or the peer could not send in time;
    /// counted in `RELINK_COUNTER_STANDBYS_SILENT`.
    RELINK_STANDBY_SILENT = 1,
    /// Down: its device or connection was lost (a device removed or
    /// reset, a port down, a disconnect, a failed keepalive); `text` says
    /// how, as `RELINK_EVENT_DEVICE_LOST`'s does.
    RELINK_STANDBY_DOWN = 2,
    /// Released: the session let it go — a drain or a suspend, the knob
    /// turned off, the session's end (closed or failed), a loss the
    /// standby could not take over, or, at a target, the initiator asked
    /// for a new standby or reconnected without it.
    RELINK_STANDBY_RELEASED = 3,
    /// A cause this header does not know (a newer librelink); `text`
    /// describes it.
    RELINK_STANDBY_OTHER = 99,
}

pub(super) fn event(e: &SessionEvent) -> relink_event {
    use relink_event_kind::*;
    let mut out = relink_event {
        kind: RELINK_EVENT_OTHER,
        from: relink_state::RELINK_STATE_IDLE,
        to: relink_state::RELINK_STATE_IDLE,
        attempt: 0,
        downtime_ns: 0,
        replayed: 0,
        retrying: 0,
        text: [0; 128],
        standby_loss: relink_standby_loss::RELINK_STANDBY_NONE,
    };
    let text = match e {
        SessionEvent::Transition(t) => {
            out.kind = RELINK_EVENT_TRANSITION;
            out.from = t.from.into();
            out.to = t.to.into();
            format!("{} -> {} ({})", t.from.name(), t.to.name(), t.cause)
        }
        SessionEvent::DeviceLost { cause } => {
            out.kind = RELINK_EVENT_DEVICE_LOST;
            format!("device lost: {cause}")
        }
        SessionEvent::Recovering { attempt } => {
            out.kind = RELINK_EVENT_RECOVERING;
            out.attempt = *attempt;
            format!("recovering: attempt {attempt}")
        }
        SessionEvent::Resumed {
            downtime, replayed, ..
        } => {
            out.kind = RELINK_EVENT_RESUMED;
            out.downtime_ns = u64::try_from(downtime.as_nanos()).unwrap_or(u64::MAX);
            out.replayed = *replayed;
            format!("resumed after {downtime:?}, {replayed} replayed")
        }
        SessionEvent::GaveUp => {
            out.kind = RELINK_EVENT_GAVE_UP;
            "gave up".to_string()
        }
        SessionEvent::Refused { reason, retrying } => {
            out.kind = RELINK_EVENT_REFUSED;
            out.retrying = i32::from(*retrying);
            format!("refused by the peer: {reason}")
        }
        SessionEvent::PeerLost { reason } => {
            out.kind = RELINK_EVENT_PEER_LOST;
            format!("peer lost: {reason}")
        }
        SessionEvent::Disconnected => {
            out.kind = RELINK_EVENT_DISCONNECTED;
            "disconnected".to_string()
        }
        SessionEvent::AwaitingDecision { cause, candidates } => {
            out.kind = RELINK_EVENT_AWAITING_DECISION;
            out.attempt = u32::try_from(candidates.len()).unwrap_or(u32::MAX);
            let names: Vec<String> = candidates
                .iter()
                .map(|c| format!("path {} on {}", c.path_index, c.device.name))
                .collect();
            format!("awaiting decision after {cause}: {}", names.join(", "))
        }
        SessionEvent::AttemptFailed { attempt, reason } => {
            out.kind = RELINK_EVENT_ATTEMPT_FAILED;
            out.attempt = *attempt;
            format!("attempt {attempt} failed: {reason}")
        }
        SessionEvent::Quiescing { plan } => {
            out.kind = RELINK_EVENT_QUIESCING;
            match plan {
                relink_rs::Plan::Drain => "quiescing for a drain".to_string(),
                relink_rs::Plan::Suspend => "quiescing for a suspend".to_string(),
            }
        }
        SessionEvent::Suspended => {
            out.kind = RELINK_EVENT_SUSPENDED;
            "suspended".to_string()
        }
        SessionEvent::DrainBlocked => {
            out.kind = RELINK_EVENT_DRAIN_BLOCKED;
            "drain blocked: no other present path".to_string()
        }
        SessionEvent::StandbyUp { device } => {
            out.kind = RELINK_EVENT_STANDBY_UP;
            format!("standby up on {device}")
        }
        SessionEvent::StandbyLost {
            device,
            path,
            cause,
        } => {
            out.kind = RELINK_EVENT_STANDBY_LOST;
            out.standby_loss = standby_loss(cause);
            let path = match path {
                Some(p) => match p.local {
                    Some(l) => format!("path {l} -> {}", p.peer),
                    None => format!("path -> {}", p.peer),
                },
                None => "accepted".to_string(),
            };
            format!("standby on {device} ({path}) went: {cause}")
        }
        SessionEvent::Writable => {
            out.kind = RELINK_EVENT_WRITABLE;
            "writable: room for operations again".to_string()
        }
        #[allow(unreachable_patterns)]
        other => format!("{other:?}"),
    };
    out.text = c_text(&text);
    out
}

fn standby_loss(cause: &StandbyLoss) -> relink_standby_loss {
    use relink_standby_loss::*;
    #[allow(unreachable_patterns)]
    match cause {
        StandbyLoss::Silent => RELINK_STANDBY_SILENT,
        StandbyLoss::Down(_) => RELINK_STANDBY_DOWN,
        StandbyLoss::Released => RELINK_STANDBY_RELEASED,
        _ => RELINK_STANDBY_OTHER,
    }
}
