//! # librelink — the C API of relink
//!
//! RDMA sessions that survive device reset, hot-unplug and replacement,
//! for C programs: `#include <relink.h>`, link `-lrelink` (`pkg-config
//! --cflags --libs relink`).
//!
//! ## Two headers
//!
//! - **`relink.h`**, the API: status codes and errors, nodes (on the
//!   embedded soft fabric, in one process or over TCP, and on rdma-core),
//!   session options, sessions, shared receive queues, regions,
//!   operations, posted receives and WRITE notices, outputs, the recovery
//!   policy and recovery control — in that order, one section per
//!   concept. Status codes come first because
//!   every declaration after them returns one.
//! - **`relink_soft.h`**, the soft fabric's fault-injection hooks:
//!   `relink_soft_fabric_fault` (a `relink_soft_fault`: reset, unplug,
//!   plug in again or replace a device of an in-process fabric) and
//!   `relink_soft_device` (a `relink_soft_device_op`: reset, remove or
//!   replace a soft device of a directory). It includes `relink.h`. Tests
//!   and demonstrations include it; a program in production needs only
//!   `relink.h`.
//!
//! cbindgen makes both from this crate: each section of a header is one
//! module of `src/` (its file and its submodules' files), headed by the
//! first paragraph of its module docs, and `tests/header.rs` lists the
//! sections and their files in order and checks that the checked-in
//! headers are current (`RELINK_BLESS=1 cargo test -p relink-c --test
//! header` rewrites them). `cbindgen.toml` and `cbindgen_soft.toml` hold
//! each header's preamble, include guard and includes.
//! `scripts/install-c.sh` installs both headers next to each other.
//!
//! ## Features
//!
//! - **`soft`** (on by default): the fault hooks of `relink_soft.h`.
//!   Without it (`cargo build --release -p relink-c
//!   --no-default-features`, `--features verbs` for rdma-core) librelink
//!   has no fault hooks, and `relink.h` is the header to install with it;
//!   everything else stays, nodes on the soft fabric included.
//! - **`verbs`**: the rdma-core provider behind `relink_node_new_verbs`
//!   (which returns `RELINK_ERR_UNSUPPORTED` without it); building it
//!   needs rdma-core's development files.
//!
//! ### Why soft-fabric nodes are in `relink.h` and `soft` is on by default
//!
//! The soft fabric is relink's embedded default provider: a C program runs
//! on it with no RDMA hardware, in one process (`relink_soft_fabric_new`,
//! `relink_soft_fabric_add_device`, `relink_node_new_soft`) or across
//! processes (`relink_node_new_tcp` on a directory of soft devices that
//! `relink_soft_device_add` or `relink soft-device add` fills). Making
//! those nodes and giving them devices is what every user of the default
//! provider does — as `rdma link add` sets up rxe — so it is API, in
//! `relink.h`, and needs no feature. Resetting, unplugging or replacing a
//! device under a running program is what only a test or a demonstration
//! does: those are the hooks, and only `relink_soft.h` declares them.
//!
//! `soft` is on by default because watching a session survive a fault on
//! the soft fabric is how relink is tried and tested without hardware (the
//! main job of the `relink` binary, this crate's C tests and
//! `examples/c/ping_pong.c` all inject faults), so the default build and
//! the default install can do it; and because the default librelink then
//! has every function both installed headers declare, so a program that
//! includes `relink_soft.h` links against any default build. The header
//! split is what keeps
//! the hooks out of production code: a program that includes only
//! `relink.h` has no declaration of them. A build that must not carry
//! them at all turns the feature off.
//!
//! ## The rules every call follows
//!
//! - **Status codes.** Every function returns a `relink_status` (the
//!   `*_free` functions return nothing): `RELINK_OK` (0), `RELINK_EMPTY`
//!   (1: a poll found nothing; not an error) or a negative error. After an
//!   error, `relink_last_error()` gives its message in one line (per
//!   thread, valid until the next call on that thread).
//! - **No panic crosses into C, and librelink prints nothing.** A bug
//!   inside relink returns `RELINK_ERR_INTERNAL` with its message and
//!   where it happened (`relink_last_error`); the panic is printed only if
//!   `RELINK_LOG` is set. The panic hook librelink installs at its first
//!   call passes every panic outside librelink calls to the hook that was
//!   there before. Lengths are checked before anything is copied or
//!   allocated.
//! - **One code per mistake.** The same mistake gets the same status in
//!   every call (`relink_status` lists them): a NULL pointer
//!   `RELINK_ERR_ARGUMENT`, an unknown session `RELINK_ERR_NO_SESSION`,
//!   an unknown region `RELINK_ERR_NO_REGION`, a range outside its region
//!   `RELINK_ERR_RANGE`, a length over its limit `RELINK_ERR_TOO_LARGE`, a
//!   misaligned atomic `RELINK_ERR_MISALIGNED`, a work request's flag it
//!   cannot take or a scatter/gather list of 0 or more than
//!   `RELINK_MAX_SGE` ranges `RELINK_ERR_ARGUMENT`, an operation past the
//!   session's `max_outstanding` `RELINK_ERR_AGAIN` (take completions,
//!   then submit again: `RELINK_EVENT_WRITABLE` says when; for receive
//!   buffers, `max_outstanding` posted and not filled), a registration
//!   deregistered while an operation, a posted receive buffer or a
//!   buffer of a shared receive queue's pool uses it `RELINK_ERR_BUSY`,
//!   an unknown shared receive queue `RELINK_ERR_OPTIONS`.
//! - **Ownership.** A `relink_*_new*` call stores an object the caller owns
//!   in its out-pointer; the matching `relink_*_free` frees it (NULL is
//!   ignored), and it is not used after. Every other pointer argument is
//!   borrowed for the call only: strings and buffers are copied, out-
//!   pointers are written before the call returns. One exception, as in
//!   verbs: the buffer given to `relink_register` is used in place (by
//!   the device and the peer, at any time) until `relink_deregister` of
//!   it returned `RELINK_OK` or the node is freed; it stays the caller's
//!   to keep valid until then, and to free after. A message sent from
//!   registered memory (`relink_post` with `RELINK_WR_FROM_REGION` or
//!   `RELINK_WR_SGL`: no copy), and a WRITE or READ over a scatter/gather
//!   list (`RELINK_WR_SGL`), reads or writes its ranges there, again for
//!   a replay: leave them unchanged until its completion (the
//!   `relink_sge` array naming them is borrowed for the call only). A
//!   receive buffer (`relink_post_receive`) is relink's until its receive
//!   ended; one of a shared receive queue's pool
//!   (`relink_post_shared_receive`) until a message took it or
//!   `relink_take_shared_receives` handed it back. Sessions, listeners and
//!   operations are numbers (`relink_session`, `relink_listener`,
//!   `relink_op`), never pointers, and never reused by their node.
//! - **Threads.** A node and everything made with it are used by one
//!   thread at a time (a node may move between threads). Nodes are
//!   independent: one per thread is the simplest design.
//! - **Progress.** Sessions make progress only in `relink_poll` and
//!   `relink_wait`. A program's loop waits (`relink_wait`, or its own
//!   `poll`/`epoll` on `relink_event_fd` with a timeout of
//!   `relink_next_deadline_ms`), then takes what sessions produced
//!   (`relink_accept`, `relink_poll_completion`, `relink_poll_delivery`,
//!   `relink_poll_written`, `relink_poll_received`, `relink_poll_event`,
//!   or all of them node-wide: `relink_poll_output`).
//!
//! ## What survives a device loss
//!
//! Nothing is asked of the program when a device resets, is unplugged and
//! plugged again, or is replaced: the session recovers by its policy, its
//! regions keep their tokens, and every operation completes exactly once —
//! messages are delivered exactly once and in order, WRITEs and READs not
//! confirmed are replayed, an atomic not confirmed completes
//! `RELINK_OUTCOME_INDETERMINATE` (unless the policy replays atomics). If
//! the give-up deadline passes first, pending operations fail with
//! `RELINK_OP_GAVE_UP`, and a message already posted but not confirmed
//! completes `RELINK_OUTCOME_INDETERMINATE` (`relink_outcome` has the
//! whole table). Events (`relink_poll_event`) say what happened.
//!
//! The Rust API this wraps is the `relink` crate's; its docs explain every
//! concept in depth.

// The exported names are C's (`relink_node`, `RELINK_OK`), as the header
// spells them.
#![allow(non_camel_case_types)]

// One module per header section; `tests/header.rs` puts them in order.
// `host_memory` exports nothing: the caller's registered buffers as host
// memory, for `region`'s `relink_register`.
mod host_memory;
// The fuzz driver of the C API: compiled for the tests and for the fuzz
// twin of this crate (`rlib/Cargo.toml`), never into librelink.
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
mod node;
mod ops;
mod options;
mod output;
mod policy;
mod receives;
mod recovery;
mod region;
mod session;
mod shared_receive;
mod soft_fabric;
#[cfg(feature = "soft")]
mod soft_hooks;
mod status;

pub use node::*;
pub use ops::*;
pub use options::*;
pub use output::*;
pub use policy::*;
pub use receives::*;
pub use recovery::*;
pub use region::*;
pub use session::*;
pub use shared_receive::*;
pub use soft_fabric::*;
#[cfg(feature = "soft")]
pub use soft_hooks::*;
pub use status::{relink_last_error, relink_status, relink_status_name, relink_version};
