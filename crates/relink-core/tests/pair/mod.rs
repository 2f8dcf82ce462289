//! A quinn-style pair harness (like quinn-proto's `tests::util::Pair`): an
//! initiator and a target [`Session`] wired to each other by hand, with a
//! fake clock. No fabric, no driver: the
//! harness plays the driver's part (`crates/relink/src/node/`) in the
//! smallest faithful way:
//!
//! - `Connect` becomes a connection request at the target, handled like the
//!   node does (a Hello creates the target session with
//!   [`Session::accept_hello`], a Resume goes to
//!   [`Session::handle_resume_request`] of the session with that id, anything
//!   else is refused); no device at the target: the request goes unanswered;
//!   no listener: the peer's CM refuses it with no private data.
//! - `Accept` establishes the connection: the initiator gets
//!   `handle_connected` with the accept data, the target `handle_accepted`,
//!   each with the rkeys of a registration that is new for every epoch.
//! - `Reject` reaches the initiator as `handle_rejected`.
//! - `Send` and `OneSided` are work requests on the link: executing one
//!   hands a message to the peer (`handle_received`) or performs the
//!   WRITE / READ / atomic on the peer's memory (after checking the rkey
//!   against the peer's registration of the link's epoch); its RC
//!   acknowledgement (`handle_send_completion`, with a READ's or atomic's
//!   data landing in local memory) is a separate step, so tests can lose
//!   the device between execution and acknowledgement.
//! - `TearDown` / `Disconnect` / a removed device cut the link: whatever is
//!   in flight on it is gone, and the peer's CM reports `DISCONNECTED`.
//! - Timers fire when [`Pair::advance`] moves the fake clock past them.
//!
//! Granularity, for cutting a scenario at any point: [`Pair::pump`]
//! performs actions, CM events and connection requests only;
//! [`Pair::execute`] / [`Pair::acknowledge`] move one work request / one
//! acknowledgement; [`Pair::tick`] fires due timers without executing work
//! requests; [`Pair::run`] does everything until quiet; [`Pair::advance`]
//! and [`Pair::settle`] also move the clock. Faults: [`Pair::remove_device`],
//! [`Pair::add_device`], [`Pair::reset_device`], [`Pair::break_link`] (nobody
//! is told), [`Pair::transport_down`], [`Pair::restart_target`]; a forged
//! peer: [`Pair::forged`] answers the initiator's next request,
//! [`Pair::knock`] sends the target a request of the test's own,
//! [`Pair::inject`] hands a side raw message bytes. The application's
//! decisions: [`Pair::resume`], [`Pair::set_policy`].
//!
//! Everything the sessions emit (completions, deliveries, events, actions)
//! is kept per side for assertions; [`Pair::check`] asserts the invariants
//! every scenario must keep (one completion per operation, deliveries
//! exactly once in order, no stale rkey ever posted).

#![allow(dead_code)] // each test file uses a part of the harness

mod driver;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use relink_core::journal::{Completion, LocalRange, OpKind, Outcome};
use relink_core::policy::{Policy, PolicyError};
use relink_core::resources::{RegionSpec, SessionSpec};
use relink_core::session::{
    Action, HelloVerdict, LocalKeys, OneSided, Path, RequestToken, Role, Session, SessionConfig,
    SessionError, SessionEvent,
};
use relink_core::state::{DownCause, State, Transition};
use relink_core::wire::{self, ConnectBytes, ConnectData, RefuseReason, Refused, RejectData};
use relink_core::{BufferToken, Epoch, Incarnation, OpId, RegionId, Seq, SessionId};
use relink_fabric::{
    Access, DeviceEvent, DeviceEventKind, DeviceId, DeviceInfo, Guid, IpNet, PortState, RemoteAddr,
    Timestamp, WcStatus,
};

/// Which end of the pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// The initiator (connects and reconnects).
    Ini,
    /// The target (accepts).
    Tgt,
}

impl Who {
    /// The other end.
    pub fn peer(self) -> Who {
        match self {
            Who::Ini => Who::Tgt,
            Who::Tgt => Who::Ini,
        }
    }

    fn ix(self) -> usize {
        self as usize
    }
}

