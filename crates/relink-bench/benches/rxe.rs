//! relink over real RDMA (Soft-RoCE, rxe) next to raw verbs on the same
//! devices, in one run: 64-byte SENDs (message rate), 64 KiB RDMA WRITEs
//! (throughput) and ping-pong round trips of 8 B and 4 KiB messages
//! (latency), each measured on the raw provider (relink-bench's
//! `SendLoop` / `WriteLoop` / `PingPongLoop` on a [`VerbsRig`]) and through
//! a relink session (`RelinkSendLoop` / `RelinkWriteLoop` /
//! `RelinkPingPong` on a `ThreadPair` of two more `VerbsProvider`s on the
//! same two devices), their timed repetitions interleaved so both see the
//! same machine state, and the ratio relink / raw (throughput: median of
//! the ratios of neighbouring repetitions; latency: p50 over p50 of every
//! round trip of the timed repetitions). SENDs of one message each (64 B
//! and 4 KiB) go three ways: raw, relink's `Node::send` (copied) and
//! relink's `Node::send_from` of registered memory (zero-copy), and the
//! copies relink made of each message's payload are counted from the
//! sessions' counters: one made by `send_from` fails the run.
//!
//! ```text
//! RELINK_VERBS_INITIATOR=rxe0@10.10.0.1 RELINK_VERBS_TARGET=rxe1@10.10.0.2 \
//!     cargo bench -p relink-bench --features rdma --bench rxe
//! ```
//!
//! The VM tier builds it with `cargo bench -p relink-bench --features rdma
//! --no-run --message-format=json-render-diagnostics` (bench target `rxe`)
//! and runs the executable directly, without arguments. Environment:
//!
//! - `RELINK_VERBS_INITIATOR`, `RELINK_VERBS_TARGET`: each side's
//!   `DEV@ADDR[@NETDEV]` (see `relink_testkit::verbs_rig`); `RELINK_VERBS_PORT`:
//!   the first CM port used (default 18515; the run takes one per workload from it).
//! - `RELINK_BENCH_QUICK=1`: a short run (~10 s on rxe in a TCG VM) that
//!   proves it runs; by default ~30–40 s there.
//! - `RELINK_BENCH_ONLY=send`, `=slot`, `=write` or `=pingpong`: those
//!   workloads only (series `rxe-send64` and `rxe-send4k` — raw, `send`
//!   and `send_from` —, `rxe-slot` — the 64 B SENDs through sessions with
//!   4 KiB receive slots, room for frames of several messages —,
//!   `rxe-write64k`, `rxe-pingpong8`, `rxe-pingpong4096`).
//! - `RELINK_FAIL_ON_SKIP=1`: a skip fails (relink-skip).
//! - `RELINK_LOG`: tracing filter (default `warn`).
//!
//! Prints the rows (medians, spread), a table of ratios, a table of copies,
//! a table of round trips, one `RESULT rxe send64 ...`,
//! `RESULT rxe send64from ...`, `RESULT rxe send4k ...`,
//! `RESULT rxe send4kfrom ...`, `RESULT rxe send64slot4096 ...`,
//! `RESULT rxe write64k ...`,
//! `RESULT rxe pingpong8 ...` and `RESULT rxe pingpong4096 ...` line, one
//! `RESULT rxe copies ...` line per `send` and `send_from` loop, and
//! last `RELINK_VM_NOTE: send ratio X (send_from F, copies per message
//! C/0; 4 KiB X4, send_from F4; 4 KiB slots S), write ratio Y, rtt p50
//! ratio 8 B Z, 4 KiB W`; writes
//! `<target>/relink-bench/rxe.json` when it can. It is built only with the
//! `rdma` feature; without the variables or the devices it reports
//! `SKIPPED: <why>` (relink-skip) and exits 0. A message sent with
//! `send_from` that relink copied fails it (exit 1).

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use relink_bench::latency::{latency_table, ping_pong, Latency};
use relink_bench::overhead::{
    copy_faults, copy_table, ratio_table, send_from_overhead, send_overhead, write_overhead,
    CopyCount, Ratio, FRAME_SLOT, FROM_SIZES, SEND,
};
use relink_bench::{
    quick_from_env, selected, LoopSpec, Metric, Plan, Report, ThreadPair, Workload,
};
use relink_fabric::Provider;
use relink_testkit::verbs_rig::{fresh_port, VerbsRig};
use relink_testkit::{Rig, Side};

/// The measuring plan: 1 s of warm-up per loop, then 5 interleaved
/// repetitions of ~1 s each (~70 s of measuring over every workload, plus
/// connection setup).
fn full_plan() -> Plan {
    Plan {
        warmup: Duration::from_secs(1),
        rep_time: Duration::from_secs(1),
        reps: 5,
        min_count: 16,
    }
}

