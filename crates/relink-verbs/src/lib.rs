//! # relink-verbs — the rdma-core provider
//!
//! [`VerbsProvider`] implements [`relink_fabric::Provider`] on the kernel's
//! RDMA stack through rdma-core: `libibverbs` for the verbs objects and
//! `librdmacm` for connection management. It is built only with the `rdma`
//! cargo feature, which needs rdma-core's headers, pkg-config and libclang
//! (Debian: `apt-get install libibverbs-dev librdmacm-dev pkg-config
//! libclang-dev clang`); without it this crate compiles everywhere and
//! [`VerbsProvider::new`] returns [`VerbsError::NotBuilt`]. Every call
//! into libibverbs, librdmacm and libc is in one module, `ffi`, split by
//! object kind: it exposes safe functions and small owned handle types
//! (one per rdma-core object; a destroy consumes its handle, and a child
//! keeps its parents alive), and makes the soundness argument for them once,
//! each block of it commented `// SAFETY:`. Every other module of the crate
//! has `#![forbid(unsafe_code)]` and calls only those wrappers.
//!
//! ```
//! match relink_verbs::VerbsProvider::new() {
//!     Ok(p) => println!("{} devices", relink_fabric::Provider::devices(&p).len()),
//!     Err(e) => println!("no real RDMA here: {e}"),
//! }
//! ```
//!
//! The test rig on real devices (two providers of this process, device
//! faults by `rdma link delete/add`) is `relink_testkit::verbs_rig`
//! (relink-testkit's `verbs` feature).
//!
//! ## How the provider keeps the contract on real verbs
//!
//! **Threads.** One event thread per provider `poll`s the rdma_cm event
//! channel, the async-event fd and the completion channel of every open
//! context, and a wake-up eventfd; it re-scans the device list every
//! [`VerbsConfig::rescan_interval`] (100 ms) and at once whenever the
//! device watcher the provider runs (`relink-devwatch`: the RDMA netlink
//! monitor on kernels >= 6.12, else kernel uevents; see
//! [`VerbsConfig::watch_devices`]) reports anything, or when asked
//! ([`VerbsProvider::rescan_now`]). A scan's system calls (the device
//! list, sysfs, the interfaces' addresses) run without the provider's lock;
//! only its result is applied under it, so the caller's verbs calls never
//! wait for a scan, and whatever the round had queued wakes `wait` before
//! the scan starts.
//! Async events and CM events are read, translated and acknowledged at once,
//! under the provider's lock (so `rdma_destroy_id`/`ibv_destroy_*`, which
//! wait for acknowledgements, never wait on us). [`wait`](relink_fabric::Provider::wait)
//! sleeps on a condition variable the event thread signals.
//!
//! **Completions wake `wait`.** Before sleeping, `wait` arms every CQ the
//! caller has not armed itself for the next completion (and polls it once,
//! against the arm-then-check race); a completion-channel event then wakes
//! it. Once the caller arms a CQ with `req_notify_cq`, the hardware arming
//! is the caller's and its notifications become `Event::CqReady`. One case
//! is subtle: the caller arms for solicited completions while the
//! provider's own arming (for any completion) is still set. The next
//! notification cannot tell which arming fired, so the provider re-arms for
//! solicited completions, polls, and reports `CqReady` if it found a
//! receive or an error: a spurious `CqReady` is possible then, a lost one
//! is not (module `track`).
//!
//! **Device identity.** Devices are told apart by (name, kernel index) plus
//! a generation this crate maintains, process-wide (module `identity`);
//! never by GUID alone.
//!
//! **Device loss.** A loss is seen as rdma_cm's `DEVICE_REMOVAL` on an id,
//! `IBV_EVENT_DEVICE_FATAL` on a context, or the registration leaving
//! `ibv_get_device_list` (on rxe the only sign for pure verbs users, about
//! 0.1 s after `rdma link delete`). At once, the provider releases every
//! verbs object it holds on that device — the QPs go to error, their CQs are
//! drained, and every work request not completed yet gets exactly one
//! `WrFlushErr` completion from the provider's own bookkeeping of every
//! request posted (module `track`) — and takes every rdma-core object on it
//! out of its tables. A reaper thread then destroys them, without the lock:
//! MWs (a bound type 2 window holds its QP on rxe), QPs, SRQs, MRs, CQs,
//! PDs in dependency order, then the context is closed — and it re-syncs
//! librdmacm (`rdma_get_devices` + `rdma_free_devices`) so that librdmacm
//! closes its own cached context of the device too. On a device being
//! deleted each of these calls waits in the kernel (1–15 ms in all for a
//! session's objects on rxe under emulation; the re-sync lists the devices
//! and opens the ones librdmacm has not opened yet). Neither the caller's
//! verbs calls — the loss's own handling first, a switch to a standby on
//! another device — nor the event thread, which wakes `wait` for the
//! completions that follow, wait for them: the objects are out of every
//! table, and librdmacm's own mutex guards its device list. The provider
//! joins its reapers when it is dropped. On rxe a single open
//! context keeps `rdma link delete` blocked forever, so nothing waits for
//! the caller to tear down. The caller's handles stay valid: CQs keep
//! serving the flushed completions, creates fail with `DeviceLost`, destroys
//! return `AlreadyReleased`. CM ids are the caller's to destroy (after
//! `DeviceRemoval`); librdmacm drops its context with the last one.
//!
//! **Contexts: ours, not librdmacm's.** `open_device` opens a context of its
//! own (`ibv_open_device`), and QPs are created with `ibv_create_qp` on it,
//! not with `rdma_create_qp` on the id's context. The interface creates a QP
//! before any CM id names it (`create_qp(pd, init)` returns a QP in `Init`
//! that takes receives; `cm_connect`/`cm_accept` bind it later), which
//! `rdma_create_qp(id, ...)` cannot express; and librdmacm's per-device
//! context is shared by every user of librdmacm in the process (two
//! providers of one process would race for its async events), and only
//! librdmacm may close it. So the QP is driven through rdma_cm's documented
//! path for a QP the id does not own: `rdma_init_qp_attr` +
//! `ibv_modify_qp` (INIT, RTR, RTS) around `rdma_connect`/`rdma_accept`,
//! `rdma_establish` on the active side, and the QP number in
//! `rdma_conn_param`. The cost is a second uverbs context per device while
//! CM ids are bound to it; both are released promptly on a loss, as above.
//!
//! **`RDMAV_ALLOW_DISASSOC_DESTROY`.** libibverbs reads it with `getenv`
//! exactly once per process, in `ibverbs_init`, which the first
//! `ibv_get_device_list` runs (librdmacm calls that too when it starts);
//! later changes are never seen. Since rdma-core 40 a value of `0` means
//! off and any other value on (before, merely being set meant on). When it
//! is on, a destroy that the kernel answers with `EIO` (the device was
//! disassociated and the kernel released the object already) succeeds and
//! frees the object's user-space memory. When it is off, the destroy fails
//! with `EIO` — this provider maps that to `AlreadyReleased` all the same,
//! so behaviour is unchanged — but libibverbs keeps the object's user-space
//! memory (queue buffers, the struct): a small leak per object on a lost
//! device.
//!
//! Setting a variable while another thread may read the environment (C's
//! `getenv`, in libibverbs or anywhere) is undefined behaviour, so nothing
//! here does that. [`init_environment`] sets it to `1` only when it is
//! unset and the calling thread is provably the only one in the process
//! (`/proc/self/task` has one entry); otherwise it returns an error and
//! changes nothing. [`VerbsProvider::new`] calls it, and if it cannot set
//! the variable it logs one `tracing` warning per process and goes on. To
//! be sure the variable is on, export `RDMAV_ALLOW_DISASSOC_DESTROY=1`
//! before the process starts, or call [`init_environment`] first thing in
//! `main`, before any thread is spawned and before anything uses verbs.
//!
//! **Device deviations.** Worked around on rxe (Soft-RoCE) contexts: a
//! received SEND_WITH_INV is flagged with the kernel's bit instead of
//! `IBV_WC_WITH_INV` (the provider reads both), and kernel 6.1's rxe raises
//! no `QP_LAST_WQE_REACHED` (the provider reports it when an SRQ-attached
//! QP enters the error state). On every device, an error completion
//! notifies a CQ armed `solicited_only` even where the device does not
//! (rxe): the provider finds errors when polling, and the event thread
//! polls such CQs every 20 ms. Not papered over (the conformance suite
//! fails them on rxe 6.1): a bad lkey completes with `LocQpOpErr` rather
//! than `LocProtErr`, and a memory window's bounds are not checked (rxe
//! checks the underlying MR's).
//!
//! **Memory.** [`alloc_memory`](relink_fabric::Provider::alloc_memory)
//! returns page-aligned `mmap`'d memory with raw-copy accessors (a NIC may
//! write it at any time) that check every range themselves. `reg_mr`
//! accepts only memory this provider allocated, recognised by identity (a
//! handle to the very allocation, not merely one with its address and
//! length: any [`HostMemory`](relink_fabric::HostMemory) may claim those),
//! and the MR keeps that allocation mapped until it is deregistered.
//! The application's own memory (a C program's buffer, as `ibv_reg_mr`
//! takes) joins those allocations only through the one `unsafe` function
//! of the API, `VerbsProvider::adopt_foreign` (in the `rdma` build), whose
//! caller keeps it valid until `VerbsProvider::release_memory`
//! deregistered every MR over it and stopped every access through its
//! handles (or the provider is dropped).

