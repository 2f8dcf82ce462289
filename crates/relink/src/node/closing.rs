//! The two phases of a goodbye: a closed session's transport is kept, off
//! the session, until the goodbye it carries has left.
//!
//! A close queues a `Close` message and then asks for
//! [`Action::Disconnect`](relink_core::session::Action::Disconnect). A
//! disconnect moves the QP to the error state, and on real devices (rxe) a
//! request not sent yet is then flushed: the peer would see the disconnect
//! without the goodbye, take it for a loss and recover until its give-up
//! deadline. So the node does not disconnect at once. The transport moves
//! to the node's list of closing transports (the session is `Closed`
//! already, and may be reaped meanwhile); what its backlog still holds is
//! posted as send slots free up, the last request signaled; and the
//! transport is disconnected and destroyed
//!
//! - when every request posted on it has completed (the goodbye last),
//! - when one completes with an error, or its CM id reports the
//!   connection gone (the peer's own disconnect) or the device leaves,
//!   at once,
//! - or at the goodbye bound, [`Node::set_goodbye_timeout`] (1 s by
//!   default, on the provider's clock: virtual time on the in-process
//!   soft fabric), if the peer never acknowledges.
//!
//! A receive that completes meanwhile is dropped: the session is over (a
//! slot of a shared receive queue goes back to the queue). The windows'
//! invalidations are posted after the goodbye (`windows.rs`).
//! The closing transport holds clones of the session's memory, so the
//! memory its registrations cover lives until they are destroyed.

use std::collections::VecDeque;
use std::time::Duration;

use relink_core::SessionId;
use relink_fabric::{CmEventKind, DeviceId, Timestamp, WcStatus};

use super::actions::retire_transport;
use super::backlog::{fill_batch, mark_signaled, Detached, Pending};
use super::cm::CmOwner;
use super::completions::{poll_or_arm, retire_through};
use super::transport::{SessionMemory, Transport};
use super::wr::{TAG_LOCAL, TAG_MASK, TAG_ONE_SIDED, TAG_SEND};
use super::Node;

/// A closed session's transport whose goodbye has not left yet.
pub(super) struct Closing {
    /// The session it carried (for logs).
    session: SessionId,
    transport: Transport,
    /// Requests queued before the disconnect and not posted yet (the
    /// goodbye among them, when the send slots were all taken).
    backlog: VecDeque<Pending>,
    /// The session's memory: the transport's registrations cover it.
    memory: SessionMemory,
    /// Bytes per send slot.
    slot_size: u32,
    /// When the goodbye is given up on.
    deadline: Timestamp,
}

/// Why a closing transport ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// Everything posted on it completed: the goodbye left.
    Sent,
    /// A request completed with an error (the connection is broken).
    Failed,
    /// Its CM id reported the connection gone (the peer disconnected), or
    /// its device left: nothing to disconnect.
    Gone,
    /// The goodbye bound passed.
    Expired,
    /// The node ends (shutdown, drop) before the goodbye left.
    Cut,
}

impl Node {
    /// How long a closed session's transport waits for its goodbye to
    /// leave before it is disconnected anyway, by default: 1 s
    /// ([`set_goodbye_timeout`](Node::set_goodbye_timeout)).
    pub const DEFAULT_GOODBYE_TIMEOUT: Duration = Duration::from_secs(1);

    /// How long a closed session's transport waits for its goodbye to
    /// leave. A close (of the application, of the peer's goodbye, of a
    /// graceful close that finished) posts the goodbye and disconnects
    /// once its send completed — one round trip on a working connection —
    /// so the peer reads the goodbye before it sees the disconnect; a peer
    /// that never acknowledges is disconnected after this bound, at once
    /// if the connection or the device is lost meanwhile. On the provider's
    /// clock (virtual time on the in-process soft fabric). Applies to the
    /// closes that follow.
    pub fn set_goodbye_timeout(&mut self, timeout: Duration) {
        self.goodbye_timeout = timeout;
    }

    /// Move session `key`'s transport `t` (closed, its goodbye and what
    /// came before it posted or in `backlog`) to the closing transports;
    /// it is disconnected and destroyed once they have left.
    pub(super) fn begin_closing(
        &mut self,
        session: SessionId,
        t: Transport,
        backlog: VecDeque<Pending>,
        memory: SessionMemory,
        slot_size: u32,
    ) {
        let ck = self.key();
        if let Some(cm) = t.cm {
            self.cm.insert(cm, CmOwner::Closing(ck));
        }
        if let Some(cq) = t.cq {
            self.cq_owner.insert(cq, ck);
        }
        let deadline = self.now() + self.goodbye_timeout;
        self.closing.insert(
            ck,
            Closing {
                session,
                transport: t,
                backlog,
                memory,
                slot_size,
                deadline,
            },
        );
        self.deadlines.insert((deadline, ck));
        // Its CQ is looked at in the next round (the goodbye may have
        // completed already, and the CQ may not be armed).
        self.dirty.insert(ck);
        self.push_closing(ck);
    }

