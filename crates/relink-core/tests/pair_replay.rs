//! The replay contract (docs/DESIGN.md "The
//! replay contract") on a real pair (`tests/pair`): what crosses a loss and
//! how.
//!
//! - messages: exactly once, in order, across one loss and several (both
//!   directions, every kind of loss); the sender drops what the peer's
//!   handshake confirms and replays the rest in order; the receiver drops a
//!   message it already delivered;
//! - WRITE / READ after the last confirmed message are replayed (a write
//!   proven executed by a later confirmed message is not);
//! - an unconfirmed atomic completes `Indeterminate` (executed `Some(true)`
//!   when a confirmed message proves it ran) and is never re-executed,
//!   unless the policy opts into replay (then at least once);
//! - remote keys: tokens are translated with the advertisement of the
//!   current epoch, never before it arrived, never with a stale rkey; a
//!   token outside the advertisement fails alone.
//!
//! The endings (give-up, fast-fail, admin close, stranger peer) are in
//! `pair_endings.rs`.

mod pair;

use std::time::Duration;

use pair::{local, rkey, token, Pair, Setup, Who, REGION};
use relink_core::journal::{OpError, OpKind, Outcome};
use relink_core::policy::Policy;
use relink_core::session::SessionEvent;
use relink_core::state::{DownCause, State};
use relink_core::{BufferToken, Epoch, OpId, RegionId};
use relink_fabric::WcStatus;

/// The initiator's device is removed, and comes back; the pair resumes.
fn initiator_device_lost_and_back(p: &mut Pair) {
    p.remove_device(Who::Ini);
    p.settle();
    assert_eq!(p.state(Who::Ini), State::Recovering);
    p.add_device(Who::Ini);
    p.settle();
    assert_eq!(p.state(Who::Ini), State::Established);
    assert_eq!(p.state(Who::Tgt), State::Established);
}

fn write(p: &mut Pair, at: u64, len: u32, to: u64) -> OpId {
    p.submit(
        Who::Ini,
        OpKind::Write {
            local: local(at, len).into(),
            remote: token(to),
        },
    )
}

fn fetch_add(p: &mut Pair, at: u64, to: u64, add: u64) -> OpId {
    p.submit(
        Who::Ini,
        OpKind::FetchAdd {
            local: local(at, 8),
            remote: token(to),
            add,
        },
    )
}

#[test]
fn messages_cross_one_loss_exactly_once_in_order() {
    let mut p = Pair::connected(Setup::default());
    let ops: Vec<OpId> = (1..=6u8).map(|i| p.send(Who::Ini, &[i])).collect();
    p.pump();
    // The target's application gets 1..3; the loss comes before any
    // confirmation reaches the sender, with 4..6 in flight.
    for _ in 0..3 {
        assert!(p.execute(Who::Ini));
    }
    assert_eq!(p.delivered(Who::Tgt).len(), 3);
    p.remove_device(Who::Ini);
    p.settle();
    assert!(
        ops.iter().all(|op| !p.completed(Who::Ini, *op)),
        "a loss completes nothing by itself"
    );
    p.add_device(Who::Ini);
    p.settle();

    let all: Vec<Vec<u8>> = (1..=6u8).map(|i| vec![i]).collect();
    assert_eq!(p.delivered(Who::Tgt), all, "exactly once, in order");
    assert_eq!(
        p.data_seqs(Who::Ini, Epoch(2)),
        vec![4, 5, 6],
        "the sender dropped what the handshake confirmed, replayed the rest in order"
    );
    for (i, op) in ops.iter().enumerate() {
        assert_eq!(
            p.outcome(Who::Ini, *op),
            Outcome::Success { replayed: i >= 3 },
            "message {}",
            i + 1
        );
    }
    assert!(p.emitted(Who::Ini, |e| matches!(
        e,
        SessionEvent::Resumed { replayed: 3, .. }
    )));
    p.check();
}