#![deny(unsafe_code)]
#![cfg_attr(not(feature = "rdma"), forbid(unsafe_code))]

// The provider's internals. Those free of FFI are unit-tested in every
// build; without `rdma`, nothing but their tests uses them.
#[cfg(any(feature = "rdma", test))]
#[cfg_attr(not(feature = "rdma"), allow(dead_code))]
mod convert;
#[cfg(any(feature = "rdma", test))]
#[cfg_attr(not(feature = "rdma"), allow(dead_code))]
mod errno;
// The one FFI module (see the crate docs).
#[cfg(feature = "rdma")]
#[allow(unsafe_code)]
mod ffi;
#[cfg(any(feature = "rdma", test))]
#[cfg_attr(not(feature = "rdma"), allow(dead_code))]
mod identity;
#[cfg(feature = "rdma")]
mod memory;
#[cfg(any(feature = "rdma", test))]
#[cfg_attr(not(feature = "rdma"), allow(dead_code))]
mod owned;
#[cfg(feature = "rdma")]
mod provider;
#[cfg(not(feature = "rdma"))]
mod stub;
#[cfg(any(feature = "rdma", test))]
#[cfg_attr(not(feature = "rdma"), allow(dead_code))]
mod track;

#[cfg(feature = "rdma")]
pub use provider::{RescanHandle, VerbsProvider};
#[cfg(not(feature = "rdma"))]
pub use stub::{RescanHandle, VerbsProvider};

