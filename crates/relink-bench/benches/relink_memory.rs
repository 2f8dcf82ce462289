//! Heap memory per outstanding relink operation: messages of 64 B and
//! 4 KiB, writes, reads and atomics, `n` of them submitted while the peer's
//! device is gone (so none completes), counted by a counting global
//! allocator (`stats_alloc`) and divided by `n`.
//!
//! ```text
//! cargo bench -p relink-bench --bench relink_memory            # measure (seconds)
//! RELINK_BENCH_QUICK=1 cargo bench -p relink-bench --bench relink_memory   # smoke run
//! ```
//!
//! Also counts allocations per operation in steady traffic (64-byte
//! messages, 64 KiB writes) on the in-process fabric, raw and through
//! relink; and the memory relink registers for a session (both ends) able
//! to take messages of 64 KiB and 1 MiB: in their SEND (`max_message` the
//! message size) or read by the receiver (`max_message` 4 KiB and
//! `SessionOptions::rendezvous` from 4 KiB), each size sent once the
//! second way and checked.
//!
//! Prints tables and writes `target/relink-bench/relink_memory.json`. Run
//! without `--bench` (as `cargo test --benches` does) it makes a quick run.

use std::alloc::System;

use relink_bench::memory::{journal_memory, HeapCounter, MemSample, OpShape};
use relink_bench::report::{text_table, write_report_or_exit, Machine};
use relink_bench::session::Workload;
use relink_bench::{quick_from_env, selected};
use relink_bench::{
    LoopSpec, RelinkSendLoop, RelinkWriteLoop, Runner, SendLoop, SimPair, WriteLoop,
};
use relink_testkit::soft_rigs::InProcRig;
use serde::Serialize;
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The process's heap, as `stats_alloc` counts it.
struct Counting;

impl HeapCounter for Counting {
    fn live_bytes(&self) -> i64 {
        // stats_alloc counts a reallocation's growth in `bytes_allocated`
        // (and its shrinking in `bytes_deallocated`) as well as in
        // `bytes_reallocated`: the live heap is the difference of the two.
        let s = GLOBAL.stats();
        s.bytes_allocated as i64 - s.bytes_deallocated as i64
    }
    fn allocations(&self) -> u64 {
        GLOBAL.stats().allocations as u64
    }
}

/// The JSON report.
#[derive(Debug, Serialize)]
struct MemoryReport {
    bench: &'static str,
    quick: bool,
    machine: Machine,
    /// `size_of::<relink_core::journal::OpKind>()`: the operation as the
    /// journal entry holds it (the entry adds its id, sequence number and
    /// state).
    op_kind_size: usize,
    samples: Vec<MemSample>,
    traffic: Vec<Traffic>,
    large: Vec<LargeMessages>,
}

/// The memory of a session able to take messages of `size` bytes.
#[derive(Debug, Clone, Serialize)]
struct LargeMessages {
    /// The largest message.
    size: usize,
    /// `Footprint::session_memory_bytes` of both nodes, messages in their
    /// SEND (`max_message` = `size`).
    eager_bytes: usize,
    /// The same, messages read by the receiver (`max_message` 4 KiB,
    /// rendezvous from 4 KiB).
    rendezvous_bytes: usize,
}

