//! [`ThreadPair`]: a relink session between two nodes of this process on
//! any two providers, the target's node on a thread of its own that drains
//! and checks the deliveries.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use relink::{Memory, Node, Path, RegionId, SessionHandle, State};
use relink_fabric::Provider;

use super::drive::{next_wakeup, Drive, EndCounters};
use super::options::{session_options, Workload};
use super::target_app::TargetApp;
use crate::loops::LoopSpec;

/// How long connection setup may take (wall clock) before a pair panics.
const SETUP_LIMIT: Duration = Duration::from_secs(20);

/// The target's node on its own thread.
struct TargetThread {
    /// The thread, which hands the node back when it ends; `None` once
    /// joined (by `close` or drop).
    handle: Option<JoinHandle<Node>>,
    /// Set to ask the thread to end.
    stop: Arc<AtomicBool>,
    /// Messages the thread's [`Receiver`] checked so far, stored after each
    /// iteration that made progress.
    received: Arc<AtomicU64>,
    /// The first wrong delivery the receiver saw: the thread ends there and
    /// the initiator's next [`Drive::poll`] panics with it.
    error: Arc<Mutex<Option<String>>>,
}

/// A relink session between two nodes of this process on any two
/// providers (two [`TcpHost`](relink_soft::TcpHost)s in
/// [`TcpPair`](super::TcpPair), two `VerbsProvider`s on two real devices in
/// this crate's `rxe` benchmark). The initiator's node is driven by the
/// thread that runs the loop; the target's node by a thread of its own,
/// which also drains and checks the deliveries (and for
/// [`Workload::PingPong`] and [`Workload::PingPongFrom`] sends each
/// straight back).
pub struct ThreadPair {
    node: Node,
    ini: SessionHandle,
    tgt: SessionHandle,
    target: TargetThread,
    regions: Vec<(RegionId, Memory)>,
}

impl ThreadPair {
    /// A node on `initiator` (seeded with `seed`) and one on `target`; the
    /// target's listens on `listen` (an address of `target`), the
    /// initiator's connects one session to it from `local` (`None`: the
    /// provider picks the source) with the options [`session_options`](super::session_options)
    /// gives for `spec` and `workload`; then the target's node moves to a
    /// thread of its own.
    ///
    /// # Panics
    /// If the target cannot listen, the initiator cannot connect, or the
    /// session is not established on both sides within 20 s.
    pub fn connect(
        initiator: Arc<dyn Provider>,
        target: Arc<dyn Provider>,
        listen: SocketAddr,
        local: Option<IpAddr>,
        seed: u64,
        spec: &LoopSpec,
        workload: Workload,
    ) -> ThreadPair {
        let mut node = Node::seeded_for_simulation(initiator, seed);
        let mut target = Node::seeded_for_simulation(target, seed ^ 0x5a5a);
        let kind = node.provider().kind();
        target
            .listen(listen, session_options(spec, workload, true))
            .unwrap_or_else(|e| panic!("listen on {listen} ({kind}): {e}"));
        let ini = node
            .connect(
                vec![Path {
                    local,
                    peer: listen,
                }],
                session_options(spec, workload, false),
            )
            .unwrap_or_else(|e| panic!("connect to {listen} ({kind}): {e}"));
        let t0 = Instant::now();
        let mut tgt = None;
        loop {
            node.poll();
            target.poll();
            tgt = tgt.or_else(|| target.accept().map(|a| a.session));
            if let Some(t) = tgt {
                if node.state(ini) == Some(State::Established)
                    && target.state(t) == Some(State::Established)
                {
                    break;
                }
            }
            assert!(
                t0.elapsed() < SETUP_LIMIT,
                "relink session on {kind} not established in {SETUP_LIMIT:?} \
                 (initiator: {:?})",
                node.state(ini)
            );
            let now = node.now();
            let d = next_wakeup(now, [&node, &target]).min(now + Duration::from_micros(200));
            node.provider().wait(Some(d));
        }
        let tgt = tgt.expect("accepted");
        let regions = session_options(spec, workload, true)
            .regions
            .iter()
            .map(|r| (r.id, target.region(tgt, r.id).expect("region")))
            .collect();

        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicU64::new(0));
        let error = Arc::new(Mutex::new(None));
        let (s, r, e) = (stop.clone(), received.clone(), error.clone());
        let app = TargetApp::new(&mut target, tgt, spec, workload);
        let handle = std::thread::Builder::new()
            .name("relink-bench-target".into())
            .spawn(move || target_loop(target, tgt, app, &s, &r, &e))
            .expect("spawn the target's thread");
        ThreadPair {
            node,
            ini,
            tgt,
            target: TargetThread {
                handle: Some(handle),
                stop,
                received,
                error,
            },
            regions,
        }
    }

    /// Stop the target's thread and get its node back.
    fn join_target(&mut self) -> Option<Node> {
        self.target.stop.store(true, Ordering::SeqCst);
        let node = self.target.handle.take()?.join().ok();
        if node.is_none() {
            panic!("the target's thread panicked");
        }
        node
    }
}

/// The target's thread: poll the node, let the receiving application
/// `app` take what came (check, answer, drain the replies' completions),
/// wait on the provider when idle, until `stop`.
fn target_loop(
    mut node: Node,
    s: SessionHandle,
    mut app: TargetApp,
    stop: &AtomicBool,
    received: &AtomicU64,
    error: &Mutex<Option<String>>,
) -> Node {
    while !stop.load(Ordering::Relaxed) {
        let mut progress = node.poll();
        match app.poll(&mut node, s) {
            Ok(p) => progress |= p,
            Err(e) => {
                *error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                return node;
            }
        }
        if progress {
            received.store(app.received(), Ordering::Release);
        } else {
            let now = node.now();
            let d = next_wakeup(now, [&node]);
            node.provider().wait(Some(d));
        }
    }
    node
}

impl Drive for ThreadPair {
    fn kind(&self) -> &'static str {
        self.node.provider().kind()
    }

    fn initiator(&mut self) -> &mut Node {
        &mut self.node
    }

    fn session(&self) -> SessionHandle {
        self.ini
    }

    fn poll(&mut self) -> bool {
        if let Some(e) = self
            .target
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            panic!("receiver: {e}");
        }
        self.node.poll()
    }

    fn received(&self) -> u64 {
        self.target.received.load(Ordering::Acquire)
    }

    fn wait(&mut self, receiver_only: bool) {
        if receiver_only {
            std::thread::yield_now();
            return;
        }
        let now = self.node.now();
        let d = next_wakeup(now, [&self.node]);
        self.node.provider().wait(Some(d));
    }

    fn target_region(&mut self, region: RegionId) -> Memory {
        self.regions
            .iter()
            .find(|(id, _)| *id == region)
            .map(|(_, m)| m.clone())
            .unwrap_or_else(|| panic!("the target has no region {region}"))
    }

    fn close_counted(mut self) -> EndCounters {
        let ini = self.ini;
        let target = self.join_target();
        let counters = EndCounters {
            initiator: self.node.counters(ini).expect("session"),
            target: target
                .as_ref()
                .and_then(|t| t.counters(self.tgt))
                .expect("the target's node and session"),
        };
        self.node.close(ini).expect("close");
        if let Some(mut t) = target {
            t.close(self.tgt).expect("close");
            t.poll();
        }
        self.node.poll();
        counters
    }
}

impl Drop for ThreadPair {
    fn drop(&mut self) {
        let _ = self.join_target();
    }
}