/// The session id the initiator picks.
pub const SESSION: SessionId = SessionId(0x5e55_1011);
/// The secret the target issues.
pub const SECRET: [u8; 32] = [0x5a; 32];
/// When every pair starts.
pub const T0: Timestamp = Timestamp(1_000_000_000);
/// The one region each side registers and advertises (64 bytes, every right).
pub const REGION: RegionId = RegionId(1);
/// Largest message payload.
pub const MAX_MESSAGE: u32 = 256;

/// How a pair is built.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Policy of both sides (of the initiator if `tgt_policy` is set).
    pub policy: Policy,
    /// The target's policy, if different.
    pub tgt_policy: Option<Policy>,
    /// Receive slots of each side.
    pub recv_slots: u32,
    /// One-sided operations in flight.
    pub max_one_sided: u32,
    /// Regions of each side.
    pub regions: Vec<RegionSpec>,
    /// The initiator application's connect data.
    pub connect_data: ConnectBytes,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            policy: Policy::default(),
            tgt_policy: None,
            recv_slots: 16,
            max_one_sided: 8,
            regions: vec![RegionSpec {
                id: REGION,
                len: 64,
                access: Access::LOCAL_WRITE
                    | Access::REMOTE_WRITE
                    | Access::REMOTE_READ
                    | Access::REMOTE_ATOMIC,
                advertise: true,
                window: false,
            }],
            connect_data: ConnectBytes::EMPTY,
        }
    }
}

impl Setup {
    /// The same setup with `policy` on both sides.
    pub fn with_policy(policy: Policy) -> Setup {
        Setup {
            policy,
            ..Setup::default()
        }
    }

    pub fn spec(&self) -> SessionSpec {
        SessionSpec {
            recv_slots: self.recv_slots,
            slot_size: MAX_MESSAGE + wire::HEADER_LEN as u32,
            send_slots: self.recv_slots + 16,
            max_one_sided: self.max_one_sided,
            max_outstanding: 1 << 20,
            regions: self.regions.clone(),
            shared_receive: false,
            rendezvous_min: 0,
        }
    }
}

/// A forged answer to the next connection request, instead of the
/// target's (a peer that is not the target, or misbehaves).
#[derive(Debug, Clone)]
pub enum Forged {
    /// Accept with this private data (no target session behind it).
    Accept(Vec<u8>),
    /// Refuse with this private data.
    Reject(Vec<u8>),
}

/// One side: its session (the target's appears with the first Hello), its
/// device, its memory, and everything it emitted.
pub struct End {
    /// The session (`None`: a target that has not seen a Hello).
    pub session: Option<Session>,
    /// This endpoint's incarnation.
    pub incarnation: Incarnation,
    /// Its one device.
    pub device: DeviceInfo,
    /// Whether the device is present.
    pub device_present: bool,
    /// The epoch of the transport the driver holds (being made or up).
    transport: Option<Epoch>,
    /// Registered memory, by region (the same bytes on every device).
    pub memory: BTreeMap<RegionId, Vec<u8>>,
    /// Every completion, in order.
    pub completions: Vec<Completion>,
    /// Every delivered message, in order.
    pub deliveries: Vec<(Seq, Vec<u8>)>,
    /// Every event, in order.
    pub events: Vec<SessionEvent>,
    /// Every action performed, in order.
    pub actions: Vec<Action>,
}

/// The connection between the two transports of one epoch each.
#[derive(Debug, Clone, Copy)]
struct Link {
    ini: Epoch,
    /// `None`: accepted by a forged answer, nobody behind it.
    tgt: Option<Epoch>,
}

impl Link {
    fn epoch(&self, who: Who) -> Option<Epoch> {
        match who {
            Who::Ini => Some(self.ini),
            Who::Tgt => self.tgt,
        }
    }
}

#[derive(Debug)]
enum Wr {
    Send(Vec<u8>),
    OneSided {
        kind: OneSided,
        local: LocalRange,
        remote: RemoteAddr,
    },
}

#[derive(Debug)]
struct Ack {
    epoch: Epoch,
    op: Option<OpId>,
    status: WcStatus,
    land: Option<(LocalRange, Vec<u8>)>,
}

