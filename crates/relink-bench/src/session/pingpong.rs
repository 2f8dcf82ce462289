//! [`RelinkPingPong`]: round trips through a relink session, one message
//! out and the target application's copy of it back, each round trip timed
//! on its own; the messages copied ([`Node::send`](relink::Node::send),
//! [`Node::poll_delivery_into`](relink::Node::poll_delivery_into)) or not
//! ([`Node::send_from`](relink::Node::send_from) of registered slots,
//! [`Node::post_receive`](relink::Node::post_receive) /
//! [`Node::poll_received`](relink::Node::poll_received)); and the copies of
//! the payload relink made per round trip ([`RoundTripCopies`]).

use std::collections::VecDeque;
use std::time::Instant;

use relink::{OpId, ReceiveOutcome};
use serde::Serialize;

use super::drive::{Drive, EndCounters};
use super::receiver::{stamp_bytes, Receiver};
use super::send::MessageSource;
use super::stats::{check_completion, LoopStats};
use super::target_app::{Slots, ECHO_BUFFERS};
use crate::latency::Rtts;
use crate::loops::{stamp, Clock, LoopSpec, Measurement, Stall, Verify};
use crate::series::Runner;

/// The copies of their payload relink made for the messages of one
/// [`RelinkPingPong`], both ways, from both ends' counters over the
/// session's whole life (warm-up included).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RoundTripCopies {
    /// `send` (copied both ways) or `send-from` (zero-copy both ways).
    pub source: MessageSource,
    /// Bytes per message.
    pub size: usize,
    /// Round trips made (two messages each).
    pub round_trips: u64,
    /// Messages both ends' sessions delivered (`Counters::delivered`).
    pub delivered: u64,
    /// Payload bytes both ends' relink copied to send
    /// (`Counters::send_copied_bytes`).
    pub send_copied_bytes: u64,
    /// Payload bytes both ends' relink copied to deliver
    /// (`Counters::receive_copied_bytes`).
    pub receive_copied_bytes: u64,
}

impl RoundTripCopies {
    fn per_round_trip(&self, bytes: u64) -> f64 {
        bytes as f64 / (self.round_trips * self.size as u64).max(1) as f64
    }

    /// Copies of the payload per round trip on the way out, both messages
    /// (4 for `send`: journal and send slot each way; 0 for `send-from`).
    pub fn send_per_round_trip(&self) -> f64 {
        self.per_round_trip(self.send_copied_bytes)
    }

    /// Copies per round trip on the way in, both messages (2: the receive
    /// slot into the delivery, or into the posted buffer, each way).
    pub fn receive_per_round_trip(&self) -> f64 {
        self.per_round_trip(self.receive_copied_bytes)
    }

    /// All copies per round trip.
    pub fn per_round_trip_total(&self) -> f64 {
        self.per_round_trip(self.send_copied_bytes + self.receive_copied_bytes)
    }
}

/// The initiator's registered slots of a zero-copy loop: [`ECHO_BUFFERS`]
/// to send from (message `n` in slot `n % ECHO_BUFFERS`), then as many
/// receive buffers, all posted.
struct Zero {
    slots: Slots,
    /// [`MessageSource::Registered`] or [`MessageSource::Read`].
    source: MessageSource,
}

