//! Unmodified Open MPI over the provider: the project's checked MPI
//! program (`tests/mpi/check.c`: ping-pong, allreduce, alltoall, large
//! messages, many outstanding nonblocking messages, every payload
//! verified) runs with `--mca pml cm --mca mtl ofi` on `relink;ofi_rxm`,
//! its ranks spread over two soft hosts — also while the devices of both
//! hosts are reset, replaced and unplugged and plugged in again, many
//! times: the job ends with every rank's check passed, no MPI error.
//! The nine-host tier's job: 8 ranks, each on its own host (a network
//! namespace on a bridge, with its own soft device), through seeded
//! faults on several hosts at once.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{provider_dir, Hosts, Root};
use relink_proctest::Proc;
use relink_skip::Skip;

/// One MPI job at a time: the jobs are many processes each, and a
/// loaded machine running three at once starts ranks slowly enough to
/// look like a hang.
static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `mpicc` and `mpirun`, or the skip naming their packages; and the
/// turn to run a job ([`ONE_JOB`]).
fn mpi_tools() -> Result<(PathBuf, PathBuf, std::sync::MutexGuard<'static, ()>), Skip> {
    let turn = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    Ok((
        relink_skip::find_program("mpicc", "libopenmpi-dev")?,
        relink_skip::find_program("mpirun", "openmpi-bin")?,
        turn,
    ))
}

/// The checked program, built with `mpicc` into `root`; and a wrapper
/// that puts each rank on soft host a or b by its rank's parity (the
/// provider reads `FI_RELINK_SOFT_DIR` when MPI opens the fabric).
fn build(root: &Path, mpicc: &Path, hosts: &Hosts) -> (PathBuf, PathBuf) {
    let script = format!(
        "if [ $((OMPI_COMM_WORLD_RANK % 2)) = 0 ]; then FI_RELINK_SOFT_DIR={}; \
         else FI_RELINK_SOFT_DIR={}; fi\nexport FI_RELINK_SOFT_DIR\nexec \"$@\"\n",
        hosts.a.display(),
        hosts.b.display()
    );
    build_with(root, mpicc, &script)
}

