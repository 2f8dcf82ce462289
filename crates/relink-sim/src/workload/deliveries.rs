//! Delivery accounting at the target: [`Workload`] takes the messages and
//! the notices of WRITEs with immediate data (polled, or through posted
//! receives), checks their order and bytes, and gives a WRITE with
//! immediate data's landing slot back once nothing can land in it any
//! more.

use relink::{Node, Outcome, Seq, SessionHandle, Written};
use relink_fabric::Timestamp;

use super::books::Workload;
use super::layout::TARGET_DATA;
use super::payload::{imm_bytes, message, parse_message};
use super::staging::holds_poison;

impl Workload {
    /// Take every message and notice of a WRITE with immediate data the
    /// target's node delivered for this workload (nothing while the
    /// target's session is not known): polled, or through the receives
    /// the target posted ([`post_receives`](Self::post_receives)).
    pub fn drain_deliveries(&mut self, target: &mut Node) {
        let Some(t) = self.target else {
            return;
        };
        if self.target_data.is_none() {
            self.target_data = target.region(t, TARGET_DATA).ok();
        }
        if self.receives.posting() {
            self.drain_posted(target, t);
        } else {
            self.take_polled(target, t);
        }
    }

    /// Take what waits in the target's delivery queue, in order: messages
    /// ([`Node::poll_delivery`]) and notices ([`Node::poll_written`]; while
    /// one is next, `poll_delivery` says `None`).
    pub(crate) fn take_polled(&mut self, target: &mut Node, t: SessionHandle) -> u64 {
        let now = target.now();
        let mut took = 0;
        loop {
            if let Some((seq, payload)) = target.poll_delivery(t) {
                self.deliver(seq, &payload, now);
            } else if let Some((seq, w)) = target.poll_written(t) {
                self.notice(seq, w, now);
            } else {
                return took;
            }
            took += 1;
        }
    }

    /// A delivery at the target, message or notice: after the previous
    /// one (sequence numbers rise; they may skip the number of a message
    /// that completed `Indeterminate` and was never delivered, or of one
    /// that failed alone: [`check_messages`](super::check_messages)
    /// accounts for every gap).
    fn check_seq(&mut self, seq: Seq, now: Timestamp) {
        if seq <= self.last_seq {
            self.problem(
                now,
                format!(
                    "delivery {seq} after {}: a duplicate or out of order",
                    self.last_seq
                ),
            );
        }
        self.last_seq = self.last_seq.max(seq);
    }

    /// A message delivered at the target, whole: in order
    /// ([`check_seq`](Self::check_seq)), with the exact bytes of the
    /// message it carries.
    pub(crate) fn deliver(&mut self, seq: Seq, payload: &[u8], now: Timestamp) {
        self.check_seq(seq, now);
        let poison = poisoned(payload);
        let Some(index) = parse_message(payload) else {
            self.problem(
                now,
                format!("delivery {seq}: bad checksum or framing{poison}"),
            );
            return;
        };
        if self.imms.contains_key(&index) {
            self.problem(
                now,
                format!(
                    "delivery {seq}: a message of place {index}, a WRITE with immediate data's"
                ),
            );
        } else if payload != message(self.seed, self.stream, index) {
            self.problem(
                now,
                format!("delivery {seq}: payload of message {index} corrupted{poison}"),
            );
        }
        self.take(seq, index);
    }

    /// A message that filled a posted buffer shorter than itself: its
    /// first bytes, `prefix`, must be the start of a longer message sent
    /// (its index, in its first 8 bytes, says which).
    pub(crate) fn deliver_truncated(&mut self, seq: Seq, prefix: &[u8], now: Timestamp) {
        self.check_seq(seq, now);
        let index = prefix
            .get(..8)
            .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
            .filter(|i| *i < self.sent.len() as u64 && !self.imms.contains_key(i));
        let whole = index.map(|i| message(self.seed, self.stream, i));
        match (index, whole) {
            (Some(index), Some(whole))
                if whole.len() > prefix.len() && whole[..prefix.len()] == *prefix =>
            {
                self.take(seq, index);
            }
            _ => {
                let poison = poisoned(prefix);
                self.problem(
                    now,
                    format!(
                        "delivery {seq}: truncated to {} bytes, not the start of a longer message sent (index {index:?}){poison}",
                        prefix.len()
                    ),
                );
            }
        }
    }

