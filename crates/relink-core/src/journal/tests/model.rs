//! A model-based test of a journal and an inbox over a lossy RC
//! transport: random schedules of traffic and losses, then a final resume
//! and drain or a give-up; exactly-once, in-order delivery and one
//! completion per operation.

use super::*;

#[derive(Debug, Clone, Copy)]
enum Step {
    /// Submit an operation of kind 0..5 (message, write, read, fetch-add, cmp-swap).
    Submit(u8),
    /// Post the next unposted operation.
    Post,
    /// The peer executes the oldest operation on the wire.
    Execute,
    /// The oldest acknowledgement arrives back.
    Ack,
    /// The peer reports what it delivered.
    Report,
    /// The peer refuses the oldest operation on the wire (not a
    /// message); the QP breaks.
    Refuse,
    /// The transport is lost: the wire's tail and the acks in flight vanish.
    Down,
    /// Reconnected: resume with the peer's delivered sequence number.
    Resume,
    /// `fast_io_fail_tmo` fires during an outage.
    FailQueued,
    /// The next unposted operation (not a message) cannot be posted: its
    /// token does not translate on this transport.
    Unpostable,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u8..5).prop_map(Step::Submit),
        6 => Just(Step::Post),
        5 => Just(Step::Execute),
        4 => Just(Step::Ack),
        2 => Just(Step::Report),
        1 => Just(Step::Refuse),
        2 => Just(Step::Down),
        2 => Just(Step::Resume),
        1 => Just(Step::FailQueued),
        1 => Just(Step::Unpostable),
    ]
}

/// One request on the current transport, as the peer sees it.
#[derive(Debug, Clone, Copy)]
struct Wire {
    op: OpId,
    seq: Option<Seq>,
    /// Which submitted message the payload is.
    tag: Option<OpId>,
}

/// A journal, a peer with an inbox, and an RC transport between them.
struct Model {
    journal: Journal,
    inbox: Inbox,
    replay_atomics: bool,
    up: bool,
    /// Posted on the current transport, not yet executed (RC: in order).
    wire: VecDeque<Wire>,
    /// Executed by the peer, acknowledgement on its way back.
    acks: VecDeque<OpId>,
    kinds: BTreeMap<OpId, OpKind>,
    posts: HashMap<OpId, u32>,
    executions: HashMap<OpId, u32>,
    outcomes: BTreeMap<OpId, Outcome>,
    /// The messages the peer application received, in order.
    delivered: Vec<OpId>,
}

impl Model {
    fn new(replay_atomics: bool) -> Model {
        Model {
            journal: Journal::new(),
            inbox: Inbox::new(),
            replay_atomics,
            up: true,
            wire: VecDeque::new(),
            acks: VecDeque::new(),
            kinds: BTreeMap::new(),
            posts: HashMap::new(),
            executions: HashMap::new(),
            outcomes: BTreeMap::new(),
            delivered: Vec::new(),
        }
    }

    fn count(map: &HashMap<OpId, u32>, op: OpId) -> u32 {
        map.get(&op).copied().unwrap_or(0)
    }

    fn apply(&mut self, step: Step) {
        match step {
            Step::Submit(k) => {
                let next = OpId(self.kinds.len() as u64 + 1);
                let kind = match k {
                    // The payload names the op, so the peer can tell which it got.
                    0 => msg(&next.0.to_le_bytes()),
                    1 => write(),
                    2 => read(),
                    3 => fetch_add(),
                    _ => cmp_swap(),
                };
                let (op, seq) = self.journal.submit(kind.clone());
                assert_eq!(op, next);
                assert_eq!(seq.is_some(), kind.is_message());
                self.kinds.insert(op, kind);
            }
            Step::Post if self.up => {
                if let Some((op, kind, seq)) = self.journal.next_unposted() {
                    // A message names its op; an orphan is a skip (no tag).
                    let tag = match kind {
                        OpKind::Message { payload } if !payload.is_empty() => {
                            Some(OpId(u64::from_le_bytes(payload[..8].try_into().unwrap())))
                        }
                        _ => None,
                    };
                    assert_eq!(
                        tag.is_none() && kind.is_message(),
                        self.journal.is_void(op),
                        "only a void orphan goes without its payload"
                    );
                    self.wire.push_back(Wire { op, seq, tag });
                    self.journal.mark_posted(op);
                    *self.posts.entry(op).or_default() += 1;
                }
            }
            Step::Execute => {
                if let Some(w) = self.wire.pop_front() {
                    self.execute(w);
                }
            }
            Step::Ack => {
                if let Some(op) = self.acks.pop_front() {
                    if let Some(c) = self.journal.on_success(op) {
                        self.record(c);
                    }
                }
            }
            Step::Report if self.up => {
                for c in self.journal.on_peer_delivered(self.inbox.last_delivered()) {
                    self.record(c);
                }
            }
            Step::Refuse => {
                if self.wire.front().is_some_and(|w| w.seq.is_none()) {
                    let w = self.wire.pop_front().unwrap();
                    let c = self.journal.on_remote_error(w.op, WcStatus::RemAccessErr);
                    self.record(c.expect("an op on the wire is unfinished"));
                    self.down();
                }
            }
            Step::Down => self.down(),
            Step::Resume if !self.up => self.resume(),
            Step::FailQueued if !self.up => {
                for c in self.journal.fail_queued(OpError::FastFail) {
                    self.record(c);
                }
            }
            Step::Unpostable if self.up => {
                let next = self
                    .journal
                    .next_unposted()
                    .map(|(op, kind, _)| (op, kind.is_message()));
                if let Some((op, false)) = next {
                    let c = self
                        .journal
                        .fail_unpostable(op, OpError::Remote(WcStatus::RemAccessErr));
                    self.record(c.expect("an unposted op is unfinished"));
                }
            }
            Step::Post | Step::Report | Step::Resume | Step::FailQueued | Step::Unpostable => {}
        }
    }

