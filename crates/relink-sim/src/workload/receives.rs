//! Receives the target posts ([`Node::post_receive`]), for the workloads
//! that take their deliveries so ([`Workload::post_receives`]): a pool of
//! buffers, in a registration of the target's node or in the receive area
//! of its data region ([`RECV_AREA`](super::RECV_AREA)), reposted after
//! each receive is taken — but now and then not for a while, so that the
//! buffers run out and messages wait in the delivery queue (to fill the
//! buffers posted later, or to be polled meanwhile). Some buffers are
//! shorter than the messages, which arrive truncated.
//!
//! Each receive must end once, in the order the buffers were posted, with
//! its buffer's context and range: a message with its bytes (whole, or
//! the first bytes of a longer one, said truncated) at the start of the
//! buffer and nothing written past them; a notice of a WRITE with
//! immediate data with nothing written at all; after the session's end,
//! `Flushed`. Messages and notices are then checked as polled ones are
//! (order, bytes, the notice's landing slot).

use std::collections::VecDeque;
use std::time::Duration;

use relink::{
    Access, LocalRange, Node, ReceiveOutcome, Received, RegionId, SessionHandle, SubmitError,
};
use relink_fabric::{Memory, Timestamp};

use super::books::Workload;
use super::layout::{MAX_MESSAGE, RECV_AREA, RECV_SLOT, RECV_SLOTS, TARGET_DATA};
use super::payload::mix;

/// How the target takes its deliveries.
#[derive(Default)]
pub(crate) enum Receives {
    /// Polled ([`Node::poll_delivery`], [`Node::poll_written`]).
    #[default]
    Poll,
    /// Through posted receives, in the way `key` chooses, once the
    /// target's session is known.
    Wanted(u64),
    /// Through the posted receives of this pool.
    Posting(Box<Pool>),
}

impl Receives {
    /// Whether the target posts receives.
    pub(crate) fn posting(&self) -> bool {
        !matches!(self, Receives::Poll)
    }
}

/// What the posted receives came to.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReceiveFigures {
    /// Buffers posted.
    pub posted: u64,
    /// Receives that ended with a message.
    pub messages: u64,
    /// Of which truncated.
    pub truncated: u64,
    /// Receives that ended with the notice of a WRITE with immediate data.
    pub notices: u64,
    /// Receives the session's end flushed.
    pub flushed: u64,
    /// Messages and notices polled while no buffer was posted.
    pub polled: u64,
    /// Whiles without reposting.
    pub holds: u64,
}

impl std::ops::AddAssign for ReceiveFigures {
    fn add_assign(&mut self, o: ReceiveFigures) {
        self.posted += o.posted;
        self.messages += o.messages;
        self.truncated += o.truncated;
        self.notices += o.notices;
        self.flushed += o.flushed;
        self.polled += o.polled;
        self.holds += o.holds;
    }
}

/// A buffer posted and not taken back yet.
#[derive(Debug, Clone, Copy)]
struct Buffer {
    slot: u64,
    local: LocalRange,
    context: u64,
    /// The byte its whole slot was filled with before it was posted.
    fill: u8,
}

/// The target's pool of receive buffers.
pub(crate) struct Pool {
    memory: Memory,
    region: RegionId,
    /// The region is a registration of the target's node (deregistered
    /// after the session closed), not its data region.
    registered: bool,
    /// Offset of slot 0 in the region.
    base: u64,
    /// Slots not posted.
    free: Vec<u64>,
    /// Buffers posted (and maybe ended, not taken back yet), in posting
    /// order.
    posted: VecDeque<Buffer>,
    rng: u64,
    /// One in this many buffers is short (0: none).
    short_share: u64,
    /// No buffer is posted again before this.
    hold_until: Timestamp,
    /// When the next while without reposting may start.
    next_hold: Timestamp,
    contexts: u64,
    pub(crate) figures: ReceiveFigures,
}

impl Pool {
    /// The pool `key` chooses (4 to 16 buffers, in a registration or in
    /// the data region, how many are short) for the target's session `t`.
    fn new(key: u64, target: &mut Node, t: SessionHandle) -> Result<Pool, String> {
        let r = mix(key ^ 0x9e5e);
        let slots = 4 + r % (RECV_SLOTS - 3);
        let len = (RECV_SLOTS * RECV_SLOT) as usize;
        let (memory, region, registered, base) = if (r >> 8) & 1 == 1 {
            let memory = target.alloc_memory(len).map_err(|e| e.to_string())?;
            let id = target
                .register(memory.clone(), Access::LOCAL_WRITE)
                .map_err(|e| e.to_string())?;
            (memory, id, true, 0)
        } else {
            let memory = target.region(t, TARGET_DATA).map_err(|e| e.to_string())?;
            (memory, TARGET_DATA, false, RECV_AREA)
        };
        let now = target.now();
        Ok(Pool {
            memory,
            region,
            registered,
            base,
            free: (0..slots).rev().collect(),
            posted: VecDeque::new(),
            rng: r,
            short_share: [0, 3, 8, 20][((r >> 16) % 4) as usize],
            hold_until: now,
            next_hold: now,
            contexts: 0,
            figures: ReceiveFigures::default(),
        })
    }