    /// The notice of a WRITE with immediate data, taken at the target: in
    /// order ([`check_seq`](Self::check_seq)), once, its `imm` naming a
    /// WRITE with immediate data sent to an advertised token, with the
    /// region, offset and length it was sent to — and its landing slot
    /// holding exactly its bytes now (they landed before the notice; the
    /// slot is its own until its notice and completion).
    pub(crate) fn notice(&mut self, seq: Seq, w: Written, now: Timestamp) {
        self.check_seq(seq, now);
        let index = u64::from(w.imm ^ self.imm_mask);
        let Some(i) = self.imms.get(&index).copied() else {
            self.problem(
                now,
                format!(
                    "notice {seq}: imm {:#x} names no WRITE with immediate data ({w:?})",
                    w.imm
                ),
            );
            return;
        };
        let mut wrong = Vec::new();
        if i.noticed {
            wrong.push("a second notice".to_string());
        }
        if i.slot.is_none() {
            wrong.push("sent to a token the target never advertised".to_string());
        }
        if (w.region, w.offset, w.len) != (i.region, i.offset, i.len) {
            wrong.push(format!(
                "it says {:?} at {} ({} bytes), it was sent to {:?} at {} ({} bytes)",
                w.region, w.offset, w.len, i.region, i.offset, i.len
            ));
        } else if i.slot.is_some() {
            let got = self
                .target_data
                .as_ref()
                .and_then(|m| m.read_vec(w.offset as usize, w.len as usize).ok());
            let want = imm_bytes(self.seed, self.stream, index, i.len as usize);
            match got {
                Some(got) if got == want => self.notices_verified += 1,
                Some(got) => wrong.push(format!(
                    "its landing slot does not hold its bytes when the notice is taken (first difference at byte {}){}",
                    got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0),
                    poisoned(&got)
                )),
                None => wrong.push("the target's data region cannot be read".to_string()),
            }
        }
        for what in wrong {
            self.problem(
                now,
                format!(
                    "notice {seq} of WRITE with immediate data {index} ({}): {what}",
                    i.op
                ),
            );
        }
        if let Some(i) = self.imms.get_mut(&index) {
            i.noticed = true;
        }
        self.take(seq, index);
    }

    /// Place `index` of the sequence taken at the target as `seq`.
    fn take(&mut self, seq: Seq, index: u64) {
        self.received.push(index);
        self.received_seqs.push(seq);
        self.release_imm(index);
        // The unsure ones before it were skipped: never to be noticed.
        let before: Vec<u64> = self.imm_unsure.range(..index).copied().collect();
        for k in before {
            self.release_imm(k);
        }
    }

    /// WRITE with immediate data `index` completed `outcome`.
    pub(super) fn imm_completed(&mut self, index: u64, outcome: Outcome, now: Timestamp) {
        let Some(i) = self.imms.get_mut(&index) else {
            return;
        };
        i.outcome = Some(outcome);
        let i = *i;
        if i.slot.is_none() && !matches!(outcome, Outcome::Failed(_)) {
            self.problem(
                now,
                format!(
                    "WRITE with immediate data {index} ({}) to a token the target never advertised completed {outcome:?}",
                    i.op
                ),
            );
        }
        if matches!(outcome, Outcome::Indeterminate { .. }) && !i.noticed {
            self.imm_unsure.insert(index);
        }
        self.release_imm(index);
    }

    /// Give WRITE with immediate data `index`'s landing slot back once
    /// nothing can land in it or be read from it any more: completed, and
    /// noticed (a `Success`'s notice is sure to come), failed (never
    /// posted), or `Indeterminate` with a later place taken (skipped).
    fn release_imm(&mut self, index: u64) {
        let later_taken = self.received.last().is_some_and(|l| *l > index);
        let Some(i) = self.imms.get_mut(&index) else {
            return;
        };
        let free = match i.outcome {
            None => false,
            Some(_) if i.noticed => true,
            Some(Outcome::Failed(_)) => true,
            Some(Outcome::Indeterminate { .. }) => later_taken,
            Some(_) => false,
        };
        if free && !i.released {
            i.released = true;
            self.free_imm_slots.extend(i.slot);
            self.imm_unsure.remove(&index);
        }
    }

    /// The outcome of message `index`, if it completed.
    pub(crate) fn message_outcome(&self, index: u64) -> Option<Outcome> {
        let op = self.sent.get(usize::try_from(index).ok()?)?;
        self.outcomes.get(op).map(|(_, o)| *o)
    }
}

/// What a report adds about bytes holding poison.
fn poisoned(bytes: &[u8]) -> &'static str {
    if holds_poison(bytes) {
        " (it holds the poison written into staging memory at an operation's completion: bytes read after the completion)"
    } else {
        ""
    }
}
