//! Data movement on a healthy connection: SEND/RECV ordering, RNR,
//! WRITE/READ, WRITE_WITH_IMM, atomics.

use relink_fabric::{RecvWr, SendOp, SendWr, WcOpcode};

use crate::check::{assert_wc_ok, pattern};
use crate::harness::Harness;
use crate::pair::{connect_pair, PairOpts};
use crate::rig::{report_deviation, Quirk, Rig, Side};

/// 200 SENDs of distinct payloads (every third with immediate data) arrive
/// in order with the right `byte_len`, `imm` and bytes; the requester's
/// completions come in posting order.
pub fn send_recv_ordering(rig: &dyn Rig) {
    const N: usize = 200;
    const SLOT: usize = 256;
    let mut h = Harness::new(rig);
    let pair = connect_pair(&mut h, &PairOpts::default());
    let (ini, tgt) = (&pair.initiator, &pair.target);

    let recvs: Vec<RecvWr> = (0..N)
        .map(|i| RecvWr {
            wr_id: 10_000 + i as u64,
            sgl: tgt.sge(i * SLOT, SLOT as u32).into(),
        })
        .collect();
    tgt.post_recv(&h, &recvs);

    let (sends, expected) = ini.stage_sends(N, SLOT, 0, 37, |i| {
        (i % 3 == 0).then_some(0xC0DE_0000 | i as u32)
    });
    ini.post_send(&h, &sends);

    let deadline = h.deadline(Side::Target);
    let rwcs = h.wait_completions(Side::Target, tgt.recv_cq, N, deadline);
    for (i, (wc, (len, imm, data))) in rwcs.iter().zip(&expected).enumerate() {
        assert_wc_ok(wc, 10_000 + i as u64, WcOpcode::Recv);
        assert_eq!(wc.qp, tgt.qp, "receive {i}: wrong QP in {wc:?}");
        assert_eq!(
            wc.byte_len as usize, *len,
            "receive {i}: byte_len in {wc:?}"
        );
        assert_eq!(wc.imm, *imm, "receive {i}: immediate data in {wc:?}");
        assert_eq!(
            tgt.mem.read_vec(i * SLOT, *len).expect("in bounds"),
            *data,
            "receive {i}: payload"
        );
    }

    let deadline = h.deadline(Side::Initiator);
    let swcs = h.wait_completions(Side::Initiator, ini.send_cq, N, deadline);
    for (i, wc) in swcs.iter().enumerate() {
        assert_wc_ok(wc, i as u64, WcOpcode::Send);
        assert_eq!(wc.qp, ini.qp, "send {i}: wrong QP in {wc:?}");
    }
    pair.teardown(&h);
}

/// A SEND with no receive posted (rnr_retry 7 = forever) does not complete
/// while the receiver is not ready, and completes once a receive is posted.
pub fn rnr_retry_then_delivery(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let opts = PairOpts::default();
    assert_eq!(
        opts.params.rnr_retry_count, 7,
        "the case needs infinite RNR retry"
    );
    let pair = connect_pair(&mut h, &opts);
    let (ini, tgt) = (&pair.initiator, &pair.target);

    let data = pattern(7, 64);
    ini.mem.write(0, &data).expect("in bounds");
    ini.post_send(&h, &[SendWr::new(1, SendOp::Send, vec![ini.sge(0, 64)])]);

    let early = h.collect_completions(Side::Initiator, ini.send_cq, rig.quiet_time());
    assert!(
        early.is_empty(),
        "a SEND completed although the peer had no receive posted: {early:?}"
    );
    let early = h.poll_cq(Side::Target, tgt.recv_cq, usize::MAX);
    assert!(
        early.is_empty(),
        "a receive completed that was never posted: {early:?}"
    );

    tgt.post_recv(
        &h,
        &[RecvWr {
            wr_id: 7,
            sgl: tgt.sge(0, 128).into(),
        }],
    );
    let deadline = h.deadline(Side::Target);
    let rwc = h.wait_completions(Side::Target, tgt.recv_cq, 1, deadline);
    assert_wc_ok(&rwc[0], 7, WcOpcode::Recv);
    assert_eq!(rwc[0].byte_len, 64, "byte_len in {:?}", rwc[0]);
    assert_eq!(tgt.mem.read_vec(0, 64).expect("in bounds"), data);
    let deadline = h.deadline(Side::Initiator);
    let swc = h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
    assert_wc_ok(&swc[0], 1, WcOpcode::Send);
    pair.teardown(&h);
}

