//! The event thread and what it reads: one `poll` over the wake-up
//! eventfd, the rdma_cm event channel and every open context's async-event
//! and completion-channel fds, re-scanning the devices between; async
//! events translated into `Event::Async` (and a device loss on
//! `DEVICE_FATAL`); and the caller's side of it: `wait`, or the readiness
//! eventfd of `event_fd` ([`Ready`]).

#![forbid(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::raw::c_int;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{eventfd, EventfdFlags};

use relink_fabric::{
    AsyncEvent, ContextId, CqId, DeviceEvent, DeviceEventKind, Event, QpId, QpState, Timestamp,
};
use relink_verbs_sys as sys;

use super::scan::scan_devices;
use super::{Inner, Shared, VerbsProvider};
use crate::ffi::{self, resync_librdmacm, AsyncEventInfo};

/// How often CQs armed for solicited completions are checked for errors
/// (see `Notify::error_completion`).
const SOLICITED_SCAN: Duration = Duration::from_millis(20);

/// Longest a `wait` sleeps before looking again (a safety net only).
const MAX_SLEEP: Duration = Duration::from_millis(200);

/// What a polled fd belongs to (the `u64` is a context's handle).
#[derive(Clone, Copy)]
enum Src {
    Wake,
    Cm,
    Async(u64),
    Comp(u64),
}

/// The event thread, until `stop` is set: polls its fds, handles what
/// they have under the lock, re-scans every `rescan_interval` or when
/// asked, and wakes `wait` if anything happened.
pub(super) fn event_loop(sh: &Arc<Shared>) {
    let mut next_scan = Instant::now() + sh.rescan_interval;
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut srcs: Vec<Src> = Vec::new();
    let chan_fd = sh.chan_fd;
    while !sh.stop.load(Ordering::SeqCst) {
        {
            let mut inner = sh.lock();
            if inner.fds_changed || fds.is_empty() {
                inner.fds_changed = false;
                fds.clear();
                srcs.clear();
                let mut push = |fd: RawFd, s: Src| {
                    fds.push(libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    });
                    srcs.push(s);
                };
                push(sh.wake.as_raw_fd(), Src::Wake);
                push(chan_fd, Src::Cm);
                for (h, c) in &inner.ctxs {
                    if let (Some(raw), Some(ch)) = (&c.raw, &c.chan) {
                        push(raw.async_fd(), Src::Async(*h));
                        push(ch.fd(), Src::Comp(*h));
                    }
                }
            }
        }
        let cap = if sh.lock().scan_solicited_cqs() {
            SOLICITED_SCAN
        } else {
            Duration::from_secs(1)
        };
        let timeout = next_scan
            .saturating_duration_since(Instant::now())
            .min(cap)
            .as_millis() as c_int;
        for p in &mut fds {
            p.revents = 0;
        }
        // An fd closed meanwhile by another thread is harmless: poll holds
        // its own reference, and every close kicks the wake fd.
        let n = ffi::poll(&mut fds, timeout);
        let mut inner = sh.lock();
        if n > 0 {
            for (p, s) in fds.iter().zip(&srcs) {
                if p.revents == 0 {
                    continue;
                }
                match *s {
                    Src::Wake => ffi::read_eventfd(sh.wake.as_fd()),
                    Src::Cm => inner.drain_cm_events(),
                    Src::Async(h) => inner.drain_async_events(h),
                    Src::Comp(h) => inner.drain_cq_events(h),
                }
            }
        }
        if inner.rescan_requested || Instant::now() >= next_scan {
            // The scan's system calls (the device list, sysfs, the
            // interfaces' addresses: milliseconds on a slow machine) run
            // without the lock, so the caller's calls do not wait for them;
            // a request made meanwhile brings another scan.
            inner.rescan_requested = false;
            // What this round queued goes out before the scan: a device
            // watcher asks for one as a device is being removed, in the
            // round that reports its loss.
            let woke = inner.activity || !inner.events.is_empty();
            drop(inner);
            if woke {
                sh.cond.notify_all();
            }
            let scan = scan_devices();
            inner = sh.lock();
            inner.apply_scan(scan);
            next_scan = Instant::now() + sh.rescan_interval;
        }
        let woke = inner.activity || !inner.events.is_empty();
        let resync = std::mem::take(&mut inner.resync_now);
        drop(inner);
        if woke {
            sh.cond.notify_all();
        }
        if resync {
            // After the wake-up: the caller handles the loss meanwhile.
            resync_librdmacm();
        }
    }
}

