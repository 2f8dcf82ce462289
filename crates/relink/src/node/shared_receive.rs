//! Shared receive queues: sessions of a node that receive through one SRQ
//! per device context instead of receive slots of their own.
//!
//! The application makes a shared receive queue with
//! [`Node::create_shared_receive`] (its depth and largest message: a spec,
//! nothing on a device yet) and opts sessions in with
//! [`SessionOptionsBuilder::shared_receive`](super::SessionOptionsBuilder::shared_receive).
//! An SRQ belongs to a protection domain, so the node keeps, per shared
//! receive queue and device registration in use, one device context with
//! its PD, the SRQ and the receive slots registered and posted to it
//! ([`SharedDevice`]); every session on that device builds its QP, CQ and
//! registrations in that PD and attaches its QP to that SRQ. The first
//! session on a device builds it; the last transport on it to go destroys
//! it (it is reference-counted by the transports). After a device reset, a
//! replacement or a failover the sessions' new transports are on a new
//! registration, so a new SRQ is built there and the old one goes with the
//! last transport of the old device.
//!
//! A receive completes on the CQ of the QP that consumed it, so it reaches
//! the session it belongs to; its slot is posted to the SRQ again once the
//! message is copied out — and also when the receive failed, or when the
//! transport is torn down or closing with completions unread, so the SRQ
//! never loses a slot.
//!
//! # Credits
//!
//! A session keeps its [`recv_slots`](super::SessionOptions::recv_slots)
//! as its peer's credits (the peer sends at most `recv_slots − 8` data
//! messages beyond the confirmed delivery, and control messages in the 8
//! others). Each session **reserves** its `recv_slots` out of the queue's
//! depth for its whole life (until it is reaped and its last transport is
//! gone); the sum of the reservations never exceeds the depth, so every
//! message finds a posted receive on every device — no receiver-not-ready
//! retries, no loss. A session that would pass the depth is refused: a
//! `connect` with [`SharedReceiveError::Full`], an incoming session of a
//! listener with the `Busy` refusal (the peer retries under its policy).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

use relink_core::reason::{AttemptFailure, ProviderFailure, TransportObject};
use relink_core::wire;
use relink_fabric::{
    Access, ContextId, CreateError, DeviceId, DeviceInfo, Memory, MrInfo, OpenError, PdId,
    Provider, SrqId, SrqInit,
};

use super::destroy::log_destroy;
use super::error::SharedReceiveError;
use super::options::SessionOptions;
use super::wr::WrBatch;
use super::Node;

/// Identifies a shared receive queue of a [`Node`] (made with
/// [`Node::create_shared_receive`]); never reused by that node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SharedReceiveHandle(pub u64);

/// How a shared receive queue is built: made with
/// [`SharedReceiveOptions::builder`] (or [`SharedReceiveOptions::default`]);
/// read-only outside this crate (more options may come).
///
/// ```
/// use relink::SharedReceiveOptions;
///
/// let opts = SharedReceiveOptions::builder().depth(512).max_message(1024).build()?;
/// assert_eq!((opts.depth, opts.max_message), (512, 1024));
/// # Ok::<(), relink::SharedReceiveError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedReceiveOptions {
    /// Receives the queue holds on each device: the sum of the
    /// [`recv_slots`](super::SessionOptions::recv_slots) of the sessions on
    /// it at most (see the credit rule, [`Node::create_shared_receive`]).
    /// At least 9 (one session's smallest `recv_slots`). Default: 256.
    pub depth: u32,
    /// Largest message payload in bytes a session on the queue receives,
    /// at least 8; a session's own
    /// [`max_message`](super::SessionOptions::max_message) must not be
    /// larger. Default: 4096.
    pub max_message: u32,
}

impl Default for SharedReceiveOptions {
    fn default() -> SharedReceiveOptions {
        SharedReceiveOptions {
            depth: 256,
            max_message: 4096,
        }
    }
}

impl SharedReceiveOptions {
    /// A builder that starts from the defaults.
    pub fn builder() -> SharedReceiveOptionsBuilder {
        SharedReceiveOptionsBuilder {
            opts: SharedReceiveOptions::default(),
        }
    }

