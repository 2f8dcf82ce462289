//! Where the workload's bytes live: the target's data region (write
//! blocks, the atomic counter, the landing slots of WRITEs with immediate
//! data, a pool of receive buffers), the initiator's write sources, read
//! landing slots, atomic result slots and the staging areas of messages
//! (and of WRITEs with immediate data) sent from registered memory, and
//! the session options that carry them.

use relink::{Access, Policy, RegionId, RegionOptions, SessionOptions};

use crate::sim::TARGET;

/// Bytes per written block.
pub const BLOCK: u64 = 1024;
/// Blocks in the target's data region.
pub const BLOCKS: u64 = 128;
/// Offset of the atomic counter in the target's data region.
pub const COUNTER: u64 = BLOCK * BLOCKS;
/// Offset of the target's landing slots of WRITEs with immediate data
/// ([`OpKind::WriteImm`](relink::OpKind::WriteImm)) in its data region,
/// after the counter: each such WRITE lands in a slot of its own, held
/// until its notice was taken, so the bytes there at the notice must be
/// exactly its own.
pub const IMM_AREA: u64 = COUNTER + 64;
/// Bytes per landing slot of a WRITE with immediate data (its largest).
pub const IMM_SLOT: u64 = 1024;
/// Landing slots of WRITEs with immediate data.
pub(crate) const IMM_SLOTS: u64 = 32;
/// Offset of the target's receive buffers in its data region, after the
/// landing slots: one of the two places the workload posts receives in
/// ([`Node::post_receive`](relink::Node::post_receive)), the other a
/// registration of the target's node.
pub const RECV_AREA: u64 = IMM_AREA + IMM_SLOT * IMM_SLOTS;
/// Bytes per receive buffer's space (a buffer may be shorter).
pub const RECV_SLOT: u64 = 1024;
/// Receive buffers at most.
pub(crate) const RECV_SLOTS: u64 = 16;
/// Bytes of the target's data region.
pub const TARGET_LEN: u64 = RECV_AREA + RECV_SLOT * RECV_SLOTS;
/// The target's data region (advertised to the initiator).
pub const TARGET_DATA: RegionId = RegionId(100);
/// The initiator's write sources (one block per target block).
pub const SOURCE: RegionId = RegionId(1);
/// The initiator's read landing slots.
pub const SINK: RegionId = RegionId(2);
/// The initiator's atomic result slots.
pub const RESULTS: RegionId = RegionId(3);
/// Read landing slots of a block each: READs in flight at most.
pub(crate) const READ_SLOTS: u64 = 8;
/// Atomic result slots of 8 bytes each: FETCH_ADDs in flight at most.
pub(crate) const ATOMIC_SLOTS: u64 = 8;
/// The initiator's staging areas of messages sent from registered memory
/// ([`OpKind::MessageFrom`](relink::OpKind::MessageFrom)): two regions, so
/// that one message's ranges may lie in both. Each message in flight holds
/// its own bytes in them until its completion.
pub const STAGING: [RegionId; 2] = [RegionId(4), RegionId(5)];
/// Bytes of each staging region: room for about 100 messages in flight in
/// the two (a message that finds no room is sent as bytes).
pub const STAGING_LEN: u64 = 16 * 1024;

/// The target's regions: one data region of [`BLOCKS`] blocks, the
/// counter, the landing slots of WRITEs with immediate data and room for
/// receive buffers, advertised, open to remote WRITE, READ and atomics.
pub fn target_regions() -> Vec<RegionOptions> {
    vec![RegionOptions::new(
        TARGET_DATA,
        TARGET_LEN,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
    )
    .advertise(true)]
}

/// The initiator's regions: write sources, read landing slots and atomic
/// result slots, local only; the two message staging areas advertised to
/// the target for reading (a target with
/// [`SessionOptions::rendezvous`](relink::SessionOptions::rendezvous)
/// reads the messages of one range from there itself).
pub fn initiator_regions() -> Vec<RegionOptions> {
    let local = |id, len| RegionOptions::new(id, len, Access::LOCAL_WRITE);
    let readable = |id, len| {
        RegionOptions::new(id, len, Access::LOCAL_WRITE | Access::REMOTE_READ).advertise(true)
    };
    vec![
        local(SOURCE, BLOCK * BLOCKS),
        local(SINK, BLOCK * READ_SLOTS),
        local(RESULTS, 8 * ATOMIC_SLOTS),
        readable(STAGING[0], STAGING_LEN),
        readable(STAGING[1], STAGING_LEN),
    ]
}

/// Largest message of the workload: the header and checksum around a
/// body of at most 512 bytes (see [`message`](super::message)).
pub const MAX_MESSAGE: u32 = 8 + 2 + 512 + 8;

/// Session options of `side` ([`INITIATOR`](crate::INITIATOR) or
/// [`TARGET`]) for the workload: its regions, a small receive window
/// (32 slots, 32 one-sided operations, so credits run out under load) and
/// room for its largest message.
///
/// # Panics
/// If `policy` is invalid (a [`Policy::validate`] error).
pub fn options(side: usize, policy: Policy) -> SessionOptions {
    SessionOptions::builder()
        .policy(policy)
        .recv_slots(32)
        .max_message(MAX_MESSAGE)
        .max_one_sided(32)
        .regions(if side == TARGET {
            target_regions()
        } else {
            initiator_regions()
        })
        .build()
        .expect("the workload's options are valid with a valid policy")
}
