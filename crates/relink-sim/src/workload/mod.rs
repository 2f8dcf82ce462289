//! The checked workload: what a session submits, and the books that prove
//! afterwards that every message arrived exactly once and in order, every
//! written byte is right, every atomic is accounted for and every
//! operation completed exactly once — the replay contract of
//! docs/DESIGN.md, checked end to end.
//!
//! - **Messages** carry `index u64 | len u16 | body | FNV-1a 64` (big
//!   endian); the body is derived from the seed, the workload's name and
//!   the index, so the receiver regenerates the whole payload and compares
//!   it. Half of them go from registered memory (`OpKind::MessageFrom`,
//!   when the session has the staging regions of [`initiator_regions`]):
//!   the payload cut into 1 to 4 ranges of staging space of the message's
//!   own, possibly in both staging regions, unchanged until its
//!   completion and overwritten with poison right after it, so that a
//!   replay reading the memory after the completion delivers wrong bytes.
//!   Delivered at most once, in order, with the bytes of the submission;
//!   a `Success` delivered, a `Failed` never, an `Indeterminate` maybe
//!   (a fast failure's orphan from registered memory is replayed as a skip
//!   of its number, one of bytes whole, maybe after its completion).
//! - **WRITEs** copy a patterned block (pattern of seed, block, version)
//!   into the target's data region. At most one operation per block is in
//!   flight, and a source block is never touched while its write is
//!   pending (the library owns it until the completion). With
//!   [`Workload::scatter_gather`], about half gather the block from 2 to 4
//!   ranges of its source space laid out in an order of their own.
//! - **READs** fetch a block whose last write completed and compare it with
//!   that write's pattern (or zeros for a block never written); with
//!   [`Workload::scatter_gather`], about half scatter it over 2 to 4
//!   ranges of their landing slot, reassembled in order for the check.
//! - **WRITEs with immediate data** ([`Workload::write_imm`]) take the
//!   next place of the messages' sequence (the sequence numbers are
//!   shared): seeded bytes from staging space of their own (as a message
//!   from registered memory, poisoned at the completion) to a landing slot
//!   of their own in the target's data region ([`IMM_AREA`]), held until
//!   the notice was taken and the operation completed; `imm` names the
//!   place. When the target takes the notice (polled, or in a posted
//!   receive) its imm, region, offset and length must be the WRITE's and
//!   the slot must hold exactly its bytes. One in 16 goes to a token the
//!   target never advertised: it must fail `Remote(REM_ACCESS_ERR)` alone,
//!   never noticed, its number skipped. They complete as messages do, in
//!   order with them, and are delivered as messages are (at most once, in
//!   order, every `Success` noticed, no `Failed`).
//! - **Flushes** ([`Workload::flush`]) must complete after every
//!   operation submitted before them and before every one submitted
//!   after, in the order the completions are taken.
//! - **Posted receives** ([`Workload::post_receives`]): the target takes
//!   the deliveries through a pool of buffers it posts (in a registration
//!   of its node or in its data region), reposted after each receive, now
//!   and then not for a while (messages wait, polled meanwhile or filling
//!   later buffers), some of them too short (the truncated prefix is
//!   checked). Every receive ends once, in posting order, with its
//!   buffer's context, nothing written past what it holds; at the close
//!   the rest end `Flushed`.
//! - **FETCH_ADDs** add seeded amounts to a counter after the blocks; the
//!   counter must equal the certain adds plus a subset of the unknown
//!   (`Indeterminate`) ones.
//!
//! | file | holds |
//! |---|---|
//! | `layout.rs` | the regions on each side and the session [`options`] |
//! | `payload.rs` | message payloads, block patterns, bytes of WRITEs with immediate data, addends (all from the seed) |
//! | `records.rs` | what the books keep per operation (its detail, a FETCH_ADD's old value, a WRITE with immediate data's fate, a block cut into pieces) |
//! | `staging.rs` | the staging space of messages (and WRITEs with immediate data) from registered memory, poisoned at their completion |
//! | `receives.rs` | the target's posted receives ([`Workload::post_receives`]) |
//! | `tally.rs` | [`Window`] ([`WINDOW_A`], [`WINDOW_B`]), [`Class`], [`Tally`], [`Problem`] |
//! | `books.rs` | [`Workload`]'s state, constructor, figures and accessors; [`Coverage`], [`Fate`] |
//! | `submit.rs` | submitting each kind of operation ([`Workload::top_up`], [`Workload::send`], ...) |
//! | `completions.rs` | taking what the nodes report ([`Workload::collect_from`]) and accounting for every completion |
//! | `deliveries.rs` | accounting for every delivery and notice at the target, and the landing slots of WRITEs with immediate data |
//! | `checks.rs` | the end-to-end checks ([`Check`], `check_*`) and the [`Workload`] methods that gather them |
//!
//! ```
//! use std::time::Duration;
//! use relink::Policy;
//! use relink_sim::workload;
//!
//! let (mut sim, mut w) = workload::start(3, Policy::default(), 7471).unwrap();
//! for _ in 0..10 {
//!     w.top_up(sim.node(relink_sim::INITIATOR));
//!     sim.run_for(Duration::from_micros(200));
//!     w.collect(&mut sim);
//! }
//! sim.run_for(Duration::from_millis(5));
//! w.collect(&mut sim);
//! assert!(w.check_survived(&mut sim).is_empty());
//! assert!(w.succeeded() > 0);
//! ```