    /// Whether `key` names a closing transport.
    pub(super) fn is_closing(&self, key: u64) -> bool {
        self.closing.contains_key(&key)
    }

    /// Post what closing transport `ck` still has queued; end it when
    /// nothing is queued or in flight any more.
    fn push_closing(&mut self, ck: u64) {
        let p = &*self.provider;
        let Some(c) = self.closing.get_mut(&ck) else {
            return;
        };
        let t = &mut c.transport;
        let (Some(qp), Some(mr)) = (t.qp, t.send_mr) else {
            // Never built: nothing can have been sent.
            self.end_closing(ck, Ending::Gone);
            return;
        };
        if !c.backlog.is_empty() {
            let batch = &mut self.send_batch;
            batch.clear();
            fill_batch(
                &mut c.backlog,
                t,
                &c.memory.send,
                mr,
                c.slot_size,
                batch,
                &mut Detached,
            );
            if !batch.is_empty() {
                mark_signaled(batch.as_mut_slice(), &mut t.unsignaled);
                if let Err(e) = p.post_send(qp, batch.as_slice()) {
                    tracing::debug!(session = %c.session, "posting the goodbye: {e}");
                    self.end_closing(ck, Ending::Failed);
                    return;
                }
            }
        }
        if c.backlog.is_empty() && c.transport.posted.is_empty() {
            self.end_closing(ck, Ending::Sent);
        }
    }

    /// Drain the CQ of closing transport `ck`: send completions retire
    /// their requests (an error ends it at once), receives are dropped.
    /// Returns whether there were completions.
    pub(super) fn poll_closing_cq(&mut self, ck: u64) -> bool {
        let p = &*self.provider;
        let Some(c) = self.closing.get_mut(&ck) else {
            return false;
        };
        let Some(cq) = c.transport.cq else {
            return false;
        };
        if !poll_or_arm(p, cq, &mut self.wcs) {
            return false;
        }
        self.dirty.insert(ck);
        let mut failed = false;
        // Receives are dropped; the slots of a shared receive queue go
        // back to it.
        c.transport
            .return_shared_receives(p, &self.wcs, &mut self.recv_batch);
        for wc in &self.wcs {
            if matches!(wc.wr_id & TAG_MASK, TAG_SEND | TAG_ONE_SIDED | TAG_LOCAL) {
                retire_through(&mut c.transport, wc, |_, status| {
                    failed |= status != WcStatus::Success;
                });
            }
        }
        if failed {
            self.end_closing(ck, Ending::Failed);
        } else {
            self.push_closing(ck);
        }
        true
    }

    /// A CM event of closing transport `ck`'s id: the connection or its
    /// device gone ends it at once; anything else is of no interest now.
    pub(super) fn on_closing_cm(&mut self, ck: u64, kind: &CmEventKind) {
        if matches!(
            kind,
            CmEventKind::Disconnected | CmEventKind::DeviceRemoval | CmEventKind::AddrChange
        ) {
            self.end_closing(ck, Ending::Gone);
        }
    }

    /// Device `device` (or a context on it, `ctx`) is lost: the closing
    /// transports on it end at once.
    pub(super) fn closing_device_lost(
        &mut self,
        device: Option<&DeviceId>,
        ctx: Option<relink_fabric::ContextId>,
    ) {
        let hit: Vec<u64> = self
            .closing
            .iter()
            .filter(|(_, c)| {
                let t = &c.transport;
                let on_device =
                    device.is_some_and(|d| t.device.as_ref().is_some_and(|x| x.id == *d));
                on_device || (ctx.is_some() && t.ctx == ctx)
            })
            .map(|(k, _)| *k)
            .collect();
        for ck in hit {
            self.end_closing(ck, Ending::Gone);
        }
    }

    /// Closing transport `ck`'s goodbye bound passed.
    pub(super) fn closing_expired(&mut self, ck: u64) {
        self.end_closing(ck, Ending::Expired);
    }

    /// Disconnect (unless the connection is gone already) and destroy
    /// closing transport `ck`.
    pub(super) fn end_closing(&mut self, ck: u64, how: Ending) {
        let Some(c) = self.closing.remove(&ck) else {
            return;
        };
        self.deadlines.remove(&(c.deadline, ck));
        self.dirty.remove(&ck);
        if how != Ending::Sent {
            tracing::debug!(session = %c.session, ?how, "goodbye transport ends before its goodbye completed");
        }
        let p = &*self.provider;
        if how != Ending::Gone {
            if let Some(cm) = c.transport.cm {
                let _ = p.cm_disconnect(cm);
            }
        }
        retire_transport(p, c.transport, &mut self.cm, &mut self.cq_owner);
        drop(c.memory);
    }

    /// End every closing transport now (the node ends): how many had not
    /// seen their goodbye leave.
    pub(super) fn cut_closing(&mut self) -> usize {
        let keys: Vec<u64> = self.closing.keys().copied().collect();
        for ck in &keys {
            self.end_closing(*ck, Ending::Cut);
        }
        keys.len()
    }
}
