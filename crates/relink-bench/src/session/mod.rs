//! Measuring loops over a relink session: the same workloads as
//! [`SendLoop`](crate::SendLoop) and [`WriteLoop`](crate::WriteLoop), through
//! [`Node::send`](relink::Node::send) and [`Node::write`](relink::Node::write)
//! instead of the raw provider, so that a benchmark can put relink next to
//! the provider it runs on.
//!
//! - [`RelinkSendLoop`]: messages of a fixed size, a window of outstanding
//!   operations replenished as they complete. A message completes when the
//!   peer *confirms delivery* (relink's contract, stronger than an RC ack);
//!   the receiver drains [`Node::poll_delivery_into`](relink::Node::poll_delivery_into)
//!   (one buffer, reused) and checks every message. Its messages are
//!   bytes ([`Node::send`](relink::Node::send), which relink copies) or a
//!   ring of slots in registered memory
//!   ([`Node::send_from`](relink::Node::send_from), which it does not).
//!   [`RelinkSendLoop::close_counted`] says how many copies of each
//!   message's payload relink made on either side ([`Copies`]).
//! - [`RelinkWriteLoop`]: RDMA WRITEs from a local region into the target's
//!   advertised region, `window` slots, each slot checked where it landed
//!   once its write completed.
//! - [`RelinkPingPong`]: round trips of one message and the target
//!   application's copy of it, each timed: copied ([`Node::send`](relink::Node::send)
//!   and [`Node::poll_delivery_into`](relink::Node::poll_delivery_into) both
//!   ways, [`Workload::PingPong`]) or zero-copy
//!   ([`Node::send_from`](relink::Node::send_from) of registered slots and
//!   receives into posted buffers, [`Node::post_receive`](relink::Node::post_receive),
//!   both ways, [`Workload::PingPongFrom`]); [`RelinkPingPong::close_counted`]
//!   counts the copies per round trip ([`RoundTripCopies`]).
//!
//! All run on a [`Drive`]: [`SimPair`] (two nodes on the in-process soft
//! fabric, one thread drives both and the simulated world) or
//! [`ThreadPair`] (two nodes on any two providers, the target's node driven
//! by its own thread) — [`TcpPair`] is one on two
//! [`TcpHost`](relink_soft::TcpHost)s over loopback. Payloads carry their
//! sequence number in the first 8 bytes and its complement in the last 8,
//! like [`Verify::Stamp`](crate::Verify).
//!
//! One file per concern:
//!
//! - `options.rs`: [`Workload`], [`session_options`] and the [`PORT`],
//!   [`REMOTE`] and [`LOCAL`] every pair uses.
//! - `receiver.rs`: the payload stamp ([`stamp_bytes`], [`has_stamp`]) and
//!   the check of each delivery ([`Receiver`]), and of each reply's
//!   completion ([`check_echo`]).
//! - `target_app.rs`: the receiving application on the target's node,
//!   which checks each message and for a ping-pong sends it back, copied
//!   or from the posted buffer it landed in ([`ECHO_BUFFERS`]).
//! - `drive.rs`: the [`Drive`] trait the loops run on, both ends'
//!   counters at the close ([`EndCounters`]), and the idle wake-up rule of
//!   the pairs.
//! - `sim_pair.rs`: [`SimPair`], both nodes in one simulated world.
//! - `thread_pair.rs`: [`ThreadPair`], any two providers, the target on its
//!   own thread.
//! - `tcp_pair.rs`: [`TcpPair`], a [`ThreadPair`] on two TCP soft hosts with
//!   throw-away runtime directories.
//! - `stats.rs`: [`LoopStats`] and the completion check both loops share.
//! - `send.rs`: [`RelinkSendLoop`], its messages copied
//!   ([`MessageSource::Bytes`]) or sent from registered memory
//!   ([`MessageSource::Registered`]), and the [`Copies`] relink made of
//!   them.
//! - `pingpong.rs`: [`RelinkPingPong`], round trips of one message and
//!   the target application's copy of it, and the [`RoundTripCopies`].
//! - `write.rs`: [`RelinkWriteLoop`].

mod drive;
mod options;
mod pingpong;
mod receiver;
mod send;
mod sim_pair;
mod stats;
mod target_app;
mod tcp_pair;
mod thread_pair;
mod write;

pub use drive::{Drive, EndCounters};
pub use options::{session_options, Workload, LOCAL, PORT, REMOTE};
pub use pingpong::{RelinkPingPong, RoundTripCopies};
pub use receiver::{check_echo, has_stamp, stamp_bytes, Receiver};
pub use send::{Copies, MessageSource, RelinkSendLoop};
pub use sim_pair::SimPair;
pub use stats::LoopStats;
pub use target_app::ECHO_BUFFERS;
pub use tcp_pair::TcpPair;
pub use thread_pair::ThreadPair;
pub use write::RelinkWriteLoop;
