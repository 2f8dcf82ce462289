//! [`DeviceWatcher`]: picks the best backend this kernel offers and runs it
//! on a thread of its own, delivering [`WatchEvent`]s to a channel or a
//! callback.
//!
//! # Choice of backend
//!
//! 1. [`Backend::Netlink`] if [`NetlinkMonitor::open`] works (kernel >=
//!    6.12 with `ib_core` loaded). A uevent socket is opened beside it for
//!    the uverbs removals (see the crate docs: the netlink `UNREGISTER`
//!    waits for the users to close the device).
//! 2. else [`Backend::Uevent`] if a `NETLINK_KOBJECT_UEVENT` socket opens;
//! 3. else [`Backend::Rescan`], every [`WatchConfig::rescan_interval`].
//!
//! [`WatchInfo`] says which was chosen and why the ones before it were not.
//!
//! # Order of operations
//!
//! The sockets are opened first, then the devices are listed (the
//! baseline, [`WatchInfo::initial`]), then the thread starts: an event
//! that happens meanwhile is either in the listing or arrives after it, and
//! the table behind the watcher drops the duplicate. When a socket
//! overflows (`ENOBUFS`) the watcher lists the devices again and reports the
//! difference, so no change is lost, only coalesced.
//!
//! # Stopping
//!
//! [`DeviceWatcher::stop`], or dropping the watcher, wakes the thread
//! through an eventfd and joins it. With a channel, the thread also ends
//! when the receiver is dropped.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags, Timespec};

use crate::netlink::{NetlinkMonitor, OpenError, RecvError};
use crate::rescan::{ListedDevice, SysfsLister, SYSFS_CLASS};
use crate::table::DeviceTable;
use crate::uevent::UeventMonitor;
use crate::{Backend, DeviceKey, WatchEvent, WatchEventKind};

/// How a watcher is set up.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Use only this backend (and fail if it cannot start); `None`: the
    /// best available.
    pub backend: Option<Backend>,
    /// Period of the re-scan backend.
    pub rescan_interval: Duration,
    /// Report the devices present at start as `Added`.
    pub report_existing: bool,
    /// sysfs's class directory (for tests: a fake one).
    pub class_root: PathBuf,
    /// Ask `RDMA_NLDEV_CMD_GET` for kernel indices where events lack them.
    pub netlink_index: bool,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            backend: None,
            rescan_interval: Duration::from_millis(100),
            report_existing: false,
            class_root: PathBuf::from(SYSFS_CLASS),
            netlink_index: true,
        }
    }
}

/// Where events go.
pub enum Sink {
    /// A channel; the watcher stops when the receiver is dropped.
    Channel(mpsc::Sender<WatchEvent>),
    /// A callback, run on the watcher's thread.
    Callback(Box<dyn FnMut(WatchEvent) + Send>),
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Sink::Channel(_) => "Sink::Channel",
            Sink::Callback(_) => "Sink::Callback",
        })
    }
}

impl Sink {
    /// Delivers; false when nobody listens any more.
    fn deliver(&mut self, ev: WatchEvent) -> bool {
        tracing::debug!(event = %ev, "device event");
        match self {
            Sink::Channel(tx) => tx.send(ev).is_ok(),
            Sink::Callback(f) => {
                f(ev);
                true
            }
        }
    }
}

/// What a started watcher uses.
#[derive(Debug, Clone)]
pub struct WatchInfo {
    /// The backend in use.
    pub backend: Backend,
    /// Whether a device going away is seen before its users close it
    /// ([`WatchEventKind::Removing`]): true with a uevent socket or the
    /// re-scan, false for netlink alone.
    pub prompt_removal: bool,
    /// The backends tried before, and why they were not used.
    pub skipped: Vec<(Backend, String)>,
    /// The devices present at start.
    pub initial: Vec<ListedDevice>,
}

/// Why a watcher could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatchError {
    /// The requested backend cannot run here.
    #[error("{backend} watcher unavailable: {reason}")]
    Unavailable {
        /// The backend that was asked for.
        backend: Backend,
        /// Why it cannot run (a kernel without the RDMA netlink monitor, no
        /// permission for the socket, ...), in a sentence.
        reason: String,
    },
    /// A system call failed.
    #[error("{context}: {source}")]
    Io {
        /// The step that failed.
        context: &'static str,
        /// The operating system's error of that step.
        #[source]
        source: io::Error,
    },
}

/// A running device watcher. Dropping it stops it.
#[derive(Debug)]
pub struct DeviceWatcher {
    info: WatchInfo,
    wake: Arc<OwnedFd>,
    thread: Option<thread::JoinHandle<()>>,
}

enum Primary {
    Netlink(NetlinkMonitor),
    Uevent(UeventMonitor),
    Rescan,
}

struct Worker {
    primary: Primary,
    /// The uevent socket beside netlink, for uverbs removals.
    uverbs: Option<UeventMonitor>,
    lister: SysfsLister,
    table: DeviceTable,
    interval: Duration,
    sink: Sink,
    wake: Arc<OwnedFd>,
}