    fn next(&mut self) -> u64 {
        self.rng = mix(self.rng);
        self.rng
    }

    /// Post slot `slot`: filled with a byte of its own first, then as a
    /// buffer of a message's largest size or more — or, one in
    /// `short_share`, of 10 to 63 bytes (most messages are longer).
    fn post(&mut self, target: &mut Node, t: SessionHandle, slot: u64) -> Result<(), SubmitError> {
        let r = self.next();
        let len = if self.short_share > 0 && r % self.short_share == 0 {
            10 + (r >> 8) % 54
        } else {
            u64::from(MAX_MESSAGE) + (r >> 8) % (RECV_SLOT - u64::from(MAX_MESSAGE) + 1)
        };
        let fill = 0xa0 | ((r >> 24) as u8 & 0x0f);
        let offset = self.base + slot * RECV_SLOT;
        let _ = self
            .memory
            .write(offset as usize, &[fill; RECV_SLOT as usize]);
        let local = LocalRange {
            region: self.region,
            offset,
            len: len as u32,
        };
        self.contexts += 1;
        let context = mix(self.contexts ^ 0xb0f) | 1 << 63;
        target.post_receive(t, local, context)?;
        self.figures.posted += 1;
        self.posted.push_back(Buffer {
            slot,
            local,
            context,
            fill,
        });
        Ok(())
    }
}

impl Workload {
    /// The target (`target`, its node) takes this workload's deliveries
    /// through receives it posts ([`Node::post_receive`]), as `key`
    /// chooses: a pool of 4 to 16 buffers in a registration of the
    /// target's node or in its data region, some of them short; reposted
    /// after each receive is taken, but now and then not for up to 2 ms
    /// (the messages wait, and are polled meanwhile or fill the buffers
    /// posted later). The pool is made now if the target's session is
    /// known, else when it is. With a registration,
    /// [`close_and_check`](Self::close_and_check) (or
    /// [`finish_receives`](Self::finish_receives)) deregisters it after
    /// the close.
    pub fn post_receives(&mut self, target: &mut Node, key: u64) {
        if self.receives.posting() {
            return;
        }
        self.receives = Receives::Wanted(key);
        if let Some(t) = self.target {
            self.drain_posted(target, t);
        }
    }

    /// What the posted receives came to; `None` if the target polls.
    pub fn receive_figures(&self) -> Option<ReceiveFigures> {
        match &self.receives {
            Receives::Posting(p) => Some(p.figures),
            _ => None,
        }
    }

    /// Whether the target posts receives, whether in a registration, and
    /// what they came to.
    pub(crate) fn receive_pool(&self) -> (bool, bool, ReceiveFigures) {
        match &self.receives {
            Receives::Posting(p) => (true, p.registered, p.figures),
            _ => (false, false, ReceiveFigures::default()),
        }
    }

    /// Take what the target's posted receives hold, repost, and poll what
    /// waits when no buffer is posted (see the module's docs).
    pub(crate) fn drain_posted(&mut self, target: &mut Node, t: SessionHandle) {
        let now = target.now();
        let mut pool = match std::mem::take(&mut self.receives) {
            Receives::Posting(p) => p,
            Receives::Wanted(key) => match Pool::new(key, target, t) {
                Ok(p) => Box::new(p),
                Err(e) => {
                    self.problem(now, format!("no pool of receive buffers: {e}"));
                    self.take_polled(target, t);
                    return;
                }
            },
            Receives::Poll => {
                self.take_polled(target, t);
                return;
            }
        };
        let holding = now < pool.hold_until;
        loop {
            let mut took = 0;
            while let Some(r) = target.poll_received(t) {
                self.ended_receive(&mut pool, r, now);
                took += 1;
            }
            let mut posted = 0;
            if !holding {
                while let Some(slot) = pool.free.pop() {
                    if let Err(e) = pool.post(target, t, slot) {
                        pool.free.push(slot);
                        if !matches!(e, SubmitError::Ended(_) | SubmitError::NoSession(_)) {
                            self.problem(now, format!("post_receive refused: {e}"));
                        }
                        break;
                    }
                    posted += 1;
                }
            }
            // A buffer posted may have taken a message that waited: take
            // it back at once.
            if took == 0 && posted == 0 {
                break;
            }
        }
        // Nothing posted (nor ended and not taken back): what arrives waits
        // in the delivery queue; now and then poll it.
        if pool.posted.is_empty() && pool.next() % 2 == 0 {
            pool.figures.polled += self.take_polled(target, t);
        }
        if !holding && now >= pool.next_hold {
            let r = pool.next();
            pool.next_hold = now + Duration::from_micros(400);
            if r % 4 == 0 {
                pool.hold_until = now + Duration::from_micros(100 + (r >> 8) % 1900);
                pool.figures.holds += 1;
            }
        }
        self.receives = Receives::Posting(pool);
    }