/// [`LargeMessages`] of `size`, with a message of `size` bytes read into
/// a posted receive and checked.
fn large_messages(size: usize, seed: u64) -> LargeMessages {
    use relink::{Access, LocalRange, ReceiveOutcome, SessionOptions};
    use relink_sim::sim::{Sim, INITIATOR, TARGET};
    let memory = |opts: SessionOptions| {
        let (mut sim, s, t) = Sim::with_session_options(seed, opts.clone(), opts);
        let bytes = sim.node(INITIATOR).footprint().session_memory_bytes
            + sim.node(TARGET).footprint().session_memory_bytes;
        (sim, s, t, bytes)
    };
    let eager = SessionOptions::builder()
        .max_message(u32::try_from(size).expect("fits"))
        .build()
        .expect("options");
    let (_, _, _, eager_bytes) = memory(eager);
    let read = SessionOptions::builder()
        .max_message(4096)
        .rendezvous(Some(4096))
        .build()
        .expect("options");
    let (mut sim, s, t, rendezvous_bytes) = memory(read);
    // One message of `size` read into a posted receive.
    let src = sim.node(INITIATOR).alloc_memory(size).expect("memory");
    let pattern: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
    src.write(0, &pattern).expect("in bounds");
    let src_id = sim
        .node(INITIATOR)
        .register(src, Access::REMOTE_READ)
        .expect("registered");
    let dst = sim.node(TARGET).alloc_memory(size).expect("memory");
    let dst_id = sim
        .node(TARGET)
        .register(dst.clone(), Access::LOCAL_WRITE)
        .expect("registered");
    let len = u32::try_from(size).expect("fits");
    sim.node(TARGET)
        .post_receive(
            t,
            LocalRange {
                region: dst_id,
                offset: 0,
                len,
            },
            1,
        )
        .expect("posted");
    sim.run_for(std::time::Duration::from_millis(1));
    sim.node(INITIATOR)
        .send_from(
            s,
            LocalRange {
                region: src_id,
                offset: 0,
                len,
            },
        )
        .expect("sent");
    let mut got = None;
    sim.run_until_cond(std::time::Duration::from_secs(5), |sim| {
        got = sim.node(TARGET).poll_received(t);
        got.is_some()
    });
    let r = got.expect("the message read");
    assert!(
        matches!(r.outcome, ReceiveOutcome::Message { len: l, truncated: false, .. } if l == len),
        "{r:?}"
    );
    assert!(
        dst.read_vec(0, size).expect("in bounds") == pattern,
        "its bytes"
    );
    LargeMessages {
        size,
        eager_bytes,
        rendezvous_bytes,
    }
}

/// Allocations per operation of a measuring loop in steady state (the
/// whole process: loop, relink, soft fabric).
#[derive(Debug, Clone, Serialize)]
struct Traffic {
    /// `raw` or `relink`.
    side: &'static str,
    /// `send 64 B` or `write 64 KiB`.
    op: String,
    /// Operations counted.
    ops: u64,
    /// Allocations per operation.
    allocs_per_op: f64,
    /// Bytes allocated per operation.
    bytes_per_op: f64,
}

