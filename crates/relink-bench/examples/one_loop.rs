//! One measuring loop, alone in its process, for profiling: the raw soft
//! provider or a relink session, in-process or over TCP, messages or
//! writes (the shapes of the `relink_session` bench) or ping-pong round
//! trips (those of the `latency` bench).
//!
//! ```text
//! cargo build --release -p relink-bench --example one_loop
//! perf record -g --call-graph dwarf target/release/examples/one_loop relink inproc send 1000000
//! perf record -g target/release/examples/one_loop relink inproc pingpong4k 500000
//! strace -f -c target/release/examples/one_loop raw tcp send 200000
//! ```
//!
//! Arguments: `raw|relink`, `inproc|tcp`,
//! `send|send4k|send-from|send-from4k|send-slot4096|write|pingpong|pingpong4k|pingpong-from|pingpong-from4k|pingpong-read|pingpong-read4k|pingpong64k|pingpong-from64k|pingpong-read64k`
//! (`send4k`: 4 KiB messages; `send-from`, `send-from4k`: relink's
//! `Node::send_from` of a ring of registered slots, no copy — raw: the
//! same as `send`, `send4k`; `send-slot4096`: the 64 B messages through
//! sessions with 4 KiB receive slots, room for frames; `pingpong`: 8 B
//! messages; `pingpong-from`, `pingpong-from4k`: relink's zero-copy
//! round trip, `Node::send_from` of registered slots and receives into
//! posted buffers both ways; `pingpong-read`, `pingpong-read4k`: the same,
//! each receiver reading the messages itself (a rendezvous: no copy at
//! all); the `64k` ones: 64 KiB messages — raw: the same as `pingpong`,
//! `pingpong4k`, `pingpong64k`),
//! and the operation count (default 200,000).
//! Prints the rate (and, for relink, the loop's iterations and waits per
//! operation and the copies of the payload per message or round trip; for
//! ping-pong, the median and p99 round trip).

use relink_bench::latency::{Percentiles, Rtts};
use relink_bench::session::{MessageSource, Workload};
use relink_bench::{
    Drive, LoopSpec, Measurement, PingPongLoop, RelinkPingPong, RelinkSendLoop, RelinkWriteLoop,
    SendLoop, SimPair, TcpPair, WriteLoop,
};
use relink_testkit::soft_rigs::{InProcRig, TcpRig};
use relink_testkit::Rig;

fn usage() -> ! {
    eprintln!(
        "usage: one_loop raw|relink inproc|tcp \
         send|send4k|send-from|send-from4k|send-slot4096|write|pingpong|pingpong4k|\
         pingpong-from|pingpong-from4k|pingpong-read|pingpong-read4k|pingpong64k|pingpong-from64k|pingpong-read64k [count]"
    );
    std::process::exit(2);
}

/// The relink loop of `workload` on `d` (messages from `source`), `count`
/// operations.
fn relink<D: Drive>(
    d: D,
    spec: LoopSpec,
    (workload, source): (Workload, MessageSource),
    count: u64,
) {
    let (m, stats) = match workload {
        Workload::Send => {
            let mut l = RelinkSendLoop::with_source(d, spec, source);
            let m = l.run(count);
            let s = l.stats();
            let c = l.close_counted();
            println!(
                "copies of the payload per message: send {:.3}, receive {:.3}; messages \
                 received behind another in one SEND: {}",
                c.send_per_message(),
                c.receive_per_message(),
                c.packed
            );
            (m, s)
        }
        Workload::Write => {
            let mut l = RelinkWriteLoop::new(d, spec);
            let m = l.run(count);
            let s = l.stats();
            l.close();
            (m, s)
        }
        Workload::PingPong | Workload::PingPongFrom | Workload::PingPongRead => {
            let mut l = RelinkPingPong::with_source(d, spec, source);
            let m = l.run(count);
            let s = l.stats();
            print_rtts(l.rtts());
            let c = l.close_counted();
            println!(
                "copies of the payload per round trip: send {:.3}, receive {:.3}",
                c.send_per_round_trip(),
                c.receive_per_round_trip()
            );
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
        Workload::PingPong | Workload::PingPongFrom | Workload::PingPongRead => {
            let mut l = PingPongLoop::connect(rig, spec);
            let m = l.run(count);
            print_rtts(l.rtts());
            l.close();
            m
        }
    };
    print_m(&m);
}

fn print_rtts(r: &Rtts) {
    let p = Percentiles::of(&r.last_runs(1));
    println!("round trip: p50 {:.2} us, p99 {:.2} us", p.p50_us, p.p99_us);
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
    let (bytes, from) = (MessageSource::Bytes, MessageSource::Registered);
    let (workload, source, spec) = match args[2].as_str() {
        "send" => (Workload::Send, bytes, LoopSpec::send(64, 64)),
        "send4k" => (Workload::Send, bytes, LoopSpec::send(4096, 64)),
        "send-from" => (Workload::Send, from, LoopSpec::send(64, 64)),
        "send-from4k" => (Workload::Send, from, LoopSpec::send(4096, 64)),
        "send-slot4096" => (
            Workload::Send,
            bytes,
            LoopSpec::send(64, 64).max_message(4096),
        ),
        "write" => (Workload::Write, bytes, LoopSpec::write(64 * 1024, 16)),
        "pingpong" => (Workload::PingPong, bytes, LoopSpec::send(8, 1)),
        "pingpong4k" => (Workload::PingPong, bytes, LoopSpec::send(4096, 1)),
        "pingpong-from" => (Workload::PingPongFrom, from, LoopSpec::send(8, 1)),
        "pingpong-from4k" => (Workload::PingPongFrom, from, LoopSpec::send(4096, 1)),
        "pingpong-read" => (
            Workload::PingPongRead,
            MessageSource::Read,
            LoopSpec::send(8, 1),
        ),
        "pingpong-read4k" => (
            Workload::PingPongRead,
            MessageSource::Read,
            LoopSpec::send(4096, 1),
        ),
        "pingpong64k" => (Workload::PingPong, bytes, LoopSpec::send(65536, 1)),
        "pingpong-from64k" => (Workload::PingPongFrom, from, LoopSpec::send(65536, 1)),
        "pingpong-read64k" => (
            Workload::PingPongRead,
            MessageSource::Read,
            LoopSpec::send(65536, 1),
        ),
        _ => usage(),
    };
    let shape = (workload, source);
    let count: u64 = args
        .get(3)
        .map(|c| c.parse().unwrap_or_else(|_| usage()))
        .unwrap_or(200_000);
    match (args[0].as_str(), args[1].as_str()) {
        ("raw", "inproc") => raw(&InProcRig::new(1), spec, workload, count),
        ("raw", "tcp") => raw(&TcpRig::new(), spec, workload, count),
        ("relink", "inproc") => relink(SimPair::connect(2, &spec, workload), spec, shape, count),
        ("relink", "tcp") => relink(TcpPair::connect(3, &spec, workload), spec, shape, count),
        _ => usage(),
    }
}
