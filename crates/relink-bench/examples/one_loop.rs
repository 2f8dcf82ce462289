//! One measuring loop, alone in its process, for profiling: the raw soft
//! provider or a relink session, in-process or over TCP, messages or
//! writes (the shapes of the `relink_session` bench).
//!
//! ```text
//! cargo build --release -p relink-bench --example one_loop
//! perf record -g --call-graph dwarf target/release/examples/one_loop relink inproc send 1000000
//! strace -f -c target/release/examples/one_loop raw tcp send 200000
//! ```
//!
//! Arguments: `raw|relink`, `inproc|tcp`, `send|write`, and the operation
//! count (default 200,000). Prints the rate (and, for relink, the loop's
//! iterations and waits per operation).

use relink_bench::session::Workload;
use relink_bench::{
    Drive, LoopSpec, Measurement, RelinkSendLoop, RelinkWriteLoop, SendLoop, SimPair, TcpPair,
    WriteLoop,
};
use relink_testkit::soft_rigs::{InProcRig, TcpRig};
use relink_testkit::Rig;

fn usage() -> ! {
    eprintln!("usage: one_loop raw|relink inproc|tcp send|write [count]");
    std::process::exit(2);
}

/// The relink loop of `workload` on `d`, `count` operations.
fn relink<D: Drive>(d: D, spec: LoopSpec, workload: Workload, count: u64) {
    let (m, stats) = match workload {
        Workload::Send => {
            let mut l = RelinkSendLoop::new(d, spec);
            let m = l.run(count);
            let s = l.stats();
            l.close();
            (m, s)
        }
        Workload::Write => {
            let mut l = RelinkWriteLoop::new(d, spec);
            let m = l.run(count);
            let s = l.stats();
            l.close();
            (m, s)
        }
    };
    print_m(&m);
    println!(
        "iterations/op {:.3}, waits/op {:.3}",
        stats.iterations_per_op(),
        stats.waits_per_op()
    );
}

/// The raw loop of `workload` on `rig`, `count` operations.
fn raw(rig: &dyn Rig, spec: LoopSpec, workload: Workload, count: u64) {
    let m = match workload {
        Workload::Send => {
            let mut l = SendLoop::connect(rig, spec.signal_every(16));
            let m = l.run(count);
            l.close();
            m
        }
        Workload::Write => {
            let mut l = WriteLoop::connect(rig, spec);
            let m = l.run(count);
            l.close();
            m
        }
    };
    print_m(&m);
}

fn print_m(m: &Measurement) {
    println!(
        "{} ops in {:.3} s: {:.0} ops/s, {:.3} GB/s, cpu/wall {}",
        m.ops,
        m.secs(),
        m.ops_per_sec(),
        m.gbytes_per_sec(),
        m.cpu_load()
            .map_or_else(|| "-".into(), |c| format!("{c:.2}"))
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        usage();
    }
    let workload = match args[2].as_str() {
        "send" => Workload::Send,
        "write" => Workload::Write,
        _ => usage(),
    };
    let count: u64 = args
        .get(3)
        .map(|c| c.parse().unwrap_or_else(|_| usage()))
        .unwrap_or(200_000);
    let spec = match workload {
        Workload::Send => LoopSpec::send(64, 64),
        Workload::Write => LoopSpec::write(64 * 1024, 16),
    };
    match (args[0].as_str(), args[1].as_str()) {
        ("raw", "inproc") => raw(&InProcRig::new(1), spec, workload, count),
        ("raw", "tcp") => raw(&TcpRig::new(), spec, workload, count),
        ("relink", "inproc") => relink(SimPair::connect(2, &spec, workload), spec, workload, count),
        ("relink", "tcp") => relink(TcpPair::connect(3, &spec, workload), spec, workload, count),
        _ => usage(),
    }
}
