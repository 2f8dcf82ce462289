//! # relink-testkit — one conformance suite for every provider
//!
//! relink's recovery logic is only as good as the provider under it. This
//! crate is the provider conformance suite, and only that: the checks
//! every [`relink_fabric::Provider`] must pass, written once against the
//! trait and run unchanged on
//!
//! - the soft provider in-process (two hosts in one virtual-time world),
//! - the soft provider over TCP (two provider instances, real time),
//! - real rdma-core verbs (two devices of this host, e.g. Soft-RoCE in the
//!   VM tier).
//!
//! Sessions are not its business: the session simulator and the checked
//! workload are the crate relink-sim. The provider benchmarks
//! (relink-bench) reuse the rigs, [`Harness`] and [`connect_pair`].
//!
//! ## Modules and features
//!
//! | module | holds |
//! |---|---|
//! | [`rig`] | the [`Rig`] trait a backend implements, [`Side`], [`Skip`], [`Quirk`] and the skip and deviation reports |
//! | [`harness`] | [`Harness`]: per-host event buffers and the generic waits with deadlines |
//! | [`pair`] | the `rdma_cm` dance step by step, [`connect_pair`] and the [`Pair`] with its leak-checked teardown |
//! | [`check`] | assertions on completions and private data, test payloads, unused keys |
//! | [`cases`] | the conformance cases, one file per area (data, access, windows, SRQ, notification, event-loop readiness, CM, faults) |
//! | `soft_rigs` | feature `soft` (default): `InProcRig` and `TcpRig` on the soft provider |
//! | `verbs_rig` | feature `verbs`: `VerbsRig` on real devices named in the environment, and the host commands its faults run (`rdma link`, `ip`) |
//!
//! This file holds the [`CASES`] table (of [`Case`]s) and the
//! [`conformance_tests!`] macro.
//!
//! ## The contract with a backend
//!
//! A backend implements [`Rig`]: two hosts ([`Side::Initiator`],
//! [`Side::Target`]) that each have one device owning one IP address, a CM
//! port, fault controls (remove, add back, reset, replace a device) and a
//! [`settle_time`](Rig::settle_time) — how long asynchronous things may
//! take. A fault the backend cannot do returns [`Skip`]; the case then
//! reports `SKIPPED: <case> on <kind>: <why>` through relink-skip (straight
//! to stderr, visible even under libtest's output capture, and counted as
//! skipped by `scripts/test.sh`) and returns. Set `RELINK_FAIL_ON_SKIP=1`
//! to make skips fail instead.
//!
//! Each case ([`cases`], listed in [`CASES`]) gets a fresh rig, drives it
//! only through the `Provider` trait and the rig, panics on a violation,
//! and ends by destroying everything it created and asserting that both
//! hosts' [`object_counts`](relink_fabric::Provider::object_counts) are
//! zero.
//!
//! ## Running the suite
//!
//! A backend's test file is one line: [`conformance_tests!`] expands to one
//! `#[test]` per case, each evaluating the factory expression anew.
//!
//! ```text
//! // crates/relink-testkit/tests/conformance_soft_inproc.rs
//! relink_testkit::conformance_tests!(relink_testkit::soft_rigs::InProcRig::new(7));
//! ```
//!
//! The factory may produce any `R: Rig` or a `Box<dyn Rig>`. Runners that
//! are not libtest (a CLI self-test, a VM harness) iterate [`CASES`].
//!
//! ## Waiting
//!
//! [`Harness`] buffers each host's events and waits generically: drain
//! both hosts, check, then [`Provider::wait`](relink_fabric::Provider::wait)
//! a [`tick`](Rig::tick) on the host of interest; deadlines are on that
//! host's clock ([`Harness::deadline`]). [`pair::connect_pair`] does the
//! whole `rdma_cm` dance and returns a [`Pair`] whose
//! [`teardown`](Pair::teardown) checks for leaks.
//!
//! ```
//! use relink_testkit::{Side, Skip, CASES};
//!
//! assert_eq!(Side::Initiator.peer(), Side::Target);
//! assert_eq!(Skip::new("no reset on real verbs").to_string(), "no reset on real verbs");
//! assert!(CASES.iter().any(|c| c.name == "flush_on_device_removal"));
//! let mut names: Vec<_> = CASES.iter().map(|c| c.name).collect();
//! names.sort();
//! names.dedup();
//! assert_eq!(names.len(), CASES.len());
//! ```

