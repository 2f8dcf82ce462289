//! The driver's part of the pair harness: performs each side's actions,
//! hands connection requests to the target like `relink::Node` does,
//! executes and acknowledges work requests, reports CM events, and fires
//! timers on the fake clock. See the parent module's docs.

use super::*;
use relink_core::reason::AttemptFailure;

impl Pair {
    pub(super) fn collect(&mut self, who: Who) {
        let end = &mut self.ends[who.ix()];
        let Some(s) = end.session.as_mut() else {
            return;
        };
        end.completions
            .extend(std::iter::from_fn(|| s.poll_completion()));
        end.deliveries
            .extend(std::iter::from_fn(|| s.poll_delivery()));
        end.events.extend(std::iter::from_fn(|| s.poll_event()));
    }

    fn keys(&self, who: Who, epoch: Epoch) -> Vec<LocalKeys> {
        self.setup
            .regions
            .iter()
            .map(|r| LocalKeys {
                region: r.id,
                addr: region_addr(who, r.id),
                rkey: rkey(who, epoch, r.id),
            })
            .collect()
    }

    /// Perform `who`'s queued actions; whether there were any.
    fn perform(&mut self, who: Who) -> bool {
        let mut any = false;
        while let Some(a) = self
            .end_mut(who)
            .session
            .as_mut()
            .and_then(|s| s.poll_action())
        {
            any = true;
            // A message goes out as its header and the payload the
            // journal keeps, one buffer, as a node copies them into its
            // send slot; the record shows the bytes posted.
            let a = match a {
                Action::SendMessage { epoch, op, header } => {
                    let session = self.end(who).session.as_ref().expect("a session");
                    let payload = session
                        .message_payload(op)
                        .expect("a message in the journal");
                    let mut bytes = header.to_vec();
                    bytes.extend_from_slice(payload);
                    Action::Send {
                        epoch,
                        op: Some(op),
                        bytes,
                    }
                }
                a => a,
            };
            self.end_mut(who).actions.push(a.clone());
            self.perform_one(who, a);
            self.collect(who);
            self.collect(who.peer());
        }
        any
    }

    fn perform_one(&mut self, who: Who, a: Action) {
        let now = self.now;
        if let Action::Accept { request, .. } | Action::Reject { request, .. } = &a {
            if self.tokens.get(&request.0) == Some(&None) {
                // The answer to a request the test made (`knock`).
                self.tokens.remove(&request.0);
                self.answers.push(a);
                return;
            }
        }
        match a {
            Action::TearDown { epoch } => {
                if self.end(who).transport == Some(epoch) {
                    self.cut(who, epoch);
                    self.end_mut(who).transport = None;
                }
                if who == Who::Ini {
                    self.connect_requests.retain(|(e, _)| *e != epoch);
                }
            }
            Action::Connect {
                epoch,
                private_data,
                ..
            } => {
                assert_eq!(who, Who::Ini, "only the initiator connects");
                if let Some(old) = self.end(who).transport {
                    self.cut(who, old);
                }
                self.end_mut(who).transport = Some(epoch);
                self.requests_seen.push(private_data.clone());
                if !self.end(who).device_present {
                    self.session(who).handle_attempt_failed(
                        epoch,
                        AttemptFailure::AddrUnresolved,
                        now,
                    );
                } else if !self.end(Who::Tgt).device_present {
                    // Nothing answers at the peer's address, or its host
                    // refuses at once (the TCP soft fabric).
                    if self.absent_unreachable {
                        self.session(who).handle_attempt_failed(
                            epoch,
                            AttemptFailure::Unreachable,
                            now,
                        );
                    }
                } else if self.forged.is_none() && !self.listening {
                    self.session(who).handle_rejected(epoch, &[], now);
                } else {
                    self.connect_requests.push_back((epoch, private_data));
                }
            }
            Action::Accept {
                epoch,
                request,
                private_data,
            } => {
                let ini_epoch = self.tokens.remove(&request.0).flatten().expect("a request");
                if !self.end(who).device_present {
                    self.session(who)
                        .handle_attempt_failed(epoch, AttemptFailure::DeviceLost, now);
                    return;
                }
                if let Some(old) = self.end(who).transport {
                    self.cut(who, old);
                }
                self.end_mut(who).transport = Some(epoch);
                if self.end(Who::Ini).transport != Some(ini_epoch) {
                    return; // the initiator gave up on that attempt
                }
                self.link = Some(Link {
                    ini: ini_epoch,
                    tgt: Some(epoch),
                });
                let (dev, keys) = (
                    self.end(Who::Ini).device.clone(),
                    self.keys(Who::Ini, ini_epoch),
                );
                self.session(Who::Ini)
                    .handle_connected(ini_epoch, dev, &private_data, keys, now);
                let (dev, keys) = (self.end(who).device.clone(), self.keys(who, epoch));
                self.session(who).handle_accepted(epoch, dev, keys, now);
            }
            Action::Reject {
                request,
                private_data,
            } => {
                let ini_epoch = self.tokens.remove(&request.0).flatten().expect("a request");
                if self.end(Who::Ini).transport == Some(ini_epoch) {
                    self.session(Who::Ini)
                        .handle_rejected(ini_epoch, &private_data, now);
                }
            }
            Action::Send { epoch, op, bytes } => self.post(who, epoch, op, Wr::Send(bytes)),
            Action::SendMessage { .. } => unreachable!("assembled in perform"),
            Action::OneSided {
                epoch,
                op,
                kind,
                local,
                remote,
            } => {
                self.post(
                    who,
                    epoch,
                    Some(op),
                    Wr::OneSided {
                        kind,
                        // The pair's operations name one range each.
                        local: {
                            assert_eq!(local.len(), 1, "one local range");
                            local[0]
                        },
                        remote,
                    },
                );
            }
            Action::ConnectStandby { .. }
            | Action::AcceptStandby { .. }
            | Action::Promote { .. }
            | Action::ProbeStandby { .. } => {
                panic!("the pair has one transport per end: its policies keep the standby off")
            }
            Action::Disconnect { epoch } => {
                // The node disconnects once what was posted before (the
                // goodbye) has completed.
                while self.execute(who) {}
                if self.end(who).transport == Some(epoch) {
                    self.cut(who, epoch);
                }
            }
        }
    }