/// Two sessions wired to each other (see the module docs).
pub struct Pair {
    /// The fake clock.
    pub now: Timestamp,
    /// How the pair was built.
    pub setup: Setup,
    ends: [End; 2],
    link: Option<Link>,
    /// Work requests posted, per sender, not yet executed.
    requests: [VecDeque<(Option<OpId>, Wr)>; 2],
    /// RC acknowledgements not yet reported, per requester.
    acks: [VecDeque<Ack>; 2],
    /// CM `DISCONNECTED` events not yet reported.
    cm: VecDeque<(Who, Epoch)>,
    /// Connection requests on their way to the target (initiator epoch,
    /// private data).
    connect_requests: VecDeque<(Epoch, Vec<u8>)>,
    /// Request tokens given to the target, with the initiator's epoch
    /// (`None`: a request the test made with [`Pair::knock`]).
    tokens: BTreeMap<u64, Option<Epoch>>,
    /// The target's answers to requests the test made.
    answers: Vec<Action>,
    next_token: u64,
    /// Whether the target's application listens (false: the peer's CM
    /// refuses requests with no private data).
    pub listening: bool,
    /// Hold CM `DISCONNECTED` events back (they are reported once this is
    /// false again): a peer's CM that reports a disconnect late, after a
    /// connection request made later.
    pub hold_cm: bool,
    /// Answer the next request with this instead of the target.
    pub forged: Option<Forged>,
    /// A request to the target while its device is away fails at once as
    /// `Unreachable` (its host refuses, as on the TCP soft fabric) instead
    /// of getting no answer.
    pub absent_unreachable: bool,
    /// Every connection request the initiator sent (its private data).
    pub requests_seen: Vec<Vec<u8>>,
    /// One-sided requests posted with an rkey that is not the peer's key of
    /// the link's epoch.
    stale_keys: Vec<(Who, OpId, RemoteAddr)>,
}

fn device(name: &str, addr: &str, index: u32) -> DeviceInfo {
    DeviceInfo {
        id: DeviceId {
            name: name.into(),
            index,
            generation: 1,
        },
        node_guid: Guid(0x1000 + u64::from(index)),
        addrs: vec![IpNet {
            addr: addr.parse().expect("address"),
            prefix: 24,
        }],
        netdev: None,
        port_state: PortState::Active,
    }
}

/// Where `who` registered `region` (the same address on every device).
pub fn region_addr(who: Who, region: RegionId) -> u64 {
    (who.ix() as u64 + 1) * 0x1000_0000 + u64::from(region.0) * 0x10_0000
}

/// The rkey of `who`'s registration of `region` on the transport of `epoch`.
pub fn rkey(who: Who, epoch: Epoch, region: RegionId) -> u32 {
    ((who.ix() as u32 + 1) << 28) | ((epoch.0 & 0xf_ffff) << 8) | (region.0 & 0xff)
}

/// A token for the peer's region at `offset`.
pub fn token(offset: u64) -> BufferToken {
    BufferToken {
        region: REGION,
        offset,
    }
}

/// `len` bytes of the local region at `offset`.
pub fn local(offset: u64, len: u32) -> LocalRange {
    LocalRange {
        region: REGION,
        offset,
        len,
    }
}