    /// Check every option.
    ///
    /// # Errors
    /// [`SharedReceiveError::Invalid`] naming `depth` (9..=65536) or
    /// `max_message` (8..=16 MiB).
    pub fn validate(&self) -> Result<(), SharedReceiveError> {
        let invalid = |key, reason| Err(SharedReceiveError::Invalid { key, reason });
        if !(9..=65_536).contains(&self.depth) {
            return invalid("depth", "must be 9..=65536");
        }
        if !(8..=16 << 20).contains(&self.max_message) {
            return invalid("max_message", "must be 8..=16777216");
        }
        Ok(())
    }

    /// Bytes per receive slot: relink's header and the largest message.
    fn slot_size(&self) -> u32 {
        self.max_message + wire::HEADER_LEN as u32
    }
}

/// Makes [`SharedReceiveOptions`], one setter per option, checked by
/// [`build`](SharedReceiveOptionsBuilder::build).
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct SharedReceiveOptionsBuilder {
    opts: SharedReceiveOptions,
}

impl SharedReceiveOptionsBuilder {
    /// [`SharedReceiveOptions::depth`]: receives per device.
    pub fn depth(mut self, depth: u32) -> SharedReceiveOptionsBuilder {
        self.opts.depth = depth;
        self
    }

    /// [`SharedReceiveOptions::max_message`]: largest message payload.
    pub fn max_message(mut self, bytes: u32) -> SharedReceiveOptionsBuilder {
        self.opts.max_message = bytes;
        self
    }

    /// The options, checked.
    ///
    /// # Errors
    /// [`SharedReceiveError::Invalid`] for the first option out of range
    /// ([`SharedReceiveOptions::validate`]).
    pub fn build(self) -> Result<SharedReceiveOptions, SharedReceiveError> {
        self.opts.validate()?;
        Ok(self.opts)
    }
}

/// How much of a shared receive queue is in use
/// ([`Node::shared_receive_usage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedReceiveUsage {
    /// [`SharedReceiveOptions::depth`].
    pub depth: u32,
    /// Receive slots reserved by the sessions on it (at most `depth`).
    pub reserved: u32,
    /// Device registrations with an SRQ built for it now.
    pub devices: usize,
}

/// A shared receive queue of the node: its options, the reservations of
/// its sessions and its SRQ on each device registration in use.
pub(super) struct SharedPool {
    opts: SharedReceiveOptions,
    reserved: AtomicU32,
    devices: Mutex<BTreeMap<DeviceId, Weak<SharedDevice>>>,
}

/// A session's share of a [`SharedPool`]: `slots` receives, given back when
/// the last holder (the session's entry, its transports) drops it.
pub(super) struct Reservation {
    pool: Arc<SharedPool>,
    slots: u32,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.pool.reserved.fetch_sub(self.slots, Ordering::Relaxed);
    }
}

/// One device registration's objects of a shared receive queue: a device
/// context, its PD, the receive slots registered in it and the SRQ they
/// are posted to. Held by the transports on it; the last one to drop it
/// destroys it (its QP destroyed first).
pub(super) struct SharedDevice {
    provider: Arc<dyn Provider>,
    /// The context every session on the device uses.
    pub ctx: Option<ContextId>,
    /// The PD every session on the device builds in.
    pub pd: Option<PdId>,
    /// The receive slots' host memory (one allocation per device, so two
    /// devices in use at once never share a slot).
    pub memory: Memory,
    /// Their registration.
    pub recv_mr: Option<MrInfo>,
    /// The SRQ.
    pub srq: Option<SrqId>,
    /// Bytes per receive slot.
    pub slot_size: u32,
}

impl Drop for SharedDevice {
    fn drop(&mut self) {
        let p = &*self.provider;
        if let Some(srq) = self.srq.take() {
            log_destroy("SRQ", p.destroy_srq(srq));
        }
        if let Some(mr) = self.recv_mr.take() {
            log_destroy("MR", p.dereg_mr(mr.id));
        }
        if let Some(pd) = self.pd.take() {
            log_destroy("PD", p.dealloc_pd(pd));
        }
        if let Some(ctx) = self.ctx.take() {
            log_destroy("context", p.close_device(ctx));
        }
    }
}

/// A transport's hold on its device's shared receive queue and on its
/// session's reservation.
pub(super) struct Attached {
    pub device: Arc<SharedDevice>,
    pub _reservation: Arc<Reservation>,
}