    /// Post a work request on `who`'s transport of `epoch`, if that is on
    /// the live link (the node drops those of a transport it retired). A
    /// one-sided request must carry the peer's rkey of the link's epoch.
    fn post(&mut self, who: Who, epoch: Epoch, op: Option<OpId>, wr: Wr) {
        let Some(link) = self.link.filter(|l| l.epoch(who) == Some(epoch)) else {
            return;
        };
        if self.end(who).transport != Some(epoch) {
            return;
        }
        if let (Wr::OneSided { remote, .. }, Some(op)) = (&wr, op) {
            let peer = who.peer();
            let fresh = link
                .epoch(peer)
                .is_some_and(|pe| self.keys(peer, pe).iter().any(|k| k.rkey == remote.rkey));
            if !fresh {
                self.stale_keys.push((who, op, *remote));
            }
        }
        self.requests[who.ix()].push_back((op, wr));
    }

    /// A connection request reaches the target, handled like the node does;
    /// `from`: the initiator's epoch, `None` for a request the test makes.
    pub(super) fn request(&mut self, from: Option<Epoch>, data: Vec<u8>) {
        let now = self.now;
        if from.is_some_and(|e| self.end(Who::Ini).transport != Some(e)) {
            return; // withdrawn
        }
        let token = self.next_token;
        self.next_token += 1;
        self.tokens.insert(token, from);
        if let Some(ini_epoch) = from {
            match self.forged.take() {
                Some(Forged::Accept(pd)) => {
                    self.tokens.remove(&token);
                    self.link = Some(Link {
                        ini: ini_epoch,
                        tgt: None,
                    });
                    let (dev, keys) = (
                        self.end(Who::Ini).device.clone(),
                        self.keys(Who::Ini, ini_epoch),
                    );
                    self.session(Who::Ini)
                        .handle_connected(ini_epoch, dev, &pd, keys, now);
                    return;
                }
                Some(Forged::Reject(pd)) => {
                    self.tokens.remove(&token);
                    self.session(Who::Ini).handle_rejected(ini_epoch, &pd, now);
                    return;
                }
                None => {}
            }
        }
        let refuse = |p: &mut Pair, reason| {
            let pd = RejectData::Refused(Refused { reason }).to_vec();
            match p.tokens.remove(&token).flatten() {
                Some(e) => p.session(Who::Ini).handle_rejected(e, &pd, now),
                None => p.answers.push(Action::Reject {
                    request: RequestToken(token),
                    private_data: pd,
                }),
            }
        };
        match ConnectData::decode(&data) {
            Ok(ConnectData::Hello(h)) => {
                if let Some(s) = self.end_mut(Who::Tgt).session.as_mut() {
                    match s.handle_hello(RequestToken(token), &h, now) {
                        HelloVerdict::Taken => return,
                        HelloVerdict::Refuse(reason) => return refuse(self, reason),
                        HelloVerdict::Replaced => {}
                    }
                }
                let cfg = SessionConfig {
                    role: Role::Target,
                    id: h.session,
                    incarnation: self.end(Who::Tgt).incarnation,
                    paths: Vec::new(),
                    policy: self
                        .setup
                        .tgt_policy
                        .clone()
                        .unwrap_or_else(|| self.setup.policy.clone()),
                    spec: self.setup.spec(),
                    seed: 11,
                    // The Hello's, whatever is here.
                    connect_data: ConnectBytes::EMPTY,
                };
                let mut s = Session::accept_hello(cfg, RequestToken(token), &h, SECRET, now)
                    .expect("valid setup");
                s.set_devices(vec![self.end(Who::Tgt).device.clone()], now);
                self.end_mut(Who::Tgt).session = Some(s);
            }
            Ok(ConnectData::Resume(r)) => match self.end_mut(Who::Tgt).session.as_mut() {
                Some(s) if s.id() == r.session => {
                    s.handle_resume_request(RequestToken(token), &r, now)
                }
                _ => refuse(self, RefuseReason::UnknownSession),
            },
            // One transport per end: no standby.
            Ok(ConnectData::Standby(_)) => refuse(self, RefuseReason::Busy),
            Err(_) => refuse(self, RefuseReason::UnsupportedVersion),
        }
    }

