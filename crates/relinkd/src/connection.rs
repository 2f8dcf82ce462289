//! One initiator connection on the node thread: its engine, the NBD
//! requests under way ([`Bridge`]), its IDENTIFY, its new sessions after
//! one ended ([`Retry`]) and what the control plane reports of it
//! (outages, bytes).

use std::collections::VecDeque;
use std::time::Duration;

use relink::{Cause, PeerLostReason, RefuseReason, SessionEvent, State, Timestamp};
use relink_block::{
    BlockOp, InitiatorConfig, InitiatorEngine, Node, Path, Policy, Tag, VolumeInfo,
};
use relink_nbd::BlockRequest;

use crate::bridge::Bridge;
use crate::config::ConnectConfig;
use crate::control::protocol::{ConnectionStatus, RecoveryPhases, SessionStatus};
use crate::node_loop::StartError;

/// How many outages a connection remembers for `status`.
const OUTAGES: usize = 8;

/// How often an outage under way is summed up in the log (its attempts
/// are logged at debug).
pub(crate) const OUTAGE_NOTE: Duration = Duration::from_secs(10);

/// Whether `event` is one attempt of an outage (an attempt begins or
/// fails, and the transitions between `Recovering` and `Reconnecting`
/// that come with it): logged at debug, summed up every
/// [`OUTAGE_NOTE`] and at the end.
pub(crate) fn per_attempt(event: &SessionEvent) -> bool {
    match event {
        SessionEvent::Recovering { .. } | SessionEvent::AttemptFailed { .. } => true,
        SessionEvent::Transition(t) => {
            matches!(t.cause, Cause::Attempt(_) | Cause::AttemptFailed(_))
                && matches!(t.to, State::Recovering | State::Reconnecting)
        }
        _ => false,
    }
}

/// The pause before the first new session after the one serving ended
/// (or after a session that served briefly, see [`RETRY_RESET`]); each
/// new session that does not serve doubles it.
pub(crate) const RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest pause between new sessions: whatever the target answers,
/// at most one new session per this long once the pauses have grown.
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(5);
/// A session that served this long starts the pauses over from
/// [`RETRY_FIRST`] when it ends; one that served less goes on from the
/// pause before it (a target that answers IDENTIFY and then drops every
/// session is not reconnected faster than one that refuses them).
pub(crate) const RETRY_RESET: Duration = Duration::from_secs(10);

/// What ended a session of the connection, as its events said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The target refused it for good (`ShuttingDown`, ...).
    Refused(RefuseReason),
    /// The target is another process now: it restarted.
    Restarted,
    /// The give-up deadline passed: no connection could be made or
    /// remade (`first_connect_tmo`, `give_up_secs`).
    GaveUp,
    /// It was closed: by the target's goodbye, or here.
    Closed,
}

impl Ending {
    fn of(event: &SessionEvent) -> Option<Ending> {
        Some(match event {
            SessionEvent::Refused {
                reason,
                retrying: false,
            } => Ending::Refused(*reason),
            SessionEvent::PeerLost {
                reason: PeerLostReason::Refused(reason),
            } => Ending::Refused(*reason),
            SessionEvent::PeerLost { .. } => Ending::Restarted,
            SessionEvent::GaveUp => Ending::GaveUp,
            SessionEvent::Disconnected => Ending::Closed,
            _ => return None,
        })
    }

    fn describe(self) -> String {
        match self {
            Ending::Refused(RefuseReason::UnknownSession) => {
                "the target no longer knows it (it closed it, or restarted)".into()
            }
            Ending::Refused(r) => format!("the target refused it: {r}"),
            Ending::Restarted => "the target restarted".into(),
            Ending::GaveUp => "the give-up deadline passed".into(),
            Ending::Closed => "closed by the target".into(),
        }
    }
}

/// Why a new session (after the one serving ended) does not serve: said
/// once per change, not once per session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Trouble {
    /// The target refuses new sessions with this reason.
    Refused(RefuseReason),
    /// The target closes new sessions before they identify the volume.
    Closed,
    /// The target restarted while the session was being made.
    Restarted,
    /// No connection could be made before `first_connect_tmo`.
    Unreachable,
    /// The target serves another volume.
    OtherVolume {
        /// What the target serves now.
        now: VolumeInfo,
        /// What was served (announced to the NBD clients).
        served: VolumeInfo,
    },
    /// IDENTIFY failed or had an answer that is not a volume.
    Identify(String),
    /// The session cannot be made here (its options, memory).
    Connect(String),
}