use std::time::Duration;

/// The environment variable that lets destroys succeed on a disassociated
/// device (see the crate docs).
pub const DISASSOC_ENV: &str = "RDMAV_ALLOW_DISASSOC_DESTROY";

/// Whether this build has the real provider (the `rdma` feature).
pub const BUILT_WITH_RDMA: bool = cfg!(feature = "rdma");

/// Set `RDMAV_ALLOW_DISASSOC_DESTROY=1` unless it is set already (to any
/// value: that is the user's choice), soundly: only while the calling thread
/// is the only thread of the process, counted in `/proc/self/task`. With
/// one thread nothing else can read the environment concurrently, nor start
/// a thread that would.
///
/// Call it first thing in `main`, before spawning threads and before
/// anything uses verbs (libibverbs reads the variable once; see the crate
/// docs). [`VerbsProvider::new`] calls it too and only warns when it fails.
///
/// # Errors
///
/// When the variable is unset and the process has other threads (or its
/// threads cannot be counted), the environment is left alone and the error
/// says to export the variable or call this function earlier.
pub fn init_environment() -> Result<(), EnvironmentError> {
    let current = std::env::var_os(DISASSOC_ENV);
    match decide_environment(current.as_deref(), count_threads)? {
        EnvAction::Keep => Ok(()),
        EnvAction::Set => {
            // Sound: `decide_environment` saw this thread alone in the
            // process just now, and only this thread could have started
            // another since.
            std::env::set_var(DISASSOC_ENV, "1");
            Ok(())
        }
    }
}

/// What [`init_environment`] does to the variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EnvAction {
    /// Leave it: it is set already.
    Keep,
    /// Set it: it is unset and this is the only thread.
    Set,
}

/// The decision of [`init_environment`], given the variable's value and a
/// way to count the process's threads (asked only when the variable is
/// unset).
fn decide_environment(
    current: Option<&std::ffi::OsStr>,
    threads: impl FnOnce() -> std::io::Result<usize>,
) -> Result<EnvAction, EnvironmentError> {
    if current.is_some() {
        return Ok(EnvAction::Keep);
    }
    match threads() {
        Ok(1) => Ok(EnvAction::Set),
        Ok(threads) => Err(EnvironmentError::Threads { threads }),
        Err(source) => Err(EnvironmentError::ThreadCount { source }),
    }
}

/// The number of threads of this process: the entries of `/proc/self/task`.
fn count_threads() -> std::io::Result<usize> {
    let mut n = 0;
    for entry in std::fs::read_dir("/proc/self/task")? {
        entry?;
        n += 1;
    }
    Ok(n)
}