mod books;
mod checks;
mod completions;
mod deliveries;
mod layout;
mod payload;
mod receives;
mod records;
mod staging;
mod submit;
mod tally;

use std::time::Duration;

use relink::{Policy, State};

pub use books::{Coverage, Fate, Workload};
pub use checks::{
    check_atomics, check_completions, check_ended, check_messages, check_reads, check_region, secs,
    Check,
};
pub use layout::{
    initiator_regions, options, target_regions, BLOCK, BLOCKS, COUNTER, IMM_AREA, IMM_SLOT,
    MAX_MESSAGE, RECV_AREA, RECV_SLOT, RESULTS, SINK, SOURCE, STAGING, STAGING_LEN, TARGET_DATA,
    TARGET_LEN,
};
pub use payload::{fnv1a, imm_bytes, message, mix, parse_message, pattern};
pub use receives::{receive_plan, ReceiveFigures};
pub use staging::POISON;
pub use tally::{Class, Problem, Tally, Window, WINDOW_A, WINDOW_B};

use crate::sim::{Sim, INITIATOR, TARGET};

/// A fresh [`Sim`] of `seed` with the target listening on `port`, one
/// session connected with the workload's [`options`] and `policy`, and
/// its [`Workload`] (named "A", window [`WINDOW_A`]); the target's session
/// is already accepted.
///
/// # Errors
/// If listening or connecting is refused, or the session is not
/// established after 2 ms of virtual time.
pub fn start(seed: u64, policy: Policy, port: u16) -> Result<(Sim, Workload), String> {
    start_with_rendezvous(seed, policy, port, None)
}

/// [`start`], the target reading the initiator's messages of at least
/// `rendezvous` bytes from its registered memory into its posted receives
/// ([`SessionOptions::rendezvous`](relink::SessionOptions::rendezvous); it
/// must then take its deliveries through [`Workload::post_receives`]).
///
/// # Errors
/// As [`start`].
pub fn start_with_rendezvous(
    seed: u64,
    policy: Policy,
    port: u16,
    rendezvous: Option<u32>,
) -> Result<(Sim, Workload), String> {
    let mut sim = Sim::new(seed);
    let target = options(TARGET, policy.clone())
        .to_builder()
        .rendezvous(rendezvous)
        .build()
        .map_err(|e| e.to_string())?;
    let s = sim
        .open_session(port, options(INITIATOR, policy), target)
        .map_err(|e| e.to_string())?;
    sim.run_for(Duration::from_millis(2));
    let state = sim.node(INITIATOR).state(s);
    if state != Some(State::Established) {
        return Err(format!("session not established after 2 ms: {state:?}"));
    }
    let mut w = Workload::new("A", seed, WINDOW_A, sim.node(INITIATOR), s, None);
    w.collect(&mut sim);
    Ok((sim, w))
}
