//! # librelink — the C API of relink
//!
//! RDMA sessions that survive device reset, hot-unplug and replacement,
//! for C programs: `#include <relink.h>`, link `-lrelink` (`pkg-config
//! --cflags --libs relink`). The header (`include/relink.h`) is generated
//! from this crate by cbindgen and checked to be current by the tests.
//!
//! ## The rules every call follows
//!
//! - **Status codes.** Every function returns a `relink_status` (the
//!   `*_free` functions return nothing): `RELINK_OK` (0), `RELINK_EMPTY`
//!   (1: a poll found nothing; not an error) or a negative error. After an
//!   error, `relink_last_error()` gives its message in one line (per
//!   thread, valid until the next call on that thread).
//! - **No panic crosses into C.** A bug inside relink returns
//!   `RELINK_ERR_INTERNAL` with its message.
//! - **Ownership.** A `relink_*_new*` call stores an object the caller owns
//!   in its out-pointer; the matching `relink_*_free` frees it (NULL is
//!   ignored), and it is not used after. Every other pointer argument is
//!   borrowed for the call only: strings and buffers are copied, out-
//!   pointers are written before the call returns. Sessions, listeners and
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
//!   `relink_poll_event`).
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
//! `RELINK_OP_GAVE_UP`. Events (`relink_poll_event`) say what happened.
//!
//! The Rust API this wraps is the `relink` crate's; its docs explain every
//! concept in depth.

// The exported names are C's (`relink_node`, `RELINK_OK`), as the header
// spells them.
#![allow(non_camel_case_types)]

mod node;
mod ops;
mod options;
mod output;
mod session;
mod shared;
mod soft_device;
mod status;

pub use node::*;
pub use ops::*;
pub use options::*;
pub use output::*;
pub use session::*;
pub use shared::*;
pub use soft_device::*;
pub use status::{relink_last_error, relink_status, relink_status_name};
