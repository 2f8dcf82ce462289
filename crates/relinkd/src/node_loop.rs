//! The node thread: it owns the relink [`Node`] and every block engine,
//! takes NBD requests and control commands ([`crate::commands`]) from
//! the tokio side, and sleeps on the node's
//! readiness fd and a wake-up eventfd until the earlier of the node's and
//! the engines' deadlines.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use relink_block::{BlockError, BlockReply, InitiatorEvent, Node, Output, TargetEvent, VolumeInfo};
use relink_nbd::BlockRequest;
use rustix::event::{EventfdFlags, PollFd, PollFlags};

use crate::commands::Admin;
use crate::config::{Config, ConnectConfig, ExportConfig};
use crate::connection::{per_attempt, Conn, Trouble};
use crate::control::protocol::{Command, ControlError, ErrorKind, EventRecord, StatusResult};
pub(crate) use crate::export::Export;

/// How long a stopping daemon lets NBD requests under way finish.
const DRAIN: Duration = Duration::from_secs(30);
/// How long [`Node::shutdown`] may take (the goodbyes).
const SHUTDOWN: Duration = Duration::from_secs(5);

/// Why the daemon did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The soft device registry cannot be opened.
    #[error("backend.soft_dir {dir}: {reason}")]
    Backend {
        /// The directory.
        dir: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// rdma-core cannot start (`kind = "rdma-core"`).
    #[error("backend rdma-core: {reason}")]
    RdmaCore {
        /// Why.
        reason: String,
    },
    /// An export's file cannot be opened.
    #[error("export {name}: file {file}: {reason}")]
    File {
        /// The export.
        name: String,
        /// Its file.
        file: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// An export cannot listen.
    #[error("export {name}: listen {addr}: {reason}")]
    Listen {
        /// The export.
        name: String,
        /// Its address.
        addr: std::net::SocketAddr,
        /// Why.
        reason: String,
    },
    /// A connection cannot be made.
    #[error("connect {name}: {reason}")]
    Connect {
        /// The connection.
        name: String,
        /// Why.
        reason: String,
    },
    /// The wake-up eventfd cannot be made.
    #[error("eventfd: {0}")]
    Wake(std::io::Error),
    /// The node thread cannot be started.
    #[error("node thread: {0}")]
    Thread(std::io::Error),
}

/// A connection's volume became usable (its IDENTIFY completed), or its
/// session ended first.
#[derive(Debug, Clone)]
pub struct Ready {
    /// The connection's id: what [`DaemonHandle::submit`] takes.
    pub id: u64,
    /// The connection's configuration (its name, its NBD sockets).
    pub config: ConnectConfig,
    /// The target's volume, or why there is none.
    pub result: Result<VolumeInfo, String>,
}

/// What the node thread shares with the rest of the process.
pub(crate) struct Control {
    wake: OwnedFd,
    stop: AtomicBool,
}

impl Control {
    fn notify(&self) {
        // A full counter still wakes the reader: the error is moot.
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }
}

/// A handle for the tokio side: hand NBD requests and control commands to
/// the node thread, or stop it.
#[derive(Clone)]
pub struct DaemonHandle {
    control: Arc<Control>,
    requests: mpsc::Sender<(u64, BlockRequest)>,
    admin: mpsc::Sender<Admin>,
}

impl DaemonHandle {
    /// Hand `req` for connection `id` ([`Ready::id`]) to the node thread.
    /// After the thread ended, or once the connection is gone, it is
    /// answered `ESHUTDOWN`.
    pub fn submit(&self, id: u64, req: BlockRequest) {
        if let Err(mpsc::SendError((_, req))) = self.requests.send((id, req)) {
            let _ = req.reply.send(Err(relink_nbd::BlockError::ShuttingDown));
            return;
        }
        self.control.notify();
    }

    fn send_admin(&self, a: Admin) -> bool {
        let sent = self.admin.send(a).is_ok();
        self.control.notify();
        sent
    }

    /// Run a control command on the node thread and wait for its result
    /// (the command's typed result as JSON). `events` and `metrics` are
    /// served by the control socket ([`DaemonHandle::subscribe`],
    /// [`DaemonHandle::status`]), not here.
    ///
    /// # Errors
    /// The command's [`ControlError`]; [`ErrorKind::Failed`] once the node
    /// thread ended.
    pub async fn command(&self, command: Command) -> Result<serde_json::Value, ControlError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if !self.send_admin(Admin::Command(command, tx)) {
            return Err(stopped());
        }
        rx.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// The exports and connections with their sessions.
    ///
    /// # Errors
    /// [`ErrorKind::Failed`] once the node thread ended.
    pub async fn status(&self) -> Result<StatusResult, ControlError> {
        let v = self.command(Command::Status {}).await?;
        serde_json::from_value(v).map_err(|e| ControlError::new(ErrorKind::Failed, e.to_string()))
    }

    /// Every session event and engine event from now on, until the
    /// receiver is dropped.
    #[must_use]
    pub fn subscribe(&self) -> tokio::sync::mpsc::UnboundedReceiver<EventRecord> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.send_admin(Admin::Subscribe(tx));
        rx
    }

    /// Serve another export (the target role) by name.
    ///
    /// # Errors
    /// [`ErrorKind::Exists`] for a name in use, [`ErrorKind::Failed`] if
    /// its file cannot be opened or its address cannot listen.
    pub async fn add_export(&self, export: ExportConfig) -> Result<(), ControlError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if !self.send_admin(Admin::AddExport(export, tx)) {
            return Err(stopped());
        }
        rx.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Stop serving an export: its listener and its sessions close.
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`] for an unknown name.
    pub async fn remove_export(&self, name: &str) -> Result<(), ControlError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if !self.send_admin(Admin::RemoveExport(name.to_string(), tx)) {
            return Err(stopped());
        }
        rx.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Ask the node thread to stop: NBD requests under way finish (for
    /// up to 30 s), new ones are refused `ESHUTDOWN`, the sessions close
    /// with goodbyes and the exports' files are synced.
    pub fn stop(&self) {
        self.control.stop.store(true, Ordering::SeqCst);
        self.control.notify();
    }
}

fn stopped() -> ControlError {
    ControlError::new(ErrorKind::Failed, "relinkd is stopping")
}

/// What the node thread did when it ended.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Sessions that closed with nothing pending at the shutdown.
    pub clean_sessions: usize,
    /// Whether the shutdown ran out of time.
    pub timed_out: bool,
    /// Exports whose file could not be synced, with why.
    pub sync_failures: Vec<String>,
}

/// The running node thread.
pub struct Daemon {
    handle: DaemonHandle,
    thread: std::thread::JoinHandle<Summary>,
    ready: tokio::sync::mpsc::UnboundedReceiver<Ready>,
}

impl Daemon {
    /// Open the backend, listen for every export and connect every
    /// connection (their IDENTIFY goes out at once), then run the node
    /// thread.
    ///
    /// # Errors
    /// [`StartError`] naming the export or connection that cannot start.
    pub fn start(config: &Config) -> Result<Daemon, StartError> {
        let mut node = Node::new(crate::backend::open(&config.backend)?);
        let mut targets = Vec::new();
        for e in &config.exports {
            targets.push(Export::listen(&mut node, e)?);
        }
        let mut connects = Vec::new();
        for (id, c) in (0u64..).zip(&config.connects) {
            let policy = Conn::initial_policy(c).map_err(|reason| StartError::Connect {
                name: c.name.clone(),
                reason,
            })?;
            connects.push(Conn::connect(&mut node, id, c, policy)?);
        }
        let wake = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
            .map_err(|e| StartError::Wake(e.into()))?;
        let control = Arc::new(Control {
            wake,
            stop: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel();
        let (admin_tx, admin_rx) = mpsc::channel();
        let (ready_tx, ready) = tokio::sync::mpsc::unbounded_channel();
        let run = Run {
            node,
            targets,
            next_id: connects.len() as u64,
            connects,
            control: control.clone(),
            requests: rx,
            admin: admin_rx,
            ready: ready_tx,
            subscribers: Vec::new(),
        };
        let thread = std::thread::Builder::new()
            .name("relinkd-node".into())
            .spawn(move || run.run())
            .map_err(StartError::Thread)?;
        Ok(Daemon {
            handle: DaemonHandle {
                control,
                requests: tx,
                admin: admin_tx,
            },
            thread,
            ready,
        })
    }

    /// The handle for the tokio side.
    #[must_use]
    pub fn handle(&self) -> DaemonHandle {
        self.handle.clone()
    }

    /// The next connection that became ready (or failed to); `None` once
    /// the node thread ended.
    pub async fn next_ready(&mut self) -> Option<Ready> {
        self.ready.recv().await
    }

    /// Wait for the node thread to end (after [`DaemonHandle::stop`]).
    #[must_use]
    pub fn join(self) -> Summary {
        self.thread.join().unwrap_or_default()
    }
}

/// An event for the `events --follow` clients ([`Run::publish`]).
pub(crate) struct Published {
    /// `connect NAME`, `export NAME` or `node`.
    pub(crate) source: String,
    /// `session` or `engine`.
    pub(crate) kind: &'static str,
    pub(crate) session: Option<u64>,
    /// The event's stable name.
    pub(crate) name: &'static str,
    /// The event in plain words.
    pub(crate) event: String,
}

pub(crate) struct Run {
    pub(crate) node: Node,
    pub(crate) targets: Vec<Export>,
    pub(crate) connects: Vec<Conn>,
    /// The id of the next connection.
    pub(crate) next_id: u64,
    control: Arc<Control>,
    requests: mpsc::Receiver<(u64, BlockRequest)>,
    admin: mpsc::Receiver<Admin>,
    ready: tokio::sync::mpsc::UnboundedSender<Ready>,
    pub(crate) subscribers: Vec<tokio::sync::mpsc::UnboundedSender<EventRecord>>,
}
impl Run {
    fn route(&mut self, mut out: Output) {
        if let Output::Accepted(a) = &out {
            let refused = self
                .targets
                .iter()
                .find(|t| t.engine.listener() == a.listener)
                .filter(|t| !t.config.allows(a.peer.ip()));
            if let Some(t) = refused {
                tracing::warn!(
                    export = %t.config.name,
                    initiator = %a.peer,
                    "an initiator the export's allow list leaves out: closed"
                );
                let _ = self.node.close(a.session);
                return;
            }
            if let Some(t) = self
                .targets
                .iter_mut()
                .find(|t| t.engine.listener() == a.listener)
            {
                t.initiator_restarted(&mut self.node, a.session, a.peer.ip());
            }
        }
        if let Output::Event { session, event } = &out {
            let now = self.node.now();
            let source = if let Some(c) = self
                .connects
                .iter_mut()
                .find(|c| c.engine.session() == *session)
            {
                if c.is_retry() || per_attempt(event) {
                    // A new session after an end: what it meets is said
                    // once per change (`Conn::failed`), its events at
                    // debug. So are the attempts of an outage: its start,
                    // a summary every OUTAGE_NOTE and its end are at info.
                    tracing::debug!(session = session.0, event_type = event.name(), %event, "session event");
                } else {
                    tracing::info!(session = session.0, event_type = event.name(), %event, "session event");
                }
                c.on_event(now, event);
                format!("connect {}", c.name())
            } else if let Some(e) = self
                .targets
                .iter()
                .find(|e| e.engine.sessions().contains(session))
            {
                tracing::info!(session = session.0, event_type = event.name(), %event, "session event");
                format!("export {}", e.config.name)
            } else {
                tracing::info!(session = session.0, event_type = event.name(), %event, "session event");
                "node".into()
            };
            self.publish(Published {
                source,
                kind: "session",
                session: Some(session.0),
                name: event.name(),
                event: event.to_string(),
            });
        }
        for t in &mut self.targets {
            match t.engine.handle(&mut self.node, out) {
                Some(o) => out = o,
                None => return,
            }
        }
        for c in &mut self.connects {
            match c.engine.handle(&mut self.node, out) {
                Some(o) => out = o,
                None => return,
            }
        }
    }

    /// Hand an event to every `events --follow` client still there.
    pub(crate) fn publish(&mut self, p: Published) {
        if self.subscribers.is_empty() {
            return;
        }
        let record = EventRecord {
            at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            source: p.source,
            kind: p.kind.into(),
            session: p.session,
            name: p.name.into(),
            event: p.event,
        };
        self.subscribers.retain(|s| s.send(record.clone()).is_ok());
    }

    /// The engines' outputs; true when there were any.
    fn engines(&mut self) -> bool {
        let mut busy = false;
        let mut events = Vec::new();
        for t in &mut self.targets {
            t.check_listening(&self.node);
            while let Some(ev) = t.engine.poll_event() {
                busy = true;
                tracing::info!(export = %t.config.name, event_type = ev.name(), event = %ev, "export event");
                let session = match &ev {
                    TargetEvent::Connected(s)
                    | TargetEvent::Ended { session: s, .. }
                    | TargetEvent::BadCommand { session: s, .. } => Some(s.0),
                    _ => None,
                };
                events.push(Published {
                    source: format!("export {}", t.config.name),
                    kind: "engine",
                    session,
                    name: ev.name(),
                    event: ev.to_string(),
                });
            }
        }
        for c in &mut self.connects {
            c.engine.handle_timeout(&mut self.node);
            // A session that ended under I/O of a served volume: its
            // commands wait for the next session (`Conn::resume_held`).
            let hold = c.announced.is_some();
            for (tag, result) in c.bridge.complete(&mut c.engine, hold) {
                busy = true;
                if Some(tag) != c.identify {
                    continue;
                }
                c.identify = None;
                let now = self.node.now();
                if let Some(before) = c.announced {
                    // A new session after the last one ended: go on only
                    // with the same volume.
                    match result {
                        Ok(BlockReply::Volume(info))
                            if info.size == before.size && info.read_only == before.read_only =>
                        {
                            c.max_io = c.max_io.min(info.max_io);
                            c.served(now);
                            c.resume_held(&mut self.node, &before, &info);
                            // The new incarnation's boot, for its successor.
                            c.announced = Some(info);
                        }
                        // The session ended first: `reconnect` says why.
                        Err(BlockError::SessionEnded(_)) => {}
                        other => {
                            let trouble = match other {
                                Ok(BlockReply::Volume(info)) => Trouble::OtherVolume {
                                    now: info,
                                    served: before,
                                },
                                Ok(reply) => Trouble::Identify(format!("answered {reply:?}")),
                                Err(e) => Trouble::Identify(e.to_string()),
                            };
                            // Not the session that serves: a new one after the pause.
                            let _ = self.node.close(c.engine.session());
                            if let Trouble::OtherVolume { .. } = trouble {
                                // Never to another volume.
                                c.stop_holding(&relink_nbd::BlockError::Io(
                                    "the target serves another volume now".into(),
                                ));
                            }
                            c.failed(now, trouble);
                        }
                    }
                    continue;
                }
                let result = match result {
                    Ok(BlockReply::Volume(info)) => {
                        c.announced = Some(info);
                        c.served(now);
                        c.max_io = c.max_io.min(info.max_io);
                        println!(
                            "connect {} ready: {} bytes, block size {}, max_io {}{}",
                            c.name(),
                            info.size,
                            info.block_size,
                            c.max_io,
                            if info.read_only { ", read-only" } else { "" }
                        );
                        Ok(info)
                    }
                    Ok(other) => Err(format!("IDENTIFY answered {other:?}")),
                    Err(e) => Err(format!("IDENTIFY failed: {e}")),
                };
                let _ = self.ready.send(Ready {
                    id: c.id,
                    config: c.config.clone(),
                    result,
                });
            }
            while let Some(ev) = c.engine.poll_event() {
                busy = true;
                if let InitiatorEvent::FastFailed { commands } = ev {
                    // Once per outage: the I/O its clients saw fail.
                    tracing::warn!(
                        connect = %c.name(),
                        commands,
                        fast_fail_secs = c.policy.fast_io_fail_tmo.map(|d| d.as_secs()),
                        "{commands} command(s) fast-failed in this outage: their NBD requests were answered EIO; the session keeps recovering"
                    );
                } else if c.is_retry() {
                    tracing::debug!(connect = %c.name(), event_type = ev.name(), event = %ev, "connection event");
                } else {
                    tracing::info!(connect = %c.name(), event_type = ev.name(), event = %ev, "connection event");
                }
                events.push(Published {
                    source: format!("connect {}", c.name()),
                    kind: "engine",
                    session: Some(c.engine.session().0),
                    name: ev.name(),
                    event: ev.to_string(),
                });
            }
        }
        for p in events {
            self.publish(p);
        }
        busy
    }

    /// Connect a new session for every connection whose session ended
    /// after its volume was announced (the target restarted, gave up,
    /// closed, refused, or serves another volume): requests fail
    /// `ESHUTDOWN` until its IDENTIFY confirms the same volume. Each new
    /// session waits its pause ([`crate::connection::Retry`]: 100 ms,
    /// doubling to 5 s while they fail), so a target that answers every
    /// new session at once, whatever it answers, gets a few a second at
    /// most.
    fn reconnect(&mut self) -> bool {
        let mut busy = false;
        let now = self.node.now();
        for c in &mut self.connects {
            c.note_outage(now);
            if c.announced.is_none() {
                continue;
            }
            if c.engine.ended().is_some() && c.ended(now) {
                busy = true;
            }
            if c.hold_expired(now) {
                busy = true;
                tracing::warn!(
                    connect = %c.name(),
                    commands = c.bridge.held(),
                    requests = c.waiting.len(),
                    "no session served the volume within give_up_secs: the I/O held since the session ended fails (ESHUTDOWN)"
                );
                c.stop_holding(&relink_nbd::BlockError::ShuttingDown);
            }
            if !c.retry_due(now) {
                continue;
            }
            busy = true;
            match Conn::connect(&mut self.node, c.id, &c.config, c.policy.clone()) {
                Ok(mut new) => {
                    new.take_over(&mut *c);
                    tracing::debug!(connect = %c.name(), session = new.engine.session().0, "a new session");
                    *c = new;
                }
                Err(e) => c.failed(now, Trouble::Connect(e.to_string())),
            }
        }
        busy
    }

    fn run(mut self) -> Summary {
        let mut stop_by = None;
        loop {
            let mut busy = self.node.poll();
            while let Some(out) = self.node.poll_output() {
                busy = true;
                self.route(out);
            }
            busy |= self.engines();
            if stop_by.is_none() {
                busy |= self.reconnect();
            }
            while let Ok(a) = self.admin.try_recv() {
                busy = true;
                self.admin(a, stop_by.is_some());
            }
            while let Ok((id, req)) = self.requests.try_recv() {
                busy = true;
                match self.connects.iter_mut().find(|c| c.id == id) {
                    Some(c) if stop_by.is_none() && c.serving() => {
                        c.bridge
                            .submit(&mut self.node, &mut c.engine, c.max_io, req);
                    }
                    Some(c) if stop_by.is_none() && c.holding() => c.waiting.push_back(req),
                    _ => {
                        let _ = req.reply.send(Err(relink_nbd::BlockError::ShuttingDown));
                    }
                }
            }
            if stop_by.is_none() && self.control.stop.load(Ordering::SeqCst) {
                stop_by = Some(self.node.now() + DRAIN);
                for c in &mut self.connects {
                    c.stop_holding(&relink_nbd::BlockError::ShuttingDown);
                }
            }
            if let Some(by) = stop_by {
                let drained = self.connects.iter().all(|c| c.bridge.in_progress() == 0);
                if drained || self.node.now() >= by {
                    break;
                }
            }
            if busy {
                continue;
            }
            self.sleep();
        }
        let s = self.node.shutdown(SHUTDOWN);
        let mut summary = Summary {
            clean_sessions: s.clean,
            timed_out: s.timed_out,
            sync_failures: Vec::new(),
        };
        for t in &self.targets {
            if let Err(e) = t.engine.volume().flush() {
                summary
                    .sync_failures
                    .push(format!("export {}: {e}", t.config.name));
            }
        }
        summary
    }

    /// Sleep until the node's fd or the wake-up fd is readable, or the
    /// earlier of the node's and the engines' deadlines.
    fn sleep(&mut self) {
        let now = self.node.now();
        let deadline = self
            .connects
            .iter()
            .flat_map(|c| [c.engine.poll_timeout(), c.retry.due])
            .flatten()
            .chain(self.node.next_deadline())
            .min();
        let timeout = deadline.map(|d| d.saturating_since(now));
        let Some(node_fd) = self.node.event_fd() else {
            // No readiness fd: a short bounded wait keeps NBD requests
            // moving.
            let cap = Duration::from_millis(1);
            let _ = self.node.wait_for(timeout.map_or(cap, |t| t.min(cap)));
            return;
        };
        let mut fds = [
            PollFd::new(&node_fd, PollFlags::IN),
            PollFd::new(&self.control.wake, PollFlags::IN),
        ];
        let ts = timeout.map(|t| rustix::event::Timespec {
            tv_sec: t.as_secs() as i64,
            tv_nsec: i64::from(t.subsec_nanos()),
        });
        let _ = rustix::event::poll(&mut fds, ts.as_ref());
        let mut buf = [0u8; 8];
        let _ = rustix::io::read(self.control.wake.as_fd(), &mut buf);
    }
}
