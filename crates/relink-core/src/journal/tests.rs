//! Unit tests of the journal; `model.rs` holds a model-based test of a
//! journal and an inbox over a lossy RC transport: exactly-once, in-order
//! delivery and one completion per operation under random schedules of
//! traffic and losses.

use std::collections::{BTreeMap, HashMap, VecDeque};

use proptest::prelude::*;

use super::*;
use crate::ids::{BufferToken, RegionId};
use crate::op::OpClass;

mod model;

fn range() -> LocalRange {
    LocalRange {
        region: RegionId(1),
        offset: 0,
        len: 8,
    }
}

fn token() -> BufferToken {
    BufferToken {
        region: RegionId(2),
        offset: 64,
    }
}

fn msg(bytes: &[u8]) -> OpKind {
    OpKind::Message {
        payload: bytes.to_vec(),
    }
}

fn write() -> OpKind {
    OpKind::Write {
        local: range().into(),
        remote: token(),
    }
}

fn read() -> OpKind {
    OpKind::Read {
        local: range().into(),
        remote: token(),
    }
}

fn fetch_add() -> OpKind {
    OpKind::FetchAdd {
        local: range(),
        remote: token(),
        add: 1,
    }
}

fn cmp_swap() -> OpKind {
    OpKind::CmpSwap {
        local: range(),
        remote: token(),
        compare: 0,
        swap: 1,
    }
}

/// Posts everything [`Journal::next_unposted`] offers; returns the ids.
fn post_all(j: &mut Journal) -> Vec<OpId> {
    let mut posted = Vec::new();
    while let Some((op, _, _)) = j.next_unposted() {
        j.mark_posted(op);
        posted.push(op);
    }
    posted
}

/// The completion of `op` as these tests compare it: operation and
/// outcome (what the class, length and context are is checked by
/// `completions_carry_class_length_and_context`).
fn done(op: OpId, outcome: Outcome) -> Completion {
    Completion {
        op,
        outcome,
        context: 0,
        class: OpClass::Message,
        len: 0,
    }
}

/// `c` with what [`done`] leaves out cleared.
fn n(c: Completion) -> Completion {
    done(c.op, c.outcome)
}

/// [`n`] of each.
fn ns(cs: Vec<Completion>) -> Vec<Completion> {
    cs.into_iter().map(n).collect()
}

const OK: Outcome = Outcome::Success { replayed: false };
const REPLAYED: Outcome = Outcome::Success { replayed: true };
const EXECUTED: Outcome = Outcome::Indeterminate {
    executed: Some(true),
};
const UNKNOWN: Outcome = Outcome::Indeterminate { executed: None };

#[test]
fn submit_numbers_operations_and_messages() {
    let mut j = Journal::new();
    assert_eq!(j.submit(write()), (OpId(1), None));
    assert_eq!(j.submit(msg(b"ab")), (OpId(2), Some(Seq(1))));
    assert_eq!(j.submit(fetch_add()), (OpId(3), None));
    assert_eq!(j.submit(msg(b"cde")), (OpId(4), Some(Seq(2))));
    assert_eq!(j.len(), 4);
    assert_eq!(j.payload_bytes(), 5);
    assert_eq!(j.last_seq(), Seq(2));
    assert_eq!(j.in_flight_messages(Seq(0)), 2);
    assert_eq!(j.in_flight_messages(Seq(1)), 1);
    assert_eq!(j.highest_sent(), Seq(0));
}

#[test]
fn posts_in_submission_order() {
    let mut j = Journal::new();
    let (w, _) = j.submit(write());
    let (m, _) = j.submit(msg(b"x"));
    let (next, kind, seq) = j.next_unposted().unwrap();
    assert_eq!((next, kind, seq), (w, &write(), None));
    j.mark_posted(w);
    assert_eq!(j.next_unposted().unwrap().2, Some(Seq(1)));
    j.mark_posted(m);
    assert!(j.next_unposted().is_none());
    assert_eq!(j.highest_sent(), Seq(1));
}

