//! The receiver side of a session: the [`Inbox`] delivers each message
//! sequence number once, in order, and drops the duplicates a replay
//! brings. Its [`Inbox::last_delivered`] goes back to the sender (in every
//! message header and in the resume handshake), where the
//! [`Journal`](crate::journal::Journal) completes what it confirms.

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
}

impl Inbox {
    /// Nothing delivered yet: the next message expected is `Seq(1)`.
    pub fn new() -> Inbox {
        Inbox::default()
    }

    /// The highest sequence number delivered (`Seq(0)`: none); sent to the
    /// peer in the resume handshake and as delivery confirmation.
    pub fn last_delivered(&self) -> Seq {
        self.last
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
}
