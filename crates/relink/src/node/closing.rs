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
use relink_fabric::{
    CmEventKind, ContextId, DeviceId, Provider, RecvWr, SendWr, Timestamp, WcStatus, WorkCompletion,
};

use super::backlog::{fill_batch, mark_signaled, Detached};
use super::completions::{poll_or_arm, retire_through};
use super::index::{Index, TimerEntry};
use super::transport::{SessionMemory, Transport};
use super::transports::{destroy, Closing, Transports};
use super::wr::{Pending, WrBatch, TAG_LOCAL, TAG_MASK, TAG_ONE_SIDED, TAG_SEND};
use super::Node;

/// What a closed session hands its transport's goodbye: the transport and
/// what it still has to post.
pub(super) struct Goodbye {
    /// The session it carried (for logs).
    pub session: SessionId,
    pub transport: Transport,
    /// Requests queued before the disconnect (the goodbye last, then the
    /// windows' invalidations), every message encoded.
    pub backlog: VecDeque<Pending>,
    /// The session's memory: the transport's registrations cover it.
    pub memory: SessionMemory,
    /// Bytes per send slot.
    pub slot_size: u32,
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
        self.transports.goodbye_timeout = timeout;
    }
}

impl Transports {
    /// Move a closed session's transport (`goodbye`: its goodbye and what
    /// came before it posted or queued) to the closing transports under
    /// `handle`, at `now`; it is disconnected and destroyed once they have
    /// left. `batch`: the node's send batch, reused.
    pub fn begin_closing(
        &mut self,
        handle: u64,
        goodbye: Goodbye,
        now: Timestamp,
        p: &dyn Provider,
        index: &mut Index,
        batch: &mut WrBatch<SendWr>,
    ) {
        // Its CQ is looked at in the next round (the goodbye may have
        // completed already, and the CQ may not be armed).
        index.closing_began(handle, &goodbye.transport);
        let mut c = Closing {
            session: goodbye.session,
            transport: goodbye.transport,
            backlog: goodbye.backlog,
            memory: goodbye.memory,
            slot_size: goodbye.slot_size,
            timer: TimerEntry::default(),
        };
        index.set_timer(handle, &mut c.timer, Some(now + self.goodbye_timeout));
        self.closing.insert(handle, c);
        self.push_closing(handle, p, index, batch);
    }

    /// Post what closing transport `handle` still has queued; end it when
    /// nothing is queued or in flight any more.
    fn push_closing(
        &mut self,
        handle: u64,
        p: &dyn Provider,
        index: &mut Index,
        batch: &mut WrBatch<SendWr>,
    ) {
        let Some(c) = self.closing.get_mut(&handle) else {
            return;
        };
        let t = &mut c.transport;
        let (Some(qp), Some(mr)) = (t.qp, t.send_mr) else {
            // Never built: nothing can have been sent.
            self.end_closing(handle, Ending::Gone, p, index);
            return;
        };
        if !c.backlog.is_empty() {
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
                    self.end_closing(handle, Ending::Failed, p, index);
                    return;
                }
            }
        }
        if c.backlog.is_empty() && c.transport.posted.is_empty() {
            self.end_closing(handle, Ending::Sent, p, index);
        }
    }

    /// Drain the CQ of closing transport `handle`: send completions retire
    /// their requests (an error ends it at once), receives are dropped.
    /// Returns whether there were completions. `wcs`, `recv_batch` and
    /// `send_batch`: the node's buffers, reused.
    pub fn poll_closing_cq(
        &mut self,
        handle: u64,
        p: &dyn Provider,
        index: &mut Index,
        wcs: &mut Vec<WorkCompletion>,
        recv_batch: &mut WrBatch<RecvWr>,
        send_batch: &mut WrBatch<SendWr>,
    ) -> bool {
        let Some(c) = self.closing.get_mut(&handle) else {
            return false;
        };
        let Some(cq) = c.transport.cq else {
            return false;
        };
        if !poll_or_arm(p, cq, wcs) {
            return false;
        }
        index.cq_signalled(handle);
        let mut failed = false;
        // Receives are dropped; the slots of a shared receive queue go
        // back to it.
        c.transport.return_shared_receives(p, wcs, recv_batch);
        for wc in wcs.iter() {
            if matches!(wc.wr_id & TAG_MASK, TAG_SEND | TAG_ONE_SIDED | TAG_LOCAL) {
                retire_through(&mut c.transport, wc, |_, _, status| {
                    failed |= status != WcStatus::Success;
                });
            }
        }
        if failed {
            self.end_closing(handle, Ending::Failed, p, index);
        } else {
            self.push_closing(handle, p, index, send_batch);
        }
        true
    }

    /// A CM event of closing transport `handle`'s id: the connection or its
    /// device gone ends it at once; anything else is of no interest now.
    pub fn on_closing_cm(
        &mut self,
        handle: u64,
        kind: &CmEventKind,
        p: &dyn Provider,
        index: &mut Index,
    ) {
        if matches!(
            kind,
            CmEventKind::Disconnected | CmEventKind::DeviceRemoval | CmEventKind::AddrChange
        ) {
            self.end_closing(handle, Ending::Gone, p, index);
        }
    }

    /// Device `device` (or a context on it, `ctx`) is lost: the closing
    /// transports on it end at once.
    pub fn closing_device_lost(
        &mut self,
        device: Option<&DeviceId>,
        ctx: Option<ContextId>,
        p: &dyn Provider,
        index: &mut Index,
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
            .map(|(h, _)| *h)
            .collect();
        for handle in hit {
            self.end_closing(handle, Ending::Gone, p, index);
        }
    }

    /// Disconnect (unless the connection is gone already) and destroy
    /// closing transport `handle`.
    pub fn end_closing(&mut self, handle: u64, how: Ending, p: &dyn Provider, index: &mut Index) {
        let Some(mut c) = self.closing.remove(&handle) else {
            return;
        };
        index.closing_ended(handle, &mut c.timer);
        if how != Ending::Sent {
            tracing::debug!(session = %c.session, ?how, "goodbye transport ends before its goodbye completed");
        }
        if how != Ending::Gone {
            if let Some(cm) = c.transport.cm {
                let _ = p.cm_disconnect(cm);
            }
        }
        destroy(p, c.transport, index);
        drop(c.memory);
        self.quiesced.push(c.session);
    }

    /// End every closing transport now (the node ends): how many had not
    /// seen their goodbye leave.
    pub fn cut_closing(&mut self, p: &dyn Provider, index: &mut Index) -> usize {
        let handles: Vec<u64> = self.closing.keys().copied().collect();
        for handle in &handles {
            self.end_closing(*handle, Ending::Cut, p, index);
        }
        handles.len()
    }
}