impl Trouble {
    /// The trouble of a new session that ended before it served.
    pub(crate) fn of(ending: Option<Ending>) -> Trouble {
        match ending {
            // The target does not know the session it accepted: it closed
            // it (lost, the session tried to resume and was told so).
            Some(Ending::Refused(RefuseReason::UnknownSession)) => Trouble::Closed,
            Some(Ending::Refused(r)) => Trouble::Refused(r),
            Some(Ending::Restarted) => Trouble::Restarted,
            Some(Ending::GaveUp) => Trouble::Unreachable,
            Some(Ending::Closed) | None => Trouble::Closed,
        }
    }

    /// Whether it is an error of configuration or of this host (ERROR),
    /// not a state of the target that passes (WARN).
    fn is_error(&self) -> bool {
        matches!(self, Trouble::OtherVolume { .. } | Trouble::Connect(_))
    }

    fn describe(&self) -> String {
        let volume = |v: &VolumeInfo| {
            format!(
                "{} bytes{}",
                v.size,
                if v.read_only { " read-only" } else { "" }
            )
        };
        match self {
            Trouble::Refused(r) => format!("the target refuses new sessions: {r}"),
            Trouble::Closed => "the target closes new sessions before they identify the volume \
                (its export's allow list may leave this host out, or it is stopping)"
                .into(),
            Trouble::Restarted => "the target restarted while a new session was made".into(),
            Trouble::Unreachable => "no new session reached the target before its first-connect \
                deadline"
                .into(),
            Trouble::OtherVolume { now, served } => format!(
                "the target serves another volume: {} where {} were served",
                volume(now),
                volume(served)
            ),
            Trouble::Identify(e) => format!("the target did not identify its volume: {e}"),
            Trouble::Connect(e) => format!("a new session cannot be made: {e}"),
        }
    }
}

/// The new sessions of a connection whose session ended after its volume
/// was announced: when the next may be made, with a pause that starts at
/// [`RETRY_FIRST`] and doubles up to [`RETRY_MAX`] while they fail, and
/// what was said of them.
#[derive(Debug, Clone)]
pub(crate) struct Retry {
    /// The pause before the next new session after this one fails.
    pause: Duration,
    /// When the next new session is made: `Some` from the end of a session
    /// (or a failed one) until then.
    pub(crate) due: Option<Timestamp>,
    /// New sessions made since the connection last served.
    attempts: u32,
    /// When the connection stopped serving.
    down_since: Option<Timestamp>,
    /// The trouble said last (`None` while serving, or before any).
    said: Option<Trouble>,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            pause: RETRY_FIRST,
            due: None,
            attempts: 0,
            down_since: None,
            said: None,
        }
    }
}

impl Retry {
    /// The next new session after the pause; the pause doubles.
    fn schedule(&mut self, now: Timestamp) {
        self.due = Some(now + self.pause);
        self.pause = (self.pause * 2).min(RETRY_MAX);
    }
}

/// One initiator connection.
pub(crate) struct Conn {
    /// Its id for NBD requests (never reused in the process).
    pub(crate) id: u64,
    pub(crate) config: ConnectConfig,
    /// The live policy (kept for the sessions of later reconnections).
    pub(crate) policy: Policy,
    /// The volume the NBD clients were told of (after the first IDENTIFY).
    pub(crate) announced: Option<VolumeInfo>,
    pub(crate) engine: InitiatorEngine,
    pub(crate) bridge: Bridge,
    /// IDENTIFY's tag until it completed.
    pub(crate) identify: Option<Tag>,
    /// The longest command (the smaller of both sides' `max_io`).
    pub(crate) max_io: u32,
    /// When the session's IDENTIFY showed the volume served (the first
    /// one, or the same again): `None` until then.
    serving_since: Option<Timestamp>,
    /// What ended the session, once its events said.
    ending: Option<Ending>,
    /// New sessions after an end, carried from session to session.
    pub(crate) retry: Retry,
    /// When the outage under way began.
    down_since: Option<Timestamp>,
    /// The last outages' lengths.
    outages: VecDeque<Duration>,
    /// Attempts of the outage under way, the last failure's reason, and
    /// when it was last summed up in the log.
    outage_attempts: u32,
    last_failure: Option<String>,
    outage_noted: Option<Timestamp>,
    /// NBD requests that came while no session served, held for the next
    /// one that serves the same volume ([`Conn::holding`]).
    pub(crate) waiting: VecDeque<BlockRequest>,
    /// Held I/O was failed in this outage (the give-up deadline passed, or
    /// the target serves another volume): requests fail at once until a
    /// session serves again.
    hold_over: bool,
}

