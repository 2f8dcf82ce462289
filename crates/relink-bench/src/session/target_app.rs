//! [`TargetApp`]: the receiving application on the target's node of a
//! pair, the same in-process ([`SimPair`](super::SimPair)) and on a thread
//! of its own ([`ThreadPair`](super::ThreadPair)): it checks every message
//! and, for a ping-pong, sends it back — copied ([`Workload::PingPong`]) or
//! from the posted buffer it landed in ([`Workload::PingPongFrom`]).

use std::collections::VecDeque;

use relink::{Access, LocalRange, Memory, Node, OpId, ReceiveOutcome, RegionId, SessionHandle};

use super::options::Workload;
use super::receiver::{check_echo, Receiver};
use crate::loops::LoopSpec;

/// Buffers of message size each side of a [`Workload::PingPongFrom`] pair
/// keeps posted for the peer's messages (as the raw
/// [`PingPongLoop`](crate::PingPongLoop) keeps 16 receives posted), and
/// slots each side sends from. One message is in flight at a time, so a
/// few would do: a buffer is back once the reply it carried completed,
/// about a round trip later.
pub const ECHO_BUFFERS: usize = 16;

/// `count` slots of `size` bytes in one registration of `node`
/// ([`Node::alloc_memory`], [`Node::register`]), for
/// [`Node::send_from`] and [`Node::post_receive`].
pub(super) struct Slots {
    /// The registration's memory.
    pub memory: Memory,
    /// The registration.
    pub region: RegionId,
    /// Bytes per slot.
    pub size: usize,
}

impl Slots {
    /// `readable`: the peer may read them ([`Access::REMOTE_READ`], for a
    /// receiver that reads messages itself).
    ///
    /// # Panics
    /// If `node` cannot allocate or register the memory.
    pub fn new(node: &mut Node, count: usize, size: usize, readable: bool) -> Slots {
        let memory = node
            .alloc_memory(count * size)
            .unwrap_or_else(|e| panic!("the slots' memory: {e}"));
        let access = if readable {
            Access::LOCAL_WRITE | Access::REMOTE_READ
        } else {
            Access::LOCAL_WRITE
        };
        let region = node
            .register(memory.clone(), access)
            .unwrap_or_else(|e| panic!("register the slots: {e}"));
        Slots {
            memory,
            region,
            size,
        }
    }

    /// Slot `i`.
    pub fn range(&self, i: usize) -> LocalRange {
        LocalRange {
            region: self.region,
            offset: (i * self.size) as u64,
            len: u32::try_from(self.size).expect("a slot fits u32"),
        }
    }

    /// Post slots `from..to` as receives of session `s`, each with its
    /// index as the context.
    ///
    /// # Panics
    /// If the node refuses one.
    pub fn post_all(&self, node: &mut Node, s: SessionHandle, from: usize, to: usize) {
        for i in from..to {
            node.post_receive(s, self.range(i), i as u64)
                .unwrap_or_else(|e| panic!("post receive buffer {i}: {e}"));
        }
    }
}

/// How the target's application answers.
enum Echo {
    /// It does not ([`Workload::Send`], [`Workload::Write`]): messages are
    /// drained with [`Node::poll_delivery_into`] and checked.
    None,
    /// [`Workload::PingPong`]: drained as above, checked and
    /// [`Node::send`] back.
    Copy,
    /// [`Workload::PingPongFrom`]: buffers posted, each message checked
    /// where it landed and its buffer sent back with [`Node::send_from`],
    /// then posted again once that reply completed.
    From {
        /// [`ECHO_BUFFERS`] receive buffers.
        slots: Slots,
        /// The replies not completed yet, oldest first, with their buffer.
        replies: VecDeque<(OpId, usize)>,
    },
}

/// The receiving application of a pair, on the target's node.
pub(super) struct TargetApp {
    rx: Receiver,
    /// The buffer [`Node::poll_delivery_into`] fills (not for
    /// [`Workload::PingPongFrom`]).
    buf: Vec<u8>,
    echo: Echo,
}

impl TargetApp {
    /// The application of `workload` for session `s` of `node`, messages
    /// of `spec.size` bytes; for [`Workload::PingPongFrom`] it registers
    /// its buffers and posts them.
    ///
    /// # Panics
    /// If the node cannot register or post the buffers.
    pub fn new(node: &mut Node, s: SessionHandle, spec: &LoopSpec, workload: Workload) -> Self {
        let echo = match workload {
            Workload::Send | Workload::Write => Echo::None,
            Workload::PingPong => Echo::Copy,
            Workload::PingPongFrom | Workload::PingPongRead => {
                let readable = workload == Workload::PingPongRead;
                let slots = Slots::new(node, ECHO_BUFFERS, spec.size, readable);
                slots.post_all(node, s, 0, ECHO_BUFFERS);
                Echo::From {
                    slots,
                    replies: VecDeque::with_capacity(ECHO_BUFFERS),
                }
            }
        };
        TargetApp {
            rx: Receiver::new(spec.size),
            buf: Vec::new(),
            echo,
        }
    }

    /// Messages received and checked so far.
    pub fn received(&self) -> u64 {
        self.rx.received()
    }

    /// Take what session `s` of `node` has for the application: check each
    /// message (and answer it), drain the replies' completions; whether
    /// anything came. An error names the first wrong message or reply.
    pub fn poll(&mut self, node: &mut Node, s: SessionHandle) -> Result<bool, String> {
        let mut progress = false;
        match &mut self.echo {
            Echo::From { slots, replies } => {
                while let Some(r) = node.poll_received(s) {
                    let ReceiveOutcome::Message {
                        seq,
                        len,
                        truncated: false,
                    } = r.outcome
                    else {
                        return Err(format!("a posted receive ended {r:?}"));
                    };
                    self.rx
                        .check_in(seq, len as usize, &slots.memory, r.local.offset as usize)?;
                    let op = node
                        .send_from(s, r.local)
                        .map_err(|e| format!("echo from the buffer: {e}"))?;
                    let i = usize::try_from(r.context).expect("a buffer index");
                    replies.push_back((op, i));
                    progress = true;
                }
            }
            echo => {
                while let Some(seq) = node.poll_delivery_into(s, &mut self.buf) {
                    self.rx.check(seq, &self.buf)?;
                    if matches!(echo, Echo::Copy) {
                        node.send(s, &self.buf).map_err(|e| format!("echo: {e}"))?;
                    }
                    progress = true;
                }
            }
        }
        if matches!(self.echo, Echo::None) {
            // It sends nothing: no completion to drain.
            return Ok(progress);
        }
        while let Some(c) = node.poll_completion(s) {
            check_echo(&c)?;
            if let Echo::From { slots, replies } = &mut self.echo {
                // Completions come in order: the oldest reply's buffer is
                // the application's again.
                let Some((_, i)) = replies.pop_front().filter(|(op, _)| *op == c.op) else {
                    return Err(format!("a completion of no reply in flight: {c:?}"));
                };
                node.post_receive(s, slots.range(i), i as u64)
                    .map_err(|e| format!("post receive buffer {i} again: {e}"))?;
            }
            progress = true;
        }
        Ok(progress)
    }
}
