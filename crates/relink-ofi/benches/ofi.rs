//! The libfabric provider next to libfabric's `tcp` provider and Open
//! MPI's own transports, measured in one run on this machine, on the
//! soft TCP fabric (two soft hosts, 127.0.0.1 and 127.0.0.2; `tcp` over
//! the same loopback).
//!
//! ```text
//! cargo bench -p relink-ofi --bench ofi                          # full run
//! RELINK_BENCH_QUICK=1 cargo bench -p relink-ofi --bench ofi     # quick run
//! ```
//!
//! 1. **fi_pingpong** (libfabric-bin): `-p relink -e msg` next to
//!    `-p tcp -e msg`, and `-p "relink;ofi_rxm" -e rdm` next to
//!    `-p "tcp;ofi_rxm" -e rdm`: the 64-byte latency (usec/xfer) and the
//!    1 MiB bandwidth (MB/sec) of each, and relink's ratios to `tcp`.
//! 2. **MPI** (openmpi-bin, `tests/mpi/pingpong.c`): the 8-byte latency
//!    and the 1 MiB windowed bandwidth of 2 ranks over relink (`mtl ofi`
//!    on `relink;ofi_rxm`), over `tcp;ofi_rxm` (`mtl ofi`) and over the
//!    tcp BTL (`pml ob1`), and relink's ratios to each.
//!
//! The goals (issue: the libfabric provider): bandwidth >= 0.9 x and
//! small-message latency <= 1.2 x the native provider's on the same
//! backend. Prints a table and `RESULT ofi ...` lines. Without
//! `fi_pingpong` or `mpirun`/`mpicc` it reports the part skipped through
//! relink-skip (a failure under `CI=true`, whose install step provides
//! them) and goes on.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{command, fabric_tool, free_port, provider_dir, Hosts, Root};
use relink_proctest::Proc;

/// A fi_pingpong row's figures: usec/xfer and MB/sec.
fn row(out: &[String], size: &str) -> Option<(f64, f64)> {
    let l = out
        .iter()
        .find(|l| l.split_whitespace().next() == Some(size))?;
    let f: Vec<&str> = l.split_whitespace().collect();
    Some((f.get(6)?.parse().ok()?, f.get(5)?.parse().ok()?))
}

/// One fi_pingpong pair over `provider` (`-e ep`), `iters` iterations:
/// the client's output lines.
fn pingpong(prov: &Path, hosts: &Hosts, provider: &str, ep: &str, iters: u32) -> Vec<String> {
    let tool = fabric_tool("fi_pingpong").expect("checked");
    let port = free_port().to_string();
    let it = iters.to_string();
    let args = ["-p", provider, "-e", ep, "-I", &it];
    let mut server = Proc::spawn(
        "server",
        command(&tool, prov, &hosts.b)
            .args(args)
            .args(["-B", &port]),
    );
    std::thread::sleep(Duration::from_millis(300));
    let mut client = Proc::spawn(
        "client",
        command(&tool, prov, &hosts.a)
            .args(args)
            .args(["-P", &port, "127.0.0.2"]),
    );
    let ok = client
        .wait_exit(Duration::from_secs(600))
        .is_some_and(|s| s.success());
    let _ = server.wait_exit(Duration::from_secs(30));
    assert!(
        ok,
        "fi_pingpong -p {provider} failed:\n{}",
        client.transcript()
    );
    client.stdout()
}