/// The quick plan: enough to prove everything runs on real devices.
fn quick_plan() -> Plan {
    Plan {
        warmup: Duration::from_millis(200),
        rep_time: Duration::from_millis(200),
        reps: 3,
        min_count: 16,
    }
}

/// A relink session between two fresh providers on the rig's devices (the
/// target's node listening on a fresh port of the target's address, the
/// initiator connecting from its own address), set up for `spec` and
/// `workload`.
fn relink_pair(rig: &VerbsRig, spec: &LoopSpec, workload: Workload) -> ThreadPair {
    let provider = |side: Side| -> Arc<dyn Provider> {
        Arc::new(
            rig.new_provider(side)
                .unwrap_or_else(|e| panic!("a second {side} provider: {e}")),
        )
    };
    let listen = SocketAddr::new(rig.addr(Side::Target), fresh_port());
    let t0 = Instant::now();
    let pair = ThreadPair::connect(
        provider(Side::Initiator),
        provider(Side::Target),
        listen,
        Some(rig.addr(Side::Initiator)),
        1,
        spec,
        workload,
    );
    eprintln!("rxe: relink session on {listen} up in {:.1?}", t0.elapsed());
    pair
}

/// The name of a workload in the `RESULT` lines: `send64`, `send64from`,
/// `send4k`, `send4kfrom`, `send64slot4096`, `write64k`.
fn result_name(op: &str, size: usize) -> &'static str {
    match (op, size) {
        ("send", 64) => "send64",
        ("send-from", 64) => "send64from",
        ("send", 4096) => "send4k",
        ("send-from", 4096) => "send4kfrom",
        ("send-slot4096", 64) => "send64slot4096",
        ("write", _) => "write64k",
        (other, size) => panic!("no RESULT name for workload {other} of {size} B"),
    }
}

/// The machine-readable line of one ratio.
fn result_line(r: &Ratio, quick: bool) -> String {
    let (key, scale, decimals) = match r.unit.as_str() {
        "msg/s" => ("mops", 1e-6, 6),
        "MB/s" => ("MBps", 1.0, 3),
        other => panic!("no RESULT key for unit {other}"),
    };
    format!(
        "RESULT rxe {name} raw_{key}={raw:.decimals$} relink_{key}={relink:.decimals$} \
         ratio={ratio:.3} ratio_min={min:.3} ratio_max={max:.3} reps={reps} quick={quick}",
        name = result_name(&r.op, r.size),
        raw = r.raw_median * scale,
        relink = r.relink_median * scale,
        ratio = r.median,
        min = r.min,
        max = r.max,
        reps = r.per_rep.len(),
        quick = u8::from(quick),
    )
}

/// The machine-readable line of one loop's copy count.
fn copies_line(c: &CopyCount) -> String {
    format!(
        "RESULT rxe copies {name} messages={m} send_copies_per_msg={s:.3} \
         receive_copies_per_msg={r:.3} send_copied_bytes={sb} receive_copied_bytes={rb} \
         framed={p}",
        name = result_name(&c.op, c.size),
        p = c.packed,
        m = c.messages,
        s = c.send_copies_per_message,
        r = c.receive_copies_per_message,
        sb = c.send_copied_bytes,
        rb = c.receive_copied_bytes,
    )
}

/// The machine-readable line of one ping-pong series.
fn latency_line(l: &Latency, quick: bool) -> String {
    format!(
        "RESULT rxe pingpong{size} raw_p50_us={rp50:.1} relink_p50_us={lp50:.1} \
         raw_p99_us={rp99:.1} relink_p99_us={lp99:.1} ratio_p50={r50:.3} ratio_p99={r99:.3} \
         samples={n} quick={quick}",
        size = l.size,
        rp50 = l.raw.p50_us,
        lp50 = l.relink.p50_us,
        rp99 = l.raw.p99_us,
        lp99 = l.relink.p99_us,
        r50 = l.ratio_p50,
        r99 = l.ratio_p99,
        n = l.relink.samples,
        quick = u8::from(quick),
    )
}

/// The loud skip, through relink-skip (with `RELINK_FAIL_ON_SKIP=1`, a
/// failure).
fn skip(why: &str) -> ! {
    let _ = std::io::stdout().flush();
    relink_skip::skip_part(
        "rxe bench (relink vs raw verbs)",
        &relink_skip::Skip::new(why),
    );
    std::process::exit(0);
}

fn rig_or_skip() -> VerbsRig {
    VerbsRig::from_env().unwrap_or_else(|why| skip(&why))
}