impl Reservation {
    /// The device objects of the queue on `device`: the ones in use, or
    /// new ones (context, PD, receive slots registered and posted, SRQ).
    pub fn attach(
        self: &Arc<Reservation>,
        p: &Arc<dyn Provider>,
        device: &DeviceInfo,
    ) -> Result<Attached, AttemptFailure> {
        let pool = &self.pool;
        let mut devices = pool.devices.lock().unwrap_or_else(|e| e.into_inner());
        devices.retain(|_, d| d.strong_count() > 0);
        if let Some(d) = devices.get(&device.id).and_then(Weak::upgrade) {
            return Ok(Attached {
                device: d,
                _reservation: self.clone(),
            });
        }
        let d = Arc::new(build_device(p, device, &pool.opts)?);
        devices.insert(device.id.clone(), Arc::downgrade(&d));
        Ok(Attached {
            device: d,
            _reservation: self.clone(),
        })
    }
}

/// Build the queue's objects on `device`; what was built is destroyed
/// again if a step fails.
fn build_device(
    p: &Arc<dyn Provider>,
    device: &DeviceInfo,
    opts: &SharedReceiveOptions,
) -> Result<SharedDevice, AttemptFailure> {
    let e = |object, error| ProviderFailure::Create { object, error };
    let slot_size = opts.slot_size();
    let memory = p
        .alloc_memory(opts.depth as usize * slot_size as usize)
        .map_err(|_| e(TransportObject::RecvSlots, CreateError::Exhausted("memory")))?;
    let mut d = SharedDevice {
        provider: p.clone(),
        ctx: None,
        pd: None,
        memory,
        recv_mr: None,
        srq: None,
        slot_size,
    };
    d.ctx = Some(p.open_device(&device.id).map_err(|x| match x {
        OpenError::Io(io) => ProviderFailure::OpenDevice(io.kind()).into(),
        _ => AttemptFailure::DeviceLost,
    })?);
    let pd = p
        .alloc_pd(d.ctx.expect("opened"))
        .map_err(|x| e(TransportObject::Pd, x))?;
    d.pd = Some(pd);
    let len = d.memory.len() as u64;
    let mr = p
        .reg_mr(pd, &d.memory, d.memory.addr(), len, Access::LOCAL_WRITE)
        .map_err(|x| e(TransportObject::RecvSlots, x))?;
    d.recv_mr = Some(mr);
    let srq = p
        .create_srq(
            pd,
            SrqInit {
                max_wr: opts.depth,
                max_sge: 1,
            },
        )
        .map_err(|x| e(TransportObject::Srq, x))?;
    d.srq = Some(srq);
    let mut wrs = WrBatch::default();
    for slot in 0..opts.depth {
        wrs.push_recv(&mr, slot_size, slot);
    }
    p.post_srq_recv(srq, wrs.as_slice())
        .map_err(ProviderFailure::PostRecv)?;
    tracing::debug!(device = %device.id, depth = opts.depth, "shared receive queue built");
    Ok(d)
}

impl Node {
    /// Make a shared receive queue for sessions of this node
    /// ([`SessionOptionsBuilder::shared_receive`](super::SessionOptionsBuilder::shared_receive)).
    /// Nothing is built on a device yet: the first session on a device
    /// builds the queue there (a device context, its PD, `depth` receive
    /// slots of `max_message` bytes posted to an SRQ), every session on
    /// that device shares it, and the last one to leave the device
    /// destroys it. After every recovery the sessions build it again on
    /// the device that carries them.
    ///
    /// **Credit rule.** Each session on the queue reserves its
    /// [`recv_slots`](super::SessionOptions::recv_slots) out of `depth`
    /// until it is reaped; a session that would pass `depth` is refused
    /// ([`SharedReceiveError::Full`] from [`Node::connect`]; an incoming
    /// session of a listener is refused `Busy`, which its peer retries).
    /// So the queue never runs out of receives and the peer's credits stay
    /// what they are for a session with receives of its own. Both sides of
    /// a session use the same `recv_slots`, as without a shared queue.
    ///
    /// # Errors
    /// [`SharedReceiveError::Invalid`] naming the option out of range
    /// ([`SharedReceiveOptions::validate`]).
    pub fn create_shared_receive(
        &mut self,
        opts: SharedReceiveOptions,
    ) -> Result<SharedReceiveHandle, SharedReceiveError> {
        opts.validate()?;
        let handle = self.new_handle();
        self.shared.insert(
            handle,
            Arc::new(SharedPool {
                opts,
                reserved: AtomicU32::new(0),
                devices: Mutex::new(BTreeMap::new()),
            }),
        );
        Ok(SharedReceiveHandle(handle))
    }

