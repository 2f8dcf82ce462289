//! Real NBD clients against the server: nbdinfo, qemu-img, qemu-io, nbdcopy.
//! A test whose client is not installed reports the skip through
//! relink-skip and returns: a `SKIPPED:` line on stderr, counted as skipped
//! by `scripts/test.sh`, and a failure under `CI=true` (CI's install step
//! provides every client).

mod common;

use common::{random_file, run, run_ok, tool, Fixture, Spec};
use relink_nbd::ServerConfig;
use relink_skip::skip_test;

const MIB: u64 = 1 << 20;

fn two_exports() -> Fixture {
    Fixture::start(
        &[
            Spec::rw("disk", 64 * MIB),
            Spec::ro("ro", 4 * MIB),
            Spec::refusing("refusing", 4 * MIB),
        ],
        ServerConfig::default(),
    )
}

#[test]
fn nbdinfo_lists_exports_and_reports_size_and_flags() {
    let nbdinfo = match tool("nbdinfo") {
        Ok(path) => path,
        Err(skip) => return skip_test("nbdinfo_lists_exports_and_reports_size_and_flags", &skip),
    };
    let fx = two_exports();
    let list = run_ok(&nbdinfo, &["--list", "--json", &fx.unix_uri("")]);
    assert!(list.contains("\"export-name\": \"disk\""), "{list}");
    assert!(list.contains("\"export-name\": \"ro\""), "{list}");
    assert!(list.contains("\"export-name\": \"refusing\""), "{list}");

    let info = run_ok(&nbdinfo, &["--json", &fx.unix_uri("disk")]);
    assert!(info.contains("\"export-size\": 67108864"), "{info}");
    for flag in [
        "\"is_read_only\": false",
        "\"can_flush\": true",
        "\"can_fua\": true",
        "\"can_trim\": true",
        "\"can_zero\": true",
        "\"can_multi_conn\": true",
        "\"block_size_maximum\": 33554432",
    ] {
        assert!(info.contains(flag), "missing {flag} in {info}");
    }
    let ro = run_ok(&nbdinfo, &["--json", &fx.tcp_uri("ro")]);
    assert!(ro.contains("\"export-size\": 4194304"), "{ro}");
    assert!(ro.contains("\"is_read_only\": true"), "{ro}");
    assert!(ro.contains("\"can_trim\": false"), "{ro}");

    let missing = run(&nbdinfo, &[&fx.unix_uri("nope")]);
    assert!(!missing.status.success(), "an unknown export must fail");
}

fn convert_and_compare(test: &str, via_tcp: bool) {
    let qemu_img = match tool("qemu-img") {
        Ok(path) => path,
        Err(skip) => return skip_test(test, &skip),
    };
    let fx = two_exports();
    let src = random_file(fx.dir.path(), "src.raw", 64 * MIB as usize, 7);
    let src = src.to_str().expect("utf-8 path");
    let uri = if via_tcp {
        fx.tcp_uri("disk")
    } else {
        fx.unix_uri("disk")
    };
    run_ok(
        &qemu_img,
        &["convert", "-n", "-f", "raw", "-O", "raw", src, &uri],
    );
    run_ok(&qemu_img, &["compare", "-f", "raw", "-F", "raw", src, &uri]);
    // the backing file holds the bytes too (the writes reached storage)
    assert!(
        std::fs::read(fx.image("disk")).expect("image") == std::fs::read(src).expect("src"),
        "backing file differs from the source"
    );
}

#[test]
fn qemu_img_convert_and_compare_over_unix_socket() {
    convert_and_compare("qemu_img_convert_and_compare_over_unix_socket", false);
}

#[test]
fn qemu_img_convert_and_compare_over_tcp() {
    convert_and_compare("qemu_img_convert_and_compare_over_tcp", true);
}

