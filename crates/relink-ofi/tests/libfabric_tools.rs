//! The provider through libfabric's own programs (Debian's
//! libfabric-bin): `fi_info` lists it, alone and under `ofi_rxm`, with its
//! parameters; `fi_pingpong` runs over it between two soft hosts — as an
//! `FI_EP_MSG` endpoint of the provider's and as `FI_EP_RDM` through
//! `ofi_rxm` — with its data check on, and rides through resets of the
//! devices of both hosts during the run; and `ofi_rxm` on a shared receive
//! context of the provider's (`FI_OFI_RXM_USE_SRX=1`).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{command, fabric_tool, free_port, provider_dir, Hosts, Root};
use relink_proctest::{transcripts, Proc};

/// Run `fi_info ARGS` against the provider on soft host `host`.
fn fi_info(
    prov: &Path,
    host: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (bool, String, String) {
    let fi_info = fabric_tool("fi_info").expect("checked by the caller");
    let out = command(&fi_info, prov, host)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn fi_info_lists_the_provider_its_rdm_layering_and_its_parameters() {
    if let Err(skip) = fabric_tool("fi_info") {
        return relink_skip::skip_test("fi_info_lists_the_provider", &skip);
    }
    let root = Root::new("fi-info");
    let prov = provider_dir(&root.0);
    let hosts = Hosts::create(&root.0);

    let (ok, out, err) = fi_info(&prov, &hosts.a, &["-p", "relink"], &[]);
    assert!(ok, "fi_info -p relink failed:\n{out}{err}");
    assert!(out.contains("provider: relink\n"), "{out}");
    assert!(out.contains("type: FI_EP_MSG"), "{out}");
    assert!(out.contains("domain: soft0"), "{out}");

    let (ok, out, err) = fi_info(
        &prov,
        &hosts.a,
        &["-p", "relink;ofi_rxm", "-t", "FI_EP_RDM", "-c", "FI_TAGGED"],
        &[],
    );
    assert!(ok, "fi_info of relink;ofi_rxm failed:\n{out}{err}");
    assert!(out.contains("provider: relink;ofi_rxm"), "{out}");
    assert!(out.contains("type: FI_EP_RDM"), "{out}");

    // Its whole answer (-v): the addresses and attributes libfabric's
    // layers read.
    let (ok, out, _) = fi_info(&prov, &hosts.b, &["-p", "relink", "-v"], &[]);
    assert!(ok);
    assert!(out.contains("FI_SOCKADDR_IN"), "{out}");
    assert!(out.contains("127.0.0.2"), "host b's address: {out}");

    // `fi_info -e` lists every FI_RELINK_ parameter with its help.
    let (_, out, _) = fi_info(&prov, &hosts.a, &["-e"], &[]);
    for p in [
        "BACKEND",
        "SOFT_DIR",
        "ADDR",
        "GIVE_UP",
        "CONNECT_TIMEOUT",
        "MAX_MSG_SIZE",
        "QUEUE_SIZE",
    ] {
        assert!(
            out.contains(&format!("# FI_RELINK_{p}:")),
            "FI_RELINK_{p} not listed"
        );
    }
}

#[test]
fn a_bad_parameter_is_named_and_nothing_is_answered() {
    if let Err(skip) = fabric_tool("fi_info") {
        return relink_skip::skip_test("a_bad_parameter_is_named", &skip);
    }
    let root = Root::new("bad-param");
    let prov = provider_dir(&root.0);
    let hosts = Hosts::create(&root.0);
    let (ok, out, err) = fi_info(
        &prov,
        &hosts.a,
        &["-p", "relink"],
        &[("FI_RELINK_MAX_MSG_SIZE", "12")],
    );
    assert!(!ok, "answered with a bad parameter:\n{out}");
    assert!(
        err.contains("FI_RELINK_MAX_MSG_SIZE=\"12\": not a size from 64 bytes to 1 GiB"),
        "the variable is not named:\n{err}"
    );
    // And with no device, an answer says nothing either.
    let empty = root.0.join("empty");
    let (ok, out, _) = fi_info(&prov, &empty, &["-p", "relink"], &[]);
    assert!(!ok, "answered with no device:\n{out}");
}

/// A `fi_pingpong` pair over `provider` (`-e ep`): the server on host b,
/// the client on host a, each with its own control port; `extra` options
/// and `env` variables for both.
struct Pair {
    server: Proc,
    client: Proc,
}

impl Pair {
    fn start(
        prov: &Path,
        hosts: &Hosts,
        provider: &str,
        ep: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Pair {
        let pingpong = fabric_tool("fi_pingpong").expect("checked by the caller");
        let port = free_port().to_string();
        let mut args = vec!["-p", provider, "-e", ep, "-c"];
        args.extend_from_slice(extra);
        // The server listens for its control connection on the port (-B),
        // the client dials it (-P).
        let server = Proc::spawn(
            "server",
            command(&pingpong, prov, &hosts.b)
                .envs(env.iter().copied())
                .args(&args)
                .args(["-B", &port]),
        );
        // The server's control socket listens before the client dials it.
        std::thread::sleep(Duration::from_millis(300));
        let client = Proc::spawn(
            "client",
            command(&pingpong, prov, &hosts.a)
                .envs(env.iter().copied())
                .args(&args)
                .args(["-P", &port, "127.0.0.2"]),
        );
        Pair { server, client }
    }

    /// Both exit 0 within `timeout`, each having printed the rows of
    /// `sizes`; the client's transcript.
    #[track_caller]
    fn finish(mut self, timeout: Duration, sizes: &[&str]) -> (Proc, Proc) {
        let c = self.client.wait_exit(timeout);
        let s = self.server.wait_exit(Duration::from_secs(30));
        let all = transcripts(&[&self.server, &self.client]);
        assert!(
            c.is_some_and(|c| c.success()) && s.is_some_and(|s| s.success()),
            "fi_pingpong failed (client {c:?}, server {s:?}):\n{all}"
        );
        for p in [&self.server, &self.client] {
            for size in sizes {
                assert!(
                    p.stdout().iter().any(|l| l.starts_with(size)),
                    "the {} printed no row for {size}:\n{all}",
                    p.what()
                );
            }
            assert_eq!(p.count("[error]"), 0, "{all}");
        }
        (self.server, self.client)
    }
}

#[test]
fn fi_pingpong_checks_its_data_over_msg_endpoints_and_over_rxm() {
    if let Err(skip) = fabric_tool("fi_pingpong") {
        return relink_skip::skip_test("fi_pingpong_checks_its_data", &skip);
    }
    let root = Root::new("pingpong");
    let prov = provider_dir(&root.0);
    let hosts = Hosts::create(&root.0);
    for (provider, ep) in [("relink", "msg"), ("relink;ofi_rxm", "rdm")] {
        let start = Instant::now();
        let pair = Pair::start(&prov, &hosts, provider, ep, &["-I", "100"], &[]);
        let (_, client) = pair.finish(
            Duration::from_secs(120),
            &["64 ", "1k ", "4k ", "64k ", "1m "],
        );
        println!("fi_pingpong -p {provider} -e {ep}: {:?}", start.elapsed());
        for l in client.stdout() {
            println!("  {l}");
        }
    }
    // Every size from 0 bytes up (-S all), once each way.
    let pair = Pair::start(
        &prov,
        &hosts,
        "relink",
        "msg",
        &["-I", "2", "-S", "all"],
        &[],
    );
    pair.finish(Duration::from_secs(120), &["0 ", "1 ", "64k "]);
    // ofi_rxm on a shared receive context of the provider's
    // (fi_srx_context): every connection's messages into one queue of
    // receives.
    let pair = Pair::start(
        &prov,
        &hosts,
        "relink;ofi_rxm",
        "rdm",
        &["-I", "100"],
        &[("FI_OFI_RXM_USE_SRX", "1")],
    );
    pair.finish(Duration::from_secs(120), &["64 ", "4k ", "1m "]);
}

#[test]
fn fi_pingpong_rides_through_device_resets_on_both_hosts() {
    if let Err(skip) = fabric_tool("fi_pingpong") {
        return relink_skip::skip_test("fi_pingpong_rides_through_resets", &skip);
    }
    let root = Root::new("pingpong-resets");
    let prov = provider_dir(&root.0);
    let hosts = Hosts::create(&root.0);
    for (provider, ep) in [("relink", "msg"), ("relink;ofi_rxm", "rdm")] {
        let start = Instant::now();
        let mut pair = Pair::start(
            &prov,
            &hosts,
            provider,
            ep,
            &["-I", "60000", "-S", "1024"],
            &[],
        );
        // The run is under way once both sessions are up; then each host's
        // device is reset three times, alternately.
        std::thread::sleep(Duration::from_secs(1));
        for i in 0..6 {
            Hosts::reset(if i % 2 == 0 { &hosts.a } else { &hosts.b });
            std::thread::sleep(Duration::from_millis(300));
        }
        assert!(
            pair.client.exited().is_none(),
            "the run ended before the last reset ({:?}): make it longer\n{}",
            start.elapsed(),
            transcripts(&[&pair.server, &pair.client])
        );
        let (server, client) = pair.finish(Duration::from_secs(300), &["1k "]);
        let losses = server.count("transport lost") + client.count("transport lost");
        assert!(
            losses >= 2,
            "no loss seen by relink:\n{}",
            client.transcript()
        );
        println!(
            "fi_pingpong -p {provider} -e {ep} across 6 resets: {:?}, {losses} transport losses, \
             every payload checked",
            start.elapsed()
        );
    }
}