/// The readiness eventfd of `event_fd`, in [`Inner`]: written (made
/// readable) by [`Inner::note_activity`] — every event queued, every
/// completion-channel event, a device loss: the moments `wait` is woken for —
/// by whichever thread holds the lock (the event thread, or the caller's
/// own call), and read back (cleared) by [`Inner::drained`] when the
/// caller's `poll_event` finds no event. Nothing happens before the caller
/// first asks for the fd.
#[derive(Default)]
pub(super) struct Ready {
    /// The eventfd, once `event_fd` created it.
    fd: Option<Arc<OwnedFd>>,
    /// Its counter is nonzero: it polls readable.
    signalled: bool,
}

impl Ready {
    /// Make the fd readable (if there is one and it is not yet).
    pub(super) fn signal(&mut self) {
        let Some(fd) = &self.fd else { return };
        if !self.signalled {
            self.signalled = true;
            if let Err(e) = rustix::io::write(fd.as_fd(), &1u64.to_ne_bytes()) {
                tracing::warn!(target: "relink_verbs", error = %e, "event fd write failed");
            }
        }
    }

    /// Make the fd unreadable; false if there is no fd.
    fn clear(&mut self) -> bool {
        let Some(fd) = &self.fd else { return false };
        if std::mem::take(&mut self.signalled) {
            let mut buf = [0u8; 8];
            // Nonblocking; resets the counter to zero.
            let _ = rustix::io::read(fd.as_fd(), &mut buf);
        }
        true
    }
}

impl Inner {
    /// The caller's `poll_event` found no event: clear the readiness fd,
    /// and arm, as `wait` does before it sleeps, every CQ the caller does
    /// not arm itself, so that its next completion makes the fd readable
    /// again. A completion already there is left for the caller, who polls
    /// its CQs after draining the events.
    pub(super) fn drained(&mut self) {
        if self.ready.clear() {
            self.arm_for_wait();
        }
    }

    /// Read, acknowledge and handle every async event of context `ctx`
    /// waiting now.
    fn drain_async_events(&mut self, ctx: u64) {
        // Each event is acked at once, by the read: handling it may close
        // the context (DEVICE_FATAL), and only the element's address is used
        // below.
        while let Some(ev) = self
            .ctxs
            .get(&ctx)
            .and_then(|c| c.raw.as_ref())
            .and_then(|raw| raw.get_async_event())
        {
            self.on_async(ctx, &ev);
            if !self.ctx_alive(ctx) {
                break;
            }
        }
    }

