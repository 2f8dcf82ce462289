//! `include/relink.h` is what cbindgen makes of the crate today: a change
//! to the exported API that did not regenerate the header fails here.
//! `RELINK_BLESS=1 cargo test -p relink-c --test header` rewrites it.

use std::path::PathBuf;

#[test]
fn header_is_current() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let mut made = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut made);
    let made = String::from_utf8(made).expect("the header is UTF-8");
    let path = crate_dir.join("include/relink.h");
    if std::env::var_os("RELINK_BLESS").is_some() {
        std::fs::write(&path, &made).expect("write include/relink.h");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == made,
        "include/relink.h is not what cbindgen makes of the crate now: \
         run `RELINK_BLESS=1 cargo test -p relink-c --test header` and commit it"
    );
}
