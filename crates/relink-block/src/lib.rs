//! # relink-block — a block service on relink sessions
//!
//! NVMe-oF in spirit: an initiator sends block commands as relink
//! messages; the target moves the data itself with RDMA READ and WRITE
//! from and to buffers the initiator advertised, does the I/O on a file,
//! and answers each command with one reply message. relink keeps the
//! session through device resets, replacements and failovers: commands
//! and replies are delivered exactly once, the target's transfers are
//! replayed, and the initiator's buffer advertisements are exchanged
//! again after every recovery, so the engines resend nothing.
//!
//! # Map
//!
//! | concept | where | what to know |
//! |---|---|---|
//! | the wire | [`wire`]: [`Command`], [`Reply`], [`Opcode`], [`Tag`], [`VolumeInfo`], [`Extents`], [`WireError`] | fixed-length, big-endian, versioned; decoding checks lengths and never panics; a BLOCK_STATUS's extents travel as a READ's data |
//! | errors | [`TargetError`] (a reply's status), [`BlockError`] (a command's end), [`SessionEnd`] | each maps to an errno ([`BlockError::errno`]) |
//! | the volume | [`Volume`] | a file: `pread`/`pwrite` (straight into and from registered memory: [`Volume::read_into`], [`Volume::write_from`]), FLUSH and FUA = `fdatasync`, its holes by `SEEK_DATA`/`SEEK_HOLE` ([`Volume::allocation`]); read-only or read-write; a block size |
//! | the target | [`TargetEngine`], [`TargetConfig`], [`TargetEvent`] | serves one volume to every session of its listener; a staging slot per command moving data, up to the queue depth (more wait) |
//! | the initiator | [`InitiatorEngine`], [`InitiatorConfig`], [`BlockOp`], [`BlockReply`], [`InitiatorEvent`] | one session; a data slot per outstanding command, up to the queue depth (more wait) |
//! | events in words | [`InitiatorEvent::name`], [`TargetEvent::name`] and their `Display` (`event_text.rs`) | a stable snake_case name and plain words for logs and event streams |
//!
//! # When to call what
//!
//! Both engines are sans-I/O state machines on the caller's [`Node`]:
//!
//! 1. make the engine: [`TargetEngine::listen`] (makes the listener) or
//!    [`InitiatorEngine::connect`] (makes the session);
//! 2. in the node's loop, after every [`Node::poll`] or [`Node::wait`],
//!    take [`Node::poll_output`] until `None` and hand each item to the
//!    engine's `handle`, which returns what is not its own;
//! 3. at the initiator, [`InitiatorEngine::handle_timeout`] (it acts only
//!    once a `fast_io_fail_tmo` passed in an outage);
//! 4. take the engine's outputs until `None`:
//!    [`InitiatorEngine::poll_completion`] and `poll_event`;
//!    [`TargetEngine::poll_event`];
//! 5. [`InitiatorEngine::submit`] whenever the application has a command
//!    (also while the session recovers: it goes once the session is up);
//! 6. sleep until the earlier of [`Node::next_deadline`] and
//!    [`InitiatorEngine::poll_timeout`].
//!
//! The engines submit through the node as they go (replies, transfers,
//! commands); what they submit goes out at the node's next poll, so
//! [`Node::next_deadline`] must be read after the outputs were handled.
//!
//! ```
//! use std::time::Duration;
//! use relink::Path;
//! use relink_block::{BlockOp, BlockReply, InitiatorConfig, InitiatorEngine, TargetConfig, TargetEngine, Volume};
//! use relink_sim::{Sim, INITIATOR, TARGET};
//!
//! let file = tempfile::tempfile()?;
//! file.set_len(1 << 20)?;
//! let mut sim = Sim::new(7);
//! let addr = sim.target_addr(4420);
//! let volume = Volume::new(file, false)?;
//! let mut target = TargetEngine::listen(sim.node(TARGET), addr, volume, TargetConfig::default())?;
//! let paths = vec![Path { local: None, peer: addr }];
//! let mut init = InitiatorEngine::connect(sim.node(INITIATOR), paths, InitiatorConfig::default())?;
//! let write = init.submit(sim.node(INITIATOR), BlockOp::Write { offset: 4096, data: vec![7; 512], fua: true })?;
//! let read = init.submit(sim.node(INITIATOR), BlockOp::Read { offset: 4096, len: 512 })?;
//! let mut done = Vec::new();
//! while done.len() < 2 {
//!     sim.run_for(Duration::from_micros(50)); // polls both nodes
//!     while let Some(out) = sim.node(TARGET).poll_output() {
//!         let _not_ours = target.handle(sim.node(TARGET), out);
//!     }
//!     while let Some(out) = sim.node(INITIATOR).poll_output() {
//!         let _not_ours = init.handle(sim.node(INITIATOR), out);
//!     }
//!     init.handle_timeout(sim.node(INITIATOR));
//!     done.extend(std::iter::from_fn(|| init.poll_completion()));
//! }
//! // The WRITE was submitted first but the two are not ordered: a caller
//! // that needs the READ to see the WRITE waits for the WRITE first.
//! assert!(done.contains(&(write, Ok(BlockReply::Done))));
//! assert!(done.iter().any(|(tag, r)| *tag == read && r.is_ok()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The contract
//!
//! - **Each command completes exactly once** at the initiator: with its
//!   reply's result, or with [`BlockError::SessionEnded`] when the
//!   session ends first (give-up deadline, the target restarted, closed).
//!   Then connect a new engine and resubmit: what ended that way may or
//!   may not have taken effect. With a `fast_io_fail_tmo` in the policy,
//!   what is outstanding when it passes in an outage completes with
//!   [`BlockError::FastFail`] (may or may not take effect) while the
//!   session keeps recovering.
//! - **Across a recovery nothing is resent by the engines.** relink
//!   delivers every command and reply once, in order, and replays the
//!   target's unacknowledged RDMA READs and WRITEs, which are idempotent
//!   here (the initiator leaves a command's buffer alone until its reply;
//!   the target stages a READ's bytes before its WRITE): no transfer is
//!   ever `Indeterminate` ([`TargetEngine`]'s docs).
//! - **A READ's reply follows its data**: the target sends it once the
//!   RDMA WRITE of the data completed successfully.
//! - **An acknowledged flushed write is never lost**: a WRITE is answered
//!   after its `pwrite` (and `fdatasync` with FUA); a FLUSH is answered
//!   after an `fdatasync` that covers every write answered before it was
//!   sent. Commands outstanding at once are not ordered with each other.
//! - **Bad input gets a typed error**: a range past the end
//!   ([`TargetError::OutOfRange`]), a write to a read-only volume
//!   ([`TargetError::ReadOnly`]), a bad length ([`TargetError::Invalid`]),
//!   a buffer outside the advertised region
//!   ([`TargetError::Transfer`]); a message that is not a command is
//!   answered [`TargetError::BadCommand`] (when its tag can be read) and
//!   reported ([`TargetEvent::BadCommand`]); one that is not a reply is
//!   dropped and reported ([`InitiatorEvent::BadReply`]). The session
//!   goes on.
//!
//! [`Node`]: relink::Node
//! [`Node::poll`]: relink::Node::poll
//! [`Node::wait`]: relink::Node::wait
//! [`Node::poll_output`]: relink::Node::poll_output
//! [`Node::next_deadline`]: relink::Node::next_deadline

mod config;
mod error;
mod event_text;
mod initiator;
mod target;
mod volume;
pub mod wire;

pub use config::{ConfigError, InitiatorConfig, TargetConfig, DATA_REGION, STAGING_REGION};
pub use error::{BlockError, SessionEnd, TargetError};
pub use initiator::{
    BlockCompletion, BlockOp, BlockReply, InitiatorEngine, InitiatorEvent, InitiatorSetupError,
    SubmitError,
};
pub use target::{TargetEngine, TargetEvent, TargetSetupError, TargetStats};
pub use volume::{Volume, DEFAULT_BLOCK_SIZE};
pub use wire::{Command, Extent, Extents, Opcode, Reply, Tag, VolumeInfo, WireError};

/// The relink types the engines' signatures use.
pub use relink::{BufferToken, Node, Output, Path, Policy, RegionId, SessionHandle};
