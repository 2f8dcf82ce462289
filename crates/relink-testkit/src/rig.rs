//! What a provider backend supplies to the suite: two hosts, their devices,
//! a port, fault controls and a sense of time.

use std::fmt;
use std::io::Write as _;
use std::net::IpAddr;
use std::time::Duration;

use relink_fabric::Provider;

/// One of the two hosts of a rig.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    /// The host that resolves, connects and issues most requests.
    Initiator,
    /// The host that listens, accepts and owns most target buffers.
    Target,
}

impl Side {
    /// Both sides, initiator first.
    pub const ALL: [Side; 2] = [Side::Initiator, Side::Target];

    /// The other side.
    pub fn peer(self) -> Side {
        match self {
            Side::Initiator => Side::Target,
            Side::Target => Side::Initiator,
        }
    }

    /// 0 for the initiator, 1 for the target.
    pub fn index(self) -> usize {
        match self {
            Side::Initiator => 0,
            Side::Target => 1,
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Initiator => "initiator",
            Side::Target => "target",
        })
    }
}

/// A fault (or feature) the backend cannot provide: relink-skip's [`Skip`].
/// A case that gets one reports it ([`report_skip`]) and returns; it never
/// passes silently.
pub use relink_skip::Skip;

/// Report that `case` was skipped on `rig`, through relink-skip: one
/// `SKIPPED: <case> on <kind>: <why>` line on the process's stderr (past
/// libtest's capture) and a record for `scripts/test.sh`; a failure instead
/// under `RELINK_FAIL_ON_SKIP=1`.
pub fn report_skip(rig: &dyn Rig, case: &str, skip: &Skip) {
    let kind = rig.host(Side::Initiator).kind();
    relink_skip::skip_test(&format!("{case} on {kind}"), skip);
    tracing::warn!(target: "relink_testkit", case, kind, reason = %skip, "case skipped");
}

/// Apply a fault: `true` if the backend did it, `false` (after reporting the
/// skip) if it cannot — the case should clean up and return.
#[must_use = "a skipped fault means the case must clean up and return"]
pub fn fault_applied(rig: &dyn Rig, case: &str, result: Result<(), Skip>) -> bool {
    match result {
        Ok(()) => true,
        Err(skip) => {
            report_skip(rig, case, &skip);
            false
        }
    }
}

/// A provider backend as the suite sees it: two hosts, each with one RDMA
/// device that owns one IP address, plus fault controls.
///
/// The two hosts may be two views of one in-process world sharing a virtual
/// clock (calling [`Provider::wait`] on either advances both), two provider
/// instances talking over TCP with their own threads, or two machines (or
/// namespaces) with real verbs. The suite only ever waits on one host at a
/// time with short deadlines, so every arrangement works.
///
/// A fault method returns once the fault has been *applied* (the device is
/// gone, or registered again); the events it causes may arrive later. Each
/// case gets a fresh rig, so a rig need not undo faults.
///
/// The network between the hosts must be lossless (no injected packet loss,
/// partitions or port flaps): the cases check exact statuses, and a lost
/// NAK legitimately turns `RemAccessErr` into `RetryExcErr`. Latency and
/// jitter are fine.
pub trait Rig {
    /// The provider acting as `side`'s host.
    fn host(&self, side: Side) -> &dyn Provider;

    /// Name of the device `side` currently uses (after
    /// [`replace_device`](Rig::replace_device), the replacement's name).
    fn device_name(&self, side: Side) -> String;

    /// The IP address of `side`'s device. Stays the same across every fault.
    fn addr(&self, side: Side) -> IpAddr;

    /// A CM port nobody else uses during the case. The target listens on it;
    /// before anything listens there, connecting to it must fail.
    fn port(&self) -> u16;

    /// Unregister `side`'s device (hot-unplug): no fatal event first.
    fn remove_device(&self, side: Side) -> Result<(), Skip>;

    /// Register the device removed by [`remove_device`](Rig::remove_device)
    /// again: same name, same GUID, same address, a new generation.
    fn add_device_back(&self, side: Side) -> Result<(), Skip>;

