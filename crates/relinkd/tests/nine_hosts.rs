//! Nine hosts: one target and eight initiators in network namespaces on
//! a bridge, on the soft TCP fabric, under seeded device faults and
//! target restarts while clients copy.
//!
//! The target's relinkd exports a volume to each initiator (`diskK`) and
//! one more, `shared`, to all eight. Each initiator's relinkd connects to
//! both; behind it a client in the root namespace copies in rounds until
//! the faults are over: a random image into `diskK` (qemu-img convert on
//! I1–I6, rate-limited so copies are under way when faults land; nbdcopy
//! at its defaults on I7 and I8), `qemu-img compare` of the image with
//! `diskK`, and `shared` read out whole and compared with what the target
//! holds. Meanwhile a seeded schedule disturbs one to three hosts at once
//! (the target among them about a third of the time) with a device
//! reset, an unplug and replug, or a replacement, and waits until every
//! session it touched has recovered; a third of the way through the
//! target relinkd is stopped with SIGTERM and started again, two thirds
//! of the way it is killed with SIGKILL and started again.
//!
//! What must hold: every client command succeeds (no client sees an
//! error), every compare finds the bytes equal, and at the end every
//! target file holds what its client last wrote. The test prints each
//! fault, each outage per session (p50, p99, max across the sessions),
//! the time every connection took to reconnect after each target restart,
//! and the clients' rounds.
//!
//! Steps come 0.2–1 s apart (seeded), so the clients' copies are under
//! way when faults land. Size: `RELINK_NINE_HOSTS=full` runs 120 steps
//! with 64 MiB volumes; the default (CI's) runs 30 steps with 16 MiB
//! volumes.
//! `RELINK_NINE_HOSTS_SEED` picks the schedule (default 30).
//!
//! Needs root, `ip` (iproute2), qemu-img and qemu-io (qemu-utils),
//! nbdcopy (libnbd-bin) and the `relink` CLI built next to relinkd;
//! without them the test reports the skip through relink-skip and returns
//! (a failure under `CI=true` for all but root).

mod common;
mod netns_hosts;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::images::{empty_volume, random_image, transcripts};
use common::{run_bounded, tool, wait_for, Daemon, STEP};
use netns_hosts::{control, star, star_guid, Host, Star, PORT};
use rand::{Rng, SeedableRng};
use relink_skip::skip_test;
use relinkd::control::protocol::{Command as Ctl, DevicesResult, StatusResult};

/// How big a run is.
struct Size {
    /// Fault steps.
    steps: usize,
    /// Bytes of each volume.
    volume: u64,
    /// The schedule's seed.
    seed: u64,
}

impl Size {
    /// From `RELINK_NINE_HOSTS` (`full`, or the CI size) and
    /// `RELINK_NINE_HOSTS_SEED`.
    fn from_env() -> Size {
        let full = std::env::var("RELINK_NINE_HOSTS").is_ok_and(|v| v == "full");
        let seed = std::env::var("RELINK_NINE_HOSTS_SEED")
            .ok()
            .map(|s| s.parse().expect("RELINK_NINE_HOSTS_SEED: a number"))
            .unwrap_or(30);
        if full {
            Size {
                steps: 120,
                volume: 64 << 20,
                seed,
            }
        } else {
            Size {
                steps: 30,
                volume: 16 << 20,
                seed,
            }
        }
    }
}

/// One disturbance of a host's soft device.
#[derive(Debug, Clone, Copy)]
enum Disturb {
    Reset,
    Replug,
    Replace,
}

/// The daemons of the star: the target's and the initiators'.
struct Daemons {
    target: Daemon,
    inits: Vec<Daemon>,
}

impl Daemons {
    fn all(&self) -> Vec<&Daemon> {
        std::iter::once(&self.target).chain(&self.inits).collect()
    }
}

/// What a client did: its rounds, or the first failure.
struct ClientRecord {
    rounds: u32,
    bytes: u64,
    /// The image its last write round copied into its disk.
    last_image: Option<PathBuf>,
    failure: Option<String>,
}

fn url(name: &str, socket: &Path) -> String {
    format!("nbd+unix:///{name}?socket={}", socket.display())
}

