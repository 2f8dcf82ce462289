//! The receiver side of a session: the [`Inbox`] delivers each message
//! sequence number once, in order, and drops the duplicates a replay
//! brings. Its [`Inbox::last_delivered`] goes back to the sender (in every
//! message header and in the resume handshake), where the
//! [`Journal`](crate::journal::Journal) completes what it confirms.
//!
//! A message the receiver reads itself ([`MsgKind::Fetch`], a rendezvous)
//! takes its number when it arrives, so the messages behind it queue in
//! order, but counts as delivered only once its data landed
//! ([`Inbox::fetch_landed`]): until then [`Inbox::last_delivered`] stays
//! below it, so the sender keeps it (and everything after it) for a
//! replay. A transport lost meanwhile takes the numbers back
//! ([`Inbox::rewind`]): the replay brings them again.
//!
//! [`MsgKind::Fetch`]: crate::wire::MsgKind::Fetch

use std::collections::VecDeque;

use crate::ids::Seq;

/// What the receiver does with an incoming message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    /// The next in order: deliver it to the application.
    Deliver,
    /// Already delivered (a replay): drop it.
    Duplicate,
    /// A sequence number beyond the next: a protocol violation to report;
    /// the message is not delivered.
    Gap {
        /// The sequence number that should have come.
        expected: Seq,
    },
}

/// The receiver side of a session (one per direction): delivers each
/// sequence number once, in order, and drops replayed duplicates.
#[derive(Debug, Clone, Default)]
pub struct Inbox {
    last: Seq,
    duplicates: u64,
    /// Messages taken in order whose data has not landed yet, oldest
    /// first.
    fetching: VecDeque<Seq>,
}

impl Inbox {
    /// Nothing delivered yet: the next message expected is `Seq(1)`.
    pub fn new() -> Inbox {
        Inbox::default()
    }

    /// The highest sequence number delivered (`Seq(0)`: none); sent to the
    /// peer in the resume handshake and as delivery confirmation.
    pub fn last_delivered(&self) -> Seq {
        self.fetching.front().map_or(self.last, |f| Seq(f.0 - 1))
    }

    /// Whether a message taken in order is still being read.
    pub fn is_fetching(&self) -> bool {
        !self.fetching.is_empty()
    }

    /// Message `seq`, just taken ([`Inbox::accept`]), is read by the
    /// receiver: not delivered until [`fetch_landed`](Self::fetch_landed).
    pub fn begin_fetch(&mut self, seq: Seq) {
        self.fetching.push_back(seq);
    }

    /// The data of message `seq`, the oldest being read, landed: it is
    /// delivered. `false` (nothing changes) for another number.
    pub fn fetch_landed(&mut self, seq: Seq) -> bool {
        if self.fetching.front() != Some(&seq) {
            return false;
        }
        self.fetching.pop_front();
        true
    }

    /// The transport is gone with messages still being read: every number
    /// from the oldest of them on is given back (a replay brings them
    /// again). The new last delivered, if any was given back.
    pub fn rewind(&mut self) -> Option<Seq> {
        let oldest = self.fetching.front()?;
        self.last = Seq(oldest.0 - 1);
        self.fetching.clear();
        Some(self.last)
    }

    /// Decides on the message `seq`: deliver only `last_delivered + 1`;
    /// anything at or below `last_delivered` is a duplicate (counted); above
    /// is a gap.
    pub fn accept(&mut self, seq: Seq) -> Accept {
        let expected = self.last.next();
        if seq == expected {
            self.last = seq;
            Accept::Deliver
        } else if seq < expected {
            self.duplicates += 1;
            Accept::Duplicate
        } else {
            Accept::Gap { expected }
        }
    }

    /// Duplicates dropped so far.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inbox_delivers_in_order_and_drops_duplicates() {
        let mut inbox = Inbox::new();
        assert_eq!(inbox.last_delivered(), Seq(0));
        assert_eq!(inbox.accept(Seq(1)), Accept::Deliver);
        assert_eq!(inbox.accept(Seq(1)), Accept::Duplicate);
        assert_eq!(inbox.accept(Seq(3)), Accept::Gap { expected: Seq(2) });
        assert_eq!(inbox.accept(Seq(2)), Accept::Deliver);
        assert_eq!(inbox.accept(Seq(0)), Accept::Duplicate);
        assert_eq!(inbox.last_delivered(), Seq(2));
        assert_eq!(inbox.duplicates(), 2);
    }

    #[test]
    fn a_message_being_read_is_delivered_when_it_lands_and_given_back_on_a_loss() {
        let mut inbox = Inbox::new();
        assert_eq!(inbox.accept(Seq(1)), Accept::Deliver);
        assert_eq!(inbox.accept(Seq(2)), Accept::Deliver);
        inbox.begin_fetch(Seq(2));
        assert_eq!(inbox.accept(Seq(3)), Accept::Deliver);
        // Not confirmed past the one being read.
        assert_eq!(inbox.last_delivered(), Seq(1));
        assert!(!inbox.fetch_landed(Seq(3)));
        assert!(inbox.fetch_landed(Seq(2)));
        assert_eq!(inbox.last_delivered(), Seq(3));
        // Another read, then a loss: 4 and 5 come again.
        assert_eq!(inbox.accept(Seq(4)), Accept::Deliver);
        inbox.begin_fetch(Seq(4));
        assert_eq!(inbox.accept(Seq(5)), Accept::Deliver);
        assert_eq!(inbox.rewind(), Some(Seq(3)));
        assert_eq!(inbox.rewind(), None);
        assert_eq!(inbox.accept(Seq(4)), Accept::Deliver);
        assert_eq!(inbox.last_delivered(), Seq(4));
    }
}
