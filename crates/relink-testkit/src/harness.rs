//! Waiting for things on two hosts at once: an event buffer per host and
//! loops that poll, wait a tick, and poll again until a deadline.
//!
//! Every wait is generic over how the rig's hosts make progress. Each
//! iteration drains both hosts' event streams into per-host buffers, checks
//! the condition, and otherwise calls [`Provider::wait`] on the host being
//! waited for with a deadline one [`Rig::tick`] away (plus a non-blocking
//! `wait` on the other host). On a shared virtual clock that advances the
//! whole world by at most a tick; with real time it sleeps a tick while the
//! hosts' own threads work.
//!
//! Deadlines are [`Timestamp`]s on the clock of the host being waited for
//! ([`Harness::deadline`]); they default to now + [`Rig::settle_time`].
//! A wall-clock guard catches a virtual clock that stops advancing.

use std::time::{Duration, Instant};

use relink_fabric::{
    CmEvent, CmEventKind, CmId, CqId, DeviceEvent, DeviceEventKind, DeviceId, DeviceInfo, Event,
    Provider, Timestamp, WorkCompletion,
};

use crate::rig::{Rig, Side};

/// The two hosts of a rig plus one buffer of not-yet-consumed events each.
pub struct Harness<'r> {
    rig: &'r dyn Rig,
    events: [Vec<Event>; 2],
}

/// Fails a wait whose provider clock stopped advancing (a virtual-time
/// provider whose `wait` keeps returning without moving time on).
struct Guard {
    start: Instant,
    limit: Duration,
}

impl Guard {
    fn new(now: Timestamp, deadline: Timestamp) -> Guard {
        Guard {
            start: Instant::now(),
            limit: deadline.saturating_since(now) * 2 + Duration::from_secs(60),
        }
    }

    #[track_caller]
    fn check(&self, side: Side, now: Timestamp, deadline: Timestamp) {
        assert!(
            self.start.elapsed() <= self.limit,
            "wait on the {side} host made no progress for {:?} of wall-clock time \
             (provider clock at {now}, deadline {deadline}): does `wait` advance the clock?",
            self.limit
        );
    }
}

impl<'r> Harness<'r> {
    /// A harness over `rig` with empty event buffers.
    pub fn new(rig: &'r dyn Rig) -> Harness<'r> {
        Harness {
            rig,
            events: [Vec::new(), Vec::new()],
        }
    }

    /// The rig whose two hosts this harness polls and waits on.
    pub fn rig(&self) -> &'r dyn Rig {
        self.rig
    }

