//! One initiator connection on the node thread: its engine, the NBD
//! requests under way ([`Bridge`]), its IDENTIFY and what the control
//! plane reports of it (outages, bytes).

use std::collections::VecDeque;
use std::time::Duration;

use relink::{SessionEvent, Timestamp};
use relink_block::{
    BlockOp, InitiatorConfig, InitiatorEngine, Node, Path, Policy, Tag, VolumeInfo,
};

use crate::bridge::Bridge;
use crate::config::ConnectConfig;
use crate::control::protocol::{ConnectionStatus, RecoveryPhases, SessionStatus};
use crate::node_loop::StartError;

/// How many outages a connection remembers for `status`.
const OUTAGES: usize = 8;

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
    /// When the outage under way began.
    down_since: Option<Timestamp>,
    /// The last outages' lengths.
    outages: VecDeque<Duration>,
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
            down_since: None,
            outages: VecDeque::new(),
        })
    }

    /// The connection's name.
    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// Take note of a session event (outages).
    pub(crate) fn on_event(&mut self, now: Timestamp, event: &SessionEvent) {
        match event {
            SessionEvent::DeviceLost { .. } => {
                self.down_since.get_or_insert(now);
            }
            SessionEvent::Resumed { downtime, .. } => {
                self.down_since = None;
                if self.outages.len() == OUTAGES {
                    self.outages.pop_front();
                }
                self.outages.push_back(*downtime);
            }
            _ => {}
        }
    }

    /// What `status` shows of the connection.
    pub(crate) fn status(&self, node: &Node) -> ConnectionStatus {
        let mut session = session_status(node, self.engine.session());
        if let Some(since) = self.down_since {
            if node.state(self.engine.session()).is_some() {
                let counted = node
                    .counters(self.engine.session())
                    .map_or(0, |c| c.downtime_ns);
                // The counters hold the finished outages; add the one
                // under way.
                session.downtime_secs =
                    (counted as f64 + node.now().saturating_since(since).as_nanos() as f64) / 1e9;
            }
        }
        let state = match (self.identify.is_some(), self.announced.is_some()) {
            (true, false) => "connecting",
            (true, true) => "reconnecting",
            (false, _) => "ready",
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
        downtime_secs: c.downtime_ns as f64 / 1e9,
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
