//! [`fabric_heap`]: the heap the in-process soft fabric holds for one idle
//! connection, for the split of [`IdleHeap`](super::IdleHeap) into the
//! fabric's share and relink's.

use relink_fabric::QpCaps;
use relink_testkit::pair::{listen, target_addr};
use relink_testkit::soft_rigs::InProcRig;
use relink_testkit::{connect_via, Harness, PairOpts, Side};

use super::live;
use crate::memory::HeapCounter;

/// Receives each end keeps posted, as the scale sessions do.
const RECVS: usize = 16;
/// Bytes of each receive buffer.
const RECV_LEN: usize = 256;

/// `n` connections on the raw in-process soft provider (testkit
/// [`connect_via`] on an [`InProcRig`] seeded with `seed`, one listener),
/// each end with a QP, its CQs, one MR of 4 KiB and 16 receives of 256
/// bytes posted, as the scale sessions keep on the fabric: the live heap
/// after minus before, less the 4 KiB buffers, over `n`. The fabric's heap
/// of one idle connection, both ends, near what it holds for a relink
/// session (which has one CQ instead of two and two MRs instead of one).
///
/// # Panics
/// If a connection cannot be set up.
pub fn fabric_heap(n: usize, seed: u64, heap: &dyn HeapCounter) -> f64 {
    let rig = InProcRig::new(seed);
    let mut h = Harness::new(&rig);
    let dst = target_addr(&h);
    let listener = listen(&mut h, dst);
    let opts = PairOpts {
        buf_len: RECVS * RECV_LEN,
        caps: QpCaps {
            max_send_wr: 64,
            max_recv_wr: RECVS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
        },
        cq_depth: 96,
        ..PairOpts::default()
    };
    let heap0 = live(Some(heap));
    let mut pairs = Vec::with_capacity(n);
    for _ in 0..n {
        let pair = connect_via(&mut h, listener, &opts);
        pair.initiator.post_slot_recvs(&h, RECVS, RECV_LEN);
        pair.target.post_slot_recvs(&h, RECVS, RECV_LEN);
        pairs.push(pair);
    }
    for side in Side::ALL {
        h.take_events(side, |_| true);
    }
    let bytes = live(Some(heap)) - heap0;
    // The pairs' own records are the harness's, not the fabric's.
    let records = std::mem::size_of_val(pairs.as_slice()) as i64;
    let buffers = (2 * n * opts.buf_len) as i64;
    (bytes - records - buffers) as f64 / n.max(1) as f64
}