/// Ping-pong through a relink session: the initiator sends a
/// `size`-byte message, the target's application checks it and sends it
/// back, and the round trip ends when the initiator's application has the
/// reply in hand and checked it. Two ways:
///
/// - [`MessageSource::Bytes`] on a pair set up with
///   [`Workload::PingPong`](super::Workload::PingPong): `Node::send` of a
///   stamped buffer, the reply drained with `Node::poll_delivery_into`;
///   the target drains with `poll_delivery_into` and `send`s the bytes
///   back. relink copies each message into its journal and a send slot,
///   and from the receive slot into the delivery.
/// - [`MessageSource::Registered`] on a pair set up with
///   [`Workload::PingPongFrom`](super::Workload::PingPongFrom): the
///   message is stamped in place in a registered slot and sent with
///   `Node::send_from`; the reply lands in one of [`ECHO_BUFFERS`] posted
///   receive buffers (`Node::post_receive`), is checked there
///   (`Node::poll_received`) and its buffer posted again; the target
///   checks each message in its posted buffer and sends that buffer back
///   with `send_from`. relink copies each message once, from the receive
///   slot into the posted buffer.
///
/// The next message goes at once: like an eager MPI send, a message's
/// completion (the peer confirmed delivery; it comes with the reply, which
/// carries the acknowledgement) does not hold the next one back (a send
/// slot waits for the completion of the message it carried last). Every
/// completion is drained and checked, and a run ends when all of its
/// messages completed.
pub struct RelinkPingPong<D: Drive> {
    d: D,
    spec: LoopSpec,
    next_seq: u64,
    payload: Vec<u8>,
    reply: Vec<u8>,
    zero: Option<Zero>,
    replies: Receiver,
    outstanding: VecDeque<OpId>,
    stats: LoopStats,
    rtts: Rtts,
}

impl<D: Drive> RelinkPingPong<D> {
    /// A loop of `spec.size`-byte messages on `d`, copied
    /// ([`MessageSource::Bytes`]); `spec.window`, `spec.signal_every` and
    /// `spec.verify` are ignored (one message in flight; payloads are
    /// stamped).
    #[track_caller]
    pub fn new(d: D, spec: LoopSpec) -> RelinkPingPong<D> {
        RelinkPingPong::with_source(d, spec, MessageSource::Bytes)
    }

    /// A loop of messages from `source` on `d`, as [`RelinkPingPong::new`]:
    /// [`MessageSource::Registered`] sends from registered slots and
    /// receives into posted buffers (a pair set up with
    /// [`Workload::PingPongFrom`](super::Workload::PingPongFrom) answers the
    /// same way).
    ///
    /// # Panics
    /// If `spec` is invalid, or the initiator's node cannot register or
    /// post the slots.
    #[track_caller]
    pub fn with_source(mut d: D, spec: LoopSpec, source: MessageSource) -> RelinkPingPong<D> {
        spec.validate();
        let zero = match source {
            MessageSource::Bytes => None,
            MessageSource::Registered | MessageSource::Read => {
                let s = d.session();
                let node = d.initiator();
                let readable = source == MessageSource::Read;
                let slots = Slots::new(node, 2 * ECHO_BUFFERS, spec.size, readable);
                slots.post_all(node, s, ECHO_BUFFERS, 2 * ECHO_BUFFERS);
                Some(Zero { slots, source })
            }
        };
        RelinkPingPong {
            d,
            spec,
            next_seq: 0,
            payload: if zero.is_some() {
                Vec::new()
            } else {
                vec![0; spec.size]
            },
            reply: Vec::with_capacity(spec.size),
            zero,
            replies: Receiver::new(spec.size),
            outstanding: VecDeque::with_capacity(ECHO_BUFFERS),
            stats: LoopStats::default(),
            rtts: Rtts::default(),
        }
    }

    /// Where its messages come from.
    pub fn source(&self) -> MessageSource {
        self.zero
            .as_ref()
            .map_or(MessageSource::Bytes, |z| z.source)
    }

    /// Iterations and waits so far.
    pub fn stats(&self) -> LoopStats {
        self.stats
    }

    /// The round-trip times of every run so far.
    pub fn rtts(&self) -> &Rtts {
        &self.rtts
    }

