//! Unmodified Open MPI over the provider: the project's checked MPI
//! program (`tests/mpi/check.c`: ping-pong, allreduce, alltoall, large
//! messages, many outstanding nonblocking messages, every payload
//! verified) runs with `--mca pml cm --mca mtl ofi` on `relink;ofi_rxm`,
//! its ranks spread over two soft hosts — also while the devices of both
//! hosts are reset, replaced and unplugged and plugged in again, many
//! times: the job ends with every rank's check passed, no MPI error.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{provider_dir, Hosts, Root};
use relink_proctest::Proc;
use relink_skip::Skip;

/// `mpicc` and `mpirun`, or the skip naming their packages.
fn mpi_tools() -> Result<(PathBuf, PathBuf), Skip> {
    Ok((
        relink_skip::find_program("mpicc", "libopenmpi-dev")?,
        relink_skip::find_program("mpirun", "openmpi-bin")?,
    ))
}

/// The checked program, built with `mpicc` into `root`; and a wrapper
/// that puts each rank on soft host a or b by its rank's parity (the
/// provider reads `FI_RELINK_SOFT_DIR` when MPI opens the fabric).
fn build(root: &Path, mpicc: &Path, hosts: &Hosts) -> (PathBuf, PathBuf) {
    let exe = root.join("check");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi/check.c");
    let out = Command::new(mpicc)
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mpicc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wrapper = root.join("on-host.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ $((OMPI_COMM_WORLD_RANK % 2)) = 0 ]; then FI_RELINK_SOFT_DIR={}; \
             else FI_RELINK_SOFT_DIR={}; fi\nexport FI_RELINK_SOFT_DIR\nexec \"$@\"\n",
            hosts.a.display(),
            hosts.b.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    (exe, wrapper)
}

/// `mpirun -np RANKS` of the check for `seconds` over relink;ofi_rxm.
fn mpirun(
    mpirun: &Path,
    prov: &Path,
    wrapper: &Path,
    exe: &Path,
    ranks: u32,
    seconds: u32,
) -> Proc {
    let mut c = Command::new(mpirun);
    for (k, _) in std::env::vars() {
        if k.starts_with("FI_") || k.starts_with("OMPI_") {
            c.env_remove(k);
        }
    }
    c.env("FI_PROVIDER_PATH", prov)
        .env("FI_RELINK_LOG", "relink_core::session::recovery=info")
        .args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(ranks.to_string())
        .args(["--mca", "pml", "cm", "--mca", "mtl", "ofi"])
        .args(["--mca", "mtl_ofi_provider_include", "relink"])
        .args(["-x", "FI_PROVIDER_PATH", "-x", "FI_RELINK_LOG"])
        .arg(wrapper)
        .arg(exe)
        .arg(seconds.to_string());
    Proc::spawn("mpirun", &mut c)
}

/// The job ended with exit 0 and each rank's OK line.
#[track_caller]
fn passed(job: &mut Proc, ranks: u32, timeout: Duration) {
    let status = job.wait_exit(timeout);
    assert!(
        status.is_some_and(|s| s.success()),
        "the MPI job failed ({status:?}):\n{}",
        job.transcript()
    );
    for r in 0..ranks {
        assert_eq!(
            job.count(&format!("check: rank {r} of {ranks}: OK")),
            1,
            "rank {r} did not pass:\n{}",
            job.transcript()
        );
    }
}

#[test]
fn open_mpi_runs_the_checked_program_over_relink() {
    let (mpicc, run) = match mpi_tools() {
        Ok(t) => t,
        Err(skip) => return relink_skip::skip_test("open_mpi_runs_the_checked_program", &skip),
    };
    let root = Root::new("mpi");
    let prov = provider_dir(&root.0);
    let hosts = Hosts::create(&root.0);
    let (exe, wrapper) = build(&root.0, &mpicc, &hosts);
    let start = Instant::now();
    let mut job = mpirun(&run, &prov, &wrapper, &exe, 2, 2);
    passed(&mut job, 2, Duration::from_secs(300));
    println!("2 ranks, 2 s of rounds: {:?}", start.elapsed());
    for l in job.stdout() {
        println!("  {l}");
    }
}

#[test]
fn open_mpi_rides_through_resets_replacements_and_replugs_on_both_hosts() {
    let (mpicc, run) = match mpi_tools() {
        Ok(t) => t,
        Err(skip) => return relink_skip::skip_test("open_mpi_rides_through_faults", &skip),
    };
    let root = Root::new("mpi-faults");
    let prov = provider_dir(&root.0);
    let hosts = Hosts::create(&root.0);
    let (exe, wrapper) = build(&root.0, &mpicc, &hosts);
    let start = Instant::now();
    let seconds = 20;
    let mut job = mpirun(&run, &prov, &wrapper, &exe, 4, seconds);
    // Once every rank runs its rounds, fault both hosts: each device
    // reset 5 times, replaced once, unplugged and plugged in again once,
    // alternating hosts.
    assert!(
        job.wait_until(Duration::from_secs(120), |p| p.count(": running") == 4),
        "the ranks did not start:\n{}",
        job.transcript()
    );
    let mut faults = Vec::new();
    for round in 0..7 {
        for (name, dir) in [("a", &hosts.a), ("b", &hosts.b)] {
            let reg = relink_soft::Registry::open(dir).unwrap();
            let what = match round {
                0..=4 => {
                    reg.reset("soft0").unwrap();
                    "reset"
                }
                5 => {
                    reg.replace("soft0", None).unwrap();
                    "replaced"
                }
                _ => {
                    let d = reg.remove("soft0").unwrap();
                    std::thread::sleep(Duration::from_millis(300));
                    reg.add("soft0", d.addrs, None, None).unwrap();
                    "unplugged and plugged in again"
                }
            };
            faults.push(format!("{name}: {what}"));
            std::thread::sleep(Duration::from_millis(400));
        }
    }
    let faulted = start.elapsed();
    passed(&mut job, 4, Duration::from_secs(600));
    // Each fault takes down every session on that device that is up; one
    // that lands while a session still recovers from the last is no new
    // loss for it, so the bound is loose (a loaded machine recovers slower).
    let losses = job.count("transport lost");
    assert!(
        losses >= faults.len() / 2,
        "relink saw {losses} losses for {} faults",
        faults.len()
    );
    println!(
        "4 ranks on 2 soft hosts, {} faults in the first {faulted:?} ({}), {losses} transport \
         losses, job done in {:?}",
        faults.len(),
        faults.join(", "),
        start.elapsed()
    );
    for l in job.stdout() {
        println!("  {l}");
    }
}