impl Conn {
    /// The policy of a connection's configuration: relink's default, with
    /// its `give_up_secs` and `fast_fail_secs`.
    pub(crate) fn initial_policy(c: &ConnectConfig) -> Result<Policy, String> {
        let mut b = Policy::builder();
        if let Some(give_up) = c.give_up {
            b = b.ctrl_loss_tmo(Some(give_up));
        }
        if let Some(fast_fail) = c.fast_fail {
            b = b.fast_io_fail_tmo(Some(fast_fail));
        }
        b.build()
            .map_err(|e| crate::commands::policy_error(&e.to_string()))
    }

    /// Connect a session for `c` under `policy` and send its IDENTIFY.
    pub(crate) fn connect(
        node: &mut Node,
        id: u64,
        c: &ConnectConfig,
        policy: Policy,
    ) -> Result<Conn, StartError> {
        let fail = |reason: String| StartError::Connect {
            name: c.name.clone(),
            reason,
        };
        let config = InitiatorConfig::default()
            .queue_depth(c.queue_depth)
            .max_io(c.max_io)
            .policy(policy.clone());
        let max_io = config.max_io;
        let paths = c
            .targets
            .iter()
            .map(|&peer| Path { local: None, peer })
            .collect();
        let mut engine =
            InitiatorEngine::connect(node, paths, config).map_err(|e| fail(e.to_string()))?;
        let identify = engine
            .submit(node, BlockOp::Identify)
            .map_err(|e| fail(e.to_string()))?;
        Ok(Conn {
            id,
            config: c.clone(),
            policy,
            announced: None,
            engine,
            bridge: Bridge::default(),
            identify: Some(identify),
            max_io,
            serving_since: None,
            ending: None,
            retry: Retry::default(),
            down_since: None,
            outages: VecDeque::new(),
            outage_attempts: 0,
            last_failure: None,
            outage_noted: None,
            waiting: VecDeque::new(),
            hold_over: false,
        })
    }

    /// The connection's name.
    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// Whether NBD requests go to the session: its IDENTIFY showed the
    /// volume, it lives, and no new session is awaited.
    pub(crate) fn serving(&self) -> bool {
        self.serving_since.is_some() && self.retry.due.is_none() && self.engine.ended().is_none()
    }

    /// Whether the session is a new one after an end (the volume was
    /// announced) that has not shown the same volume yet.
    pub(crate) fn is_retry(&self) -> bool {
        self.announced.is_some() && self.serving_since.is_none()
    }

    /// Whether NBD requests that come now are held for the next session
    /// (rather than failed): the volume was served, no session serves it
    /// now, and neither the give-up deadline (`give_up_secs`, counted
    /// from the end of the session that served) passed nor the target
    /// serves another volume.
    pub(crate) fn holding(&self) -> bool {
        self.announced.is_some() && !self.serving() && !self.hold_over
    }

    /// Whether the held I/O must fail now: held, and the give-up deadline
    /// passed since the outage that ended the session began (or since its
    /// end, if no loss came first).
    pub(crate) fn hold_expired(&self, now: Timestamp) -> bool {
        let held = self.bridge.held() > 0 || !self.waiting.is_empty();
        let over = match (self.retry.down_since, self.policy.ctrl_loss_tmo) {
            (Some(since), Some(limit)) => now.saturating_since(since) >= limit,
            _ => false,
        };
        held && over && !self.serving()
    }

    /// Fail the held I/O (requests and commands) with `error` and hold
    /// nothing more until a session serves again.
    pub(crate) fn stop_holding(&mut self, error: &relink_nbd::BlockError) {
        self.hold_over = true;
        self.bridge.fail_held(error);
        for req in self.waiting.drain(..) {
            let _ = req.reply.send(Err(error.clone()));
        }
    }