    /// One async event: reported as `Event::Async` if it names something
    /// of this provider; `DEVICE_FATAL` loses the device, and port and GID
    /// changes ask for a re-scan.
    fn on_async(&mut self, ctx: u64, ev: &AsyncEventInfo) {
        let ty = ev.event_type;
        // Which member of the element union is meant depends on the type,
        // checked below before use.
        let (qp_ptr, cq_ptr) = (ev.element, ev.element);
        let qp = || self.qp_by_ptr.get(&qp_ptr).copied();
        let event = match ty {
            sys::IBV_EVENT_DEVICE_FATAL => Some(AsyncEvent::DeviceFatal),
            sys::IBV_EVENT_PORT_ERR => Some(AsyncEvent::PortErr),
            sys::IBV_EVENT_PORT_ACTIVE => Some(AsyncEvent::PortActive),
            sys::IBV_EVENT_GID_CHANGE => Some(AsyncEvent::GidChange),
            sys::IBV_EVENT_QP_FATAL | sys::IBV_EVENT_QP_REQ_ERR | sys::IBV_EVENT_QP_ACCESS_ERR => {
                qp().map(|q| AsyncEvent::QpFatal(QpId(q)))
            }
            sys::IBV_EVENT_QP_LAST_WQE_REACHED => qp()
                .filter(|q| self.qps.get(q).is_some_and(|q| !q.last_wqe_reported))
                .map(|q| AsyncEvent::QpLastWqeReached(QpId(q))),
            sys::IBV_EVENT_CQ_ERR => self
                .cq_by_ptr
                .get(&cq_ptr)
                .map(|c| AsyncEvent::CqErr(CqId(*c))),
            _ => None,
        };
        tracing::debug!(target: "relink_verbs", ctx, event_type = ty, ?event, "async event");
        match event {
            Some(AsyncEvent::QpFatal(q)) => {
                if let Some(q) = self.qps.get_mut(&q.0) {
                    q.state = QpState::Err;
                }
            }
            Some(AsyncEvent::QpLastWqeReached(q)) => {
                if let Some(q) = self.qps.get_mut(&q.0) {
                    q.last_wqe_reported = true;
                }
            }
            _ => {}
        }
        let Some(event) = event else { return };
        self.push(Event::Async {
            ctx: ContextId(ctx),
            event,
        });
        match event {
            AsyncEvent::DeviceFatal => {
                let dev = self.ctxs[&ctx].device.clone();
                if let Some(info) = self.book.by_name(&dev.name).filter(|i| i.id == dev) {
                    let device = info.clone();
                    self.push(Event::Device(DeviceEvent {
                        kind: DeviceEventKind::Fatal,
                        device,
                    }));
                }
                self.lose_device(&dev);
            }
            AsyncEvent::PortErr | AsyncEvent::PortActive | AsyncEvent::GidChange => {
                self.rescan_requested = true;
            }
            _ => {}
        }
    }
}

impl VerbsProvider {
    /// The readiness eventfd (see [`Ready`]), created by the first call:
    /// readable at first (the provider cannot tell what the caller has
    /// seen); `None` if no eventfd can be created.
    pub(super) fn event_fd(&self) -> Option<BorrowedFd<'_>> {
        if let Some(fd) = self.shared.ready_fd.get() {
            return Some(fd.as_fd());
        }
        let mut inner = self.lock();
        // Under the lock: one creator.
        if self.shared.ready_fd.get().is_none() {
            let fd = match eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC) {
                Ok(fd) => Arc::new(fd),
                Err(e) => {
                    tracing::warn!(target: "relink_verbs", error = %e, "no event fd");
                    return None;
                }
            };
            inner.ready.fd = Some(fd.clone());
            inner.ready.signal();
            let _ = self.shared.ready_fd.set(fd);
        }
        drop(inner);
        self.shared.ready_fd.get().map(|fd| fd.as_fd())
    }

    /// Returns once an event is queued, a completion or other activity
    /// came since the last `wait`, or `deadline` passed (`None`: no
    /// deadline); it sleeps at most [`MAX_SLEEP`] at a time.
    pub(super) fn wait(&self, deadline: Option<Timestamp>) {
        let mut inner = self.lock();
        loop {
            if !inner.events.is_empty() || std::mem::take(&mut inner.activity) {
                return;
            }
            if inner.arm_for_wait() {
                inner.activity = false;
                return;
            }
            let now = self.shared.now();
            let left = match deadline {
                Some(d) if d <= now => return,
                Some(d) => d.saturating_since(now),
                None => MAX_SLEEP,
            };
            inner = self
                .shared
                .cond
                .wait_timeout(inner, left.min(MAX_SLEEP))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}
