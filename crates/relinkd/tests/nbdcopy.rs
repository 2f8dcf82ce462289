//! `nbdcopy` at its defaults (256 KiB requests, four connections, 64
//! requests in flight each) into and out of a relinkd export: two relinkd
//! processes on the soft TCP fabric, a target serving a 32 MiB file from
//! soft host `b` (127.0.0.2) and an initiator offering it on an NBD Unix
//! socket from soft host `a` (127.0.0.1). The bytes copied out are the
//! bytes copied in, and the target's file holds them.
//!
//! relinkd's engine moves at most `max_io` (128 KiB by default) per
//! command; the NBD side takes requests up to 32 MiB (nbdkit's default
//! maximum, the NBD protocol's "not a denial of service" bound) and splits
//! them. `nbdinfo` shows that maximum.
//!
//! Needs `nbdcopy` and `nbdinfo` (libnbd-bin); without them the test
//! reports the skip through relink-skip and returns (a failure under
//! `CI=true`, whose install step provides them).

mod common;

use common::images::{empty_volume, source_and_volume, transcripts};
use common::{run_ok, tool, Root, SoftHosts};
use relink_skip::skip_test;

const SIZE: u64 = 32 << 20;

#[test]
fn nbdcopy_at_its_defaults_copies_in_and_out() {
    let test = "nbdcopy_at_its_defaults_copies_in_and_out";
    let (nbdcopy, nbdinfo) = match tool("nbdcopy").and_then(|c| tool("nbdinfo").map(|i| (c, i))) {
        Ok(t) => t,
        Err(skip) => return skip_test(test, &skip),
    };
    let root = Root::new("nbdcopy");
    let soft = SoftHosts::create(&root.0);
    let (source, volume) = source_and_volume(&root.0, SIZE, 26);
    let (mut target, mut init, url) = soft.serve_disk(&root.0, &volume);

    // In, at nbdcopy's defaults.
    let src = source.to_str().unwrap();
    run_ok(&nbdcopy, &[src, &url], &[&target, &init]);
    // And out again.
    let back = root.0.join("back.img");
    empty_volume(&back, SIZE);
    run_ok(&nbdcopy, &[&url, back.to_str().unwrap()], &[&target, &init]);
    let a = std::fs::read(&source).unwrap();
    assert!(
        a == std::fs::read(&back).unwrap(),
        "the bytes copied out differ from those copied in\n{}",
        transcripts(&[&target, &init])
    );

    let info = run_ok(&nbdinfo, &["--json", &url], &[&target, &init]);
    assert!(
        info.contains("\"block_size_maximum\": 33554432"),
        "the NBD maximum is 32 MiB: {info}"
    );

    init.terminate_ok();
    target.terminate_ok();
    assert!(
        a == std::fs::read(&volume).unwrap(),
        "the target's file differs from the bytes copied in"
    );
}