/// Runs `c` bounded by [`STEP`]: `Err` with what it printed when it fails
/// or hangs.
fn run(what: &str, c: &mut Command) -> Result<(), String> {
    match run_bounded(c) {
        None => Err(format!("{what}: hung")),
        Some(out) if out.status.success() => Ok(()),
        Some(out) => Err(format!(
            "{what}: {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

/// One initiator's client: rounds of write, compare, read-back of the
/// shared volume, until `stop` (at least one round).
#[allow(clippy::too_many_arguments)]
fn client(
    k: usize,
    nbdcopy: Option<PathBuf>,
    images: [PathBuf; 2],
    disk: String,
    shared: String,
    shared_image: PathBuf,
    scratch: PathBuf,
    stop: Arc<AtomicBool>,
) -> ClientRecord {
    let mut rec = ClientRecord {
        rounds: 0,
        bytes: 0,
        last_image: None,
        failure: None,
    };
    let size = std::fs::metadata(&images[0]).unwrap().len();
    let back = scratch.join(format!("shared-back-{k}.img"));
    while rec.rounds == 0 || !stop.load(Ordering::Relaxed) {
        let image = &images[rec.rounds as usize % 2];
        let step = || -> Result<(), String> {
            match &nbdcopy {
                Some(nbdcopy) => run(
                    "nbdcopy into the disk",
                    Command::new(nbdcopy).arg(image).arg(&disk),
                )?,
                None => run(
                    "qemu-img convert into the disk",
                    Command::new("qemu-img")
                        .args(["convert", "-n", "-r", "8M", "-f", "raw", "-O", "raw"])
                        .arg(image)
                        .arg(&disk),
                )?,
            }
            run(
                "qemu-img compare of the disk",
                Command::new("qemu-img")
                    .args(["compare", "-f", "raw", "-F", "raw"])
                    .arg(image)
                    .arg(&disk),
            )?;
            let _ = std::fs::remove_file(&back);
            match &nbdcopy {
                Some(nbdcopy) => {
                    empty_volume(&back, size);
                    run(
                        "nbdcopy out of the shared volume",
                        Command::new(nbdcopy).arg(&shared).arg(&back),
                    )?
                }
                None => run(
                    "qemu-img convert out of the shared volume",
                    Command::new("qemu-img")
                        .args(["convert", "-f", "raw", "-O", "raw"])
                        .arg(&shared)
                        .arg(&back),
                )?,
            }
            if std::fs::read(&back).unwrap() != std::fs::read(&shared_image).unwrap() {
                return Err("the shared volume read out differs from the target's".into());
            }
            Ok(())
        };
        match step() {
            Ok(()) => {
                rec.rounds += 1;
                rec.bytes += 2 * size;
                rec.last_image = Some(image.clone());
            }
            Err(e) => {
                rec.failure = Some(format!("I{} round {}: {e}", k + 1, rec.rounds + 1));
                return rec;
            }
        }
    }
    rec
}

/// A connection's counters, as its initiator's `status` shows them.
#[derive(Debug, Clone, Default)]
struct Seen {
    losses: u64,
    recoveries: u64,
    ready: bool,
}

/// Every connection's counters of initiator host `k`, by name.
fn seen(ctl: &Path) -> BTreeMap<String, (Seen, Vec<f64>)> {
    let st: StatusResult = control(ctl, Ctl::Status {});
    st.connections
        .into_iter()
        .map(|c| {
            let s = Seen {
                losses: c.session.losses,
                recoveries: c.session.recoveries,
                ready: c.state == "ready" && c.session.state == "Established",
            };
            (c.name, (s, c.last_outages_secs))
        })
        .collect()
}

/// The value at quantile `q` of `v` (sorted in place).
fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Whether the relinkd with the control socket `ctl` lists a device
/// named `soft0`.
fn has_soft0(ctl: &Path) -> bool {
    let d: DevicesResult = control(ctl, Ctl::Devices {});
    d.devices.iter().any(|d| d.name == "soft0")
}

/// Disturbs the `soft0` of each host of `hits` (0 = the target); replugs
/// wait until the host's relinkd (control socket `ctls[h]`) no longer
/// lists the device before plugging it back.
fn disturb(star: &Star, ctls: &[PathBuf], daemons: &Daemons, hits: &[(usize, Disturb)]) {
    let host = |h: usize| -> &Host {
        if h == 0 {
            &star.t
        } else {
            &star.initiators[h - 1]
        }
    };
    let mut replugs = Vec::new();
    for &(h, what) in hits {
        match what {
            Disturb::Reset => {
                host(h).soft_device(&["reset", "soft0"]);
            }
            Disturb::Replace => {
                host(h).soft_device(&["replace", "soft0"]);
            }
            Disturb::Replug => {
                host(h).soft_device(&["remove", "soft0"]);
                replugs.push(h);
            }
        }
    }
    for h in replugs {
        wait_for(
            &format!("host {}'s relinkd seeing its device go", host(h).what),
            &daemons.all(),
            || !has_soft0(&ctls[h]),
        );
        let addr = format!("{}/24", host(h).addr);
        host(h).soft_device(&["add", "soft0", "--addr", &addr, "--guid", &star_guid(h)]);
    }
}

#[test]
fn eight_initiators_copy_through_device_faults_on_every_host_and_target_restarts() {
    let test = "eight_initiators_copy_through_device_faults_on_every_host_and_target_restarts";
    let started = Instant::now();
    let size = Size::from_env();
    let nbdcopy = match tool("nbdcopy") {
        Ok(p) => p,
        Err(skip) => return skip_test(test, &skip),
    };
    let star = match star("nine", 8) {
        Ok(s) => s,
        Err(skip) => return skip_test(test, &skip),
    };
    let root = star.root.0.clone();
    let n = star.initiators.len();

    // The images the clients write (two, alternated), the volumes.
    let images = [root.join("image-a.img"), root.join("image-b.img")];
    random_image(&images[0], size.volume, size.seed * 2 + 1);
    random_image(&images[1], size.volume, size.seed * 2 + 2);
    let shared_image = root.join("shared.img");
    random_image(&shared_image, size.volume, size.seed * 2 + 3);
    let vols: Vec<PathBuf> = (0..n)
        .map(|k| root.join(format!("disk{}.img", k + 1)))
        .collect();
    for v in &vols {
        empty_volume(v, size.volume);
    }

    // The target: `diskK` on port PORT+K, `shared` on PORT.
    let t_conf = root.join("target.toml");
    let t_ctl = root.join("target.ctl");
    let mut text = format!(
        "[backend]\nsoft_dir = {:?}\n\n[control]\nsocket = {t_ctl:?}\n\n",
        star.t.soft_dir
    );
    text += &format!(
        "[[export]]\nname = \"shared\"\nlisten = \"{}:{PORT}\"\nfile = {shared_image:?}\n\n",
        star.t.addr
    );
    for (k, v) in vols.iter().enumerate() {
        text += &format!(
            "[[export]]\nname = \"disk{}\"\nlisten = \"{}:{}\"\nfile = {v:?}\n\n",
            k + 1,
            star.t.addr,
            PORT + 1 + k as u16
        );
    }
    std::fs::write(&t_conf, text).unwrap();
    let mut target = star.t.relinkd("target", &t_conf);
    for k in 0..n {
        target.expect_line(&format!("export disk{} listening", k + 1));
    }
    target.expect_line("export shared listening");
    target.expect_line("control socket");

    // The initiators, each with `diskK` and `shared`.
    const NAMES: [&str; 8] = [
        "initiator I1",
        "initiator I2",
        "initiator I3",
        "initiator I4",
        "initiator I5",
        "initiator I6",
        "initiator I7",
        "initiator I8",
    ];
    let mut inits = Vec::new();
    let mut ctls = Vec::new();
    let mut urls = Vec::new();
    for (k, host) in star.initiators.iter().enumerate() {
        let conf = root.join(format!("init{}.toml", k + 1));
        let ctl = root.join(format!("init{}.ctl", k + 1));
        let (disk_sock, shared_sock) = (
            root.join(format!("disk{}.sock", k + 1)),
            root.join(format!("shared{}.sock", k + 1)),
        );
        let text = format!(
            "[backend]\nsoft_dir = {:?}\n\n[control]\nsocket = {ctl:?}\n\n\
             [[connect]]\nname = \"disk{k1}\"\ntargets = [\"{t}:{p}\"]\nnbd_socket = {disk_sock:?}\ngive_up_secs = 300\n\n\
             [[connect]]\nname = \"shared\"\ntargets = [\"{t}:{PORT}\"]\nnbd_socket = {shared_sock:?}\ngive_up_secs = 300\n",
            host.soft_dir,
            k1 = k + 1,
            t = star.t.addr,
            p = PORT + 1 + k as u16,
        );
        std::fs::write(&conf, text).unwrap();
        let mut d = host.relinkd(NAMES[k], &conf);
        d.expect_line(&format!("connect disk{} serving nbd", k + 1));
        d.expect_line("connect shared serving nbd");
        inits.push(d);
        ctls.push(ctl);
        urls.push((
            url(&format!("disk{}", k + 1), &disk_sock),
            url("shared", &shared_sock),
        ));
    }
    let mut daemons = Daemons { target, inits };
    println!(
        "nine hosts up in {:.1?}: 1 target, {n} initiators, {} connections",
        started.elapsed(),
        2 * n
    );

    // The clients.
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = urls
        .iter()
        .enumerate()
        .map(|(k, (disk, shared))| {
            let (images, disk, shared) = (images.clone(), disk.clone(), shared.clone());
            let (shared_image, scratch, stop) = (shared_image.clone(), root.clone(), stop.clone());
            let nbdcopy = (k >= 6).then(|| nbdcopy.clone());
            thread::spawn(move || {
                client(
                    k,
                    nbdcopy,
                    images,
                    disk,
                    shared,
                    shared_image,
                    scratch,
                    stop,
                )
            })
        })
        .collect();

    // The faults.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(size.seed);
    let mut before: Vec<_> = ctls.iter().map(|c| seen(c)).collect();
    let mut outages: Vec<f64> = Vec::new();
    let mut reconnects: Vec<f64> = Vec::new();
    let mut faults_per_host = [0u32; 9];
    let mut hit_at_once = [0u32; 4];
    for step in 0..size.steps {
        thread::sleep(Duration::from_millis(rng.gen_range(200..1000)));
        if step == size.steps / 3 || step == 2 * size.steps / 3 {
            let sig = if step == size.steps / 3 {
                "TERM"
            } else {
                "KILL"
            };
            let counts: Vec<Vec<usize>> = daemons
                .inits
                .iter()
                .map(|d| {
                    ["shared".to_string()]
                        .into_iter()
                        .chain((1..=n).map(|k| format!("disk{k}")))
                        .map(|c| d.count(&format!("connect {c} reconnected")))
                        .collect()
                })
                .collect();
            let t0 = Instant::now();
            let s = if sig == "TERM" {
                daemons.target.terminate()
            } else {
                daemons.target.kill9()
            };
            assert_eq!(s.success(), sig == "TERM", "SIG{sig}: {s}");
            thread::sleep(Duration::from_millis(300));
            daemons.target = star.t.relinkd("target (restarted)", &t_conf);
            daemons.target.expect_line("export shared listening");
            daemons.target.expect_line("control socket");
            let up = Instant::now();
            // Each connection's reconnection, timed from the new target's
            // start (its exports and control socket up).
            let mut pending: Vec<(usize, String, usize)> = Vec::new();
            for (k, c) in counts.iter().enumerate() {
                pending.push((k, "shared".into(), c[0]));
                pending.push((k, format!("disk{}", k + 1), c[k + 1]));
            }
            let deadline = Instant::now() + STEP;
            while !pending.is_empty() {
                pending.retain(|(k, c, was)| {
                    let now = daemons.inits[*k].count(&format!("connect {c} reconnected"));
                    if now > *was {
                        reconnects.push(up.elapsed().as_secs_f64());
                        false
                    } else {
                        true
                    }
                });
                assert!(
                    Instant::now() < deadline,
                    "after the target's SIG{sig}, not reconnected: {pending:?}\n{}",
                    transcripts(&daemons.all())
                );
                thread::sleep(Duration::from_millis(20));
            }
            println!(
                "step {}: target SIG{sig} and restart: {} connections reconnected {:.2} s after the \
                 signal, {:.2} s after the new target was up",
                step + 1,
                2 * n,
                t0.elapsed().as_secs_f64(),
                up.elapsed().as_secs_f64()
            );
            before = ctls.iter().map(|c| seen(c)).collect();
            continue;
        }
        // One to three distinct hosts, the target about a third of the
        // time.
        let many = rng.gen_range(1..=3usize);
        let mut hits: Vec<(usize, Disturb)> = Vec::new();
        while hits.len() < many {
            let h = if rng.gen_bool(1.0 / 3.0) {
                0
            } else {
                rng.gen_range(1..=n)
            };
            if hits.iter().any(|&(x, _)| x == h) {
                continue;
            }
            let what = match rng.gen_range(0..3) {
                0 => Disturb::Reset,
                1 => Disturb::Replug,
                _ => Disturb::Replace,
            };
            hits.push((h, what));
        }
        let t0 = Instant::now();
        let mut all_ctls = vec![t_ctl.clone()];
        all_ctls.extend(ctls.iter().cloned());
        disturb(&star, &all_ctls, &daemons, &hits);
        for &(h, _) in &hits {
            faults_per_host[h] += 1;
        }
        hit_at_once[hits.len()] += 1;
        // Every connection of a disturbed initiator, and every connection
        // when the target was disturbed, loses its session once at least
        // and recovers.
        let touched: Vec<usize> = if hits.iter().any(|&(h, _)| h == 0) {
            (0..n).collect()
        } else {
            hits.iter().map(|&(h, _)| h - 1).collect()
        };
        for &k in &touched {
            let all = daemons.all();
            let was = &before[k];
            let mut now = BTreeMap::new();
            wait_for(
                &format!(
                    "I{}'s connections losing their session and recovering",
                    k + 1
                ),
                &all,
                || {
                    now = seen(&ctls[k]);
                    now.iter().all(|(name, (s, _))| {
                        s.ready
                            && s.losses > was[name].0.losses
                            && s.recoveries > was[name].0.recoveries
                    })
                },
            );
            for (name, (s, last)) in &now {
                let new = (s.recoveries - was[name].0.recoveries) as usize;
                outages.extend(last.iter().rev().take(new).copied());
            }
        }
        println!(
            "step {}: {hits:?} (0 = the target): {} initiators' sessions recovered in {:.2} s",
            step + 1,
            touched.len(),
            t0.elapsed().as_secs_f64()
        );
        before = ctls.iter().map(|c| seen(c)).collect();
    }
    let faulted = started.elapsed();
    stop.store(true, Ordering::Relaxed);

    let records: Vec<ClientRecord> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let all = daemons.all();
    let failures: Vec<&String> = records.iter().filter_map(|r| r.failure.as_ref()).collect();
    assert!(
        failures.is_empty(),
        "clients saw errors: {failures:#?}\n{}",
        transcripts(&all)
    );
    drop(all);
    for d in daemons.inits.iter_mut() {
        d.terminate_ok();
    }
    daemons.target.terminate_ok();
    for (k, (r, v)) in records.iter().zip(&vols).enumerate() {
        let last = r.last_image.as_ref().expect("a round");
        assert!(
            std::fs::read(v).unwrap() == std::fs::read(last).unwrap(),
            "I{}'s volume on the target differs from the image its client last wrote",
            k + 1
        );
    }

    let mut o = outages.clone();
    let mut r = reconnects.clone();
    println!(
        "nine hosts, seed {}: {} fault steps (hosts at once: 1 {} / 2 {} / 3 {}), faults per host \
         (T, I1..I{n}) {:?}, 2 target restarts",
        size.seed,
        size.steps - 2,
        hit_at_once[1],
        hit_at_once[2],
        hit_at_once[3],
        faults_per_host
    );
    println!(
        "outages per session: {} (p50 {:.3} s, p99 {:.3} s, max {:.3} s); reconnection after a \
         target restart (from the new target's start): {} (p50 {:.3} s, p99 {:.3} s, max {:.3} s)",
        o.len(),
        quantile(&mut o, 0.5),
        quantile(&mut o, 0.99),
        quantile(&mut o, 1.0),
        r.len(),
        quantile(&mut r, 0.5),
        quantile(&mut r, 0.99),
        quantile(&mut r, 1.0),
    );
    let bytes: u64 = records.iter().map(|r| r.bytes).sum();
    println!(
        "clients: rounds {:?}, {} MiB moved and checked; faults over in {faulted:.1?}, whole test {:.1?}",
        records.iter().map(|r| r.rounds).collect::<Vec<_>>(),
        bytes >> 20,
        started.elapsed()
    );
}
