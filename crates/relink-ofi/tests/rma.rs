//! RMA through libfabric's own API: the project's checked program
//! (`tests/ofi/rma.c`, built with the system C compiler against Debian's
//! libfabric-dev) writes rounds of checked bytes with `fi_writedata` and
//! `fi_inject_writedata` into the server's registered memory, the server
//! verifies each round when its remote CQ data arrives (once each, in
//! order, after the bytes), and the client reads the last round back with
//! `fi_read`, then counts on a word of the server's with atomics
//! (`fi_fetch_atomic`, `fi_compare_atomic`, `fi_atomic`: never applied
//! twice, an indeterminate one said so) — between two soft hosts, and
//! across resets of both hosts' devices during the writes and during the
//! atomics.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{command, free_port, provider_dir, Hosts, Root};
use relink_proctest::{transcripts, Proc};
use relink_skip::Skip;

/// `tests/ofi/rma.c` built into `root`, or the skip naming what is
/// missing.
fn build(root: &Path) -> Result<PathBuf, Skip> {
    let cc = relink_skip::find_program("cc", "gcc")?;
    let pkg = relink_skip::find_program("pkg-config", "pkg-config")?;
    let flags = Command::new(&pkg)
        .args(["--cflags", "--libs", "libfabric"])
        .output()
        .unwrap();
    if !flags.status.success() {
        return Err(Skip::missing(
            "libfabric-dev",
            "rma.c is built against libfabric's headers (apt-get install libfabric-dev)",
        ));
    }
    let exe = root.join("rma");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ofi/rma.c");
    let out = Command::new(cc)
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(String::from_utf8_lossy(&flags.stdout).split_whitespace())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building rma.c: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(exe)
}

/// The server on host b and the client on host a, `rounds` rounds and
/// `atomics` atomics.
fn start(exe: &Path, prov: &Path, hosts: &Hosts, rounds: u32, atomics: u32) -> (Proc, Proc) {
    let port = free_port().to_string();
    let (rounds, atomics) = (rounds.to_string(), atomics.to_string());
    let server = Proc::spawn(
        "server",
        command(exe, prov, &hosts.b)
            .env("FI_PROVIDER", "relink")
            .args(["-s", "127.0.0.2", &port, &rounds]),
    );
    std::thread::sleep(Duration::from_millis(300));
    let client = Proc::spawn(
        "client",
        command(exe, prov, &hosts.a)
            .env("FI_PROVIDER", "relink")
            .args(["-c", "127.0.0.2", &port, &rounds, &atomics]),
    );
    (server, client)
}

/// Both exit 0 within `timeout` with their summaries.
#[track_caller]
fn finish(server: &mut Proc, client: &mut Proc, timeout: Duration, rounds: u32) {
    let c = client.wait_exit(timeout);
    let s = server.wait_exit(Duration::from_secs(60));
    let all = transcripts(&[&*server, &*client]);
    assert!(
        c.is_some_and(|c| c.success()) && s.is_some_and(|s| s.success()),
        "rma failed (client {c:?}, server {s:?}):\n{all}"
    );
    assert_eq!(
        server.count(&format!(
            "rma server: {rounds} notices once each and in order"
        )),
        1,
        "{all}"
    );
    assert_eq!(client.count("read-back checked"), 1, "{all}");
    assert_eq!(server.count("the atomics' word is"), 1, "{all}");
}

#[test]
fn fi_writedata_lands_once_in_order_with_its_data_and_reads_back() {
    let root = Root::new("rma");
    let exe = match build(&root.0) {
        Ok(exe) => exe,
        Err(skip) => return relink_skip::skip_test("fi_writedata_lands_once", &skip),
    };
    let prov = provider_dir(&root.0);
    let hosts = Hosts::create(&root.0);
    let start_at = Instant::now();
    let (mut server, mut client) = start(&exe, &prov, &hosts, 3000, 3000);
    finish(&mut server, &mut client, Duration::from_secs(120), 3000);
    println!("rma, 3000 rounds: {:?}", start_at.elapsed());
    for l in client.stdout().iter().chain(server.stdout().iter()) {
        if !l.contains("rounds written") {
            println!("  {l}");
        }
    }
}

#[test]
fn fi_writedata_rides_through_device_resets_on_both_hosts() {
    let root = Root::new("rma-resets");
    let exe = match build(&root.0) {
        Ok(exe) => exe,
        Err(skip) => return relink_skip::skip_test("fi_writedata_rides_through_resets", &skip),
    };
    let prov = provider_dir(&root.0);
    let hosts = Hosts::create(&root.0);
    let (rounds, atomics) = (200_000, 60_000);
    let start_at = Instant::now();
    let (mut server, mut client) = start(&exe, &prov, &hosts, rounds, atomics);
    // Under way once both sessions are up; then each host's device is
    // reset three times, alternately; and twice more once the atomics
    // run.
    std::thread::sleep(Duration::from_secs(1));
    for i in 0..6 {
        Hosts::reset(if i % 2 == 0 { &hosts.a } else { &hosts.b });
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        client.wait_until(Duration::from_secs(300), |p| p.count("atomics begin") == 1),
        "the atomics did not begin:\n{}",
        transcripts(&[&server, &client])
    );
    for d in [&hosts.a, &hosts.b] {
        Hosts::reset(d);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        client.exited().is_none(),
        "the run ended before the last reset ({:?}): make it longer\n{}",
        start_at.elapsed(),
        transcripts(&[&server, &client])
    );
    finish(&mut server, &mut client, Duration::from_secs(400), rounds);
    let losses = server.count("transport lost") + client.count("transport lost");
    assert!(
        losses >= 2,
        "no loss seen by relink:\n{}",
        client.transcript()
    );
    println!(
        "rma across 6 resets during the writes and 2 during the atomics: {:?}, {losses} \
         transport losses, every round checked once",
        start_at.elapsed()
    );
    for l in client.stdout().iter().chain(server.stdout().iter()) {
        if !l.contains("rounds written") {
            println!("  {l}");
        }
    }
}
