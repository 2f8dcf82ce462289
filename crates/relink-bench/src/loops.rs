//! The measuring loops: a window of outstanding requests on one connected
//! pair, replenished as completions arrive, timed with the wall clock.
//!
//! Both loops count only what they have seen complete and check all of it:
//! every completion must be a success of the right opcode on the right QP,
//! signaled completions must arrive in posting order, every SEND must
//! consume exactly one receive of the right length in order, and every
//! payload carries its sequence number ([`Verify::Stamp`]) or a full pattern
//! ([`Verify::Full`]) that is compared where it lands. A loop that stalls
//! (no progress for [`STALL_LIMIT`] of wall-clock time) or sees an
//! unexpected event panics rather than report a number.
//!
//! Sequence numbers (and so `wr_id`s) keep counting across runs on the same
//! pair, so a payload left over from an earlier run never passes a check.

use std::time::{Duration, Instant};

use relink_fabric::{Memory, QpCaps, RecvWr, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion};
use relink_testkit::check::pattern;
use relink_testkit::{connect_pair, Harness, Pair, PairOpts, Rig, Side};

use crate::series::Runner;

/// How long a loop may go without any progress before it panics.
pub const STALL_LIMIT: Duration = Duration::from_secs(30);

/// How far ahead (on the provider's clock) a loop waits when nothing is
/// ready: one [`Provider::wait`](relink_fabric::Provider::wait) call blocks
/// at most this long.
pub(crate) const TICK: Duration = Duration::from_millis(1);

/// How much of each payload a loop writes before posting and checks where
/// it lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// The first 8 bytes carry the request's sequence number and, for
    /// payloads of 16 bytes or more, the last 8 bytes its complement. Cheap
    /// (two small copies per request on each side), so it stays on while
    /// measuring; it catches lost, duplicated, reordered, misplaced and
    /// truncated payloads.
    Stamp,
    /// Every byte: a pseudo-random pattern seeded by the sequence number.
    /// For tests; costs a pattern and a full compare per request.
    Full,
}

/// The shape of a loop: request size, window and signaling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopSpec {
    /// Bytes per request (at least 8: the sequence number).
    pub size: usize,
    /// Requests outstanding at most; a completion makes room for more.
    pub window: usize,
    /// Signal every `signal_every`-th request (and the last of each run);
    /// the others are unsignaled and counted complete when a later signaled
    /// completion arrives (RC completes in order). At most `window`.
    pub signal_every: usize,
    /// How payloads are stamped and checked.
    pub verify: Verify,
}

impl LoopSpec {
    /// SENDs of `size` bytes, `window` outstanding, every one signaled,
    /// payloads [`Verify::Stamp`]ed.
    pub fn send(size: usize, window: usize) -> LoopSpec {
        LoopSpec {
            size,
            window,
            signal_every: 1,
            verify: Verify::Stamp,
        }
    }

    /// WRITEs of `size` bytes, `window` outstanding, every one signaled,
    /// payloads [`Verify::Stamp`]ed.
    pub fn write(size: usize, window: usize) -> LoopSpec {
        LoopSpec::send(size, window)
    }

    /// The same spec signaling every `n`-th request.
    pub fn signal_every(self, n: usize) -> LoopSpec {
        LoopSpec {
            signal_every: n,
            ..self
        }
    }

    /// The same spec with another [`Verify`] level.
    pub fn verify(self, verify: Verify) -> LoopSpec {
        LoopSpec { verify, ..self }
    }

    /// A short description, e.g. `64 B, window 64, signal 1/16`.
    pub fn describe(&self) -> String {
        format!(
            "{}, window {}, signal 1/{}",
            human_size(self.size),
            self.window,
            self.signal_every
        )
    }

    #[track_caller]
    pub(crate) fn validate(&self) {
        assert!(self.size >= 8, "size {} < 8 bytes", self.size);
        assert!(
            u32::try_from(self.size).is_ok(),
            "size {} does not fit an SGE",
            self.size
        );
        assert!(self.window >= 1, "window must be at least 1");
        assert!(
            (1..=self.window).contains(&self.signal_every),
            "signal_every {} must be in 1..=window ({})",
            self.signal_every,
            self.window
        );
    }

