//! `fill_batch` and `mark_signaled`: frames, slots, signaling.

use std::sync::Arc;

use relink_core::Epoch;
use relink_fabric::{Access, HeapMemory, MrId, RemoteAddr};

use super::super::wr::TAG_MASK;
use super::*;

const SLOT: u32 = 64;

fn send_mr() -> MrInfo {
    MrInfo {
        id: MrId(1),
        addr: 0x1000,
        length: 2 * u64::from(SLOT),
        lkey: 7,
        rkey: 8,
        access: Access::LOCAL_WRITE,
    }
}

fn message(op: Option<u64>, bytes: &[u8]) -> Pending {
    Pending::Send {
        op: op.map(OpId),
        bytes: bytes.to_vec(),
    }
}

/// A core's journal, as far as `fill_batch` reads it.
#[derive(Default)]
struct Core {
    payloads: Vec<(OpId, Vec<u8>)>,
    recycled: Vec<Vec<u8>>,
    /// What the peer's receive slots hold; 0: one message per SEND.
    peer_frame_max: usize,
}

impl Payloads for Core {
    fn payload(&self, op: OpId) -> Option<MessageBody<'_>> {
        self.payloads
            .iter()
            .find(|(o, _)| *o == op)
            .map(|(_, p)| MessageBody::Bytes(p.as_slice()))
    }

    fn recycle(&mut self, bytes: Vec<u8>) {
        self.recycled.push(bytes);
    }

    fn peer_frame_max(&self) -> usize {
        self.peer_frame_max
    }

    fn count_copied(&mut self, _bytes: usize) {}
}

fn header(b: u8) -> [u8; HEADER_LEN] {
    [b; HEADER_LEN]
}

fn write(op: u64) -> Pending {
    Pending::OneSided {
        wr_id: TAG_ONE_SIDED | op,
        op: SendOp::Write {
            remote: RemoteAddr {
                addr: 0x9000,
                rkey: 3,
            },
        },
        sgl: SgeList::one(Sge {
            addr: 0x5000,
            length: 8,
            lkey: 9,
        }),
    }
}

#[test]
fn a_batch_takes_requests_in_order_while_send_slots_last() {
    // Two send slots: the third message waits, and so does the WRITE
    // queued behind it.
    let mut t = Transport::new(Epoch(1), None, 2);
    let send = Memory::new(Arc::new(HeapMemory::new(0x1000, 2 * SLOT as usize)));
    let mut backlog = VecDeque::from([
        message(Some(1), b"one"),
        write(9),
        message(None, b"two"),
        message(Some(3), b"three"),
        write(10),
    ]);
    let mut batch = WrBatch::default();
    let mut core = Core::default();
    fill_batch(
        &mut backlog,
        &mut t,
        &send,
        send_mr(),
        SLOT,
        &mut batch,
        &mut core,
    );

    let posted: Vec<u64> = batch.as_slice().iter().map(|w| w.wr_id).collect();
    assert_eq!(posted, [TAG_SEND, TAG_ONE_SIDED | 9, TAG_SEND | 1]);
    assert_eq!(t.posted, posted, "posted in the order of the batch");
    assert_eq!(
        backlog.len(),
        2,
        "a message without a slot and what follows it wait"
    );
    assert!(matches!(
        backlog[0],
        Pending::Send {
            op: Some(OpId(3)),
            ..
        }
    ));
    assert!(t.free_slots.is_empty());
    assert_eq!(t.slot_op, [Some(OpId(1)), None]);

    // Each message is in its slot; its SGE covers exactly its bytes.
    let wrs = batch.as_slice();
    assert_eq!(send.read_vec(0, 3).unwrap(), b"one");
    assert_eq!(send.read_vec(SLOT as usize, 3).unwrap(), b"two");
    let sge = |i: usize| wrs[i].sgl[0];
    assert_eq!((sge(0).addr, sge(0).length, sge(0).lkey), (0x1000, 3, 7));
    assert_eq!(sge(2).addr, 0x1000 + u64::from(SLOT));
    assert_eq!(sge(1).addr, 0x5000, "a one-sided request keeps its SGE");
    assert!(matches!(wrs[0].op, SendOp::Send));
    assert!(matches!(wrs[1].op, SendOp::Write { .. }));
    assert_eq!(core.recycled, [b"one".to_vec(), b"two".to_vec()]);

    // A completion frees a slot: the next batch goes on from there.
    assert_eq!(t.retire(TAG_SEND), Some(OpId(1)));
    batch.clear();
    fill_batch(
        &mut backlog,
        &mut t,
        &send,
        send_mr(),
        SLOT,
        &mut batch,
        &mut Detached,
    );
    let posted: Vec<u64> = batch.as_slice().iter().map(|w| w.wr_id).collect();
    assert_eq!(posted, [TAG_SEND, TAG_ONE_SIDED | 10]);
    assert!(backlog.is_empty());
    assert_eq!(send.read_vec(0, 5).unwrap(), b"three");
}