/// A WRITE lands in the target's memory; a READ brings it back; a READ
/// returns what the target wrote locally; a two-SGE WRITE gathers.
pub fn write_then_read(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let pair = connect_pair(&mut h, &PairOpts::default());
    let (ini, tgt) = (&pair.initiator, &pair.target);
    let payload = pattern(1, 1000);
    ini.mem.write(0, &payload).expect("in bounds");

    ini.post_send(
        &h,
        &[SendWr::new(
            1,
            SendOp::Write {
                remote: tgt.remote(4096),
            },
            vec![ini.sge(0, 1000)],
        )],
    );
    let deadline = h.deadline(Side::Initiator);
    let wc = h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
    assert_wc_ok(&wc[0], 1, WcOpcode::RdmaWrite);
    assert_eq!(
        tgt.mem.read_vec(4096, 1000).expect("in bounds"),
        payload,
        "a completed WRITE must have placed its data"
    );

    ini.post_send(
        &h,
        &[SendWr::new(
            2,
            SendOp::Read {
                remote: tgt.remote(4096),
            },
            vec![ini.sge(8192, 1000)],
        )],
    );
    let deadline = h.deadline(Side::Initiator);
    let wc = h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
    assert_wc_ok(&wc[0], 2, WcOpcode::RdmaRead);
    assert_eq!(ini.mem.read_vec(8192, 1000).expect("in bounds"), payload);

    let fresh = pattern(2, 512);
    tgt.mem.write(20_000, &fresh).expect("in bounds");
    ini.post_send(
        &h,
        &[SendWr::new(
            3,
            SendOp::Read {
                remote: tgt.remote(20_000),
            },
            vec![ini.sge(12_288, 512)],
        )],
    );
    let deadline = h.deadline(Side::Initiator);
    let wc = h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
    assert_wc_ok(&wc[0], 3, WcOpcode::RdmaRead);
    assert_eq!(ini.mem.read_vec(12_288, 512).expect("in bounds"), fresh);

    ini.post_send(
        &h,
        &[SendWr::new(
            4,
            SendOp::Write {
                remote: tgt.remote(30_000),
            },
            vec![ini.sge(0, 100), ini.sge(500, 50)],
        )],
    );
    let deadline = h.deadline(Side::Initiator);
    let wc = h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
    assert_wc_ok(&wc[0], 4, WcOpcode::RdmaWrite);
    let mut gathered = payload[..100].to_vec();
    gathered.extend_from_slice(&payload[500..550]);
    assert_eq!(
        tgt.mem.read_vec(30_000, 150).expect("in bounds"),
        gathered,
        "a two-SGE WRITE must gather both SGEs in order"
    );
    pair.teardown(&h);
}

/// A window of large WRITEs (64 KiB, and one gathered from three SGEs)
/// lands in the target's memory in full; a window of large READs brings
/// every byte back. On the TCP soft fabric these are the transfers that
/// two processes of one host move without the stream.
pub fn large_transfers(rig: &dyn Rig) {
    const CHUNK: usize = 64 * 1024;
    const N: usize = 6;
    let mut h = Harness::new(rig);
    let opts = PairOpts {
        buf_len: 1 << 20,
        ..PairOpts::default()
    };
    let pair = connect_pair(&mut h, &opts);
    let (ini, tgt) = (&pair.initiator, &pair.target);
    let chunks: Vec<Vec<u8>> = (0..N).map(|i| pattern(100 + i as u64, CHUNK)).collect();
    let mut wrs = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        ini.mem.write(i * CHUNK, c).expect("in bounds");
        wrs.push(SendWr::new(
            i as u64,
            SendOp::Write {
                remote: tgt.remote(i * CHUNK),
            },
            vec![ini.sge(i * CHUNK, CHUNK as u32)],
        ));
    }
    // 48 KiB gathered from three places of the chunks, in this order.
    let gather = [(5 * CHUNK, 16_384), (CHUNK + 100, 16_384), (7, 16_384)];
    wrs.push(SendWr::new(
        N as u64,
        SendOp::Write {
            remote: tgt.remote(N * CHUNK),
        },
        gather
            .iter()
            .map(|&(o, l)| ini.sge(o, l))
            .collect::<Vec<_>>(),
    ));
    ini.post_send(&h, &wrs);
    let deadline = h.deadline(Side::Initiator);
    let wc = h.wait_completions(Side::Initiator, ini.send_cq, N + 1, deadline);
    for (i, w) in wc.iter().enumerate() {
        assert_wc_ok(w, i as u64, WcOpcode::RdmaWrite);
    }
    let all: Vec<u8> = chunks.concat();
    for (i, c) in chunks.iter().enumerate() {
        assert!(
            tgt.mem.read_vec(i * CHUNK, CHUNK).expect("in bounds") == *c,
            "WRITE {i} of {CHUNK} bytes must have placed all of them"
        );
    }
    let gathered: Vec<u8> = gather
        .iter()
        .flat_map(|&(o, l)| all[o..o + l as usize].to_vec())
        .collect();
    assert!(
        tgt.mem
            .read_vec(N * CHUNK, gathered.len())
            .expect("in bounds")
            == gathered,
        "a WRITE of three SGEs must gather them in order"
    );

    // Read everything back, into the second half of the initiator's memory.
    let back = 8 * CHUNK;
    let reads: Vec<SendWr> = (0..N)
        .map(|i| {
            SendWr::new(
                100 + i as u64,
                SendOp::Read {
                    remote: tgt.remote(i * CHUNK),
                },
                vec![ini.sge(back + i * CHUNK, CHUNK as u32)],
            )
        })
        .collect();
    ini.post_send(&h, &reads);
    let deadline = h.deadline(Side::Initiator);
    let wc = h.wait_completions(Side::Initiator, ini.send_cq, N, deadline);
    for (i, w) in wc.iter().enumerate() {
        assert_wc_ok(w, 100 + i as u64, WcOpcode::RdmaRead);
        assert_eq!(w.byte_len, CHUNK as u32, "byte_len in {w:?}");
    }
    assert!(
        ini.mem.read_vec(back, N * CHUNK).expect("in bounds") == all,
        "the READs must bring back every byte the WRITEs placed"
    );
    pair.teardown(&h);
}