#[test]
#[should_panic(expected = "not the operation next_unposted returns")]
fn posting_out_of_order_is_a_bug() {
    let mut j = Journal::new();
    j.submit(write());
    let (second, _) = j.submit(write());
    j.mark_posted(second);
}

#[test]
fn rdma_operations_complete_on_their_success() {
    let mut j = Journal::new();
    let ops = [write(), read(), fetch_add(), cmp_swap()].map(|k| j.submit(k).0);
    post_all(&mut j);
    for op in ops {
        assert_eq!(j.on_success(op).map(n), Some(done(op, OK)));
        assert_eq!(j.on_success(op).map(n), None, "completes once");
    }
    assert!(j.is_empty());
    assert_eq!(j.stats().completed, 4);
}

#[test]
fn a_message_completes_when_the_peer_delivers_it() {
    let mut j = Journal::new();
    let (m1, _) = j.submit(msg(b"one"));
    let (m2, _) = j.submit(msg(b"two"));
    post_all(&mut j);
    assert_eq!(j.on_success(m1).map(n), None, "an RC ack is not a delivery");
    assert!(j.contains(m1));
    assert_eq!(ns(j.on_peer_delivered(Seq(1))), vec![done(m1, OK)]);
    assert_eq!(j.payload_bytes(), 3, "dropped at confirmation");
    // Confirmed before its own completion was polled.
    assert_eq!(ns(j.on_peer_delivered(Seq(2))), vec![done(m2, OK)]);
    assert_eq!(j.on_success(m2).map(n), None);
    assert!(j.is_empty());
    assert_eq!(j.payload_bytes(), 0);
    assert_eq!(j.peer_delivered(), Seq(2));
}

#[test]
fn a_refused_operation_fails_and_is_never_replayed() {
    let mut j = Journal::new();
    let (w, _) = j.submit(write());
    post_all(&mut j);
    let refused = Outcome::Failed(OpError::Remote(WcStatus::RemAccessErr));
    assert_eq!(
        j.on_remote_error(w, WcStatus::RemAccessErr).map(n),
        Some(done(w, refused))
    );
    j.transport_down();
    assert!(ns(j.resume(Seq(0), true)).is_empty());
    assert!(j.next_unposted().is_none());
    assert!(j.is_empty());
}

#[test]
fn an_unpostable_operation_fails_alone_and_the_rest_keeps_its_order() {
    let mut j = Journal::new();
    let (w1, _) = j.submit(write());
    let (bad, _) = j.submit(read());
    let (m, _) = j.submit(msg(b"m"));
    let (w2, _) = j.submit(write());
    let (first, ..) = j.next_unposted().unwrap();
    j.mark_posted(first);
    let refused = Outcome::Failed(OpError::Remote(WcStatus::RemAccessErr));
    let err = OpError::Remote(WcStatus::RemAccessErr);
    assert_eq!(
        j.fail_unpostable(w1, err).map(n),
        None,
        "posted: its completion settles it"
    );
    assert_eq!(j.next_unposted().map(|n| n.0), Some(bad));
    assert_eq!(j.fail_unpostable(bad, err).map(n), Some(done(bad, refused)));
    assert_eq!(j.fail_unpostable(bad, err).map(n), None, "completed once");
    let rest: Vec<OpId> = std::iter::from_fn(|| {
        let (op, ..) = j.next_unposted()?;
        j.mark_posted(op);
        Some(op)
    })
    .collect();
    assert_eq!(rest, vec![m, w2], "the rest is posted, in order");
    assert_eq!(j.on_success(w1).map(n), Some(done(w1, OK)));
    assert_eq!(j.stats().completed, 2);
    assert_eq!(j.len(), 2);
}