    /// Whether request `seq` of a run ending before `end` is signaled.
    fn signaled(&self, seq: u64, end: u64) -> bool {
        (seq + 1) % self.signal_every as u64 == 0 || seq + 1 == end
    }
}

/// `64 B`, `64 KiB`, `1 MiB`, or plain bytes if not a round binary size.
pub fn human_size(size: usize) -> String {
    const KIB: usize = 1024;
    if size >= KIB * KIB && size % (KIB * KIB) == 0 {
        format!("{} MiB", size / (KIB * KIB))
    } else if size >= KIB && size % KIB == 0 {
        format!("{} KiB", size / KIB)
    } else {
        format!("{size} B")
    }
}

/// One timed run: how many requests completed, how many payload bytes they
/// carried, and how long it took on the wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measurement {
    /// Requests completed (and checked).
    pub ops: u64,
    /// Payload bytes of those requests.
    pub bytes: u64,
    /// Wall-clock time from the first post to the last completion.
    pub elapsed: Duration,
    /// CPU time (user + system) the whole process used meanwhile, all
    /// threads (the TCP fabric's I/O threads too), if the platform tells
    /// (Linux; 10 ms resolution). Next to `elapsed` it shows how busy the
    /// run kept the machine, and whether it had to wait for a CPU.
    pub cpu: Option<Duration>,
}

impl Measurement {
    /// Requests per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.secs()
    }

    /// Payload bytes per second.
    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes as f64 / self.secs()
    }

    /// Payload gigabytes (10^9 bytes) per second.
    pub fn gbytes_per_sec(&self) -> f64 {
        self.bytes_per_sec() / 1e9
    }

    /// Elapsed seconds (never zero, so rates stay finite).
    pub fn secs(&self) -> f64 {
        self.elapsed.as_secs_f64().max(1e-9)
    }

    /// CPU time over wall-clock time (1.0 = one CPU busy throughout).
    pub fn cpu_load(&self) -> Option<f64> {
        self.cpu.map(|c| c.as_secs_f64() / self.secs())
    }
}

/// CPU time (user + system) used so far by this process, all threads
/// included, from `/proc/self/stat`; `None` where that is not readable.
pub fn process_cpu_time() -> Option<Duration> {
    // Fields 14 and 15 (utime, stime), in clock ticks of `USER_HZ`, which
    // is 100 per second on common Linux configurations.
    let [utime, stime] = proc_self_stat([14, 15])?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// Minor page faults of this process so far (field 10 of `/proc/self/stat`);
/// `None` where that is not readable.
pub fn process_minor_faults() -> Option<u64> {
    let [minflt] = proc_self_stat([10])?;
    Some(minflt)
}

/// Numeric fields of `/proc/self/stat` by their number in proc(5) (from 3,
/// the first after the parenthesised command name, which may hold spaces),
/// in ascending order.
fn proc_self_stat<const N: usize>(fields: [usize; N]) -> Option<[u64; N]> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let all: Vec<&str> = rest.split_whitespace().collect();
    let mut out = [0; N];
    for (o, f) in out.iter_mut().zip(fields) {
        *o = all.get(f.checked_sub(3)?)?.parse().ok()?;
    }
    Some(out)
}

/// Timing of one run: the wall clock and the process's CPU time.
pub(crate) struct Clock {
    wall: Instant,
    cpu: Option<Duration>,
}

impl Clock {
    pub(crate) fn start() -> Clock {
        Clock {
            cpu: process_cpu_time(),
            wall: Instant::now(),
        }
    }

