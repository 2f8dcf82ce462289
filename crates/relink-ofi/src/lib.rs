//! # relink-ofi — a libfabric provider over relink sessions
//!
//! `librelink_fi.so` is an external libfabric provider named `relink`:
//! libfabric loads it from a directory of `FI_PROVIDER_PATH` (or its own
//! provider directory, where `scripts/install-ofi.sh` puts it as
//! `librelink-fi.so`). An unmodified libfabric application — `fi_pingpong`,
//! Open MPI through `ofi_rxm` — then runs over relink sessions, and a
//! device reset, hot-unplug or replacement under it is no error: relink
//! recovers the session, replays what was not confirmed, and every
//! message arrives once.
//!
//! ## What it offers
//!
//! - `FI_EP_MSG` endpoints (connection-oriented), one relink session each:
//!   `fi_connect` makes the session, a passive endpoint's `fi_listen` a
//!   relink listener; `FI_CONNREQ`, `FI_CONNECTED` and `FI_SHUTDOWN` as
//!   libfabric specifies, CM data both ways (up to 32 bytes, module
//!   [`cm`]). A device loss is not an event.
//! - `FI_MSG` (send, sendv, sendmsg, inject, senddata, injectdata; recv,
//!   recvv, recvmsg) of any size up to `max_msg_size` (module [`frame`]),
//!   with remote CQ data (4 bytes), and `FI_RMA` (read, write, writedata
//!   and their inject forms, of registered memory by key, at the peer's
//!   virtual address or an offset).
//! - `FI_ATOMIC` as relink carries it: one 64-bit word, `FI_SUM`
//!   (`fi_atomic`, `fi_inject_atomic`, `fi_fetch_atomic`),
//!   `FI_ATOMIC_READ` and `FI_CSWAP`. An atomic is never applied twice;
//!   one in flight when a connection is lost completes with `FI_EIO` ("may
//!   have taken effect").
//! - Shared receive and transmit contexts (`fi_srx_context`,
//!   `fi_stx_context`).
//! - `FI_EP_RDM` with `FI_TAGGED` through libfabric's `ofi_rxm`
//!   (`FI_PROVIDER="relink;ofi_rxm"`), also on a shared receive context
//!   (`FI_OFI_RXM_USE_SRX=1`).
//! - Completions once each, with the application's context; an error
//!   completion only for what relink reports as final (the give-up
//!   deadline, a peer that lost its state, a closed connection).
//! - Progress in every call and, besides, a thread per fabric that polls
//!   while the application does not (so a busy rank still recovers);
//!   `fi_control(FI_GETWAIT)` gives the fd to sleep on (with
//!   `fi_trywait`).
//! - `FI_RELINK_*` parameters (module [`params`]), listed by `fi_info -e`.
//!
//! ## Layers
//!
//! | module | holds |
//! |---|---|
//! | [`info`] | what the provider offers and how it answers `fi_getinfo`'s hints |
//! | [`params`] | the `FI_RELINK_*` parameters |
//! | [`fabric`] | one opened fabric: the relink node and every object, behind one lock |
//! | [`queues`] | event and completion queues as the provider keeps them |
//! | [`cm`] | the acceptor's answer, the provider's one message of its own |
//! | [`frame`] | an application's message as relink messages: fragments behind a 4-byte header |
//! | `ffi` | libfabric's ABI and every entry point: the crate's only `unsafe` |

#![cfg_attr(not(test), deny(unsafe_code))]

pub mod cm;
pub mod fabric;
#[allow(unsafe_code)]
mod ffi;
pub mod frame;
pub mod info;
pub mod params;
pub mod queues;

/// The fuzz driver of the provider's entry points (the `ofi_entry` target
/// of `fuzz/`): [`run`](fuzzing::run) calls `getinfo` with an input's
/// hints, then opens, uses and closes objects from an answer as libfabric
/// does. Built for the tests and with the `fuzzing` feature.
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing {
    pub use crate::ffi::fuzzing::run;
}