    /// Execute the oldest work request `from` posted; whether there was one.
    /// Its acknowledgement waits in the requester's queue.
    pub fn execute(&mut self, from: Who) -> bool {
        let Some((op, wr)) = self.requests[from.ix()].pop_front() else {
            return false;
        };
        let link = self.link.expect("requests only wait on a link");
        let (Some(from_epoch), Some(peer_epoch)) = (link.epoch(from), link.epoch(from.peer()))
        else {
            return true; // nobody behind a forged accept: never acknowledged
        };
        let now = self.now;
        let peer = from.peer();
        let (status, land) = match wr {
            Wr::Send(bytes) => {
                self.session(peer).handle_received(peer_epoch, &bytes, now);
                self.collect(peer);
                (WcStatus::Success, None)
            }
            Wr::OneSided {
                kind,
                local,
                remote,
            } => self.one_sided(from, peer_epoch, kind, local, remote),
        };
        self.acks[from.ix()].push_back(Ack {
            epoch: from_epoch,
            op,
            status,
            land,
        });
        true
    }

    /// The responder's side of a one-sided request.
    fn one_sided(
        &mut self,
        from: Who,
        peer_epoch: Epoch,
        kind: OneSided,
        local: LocalRange,
        remote: RemoteAddr,
    ) -> (WcStatus, Option<(LocalRange, Vec<u8>)>) {
        let peer = from.peer();
        let (right, len) = match kind {
            OneSided::Write => (Access::REMOTE_WRITE, local.len as u64),
            OneSided::Read => (Access::REMOTE_READ, local.len as u64),
            _ => (Access::REMOTE_ATOMIC, 8),
        };
        let target = self.setup.regions.iter().find(|r| {
            let base = region_addr(peer, r.id);
            rkey(peer, peer_epoch, r.id) == remote.rkey
                && r.access.contains(right)
                && remote.addr >= base
                && remote.addr + len <= base + r.len
        });
        let Some(r) = target else {
            return (WcStatus::RemAccessErr, None);
        };
        let (region, off) = (r.id, (remote.addr - region_addr(peer, r.id)) as usize);
        let len = len as usize;
        let src = self.end(from).memory[&local.region]
            [local.offset as usize..local.offset as usize + local.len as usize]
            .to_vec();
        let mem = self.end_mut(peer).memory.get_mut(&region).expect("region");
        let old = |m: &[u8]| u64::from_le_bytes(m[off..off + 8].try_into().expect("8"));
        match kind {
            OneSided::Write => {
                mem[off..off + len].copy_from_slice(&src);
                (WcStatus::Success, None)
            }
            OneSided::Read => (
                WcStatus::Success,
                Some((local, mem[off..off + len].to_vec())),
            ),
            OneSided::FetchAdd { add } => {
                let v = old(mem);
                mem[off..off + 8].copy_from_slice(&v.wrapping_add(add).to_le_bytes());
                (WcStatus::Success, Some((local, v.to_le_bytes().to_vec())))
            }
            OneSided::CmpSwap { compare, swap } => {
                let v = old(mem);
                if v == compare {
                    mem[off..off + 8].copy_from_slice(&swap.to_le_bytes());
                }
                (WcStatus::Success, Some((local, v.to_le_bytes().to_vec())))
            }
        }
    }

