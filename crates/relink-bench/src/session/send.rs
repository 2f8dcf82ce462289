//! [`RelinkSendLoop`]: the message-rate loop through a relink session,
//! every message counted once the peer confirmed its delivery and the
//! receiving application checked it. Its messages are bytes
//! ([`Node::send`](relink::Node::send), [`MessageSource::Bytes`]) or slots
//! of a ring in registered memory
//! ([`Node::send_from`](relink::Node::send_from),
//! [`MessageSource::Registered`]); [`RelinkSendLoop::close_counted`] reads
//! how many copies of the payload relink made ([`Copies`]).

use std::collections::VecDeque;

use relink::{Access, LocalRange, Memory, OpId, RegionId};
use serde::Serialize;

use super::drive::{Drive, EndCounters};
use super::receiver::stamp_bytes;
use super::stats::{check_completion, LoopStats};
use crate::loops::{stamp, Clock, LoopSpec, Measurement, Stall, Verify};
use crate::series::Runner;

/// Where the messages of a [`RelinkSendLoop`] come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum MessageSource {
    /// Bytes in the loop's own buffer, handed to
    /// [`Node::send`](relink::Node::send): relink copies them into its
    /// journal (for a replay) and from there into a send slot.
    Bytes,
    /// A ring of `window` slots of `size` bytes in one registration of the
    /// initiator's node ([`Node::register`](relink::Node::register) of
    /// [`Node::alloc_memory`](relink::Node::alloc_memory)), message `n` in
    /// slot `n % window`, handed to
    /// [`Node::send_from`](relink::Node::send_from): the SEND gathers a
    /// 22-byte header from a send slot and the payload where it is. A slot
    /// is stamped again only once its previous message completed (at most
    /// `window` outstanding, completions in order), as the raw loop reuses
    /// its send buffer.
    Registered,
    /// As [`Registered`](Self::Registered), the slots readable by the peer
    /// ([`Access::REMOTE_READ`]), on sessions whose receiver reads them
    /// itself into its posted receives
    /// ([`SessionOptions::rendezvous`](relink::SessionOptions::rendezvous),
    /// [`Workload::PingPongRead`](super::Workload::PingPongRead)): no copy
    /// on either side. Ping-pong only.
    Read,
}

impl MessageSource {
    /// `send` or `send-from`, the relink call each makes.
    pub fn name(self) -> &'static str {
        match self {
            MessageSource::Bytes => "send",
            MessageSource::Registered => "send-from",
            MessageSource::Read => "send-read",
        }
    }
}

/// The copies of their payload relink made for the messages of one
/// [`RelinkSendLoop`], from the session's counters on both ends
/// (`send_copied_bytes` at the initiator, `receive_copied_bytes` at the
/// target), over the session's whole life (warm-up included).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Copies {
    /// Where the messages came from.
    pub source: MessageSource,
    /// Bytes per message.
    pub size: usize,
    /// Messages the loop sent (and saw completed).
    pub messages: u64,
    /// Bytes of application payload the initiator's relink copied to send
    /// them (`Counters::send_copied_bytes`).
    pub send_copied_bytes: u64,
    /// Messages the target's session delivered (`Counters::delivered`).
    pub delivered: u64,
    /// Bytes of payload the target's relink copied to deliver them
    /// (`Counters::receive_copied_bytes`).
    pub receive_copied_bytes: u64,
    /// Messages of any kind (control messages too) the target received
    /// behind another in one SEND, a frame (`Counters::packed`).
    pub packed: u64,
}

impl Copies {
    /// The copies of one message's payload relink made to send it:
    /// `send_copied_bytes` over the payload bytes sent (2 for
    /// [`MessageSource::Bytes`]: into the journal, into the send slot; 0
    /// for [`MessageSource::Registered`]).
    pub fn send_per_message(&self) -> f64 {
        self.send_copied_bytes as f64 / (self.messages * self.size as u64).max(1) as f64
    }

    /// The copies of one message's payload relink made to deliver it:
    /// `receive_copied_bytes` over the payload bytes delivered (1: from the
    /// receive slot into the delivery).
    pub fn receive_per_message(&self) -> f64 {
        self.receive_copied_bytes as f64 / (self.delivered * self.size as u64).max(1) as f64
    }
}

/// The ring of [`MessageSource::Registered`].
struct Ring {
    memory: Memory,
    region: RegionId,
}

/// Messages through a relink session: up to `window` outstanding, each
/// counted when it completes (the peer confirmed delivery) and was
/// received and checked by the target's application.
pub struct RelinkSendLoop<D: Drive> {
    d: D,
    spec: LoopSpec,
    next_seq: u64,
    /// [`MessageSource::Bytes`]: the message, stamped anew for each.
    payload: Vec<u8>,
    /// [`MessageSource::Registered`]: the slots, stamped in place.
    ring: Option<Ring>,
    outstanding: VecDeque<OpId>,
    stats: LoopStats,
}

impl<D: Drive> RelinkSendLoop<D> {
    /// A loop of [`MessageSource::Bytes`] on `d` (set up with
    /// [`Workload::Send`](super::Workload::Send)); `spec.signal_every` and
    /// `spec.verify` are ignored (relink signals every operation; payloads
    /// are stamped).
    #[track_caller]
    pub fn new(d: D, spec: LoopSpec) -> RelinkSendLoop<D> {
        RelinkSendLoop::with_source(d, spec, MessageSource::Bytes)
    }

