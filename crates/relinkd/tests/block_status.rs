//! Block status through relinkd (`base:allocation`): two relinkd processes
//! on the soft TCP fabric, a target serving a sparse 16 MiB file from soft
//! host `b` (127.0.0.2) and an initiator offering it on an NBD Unix socket
//! from soft host `a` (127.0.0.1). `nbdinfo --map` shows the file's data
//! where it was written and holes elsewhere — the target's `SEEK_DATA` /
//! `SEEK_HOLE`, carried by the block service's BLOCK_STATUS — and a
//! `qemu-img convert` out of the export makes a sparse copy with the same
//! bytes.
//!
//! Needs `nbdinfo` (libnbd-bin) and `qemu-img`; without them the test
//! reports the skip through relink-skip and returns (a failure under
//! `CI=true`, whose install step provides them).

mod common;

use common::images::empty_volume;
use common::{run_ok, tool, Root, SoftHosts};
use relink_skip::skip_test;

const MIB: u64 = 1 << 20;
const SIZE: u64 = 16 * MIB;

#[test]
fn nbdinfo_maps_the_targets_holes_and_a_copy_stays_sparse() {
    let test = "nbdinfo_maps_the_targets_holes_and_a_copy_stays_sparse";
    let (nbdinfo, qemu_img) = match tool("nbdinfo").and_then(|i| tool("qemu-img").map(|q| (i, q))) {
        Ok(t) => t,
        Err(skip) => return skip_test(test, &skip),
    };
    let root = Root::new("block-status");
    let soft = SoftHosts::create(&root.0);
    // A sparse volume: 1 MiB of data at 2 MiB, 256 KiB at 9 MiB.
    let volume = root.0.join("volume.img");
    empty_volume(&volume, SIZE);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&volume)
            .expect("volume");
        f.write_all_at(&vec![0x3c; MIB as usize], 2 * MIB)
            .expect("write");
        f.write_all_at(&vec![0xc3; 256 << 10], 9 * MIB)
            .expect("write");
        f.sync_all().expect("sync");
    }
    let (mut target, mut init, url) = soft.serve_disk(&root.0, &volume);

    let map = run_ok(&nbdinfo, &["--map", &url], &[&target, &init]);
    let data = relink_proctest::nbdinfo::data_extents(&map, SIZE);
    assert_eq!(
        data,
        [(2 * MIB, MIB), (9 * MIB, 256 << 10)],
        "data where it was written, holes elsewhere: {map}"
    );

    let copy = root.0.join("copy.raw");
    let copy = copy.to_str().expect("utf-8 path");
    run_ok(
        &qemu_img,
        &["convert", "-f", "raw", "-O", "raw", &url, copy],
        &[&target, &init],
    );
    assert!(
        std::fs::read(copy).expect("copy") == std::fs::read(&volume).expect("volume"),
        "the copy has the volume's bytes"
    );
    let allocated = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(copy).expect("copy").blocks() * 512
    };
    eprintln!("{test}: the 16 MiB copy allocates {allocated} bytes");
    assert!(allocated < 4 * MIB, "the copy is sparse: {allocated} bytes");

    init.terminate_ok();
    target.terminate_ok();
}