    /// Report the oldest acknowledgement `to` is owed; whether there was one.
    pub fn acknowledge(&mut self, to: Who) -> bool {
        let Some(ack) = self.acks[to.ix()].pop_front() else {
            return false;
        };
        if let Some((l, bytes)) = ack.land {
            let m = self.end_mut(to).memory.get_mut(&l.region).expect("region");
            m[l.offset as usize..l.offset as usize + bytes.len()].copy_from_slice(&bytes);
        }
        let now = self.now;
        self.session(to)
            .handle_send_completion(ack.epoch, ack.op, ack.status, now);
        self.collect(to);
        true
    }

    /// Perform actions, CM events and connection requests until none is
    /// left; work requests stay where they are.
    pub fn pump(&mut self) -> bool {
        let mut any = false;
        loop {
            let mut progress = self.perform(Who::Ini) | self.perform(Who::Tgt);
            let cm = if self.hold_cm {
                None
            } else {
                self.cm.pop_front()
            };
            if let Some((who, epoch)) = cm {
                let now = self.now;
                if let Some(s) = self.end_mut(who).session.as_mut() {
                    s.handle_transport_down(epoch, DownCause::CmDisconnected, now);
                }
                self.collect(who);
                progress = true;
            }
            if let Some((e, data)) = self.connect_requests.pop_front() {
                self.request(Some(e), data);
                self.collect(Who::Ini);
                self.collect(Who::Tgt);
                progress = true;
            }
            if !progress {
                return any;
            }
            any = true;
        }
    }

    /// Run everything that can run without the clock moving.
    pub fn run(&mut self) {
        for _ in 0..1_000_000 {
            let mut progress = self.pump();
            for who in [Who::Ini, Who::Tgt] {
                if self.execute(who) {
                    progress = true;
                    self.pump();
                }
                progress |= self.acknowledge(who);
            }
            if !progress {
                return;
            }
        }
        panic!("the pair never went quiet");
    }

    /// Move the clock by `d`, firing every timer on the way (in order) and
    /// running after each.
    pub fn advance(&mut self, d: Duration) {
        let until = self.now + d;
        self.run();
        for _ in 0..1_000_000 {
            let next = self
                .ends
                .iter()
                .filter_map(|e| e.session.as_ref()?.poll_timeout())
                .min();
            match next {
                Some(t) if t <= until => {
                    self.now = self.now.max(t);
                    self.fire();
                    self.run();
                }
                _ => {
                    self.now = until;
                    self.run();
                    return;
                }
            }
        }
        panic!("timers kept firing at {}", self.now);
    }

    /// Fire the timers due now and perform what follows, without executing
    /// work requests (to stop a handshake half-way).
    pub fn tick(&mut self) {
        self.fire();
        self.pump();
    }

    fn fire(&mut self) {
        let now = self.now;
        for who in [Who::Ini, Who::Tgt] {
            let due = self
                .end(who)
                .session
                .as_ref()
                .and_then(Session::poll_timeout);
            if due.is_some_and(|t| t <= now) {
                self.session(who).handle_timeout(now);
                self.collect(who);
            }
        }
    }

    /// Run, and let 1 ms pass (acknowledgement delays).
    pub fn settle(&mut self) {
        self.advance(Duration::from_millis(1));
    }

    /// Assert the invariants every scenario keeps: each operation completed
    /// at most once; each side delivered sequence numbers in increasing
    /// order, each once (a number is missing only where a skip took it: a
    /// message completed `Indeterminate` that the peer never had); no
    /// one-sided request carried an rkey other than the peer's of
    /// the link's epoch.
    pub fn check(&self) {
        for who in [Who::Ini, Who::Tgt] {
            let end = self.end(who);
            let mut seen = BTreeSet::new();
            for c in &end.completions {
                assert!(seen.insert(c.op), "{who:?}: {} completed twice", c.op);
            }
            for pair in end.deliveries.windows(2) {
                assert!(pair[0].0 < pair[1].0, "{who:?}: deliveries out of order");
            }
        }
        assert!(
            self.stale_keys.is_empty(),
            "stale rkeys posted: {:?}",
            self.stale_keys
        );
    }
}