impl Pair {
    /// A pair whose initiator has not connected yet (target: no session).
    pub fn new(setup: Setup) -> Pair {
        let end = |who: Who, dev: DeviceInfo| End {
            session: None,
            incarnation: Incarnation(0x1c0 + who.ix() as u64),
            device: dev,
            device_present: true,
            transport: None,
            memory: setup
                .regions
                .iter()
                .map(|r| (r.id, vec![0; r.len as usize]))
                .collect(),
            completions: Vec::new(),
            deliveries: Vec::new(),
            events: Vec::new(),
            actions: Vec::new(),
        };
        let mut ini = end(Who::Ini, device("ini0", "10.0.0.1", 0));
        let tgt = end(Who::Tgt, device("tgt0", "10.0.0.2", 1));
        let cfg = SessionConfig {
            role: Role::Initiator,
            id: SESSION,
            incarnation: ini.incarnation,
            paths: vec![Path {
                local: Some("10.0.0.1".parse().expect("address")),
                peer: "10.0.0.2:7471".parse().expect("address"),
            }],
            policy: setup.policy.clone(),
            spec: setup.spec(),
            seed: 7,
            connect_data: setup.connect_data,
        };
        let mut s = Session::new(cfg, T0).expect("valid setup");
        s.set_devices(vec![ini.device.clone()], T0);
        ini.session = Some(s);
        Pair {
            now: T0,
            setup,
            ends: [ini, tgt],
            link: None,
            requests: [VecDeque::new(), VecDeque::new()],
            acks: [VecDeque::new(), VecDeque::new()],
            cm: VecDeque::new(),
            hold_cm: false,
            connect_requests: VecDeque::new(),
            tokens: BTreeMap::new(),
            answers: Vec::new(),
            next_token: 1,
            listening: true,
            forged: None,
            absent_unreachable: false,
            requests_seen: Vec::new(),
            stale_keys: Vec::new(),
        }
    }

    /// A pair connected and established on both sides (events so far kept).
    pub fn connected(setup: Setup) -> Pair {
        let mut p = Pair::new(setup);
        p.connect();
        p.settle();
        assert_eq!(p.state(Who::Ini), State::Established, "initiator");
        assert_eq!(p.state(Who::Tgt), State::Established, "target");
        p
    }

    // ---------------------------------------------------------------
    // access
    // ---------------------------------------------------------------

    /// One side.
    pub fn end(&self, who: Who) -> &End {
        &self.ends[who.ix()]
    }

    /// One side, mutably.
    pub fn end_mut(&mut self, who: Who) -> &mut End {
        &mut self.ends[who.ix()]
    }

    /// A side's session.
    pub fn session(&mut self, who: Who) -> &mut Session {
        self.ends[who.ix()]
            .session
            .as_mut()
            .unwrap_or_else(|| panic!("{who:?} has no session"))
    }

    /// A side's state.
    pub fn state(&self, who: Who) -> State {
        self.end(who)
            .session
            .as_ref()
            .unwrap_or_else(|| panic!("{who:?} has no session"))
            .state()
    }

    /// The transitions a side went through, in order.
    pub fn transitions(&self, who: Who) -> Vec<Transition> {
        self.end(who)
            .events
            .iter()
            .filter_map(|e| match e {
                SessionEvent::Transition(t) => Some(t.clone()),
                _ => None,
            })
            .collect()
    }

    /// The last transition `from -> to` of a side (panics if none).
    pub fn transition(&self, who: Who, from: State, to: State) -> Transition {
        let all = self.transitions(who);
        all.iter()
            .rev()
            .find(|t| t.from == from && t.to == to)
            .cloned()
            .unwrap_or_else(|| {
                let seen: Vec<String> = all
                    .iter()
                    .map(|t| format!("{} -> {} ({})", t.from, t.to, t.cause))
                    .collect();
                panic!("{who:?} never went {from} -> {to}; it went {seen:#?}")
            })
    }

    /// Whether a side emitted an event `pred` matches.
    pub fn emitted(&self, who: Who, pred: impl Fn(&SessionEvent) -> bool) -> bool {
        self.end(who).events.iter().any(pred)
    }

    /// The one completion of `op` at `who` (panics unless exactly one).
    pub fn outcome(&self, who: Who, op: OpId) -> Outcome {
        let cs: Vec<&Completion> = self
            .end(who)
            .completions
            .iter()
            .filter(|c| c.op == op)
            .collect();
        assert_eq!(cs.len(), 1, "{who:?} {op}: completions {cs:?}");
        cs[0].outcome
    }

    /// Whether `op` has completed at `who`.
    pub fn completed(&self, who: Who, op: OpId) -> bool {
        self.end(who).completions.iter().any(|c| c.op == op)
    }

    /// The payloads `who` delivered, in order.
    pub fn delivered(&self, who: Who) -> Vec<Vec<u8>> {
        self.end(who)
            .deliveries
            .iter()
            .map(|(_, b)| b.clone())
            .collect()
    }

