//! The shape of a pair's session: which workload it is set up for, the
//! session options each side gets for a [`LoopSpec`], and the port and
//! region ids every pair uses.

use relink::{Access, RegionId, RegionOptions, SessionOptions};

use crate::loops::LoopSpec;

/// The CM port the target listens on.
pub const PORT: u16 = 7471;
/// The target's advertised region (destination of writes).
pub const REMOTE: RegionId = RegionId(1);
/// The initiator's local region (source of writes).
pub const LOCAL: RegionId = RegionId(2);

/// Which workload a pair is set up for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Messages ([`RelinkSendLoop`](super::RelinkSendLoop)).
    Send,
    /// RDMA WRITEs into the target's region ([`RelinkWriteLoop`](super::RelinkWriteLoop)).
    Write,
    /// Messages both ways ([`RelinkPingPong`](super::RelinkPingPong)): the
    /// target's application drains each message
    /// ([`Node::poll_delivery_into`](relink::Node::poll_delivery_into)),
    /// checks it and sends it straight back
    /// ([`Node::send`](relink::Node::send)).
    PingPong,
    /// Messages both ways, zero-copy: the target's application keeps
    /// [`ECHO_BUFFERS`](super::ECHO_BUFFERS) buffers of a registration
    /// posted ([`Node::post_receive`](relink::Node::post_receive)), checks
    /// each message where it landed ([`Node::poll_received`](relink::Node::poll_received))
    /// and sends the buffer back as it is
    /// ([`Node::send_from`](relink::Node::send_from)), posting it again
    /// once that reply completed.
    PingPongFrom,
    /// As [`PingPongFrom`](Self::PingPongFrom), each side reading the
    /// other's messages itself into its posted buffers
    /// ([`SessionOptions::rendezvous`] from 1 byte; the slots readable by
    /// the peer): no copy on either side, a READ per message.
    PingPongRead,
}

/// The session options of one side of a pair for `spec` and `workload`.
///
/// Messages (also both ways, [`Workload::PingPong`] and
/// [`Workload::PingPongFrom`]): `max_message` is
/// `spec.max_message` (the message size unless the spec leaves room for
/// frames of several), and the receiver keeps
/// `max(64, 2 × window)` receive slots (the sender's credits, less 8
/// reserved for control messages, so a window of 64 is never throttled by
/// credits; the raw [`SendLoop`](crate::SendLoop) also keeps `2 × window`
/// receives posted). Writes: a region of `window × size` bytes on each
/// side (the target's advertised, remote-writable), `max_one_sided =
/// window`. The recovery policy is the default.
pub fn session_options(spec: &LoopSpec, workload: Workload, target: bool) -> SessionOptions {
    match workload {
        Workload::Send | Workload::PingPong | Workload::PingPongFrom | Workload::PingPongRead => {
            SessionOptions::builder()
                .recv_slots(u32::try_from((2 * spec.window).max(64)).expect("window fits u32"))
                // A rendezvous needs the peer's advertisements (34 bytes)
                // to fit a slot.
                .max_message(u32::try_from(spec.max_message).expect("size fits u32").max(
                    if workload == Workload::PingPongRead {
                        34
                    } else {
                        8
                    },
                ))
                .max_one_sided(8)
                .rendezvous((workload == Workload::PingPongRead).then_some(1))
                .build()
                .expect("valid session options")
        }
        Workload::Write => {
            let len = (spec.window * spec.size) as u64;
            let region = if target {
                RegionOptions::new(REMOTE, len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
                    .advertise(true)
            } else {
                RegionOptions::new(LOCAL, len, Access::LOCAL_WRITE)
            };
            SessionOptions::builder()
                .recv_slots(64)
                .max_message(64)
                .max_one_sided(u32::try_from(spec.window).expect("window fits u32"))
                .regions(vec![region])
                .build()
                .expect("valid session options")
        }
    }
}