pub mod cases;
pub mod check;
pub mod harness;
pub mod pair;
pub mod rig;
#[cfg(feature = "soft")]
pub mod soft_rigs;
#[cfg(feature = "verbs")]
pub mod verbs_rig;

pub use harness::Harness;
pub use pair::{connect_pair, connect_via, End, Pair, PairOpts};
pub use rig::{fault_applied, report_deviation, report_skip, Quirk, Rig, Side, Skip};

/// A named conformance case.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// The case's name (its function in [`cases`]).
    pub name: &'static str,
    /// Run it on a fresh rig; panics on a violation.
    pub run: fn(&dyn Rig),
}

/// The one list of cases; expands `__relink_testkit_expand!` with it.
#[doc(hidden)]
#[macro_export]
macro_rules! __relink_testkit_cases {
    ($($mode:tt)*) => {
        $crate::__relink_testkit_expand! {
            [$($mode)*]
            send_recv_ordering
            rnr_retry_then_delivery
            write_then_read
            large_transfers
            write_with_imm
            atomics
            atomics_in_flight
            srq_receives
            cq_notification
            event_fd_readiness
            remote_write_without_right
            remote_write_out_of_bounds
            remote_bad_rkey
            remote_read_without_right
            local_protection_error
            reg_mr_requires_local_write
            mw_type2_bind_and_bounds
            mw_type2_local_invalidate
            mw_type1_bind_and_bounds
            mw_type1_unbind
            send_with_invalidate
            private_data_limits
            reject_with_private_data
            connect_without_listener
            disconnect_flushes_peer
            flush_on_device_removal
            removal_reaches_bound_listener_not_wildcard
            readd_keeps_name_and_guid
            reset_reports_fatal_removed_added
            replacement_new_guid_same_address
            reset_then_reconnect
        }
    };
}

/// Expands the case list as tests or as the [`CASES`] table.
#[doc(hidden)]
#[macro_export]
macro_rules! __relink_testkit_expand {
    ([tests $attrs:tt $factory:expr] $($case:ident)*) => {
        $( $crate::__relink_testkit_test! { $attrs $factory, $case } )*
    };
    ([table] $($case:ident)*) => {
        &[$($crate::Case {
            name: stringify!($case),
            run: $crate::cases::$case,
        }),*]
    };
}

/// One test function running one case.
#[doc(hidden)]
#[macro_export]
macro_rules! __relink_testkit_test {
    ([$(#[$attr:meta])*] $factory:expr, $case:ident) => {
        $(#[$attr])*
        #[test]
        fn $case() {
            let rig = $factory;
            $crate::cases::$case(&rig);
        }
    };
}

/// One `#[test]` per conformance case, each running the case on a fresh rig
/// from the factory expression (evaluated once per test, yielding any
/// `R: Rig` or a `Box<dyn Rig>`). Attributes after a `;` go on every test.
///
/// ```text
/// relink_testkit::conformance_tests!(MyRig::new());
/// relink_testkit::conformance_tests!(VerbsRig::from_env(); #[ignore = "needs RDMA devices"]);
/// ```
///
/// Invoke it once per module (the tests are named after the cases); wrap it
/// in a `mod` to run the suite on several rigs from one file.
#[macro_export]
macro_rules! conformance_tests {
    ($factory:expr $(,)?) => {
        $crate::__relink_testkit_cases! { tests [] $factory }
    };
    ($factory:expr; $(#[$attr:meta])*) => {
        $crate::__relink_testkit_cases! { tests [$(#[$attr])*] $factory }
    };
}

/// Every conformance case, in the order [`conformance_tests!`] declares them.
pub const CASES: &[Case] = crate::__relink_testkit_cases!(table);