#[test]
fn qemu_io_write_read_fua_zero_trim_flush() {
    let qemu_io = match tool("qemu-io") {
        Ok(path) => path,
        Err(skip) => return skip_test("qemu_io_write_read_fua_zero_trim_flush", &skip),
    };
    let fx = two_exports();
    let uri = fx.unix_uri("disk");
    let out = run_ok(
        &qemu_io,
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0xab 0 1M",
            "-c",
            "read -P 0xab 0 1M",
            "-c",
            "write -f -P 0xcd 1M 64k",
            "-c",
            "read -P 0xcd 1M 64k",
            "-c",
            "write -z 2M 1M",
            "-c",
            "read -P 0 2M 1M",
            "-c",
            "discard 4M 1M",
            "-c",
            "flush",
            &uri,
        ],
    );
    assert!(!out.contains("Pattern verification failed"), "{out}");
    assert!(!out.to_lowercase().contains("error"), "{out}");
    let image = std::fs::read(fx.image("disk")).expect("image");
    assert!(image[..MIB as usize].iter().all(|&b| b == 0xab));
    assert!(image[MIB as usize..(MIB + 65536) as usize]
        .iter()
        .all(|&b| b == 0xcd));
    assert!(image[2 * MIB as usize..3 * MIB as usize]
        .iter()
        .all(|&b| b == 0));
}

#[test]
fn nbdcopy_in_and_out_with_many_requests_in_flight() {
    let nbdcopy = match tool("nbdcopy") {
        Ok(path) => path,
        Err(skip) => return skip_test("nbdcopy_in_and_out_with_many_requests_in_flight", &skip),
    };
    let fx = two_exports();
    let src = random_file(fx.dir.path(), "src.raw", 64 * MIB as usize, 11);
    let back = fx.dir.path().join("back.raw");
    let uri = fx.unix_uri("disk");
    run_ok(
        &nbdcopy,
        &[
            "--requests=32",
            "--connections=4",
            "--request-size=262144",
            "--flush",
            src.to_str().expect("utf-8"),
            &uri,
        ],
    );
    run_ok(
        &nbdcopy,
        &[
            "--requests=32",
            "--connections=2",
            &fx.tcp_uri("disk"),
            back.to_str().expect("utf-8"),
        ],
    );
    let a = std::fs::read(&src).expect("src");
    assert!(
        a == std::fs::read(&back).expect("copy back"),
        "round trip differs"
    );
    assert!(
        a == std::fs::read(fx.image("disk")).expect("image"),
        "image differs"
    );
}

fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn read_only_export_is_readable_and_refuses_writes() {
    let qemu_io = match tool("qemu-io") {
        Ok(path) => path,
        Err(skip) => return skip_test("read_only_export_is_readable_and_refuses_writes", &skip),
    };
    let fx = two_exports();
    // reads work (qemu opens it read-only: -r)
    let out = run_ok(
        &qemu_io,
        &[
            "-r",
            "-f",
            "raw",
            "-c",
            "read -P 0 0 64k",
            &fx.unix_uri("ro"),
        ],
    );
    assert!(!out.contains("Pattern verification failed"), "{out}");
    // qemu sees NBD_FLAG_READ_ONLY and refuses a writable open
    let out = run(
        &qemu_io,
        &["-f", "raw", "-c", "write -P 0x11 0 4k", &fx.unix_uri("ro")],
    );
    let text = output_text(&out);
    assert!(text.contains("Permission denied"), "{text}");
    // a write the server passes to a backend that refuses it comes back as
    // EPERM, which qemu reports as "Operation not permitted"
    let out = run(
        &qemu_io,
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0x11 0 4k",
            &fx.unix_uri("refusing"),
        ],
    );
    let text = output_text(&out);
    assert!(
        text.contains("write failed: Operation not permitted"),
        "{text}"
    );
    for name in ["ro", "refusing"] {
        let image = std::fs::read(fx.image(name)).expect("image");
        assert!(image.iter().all(|&b| b == 0), "read-only {name} changed");
    }
}

