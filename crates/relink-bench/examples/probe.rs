//! Temporary probe.
use relink_bench::{LoopSpec, Rig, SendLoop, WriteLoop};
use relink_testkit::soft_rigs::{InProcRig, TcpRig};

fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    let n: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let reps: usize = std::env::args()
        .nth(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let sig: usize = std::env::args()
        .nth(4)
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    let rig: Box<dyn Rig> = if which.starts_with("tcp") {
        Box::new(TcpRig::new())
    } else {
        Box::new(InProcRig::new(1))
    };
    if which.ends_with("write") {
        let mut l = WriteLoop::connect(&*rig, LoopSpec::write(65536, 16));
        for _ in 0..reps {
            let m = l.run(n);
            println!("{:.3} GB/s cpu {:?}", m.gbytes_per_sec(), m.cpu);
        }
    } else {
        let mut l = SendLoop::connect(&*rig, LoopSpec::send(64, 64).signal_every(sig));
        for _ in 0..reps {
            let m = l.run(n);
            println!("{:.0} msg/s", m.ops_per_sec());
        }
    }
}
