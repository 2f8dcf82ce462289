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
//!   (a fast failure's orphan is replayed as a skip of its number).
//! - **WRITEs** copy a patterned block (pattern of seed, block, version)
//!   into the target's data region. At most one operation per block is in
//!   flight, and a source block is never touched while its write is
//!   pending (the library owns it until the completion).
//! - **READs** fetch a block whose last write completed and compare it with
//!   that write's pattern (or zeros for a block never written).
//! - **FETCH_ADDs** add seeded amounts to a counter after the blocks; the
//!   counter must equal the certain adds plus a subset of the unknown
//!   (`Indeterminate`) ones.
//!
//! | file | holds |
//! |---|---|
//! | `layout.rs` | the regions on each side and the session [`options`] |
//! | `payload.rs` | message payloads, block patterns, addends (all from the seed) |
//! | `staging.rs` | the staging space of messages from registered memory, poisoned at their completion |
//! | `tally.rs` | [`Window`] ([`WINDOW_A`], [`WINDOW_B`]), [`Class`], [`Tally`], [`Problem`] |
//! | `books.rs` | [`Workload`]: submission and accounting |
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
mod layout;
mod payload;
mod records;
mod staging;
mod tally;

use std::time::Duration;

use relink::{Policy, State};

pub use books::Workload;
pub use checks::{
    check_atomics, check_completions, check_ended, check_messages, check_reads, check_region, secs,
    Check,
};
pub use layout::{
    initiator_regions, options, target_regions, BLOCK, BLOCKS, COUNTER, MAX_MESSAGE, RESULTS, SINK,
    SOURCE, STAGING, STAGING_LEN, TARGET_DATA,
};
pub use payload::{fnv1a, message, mix, parse_message, pattern};
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
    let mut sim = Sim::new(seed);
    let s = sim
        .open_session(
            port,
            options(INITIATOR, policy.clone()),
            options(TARGET, policy),
        )
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