    /// Reset `side`'s device: fatal error, removal, and registration again
    /// with the same name, GUID and address and a new generation.
    fn reset_device(&self, side: Side) -> Result<(), Skip>;

    /// Replace `side`'s device: remove it, then add a device with a new GUID
    /// and the same address (its name may differ).
    fn replace_device(&self, side: Side) -> Result<(), Skip>;

    /// How long asynchronous things (events, completions, connection setup,
    /// flushes) may take before a case gives up: a bound on a hang, far
    /// above what they take (nothing waits for it to pass; cheap on
    /// virtual time, 30 s over TCP, 10 s on real devices).
    fn settle_time(&self) -> Duration;

    /// The slice the suite waits for at a time before looking at the other
    /// host again. Defaults to 1 ms.
    fn tick(&self) -> Duration {
        Duration::from_millis(1)
    }

    /// How long a case watches for something that must *not* happen (a
    /// completion without a receive, an event on a wildcard listener).
    /// Defaults to a quarter of [`settle_time`](Rig::settle_time).
    fn quiet_time(&self) -> Duration {
        self.settle_time() / 4
    }

    /// Whether the backend has a known deviation from verbs semantics. A
    /// case that meets one reports `KNOWN DEVIATION` on stderr (never
    /// silently) and checks the backend's actual behaviour instead.
    fn has_quirk(&self, quirk: Quirk) -> bool {
        let _ = quirk;
        false
    }
}

/// Known deviations of real drivers from verbs semantics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Quirk {
    /// A send with an lkey that names no MR completes `LocQpOpErr` (rxe on
    /// 6.1) or `WrFlushErr` (rxe on 6.12) instead of `LocProtErr`.
    BadLkeyIsLocQpOpErr,
    /// Memory windows are range-checked against their MR, not against the
    /// window: a WRITE past a window's end but inside the MR succeeds (rxe).
    MwBoundsCheckedAgainstMr,
    /// After a lost packet, a FETCH_ADD or CMP_SWAP may complete `Success`
    /// without its old value written into its local buffer (rxe on 6.1 and
    /// 6.12: the completer takes the replayed atomic response as a plain
    /// ACK once a PSN-sequence NAK has moved its expected PSN past the
    /// atomic). The operation itself executed exactly once. Seen under
    /// `tests/vm/run.sh --netem-loss` and, rarely, on a loaded machine.
    AtomicResultLostOnReplay,
}

/// Print a known deviation (see [`Rig::has_quirk`]).
pub fn report_deviation(rig: &dyn Rig, case: &str, what: &str) {
    let kind = rig.host(Side::Initiator).kind();
    let line = format!("KNOWN DEVIATION: {case} on {kind}: {what}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    tracing::warn!(target: "relink_testkit", case, kind, what, "known deviation");
}

impl<R: Rig + ?Sized> Rig for Box<R> {
    fn host(&self, side: Side) -> &dyn Provider {
        (**self).host(side)
    }
    fn device_name(&self, side: Side) -> String {
        (**self).device_name(side)
    }
    fn addr(&self, side: Side) -> IpAddr {
        (**self).addr(side)
    }
    fn port(&self) -> u16 {
        (**self).port()
    }
    fn remove_device(&self, side: Side) -> Result<(), Skip> {
        (**self).remove_device(side)
    }
    fn add_device_back(&self, side: Side) -> Result<(), Skip> {
        (**self).add_device_back(side)
    }
    fn reset_device(&self, side: Side) -> Result<(), Skip> {
        (**self).reset_device(side)
    }
    fn replace_device(&self, side: Side) -> Result<(), Skip> {
        (**self).replace_device(side)
    }
    fn settle_time(&self) -> Duration {
        (**self).settle_time()
    }
    fn tick(&self) -> Duration {
        (**self).tick()
    }
    fn quiet_time(&self) -> Duration {
        (**self).quiet_time()
    }
    fn has_quirk(&self, quirk: Quirk) -> bool {
        (**self).has_quirk(quirk)
    }
}