    /// Forget a shared receive queue no session or listener uses any more.
    ///
    /// # Errors
    /// [`SharedReceiveError::Unknown`] for a handle the node does not
    /// know (or forgot); [`SharedReceiveError::InUse`] while a session
    /// (until it is reaped and its transports are gone) or a listener uses
    /// it.
    pub fn remove_shared_receive(
        &mut self,
        h: SharedReceiveHandle,
    ) -> Result<(), SharedReceiveError> {
        let pool = self
            .shared
            .get(&h.0)
            .ok_or(SharedReceiveError::Unknown(h))?;
        let listeners = self
            .listeners
            .values()
            .filter(|l| l.opts.shared_receive == Some(h))
            .count();
        let holders = Arc::strong_count(pool) - 1;
        let posted = self.shared_posted.get(&h.0).is_some_and(|p| !p.is_empty());
        if listeners + holders > 0 || posted {
            return Err(SharedReceiveError::InUse);
        }
        self.shared.remove(&h.0);
        self.shared_posted.remove(&h.0);
        Ok(())
    }

    /// How much of shared receive queue `h` is in use; `None` for a handle
    /// the node does not know.
    pub fn shared_receive_usage(&self, h: SharedReceiveHandle) -> Option<SharedReceiveUsage> {
        let pool = self.shared.get(&h.0)?;
        let devices = pool.devices.lock().unwrap_or_else(|e| e.into_inner());
        Some(SharedReceiveUsage {
            depth: pool.opts.depth,
            reserved: pool.reserved.load(Ordering::Relaxed),
            devices: devices.values().filter(|d| d.strong_count() > 0).count(),
        })
    }

    /// The shared receive queues' share of [`Node::footprint`]: the queues,
    /// their SRQs on devices, and the bytes of those SRQs' receive slots.
    pub(super) fn shared_receive_footprint(&self) -> (usize, usize, usize) {
        let mut srqs = 0;
        let mut bytes = 0;
        for pool in self.shared.values() {
            let devices = pool.devices.lock().unwrap_or_else(|e| e.into_inner());
            for d in devices.values().filter_map(Weak::upgrade) {
                srqs += 1;
                bytes += d.memory.len();
            }
        }
        (self.shared.len(), srqs, bytes)
    }

    /// Check that sessions of `opts` may use their shared receive queue,
    /// if they name one: it exists, it takes their messages, and one
    /// session's `recv_slots` fit in its depth.
    pub(super) fn check_shared_receive(
        &self,
        opts: &SessionOptions,
    ) -> Result<(), SharedReceiveError> {
        let Some(h) = opts.shared_receive else {
            return Ok(());
        };
        let pool = self
            .shared
            .get(&h.0)
            .ok_or(SharedReceiveError::Unknown(h))?;
        if opts.max_message > pool.opts.max_message {
            return Err(SharedReceiveError::MessageTooLarge {
                max_message: opts.max_message,
                limit: pool.opts.max_message,
            });
        }
        if opts.recv_slots > pool.opts.depth {
            return Err(SharedReceiveError::Full {
                depth: pool.opts.depth,
                reserved: 0,
                wanted: opts.recv_slots,
            });
        }
        Ok(())
    }

    /// Reserve a new session's share of its shared receive queue, if it
    /// names one.
    pub(super) fn reserve_shared_receive(
        &self,
        opts: &SessionOptions,
    ) -> Result<Option<Arc<Reservation>>, SharedReceiveError> {
        self.check_shared_receive(opts)?;
        let Some(h) = opts.shared_receive else {
            return Ok(None);
        };
        let pool = &self.shared[&h.0];
        let depth = pool.opts.depth;
        let wanted = opts.recv_slots;
        pool.reserved
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                (r + wanted <= depth).then_some(r + wanted)
            })
            .map_err(|reserved| SharedReceiveError::Full {
                depth,
                reserved,
                wanted,
            })?;
        Ok(Some(Arc::new(Reservation {
            pool: pool.clone(),
            slots: wanted,
        })))
    }
}