#[test]
fn an_application_message_is_its_header_and_the_journals_payload() {
    let mut t = Transport::new(Epoch(1), None, 2);
    let send = Memory::new(Arc::new(HeapMemory::new(0x1000, 2 * SLOT as usize)));
    let mut core = Core::default();
    core.payloads.push((OpId(5), b"payload".to_vec()));
    // Op 4 left the journal (completed) before it was posted.
    let mut backlog = VecDeque::from([
        Pending::Message {
            op: OpId(4),
            header: header(0xee),
        },
        Pending::Message {
            op: OpId(5),
            header: header(0xab),
        },
    ]);
    let mut batch = WrBatch::default();
    fill_batch(
        &mut backlog,
        &mut t,
        &send,
        send_mr(),
        SLOT,
        &mut batch,
        &mut core,
    );
    let wrs = batch.as_slice();
    assert_eq!(
        wrs.len(),
        1,
        "a message gone from the journal is not posted"
    );
    assert_eq!(t.posted, [TAG_SEND], "in the first free slot");
    assert_eq!(t.slot_op, [Some(OpId(5)), None]);
    let len = HEADER_LEN + 7;
    assert_eq!(
        (wrs[0].sgl[0].addr, wrs[0].sgl[0].length),
        (0x1000, len as u32)
    );
    let mut expected = header(0xab).to_vec();
    expected.extend_from_slice(b"payload");
    assert_eq!(send.read_vec(0, len).unwrap(), expected);
    assert!(core.recycled.is_empty(), "the journal keeps the payload");
}