    /// The provider kind.
    pub fn kind(&self) -> &'static str {
        self.d.kind()
    }

    /// The drive.
    pub fn drive(&mut self) -> &mut D {
        &mut self.d
    }

    /// Do `count` round trips, one after the other, timing each; returns
    /// when every reply was checked and every message completed. A round
    /// trip is timed from before the message is stamped
    /// ([`MessageSource::Registered`]: in its slot, as the raw loop stamps
    /// its send buffer) or handed to relink ([`MessageSource::Bytes`]) to
    /// the reply in hand (`Registered`: checked and its buffer posted
    /// again, as the raw loop reposts its receive).
    ///
    /// # Panics
    /// On a failed or out-of-order completion, a wrong message either way,
    /// or a stall.
    #[track_caller]
    pub fn run(&mut self, count: u64) -> Measurement {
        let s = self.d.session();
        let size = self.spec.size;
        let start = self.next_seq;
        let end = start + count;
        let mut completed = start;
        let mut samples = Vec::with_capacity(count as usize);
        let mut stall = Stall::new();
        let clock = Clock::start();
        for seq in start..end {
            let (t0, sent) = match &self.zero {
                None => {
                    stamp_bytes(&mut self.payload, seq);
                    let t0 = Instant::now();
                    (t0, self.d.initiator().send(s, &self.payload))
                }
                Some(z) => {
                    // Slot `seq % ECHO_BUFFERS` last carried message
                    // `seq - ECHO_BUFFERS`: reused once that completed
                    // (completions come in order; with one round trip in
                    // flight this never waits).
                    while self.outstanding.len() >= ECHO_BUFFERS {
                        let mut progress = self.d.poll();
                        while let Some(c) = self.d.initiator().poll_completion(s) {
                            check_completion(&mut self.outstanding, c, "relink ping");
                            completed += 1;
                            progress = true;
                        }
                        if progress {
                            stall.progress();
                        } else {
                            stall.check(|| format!("relink ping-pong: no send slot for {seq}"));
                            self.d.wait(false);
                        }
                    }
                    let t0 = Instant::now();
                    let i = (seq % ECHO_BUFFERS as u64) as usize;
                    stamp(&z.slots.memory, i * size, size, seq, Verify::Stamp);
                    (t0, self.d.initiator().send_from(s, z.slots.range(i)))
                }
            };
            let op = sent.unwrap_or_else(|e| panic!("relink ping: {e}"));
            self.outstanding.push_back(op);
            loop {
                self.stats.iterations += 1;
                let mut progress = self.d.poll();
                let node = self.d.initiator();
                while let Some(c) = node.poll_completion(s) {
                    check_completion(&mut self.outstanding, c, "relink ping");
                    completed += 1;
                    progress = true;
                }
                let reply = match &self.zero {
                    None => node
                        .poll_delivery_into(s, &mut self.reply)
                        .map(|rseq| self.replies.check(rseq, &self.reply)),
                    Some(z) => node.poll_received(s).map(|r| {
                        let ReceiveOutcome::Message {
                            seq: rseq,
                            len,
                            truncated: false,
                        } = r.outcome
                        else {
                            return Err(format!("a posted receive ended {r:?}"));
                        };
                        let off = r.local.offset as usize;
                        self.replies
                            .check_in(rseq, len as usize, &z.slots.memory, off)?;
                        node.post_receive(s, r.local, r.context)
                            .map_err(|e| format!("post the reply's buffer again: {e}"))
                    }),
                };
                if let Some(checked) = reply {
                    samples.push(t0.elapsed());
                    if let Err(e) = checked {
                        panic!("relink pong: {e}");
                    }
                    stall.progress();
                    break;
                }
                if progress {
                    stall.progress();
                } else {
                    stall.check(|| format!("relink ping-pong: waiting for the reply to {seq}"));
                    self.stats.waits += 1;
                    self.d.wait(false);
                }
            }
        }
        // The last messages' confirmations (each comes with its reply).
        while completed < end {
            let mut progress = self.d.poll();
            while let Some(c) = self.d.initiator().poll_completion(s) {
                check_completion(&mut self.outstanding, c, "relink ping");
                completed += 1;
                progress = true;
            }
            if progress {
                stall.progress();
            } else {
                stall.check(|| format!("relink ping-pong: completed {completed} of {end}"));
                self.d.wait(false);
            }
        }
        self.stats.ops += count;
        let m = clock.stop(count, size);
        self.rtts.push_run(samples);
        self.next_seq = end;
        m
    }

    /// Close the session.
    pub fn close(self) {
        self.d.close();
    }

    /// Close the session and say how many copies of its messages' payload
    /// relink made, both ways.
    pub fn close_counted(self) -> RoundTripCopies {
        let source = self.source();
        let EndCounters { initiator, target } = self.d.close_counted();
        RoundTripCopies {
            source,
            size: self.spec.size,
            round_trips: self.next_seq,
            delivered: initiator.delivered + target.delivered,
            send_copied_bytes: initiator.send_copied_bytes + target.send_copied_bytes,
            receive_copied_bytes: initiator.receive_copied_bytes + target.receive_copied_bytes,
        }
    }
}