    /// Receive `r` ended: it must be of the buffer posted first, and hold
    /// what it says.
    fn ended_receive(&mut self, pool: &mut Pool, r: Received, now: Timestamp) {
        let Some(b) = pool.posted.pop_front() else {
            self.problem(now, format!("a receive ended with no buffer posted: {r:?}"));
            return;
        };
        pool.free.push(b.slot);
        if (r.context, r.local) != (b.context, b.local) {
            self.problem(
                now,
                format!(
                    "a receive ended as buffer {:#x} {:?}, the buffer posted first is {:#x} {:?}",
                    r.context, r.local, b.context, b.local
                ),
            );
            return;
        }
        let at = (pool.base + b.slot * RECV_SLOT) as usize;
        let Ok(bytes) = pool.memory.read_vec(at, RECV_SLOT as usize) else {
            self.problem(now, "the receive buffers cannot be read".into());
            return;
        };
        // Bytes the receive wrote at the buffer's start; the rest of the
        // slot must hold its fill.
        let written = match r.outcome {
            ReceiveOutcome::Message { len, .. } => len as usize,
            _ => 0,
        };
        if written > b.local.len as usize {
            self.problem(
                now,
                format!(
                    "receive {:#x}: {written} bytes in a buffer of {}",
                    b.context, b.local.len
                ),
            );
            return;
        }
        if let Some(i) = bytes[written..].iter().position(|x| *x != b.fill) {
            self.problem(
                now,
                format!(
                    "receive {:#x} ({:?}): byte {} of its slot written, past the {written} bytes it holds",
                    b.context,
                    r.outcome,
                    written + i
                ),
            );
        }
        match r.outcome {
            ReceiveOutcome::Message {
                seq,
                len,
                truncated,
            } => {
                pool.figures.messages += 1;
                let got = &bytes[..len as usize];
                if truncated {
                    pool.figures.truncated += 1;
                    if len != b.local.len {
                        self.problem(
                            now,
                            format!(
                                "receive {:#x}: message {seq} truncated to {len} bytes in a buffer of {}",
                                b.context, b.local.len
                            ),
                        );
                    }
                    self.deliver_truncated(seq, got, now);
                } else {
                    self.deliver(seq, got, now);
                }
            }
            ReceiveOutcome::Written { seq, written } => {
                pool.figures.notices += 1;
                self.notice(seq, written, now);
            }
            ReceiveOutcome::Flushed => pool.figures.flushed += 1,
            other => self.problem(
                now,
                format!(
                    "receive {:#x} ended {other:?}, an outcome the oracle does not know",
                    b.context
                ),
            ),
        }
    }

    /// After the session's close (both ends): every buffer still posted
    /// ends `Flushed` (taken here, in posting order), and a registration
    /// of the buffers is deregistered. The violations found (none without
    /// posted receives).
    pub fn finish_receives(&mut self, target: &mut Node) -> Vec<String> {
        let Receives::Posting(mut pool) = std::mem::take(&mut self.receives) else {
            return Vec::new();
        };
        let now = target.now();
        let before = self.problems.len();
        if let Some(t) = self.target {
            while let Some(r) = target.poll_received(t) {
                self.ended_receive(&mut pool, r, now);
            }
        }
        let mut v: Vec<String> = self.problems[before..]
            .iter()
            .map(|p| p.what.clone())
            .collect();
        if !pool.posted.is_empty() {
            v.push(format!(
                "{}: {} posted receives never ended after the session's close",
                self.name,
                pool.posted.len()
            ));
        }
        if pool.registered {
            if let Err(e) = target.deregister(pool.region) {
                v.push(format!(
                    "{}: the receive buffers' registration: {e}",
                    self.name
                ));
            }
        }
        self.receives = Receives::Posting(pool);
        v
    }
}

/// How the target of a randomized run of `seed` receives: through posted
/// receives for 2 seeds in 5 (`Some` key of the pool,
/// [`Workload::post_receives`]), and for 3 in 4 of those it reads the
/// messages of one range of registered memory itself from 1, 64 or 256
/// bytes on ([`SessionOptions::rendezvous`](relink::SessionOptions::rendezvous),
/// [`start_with_rendezvous`](super::start_with_rendezvous)). From a
/// hash of its own: a seed's fault schedule does not depend on it.
pub fn receive_plan(seed: u64) -> (Option<u64>, Option<u32>) {
    let r = mix(seed ^ 0x7ece_17e5);
    let posting = (r % 5 < 2).then(|| mix(r));
    let rendezvous =
        posting.and_then(|key| [None, Some(1), Some(64), Some(256)][(key >> 40) as usize % 4]);
    (posting, rendezvous)
}