    pub(crate) fn stop(self, ops: u64, size: usize) -> Measurement {
        let elapsed = self.wall.elapsed();
        let cpu = match (self.cpu, process_cpu_time()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        Measurement {
            ops,
            bytes: ops * size as u64,
            elapsed,
            cpu,
        }
    }
}

/// Write the stamp or pattern of `seq` into `size` bytes of `mem` at `off`.
pub(crate) fn stamp(mem: &Memory, off: usize, size: usize, seq: u64, verify: Verify) {
    match verify {
        Verify::Stamp => {
            mem.write(off, &seq.to_le_bytes()).expect("slot in bounds");
            if size >= 16 {
                mem.write(off + size - 8, &(!seq).to_le_bytes())
                    .expect("slot in bounds");
            }
        }
        Verify::Full => mem.write(off, &pattern(seq, size)).expect("slot in bounds"),
    }
}

/// Check that `size` bytes of `mem` at `off` hold what [`stamp`] wrote for
/// `seq`; panics naming `what` otherwise.
#[track_caller]
pub(crate) fn check_stamp(
    mem: &Memory,
    off: usize,
    size: usize,
    seq: u64,
    verify: Verify,
    what: &str,
) {
    match verify {
        Verify::Stamp => {
            let head = mem.read_u64(off).expect("slot in bounds");
            let head = u64::from_le_bytes(head.to_ne_bytes());
            assert_eq!(
                head, seq,
                "{what}: payload of request {seq} carries sequence number {head}"
            );
            if size >= 16 {
                let tail = mem.read_u64(off + size - 8).expect("slot in bounds");
                let tail = u64::from_le_bytes(tail.to_ne_bytes());
                assert_eq!(
                    tail, !seq,
                    "{what}: payload of request {seq} has a wrong last 8 bytes \
                     (truncated or mixed with another payload)"
                );
            }
        }
        Verify::Full => {
            let got = mem.read_vec(off, size).expect("slot in bounds");
            if got != pattern(seq, size) {
                let first = got
                    .iter()
                    .zip(pattern(seq, size))
                    .position(|(a, b)| *a != b)
                    .unwrap_or(0);
                panic!("{what}: payload of request {seq} differs from byte {first} on");
            }
        }
    }
}

/// Panics unless `wc` is a success of `opcode` on `qp`.
#[track_caller]
fn check_wc(wc: &WorkCompletion, opcode: WcOpcode, qp: relink_fabric::QpId, what: &str) {
    assert!(
        wc.status == WcStatus::Success && wc.opcode == opcode && wc.qp == qp,
        "{what}: want a successful {opcode:?} completion on {qp}, got {wc:?}"
    );
}

/// The connection a loop runs on and the bookkeeping every loop needs.
struct Conn<'r> {
    h: Harness<'r>,
    pair: Pair,
    wcs: Vec<WorkCompletion>,
}

impl<'r> Conn<'r> {
    fn connect(rig: &'r dyn Rig, opts: &PairOpts) -> Conn<'r> {
        let mut h = Harness::new(rig);
        let pair = connect_pair(&mut h, opts);
        // Device and CM events of the setup are not the loop's business;
        // anything that arrives from now on is.
        for side in Side::ALL {
            h.take_events(side, |_| true);
        }
        Conn {
            h,
            pair,
            wcs: Vec::new(),
        }
    }

    /// Wait up to a tick for something to happen on `side`'s host, after
    /// checking that no event arrived (an unconsumed event would also make
    /// every later `wait` return at once).
    #[track_caller]
    fn wait(&mut self, side: Side) {
        self.h.pump();
        for s in Side::ALL {
            let evs = self.h.buffered(s);
            assert!(
                evs.is_empty(),
                "unexpected events on the {s} host during a measuring loop: {evs:?}"
            );
        }
        let host = self.h.host(side);
        host.wait(Some(host.now() + TICK));
    }

    /// Poll up to `max` completions of `side`'s CQ into `self.wcs`.
    fn poll(&mut self, side: Side, recv: bool, max: usize) -> usize {
        self.wcs.clear();
        let end = self.pair.end(side);
        let cq = if recv { end.recv_cq } else { end.send_cq };
        let n = self
            .h
            .host(side)
            .poll_cq(cq, max, &mut self.wcs)
            .unwrap_or_else(|e| panic!("poll_cq({cq}) on the {side} host: {e}"));
        assert_eq!(
            n,
            self.wcs.len(),
            "poll_cq returned {n} but produced {} completions",
            self.wcs.len()
        );
        n
    }

    fn close(self) {
        self.pair.teardown(&self.h);
    }
}

/// Fails a loop that makes no progress. Reads the clock only once every
/// [`Stall::CLOCK_EVERY`] idle iterations, so that watching for a stall
/// costs a loop nothing measurable (an idle iteration also waits up to a
/// tick, so a stall is noticed at most about a second late).
pub(crate) struct Stall {
    /// When the clock last showed progress.
    since: Instant,
    /// Progress since the clock was last read.
    moved: bool,
    /// Idle iterations since the clock was last read.
    idle: u32,
}

impl Stall {
    /// Idle iterations between two clock readings.
    const CLOCK_EVERY: u32 = 1024;

