//! Messages this side reads itself (a rendezvous,
//! [`SessionSpec::rendezvous_min`](crate::resources::SessionSpec::rendezvous_min)):
//! the part of [`Session`] that decides which of its own messages the
//! peer reads ([`wire::MsgKind::Fetch`] instead of a SEND of the bytes),
//! and, on the reading side, holds a message read in its place in the
//! delivery order until its data landed, then counts it delivered — or
//! gives its number back when the transport goes ([`Inbox::rewind`](crate::inbox::Inbox::rewind)).

use relink_fabric::{Access, RemoteAddr, Timestamp};

use super::output::Delivered;
use super::Session;
use crate::ids::{Epoch, Seq};
use crate::keys::KeyError;
use crate::op::OpKind;
use crate::wire;

impl Session {
    /// Where the peer's message `source` is in this epoch: its address
    /// and rkey through the peer's advertisements
    /// ([`Session::next_fetch`]). `KeyError::NotReady` while the peer's
    /// advertisements of the epoch are not all in (read it later); any
    /// other error: the peer named memory it does not expose for reading.
    pub fn fetch_address(&self, source: &wire::FetchSource) -> Result<RemoteAddr, KeyError> {
        let token = crate::BufferToken {
            region: source.region,
            offset: source.offset,
        };
        self.data
            .peer_keys
            .translate(token, u64::from(source.len), Access::REMOTE_READ)
    }

    /// The one range of a message from registered memory the peer may
    /// read: a region or registration advertised to it with remote read
    /// access.
    fn readable_range<'k>(&self, kind: &'k OpKind) -> Option<&'k crate::LocalRange> {
        let OpKind::MessageFrom { local } = kind else {
            return None;
        };
        let [r] = &local[..] else {
            return None;
        };
        let readable = self
            .cfg
            .spec
            .regions
            .iter()
            .any(|s| s.id == r.region && s.advertise && s.access.contains(Access::REMOTE_READ));
        readable.then_some(r)
    }

    /// Whether message `kind` of `len` bytes goes as a
    /// [`MsgKind::Fetch`](wire::MsgKind::Fetch): the peer reads messages
    /// this long (its AdvertDone), and its one range is readable by the
    /// peer ([`readable_range`](Self::readable_range)).
    pub(super) fn to_fetch(&self, kind: &OpKind, len: u32) -> bool {
        let min = self.data.peer_rendezvous_min;
        min > 0 && len >= min && self.readable_range(kind).is_some()
    }

    /// The message to read next, if one is next in order: its number,
    /// where it is in the peer's memory, and the transport it came on (a
    /// [`MsgKind::Fetch`](wire::MsgKind::Fetch)). The driver reads it
    /// into the next buffer the application posted and reports
    /// [`Session::fetch_landed`]; the deliveries behind it wait until then.
    #[must_use]
    pub fn next_fetch(&self) -> Option<(Seq, wire::FetchSource, Epoch)> {
        match self.out.front_delivery()? {
            (seq, Delivered::Fetch { source, epoch }) => Some((*seq, *source, *epoch)),
            _ => None,
        }
    }

    /// The data of message `seq`, read on the transport of `epoch`
    /// ([`Session::next_fetch`]), landed: it is delivered (the driver
    /// tells the application; nothing is queued here) and counts in the
    /// acknowledgements from now on. `false`, changing nothing, unless it
    /// is the message to read next on that transport (a READ that
    /// completed after its transport was given up).
    pub fn fetch_landed(&mut self, epoch: Epoch, seq: Seq, now: Timestamp) -> bool {
        if self
            .next_fetch()
            .is_none_or(|(s, _, e)| s != seq || e != epoch)
        {
            return false;
        }
        if !self.data.inbox.fetch_landed(seq) {
            return false;
        }
        self.out.pop_delivery();
        self.counters.delivered += 1;
        self.counters.fetched += 1;
        self.maybe_ack(now);
        // The last read a quiesce waited for.
        self.settle_quiesce(now);
        true
    }

    /// The transport is gone (or the session ended) while messages were
    /// being read: their numbers and every delivery after the first go
    /// back ([`Inbox::rewind`](crate::inbox::Inbox::rewind)); a replay
    /// brings them again.
    pub(super) fn rewind_fetches(&mut self) {
        if let Some(floor) = self.data.inbox.rewind() {
            self.counters.fetches_rewound += 1;
            let dropped = self.out.drop_deliveries_after(floor);
            self.counters.delivered = self.counters.delivered.saturating_sub(dropped);
        }
    }
}