impl DeviceWatcher {
    /// Starts the best watcher with the default configuration; events
    /// arrive on the returned channel.
    pub fn start() -> Result<(DeviceWatcher, mpsc::Receiver<WatchEvent>), WatchError> {
        DeviceWatcher::channel(WatchConfig::default())
    }

    /// Starts a watcher that sends its events to a channel.
    pub fn channel(
        config: WatchConfig,
    ) -> Result<(DeviceWatcher, mpsc::Receiver<WatchEvent>), WatchError> {
        let (tx, rx) = mpsc::channel();
        Ok((DeviceWatcher::start_with(config, Sink::Channel(tx))?, rx))
    }

    /// Starts a watcher that calls `f` (on its own thread) for each event.
    pub fn with_callback(
        config: WatchConfig,
        f: impl FnMut(WatchEvent) + Send + 'static,
    ) -> Result<DeviceWatcher, WatchError> {
        DeviceWatcher::start_with(config, Sink::Callback(Box::new(f)))
    }

    /// Starts a watcher delivering to `sink`.
    pub fn start_with(config: WatchConfig, mut sink: Sink) -> Result<DeviceWatcher, WatchError> {
        let wants = |b| config.backend.is_none() || config.backend == Some(b);
        let mut skipped = Vec::new();

        let netlink = if wants(Backend::Netlink) {
            match NetlinkMonitor::open() {
                Ok(m) => Some(m),
                Err(e) => {
                    let reason = match e {
                        OpenError::Unsupported { reason } => reason,
                        other => other.to_string(),
                    };
                    skipped.push((Backend::Netlink, reason));
                    None
                }
            }
        } else {
            None
        };
        let uevents = if wants(Backend::Uevent) || netlink.is_some() {
            match UeventMonitor::open() {
                Ok(m) => Some(m),
                Err(e) if netlink.is_some() => {
                    tracing::warn!(error = %e, "no uevent socket beside RDMA netlink: removals are reported only once the device's users have closed it");
                    None
                }
                Err(e) => {
                    skipped.push((Backend::Uevent, format!("NETLINK_KOBJECT_UEVENT: {e}")));
                    None
                }
            }
        } else {
            None
        };
        let (primary, uverbs) = match (netlink, uevents) {
            (Some(n), u) => (Primary::Netlink(n), u),
            (None, Some(u)) => (Primary::Uevent(u), None),
            (None, None) if wants(Backend::Rescan) => (Primary::Rescan, None),
            (None, None) => {
                let (backend, reason) = skipped.pop().unwrap_or((
                    config.backend.unwrap_or(Backend::Rescan),
                    "not tried".into(),
                ));
                return Err(WatchError::Unavailable { backend, reason });
            }
        };
        let backend = match primary {
            Primary::Netlink(_) => Backend::Netlink,
            Primary::Uevent(_) => Backend::Uevent,
            Primary::Rescan => Backend::Rescan,
        };
        let prompt_removal = backend != Backend::Netlink || uverbs.is_some();

        let nonblocking = |r: io::Result<()>| {
            r.map_err(|source| WatchError::Io {
                context: "making a netlink socket non-blocking",
                source,
            })
        };
        match &primary {
            Primary::Netlink(m) => nonblocking(m.set_nonblocking(true))?,
            Primary::Uevent(m) => nonblocking(m.set_nonblocking(true))?,
            Primary::Rescan => {}
        }
        if let Some(u) = &uverbs {
            nonblocking(u.set_nonblocking(true))?;
        }

        let lister =
            SysfsLister::with_class_root(&config.class_root).netlink_index(config.netlink_index);
        let listing = lister.list().map_err(|source| WatchError::Io {
            context: "listing the RDMA devices",
            source,
        })?;
        let mut table = DeviceTable::default();
        table.adopt(&listing);
        let initial = table.devices();
        if config.report_existing {
            for d in &initial {
                sink.deliver(WatchEvent {
                    kind: WatchEventKind::Added,
                    device: DeviceKey::new(d.name.clone(), d.index),
                    node_guid: d.node_guid,
                    source: backend,
                });
            }
        }

        let wake = Arc::new(
            eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).map_err(|e| {
                WatchError::Io {
                    context: "eventfd",
                    source: e.into(),
                }
            })?,
        );
        let worker = Worker {
            primary,
            uverbs,
            lister,
            table,
            interval: config.rescan_interval.max(Duration::from_millis(1)),
            sink,
            wake: Arc::clone(&wake),
        };
        let thread = thread::Builder::new()
            .name(format!("relink-devwatch-{backend}"))
            .spawn(move || worker.run())
            .map_err(|source| WatchError::Io {
                context: "spawning the watcher thread",
                source,
            })?;
        let info = WatchInfo {
            backend,
            prompt_removal,
            skipped,
            initial,
        };
        tracing::info!(%backend, prompt_removal, skipped = ?info.skipped, "RDMA device watcher started");
        Ok(DeviceWatcher {
            info,
            wake,
            thread: Some(thread),
        })
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        self.info.backend
    }

    /// Everything about how the watcher runs.
    pub fn info(&self) -> &WatchInfo {
        &self.info
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = rustix::io::write(&*self.wake, &1u64.to_ne_bytes());
            if t.join().is_err() {
                tracing::error!("RDMA device watcher thread panicked");
            }
        }
    }
}