/// Allocations of `count` operations of `runner` (after a warm-up run of
/// the same count).
fn traffic(side: &'static str, op: &str, runner: &mut dyn Runner, count: u64) -> Traffic {
    runner.run(count);
    let a = GLOBAL.stats();
    runner.run(count);
    let b = GLOBAL.stats();
    Traffic {
        side,
        op: op.into(),
        ops: count,
        allocs_per_op: (b.allocations - a.allocations) as f64 / count as f64,
        bytes_per_op: (b.bytes_allocated - a.bytes_allocated) as f64 / count as f64,
    }
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let quick = quick_from_env() || !benching;
    let ns: &[usize] = if quick { &[100] } else { &[1_000, 10_000] };
    let shapes = [
        OpShape::Message(64),
        OpShape::Message(4096),
        OpShape::Write(64 * 1024),
        OpShape::Read(4096),
        OpShape::FetchAdd,
        OpShape::CmpSwap,
    ];
    let mut samples = Vec::new();
    for (i, shape) in shapes.iter().enumerate() {
        if !selected(&shape.name()) {
            continue;
        }
        for &n in ns {
            let m = journal_memory(*shape, n, 300 + i as u64, &Counting);
            assert_eq!(m.pending_ops, n, "{m:?}: operations completed meanwhile");
            samples.push(m);
        }
    }

    let count = if quick { 1_000 } else { 100_000 };
    let mut flows = Vec::new();
    if selected("traffic") {
        let send = LoopSpec::send(64, 64);
        let rig = InProcRig::new(1);
        let mut raw = SendLoop::connect(&rig, send.signal_every(16));
        flows.push(traffic("raw", "send 64 B", &mut raw, count));
        raw.close();
        let mut rl = RelinkSendLoop::new(SimPair::connect(2, &send, Workload::Send), send);
        flows.push(traffic("relink", "send 64 B", &mut rl, count));
        rl.close();
        let write = LoopSpec::write(64 * 1024, 16);
        let mut raw = WriteLoop::connect(&rig, write);
        flows.push(traffic("raw", "write 64 KiB", &mut raw, count / 10));
        raw.close();
        let mut rl = RelinkWriteLoop::new(SimPair::connect(3, &write, Workload::Write), write);
        flows.push(traffic("relink", "write 64 KiB", &mut rl, count / 10));
        rl.close();
    }

    let mut large = Vec::new();
    if selected("large") {
        for (i, size) in [64 << 10, 1 << 20].into_iter().enumerate() {
            large.push(large_messages(size, 400 + i as u64));
        }
    }

    println!(
        "relink_memory{}: heap bytes per outstanding operation (peer's device gone)",
        if quick {
            " (QUICK: proves it runs, measures nothing)"
        } else {
            ""
        }
    );
    let rows: Vec<Vec<String>> = samples
        .iter()
        .map(|m| {
            vec![
                m.op.clone(),
                m.n.to_string(),
                m.bytes.to_string(),
                format!("{:.1}", m.bytes_per_op),
                format!("{:.1}", m.journal_only_bytes_per_op),
                format!("{:.2}", m.allocs_per_op),
                m.journal_bytes.to_string(),
            ]
        })
        .collect();
    print!(
        "{}",
        text_table(
            &[
                "operation",
                "outstanding",
                "heap bytes",
                "bytes/op",
                "journal alone",
                "allocs/op",
                "journal_bytes",
            ],
            &rows,
            &[0],
        )
    );
    let op_kind_size = std::mem::size_of::<relink_core::journal::OpKind>();
    println!("size_of::<OpKind>() = {op_kind_size} bytes");
    println!(
        "heap bytes: live heap after submitting minus before (stats_alloc); allocs/op: \
         allocations per submission, kept or freed; journal alone: bytes/op of a bare Journal \
         holding the same operations; journal_bytes: payload the journal reports"
    );
    println!("allocations per operation in steady traffic (in-process fabric, whole process)");
    let rows: Vec<Vec<String>> = flows
        .iter()
        .map(|t| {
            vec![
                t.side.to_string(),
                t.op.clone(),
                t.ops.to_string(),
                format!("{:.2}", t.allocs_per_op),
                format!("{:.0}", t.bytes_per_op),
            ]
        })
        .collect();
    print!(
        "{}",
        text_table(
            &["loop", "operation", "ops", "allocs/op", "bytes alloc/op"],
            &rows,
            &[0, 1],
        )
    );
    println!("memory relink registers for one session (both ends), by the largest message");
    let rows: Vec<Vec<String>> = large
        .iter()
        .map(|l| {
            vec![
                relink_bench::loops::human_size(l.size),
                l.eager_bytes.to_string(),
                l.rendezvous_bytes.to_string(),
                format!("{:.1}", l.eager_bytes as f64 / l.rendezvous_bytes as f64),
            ]
        })
        .collect();
    print!(
        "{}",
        text_table(
            &[
                "largest message",
                "in its SEND",
                "read by the receiver",
                "ratio"
            ],
            &rows,
            &[0],
        )
    );
    println!(
        "in its SEND: max_message = the message (64 receive slots, 80 send slots of it, each \
         end); read by the receiver: max_message 4 KiB, SessionOptions::rendezvous from 4 KiB \
         (a message of the size was read into a posted receive and checked)"
    );
    let report = MemoryReport {
        bench: "relink_memory",
        quick,
        machine: Machine::current(),
        op_kind_size,
        samples,
        traffic: flows,
        large,
    };
    write_report_or_exit(report.bench, &report);
}