fn main() {
    // Before any thread exists (see relink_verbs::init_environment); it
    // cannot fail here unless /proc is missing.
    if let Err(e) = relink_verbs::init_environment() {
        eprintln!("rxe: {e}");
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RELINK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();

    let quick = quick_from_env();
    let plan = if quick { quick_plan() } else { full_plan() };
    let started = Instant::now();
    let rig = rig_or_skip();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    let sides: Vec<String> = Side::ALL
        .iter()
        .map(|s| format!("{s} {} {}", rig.device_name(*s), rig.addr(*s)))
        .collect();
    println!(
        "rxe: relink vs raw verbs on {} (kernel {kernel}){}",
        sides.join(", "),
        if quick { ", QUICK run" } else { "" }
    );

    let mut report = Report::new("rxe", quick, &plan);
    report.set_extra("kernel", &kernel);
    report.set_extra("sides", &sides);
    let mut ratios = Vec::new();
    let mut copies = Vec::new();
    // One rig per workload (a fresh CM port each), one at a time.
    let mut rig = Some(rig);
    for size in FROM_SIZES {
        let series = if size == SEND.0 {
            "rxe-send64".to_string()
        } else {
            format!("rxe-send{}k", size / 1024)
        };
        if selected(&series) {
            let rig = rig.take().unwrap_or_else(rig_or_skip);
            let pair = |spec: &LoopSpec, w| relink_pair(&rig, spec, w);
            let r = send_from_overhead(&rig, pair, size, &plan, &mut report);
            ratios.extend(r.ratios);
            copies.extend(r.copies);
        }
    }
    if selected("rxe-slot") {
        let rig = rig.take().unwrap_or_else(rig_or_skip);
        let pair = |spec: &LoopSpec, w| relink_pair(&rig, spec, w);
        ratios.push(send_overhead(&rig, pair, FRAME_SLOT, &plan, &mut report));
    }
    if selected("rxe-write64k") {
        let rig = rig.take().unwrap_or_else(rig_or_skip);
        let pair = |spec: &LoopSpec, w| relink_pair(&rig, spec, w);
        ratios.push(write_overhead(
            &rig,
            pair,
            Metric::MegabytesPerSec,
            &plan,
            &mut report,
        ));
    }
    let mut latencies = Vec::new();
    for size in [8, 4096] {
        if selected(&format!("rxe-pingpong{size}")) {
            let rig = rig.take().unwrap_or_else(rig_or_skip);
            let pair = |spec: &LoopSpec, w| relink_pair(&rig, spec, w);
            // The raw target on a thread of its own, as the relink pair's.
            latencies.push(ping_pong(&rig, true, pair, size, false, &plan, &mut report));
        }
    }
    drop(rig);

    print!("{}", report.table());
    print!("{}", ratio_table(&ratios));
    print!("{}", copy_table(&copies));
    print!("{}", latency_table(&latencies));
    report.set_extra("ratios", &ratios);
    report.set_extra("copies", &copies);
    report.set_extra("latency", &latencies);
    match report.write_json() {
        Ok(path) => println!("wrote {}", path.display()),
        Err(e) => eprintln!("rxe: JSON report not written ({e}); the RESULT lines have it all"),
    }
    for r in &ratios {
        println!("{}", result_line(r, quick));
    }
    for c in &copies {
        println!("{}", copies_line(c));
    }
    for l in &latencies {
        println!("{}", latency_line(l, quick));
    }
    let rtt_of = |size: usize| {
        latencies
            .iter()
            .find(|l| l.size == size)
            .map_or_else(|| "n/a".to_string(), |l| format!("{:.3}", l.ratio_p50))
    };
    let ratio_of = |name: &str| {
        ratios
            .iter()
            .find(|r| result_name(&r.op, r.size) == name)
            .map_or_else(|| "n/a".to_string(), |r| format!("{:.3}", r.median))
    };
    let copies_of = |name: &str| {
        copies
            .iter()
            .find(|c| result_name(&c.op, c.size) == name)
            .map_or_else(
                || "n/a".to_string(),
                |c| format!("{:.0}", c.send_copies_per_message),
            )
    };
    eprintln!("rxe: whole run {:.1?}", started.elapsed());
    let faults = copy_faults(&copies);
    println!(
        "RELINK_VM_NOTE: {}send ratio {} (send_from {}, copies per message {}/{}; 4 KiB {}, \
         send_from {}; 4 KiB slots {}), write ratio {}, rtt p50 ratio 8 B {}, 4 KiB {}",
        if faults.is_empty() {
            ""
        } else {
            "COPIED send_from; "
        },
        ratio_of("send64"),
        ratio_of("send64from"),
        copies_of("send64"),
        copies_of("send64from"),
        ratio_of("send4k"),
        ratio_of("send4kfrom"),
        ratio_of("send64slot4096"),
        ratio_of("write64k"),
        rtt_of(8),
        rtt_of(4096)
    );
    if !faults.is_empty() {
        for f in &faults {
            eprintln!("rxe: FAILED: {f}");
        }
        std::process::exit(1);
    }
}