    /// The provider of `side`'s host.
    pub fn host(&self, side: Side) -> &'r dyn Provider {
        self.rig.host(side)
    }

    /// `side`'s clock.
    pub fn now(&self, side: Side) -> Timestamp {
        self.host(side).now()
    }

    /// The default deadline on `side`'s clock: now + [`Rig::settle_time`].
    pub fn deadline(&self, side: Side) -> Timestamp {
        self.deadline_after(side, self.rig.settle_time())
    }

    /// A deadline `d` from now on `side`'s clock.
    pub fn deadline_after(&self, side: Side, d: Duration) -> Timestamp {
        self.now(side) + d
    }

    /// The device of `side` as its host lists it now: the one that owns
    /// [`Rig::addr`] of that side.
    pub fn device(&self, side: Side) -> Option<DeviceInfo> {
        let addr = self.rig.addr(side);
        self.host(side).devices().into_iter().find(|d| d.owns(addr))
    }

    /// Move every queued event of both hosts into the buffers.
    pub fn pump(&mut self) {
        for side in Side::ALL {
            self.pump_host(side);
        }
    }

    /// Move every queued event of `side`'s host into its buffer (until its
    /// `poll_event` returns `None`).
    pub fn pump_host(&mut self, side: Side) {
        let host = self.host(side);
        while let Some(ev) = host.poll_event() {
            tracing::debug!(target: "relink_testkit", %side, event = ?ev, "event");
            self.events[side.index()].push(ev);
        }
    }

    /// One iteration of progress: wait up to a tick on `side`, give the other
    /// host a non-blocking chance, then pump both.
    pub fn step(&mut self, side: Side) {
        let host = self.host(side);
        host.wait(Some(host.now() + self.rig.tick()));
        let other = self.host(side.peer());
        other.wait(Some(other.now()));
        self.pump();
    }

    /// Let `d` pass on `side`'s clock, pumping events.
    pub fn idle(&mut self, side: Side, d: Duration) {
        let deadline = self.deadline_after(side, d);
        let guard = Guard::new(self.now(side), deadline);
        self.pump();
        loop {
            let now = self.now(side);
            if now >= deadline {
                return;
            }
            guard.check(side, now, deadline);
            self.step(side);
        }
    }

    /// Events of `side` received but not consumed yet, oldest first.
    pub fn buffered(&self, side: Side) -> &[Event] {
        &self.events[side.index()]
    }

    /// Remove and return every buffered event of `side` matching `pred`, in
    /// arrival order (after pumping once).
    pub fn take_events(&mut self, side: Side, mut pred: impl FnMut(&Event) -> bool) -> Vec<Event> {
        self.pump();
        let buf = &mut self.events[side.index()];
        let mut taken = Vec::new();
        let mut kept = Vec::with_capacity(buf.len());
        for ev in buf.drain(..) {
            if pred(&ev) {
                taken.push(ev);
            } else {
                kept.push(ev);
            }
        }
        *buf = kept;
        taken
    }

    /// The first event of `side` (buffered or arriving before `deadline`)
    /// matching `pred`, removed from the buffer; `None` at the deadline.
    /// Events that do not match stay buffered for later waits.
    pub fn try_wait_event(
        &mut self,
        side: Side,
        deadline: Timestamp,
        mut pred: impl FnMut(&Event) -> bool,
    ) -> Option<Event> {
        let guard = Guard::new(self.now(side), deadline);
        loop {
            self.pump();
            let buf = &mut self.events[side.index()];
            if let Some(pos) = buf.iter().position(&mut pred) {
                return Some(buf.remove(pos));
            }
            let now = self.now(side);
            if now >= deadline {
                return None;
            }
            guard.check(side, now, deadline);
            self.step(side);
        }
    }

    /// Like [`try_wait_event`](Harness::try_wait_event), but panics at the
    /// deadline, listing the unconsumed events of that host.
    #[track_caller]
    pub fn wait_event(
        &mut self,
        side: Side,
        deadline: Timestamp,
        pred: impl FnMut(&Event) -> bool,
    ) -> Event {
        match self.try_wait_event(side, deadline, pred) {
            Some(ev) => ev,
            None => panic!(
                "timed out at {} (deadline {deadline}) waiting for an event on the {side} host; \
                 unconsumed events there: {:#?}",
                self.now(side),
                self.buffered(side)
            ),
        }
    }

    /// The next CM event on `id` (whatever its kind); panics at the deadline.
    #[track_caller]
    pub fn next_cm(&mut self, side: Side, id: CmId, deadline: Timestamp) -> CmEventKind {
        match self.wait_event(
            side,
            deadline,
            |ev| matches!(ev, Event::Cm(CmEvent { id: i, .. }) if *i == id),
        ) {
            Event::Cm(ev) => ev.kind,
            _ => unreachable!("the predicate only accepts CM events"),
        }
    }

    /// The first CM event on `id` whose kind matches `pred`, skipping (and
    /// keeping) the others; panics at the deadline.
    #[track_caller]
    pub fn wait_cm(
        &mut self,
        side: Side,
        id: CmId,
        deadline: Timestamp,
        pred: impl Fn(&CmEventKind) -> bool,
    ) -> CmEventKind {
        match self.wait_event(
            side,
            deadline,
            |ev| matches!(ev, Event::Cm(CmEvent { id: i, kind }) if *i == id && pred(kind)),
        ) {
            Event::Cm(ev) => ev.kind,
            _ => unreachable!("the predicate only accepts CM events"),
        }
    }

    /// The first device event of `side` matching `pred`; panics at the
    /// deadline.
    #[track_caller]
    pub fn wait_device_event(
        &mut self,
        side: Side,
        deadline: Timestamp,
        pred: impl Fn(&DeviceEvent) -> bool,
    ) -> DeviceEvent {
        match self.wait_event(
            side,
            deadline,
            |ev| matches!(ev, Event::Device(d) if pred(d)),
        ) {
            Event::Device(d) => d,
            _ => unreachable!("the predicate only accepts device events"),
        }
    }

    /// Wait for `side`'s device to register again after a fault: an `Added`
    /// event for a device owning [`Rig::addr`] whose id is not `old`.
    /// Returns the device as the event describes it.
    #[track_caller]
    pub fn wait_device_added(&mut self, side: Side, old: &DeviceId) -> DeviceInfo {
        let addr = self.rig.addr(side);
        let deadline = self.deadline(side);
        self.wait_device_event(side, deadline, |d| {
            d.kind == DeviceEventKind::Added && d.device.owns(addr) && d.device.id != *old
        })
        .device
    }

    /// Pump `side` for `d` and panic if an event matching `pred` shows up
    /// (or is already buffered). Other events stay buffered.
    #[track_caller]
    pub fn expect_no_event(
        &mut self,
        side: Side,
        d: Duration,
        mut pred: impl FnMut(&Event) -> bool,
    ) {
        let deadline = self.deadline_after(side, d);
        let guard = Guard::new(self.now(side), deadline);
        loop {
            self.pump();
            if let Some(ev) = self.events[side.index()].iter().find(|ev| pred(ev)) {
                panic!("unexpected event on the {side} host: {ev:?}");
            }
            let now = self.now(side);
            if now >= deadline {
                return;
            }
            guard.check(side, now, deadline);
            self.step(side);
        }
    }

    /// Poll up to `max` completions of `cq` right now.
    #[track_caller]
    pub fn poll_cq(&self, side: Side, cq: CqId, max: usize) -> Vec<WorkCompletion> {
        let mut out = Vec::new();
        let host = self.host(side);
        while out.len() < max {
            let mut batch = Vec::new();
            let n = host
                .poll_cq(cq, max - out.len(), &mut batch)
                .unwrap_or_else(|e| panic!("poll_cq({cq}) on the {side} host: {e}"));
            assert_eq!(
                n,
                batch.len(),
                "poll_cq({cq}) on the {side} host returned {n} but produced {} completions",
                batch.len()
            );
            if n == 0 {
                break;
            }
            out.extend(batch);
        }
        out
    }

    /// Collect exactly `n` completions from `cq` of `side`; panics at the
    /// deadline with what arrived so far. Never takes more than `n`.
    #[track_caller]
    pub fn wait_completions(
        &mut self,
        side: Side,
        cq: CqId,
        n: usize,
        deadline: Timestamp,
    ) -> Vec<WorkCompletion> {
        let guard = Guard::new(self.now(side), deadline);
        let mut got = Vec::with_capacity(n);
        loop {
            got.extend(self.poll_cq(side, cq, n - got.len()));
            if got.len() == n {
                return got;
            }
            let now = self.now(side);
            if now >= deadline {
                panic!(
                    "timed out at {now} (deadline {deadline}): {} of {n} completions on {cq} \
                     of the {side} host: {got:#?}",
                    got.len()
                );
            }
            guard.check(side, now, deadline);
            self.step(side);
        }
    }

    /// Everything `cq` of `side` delivers during `d` (used to check that
    /// nothing — or nothing more — arrives).
    pub fn collect_completions(
        &mut self,
        side: Side,
        cq: CqId,
        d: Duration,
    ) -> Vec<WorkCompletion> {
        let deadline = self.deadline_after(side, d);
        let guard = Guard::new(self.now(side), deadline);
        let mut got = Vec::new();
        loop {
            got.extend(self.poll_cq(side, cq, usize::MAX));
            let now = self.now(side);
            if now >= deadline {
                return got;
            }
            guard.check(side, now, deadline);
            self.step(side);
        }
    }
}