    pub(crate) fn new() -> Stall {
        Stall {
            since: Instant::now(),
            moved: false,
            idle: 0,
        }
    }

    pub(crate) fn progress(&mut self) {
        self.moved = true;
    }

    /// An idle iteration: panics with `state` if no progress was seen for
    /// [`STALL_LIMIT`].
    #[track_caller]
    pub(crate) fn check(&mut self, state: impl FnOnce() -> String) {
        self.idle += 1;
        if self.idle < Self::CLOCK_EVERY {
            return;
        }
        self.idle = 0;
        let now = Instant::now();
        if std::mem::take(&mut self.moved) {
            self.since = now;
        } else if now.duration_since(self.since) > STALL_LIMIT {
            panic!(
                "measuring loop made no progress for {STALL_LIMIT:?}: {}",
                state()
            );
        }
    }
}

fn pair_opts(buf_len: usize, send_wr: usize, recv_wr: usize) -> PairOpts {
    let cq_depth = (2 * send_wr.max(recv_wr)).max(512);
    PairOpts {
        buf_len: buf_len.next_multiple_of(8),
        caps: QpCaps {
            max_send_wr: u32::try_from(send_wr).expect("window fits u32"),
            max_recv_wr: u32::try_from(recv_wr).expect("receive depth fits u32"),
            max_send_sge: 1,
            max_recv_sge: 1,
        },
        cq_depth: u32::try_from(cq_depth).expect("CQ depth fits u32"),
        ..PairOpts::default()
    }
}

/// SENDs from the initiator to the target: the target keeps
/// `2 × window` receives posted (enough that a SEND never meets an empty
/// receive queue, however the loop's polls interleave) and reposts each as
/// soon as it completes; the initiator keeps up to `window` SENDs
/// outstanding.
pub struct SendLoop<'r> {
    conn: Conn<'r>,
    spec: LoopSpec,
    recv_depth: usize,
    next_seq: u64,
    received: u64,
}

impl<'r> SendLoop<'r> {
    /// Connect a pair on `rig` and post the receives.
    ///
    /// # Panics
    /// If `spec` is invalid or the pair cannot be set up.
    #[track_caller]
    pub fn connect(rig: &'r dyn Rig, spec: LoopSpec) -> SendLoop<'r> {
        spec.validate();
        let recv_depth = 2 * spec.window;
        let opts = pair_opts(
            spec.window.max(recv_depth) * spec.size,
            spec.window,
            recv_depth,
        );
        let conn = Conn::connect(rig, &opts);
        let tgt = &conn.pair.target;
        let recvs: Vec<RecvWr> = (0..recv_depth)
            .map(|slot| RecvWr {
                wr_id: slot as u64,
                sgl: vec![tgt.sge(slot * spec.size, spec.size as u32)],
            })
            .collect();
        tgt.post_recv(&conn.h, &recvs);
        SendLoop {
            conn,
            spec,
            recv_depth,
            next_seq: 0,
            received: 0,
        }
    }

    /// The loop's shape.
    pub fn spec(&self) -> LoopSpec {
        self.spec
    }

    /// The provider kind of the initiator (`soft-inproc`, `soft-tcp`, ...).
    pub fn kind(&self) -> &'static str {
        self.conn.h.host(Side::Initiator).kind()
    }