/// A named way to lose the transport.
type Fault = (&'static str, fn(&mut Pair));

#[test]
fn messages_cross_several_losses_of_every_kind_both_ways() {
    let faults: [Fault; 5] = [
        ("initiator device removed", |p| {
            p.remove_device(Who::Ini);
            p.add_device(Who::Ini);
        }),
        ("target device reset", |p| p.reset_device(Who::Tgt)),
        ("silent link loss (keepalive)", Pair::break_link),
        ("retry exceeded", |p| {
            p.transport_down(Who::Ini, DownCause::Completion(WcStatus::RetryExcErr))
        }),
        ("target device removed", |p| {
            p.remove_device(Who::Tgt);
            p.advance(Duration::from_secs(3));
            p.add_device(Who::Tgt);
        }),
    ];
    let mut p = Pair::connected(Setup::default());
    let mut sent: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
    let mut ops = Vec::new();
    for (round, (name, fault)) in faults.iter().enumerate() {
        for k in 0..5u8 {
            for (i, who) in [Who::Ini, Who::Tgt].into_iter().enumerate() {
                let payload = vec![round as u8, k, i as u8];
                ops.push((who, p.send(who, &payload)));
                sent[i].push(payload);
            }
        }
        p.pump();
        // Part of the traffic gets through, part of the acks come back.
        for _ in 0..=round {
            p.execute(Who::Ini);
            p.execute(Who::Tgt);
        }
        p.acknowledge(Who::Ini);
        fault(&mut p);
        p.advance(Duration::from_secs(30));
        for who in [Who::Ini, Who::Tgt] {
            assert_eq!(p.state(who), State::Established, "after {name}: {who:?}");
        }
    }
    p.settle();
    assert_eq!(p.delivered(Who::Tgt), sent[0], "initiator -> target");
    assert_eq!(p.delivered(Who::Ini), sent[1], "target -> initiator");
    for (who, op) in ops {
        assert!(p.outcome(who, op).is_success(), "{who:?} {op}");
    }
    assert!(p.session(Who::Ini).counters().losses >= faults.len() as u64);
    p.check();
}

#[test]
fn a_message_that_arrives_twice_is_delivered_once() {
    let mut p = Pair::connected(Setup::default());
    p.send(Who::Ini, b"one");
    p.send(Who::Ini, b"two");
    p.settle();
    let second = p.sent_message(Who::Ini, 2);
    p.inject(Who::Tgt, &second);
    // Across a loss too: the old message on the new transport.
    initiator_device_lost_and_back(&mut p);
    p.inject(Who::Tgt, &second);
    p.send(Who::Ini, b"three");
    p.settle();
    assert_eq!(
        p.delivered(Who::Tgt),
        vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
    );
    assert_eq!(p.session(Who::Tgt).counters().deduplicated, 2);
    p.check();
}

#[test]
fn writes_and_reads_after_the_last_confirmed_message_are_replayed() {
    let mut p = Pair::connected(Setup::default());
    p.poke(Who::Ini, 0, b"sixteen bytes!!!");
    p.poke(Who::Tgt, 16, b"readme!!");
    let m = p.send(Who::Ini, b"confirmed");
    p.settle();
    assert!(p.outcome(Who::Ini, m).is_success());
    let w = write(&mut p, 0, 16, 0);
    let r = p.submit(
        Who::Ini,
        OpKind::Read {
            local: local(16, 8).into(),
            remote: token(16),
        },
    );
    p.pump();
    // The write executes at the target, its ack is lost; the read never runs.
    assert!(p.execute(Who::Ini));
    initiator_device_lost_and_back(&mut p);

    assert_eq!(p.outcome(Who::Ini, w), Outcome::Success { replayed: true });
    assert_eq!(p.outcome(Who::Ini, r), Outcome::Success { replayed: true });
    assert_eq!(
        &p.memory(Who::Tgt)[0..16],
        b"sixteen bytes!!!",
        "idempotent"
    );
    assert_eq!(&p.memory(Who::Ini)[16..24], b"readme!!", "the read landed");
    assert_eq!(
        p.posted_rkeys(Who::Ini),
        vec![
            (w, rkey(Who::Tgt, Epoch(1), REGION)),
            (r, rkey(Who::Tgt, Epoch(1), REGION)),
            (w, rkey(Who::Tgt, Epoch(2), REGION)),
            (r, rkey(Who::Tgt, Epoch(2), REGION)),
        ],
        "replayed in the original order, with the new epoch's keys"
    );
    p.check();
}

#[test]
fn a_write_proven_by_a_later_confirmed_message_is_not_replayed() {
    let mut p = Pair::connected(Setup::default());
    p.poke(Who::Ini, 0, b"proven!!");
    let w = write(&mut p, 0, 8, 8);
    let m = p.send(Who::Ini, b"after the write");
    p.pump();
    // Both executed (RC order), no ack back; the handshake confirms m.
    assert!(p.execute(Who::Ini) && p.execute(Who::Ini));
    initiator_device_lost_and_back(&mut p);
    assert_eq!(p.outcome(Who::Ini, w), Outcome::Success { replayed: false });
    assert_eq!(p.outcome(Who::Ini, m), Outcome::Success { replayed: false });
    assert_eq!(p.posted_rkeys(Who::Ini).len(), 1, "posted once");
    assert_eq!(&p.memory(Who::Tgt)[8..16], b"proven!!");
    p.check();
}

#[test]
fn an_unconfirmed_atomic_completes_indeterminate_and_is_not_run_again() {
    let mut p = Pair::connected(Setup::default());
    p.poke(Who::Tgt, 32, &5u64.to_le_bytes());
    let fa = fetch_add(&mut p, 32, 32, 1);
    let cs = p.submit(
        Who::Ini,
        OpKind::CmpSwap {
            local: local(40, 8),
            remote: token(40),
            compare: 0,
            swap: 9,
        },
    );
    p.pump();
    // Both run at the target; their results never come back.
    assert!(p.execute(Who::Ini) && p.execute(Who::Ini));
    initiator_device_lost_and_back(&mut p);
    for op in [fa, cs] {
        assert_eq!(
            p.outcome(Who::Ini, op),
            Outcome::Indeterminate { executed: None }
        );
    }
    assert_eq!(p.word(Who::Tgt, 32), 6, "the fetch-add ran once");
    assert_eq!(p.word(Who::Tgt, 40), 9, "the cmp-swap ran once");
    assert_eq!(p.posted_rkeys(Who::Ini).len(), 2, "neither was replayed");
    p.check();
}

#[test]
fn an_atomic_proven_by_a_later_confirmed_message_reports_it_ran() {
    let mut p = Pair::connected(Setup::default());
    let fa = fetch_add(&mut p, 32, 32, 3);
    p.send(Who::Ini, b"after the atomic");
    p.pump();
    assert!(p.execute(Who::Ini) && p.execute(Who::Ini));
    initiator_device_lost_and_back(&mut p);
    assert_eq!(
        p.outcome(Who::Ini, fa),
        Outcome::Indeterminate {
            executed: Some(true)
        },
        "it ran; its result is lost"
    );
    assert_eq!(p.word(Who::Tgt, 32), 3);
    p.check();
}

#[test]
fn with_replay_atomics_an_unconfirmed_atomic_is_replayed_at_least_once() {
    let policy = Policy::builder()
        .replay_atomics(true)
        .build()
        .expect("valid policy");
    let mut p = Pair::connected(Setup::with_policy(policy));
    p.poke(Who::Tgt, 32, &5u64.to_le_bytes());
    let ran = fetch_add(&mut p, 48, 32, 1);
    let not_run = fetch_add(&mut p, 56, 40, 1);
    p.pump();
    assert!(p.execute(Who::Ini), "the first runs, its result is lost");
    initiator_device_lost_and_back(&mut p);
    for op in [ran, not_run] {
        assert_eq!(p.outcome(Who::Ini, op), Outcome::Success { replayed: true });
    }
    assert_eq!(p.word(Who::Tgt, 40), 1, "the one that had not run: once");
    assert_eq!(
        p.word(Who::Tgt, 32),
        7,
        "the one that had run: twice (the opt-in is at-least-once)"
    );
    assert_eq!(p.word(Who::Ini, 48), 6, "the replay's result landed");
    p.check();
}

#[test]
fn tokens_wait_for_and_use_the_current_epochs_advertisement() {
    let mut p = Pair::connected(Setup::default());
    p.poke(Who::Ini, 0, b"epoch two");
    p.remove_device(Who::Ini);
    p.settle();
    let w = write(&mut p, 0, 9, 0);
    p.add_device(Who::Ini);
    p.tick();
    assert_eq!(p.state(Who::Ini), State::Resyncing);
    assert!(
        p.posted_rkeys(Who::Ini).is_empty(),
        "nothing is posted before the peer's advertisement of the epoch"
    );
    p.settle();
    assert_eq!(
        p.posted_rkeys(Who::Ini),
        vec![(w, rkey(Who::Tgt, Epoch(2), REGION))]
    );
    assert_eq!(p.outcome(Who::Ini, w), Outcome::Success { replayed: false });
    assert_eq!(&p.memory(Who::Tgt)[0..9], b"epoch two");

    // The peer's device is reset: it registers anew; the same token now
    // means its new rkey.
    p.reset_device(Who::Tgt);
    p.advance(Duration::from_secs(2));
    let epoch = p.transport(Who::Ini).expect("connected");
    assert!(epoch > Epoch(2));
    let w2 = write(&mut p, 0, 4, 20);
    p.settle();
    assert_eq!(
        p.posted_rkeys(Who::Ini)[1],
        (w2, rkey(Who::Tgt, epoch, REGION))
    );
    assert!(p.outcome(Who::Ini, w2).is_success());
    p.check(); // no one-sided request ever carried a stale rkey
}

/// Runs `f` on a thread: a scenario that hangs in the core fails after
/// `secs` instead of hanging the suite.
fn within(secs: u64, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("hung for {secs} s"),
        Err(e) => panic!("the scenario failed: {e}"),
    }
}

#[test]
fn a_token_outside_the_advertisement_fails_alone() {
    within(10, || {
        let mut p = Pair::connected(Setup::default());
        let beyond = write(&mut p, 0, 16, 56);
        let unknown = p.submit(
            Who::Ini,
            OpKind::Read {
                local: local(0, 8).into(),
                remote: BufferToken {
                    region: RegionId(7),
                    offset: 0,
                },
            },
        );
        let m = p.send(Who::Ini, b"still fine");
        p.settle();
        for op in [beyond, unknown] {
            assert_eq!(
                p.outcome(Who::Ini, op),
                Outcome::Failed(OpError::Remote(WcStatus::RemAccessErr))
            );
        }
        assert!(p.outcome(Who::Ini, m).is_success());
        assert_eq!(
            p.session(Who::Ini).counters().losses,
            0,
            "no transport loss"
        );
        assert!(p.posted_rkeys(Who::Ini).is_empty(), "nothing was posted");
        p.check();
    });
}
