//! A provider's life: [`VerbsProvider::with_config`] (the environment, the
//! rdma_cm event channel, the first scan, the event thread, the device
//! watcher), its public methods, and `Drop`, which stops the thread and
//! releases everything the caller left.

#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Instant;

use super::events::{event_loop, Ready};
use super::{Inner, RescanHandle, Shared, VerbsProvider};
use crate::errno;
use crate::ffi::{self, resync_librdmacm};
use crate::identity::DeviceBook;
use crate::memory::Allocations;
use crate::{init_environment, VerbsConfig, VerbsError};

impl VerbsProvider {
    /// A provider with the default settings.
    pub fn new() -> Result<VerbsProvider, VerbsError> {
        VerbsProvider::with_config(VerbsConfig::default())
    }

    /// A provider with `config`. Sets `RDMAV_ALLOW_DISASSOC_DESTROY=1`
    /// before its first verbs call if that is sound ([`init_environment`]:
    /// the variable is unset and this is the only thread; otherwise it logs
    /// one warning per process and goes on without it, see the crate docs),
    /// opens an rdma_cm event channel, scans the devices and starts the
    /// event thread.
    pub fn with_config(config: VerbsConfig) -> Result<VerbsProvider, VerbsError> {
        if let Err(e) = init_environment() {
            static WARNED: AtomicBool = AtomicBool::new(false);
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    target: "relink_verbs",
                    "{e}. Going on without it: destroys on a lost device then fail with \
                     EIO, which relink takes as already released, and libibverbs keeps \
                     those objects' user-space memory"
                );
            }
        }
        // Destroyed in Drop.
        let channel = ffi::EventChannel::create().map_err(|e| {
            VerbsError::Unavailable(format!(
                "rdma_create_event_channel: {} (is the rdma_ucm module loaded?)",
                errno::describe(e)
            ))
        })?;
        let chan_fd = channel.fd();
        if let Err(e) = ffi::set_nonblocking(channel.fd_borrowed()) {
            // No ids on it.
            channel.destroy();
            return Err(e.into());
        }
        let wake = match ffi::new_eventfd() {
            Ok(fd) => Arc::new(fd),
            Err(e) => {
                // No ids on it.
                channel.destroy();
                return Err(e.into());
            }
        };
        let mut inner = Inner {
            next_handle: 1,
            book: DeviceBook::new(),
            last_scan: Vec::new(),
            resync_pending: false,
            resync_now: false,
            reapers: Vec::new(),
            wake: wake.clone(),
            channel: Some(channel),
            rescan_requested: false,
            events: VecDeque::new(),
            activity: false,
            ready: Ready::default(),
            fds_changed: true,
            ctxs: HashMap::new(),
            pds: HashMap::new(),
            cqs: HashMap::new(),
            srqs: HashMap::new(),
            mrs: HashMap::new(),
            mws: HashMap::new(),
            qps: HashMap::new(),
            cms: HashMap::new(),
            cq_by_ptr: HashMap::new(),
            qp_by_ptr: HashMap::new(),
            srq_by_ptr: HashMap::new(),
            qp_by_num: HashMap::new(),
            cm_by_ptr: HashMap::new(),
            parked: Vec::new(),
            allocs: Allocations::default(),
            scratch: Default::default(),
        };
        // Devices present now are known before the first call returns; they
        // are not reported as `Added`.
        inner.rescan();
        inner.events.clear();
        let shared = Arc::new(Shared {
            inner: Mutex::new(inner),
            cond: Condvar::new(),
            start: Instant::now(),
            stop: AtomicBool::new(false),
            wake,
            ready_fd: OnceLock::new(),
            chan_fd,
            rescan_interval: config.rescan_interval,
            default_source: config.default_source,
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("relink-verbs-events".into())
            .spawn(move || event_loop(&s))?;
        let watcher = if config.watch_devices {
            start_watcher(RescanHandle {
                shared: shared.clone(),
            })
        } else {
            None
        };
        Ok(VerbsProvider {
            shared,
            thread: Some(thread),
            watcher,
        })
    }

    /// The backend of the device watcher the provider runs, if one runs
    /// (`"rdma-netlink"` or `"uevent"`).
    pub fn watch_backend(&self) -> Option<&'static str> {
        self.watcher.as_ref().map(|w| match w.backend() {
            relink_devwatch::Backend::Netlink => "rdma-netlink",
            relink_devwatch::Backend::Uevent => "uevent",
            relink_devwatch::Backend::Rescan => "rescan",
        })
    }

    /// Re-scan the device list now (the event thread does it).
    pub fn rescan_now(&self) {
        self.rescan_handle().rescan();
    }

    /// A handle an external device watcher can keep to ask for re-scans.
    pub fn rescan_handle(&self) -> RescanHandle {
        RescanHandle {
            shared: self.shared.clone(),
        }
    }
}

/// A device watcher whose every event asks for a re-scan (the scan decides
/// what changed, so both watcher and periodic scan feed one bookkeeping).
fn start_watcher(handle: RescanHandle) -> Option<relink_devwatch::watch::DeviceWatcher> {
    use relink_devwatch::watch::{DeviceWatcher, WatchConfig};
    match DeviceWatcher::with_callback(WatchConfig::default(), move |ev| {
        tracing::debug!(event = %ev, "device watcher: re-scan");
        handle.rescan();
    }) {
        // A re-scanning watcher would only repeat the provider's own scan.
        Ok(w) if w.backend() == relink_devwatch::Backend::Rescan => None,
        Ok(w) => {
            tracing::debug!(backend = %w.backend(), "device watcher started");
            Some(w)
        }
        Err(e) => {
            tracing::warn!(
                error = %e,
                "no device watcher; device changes are seen at the periodic re-scan"
            );
            None
        }
    }
}

impl Drop for VerbsProvider {
    fn drop(&mut self) {
        drop(self.watcher.take());
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.kick();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let reapers = std::mem::take(&mut self.shared.lock().reapers);
        for r in reapers {
            let _ = r.join();
        }
        let mut inner = self.shared.lock();
        inner.release_everything();
        // Every id on the channel was destroyed above, and the event
        // thread has stopped.
        if let Some(channel) = inner.channel.take() {
            if !channel.destroy() {
                tracing::warn!(target: "relink_verbs", "a CM id outlived its provider: its event channel is left open");
            }
        }
        resync_librdmacm();
    }
}