/// Why [`init_environment`] left `RDMAV_ALLOW_DISASSOC_DESTROY` unset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnvironmentError {
    /// The process has other threads, so changing the environment could
    /// race with a reader.
    #[error(
        "cannot set {DISASSOC_ENV}=1 safely: the process has {threads} threads \
         (changing the environment while another thread may read it is undefined \
         behaviour); export {DISASSOC_ENV}=1 before starting the process, or call \
         relink_verbs::init_environment() before spawning any thread"
    )]
    Threads {
        /// How many threads the process had.
        threads: usize,
    },
    /// The threads of the process could not be counted.
    #[error(
        "cannot set {DISASSOC_ENV}=1 safely: cannot count this process's threads in \
         /proc/self/task ({source}); export {DISASSOC_ENV}=1 before starting the process"
    )]
    ThreadCount {
        /// The error reading `/proc/self/task`.
        source: std::io::Error,
    },
}

/// Why a [`VerbsProvider`] could not be created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    /// The crate was built without the `rdma` feature.
    #[error("relink-verbs was built without the `rdma` feature (rebuild with `--features rdma`; it needs rdma-core's development files)")]
    NotBuilt,
    /// librdmacm or libibverbs could not start (no RDMA support in the
    /// kernel, no `rdma_ucm` module, no permission on `/dev/infiniband`).
    #[error("RDMA is not available: {0}")]
    Unavailable(String),
    /// Another system call failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Settings of a [`VerbsProvider`].
#[derive(Debug, Clone)]
pub struct VerbsConfig {
    /// How often the device list is re-scanned (the fallback signal of a
    /// removal; an external watcher may call [`VerbsProvider::rescan_now`]).
    pub rescan_interval: Duration,
    /// Run a device watcher (`relink-devwatch`: the RDMA netlink monitor,
    /// else kernel uevents) beside the provider and re-scan at each of its
    /// events, so a `rdma link delete` is seen as soon as the kernel
    /// deletes the device's `uverbsN` node rather than at the next periodic
    /// re-scan (default: true; a watcher that cannot start is logged and
    /// the periodic re-scan remains).
    pub watch_devices: bool,
    /// The source address of `cm_resolve_addr` calls that give none. With
    /// `None` (the default) the kernel's routing picks it, and on a host
    /// that owns the destination address too, that is the destination's own
    /// device (loopback). Set it to make one provider act as one host of
    /// several sharing a kernel (the conformance rig on one VM).
    pub default_source: Option<std::net::IpAddr>,
}

impl Default for VerbsConfig {
    fn default() -> VerbsConfig {
        VerbsConfig {
            rescan_interval: Duration::from_millis(100),
            watch_devices: true,
            default_source: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn a_set_variable_is_kept_without_counting_threads() {
        for v in ["1", "0", ""] {
            let r = decide_environment(Some(OsStr::new(v)), || panic!("counted"));
            assert_eq!(r.unwrap(), EnvAction::Keep);
        }
    }

    #[test]
    fn an_unset_variable_is_set_only_by_the_only_thread() {
        assert_eq!(decide_environment(None, || Ok(1)).unwrap(), EnvAction::Set);
        let e = decide_environment(None, || Ok(3)).unwrap_err();
        assert!(matches!(e, EnvironmentError::Threads { threads: 3 }));
        let msg = e.to_string();
        assert!(msg.contains("3 threads"), "{msg}");
        assert!(
            msg.contains("export RDMAV_ALLOW_DISASSOC_DESTROY=1"),
            "{msg}"
        );
        assert!(msg.contains("before spawning any thread"), "{msg}");
        let e = decide_environment(None, || Err(std::io::ErrorKind::NotFound.into())).unwrap_err();
        assert!(matches!(e, EnvironmentError::ThreadCount { .. }));
        assert!(e
            .to_string()
            .contains("export RDMAV_ALLOW_DISASSOC_DESTROY=1"));
    }

    #[test]
    fn init_environment_leaves_a_multithreaded_process_alone() {
        // Hold a second thread for the duration of the check.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            let _ = rx.recv();
        });
        assert!(count_threads().unwrap() >= 2);
        let before = std::env::var_os(DISASSOC_ENV);
        let r = init_environment();
        match before {
            None => assert!(matches!(r, Err(EnvironmentError::Threads { .. })), "{r:?}"),
            Some(_) => assert!(r.is_ok(), "{r:?}"),
        }
        assert_eq!(std::env::var_os(DISASSOC_ENV), before, "unchanged");
        drop(tx);
        other.join().unwrap();
    }
}