    /// Send `count` messages and wait until every one completed at the
    /// initiator and was received (and checked) at the target.
    ///
    /// # Panics
    /// On any failed or unexpected completion, a wrong payload, an event, or
    /// a stall.
    #[track_caller]
    pub fn run(&mut self, count: u64) -> Measurement {
        let spec = self.spec;
        let (size, window) = (spec.size, spec.window as u64);
        let start = self.next_seq;
        let end = start + count;
        let (mut posted, mut completed) = (start, start);
        let mut wrs: Vec<SendWr> = Vec::with_capacity(spec.window);
        let mut recvs: Vec<RecvWr> = Vec::with_capacity(self.recv_depth);
        let mut stall = Stall::new();
        let clock = Clock::start();
        while completed < end || self.received < end {
            let mut progress = false;

            // The target: check and repost every completed receive.
            let n = self.conn.poll(Side::Target, true, self.recv_depth);
            if n > 0 {
                let tgt = &self.conn.pair.target;
                let host = self.conn.h.host(Side::Target);
                for wc in &self.conn.wcs {
                    let seq = self.received;
                    check_wc(wc, WcOpcode::Recv, tgt.qp, "receive");
                    assert!(
                        seq < posted,
                        "receive of message {seq} completed, but only {posted} were posted"
                    );
                    assert_eq!(
                        wc.byte_len as usize, size,
                        "receive of message {seq}: byte_len in {wc:?}"
                    );
                    let slot = usize::try_from(wc.wr_id)
                        .ok()
                        .filter(|s| *s < self.recv_depth)
                        .unwrap_or_else(|| {
                            panic!("receive completion of an unknown wr_id: {wc:?}")
                        });
                    check_stamp(&tgt.mem, slot * size, size, seq, spec.verify, "receive");
                    self.received += 1;
                    recvs.push(RecvWr {
                        wr_id: wc.wr_id,
                        sgl: vec![tgt.sge(slot * size, size as u32)],
                    });
                }
                if let Err(e) = host.post_recv(tgt.qp, &recvs) {
                    panic!("post_recv on the target host: {e}");
                }
                recvs.clear();
                progress = true;
            }

            // The initiator: signaled completions, in order.
            let n = self.conn.poll(Side::Initiator, false, spec.window);
            if n > 0 {
                let ini = &self.conn.pair.initiator;
                for wc in &self.conn.wcs {
                    check_wc(wc, WcOpcode::Send, ini.qp, "send");
                    assert!(
                        (completed..posted).contains(&wc.wr_id) && spec.signaled(wc.wr_id, end),
                        "send completion out of order or unsignaled: completed up to {completed}, \
                         posted up to {posted}, got {wc:?}"
                    );
                    completed = wc.wr_id + 1;
                }
                progress = true;
            }

            // Refill the window.
            let ini = &self.conn.pair.initiator;
            while posted < end && posted - completed < window {
                let slot = (posted % window) as usize;
                stamp(&ini.mem, slot * size, size, posted, spec.verify);
                wrs.push(SendWr {
                    signaled: spec.signaled(posted, end),
                    ..SendWr::new(
                        posted,
                        SendOp::Send,
                        vec![ini.sge(slot * size, size as u32)],
                    )
                });
                posted += 1;
            }
            if !wrs.is_empty() {
                if let Err(e) = self.conn.h.host(Side::Initiator).post_send(ini.qp, &wrs) {
                    panic!("post_send on the initiator host: {e}");
                }
                wrs.clear();
                progress = true;
            }

            if progress {
                stall.progress();
            } else {
                let received = self.received;
                stall.check(|| {
                    format!(
                        "SEND loop: posted {posted}, completed {completed}, received {received} \
                         of {start}..{end}"
                    )
                });
                let side = if completed < end {
                    Side::Initiator
                } else {
                    Side::Target
                };
                self.conn.wait(side);
            }
        }
        let m = clock.stop(count, size);
        self.next_seq = end;
        m
    }

    /// Tear the pair down, checking that nothing leaked.
    pub fn close(self) {
        self.conn.close();
    }
}

impl Runner for SendLoop<'_> {
    fn run(&mut self, count: u64) -> Measurement {
        SendLoop::run(self, count)
    }
}

/// WRITEs from the initiator's memory into the target's: `window` slots of
/// `size` bytes on each side, up to `window` WRITEs outstanding, slot
/// `seq % window`. Once a WRITE is known complete its target slot is checked
/// before the slot is written again.
pub struct WriteLoop<'r> {
    conn: Conn<'r>,
    spec: LoopSpec,
    next_seq: u64,
}