/// An MPI pingpong of 2 ranks with `transport` options: latency (us) and
/// bandwidth (MB/s).
fn mpi(
    run: &Path,
    exe: &Path,
    prov: &Path,
    wrapper: &Path,
    transport: &[&str],
    iters: u32,
) -> (f64, f64) {
    let mut c = Command::new(run);
    for (k, _) in std::env::vars() {
        if k.starts_with("FI_") || k.starts_with("OMPI_") {
            c.env_remove(k);
        }
    }
    c.env("FI_PROVIDER_PATH", prov)
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .args(transport)
        .args(["-x", "FI_PROVIDER_PATH"])
        .arg(wrapper)
        .arg(exe)
        .arg(iters.to_string());
    let out = c.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "mpirun {transport:?} failed:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("pingpong:"))
        .unwrap_or_else(|| panic!("no result:\n{text}"));
    let get = |k: &str| -> f64 {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    (get("latency_us="), get("bandwidth_mbps="))
}

fn main() {
    let quick = std::env::var_os("RELINK_BENCH_QUICK").is_some()
        || !std::env::args().any(|a| a == "--bench");
    let root = Root::new("bench");
    let prov = provider_dir(&root.0);
    let hosts = Hosts::create(&root.0);
    println!(
        "relink-ofi bench ({} run)",
        if quick { "quick" } else { "full" }
    );

    match fabric_tool("fi_pingpong") {
        Err(skip) => relink_skip::skip_part("ofi bench: fi_pingpong", &skip),
        Ok(_) => {
            let iters = if quick { 300 } else { 5000 };
            println!("\nfi_pingpong, {iters} iterations per size (client's figures)");
            println!(
                "{:<24} {:>12} {:>14}",
                "provider", "64 B us/xfer", "1 MiB MB/sec"
            );
            let mut figures = Vec::new();
            for (p, ep) in [
                ("relink", "msg"),
                ("tcp", "msg"),
                ("relink;ofi_rxm", "rdm"),
                ("tcp;ofi_rxm", "rdm"),
            ] {
                let out = pingpong(&prov, &hosts, p, ep, iters);
                let (lat, _) = row(&out, "64").unwrap_or((f64::NAN, f64::NAN));
                let (_, bw) = row(&out, "1m").unwrap_or((f64::NAN, f64::NAN));
                println!("{:<24} {lat:>12.2} {bw:>14.1}", format!("{p} -e {ep}"));
                figures.push((lat, bw));
            }
            for (name, r, t) in [("msg", 0, 1), ("rdm", 2, 3)] {
                let (lr, lt) = (figures[r].0 / figures[t].0, figures[r].1 / figures[t].1);
                println!(
                    "relink / tcp ({name}): latency {lr:.2} x (goal <= 1.2), bandwidth {lt:.2} x \
                     (goal >= 0.9)"
                );
                println!(
                    "RESULT ofi fi_pingpong {name} latency_ratio={lr:.3} bandwidth_ratio={lt:.3}"
                );
            }
        }
    }

    let tools = relink_skip::find_program("mpicc", "libopenmpi-dev")
        .and_then(|cc| Ok((cc, relink_skip::find_program("mpirun", "openmpi-bin")?)));
    match tools {
        Err(skip) => relink_skip::skip_part("ofi bench: MPI", &skip),
        Ok((cc, run)) => {
            let exe = root.0.join("pingpong");
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi/pingpong.c");
            let st = Command::new(cc)
                .args(["-O2", "-o"])
                .arg(&exe)
                .arg(&src)
                .status()
                .unwrap();
            assert!(st.success(), "mpicc failed");
            let wrapper = root.0.join("on-host.sh");
            std::fs::write(
                &wrapper,
                format!(
                    "#!/bin/sh\nif [ $((OMPI_COMM_WORLD_RANK % 2)) = 0 ]; then \
                     FI_RELINK_SOFT_DIR={}; else FI_RELINK_SOFT_DIR={}; fi\n\
                     export FI_RELINK_SOFT_DIR\nexec \"$@\"\n",
                    hosts.a.display(),
                    hosts.b.display()
                ),
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
            let iters = if quick { 500 } else { 10000 };
            println!(
                "\nMPI pingpong (2 ranks), {iters} round trips of 8 B, 1 MiB in windows of 16"
            );
            println!("{:<34} {:>12} {:>12}", "transport", "8 B us", "1 MiB MB/s");
            let mtl = |p: &'static str| {
                vec![
                    "--mca",
                    "pml",
                    "cm",
                    "--mca",
                    "mtl",
                    "ofi",
                    "--mca",
                    "mtl_ofi_provider_include",
                    p,
                ]
            };
            let mut figures = Vec::new();
            for (name, t) in [
                ("relink;ofi_rxm (mtl ofi)", mtl("relink")),
                ("tcp;ofi_rxm (mtl ofi)", mtl("tcp")),
                (
                    "tcp BTL (pml ob1)",
                    vec!["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"],
                ),
            ] {
                let (lat, bw) = mpi(&run, &exe, &prov, &wrapper, &t, iters);
                println!("{name:<34} {lat:>12.2} {bw:>12.1}");
                figures.push((lat, bw));
            }
            for (name, i) in [("tcp;ofi_rxm", 1), ("tcp BTL", 2)] {
                let (lr, br) = (figures[0].0 / figures[i].0, figures[0].1 / figures[i].1);
                println!("relink / {name}: latency {lr:.2} x, bandwidth {br:.2} x");
                println!(
                    "RESULT ofi mpi vs {} latency_ratio={lr:.3} bandwidth_ratio={br:.3}",
                    name.replace(' ', "_")
                );
            }
        }
    }
}