#[test]
fn an_unpostable_replay_ends_as_a_give_up_would() {
    let mut j = Journal::new();
    let (fa, _) = j.submit(fetch_add());
    let (w, _) = j.submit(write());
    post_all(&mut j);
    j.transport_down();
    assert!(ns(j.resume(Seq(0), true)).is_empty(), "atomics replayed");
    let err = OpError::Remote(WcStatus::RemAccessErr);
    assert_eq!(
        j.fail_unpostable(fa, err).map(n).map(|c| c.outcome),
        Some(Outcome::Indeterminate { executed: None }),
        "it may have run on the lost transport"
    );
    assert_eq!(
        j.fail_unpostable(w, err).map(n).map(|c| c.outcome),
        Some(Outcome::Failed(err))
    );
    assert!(j.is_empty());
}

#[test]
fn a_refused_message_breaks_the_sequence() {
    let mut j = Journal::new();
    let (m, _) = j.submit(msg(b"too long"));
    post_all(&mut j);
    let c = j.on_remote_error(m, WcStatus::RemInvReqErr).map(n).unwrap();
    assert_eq!(
        c.outcome,
        Outcome::Failed(OpError::Remote(WcStatus::RemInvReqErr))
    );
    assert_eq!(j.sequence_broken(), Some(Seq(1)));
    assert_eq!(j.payload_bytes(), 0);
}

#[test]
fn a_delivered_message_proves_what_was_posted_before_it() {
    let mut j = Journal::new();
    let (w, _) = j.submit(write());
    let (r, _) = j.submit(read());
    let (fa, _) = j.submit(fetch_add());
    let (cs, _) = j.submit(cmp_swap());
    let (m, _) = j.submit(msg(b"m"));
    let (after, _) = j.submit(write());
    post_all(&mut j);
    j.transport_down();
    let resumed = ns(j.resume(Seq(1), false));
    assert_eq!(
        resumed,
        vec![
            done(w, OK),
            done(fa, EXECUTED),
            done(cs, EXECUTED),
            done(m, OK),
        ]
    );
    // The read's data may not have landed; the write after the message is unknown.
    assert_eq!(post_all(&mut j), vec![r, after]);
    assert_eq!(j.on_success(r).map(n), Some(done(r, REPLAYED)));
    assert_eq!(j.on_success(after).map(n), Some(done(after, REPLAYED)));
    assert_eq!(j.stats().replayed, 2);
    assert_eq!(j.stats().indeterminate, 2);
}

#[test]
fn a_proof_waits_for_the_live_transport_completion() {
    let mut j = Journal::new();
    let (w, _) = j.submit(write());
    let (fa, _) = j.submit(fetch_add());
    let (m, _) = j.submit(msg(b"m"));
    post_all(&mut j);
    // The write's buffer may still be read by an RC retransmission, the
    // atomic's result may still arrive: only the message completes.
    assert_eq!(ns(j.on_peer_delivered(Seq(1))), vec![done(m, OK)]);
    assert_eq!(j.on_success(fa).map(n), Some(done(fa, OK)));
    // Lost before its own completion: the proof settles it, no replay.
    j.transport_down();
    assert_eq!(ns(j.resume(Seq(1), false)), vec![done(w, OK)]);
    assert!(j.is_empty());
}

#[test]
fn unknown_atomics_are_indeterminate_on_resume() {
    let mut j = Journal::new();
    let (fa, _) = j.submit(fetch_add());
    let (m, _) = j.submit(msg(b"m"));
    let (cs, _) = j.submit(cmp_swap());
    j.mark_posted(fa);
    j.mark_posted(m);
    j.transport_down();
    // cs was never posted: it is sent as new, not as a replay.
    assert_eq!(ns(j.resume(Seq(0), false)), vec![done(fa, UNKNOWN)]);
    assert_eq!(post_all(&mut j), vec![m, cs]);
    assert_eq!(j.on_success(cs).map(n), Some(done(cs, OK)));
    assert_eq!(j.stats().indeterminate, 1);
}

#[test]
fn atomics_are_replayed_when_the_application_opts_in() {
    let mut j = Journal::new();
    let (fa, _) = j.submit(fetch_add());
    post_all(&mut j);
    j.transport_down();
    assert!(ns(j.resume(Seq(0), true)).is_empty());
    assert_eq!(post_all(&mut j), vec![fa]);
    assert_eq!(j.on_success(fa).map(n), Some(done(fa, REPLAYED)));
}