impl<D: Drive> Runner for RelinkPingPong<D> {
    fn run(&mut self, count: u64) -> Measurement {
        RelinkPingPong::run(self, count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{SimPair, TcpPair, Workload};

    fn round_trips<D: Drive>(d: D, spec: LoopSpec, source: MessageSource) -> RoundTripCopies {
        let mut l = RelinkPingPong::with_source(d, spec, source);
        assert_eq!(l.source(), source);
        // More round trips than slots: each slot carries several.
        for count in [1, 20, 40] {
            assert_eq!(l.run(count).ops, count);
        }
        assert_eq!(l.rtts().last_runs(3).len(), 61);
        assert_eq!(l.drive().received(), 61);
        l.close_counted()
    }

    #[test]
    fn zero_copy_round_trips_copy_once_each_way() {
        for size in [8, 4096] {
            let spec = LoopSpec::send(size, 1);
            let copy = round_trips(
                SimPair::connect(51, &spec, Workload::PingPong),
                spec,
                MessageSource::Bytes,
            );
            let zero = round_trips(
                SimPair::connect(52, &spec, Workload::PingPongFrom),
                spec,
                MessageSource::Registered,
            );
            for c in [copy, zero] {
                assert_eq!((c.round_trips, c.delivered), (61, 122), "{c:?}");
                assert_eq!(c.receive_per_round_trip(), 2.0, "{c:?}");
            }
            assert_eq!(copy.send_per_round_trip(), 4.0, "{copy:?}");
            assert_eq!(zero.send_per_round_trip(), 0.0, "{zero:?}");
            assert_eq!(zero.per_round_trip_total(), 2.0, "{zero:?}");
        }
    }

    #[test]
    fn round_trips_read_by_their_receivers_copy_nothing() {
        for size in [8, 4096] {
            let spec = LoopSpec::send(size, 1);
            let d = SimPair::connect(54, &spec, Workload::PingPongRead);
            let c = round_trips(d, spec, MessageSource::Read);
            assert_eq!((c.round_trips, c.delivered), (61, 122), "{c:?}");
            assert_eq!(c.per_round_trip_total(), 0.0, "{c:?}");
        }
        let spec = LoopSpec::send(64, 1);
        let d = TcpPair::connect(55, &spec, Workload::PingPongRead);
        let c = round_trips(d, spec, MessageSource::Read);
        assert_eq!(c.per_round_trip_total(), 0.0, "over TCP: {c:?}");
    }

    #[test]
    fn zero_copy_round_trips_over_tcp() {
        let spec = LoopSpec::send(64, 1);
        let d = TcpPair::connect(53, &spec, Workload::PingPongFrom);
        let c = round_trips(d, spec, MessageSource::Registered);
        assert_eq!(
            (c.send_per_round_trip(), c.receive_per_round_trip()),
            (0.0, 2.0)
        );
    }
}