    fn execute(&mut self, w: Wire) {
        if let Some(seq) = w.seq {
            match self.inbox.accept(seq) {
                Accept::Deliver => {
                    let Some(op) = w.tag else {
                        // A skip: its operation ended Indeterminate.
                        assert!(
                            matches!(
                                self.outcomes.get(&w.op),
                                Some(Outcome::Indeterminate { .. })
                            ),
                            "{} skipped but {:?}",
                            w.op,
                            self.outcomes.get(&w.op)
                        );
                        self.acks.push_back(w.op);
                        return;
                    };
                    assert!(
                        !matches!(self.outcomes.get(&op), Some(Outcome::Failed(_))),
                        "{op} delivered after it was reported Failed"
                    );
                    assert!(
                        self.delivered.last() < Some(&op),
                        "{op} delivered out of order"
                    );
                    self.delivered.push(op);
                }
                Accept::Duplicate => {}
                Accept::Gap { expected } => panic!("gap: got {seq}, expected {expected}"),
            }
        } else {
            let n = self.executions.entry(w.op).or_default();
            *n += 1;
            if self.kinds[&w.op].is_atomic() && !self.replay_atomics {
                assert_eq!(*n, 1, "{} executed twice", w.op);
            }
        }
        self.acks.push_back(w.op);
    }

    fn down(&mut self) {
        if self.up {
            self.wire.clear();
            self.acks.clear();
            self.journal.transport_down();
            self.up = false;
        }
    }

    fn resume(&mut self) {
        let delivered = self.inbox.last_delivered();
        for c in self.journal.resume(delivered, self.replay_atomics) {
            self.record(c);
        }
        self.up = true;
    }

    fn record(&mut self, c: Completion) {
        let op = c.op;
        assert!(
            self.outcomes.insert(op, c.outcome).is_none(),
            "{op} completed twice"
        );
        let kind = &self.kinds[&op];
        let posts = Self::count(&self.posts, op);
        let executions = Self::count(&self.executions, op);
        match c.outcome {
            Outcome::Success { replayed } => {
                assert_eq!(replayed, posts >= 2, "{op}: replayed flag");
                if kind.is_message() {
                    assert!(self.delivered.contains(&op), "{op} success before delivery");
                } else {
                    assert!(executions >= 1, "{op} success without execution");
                }
            }
            Outcome::Indeterminate { executed } => {
                assert!(kind.is_message() || kind.is_atomic(), "{op}: {kind:?}");
                assert!(posts >= 1, "{op} indeterminate but never posted");
                if executed == Some(true) {
                    assert!(kind.is_atomic() && executions >= 1);
                }
            }
            Outcome::Failed(OpError::Remote(_)) => assert!(!kind.is_message()),
            Outcome::Failed(_) => {
                if !kind.is_idempotent() {
                    assert_eq!(posts, 0, "{op} failed after it may have taken effect");
                    assert!(!self.delivered.contains(&op));
                }
            }
        }
    }

    /// Runs the transport until the journal has nothing left.
    fn drain(&mut self) {
        if !self.up {
            self.resume();
        }
        for _ in 0..3 {
            while self.journal.next_unposted().is_some() {
                self.apply(Step::Post);
            }
            while !self.wire.is_empty() {
                self.apply(Step::Execute);
            }
            while !self.acks.is_empty() {
                self.apply(Step::Ack);
            }
            self.apply(Step::Report);
        }
    }

    fn check_end(&self) {
        assert!(self.journal.is_empty(), "{:?}", self.journal);
        assert_eq!(self.journal.len(), 0);
        assert_eq!(self.journal.payload_bytes(), 0);
        let unfinished: Vec<_> = self
            .kinds
            .keys()
            .filter(|op| !self.outcomes.contains_key(op))
            .collect();
        assert!(unfinished.is_empty(), "never completed: {unfinished:?}");
        let stats = self.journal.stats();
        assert_eq!(stats.completed, self.outcomes.len() as u64);
        let indeterminate = self
            .outcomes
            .values()
            .filter(|o| matches!(o, Outcome::Indeterminate { .. }))
            .count();
        assert_eq!(stats.indeterminate, indeterminate as u64);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random schedules of traffic and losses, then either a final
    /// resume and drain or a give-up: exactly-once, in-order delivery
    /// and one completion per operation.
    #[test]
    fn journal_and_inbox_model(
        steps in proptest::collection::vec(step(), 0..160),
        replay_atomics in any::<bool>(),
        give_up_at in proptest::option::weighted(0.2, 0usize..160),
    ) {
        let mut m = Model::new(replay_atomics);
        let mut gave_up = false;
        for (i, &s) in steps.iter().enumerate() {
            if give_up_at == Some(i) {
                // Give-up (or admin disconnect) with the transport
                // possibly up: fail_all implies transport_down.
                m.wire.clear();
                m.acks.clear();
                m.up = false;
                for c in m.journal.fail_all(OpError::GaveUp) {
                    m.record(c);
                }
                gave_up = true;
                break;
            }
            m.apply(s);
        }
        if !gave_up {
            m.drain();
            // Every message not reported Failed reached the peer once, in
            // order (the model's messages are of bytes: an orphan keeps
            // its payload and is replayed).
            let expected: Vec<OpId> = m
                .kinds
                .iter()
                .filter(|(op, kind)| {
                    kind.is_message() && !matches!(m.outcomes[op], Outcome::Failed(_))
                })
                .map(|(op, _)| *op)
                .collect();
            prop_assert_eq!(&m.delivered, &expected);
        }
        m.check_end();
    }
}
