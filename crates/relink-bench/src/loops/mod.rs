//! The measuring loops: a window of outstanding requests on one connected
//! pair, replenished as completions arrive, timed with the wall clock.
//!
//! Both loops count only what they have seen complete and check all of it:
//! every completion must be a success of the right opcode on the right QP,
//! signaled completions must arrive in posting order, every SEND must
//! consume exactly one receive of the right length in order, and every
//! payload carries its sequence number ([`Verify::Stamp`]) or a full pattern
//! ([`Verify::Full`]) that is compared where it lands. A loop that stalls
//! (no progress for [`STALL_LIMIT`] of wall-clock time) or sees an
//! unexpected event panics rather than report a number.
//!
//! Sequence numbers (and so `wr_id`s) keep counting across runs on the same
//! pair, so a payload left over from an earlier run never passes a check.
//!
//! One file per concern:
//!
//! - `spec.rs`: [`LoopSpec`] and [`Verify`], the shape of a loop, and
//!   [`human_size`].
//! - `measurement.rs`: [`Measurement`], the result of one timed run, the
//!   clock that takes it, and the process counters
//!   ([`process_cpu_time`], [`process_minor_faults`]).
//! - `check.rs`: stamping payloads and checking them where they land, and
//!   the check of each work completion.
//! - `stall.rs`: the stall watchdog and [`STALL_LIMIT`].
//! - `conn.rs`: the connected pair a loop runs on (setup, polling, waiting
//!   a tick, teardown) and its queue sizes.
//! - `send.rs`: [`SendLoop`] and [`send_rate`].
//! - `write.rs`: [`WriteLoop`] and [`write_rate`].
//! - `pingpong.rs`: [`PingPongLoop`], round trips of one SEND and its
//!   reply, each timed.

mod check;
mod conn;
mod measurement;
mod pingpong;
mod send;
mod spec;
mod stall;
mod write;

pub use measurement::{
    process_cpu_time, process_minor_faults, thread_cpu_times, Measurement, ThreadCpu,
};
pub use pingpong::PingPongLoop;
pub use send::{send_rate, SendLoop};
pub use spec::{human_size, LoopSpec, Verify};
pub use stall::STALL_LIMIT;
pub use write::{write_rate, WriteLoop};

pub(crate) use check::{check_stamp, stamp};
pub(crate) use conn::TICK;
pub(crate) use measurement::Clock;
pub(crate) use stall::Stall;