#[test]
fn replay_keeps_the_original_order_across_losses() {
    let mut j = Journal::new();
    let (m1, _) = j.submit(msg(b"1"));
    let (w, _) = j.submit(write());
    let (m2, _) = j.submit(msg(b"2"));
    let (m3, _) = j.submit(msg(b"3"));
    post_all(&mut j);
    j.transport_down();
    assert_eq!(ns(j.resume(Seq(1), false)), vec![done(m1, OK)]);
    j.mark_posted(w);
    j.mark_posted(m2);
    j.transport_down();
    // The peer got m2 on the second transport: w is proven, m3 is next.
    assert_eq!(
        ns(j.resume(Seq(2), false)),
        vec![done(w, REPLAYED), done(m2, REPLAYED)]
    );
    assert_eq!(
        j.next_unposted().map(|n| (n.0, n.2)),
        Some((m3, Some(Seq(3))))
    );
}

#[test]
fn a_late_success_from_a_lost_transport_counts() {
    let mut j = Journal::new();
    let (w, _) = j.submit(write());
    post_all(&mut j);
    j.transport_down();
    assert_eq!(j.on_success(w).map(n), Some(done(w, OK)));
    assert!(ns(j.resume(Seq(0), false)).is_empty());
    assert!(j.next_unposted().is_none());
}

#[test]
fn peer_reports_are_monotone_and_clamped() {
    let mut j = Journal::new();
    let (m1, _) = j.submit(msg(b"1"));
    let (m2, _) = j.submit(msg(b"2"));
    j.mark_posted(m1);
    // Seq(2) was never sent: the report cannot cover it.
    assert_eq!(ns(j.on_peer_delivered(Seq(5))), vec![done(m1, OK)]);
    assert_eq!(j.peer_delivered(), Seq(1));
    assert!(ns(j.on_peer_delivered(Seq(0))).is_empty());
    assert_eq!(j.peer_delivered(), Seq(1));
    assert!(j.contains(m2));
}

#[test]
fn fail_all_ends_everything_in_order_without_hiding_effects() {
    let mut j = Journal::new();
    let (w1, _) = j.submit(write());
    let (m1, _) = j.submit(msg(b"1"));
    let (fa, _) = j.submit(fetch_add());
    let (m2, _) = j.submit(msg(b"2"));
    let (r, _) = j.submit(read());
    let (w2, _) = j.submit(write());
    post_all(&mut j);
    let (m3, _) = j.submit(msg(b"3"));
    let (w3, _) = j.submit(write());
    assert_eq!(ns(j.on_peer_delivered(Seq(1))), vec![done(m1, OK)]);
    j.transport_down();
    let gave_up = Outcome::Failed(OpError::GaveUp);
    assert_eq!(
        ns(j.fail_all(OpError::GaveUp)),
        vec![
            done(w1, OK),      // proven by m1
            done(fa, UNKNOWN), // posted, may have executed
            done(m2, UNKNOWN), // posted, may have been delivered
            done(r, gave_up),  // idempotent: Failed
            done(w2, gave_up), // idempotent: Failed
            done(m3, gave_up), // never left
            done(w3, gave_up), // never left
        ]
    );
    assert!(j.is_empty());
    assert_eq!(j.payload_bytes(), 0);
    assert_eq!(j.stats().completed, 8);
}