/// WRITE_WITH_IMM places its data, consumes a receive, and delivers the
/// immediate data with `RecvRdmaWithImm` and the written length.
pub fn write_with_imm(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let pair = connect_pair(&mut h, &PairOpts::default());
    let (ini, tgt) = (&pair.initiator, &pair.target);
    tgt.post_recv(
        &h,
        &[RecvWr {
            wr_id: 42,
            sgl: tgt.sge(60_000, 16).into(),
        }],
    );
    let payload = pattern(3, 512);
    ini.mem.write(0, &payload).expect("in bounds");
    ini.post_send(
        &h,
        &[SendWr::new(
            5,
            SendOp::WriteWithImm {
                remote: tgt.remote(12_288),
                imm: 0xDEAD_BEEF,
            },
            vec![ini.sge(0, 512)],
        )],
    );
    let deadline = h.deadline(Side::Target);
    let rwc = h.wait_completions(Side::Target, tgt.recv_cq, 1, deadline);
    assert_wc_ok(&rwc[0], 42, WcOpcode::RecvRdmaWithImm);
    assert_eq!(
        rwc[0].imm,
        Some(0xDEAD_BEEF),
        "immediate data in {:?}",
        rwc[0]
    );
    assert_eq!(rwc[0].byte_len, 512, "byte_len in {:?}", rwc[0]);
    assert_eq!(tgt.mem.read_vec(12_288, 512).expect("in bounds"), payload);
    let deadline = h.deadline(Side::Initiator);
    let swc = h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
    assert_wc_ok(&swc[0], 5, WcOpcode::RdmaWrite);
    pair.teardown(&h);
}

/// FETCH_ADD and CMP_SWAP (matching and not) return the old value into the
/// local SGE and update the remote u64 as specified.
pub fn atomics(rig: &dyn Rig) {
    const TARGET: usize = 16_384;
    let mut h = Harness::new(rig);
    let pair = connect_pair(&mut h, &PairOpts::default());
    let (ini, tgt) = (&pair.initiator, &pair.target);
    tgt.mem.write_u64(TARGET, 100).expect("in bounds");

    let steps: [(u64, SendOp, WcOpcode, u64, u64); 4] = [
        (
            1,
            SendOp::FetchAdd {
                remote: tgt.remote(TARGET),
                add: 23,
            },
            WcOpcode::FetchAdd,
            100,
            123,
        ),
        (
            2,
            SendOp::CmpSwap {
                remote: tgt.remote(TARGET),
                compare: 123,
                swap: 0xFEED,
            },
            WcOpcode::CompSwap,
            123,
            0xFEED,
        ),
        (
            3,
            SendOp::CmpSwap {
                remote: tgt.remote(TARGET),
                compare: 1,
                swap: 2,
            },
            WcOpcode::CompSwap,
            0xFEED,
            0xFEED,
        ),
        (
            4,
            SendOp::FetchAdd {
                remote: tgt.remote(TARGET),
                add: u64::MAX,
            },
            WcOpcode::FetchAdd,
            0xFEED,
            0xFEEC,
        ),
    ];
    for (wr_id, op, opcode, old, new) in steps {
        let local = TARGET + 8 * wr_id as usize;
        ini.mem.write_u64(local, 0x5555).expect("in bounds");
        ini.post_send(&h, &[SendWr::new(wr_id, op, vec![ini.sge(local, 8)])]);
        let deadline = h.deadline(Side::Initiator);
        let wc = h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
        assert_wc_ok(&wc[0], wr_id, opcode);
        assert_eq!(
            ini.mem.read_u64(local).expect("in bounds"),
            old,
            "{op:?} must return the old value"
        );
        assert_eq!(
            tgt.mem.read_u64(TARGET).expect("in bounds"),
            new,
            "{op:?} must leave this value in remote memory"
        );
    }
    pair.teardown(&h);
}

