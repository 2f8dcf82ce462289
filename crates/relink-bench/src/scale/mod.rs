//! Many sessions between two nodes and one device reset: how long until
//! every session resumed and carried a message again, and how much heap an
//! idle session holds.
//!
//! - [`in_process`]: `n` sessions between the two nodes of a
//!   [`Sim`](relink_sim::Sim) (the in-process soft fabric, one thread, virtual
//!   time), one reset of the initiator's device, timed on the wall clock
//!   (and virtual time) until every session sent `Resumed`, then one
//!   message on each until every one is delivered and confirmed. The heap
//!   the sessions hold while idle is measured with any [`HeapCounter`] (the
//!   bench binary's counting allocator).
//! - [`tcp`]: `n` sessions from this process to a target node in a second
//!   process on the TCP soft fabric, one reset of this side's device (its
//!   runtime directory's registry, as `relink soft-device reset` does), the
//!   same two times. [`tcp::serve`] is the target's side.
//!
//! - [`fabric_heap`]: the heap the in-process fabric itself holds for an
//!   idle connection (raw connections with the same queues), to tell the
//!   fabric's share of [`IdleHeap`] from relink's.
//!
//! Both runs use [`scale_options`]: 16 receive slots of 256 bytes, no region,
//! the default policy.

use std::time::Duration;

use relink::{SessionEvent, SessionOptions};
use serde::Serialize;

use crate::memory::HeapCounter;

mod fabric;
mod inproc;
pub mod tcp;

pub use fabric::fabric_heap;
pub use inproc::in_process;

/// Session options of the scale sessions: 16 receive slots of 256 bytes,
/// at most 8 one-sided operations in flight, no regions, the default
/// policy (so that ten thousand sessions take little memory).
pub fn scale_options() -> SessionOptions {
    SessionOptions::builder()
        .recv_slots(16)
        .max_message(256)
        .max_one_sided(8)
        .build()
        .expect("valid session options")
}

/// Bytes of the message each session carries after the reset.
pub const MESSAGE_LEN: usize = 64;

/// The result of one scale run ([`in_process`] or [`tcp::run`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScaleRun {
    /// `in-process` or `tcp` (two processes).
    pub fabric: String,
    /// Sessions from the initiator's node to the target's.
    pub sessions: usize,
    /// How the world was driven: the [`Stepper`](crate::recovery::Stepper)
    /// quantum in virtual microseconds in-process (0: event by event), or
    /// `Node::wait` on a thread per process over TCP.
    pub driver: String,
    /// Wall-clock seconds to connect them all and see them established.
    pub setup_s: f64,
    /// Wall-clock seconds from the reset until every session sent
    /// `Resumed` (the initiator's side).
    pub resumed_s: f64,
    /// Wall-clock seconds from the reset until half of them had.
    pub half_resumed_s: f64,
    /// Then one message on each session: wall-clock seconds from the reset
    /// until every message was delivered and its delivery confirmed (its
    /// operation completed at the sender).
    pub messages_s: f64,
    /// `sessions / resumed_s`.
    pub sessions_per_s: f64,
    /// CPU seconds of this process (all threads) from the reset until all
    /// resumed; `/proc/self/stat`, 10 ms ticks.
    pub resumed_cpu_s: Option<f64>,
    /// Virtual milliseconds from the reset until all resumed (in-process
    /// only).
    pub resumed_virt_ms: Option<f64>,
    /// Reconnection attempts of all sessions in the recovery (one each if
    /// none failed).
    pub attempts: u64,
    /// Heap of idle sessions ([`in_process`] with a counter).
    pub heap: Option<IdleHeap>,
}

/// Heap of established, idle sessions: the process's live heap after
/// setting them up minus before, both ends of every session in one process
/// (the in-process fabric's own objects of each connection included), and
/// the part of it that is the sessions' registered memory.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct IdleHeap {
    /// Live heap bytes after the setup minus before.
    pub heap_bytes: i64,
    /// Of those, the memory relink allocated for the sessions and
    /// registers ([`Footprint::session_memory_bytes`](relink::Footprint),
    /// both nodes): send and receive slots.
    pub registered_bytes: usize,
    /// `heap_bytes / sessions`: one session, both ends.
    pub per_session: f64,
    /// `registered_bytes / sessions`.
    pub registered_per_session: f64,
    /// `per_session - registered_per_session`: what an idle session costs
    /// besides its registered buffers, both ends, the fabric's objects
    /// included.
    pub per_session_excluding_registered: f64,
    /// The in-process fabric's own heap per idle connection, both ends
    /// ([`fabric_heap`]), if measured ([`IdleHeap::with_fabric`]).
    pub fabric_per_session: Option<f64>,
    /// `per_session_excluding_registered - fabric_per_session`: relink's
    /// own heap per idle session, both ends.
    pub relink_per_session: Option<f64>,
}

impl IdleHeap {
    /// The heap of `sessions` sessions: `heap_bytes` in all, of which
    /// `registered_bytes` registered memory.
    pub fn of(sessions: usize, heap_bytes: i64, registered_bytes: usize) -> IdleHeap {
        let n = sessions.max(1) as f64;
        let per_session = heap_bytes as f64 / n;
        let registered_per_session = registered_bytes as f64 / n;
        IdleHeap {
            heap_bytes,
            registered_bytes,
            per_session,
            registered_per_session,
            per_session_excluding_registered: per_session - registered_per_session,
            fabric_per_session: None,
            relink_per_session: None,
        }
    }

    /// The same with the fabric's share per session, `fabric` bytes
    /// ([`fabric_heap`]), told apart.
    pub fn with_fabric(self, fabric: f64) -> IdleHeap {
        IdleHeap {
            fabric_per_session: Some(fabric),
            relink_per_session: Some(self.per_session_excluding_registered - fabric),
            ..self
        }
    }
}

/// What the initiator's outputs said about one session after the reset.
#[derive(Debug, Default)]
struct Tally {
    resumed: usize,
    completed: usize,
}

impl Tally {
    /// Count one event of the initiator; panics on an event that ends a
    /// session.
    fn event(&mut self, e: &SessionEvent) {
        match e {
            SessionEvent::Resumed { .. } => self.resumed += 1,
            SessionEvent::GaveUp | SessionEvent::PeerLost { .. } => {
                panic!("a session ended during the scale run: {e:?}")
            }
            _ => {}
        }
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The live heap, if counted.
fn live(heap: Option<&dyn HeapCounter>) -> i64 {
    heap.map_or(0, HeapCounter::live_bytes)
}