#[test]
fn fail_queued_keeps_the_sequence_gap_free() {
    let mut j = Journal::new();
    let (m1, _) = j.submit(msg(b"1"));
    let (m2, _) = j.submit(msg(b"2"));
    post_all(&mut j);
    let (m3, _) = j.submit(msg(b"3"));
    let (w, _) = j.submit(write());
    j.transport_down();
    let fast = Outcome::Failed(OpError::FastFail);
    assert_eq!(
        ns(j.fail_queued(OpError::FastFail)),
        vec![
            done(m1, UNKNOWN),
            done(m2, UNKNOWN),
            done(m3, fast),
            done(w, fast)
        ]
    );
    // m1 and m2 may be at the peer: kept as orphans, with their payloads
    // (messages of bytes: the journal owns them); Seq(3) given back.
    assert_eq!(j.len(), 2);
    assert_eq!(j.payload_bytes(), 2);
    assert!(j.is_orphan(m1) && j.is_orphan(m2) && !j.is_orphan(m3));
    assert!(!j.is_void(m1) && !j.is_void(m2));
    assert_eq!(j.last_seq(), Seq(2));
    let (m4, seq) = j.submit(msg(b"4"));
    assert_eq!(seq, Some(Seq(3)));
    // The peer had m1: the orphan is dropped silently, m2 is replayed.
    assert!(ns(j.resume(Seq(1), false)).is_empty());
    assert_eq!(j.next_unposted().map(|n| n.2), Some(Some(Seq(2))));
    assert_eq!(
        j.next_unposted().map(|n| n.1.bytes()),
        Some(1),
        "an orphan of bytes keeps its payload"
    );
    assert_eq!(post_all(&mut j), vec![m2, m4]);
    assert_eq!(j.on_success(m2).map(n), None);
    assert_eq!(ns(j.on_peer_delivered(Seq(3))), vec![done(m4, OK)]);
    assert!(j.is_empty());
    assert_eq!(j.stats().completed, 5);
}

#[test]
fn refusals_are_told_from_losses() {
    assert!(is_refusal(WcStatus::RemAccessErr));
    assert!(is_refusal(WcStatus::LocProtErr));
    assert!(!is_refusal(WcStatus::WrFlushErr));
    assert!(!is_refusal(WcStatus::RetryExcErr));
    assert!(!is_refusal(WcStatus::Success));
}

#[test]
fn a_flush_waits_for_every_earlier_operation_and_holds_back_the_later_ones() {
    let mut j = Journal::new();
    let (m1, _) = j.submit(msg(b"1"));
    let (w1, _) = j.submit(write());
    let (f, _) = j.submit(OpKind::Flush);
    let (w2, _) = j.submit(write());
    assert_eq!(post_all_until_flush(&mut j), vec![m1, w1]);
    assert_eq!(j.complete_flush(), None, "two operations ahead of it");
    assert_eq!(j.on_success(w1).map(n), Some(done(w1, OK)));
    assert_eq!(j.complete_flush(), None, "the message is not confirmed yet");
    // A loss: the flush waits on, across the replay.
    j.transport_down();
    assert!(ns(j.resume(Seq(0), false)).is_empty());
    assert_eq!(post_all_until_flush(&mut j), vec![m1]);
    assert_eq!(ns(j.on_peer_delivered(Seq(1))), vec![done(m1, REPLAYED)]);
    let c = j.complete_flush().expect("nothing ahead of it");
    assert_eq!(
        (c.op, c.outcome, c.class, c.len),
        (f, OK, OpClass::Flush, 0)
    );
    assert_eq!(post_all(&mut j), vec![w2], "what it held back goes now");

    // One that never completed is failed as never posted.
    let (f2, _) = j.submit(OpKind::Flush);
    let (w3, _) = j.submit(write());
    let cs = j.fail_all(OpError::GaveUp);
    let gave_up = Outcome::Failed(OpError::GaveUp);
    assert_eq!(
        ns(cs),
        vec![done(w2, gave_up), done(f2, gave_up), done(w3, gave_up)]
    );
}

/// Posts what [`Journal::next_unposted`] offers up to a flush; returns the
/// ids.
fn post_all_until_flush(j: &mut Journal) -> Vec<OpId> {
    let mut posted = Vec::new();
    while let Some((op, kind, _)) = j.next_unposted() {
        if matches!(kind, OpKind::Flush) {
            break;
        }
        j.mark_posted(op);
        posted.push(op);
    }
    posted
}
