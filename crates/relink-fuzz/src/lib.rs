//! # relink-fuzz — the bodies of relink's fuzz targets
//!
//! Each module is one fuzz target: what it feeds its parser, and what it
//! checks beyond "never panics". Its `run(data: &[u8])` is the whole body.
//! Two callers share them:
//!
//! - the cargo-fuzz binaries of `fuzz/` (`fuzz/fuzz_targets/<target>.rs`,
//!   one line each: `fuzz_target!(|data: &[u8]| relink_fuzz::<target>::run(data))`),
//!   which run under libFuzzer and AddressSanitizer on nightly
//!   (`scripts/fuzz.sh`);
//! - the test `tests/regressions.rs`, which replays on stable, in the
//!   ordinary `cargo test`, every input kept in `fuzz/regressions/<target>/`
//!   (crash inputs kept by hand) and in the kept corpus
//!   `fuzz/corpus/<target>/` ([`kept::replay`], which the FFI crates'
//!   tests use for their boundary drivers too).
//!
//! # The contract
//!
//! **A body never panics on any input unless the code under test is
//! wrong.** A panic is a finding: the parser panicked, or it broke an
//! invariant the body asserts (decoding is canonical, a reply is
//! well-formed, an accepted configuration is usable). A body does not
//! panic on its own account: inputs it cannot use (not UTF-8, too short to
//! choose anything) return early. A body holds no state from one input to
//! the next, so an input replays the same way in any order.
//!
//! [`TARGETS`] lists every target by its name in `fuzz/Cargo.toml`.
//!
//! | target | checks |
//! |---|---|
//! | [`wire_decode`] | the soft TCP fabric's frames |
//! | [`core_handshake`] | relink's CONNECT, ACCEPT and REJECT private data |
//! | [`core_message`] | relink's in-band messages |
//! | [`registry_parse`] | the soft device registry's files |
//! | [`netlink_parse`] | RDMA netlink datagrams |
//! | [`uevent_parse`] | kernel uevents and their RDMA classification |
//! | [`nbd_handshake`] | a client's script of NBD options through the handshake |
//! | [`nbd_request`] | NBD client flags, one option, a transmission request header |
//! | [`nbd_structured`] | NBD structured replies and the options that select them |
//! | [`block_command`] | the block service's commands and replies |
//! | [`control_request`] | relinkd's control protocol requests |
//! | [`relinkd_config`] | relinkd's configuration file |
//! | [`relinkd_conf_dir`] | relinkd's configuration with its `conf_dir` files |

pub mod block_command;
pub mod control_request;
pub mod core_handshake;
pub mod core_message;
pub mod kept;
pub mod nbd_handshake;
pub mod nbd_request;
pub mod nbd_structured;
pub mod netlink_parse;
pub mod registry_parse;
pub mod relinkd_conf_dir;
pub mod relinkd_config;
pub mod uevent_parse;
pub mod wire_decode;

/// A fuzz target's body: one input, a panic only for a finding.
pub type Body = fn(&[u8]);

/// Every target: its name (the `[[bin]]` of `fuzz/Cargo.toml`, the
/// directory of `fuzz/corpus/` and `fuzz/regressions/`) and its body.
pub const TARGETS: &[(&str, Body)] = &[
    ("wire_decode", wire_decode::run),
    ("core_handshake", core_handshake::run),
    ("core_message", core_message::run),
    ("registry_parse", registry_parse::run),
    ("netlink_parse", netlink_parse::run),
    ("uevent_parse", uevent_parse::run),
    ("nbd_handshake", nbd_handshake::run),
    ("nbd_request", nbd_request::run),
    ("nbd_structured", nbd_structured::run),
    ("block_command", block_command::run),
    ("control_request", control_request::run),
    ("relinkd_config", relinkd_config::run),
    ("relinkd_conf_dir", relinkd_conf_dir::run),
];