#[test]
fn messages_queued_back_to_back_share_a_frame_while_it_fits() {
    const BIG: u32 = 128;
    let mut t = Transport::new(Epoch(1), None, 4);
    let send = Memory::new(Arc::new(HeapMemory::new(0x1000, 4 * BIG as usize)));
    let mr = MrInfo {
        length: 4 * u64::from(BIG),
        ..send_mr()
    };
    let msg = |op: u64| Pending::Message {
        op: OpId(op),
        header: relink_core::wire::MsgHeader {
            kind: relink_core::wire::MsgKind::Data,
            seq: relink_core::Seq(op),
            ack: relink_core::Seq(0),
            len: 10,
        }
        .to_bytes()
        .unwrap(),
    };
    // Frames of up to 100 bytes: three 10-byte messages (32 bytes
    // each with the header) per frame. Op 3 completed before it was
    // posted; control messages join a frame as messages do; a WRITE
    // ends a run; a message of encoded bytes that carries an operation
    // (`own`, op 10) starts a frame, which the messages behind it join.
    let mut core = Core {
        peer_frame_max: 100,
        ..Core::default()
    };
    for op in [1, 2, 4, 5, 6, 7, 9] {
        core.payloads.push((OpId(op), vec![op as u8; 10]));
    }
    let mut backlog = VecDeque::from([
        msg(1),
        msg(2),
        msg(3),
        msg(4),
        msg(5),
        msg(6),
        message(None, b"ctl"),
        msg(7),
        write(8),
        message(Some(10), b"own"),
        message(None, b"ctl"),
        msg(9),
    ]);
    let mut batch = WrBatch::default();
    fill_batch(&mut backlog, &mut t, &send, mr, BIG, &mut batch, &mut core);

    let wrs = batch.as_slice();
    let lens: Vec<u32> = wrs.iter().map(|w| w.sgl[0].length).collect();
    let one = (HEADER_LEN + 10) as u32;
    assert_eq!(
        lens,
        [3 * one, 2 * one + 3 + one, 8, 3 + 3 + one],
        "1 2 4 | 5 6 ctl 7 | write | own ctl 9"
    );
    // Twelve requests in three send slots and a WRITE.
    assert!(backlog.is_empty());
    assert_eq!(
        wrs.iter().map(|w| w.wr_id & TAG_MASK).collect::<Vec<_>>(),
        [TAG_SEND, TAG_SEND, TAG_ONE_SIDED, TAG_SEND]
    );
    assert_eq!(core.recycled.len(), 3, "control bytes go back to the core");
    let frame = send.read_vec(0, 3 * one as usize).unwrap();
    let ops: Vec<u8> = relink_core::wire::frame_messages(&frame)
        .map(|m| {
            relink_core::wire::decode_message(m.unwrap())
                .unwrap()
                .0
                .seq
                .0 as u8
        })
        .collect();
    assert_eq!(
        ops,
        [1, 2, 4],
        "each message is its header and payload, in order"
    );
    let slot = |w: &SendWr| (w.wr_id & !TAG_MASK) as usize;
    assert_eq!(
        t.slot_op[slot(&wrs[0])],
        Some(OpId(1)),
        "a frame stands for its first message"
    );
    assert_eq!(t.slot_op[slot(&wrs[1])], Some(OpId(5)));
    assert_eq!(t.slot_op[slot(&wrs[3])], Some(OpId(10)));
    let frame = send
        .read_vec(slot(&wrs[1]) * BIG as usize, lens[1] as usize)
        .unwrap();
    let parts: Vec<usize> = relink_core::wire::frame_messages(&frame[..2 * one as usize])
        .map(|m| m.unwrap().len())
        .collect();
    assert_eq!(parts, [one as usize; 2]);
    assert_eq!(&frame[2 * one as usize..2 * one as usize + 3], b"ctl");

    // Without the peer's limit every message has a SEND of its own.
    let mut t = Transport::new(Epoch(1), None, 4);
    let mut backlog = VecDeque::from([msg(1), msg(2)]);
    core.peer_frame_max = 0;
    batch.clear();
    fill_batch(&mut backlog, &mut t, &send, mr, BIG, &mut batch, &mut core);
    assert_eq!(batch.as_slice().len(), 2);
}

fn batch_of(n: usize) -> Vec<SendWr> {
    (0..n as u64)
        .map(|i| SendWr::new(i, SendOp::Send, Vec::new()))
        .collect()
}

fn signaled(wrs: &[SendWr]) -> Vec<u64> {
    wrs.iter().filter(|w| w.signaled).map(|w| w.wr_id).collect()
}

#[test]
fn every_sixteenth_request_and_the_last_of_a_batch_are_signaled() {
    let mut unsignaled = 0;
    let mut wrs = batch_of(40);
    mark_signaled(&mut wrs, &mut unsignaled);
    assert_eq!(signaled(&wrs), [15, 31, 39]);
    assert_eq!(unsignaled, 0, "the last of a batch is signaled");

    let mut wrs = batch_of(1);
    mark_signaled(&mut wrs, &mut unsignaled);
    assert_eq!(signaled(&wrs), [0]);

    // The count goes on from requests posted before.
    let mut unsignaled = 10;
    let mut wrs = batch_of(8);
    mark_signaled(&mut wrs, &mut unsignaled);
    assert_eq!(signaled(&wrs), [5, 7]);

    let mut none: [SendWr; 0] = [];
    mark_signaled(&mut none, &mut unsignaled);
    assert_eq!(unsignaled, 0);
}