    /// A session serves the volume again after one ended under I/O: the
    /// commands that ended with it and the requests held meanwhile go to
    /// it. `before`: the volume as the ended session's target described
    /// it; `now`: as this one's does (another boot of its host makes the
    /// next FLUSH fail if writes were not flushed).
    pub(crate) fn resume_held(&mut self, node: &mut Node, before: &VolumeInfo, now: &VolumeInfo) {
        let same_boot = before.host_boot != 0 && before.host_boot == now.host_boot;
        self.bridge.target_restarted(same_boot);
        let (parts, requests) = (self.bridge.held(), self.waiting.len());
        self.bridge.reissue(node, &mut self.engine, self.max_io);
        while let Some(req) = self.waiting.pop_front() {
            self.bridge.submit(node, &mut self.engine, self.max_io, req);
        }
        if parts + requests > 0 {
            tracing::info!(
                connect = %self.name(),
                reissued = parts,
                held_requests = requests,
                same_host_boot = same_boot,
                "I/O held across the end of the session goes to the new one: {parts} command(s) sent again, {requests} request(s) that waited"
            );
        }
    }

    /// Whether a new session should be made now (its pause is over).
    pub(crate) fn retry_due(&self, now: Timestamp) -> bool {
        self.retry.due.is_some_and(|due| due <= now)
    }

    /// The session's IDENTIFY showed the volume served (the first, or the
    /// same again): it serves from now on.
    pub(crate) fn served(&mut self, now: Timestamp) {
        self.serving_since = Some(now);
        self.hold_over = false;
        if let Some(since) = self.retry.down_since.take() {
            tracing::info!(
                connect = %self.name(),
                sessions = self.retry.attempts,
                down_secs = now.saturating_since(since).as_secs_f64(),
                "serving again: a new session identified the same volume"
            );
            println!("connect {} reconnected", self.name());
        }
        self.retry.attempts = 0;
        self.retry.said = None;
    }

    /// Take note that the connection's session ended (`serving`: it
    /// served the volume) and plan the next new session; say so once per
    /// change. Returns false if it was noted already.
    pub(crate) fn ended(&mut self, now: Timestamp) -> bool {
        if self.retry.due.is_some() {
            return false;
        }
        match self.serving_since.take() {
            Some(since) => {
                // It served: the connection goes down.
                if now.saturating_since(since) >= RETRY_RESET {
                    self.retry.pause = RETRY_FIRST;
                }
                // Down since the outage that ended it began, if one did.
                self.retry.down_since = Some(self.down_since.map_or(now, |d| d.min(now)));
                let why = self.ending.map_or_else(|| "ended".into(), Ending::describe);
                if self.ending == Some(Ending::GaveUp) {
                    // The deadline for holding passed with the session's.
                    self.stop_holding(&relink_nbd::BlockError::ShuttingDown);
                    tracing::warn!(
                        connect = %self.name(),
                        %why,
                        "the session ended: NBD requests fail (ESHUTDOWN) until a new session to the target identifies the same volume; reconnecting"
                    );
                } else {
                    tracing::warn!(
                        connect = %self.name(),
                        %why,
                        give_up_secs = self.policy.ctrl_loss_tmo.map(|d| d.as_secs()),
                        "the session ended: NBD requests wait for a new session to the target that identifies the same volume (at most give_up_secs from the outage's start), and the commands under way go to it again; reconnecting"
                    );
                }
                self.retry.schedule(now);
            }
            None => self.failed(now, Trouble::of(self.ending)),
        }
        true
    }

    /// A new session will not serve (`trouble`): close it if it lives and
    /// plan the next one after the pause. The trouble is said when it
    /// differs from the one said last (at ERROR for another volume or a
    /// local failure, WARN otherwise); the same again only at DEBUG.
    pub(crate) fn failed(&mut self, now: Timestamp, trouble: Trouble) {
        self.serving_since = None;
        self.retry.down_since.get_or_insert(now);
        let pause = self.retry.pause;
        if self.retry.said.as_ref() == Some(&trouble) {
            tracing::debug!(
                connect = %self.name(),
                sessions = self.retry.attempts,
                next_in_ms = pause.as_millis() as u64,
                "{}", trouble.describe()
            );
        } else {
            let text = trouble.describe();
            let io = if self.holding() {
                "wait (until give_up_secs after the end)"
            } else {
                "fail (ESHUTDOWN)"
            };
            if trouble.is_error() {
                tracing::error!(
                    connect = %self.name(),
                    "{text}; NBD requests {io} meanwhile; new sessions at most every {} s",
                    RETRY_MAX.as_secs()
                );
            } else {
                tracing::warn!(
                    connect = %self.name(),
                    "{text}; NBD requests {io} meanwhile; new sessions at most every {} s",
                    RETRY_MAX.as_secs()
                );
            }
            self.retry.said = Some(trouble);
        }
        self.retry.schedule(now);
    }