/// The checked program, built with `mpicc` into `root`, and the wrapper
/// `mpirun` starts each rank through: a shell script of `script` (which
/// ends by exec'ing its arguments).
fn build_with(root: &Path, mpicc: &Path, script: &str) -> (PathBuf, PathBuf) {
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
    std::fs::write(&wrapper, format!("#!/bin/sh\n{script}")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    (exe, wrapper)
}

/// `mpirun -np RANKS` of the check for `seconds` over relink;ofi_rxm,
/// with `c` as the `mpirun` command (`Command::new(mpirun)`, or one run
/// in a network namespace).
fn mpirun(
    mut c: Command,
    prov: &Path,
    wrapper: &Path,
    exe: &Path,
    ranks: u32,
    seconds: u32,
) -> Proc {
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
    let (mpicc, run, _turn) = match mpi_tools() {
        Ok(t) => t,
        Err(skip) => return relink_skip::skip_test("open_mpi_runs_the_checked_program", &skip),
    };
    let root = Root::new("mpi");
    let prov = provider_dir(&root.0);
    let hosts = Hosts::create(&root.0);
    let (exe, wrapper) = build(&root.0, &mpicc, &hosts);
    let start = Instant::now();
    let mut job = mpirun(Command::new(&run), &prov, &wrapper, &exe, 2, 2);
    passed(&mut job, 2, Duration::from_secs(300));
    println!("2 ranks, 2 s of rounds: {:?}", start.elapsed());
    for l in job.stdout() {
        println!("  {l}");
    }
}

#[test]
fn open_mpi_rides_through_resets_replacements_and_replugs_on_both_hosts() {
    let (mpicc, run, _turn) = match mpi_tools() {
        Ok(t) => t,
        Err(skip) => return relink_skip::skip_test("open_mpi_rides_through_faults", &skip),
    };
    let root = Root::new("mpi-faults");
    let prov = provider_dir(&root.0);
    let hosts = Hosts::create(&root.0);
    let (exe, wrapper) = build(&root.0, &mpicc, &hosts);
    let start = Instant::now();
    let seconds = 20;
    let mut job = mpirun(Command::new(&run), &prov, &wrapper, &exe, 4, seconds);
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

#[test]
fn open_mpi_8_ranks_on_8_namespace_hosts_ride_through_faults_on_several_hosts_at_once() {
    use rand::{Rng, SeedableRng};
    let test = "open_mpi_8_ranks_on_8_namespace_hosts_ride_through_faults";
    let (mpicc, run, _turn) = match mpi_tools() {
        Ok(t) => t,
        Err(skip) => return relink_skip::skip_test(test, &skip),
    };
    let prefix = format!("relink-ofi-{}", std::process::id());
    // mpirun runs on the hub (the bridge's host); rank k on spoke k + 1.
    let star = match relink_proctest::netns::Star::new(&prefix, 8) {
        Ok(s) => s,
        Err(why) => return relink_skip::skip_test(test, &Skip::new(why)),
    };
    let root = Root::new("mpi-nine");
    let prov = provider_dir(&root.0);
    let dirs: Vec<PathBuf> = (1..=8).map(|k| root.0.join(format!("h{k}"))).collect();
    for (dir, (_, addr)) in dirs.iter().zip(&star.spokes) {
        relink_soft::Registry::open(dir)
            .unwrap()
            .add(
                "soft0",
                vec![format!("{addr}/24").parse().unwrap()],
                None,
                None,
            )
            .unwrap();
    }
    // Rank k on spoke k + 1, with that host's registry.
    let (exe, wrapper) = build_with(
        &root.0,
        &mpicc,
        &format!(
            "k=$((OMPI_COMM_WORLD_RANK + 1))\nFI_RELINK_SOFT_DIR={}/h$k\n\
             export FI_RELINK_SOFT_DIR\nexec ip netns exec {prefix}-$k \"$@\"\n",
            root.0.display()
        ),
    );

    // PMIx serves the ranks over TCP: on the bridge, since each rank has
    // loopback of its own.
    let mut c = star.hub.command(&run);
    c.env("PMIX_MCA_ptl_tcp_remote_connections", "1")
        .env("PMIX_MCA_ptl_tcp_if_include", "br0");
    let start = Instant::now();
    let mut job = mpirun(c, &prov, &wrapper, &exe, 8, 25);
    assert!(
        job.wait_until(Duration::from_secs(180), |p| p.count(": running") == 8),
        "the ranks did not start:\n{}",
        job.transcript()
    );
    // 16 steps 0.4-1.2 s apart, each on 1 to 3 hosts at once: mostly
    // resets, some replacements, some unplugs and replugs.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(8);
    let mut faults = Vec::new();
    let mut per_host = [0u32; 8];
    for _ in 0..16 {
        std::thread::sleep(Duration::from_millis(rng.gen_range(400..1200)));
        let mut hosts: Vec<usize> = Vec::new();
        let many = rng.gen_range(1..=3);
        while hosts.len() < many {
            let h = rng.gen_range(0..8);
            if !hosts.contains(&h) {
                hosts.push(h);
            }
        }
        let mut step = Vec::new();
        let mut unplugged = Vec::new();
        for &h in &hosts {
            let reg = relink_soft::Registry::open(&dirs[h]).unwrap();
            per_host[h] += 1;
            match rng.gen_range(0..6) {
                0 => {
                    reg.replace("soft0", None).unwrap();
                    step.push(format!("h{}: replaced", h + 1));
                }
                1 => {
                    unplugged.push((h, reg.remove("soft0").unwrap()));
                    step.push(format!("h{}: unplugged and plugged in again", h + 1));
                }
                _ => {
                    reg.reset("soft0").unwrap();
                    step.push(format!("h{}: reset", h + 1));
                }
            }
        }
        if !unplugged.is_empty() {
            std::thread::sleep(Duration::from_millis(300));
            for (h, d) in unplugged {
                relink_soft::Registry::open(&dirs[h])
                    .unwrap()
                    .add("soft0", d.addrs, None, None)
                    .unwrap();
            }
        }
        faults.push(step.join(", "));
    }
    let faulted = start.elapsed();
    passed(&mut job, 8, Duration::from_secs(900));
    let losses = job.count("transport lost");
    let n: usize = per_host.iter().map(|&c| c as usize).sum();
    assert!(
        losses >= n / 2,
        "relink saw {losses} losses for {n} faults\n{}",
        job.transcript()
    );
    println!(
        "8 ranks on 8 namespace hosts: {n} faults in 16 steps in the first {faulted:.1?} (per \
         host {per_host:?}), {losses} transport losses, job done in {:.1?}",
        start.elapsed()
    );
    for (k, f) in faults.iter().enumerate() {
        println!("  step {}: {f}", k + 1);
    }
    for l in job.stdout() {
        println!("  {l}");
    }
}