impl<'r> WriteLoop<'r> {
    /// Connect a pair on `rig`.
    ///
    /// # Panics
    /// If `spec` is invalid or the pair cannot be set up.
    #[track_caller]
    pub fn connect(rig: &'r dyn Rig, spec: LoopSpec) -> WriteLoop<'r> {
        spec.validate();
        let opts = pair_opts(spec.window * spec.size, spec.window, 1);
        WriteLoop {
            conn: Conn::connect(rig, &opts),
            spec,
            next_seq: 0,
        }
    }

    /// The loop's shape.
    pub fn spec(&self) -> LoopSpec {
        self.spec
    }

    /// The provider kind of the initiator (`soft-inproc`, `soft-tcp`, ...).
    pub fn kind(&self) -> &'static str {
        self.conn.h.host(Side::Initiator).kind()
    }

    /// Write `count` payloads and wait until every one completed (and its
    /// target slot was checked).
    ///
    /// # Panics
    /// On any failed or unexpected completion, a wrong payload, an event, or
    /// a stall.
    #[track_caller]
    pub fn run(&mut self, count: u64) -> Measurement {
        let spec = self.spec;
        let (size, window) = (spec.size, spec.window as u64);
        let start = self.next_seq;
        let end = start + count;
        let (mut posted, mut completed) = (start, start);
        let mut wrs: Vec<SendWr> = Vec::with_capacity(spec.window);
        let mut stall = Stall::new();
        let clock = Clock::start();
        while completed < end {
            let mut progress = false;

            let n = self.conn.poll(Side::Initiator, false, spec.window);
            if n > 0 {
                let (ini, tgt) = (&self.conn.pair.initiator, &self.conn.pair.target);
                for wc in &self.conn.wcs {
                    check_wc(wc, WcOpcode::RdmaWrite, ini.qp, "write");
                    assert!(
                        (completed..posted).contains(&wc.wr_id) && spec.signaled(wc.wr_id, end),
                        "write completion out of order or unsignaled: completed up to \
                         {completed}, posted up to {posted}, got {wc:?}"
                    );
                    for seq in completed..=wc.wr_id {
                        let slot = (seq % window) as usize;
                        check_stamp(&tgt.mem, slot * size, size, seq, spec.verify, "write");
                    }
                    completed = wc.wr_id + 1;
                }
                progress = true;
            }

            let (ini, tgt) = (&self.conn.pair.initiator, &self.conn.pair.target);
            while posted < end && posted - completed < window {
                let slot = (posted % window) as usize;
                stamp(&ini.mem, slot * size, size, posted, spec.verify);
                wrs.push(SendWr {
                    signaled: spec.signaled(posted, end),
                    ..SendWr::new(
                        posted,
                        SendOp::Write {
                            remote: tgt.remote(slot * size),
                        },
                        vec![ini.sge(slot * size, size as u32)],
                    )
                });
                posted += 1;
            }
            if !wrs.is_empty() {
                if let Err(e) = self.conn.h.host(Side::Initiator).post_send(ini.qp, &wrs) {
                    panic!("post_send on the initiator host: {e}");
                }
                wrs.clear();
                progress = true;
            }

            if progress {
                stall.progress();
            } else {
                stall.check(|| {
                    format!("WRITE loop: posted {posted}, completed {completed} of {start}..{end}")
                });
                self.conn.wait(Side::Initiator);
            }
        }
        let m = clock.stop(count, size);
        self.next_seq = end;
        m
    }

    /// Tear the pair down, checking that nothing leaked.
    pub fn close(self) {
        self.conn.close();
    }
}

impl Runner for WriteLoop<'_> {
    fn run(&mut self, count: u64) -> Measurement {
        WriteLoop::run(self, count)
    }
}

/// Message rate of `size`-byte SENDs with `window` outstanding, on a fresh
/// pair of `rig`: `count` messages, one run, no warm-up (see
/// [`measure`](crate::measure) for a warmed-up series).
pub fn send_rate(rig: &dyn Rig, size: usize, window: usize, count: u64) -> Measurement {
    let mut l = SendLoop::connect(rig, LoopSpec::send(size, window));
    let m = l.run(count);
    l.close();
    m
}