    /// A loop of messages from `source` on `d`, as [`RelinkSendLoop::new`].
    ///
    /// # Panics
    /// If `spec` is invalid, `source` is [`MessageSource::Read`] (for
    /// ping-pongs), or ([`MessageSource::Registered`]) the initiator's node
    /// cannot allocate or register the ring.
    #[track_caller]
    pub fn with_source(mut d: D, spec: LoopSpec, source: MessageSource) -> RelinkSendLoop<D> {
        spec.validate();
        let ring = match source {
            MessageSource::Bytes => None,
            MessageSource::Read => {
                panic!("RelinkSendLoop: MessageSource::Read is for ping-pongs (its target posts no receive)")
            }
            MessageSource::Registered => {
                let node = d.initiator();
                let memory = node
                    .alloc_memory(spec.window * spec.size)
                    .unwrap_or_else(|e| panic!("the ring's memory: {e}"));
                let region = node
                    .register(memory.clone(), Access::LOCAL_WRITE)
                    .unwrap_or_else(|e| panic!("register the ring: {e}"));
                Some(Ring { memory, region })
            }
        };
        RelinkSendLoop {
            d,
            spec,
            next_seq: 0,
            payload: if ring.is_some() {
                Vec::new()
            } else {
                vec![0; spec.size]
            },
            ring,
            outstanding: VecDeque::with_capacity(spec.window),
            stats: LoopStats::default(),
        }
    }

    /// Where its messages come from.
    pub fn source(&self) -> MessageSource {
        if self.ring.is_some() {
            MessageSource::Registered
        } else {
            MessageSource::Bytes
        }
    }

    /// Iterations and waits so far.
    pub fn stats(&self) -> LoopStats {
        self.stats
    }

    /// The provider kind.
    pub fn kind(&self) -> &'static str {
        self.d.kind()
    }

    /// The drive (for counters and the like).
    pub fn drive(&mut self) -> &mut D {
        &mut self.d
    }

    /// Send `count` messages; returns when every one completed and was
    /// received.
    ///
    /// # Panics
    /// On a failed or out-of-order completion, a wrong delivery, or a stall.
    #[track_caller]
    pub fn run(&mut self, count: u64) -> Measurement {
        let (size, window) = (self.spec.size, self.spec.window as u64);
        let call = self.source().name();
        let s = self.d.session();
        let start = self.next_seq;
        let end = start + count;
        let (mut posted, mut completed) = (start, start);
        let mut stall = Stall::new();
        let clock = Clock::start();
        while completed < end || self.d.received() < end {
            self.stats.iterations += 1;
            let mut progress = self.d.poll();
            let node = self.d.initiator();
            while let Some(c) = node.poll_completion(s) {
                check_completion(&mut self.outstanding, c, "relink send");
                completed += 1;
                progress = true;
            }
            while posted < end && posted - completed < window {
                let sent = match &self.ring {
                    None => {
                        stamp_bytes(&mut self.payload, posted);
                        node.send(s, &self.payload)
                    }
                    Some(ring) => {
                        // Slot `posted % window` last carried message
                        // `posted - window`, which completed (completions
                        // come in order): the peer has it.
                        let off = (posted % window) as usize * size;
                        stamp(&ring.memory, off, size, posted, Verify::Stamp);
                        node.send_from(
                            s,
                            LocalRange {
                                region: ring.region,
                                offset: off as u64,
                                len: size as u32,
                            },
                        )
                    }
                };
                let op = sent.unwrap_or_else(|e| panic!("relink {call}: {e}"));
                self.outstanding.push_back(op);
                posted += 1;
                progress = true;
            }
            if progress {
                stall.progress();
            } else {
                let received = self.d.received();
                stall.check(|| {
                    format!(
                        "relink SEND loop: posted {posted}, completed {completed}, received \
                         {received} of {start}..{end}"
                    )
                });
                self.stats.waits += 1;
                self.d.wait(completed >= end);
            }
        }
        self.stats.ops += count;
        let m = clock.stop(count, size);
        self.next_seq = end;
        m
    }

    /// Close the session.
    pub fn close(self) {
        self.d.close();
    }

    /// Close the session and say how many copies of its messages' payload
    /// relink made on either side.
    pub fn close_counted(self) -> Copies {
        let source = self.source();
        let EndCounters { initiator, target } = self.d.close_counted();
        Copies {
            source,
            size: self.spec.size,
            messages: self.next_seq,
            send_copied_bytes: initiator.send_copied_bytes,
            delivered: target.delivered,
            receive_copied_bytes: target.receive_copied_bytes,
            packed: target.packed,
        }
    }
}

impl<D: Drive> Runner for RelinkSendLoop<D> {
    fn run(&mut self, count: u64) -> Measurement {
        RelinkSendLoop::run(self, count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{SimPair, Workload};

    #[test]
    fn messages_from_registered_memory_are_not_copied() {
        for (source, size) in [
            (MessageSource::Bytes, 64),
            (MessageSource::Registered, 64),
            (MessageSource::Registered, 4096),
        ] {
            let spec = LoopSpec::send(size, 8);
            let d = SimPair::connect(47, &spec, Workload::Send);
            let mut l = RelinkSendLoop::with_source(d, spec, source);
            assert_eq!(l.source(), source);
            // More messages than slots: each slot carries several.
            for count in [1, 37, 100] {
                assert_eq!(l.run(count).ops, count);
            }
            assert_eq!(l.drive().received(), 138);
            let c = l.close_counted();
            assert_eq!((c.messages, c.delivered), (138, 138), "{c:?}");
            // Slots of one message (max_message = size): no frame forms.
            assert_eq!(c.packed, 0, "one message per SEND: {c:?}");
            let want = match source {
                MessageSource::Bytes => 2.0,
                MessageSource::Registered => 0.0,
                MessageSource::Read => unreachable!("not in the list"),
            };
            assert_eq!(c.send_per_message(), want, "{c:?}");
            assert_eq!(c.receive_per_message(), 1.0, "{c:?}");
        }
    }
}