    /// The next new session was made: it takes over `old`'s announced
    /// volume, its retry state and the I/O it holds.
    pub(crate) fn take_over(&mut self, old: &mut Conn) {
        self.announced = old.announced;
        self.bridge = std::mem::take(&mut old.bridge);
        self.waiting = std::mem::take(&mut old.waiting);
        self.hold_over = old.hold_over;
        self.retry = old.retry.clone();
        self.retry.due = None;
        self.retry.attempts += 1;
    }

    /// Take note of a session event (outages, what ended it).
    pub(crate) fn on_event(&mut self, now: Timestamp, event: &SessionEvent) {
        if self.ending.is_none() {
            self.ending = Ending::of(event);
        }
        match event {
            SessionEvent::DeviceLost { .. } => {
                self.down_since.get_or_insert(now);
                self.outage_noted.get_or_insert(now);
            }
            SessionEvent::Recovering { .. } => self.outage_attempts += 1,
            SessionEvent::AttemptFailed { reason, .. } => {
                self.last_failure = Some(reason.to_string());
            }
            SessionEvent::Resumed { downtime, .. } => {
                if self.outage_attempts > 1 {
                    tracing::info!(
                        connect = %self.name(),
                        attempts = self.outage_attempts,
                        down_secs = downtime.as_secs_f64(),
                        "the session resumed after {} attempts",
                        self.outage_attempts
                    );
                }
                self.down_since = None;
                self.outage_attempts = 0;
                self.last_failure = None;
                self.outage_noted = None;
                if self.outages.len() == OUTAGES {
                    self.outages.pop_front();
                }
                self.outages.push_back(*downtime);
            }
            _ => {}
        }
    }

    /// Sum up the outage under way in the log, every [`OUTAGE_NOTE`].
    pub(crate) fn note_outage(&mut self, now: Timestamp) {
        let (Some(since), Some(noted)) = (self.down_since, self.outage_noted) else {
            return;
        };
        if now.saturating_since(noted) < OUTAGE_NOTE {
            return;
        }
        self.outage_noted = Some(now);
        tracing::info!(
            connect = %self.name(),
            attempts = self.outage_attempts,
            last_failure = self.last_failure.as_deref().unwrap_or("-"),
            "the session is still recovering after {:.1} s ({} attempts; each at debug)",
            now.saturating_since(since).as_secs_f64(),
            self.outage_attempts
        );
    }

    /// What `status` shows of the connection.
    pub(crate) fn status(&self, node: &Node) -> ConnectionStatus {
        let session = session_status(node, self.engine.session());
        // `ready` only while I/O is served now: an outage (the session
        // recovers; I/O waits) or a hold says so.
        let state = match (self.serving(), self.announced.is_some()) {
            (false, false) => "connecting",
            (false, true) => "reconnecting",
            (true, _) if session.state == "Held" => "held",
            (true, _) if session.state == "Established" => "ready",
            (true, _) => "recovering",
        };
        ConnectionStatus {
            name: self.config.name.clone(),
            targets: self.config.targets.clone(),
            state: state.into(),
            session,
            last_outages_secs: self.outages.iter().map(Duration::as_secs_f64).collect(),
            bytes_read: self.bridge.bytes_read(),
            bytes_written: self.bridge.bytes_written(),
            in_flight: self.bridge.in_progress() as u64,
            nbd_socket: self.config.nbd_socket.clone(),
        }
    }
}