    /// The rkeys of the one-sided requests `who` posted, in order.
    pub fn posted_rkeys(&self, who: Who) -> Vec<(OpId, u32)> {
        self.end(who)
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::OneSided { op, remote, .. } => Some((*op, remote.rkey)),
                _ => None,
            })
            .collect()
    }

    /// The sequence numbers of the data messages `who` posted on the
    /// transport of `epoch`, in order.
    pub fn data_seqs(&self, who: Who, epoch: Epoch) -> Vec<u64> {
        self.end(who)
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Send {
                    epoch: e,
                    op: Some(_),
                    bytes,
                } if *e == epoch => Some(wire::decode_message(bytes).expect("valid").0.seq.0),
                _ => None,
            })
            .collect()
    }

    /// The bytes of the data message `who` posted with sequence `seq`
    /// (the first time).
    pub fn sent_message(&self, who: Who, seq: u64) -> Vec<u8> {
        self.end(who)
            .actions
            .iter()
            .find_map(|a| match a {
                Action::Send {
                    op: Some(_), bytes, ..
                } if wire::decode_message(bytes).expect("valid").0.seq == Seq(seq) => {
                    Some(bytes.clone())
                }
                _ => None,
            })
            .expect("sent")
    }

    /// The epoch of a side's transport as the driver holds it.
    pub fn transport(&self, who: Who) -> Option<Epoch> {
        self.end(who).transport
    }

    /// The secret the target issued (to forge or sign handshakes).
    pub fn secret(&self) -> relink_core::auth::SessionSecret {
        relink_core::auth::SessionSecret::from_bytes(SECRET)
    }

    /// Bytes of a side's region.
    pub fn memory(&self, who: Who) -> &[u8] {
        &self.end(who).memory[&REGION]
    }

    /// Write bytes into a side's region.
    pub fn poke(&mut self, who: Who, offset: usize, bytes: &[u8]) {
        let m = self.end_mut(who).memory.get_mut(&REGION).expect("region");
        m[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    /// The 8-byte word of a side's region at `offset`.
    pub fn word(&self, who: Who, offset: usize) -> u64 {
        let m = self.memory(who);
        u64::from_le_bytes(m[offset..offset + 8].try_into().expect("8 bytes"))
    }

    // ---------------------------------------------------------------
    // commands
    // ---------------------------------------------------------------

    /// The initiator connects (nothing runs yet).
    pub fn connect(&mut self) {
        let now = self.now;
        self.session(Who::Ini).connect(now).expect("connect");
    }

    /// Submit an operation at `who` (nothing runs yet).
    pub fn submit(&mut self, who: Who, kind: OpKind) -> OpId {
        let now = self.now;
        let op = self.session(who).submit(kind, now).expect("submit");
        self.collect(who);
        op
    }

    /// Submit a message.
    pub fn send(&mut self, who: Who, payload: &[u8]) -> OpId {
        self.submit(
            who,
            OpKind::Message {
                payload: payload.to_vec(),
            },
        )
    }

    /// The application resumes a held session at `who` (`path`: the path
    /// it names), nothing runs yet.
    pub fn resume(&mut self, who: Who, path: Option<usize>) -> Result<(), SessionError> {
        let now = self.now;
        let r = self.session(who).resume(path, now);
        self.collect(who);
        r
    }

    /// The application suspends `who`'s session (nothing runs yet).
    pub fn suspend(&mut self, who: Who) -> Result<(), SessionError> {
        let now = self.now;
        let r = self.session(who).suspend(now);
        self.collect(who);
        r
    }

    /// `who`'s session takes `policy` (nothing runs yet).
    pub fn set_policy(&mut self, who: Who, policy: Policy) -> Result<(), PolicyError> {
        let now = self.now;
        let r = self.session(who).set_policy(policy, now);
        self.collect(who);
        r
    }

    /// Admin close of one side.
    pub fn close(&mut self, who: Who) {
        let now = self.now;
        self.session(who).close(now);
        self.collect(who);
    }

    /// Graceful close of one side: pending operations may finish within
    /// `timeout` (nothing runs yet).
    pub fn close_gracefully(&mut self, who: Who, timeout: Duration) {
        let now = self.now;
        self.session(who).close_gracefully(now + timeout, now);
        self.collect(who);
    }

    // ---------------------------------------------------------------
    // faults
    // ---------------------------------------------------------------

    fn device_event(&mut self, who: Who, kind: DeviceEventKind) {
        let now = self.now;
        let ev = DeviceEvent {
            kind,
            device: self.end(who).device.clone(),
        };
        if let Some(s) = self.end_mut(who).session.as_mut() {
            s.handle_device_event(&ev, now);
        }
        self.collect(who);
    }

    /// `who`'s device is removed: its transport carries nothing any more
    /// (in-flight requests and acks are lost, the peer's CM reports
    /// `DISCONNECTED`) and its session gets the `Removed` event.
    pub fn remove_device(&mut self, who: Who) {
        self.end_mut(who).device_present = false;
        if let Some(e) = self.end(who).transport {
            self.cut(who, e);
        }
        if who == Who::Tgt {
            self.connect_requests.clear();
        }
        self.device_event(who, DeviceEventKind::Removed);
    }

    /// `who`'s device is back: a new registration (generation) with the
    /// same address; the session gets the `Added` event.
    pub fn add_device(&mut self, who: Who) {
        let e = self.end_mut(who);
        e.device.id.generation += 1;
        e.device_present = true;
        self.device_event(who, DeviceEventKind::Added);
    }

    /// `who`'s device is reset: `Fatal` (the transport dies), then it comes
    /// back as a new registration.
    pub fn reset_device(&mut self, who: Who) {
        if let Some(e) = self.end(who).transport {
            self.cut(who, e);
        }
        self.device_event(who, DeviceEventKind::Fatal);
        self.add_device(who);
    }

    /// The link dies without a device event at either side (a cable, a
    /// switch): nobody is told; keepalives or sends must find out.
    pub fn break_link(&mut self) {
        self.link = None;
        self.requests.iter_mut().for_each(VecDeque::clear);
        self.acks.iter_mut().for_each(VecDeque::clear);
    }

    /// `who`'s driver reports the loss of its current transport with
    /// `cause` (a CM event, a completion error).
    pub fn transport_down(&mut self, who: Who, cause: DownCause) {
        let now = self.now;
        let e = self.end(who).transport.expect("a transport");
        self.cut(who, e);
        self.session(who).handle_transport_down(e, cause, now);
        self.collect(who);
    }

    /// `bytes` arrive at `to` on its current transport (a message the
    /// link delivers twice, say).
    pub fn inject(&mut self, to: Who, bytes: &[u8]) {
        let now = self.now;
        let e = self.end(to).transport.expect("a transport");
        self.session(to).handle_received(e, bytes, now);
        self.collect(to);
    }

    /// A connection request with `data` from someone other than the pair's
    /// initiator reaches the target; returns the target's answer
    /// (`Accept` or `Reject`).
    pub fn knock(&mut self, data: Vec<u8>) -> Action {
        self.request(None, data);
        self.pump();
        self.answers.pop().expect("the target answered")
    }

    /// The target process restarts: its session is gone (no teardown: the
    /// process died) and it comes back with a new incarnation.
    pub fn restart_target(&mut self) {
        if let Some(e) = self.end(Who::Tgt).transport {
            self.cut(Who::Tgt, e);
        }
        let t = self.end_mut(Who::Tgt);
        t.session = None;
        t.transport = None;
        t.incarnation = Incarnation(t.incarnation.0 + 0x100);
        self.tokens.clear();
    }

    /// Cut the link `who`'s transport of `epoch` is on: in-flight work is
    /// lost; the peer's CM reports `DISCONNECTED` if the peer holds it.
    fn cut(&mut self, who: Who, epoch: Epoch) {
        let Some(link) = self.link else { return };
        if link.epoch(who) != Some(epoch) {
            return;
        }
        self.break_link();
        let peer = who.peer();
        if let Some(pe) = link.epoch(peer) {
            if self.end(peer).transport == Some(pe) {
                self.cm.push_back((peer, pe));
            }
        }
    }
}