#[test]
fn block_sizes_show_in_nbdinfo_and_qemu_io_writes_unaligned_by_read_modify_write() {
    let test = "block_sizes_show_in_nbdinfo_and_qemu_io_writes_unaligned_by_read_modify_write";
    let (nbdinfo, qemu_io) = match tool("nbdinfo").and_then(|n| tool("qemu-io").map(|q| (n, q))) {
        Ok(paths) => paths,
        Err(skip) => return skip_test(test, &skip),
    };
    let fx = Fixture::start(&[Spec::sectors("sect", 4 * MIB)], ServerConfig::default());
    let uri = fx.unix_uri("sect");
    let info = run_ok(&nbdinfo, &["--json", &uri]);
    for size in [
        "\"block_size_minimum\": 512",
        "\"block_size_preferred\": 4096",
        "\"block_size_maximum\": 65536",
    ] {
        assert!(info.contains(size), "missing {size} in {info}");
    }
    // qemu honours the minimum: the unaligned write becomes a read of the
    // sector, then a write of it, and every request the server sees is
    // aligned (an unaligned one would fail with EINVAL).
    let out = run_ok(
        &qemu_io,
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0x11 0 4k",
            "-c",
            "write -P 0x22 1 100",
            "-c",
            "read -P 0x11 0 1",
            "-c",
            "read -P 0x22 1 100",
            "-c",
            "read -P 0x11 101 3995",
            "-c",
            "read -P 0x22 3 1",
            &uri,
        ],
    );
    assert!(!out.contains("Pattern verification failed"), "{out}");
    let image = std::fs::read(fx.image("sect")).expect("image");
    assert_eq!(image[0], 0x11);
    assert!(image[1..101].iter().all(|&b| b == 0x22));
    assert!(image[101..4096].iter().all(|&b| b == 0x11));
}

/// `base:allocation` (block status): nbdinfo's map of a sparse image shows
/// its data where it was written and holes elsewhere, and qemu-img copies
/// it to a file that stays sparse.
#[test]
fn nbdinfo_maps_holes_and_qemu_img_copies_a_sparse_image_sparse() {
    let test = "nbdinfo_maps_holes_and_qemu_img_copies_a_sparse_image_sparse";
    let (nbdinfo, qemu_img) = match (tool("nbdinfo"), tool("qemu-img")) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(skip), _) | (_, Err(skip)) => return skip_test(test, &skip),
    };
    let fx = two_exports();
    // Data at 4 MiB (1 MiB of it) and at 20 MiB (64 KiB); holes elsewhere.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(fx.image("disk"))
            .expect("image");
        f.write_all_at(&vec![0xab; MIB as usize], 4 * MIB)
            .expect("write");
        f.write_all_at(&vec![0xcd; 64 << 10], 20 * MIB)
            .expect("write");
        f.sync_all().expect("sync");
    }
    let map = run_ok(&nbdinfo, &["--map", &fx.unix_uri("disk")]);
    let data = relink_proctest::nbdinfo::data_extents(&map, 64 * MIB);
    assert_eq!(
        data,
        [(4 * MIB, MIB), (20 * MIB, 64 << 10)],
        "data where it was written, holes elsewhere: {map}"
    );
    // A copy through the server stays sparse: qemu-img skips the holes.
    let dst = fx.dir.path().join("copy.raw");
    let dst = dst.to_str().expect("utf-8 path");
    run_ok(
        &qemu_img,
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "raw",
            &fx.unix_uri("disk"),
            dst,
        ],
    );
    let copy = std::fs::read(dst).expect("copy");
    assert!(
        copy == std::fs::read(fx.image("disk")).expect("image"),
        "same bytes"
    );
    let allocated = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(dst).expect("copy").blocks() * 512
    };
    eprintln!("{test}: the 64 MiB copy allocates {allocated} bytes");
    assert!(
        allocated < 8 * MIB,
        "the copy is sparse: {allocated} bytes allocated"
    );
}