/// What `status` shows of one session.
pub(crate) fn session_status(node: &Node, s: relink::SessionHandle) -> SessionStatus {
    let Some(info) = node.session_info(s) else {
        return SessionStatus {
            state: "Gone".into(),
            ..SessionStatus::default()
        };
    };
    let c = info.counters;
    // The counters hold the finished outages; one under way counts too.
    let ongoing = info
        .last_recovery
        .as_ref()
        .filter(|tl| tl.resynced.is_none() && info.state != relink::State::Established)
        .map_or(0, |tl| {
            node.now().saturating_since(tl.lost).as_nanos() as u64
        });
    SessionStatus {
        state: if info.awaiting_decision {
            "Held".into()
        } else {
            format!("{:?}", info.state)
        },
        epoch: u64::from(info.epoch.0),
        attempts: c.attempts,
        recoveries: c.resumes,
        losses: c.losses,
        downtime_secs: (c.downtime_ns + ongoing) as f64 / 1e9,
        replayed: c.replayed,
        planned: c.planned,
        failovers: c.failovers,
        delivered: c.delivered,
        packed: c.packed,
        device: info.device.map(|d| d.id.name),
        last_recovery: info.last_recovery.as_ref().map(phases),
    }
}

/// The phases of `tl` in milliseconds, each from the end of the one before.
fn phases(tl: &relink::RecoveryTimeline) -> RecoveryPhases {
    let mut from = tl.lost;
    let mut step = |end: Option<Timestamp>| {
        end.map(|e| {
            let ms = e.saturating_since(from).as_secs_f64() * 1e3;
            from = e;
            ms
        })
    };
    let mut p = RecoveryPhases {
        // Off the path: the old connection is destroyed while the session
        // recovers (after the loss's poll round), so from the loss.
        released_ms: tl
            .released
            .map(|r| r.saturating_since(tl.lost).as_secs_f64() * 1e3),
        device_ms: step(tl.device_visible),
        attempt_ms: step(tl.attempt),
        addr_ms: step(tl.addr_resolved),
        route_ms: step(tl.route_resolved),
        resources_ms: step(tl.resources),
        connect_ms: step(tl.connected),
        promoted_ms: step(tl.promoted),
        resync_ms: step(tl.resynced),
        first_completion_ms: step(tl.first_completion),
        total_ms: 0.0,
    };
    p.total_ms = from.saturating_since(tl.lost).as_secs_f64() * 1e3;
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_starts_at_100_ms_and_doubles_to_5_s() {
        let mut r = Retry::default();
        let mut now = Timestamp::ZERO;
        let mut pauses = Vec::new();
        for _ in 0..9 {
            r.schedule(now);
            let due = r.due.take().unwrap();
            pauses.push(due.saturating_since(now).as_millis());
            now = due;
        }
        assert_eq!(
            pauses,
            [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000],
            "at most a few new sessions a second, whatever the target answers"
        );
        // In the first 2 s: the sessions at 0.1, 0.3, 0.7 and 1.5 s.
        let mut at = 0;
        let made = pauses
            .iter()
            .take_while(|&&p| {
                at += p;
                at <= 2000
            })
            .count();
        assert_eq!(made, 4);
    }

    #[test]
    fn a_new_session_that_ended_says_what_the_target_did() {
        assert_eq!(
            Trouble::of(Some(Ending::Refused(RefuseReason::ShuttingDown))),
            Trouble::Refused(RefuseReason::ShuttingDown)
        );
        // Accepted, then dropped: the resume is told the session is unknown.
        assert_eq!(
            Trouble::of(Some(Ending::Refused(RefuseReason::UnknownSession))),
            Trouble::Closed
        );
        assert_eq!(Trouble::of(Some(Ending::Closed)), Trouble::Closed);
        assert_eq!(Trouble::of(Some(Ending::GaveUp)), Trouble::Unreachable);
        assert!(Trouble::Refused(RefuseReason::ShuttingDown)
            .describe()
            .starts_with("the target refuses new sessions: shutting down"));
        let v = |size| VolumeInfo {
            size,
            block_size: 512,
            max_io: 131072,
            queue_depth: 32,
            read_only: false,
            host_boot: 1,
        };
        let other = Trouble::OtherVolume {
            now: v(4 << 20),
            served: v(8 << 20),
        };
        assert!(other.is_error());
        assert_eq!(
            other.describe(),
            "the target serves another volume: 4194304 bytes where 8388608 bytes were served"
        );
        assert!(!Trouble::Closed.is_error());
    }
}