/// Bandwidth of `size`-byte WRITEs with `window` outstanding, on a fresh
/// pair of `rig`: `count` writes, one run, no warm-up.
pub fn write_rate(rig: &dyn Rig, size: usize, window: usize, count: u64) -> Measurement {
    let mut l = WriteLoop::connect(rig, LoopSpec::write(size, window));
    let m = l.run(count);
    l.close();
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use relink_testkit::soft_rigs::InProcRig;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    #[test]
    fn send_loop_delivers_every_message_intact() {
        let rig = InProcRig::new(11);
        // Odd size, periodic signaling, a window that is not a multiple of
        // the signaling period, runs that end off the period.
        let spec = LoopSpec::send(100, 10).signal_every(4).verify(Verify::Full);
        let mut l = SendLoop::connect(&rig, spec);
        for count in [1, 37, 500] {
            let before = l.received;
            let m = l.run(count);
            assert_eq!((m.ops, m.bytes), (count, count * 100));
            assert_eq!(l.received - before, count, "every message received once");
            assert!(m.elapsed > Duration::ZERO);
        }
        assert_eq!(l.next_seq, 538);
        l.close();
    }

    #[test]
    fn write_loop_lands_every_payload() {
        let rig = InProcRig::new(12);
        let spec = LoopSpec::write(4096 + 24, 6)
            .signal_every(3)
            .verify(Verify::Full);
        let mut l = WriteLoop::connect(&rig, spec);
        for count in [2, 100] {
            let m = l.run(count);
            assert_eq!((m.ops, m.bytes), (count, count * 4120));
        }
        l.close();
    }

    #[test]
    fn stamped_loops_and_helpers() {
        let rig = InProcRig::new(13);
        let m = send_rate(&rig, 64, 16, 300);
        assert_eq!((m.ops, m.bytes), (300, 300 * 64));
        let m = write_rate(&rig, 64 * 1024, 4, 40);
        assert_eq!((m.ops, m.bytes), (40, 40 * 64 * 1024));
        assert!(m.gbytes_per_sec() > 0.0);
    }

    #[test]
    fn stamps_catch_wrong_payloads() {
        let mem = Memory::new(std::sync::Arc::new(relink_fabric::HeapMemory::new(
            0x1000, 256,
        )));
        for verify in [Verify::Stamp, Verify::Full] {
            stamp(&mem, 0, 64, 7, verify);
            check_stamp(&mem, 0, 64, 7, verify, "ok");
            let wrong = catch_unwind(AssertUnwindSafe(|| {
                check_stamp(&mem, 0, 64, 8, verify, "x")
            }));
            assert!(
                wrong.is_err(),
                "{verify:?} must notice another sequence number"
            );
            let last = mem.read_vec(63, 1).unwrap()[0];
            mem.write(63, &[last ^ 0xFF]).unwrap();
            let torn = catch_unwind(AssertUnwindSafe(|| {
                check_stamp(&mem, 0, 64, 7, verify, "x")
            }));
            assert!(torn.is_err(), "{verify:?} must notice a damaged tail");
        }
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn cpu_time_is_read_and_grows() {
        // Spin until the CPU time moved on by two ticks; a wall-clock cap
        // keeps a broken reading from hanging the test.
        let a = process_cpu_time().expect("/proc/self/stat");
        let t = Instant::now();
        let mut x = 0u64;
        let mut b = a;
        while b < a + Duration::from_millis(20) && t.elapsed() < Duration::from_secs(10) {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            b = process_cpu_time().expect("/proc/self/stat");
        }
        assert!(b >= a + Duration::from_millis(20), "{a:?} -> {b:?}");
    }

    #[test]
    fn minor_faults_count_touched_pages() {
        let a = process_minor_faults().expect("/proc/self/stat");
        // Fresh pages, written once each: at least some fault in.
        let mut v = vec![0u8; 8 << 20];
        for i in (0..v.len()).step_by(4096) {
            v[i] = 1;
        }
        std::hint::black_box(&v);
        let b = process_minor_faults().expect("/proc/self/stat");
        assert!(b > a, "{a} -> {b}");
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_size(64), "64 B");
        assert_eq!(human_size(65536), "64 KiB");
        assert_eq!(human_size(1 << 20), "1 MiB");
        assert_eq!(human_size(1000), "1000 B");
        assert_eq!(
            LoopSpec::send(64, 64).signal_every(16).describe(),
            "64 B, window 64, signal 1/16"
        );
    }
}