impl Drop for DeviceWatcher {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Worker {
    fn run(mut self) {
        let mut next_scan = Instant::now() + self.interval;
        loop {
            let timeout = match self.primary {
                Primary::Rescan => {
                    let left = next_scan.saturating_duration_since(Instant::now());
                    Some(Timespec::try_from(left).unwrap_or(Timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    }))
                }
                _ => None,
            };
            let (stop, primary_ready, uverbs_ready) = {
                let wake = self.wake.as_fd();
                let mut fds = vec![PollFd::new(&wake, PollFlags::IN)];
                match &self.primary {
                    Primary::Netlink(m) => fds.push(PollFd::new(m, PollFlags::IN)),
                    Primary::Uevent(m) => fds.push(PollFd::new(m, PollFlags::IN)),
                    Primary::Rescan => {}
                }
                let has_primary = fds.len() == 2;
                if let Some(u) = &self.uverbs {
                    fds.push(PollFd::new(u, PollFlags::IN));
                }
                match poll(&mut fds, timeout.as_ref()) {
                    Ok(_) => {}
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => {
                        tracing::error!(error = %e, "poll failed; RDMA device watcher stops");
                        return;
                    }
                }
                let ready = |i: usize| fds.get(i).is_some_and(|f| !f.revents().is_empty());
                let primary_ready = has_primary && ready(1);
                let uverbs_ready = self.uverbs.is_some() && ready(if has_primary { 2 } else { 1 });
                (ready(0), primary_ready, uverbs_ready)
            };
            if stop {
                return;
            }
            let alive = if let Primary::Rescan = self.primary {
                if Instant::now() >= next_scan {
                    next_scan = Instant::now() + self.interval;
                    self.resync()
                } else {
                    true
                }
            } else {
                (!primary_ready || self.drain_primary()) && (!uverbs_ready || self.drain_uverbs())
            };
            if !alive {
                return;
            }
        }
    }

    fn deliver(&mut self, evs: Vec<WatchEvent>) -> bool {
        evs.into_iter().all(|ev| self.sink.deliver(ev))
    }

    /// Lists the devices and reports what changed.
    fn resync(&mut self) -> bool {
        match self.lister.list() {
            Ok(l) => {
                // Whatever the backend, these events come from a listing.
                let evs = self.table.diff(&l, Backend::Rescan);
                self.deliver(evs)
            }
            Err(e) => {
                tracing::warn!(error = %e, "listing RDMA devices failed");
                true
            }
        }
    }

    /// Handles a receive error; false when the sink is gone.
    fn on_recv_error(&mut self, e: RecvError, what: &str) -> bool {
        match e {
            RecvError::WouldBlock => true,
            RecvError::Overrun => {
                tracing::warn!("{what} socket overrun: events lost, listing devices again");
                self.resync()
            }
            RecvError::Io(e) => {
                tracing::warn!(error = %e, "{what} receive failed");
                true
            }
        }
    }

    /// Reads the primary socket until it would block.
    fn drain_primary(&mut self) -> bool {
        loop {
            let evs = match &mut self.primary {
                Primary::Netlink(m) => match m.recv() {
                    Ok(msgs) => {
                        let mut evs = Vec::new();
                        for msg in msgs {
                            match msg {
                                Ok(ev) => evs.extend(self.table.on_monitor(&ev, &self.lister)),
                                Err(e) => tracing::warn!(error = %e, "bad RDMA netlink message"),
                            }
                        }
                        evs
                    }
                    Err(e) => return self.on_recv_error(e, "RDMA netlink"),
                },
                Primary::Uevent(m) => match m.recv() {
                    Ok(Some(Ok(u))) => self.table.on_uevent(&u, &self.lister, true),
                    Ok(Some(Err(e))) => {
                        tracing::warn!(error = %e, "bad RDMA uevent");
                        Vec::new()
                    }
                    Ok(None) => Vec::new(),
                    Err(e) => return self.on_recv_error(e, "uevent"),
                },
                Primary::Rescan => return true,
            };
            if !self.deliver(evs) {
                return false;
            }
        }
    }

    /// Reads the uverbs uevent socket (beside netlink) until it would block.
    fn drain_uverbs(&mut self) -> bool {
        loop {
            let Some(u) = &mut self.uverbs else {
                return true;
            };
            let evs = match u.recv() {
                Ok(Some(Ok(u))) => self.table.on_uevent(&u, &self.lister, false),
                Ok(Some(Err(e))) => {
                    tracing::warn!(error = %e, "bad RDMA uevent");
                    Vec::new()
                }
                Ok(None) => Vec::new(),
                Err(e) => return self.on_recv_error(e, "uevent"),
            };
            if !self.deliver(evs) {
                return false;
            }
        }
    }
}