/// Many FETCH_ADDs in flight at once, each behind a WRITE and most of
/// them unsignaled (as relink posts: every 8th request and the last of a
/// batch signaled, the others completed by RC order): every FETCH_ADD the
/// provider completed wrote its own old value into its local SGE first
/// (each result slot holds a sentinel until then), the old values are
/// distinct values in 0..N, and the remote counter ends at N. On a lossy
/// wire (`tests/vm/run.sh --netem-loss`) this is where a provider's
/// retransmission and response replay show: an atomic completed without
/// its result is a provider defect no layer above it can repair
/// ([`Quirk::AtomicResultLostOnReplay`], reported as a known deviation).
pub fn atomics_in_flight(rig: &dyn Rig) {
    const COUNTER: usize = 16_384;
    const SLOTS: usize = 256;
    const RESULTS: usize = 32_768;
    const TOTAL: u64 = 2_000;
    const WINDOW: u64 = 32;
    const SIGNAL_EVERY: u64 = 8;
    const NO_RESULT: u64 = u64::MAX;
    let mut h = Harness::new(rig);
    let pair = connect_pair(&mut h, &PairOpts::default());
    let (ini, tgt) = (&pair.initiator, &pair.target);
    tgt.mem.write_u64(COUNTER, 0).expect("in bounds");
    // Request 2i is a WRITE, 2i + 1 the FETCH_ADD i.
    let slot = |i: u64| RESULTS + 8 * (i as usize % SLOTS);
    let (mut posted, mut done) = (0u64, 0u64);
    let mut olds = Vec::with_capacity(TOTAL as usize);
    let mut unwritten = Vec::new();
    while done < TOTAL {
        let mut batch = Vec::new();
        while posted < TOTAL && posted - done < WINDOW {
            ini.mem
                .write_u64(slot(posted), NO_RESULT)
                .expect("in bounds");
            let write = SendOp::Write {
                remote: tgt.remote(8 * (posted as usize % 512)),
            };
            batch.push(SendWr::new(2 * posted, write, vec![ini.sge(0, 64)]));
            let add = SendOp::FetchAdd {
                remote: tgt.remote(COUNTER),
                add: 1,
            };
            let mut wr = SendWr::new(2 * posted + 1, add, vec![ini.sge(slot(posted), 8)]);
            wr.signaled = posted % SIGNAL_EVERY == SIGNAL_EVERY - 1 || posted + 1 == TOTAL;
            batch.last_mut().expect("just pushed").signaled = false;
            batch.push(wr);
            posted += 1;
        }
        if let Some(last) = batch.last_mut() {
            last.signaled = true;
        }
        if !batch.is_empty() {
            ini.post_send(&h, &batch);
        }
        let deadline = h.deadline(Side::Initiator);
        let wc = h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
        assert_wc_ok(&wc[0], wc[0].wr_id, WcOpcode::FetchAdd);
        // Every FETCH_ADD up to this one completed (RC order).
        let upto = wc[0].wr_id / 2;
        assert!(upto >= done, "completion of {} after {done}", wc[0].wr_id);
        while done <= upto {
            match ini.mem.read_u64(slot(done)).expect("in bounds") {
                NO_RESULT => unwritten.push(done),
                old => olds.push(old),
            }
            done += 1;
        }
    }
    olds.sort_unstable();
    let repeated = olds.windows(2).filter(|w| w[0] == w[1]).count();
    let what = format!(
        "{} of {TOTAL} FETCH_ADDs completed successfully without writing their result \
         (FETCH_ADDs {:?}...)",
        unwritten.len(),
        &unwritten[..unwritten.len().min(8)]
    );
    if !unwritten.is_empty() {
        if !rig.has_quirk(Quirk::AtomicResultLostOnReplay) {
            panic!("{what}");
        }
        report_deviation(rig, "atomics_in_flight", &what);
    }
    // What holds even then: each executed exactly once, and every result
    // that was written is its own.
    assert_eq!(repeated, 0, "old values returned twice");
    assert!(
        olds.iter().all(|&o| o < TOTAL),
        "old values out of 0..{TOTAL}: {:?}",
        olds.iter().filter(|&&o| o >= TOTAL).collect::<Vec<_>>()
    );
    assert_eq!(olds.len() + unwritten.len(), TOTAL as usize);
    assert_eq!(tgt.mem.read_u64(COUNTER).expect("in bounds"), TOTAL);
    pair.teardown(&h);
}
