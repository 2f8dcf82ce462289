//! The client of `kv_server`: PUT and GET requests as relink messages, and
//! values written straight into the server's memory with RDMA WRITE —
//! checked answer by answer while devices reset under it (see the README's
//! "Sessions across two processes").
//!
//! ```sh
//! cargo run --release -p relink --example kv_client -- \
//!     --dir /tmp/kv/a --connect 127.0.0.2:7480 --seconds 30
//! ```
//!
//! What it shows: connecting a session, sending numbered requests and
//! matching the answers, one-sided work on memory the peer advertised
//! (named by a [`BufferToken`], never by an address or rkey), taking each
//! operation's one [`Completion`], printing the session's events, and an
//! orderly close — all from one real-time loop ([`Node::poll`], the
//! application's work, then [`Node::wait`] until something arrives or
//! the node's next deadline). When a device is reset or removed on either side, nothing
//! here retries or re-sends: the session recovers, replays what was not
//! confirmed, re-exchanges the advertisements, and every request is still
//! answered exactly once.
//!
//! The work: up to `WINDOW` requests in flight; a mix of `PUT key value`,
//! `GET key` and, once the server said where (`HELLO`), a value written
//! into a slot of the server's region with RDMA WRITE, committed with
//! `PUTAT key offset len` when the write completed, then read back through
//! the server with `GET key`. The client keeps its own copy of the store
//! to know every answer in advance (the server handles one session's
//! requests in order), so it checks every answer.
//!
//! Arguments: `--dir DIR` (this host's soft device directory, default
//! `$RELINK_SOFT_DIR` or the per-user runtime directory), `--connect
//! ADDR:PORT` (the server), and when to stop sending: `--requests N`,
//! `--seconds S`, or neither: until Enter is pressed or standard input
//! ends. Then it waits for the last answers, closes the session and prints
//! one `RESULT role=client ...` line. It exits 0 if every request was
//! answered exactly once and correctly and every operation succeeded, 1
//! otherwise.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use relink::{
    Access, BufferToken, LocalRange, Node, OpId, Outcome, Path, RegionId, RegionOptions,
    SessionEvent, SessionHandle, SessionOptions, State, Timestamp,
};
use relink_soft::{Registry, TcpHost};

/// Our own region: where the values we RDMA WRITE are staged. Not
/// advertised: only we use it.
const STAGING: RegionId = RegionId(1);
const SLOT: u64 = 256;
const SLOTS: u64 = 64;
/// Requests (and writes) in flight at most.
const WINDOW: usize = 32;
/// Keys per client (a small set, so GETs mostly find something).
const KEYS: u64 = 50;
const WAIT_CAP: Duration = Duration::from_millis(100);
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// How long, after it stopped sending, the client waits for the last
/// answers (recoveries included) before it reports them unanswered.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);

enum Stop {
    Requests(u64),
    Seconds(Duration),
    /// Enter pressed or standard input closed.
    Stdin(Arc<AtomicBool>),
}

struct Args {
    dir: PathBuf,
    connect: SocketAddr,
    stop: Stop,
}

fn usage() -> ! {
    eprintln!("usage: kv_client --connect ADDR:PORT [--dir DIR] [--requests N | --seconds S]");
    std::process::exit(2);
}

fn parse_args() -> Args {
    let mut dir = None;
    let mut connect = None;
    let mut stop = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--dir" => dir = Some(PathBuf::from(value())),
            "--connect" => connect = Some(value().parse().unwrap_or_else(|_| usage())),
            "--requests" => {
                stop = Some(Stop::Requests(value().parse().unwrap_or_else(|_| usage())));
            }
            "--seconds" => {
                let s: f64 = value().parse().unwrap_or_else(|_| usage());
                stop = Some(Stop::Seconds(Duration::from_secs_f64(s)));
            }
            _ => usage(),
        }
    }
    let stop = stop.unwrap_or_else(|| {
        // A thread blocks on standard input; the loop checks the flag.
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            f.store(true, Ordering::Relaxed);
        });
        Stop::Stdin(flag)
    });
    Args {
        dir: dir.unwrap_or_else(Registry::default_dir),
        connect: connect.unwrap_or_else(|| usage()),
        stop,
    }
}

/// The answer a request must get.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    Ok,
    Value(String),
    NotFound,
}

impl Expect {
    fn matches(&self, answer: &str) -> bool {
        match self {
            Expect::Ok => answer == "OK",
            Expect::Value(v) => answer.strip_prefix("VALUE ") == Some(v.as_str()),
            Expect::NotFound => answer == "NOTFOUND",
        }
    }
}

/// What an operation we submitted was, until its one completion.
enum Op {
    /// A request message.
    Request,
    /// An RDMA WRITE of `value` into the server's slot `slot`.
    Write {
        key: String,
        value: String,
        slot: u64,
    },
}

/// Where the server lets us write: its `HELLO`.
#[derive(Clone, Copy)]
struct Hello {
    region: RegionId,
    slots: u64,
}

#[derive(Default)]
struct Tally {
    requests: u64,
    answered: u64,
    duplicates: u64,
    wrong: u64,
    unexpected: u64,
    puts: u64,
    gets: u64,
    found: u64,
    writes: u64,
    ops_ok: u64,
    ops_failed: u64,
    ops_indeterminate: u64,
    losses: u64,
    resumes: u64,
    gave_up: bool,
}

struct Client {
    node: Node,
    s: SessionHandle,
    /// Whether the session was established yet.
    connected: bool,
    hello: Option<Hello>,
    next_id: u64,
    /// Requests sent and not answered yet, with their expected answer.
    outstanding: BTreeMap<u64, Expect>,
    /// Requests answered (to catch a second answer).
    answered: BTreeSet<u64>,
    /// Operations not completed yet.
    ops: HashMap<OpId, Op>,
    /// Server slots not in use; a slot is busy from its WRITE until the
    /// answer to its PUTAT (the server copied the value by then).
    free_slots: Vec<u64>,
    slot_of: HashMap<u64, u64>,
    /// Our copy of the store (our keys only).
    model: HashMap<String, String>,
    /// Requests reserved by writes in flight (their PUTAT and GET).
    reserved: u64,
    /// Draws of the workload's pseudo-random sequence so far.
    draws: u64,
    tally: Tally,
    key_prefix: String,
}

fn main() -> ExitCode {
    let args = parse_args();

    // 1. The provider and the node, as in kv_server.
    let provider = match TcpHost::open(&args.dir) {
        Ok(p) => Arc::new(p),
        Err(e) => {
            eprintln!("kv_client: cannot open {}: {e}", args.dir.display());
            return ExitCode::from(2);
        }
    };
    let mut node = Node::new(provider.clone());

    // 2. Connect. One path here (`local: None`: any local device that
    //    reaches the peer); a session may be given several, and moves to
    //    the next when one fails. The first attempt starts now; if the
    //    server is not up yet, the session keeps trying — each failed
    //    attempt is an `AttemptFailed` event — and gives up after the
    //    policy's `first_connect_tmo` (30 s). Our staging region is
    //    registered with the session on every device it uses; its memory
    //    stays the same (we fill it directly).
    let opts = SessionOptions::builder()
        .region(RegionOptions::new(
            STAGING,
            SLOT * SLOTS,
            Access::LOCAL_WRITE,
        ))
        .build()
        .expect("a staging region of a valid size");
    let path = Path {
        local: None,
        peer: args.connect,
    };
    let s = match node.connect(vec![path], opts) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kv_client: cannot connect: {e}");
            return ExitCode::from(2);
        }
    };
    println!("connecting to {}", args.connect);

    let mut c = Client {
        node,
        s,
        connected: false,
        hello: None,
        next_id: 1,
        outstanding: BTreeMap::new(),
        answered: BTreeSet::new(),
        ops: HashMap::new(),
        free_slots: (0..SLOTS).rev().collect(),
        slot_of: HashMap::new(),
        model: HashMap::new(),
        reserved: 0,
        draws: 0,
        tally: Tally::default(),
        // Our keys, apart from other clients' (the store is shared).
        key_prefix: format!("c{}", std::process::id()),
    };
    let start = c.node.now();
    let mut last_progress = start;
    let mut stopped_at: Option<Timestamp> = None;

    // 3. The loop (see kv_server): poll, do our work, wait when idle.
    loop {
        let mut busy = c.node.poll();
        busy |= c.take_events();
        busy |= c.take_answers();
        busy |= c.take_completions();

        let now = c.node.now();
        // `None` once the node has forgotten the session: it reaps an
        // ended (closed or failed) session once we took all it produced.
        let state = c.node.state(s);
        let ended = state.is_none_or(State::is_terminal);
        if stopped_at.is_none() {
            let stop = match &args.stop {
                Stop::Requests(n) => c.tally.requests + c.reserved >= *n,
                Stop::Seconds(d) => now - start >= *d,
                Stop::Stdin(flag) => flag.load(Ordering::Relaxed),
            };
            if stop || ended {
                println!("stopped sending after {} requests", c.tally.requests);
                stopped_at = Some(now);
            } else {
                let budget = match &args.stop {
                    Stop::Requests(n) => n - c.tally.requests - c.reserved,
                    _ => u64::MAX,
                };
                busy |= c.send_more(budget);
            }
        }
        if let Some(t) = stopped_at {
            // Done when every request was answered and every operation
            // completed (a write's PUTAT and GET may still follow).
            let drained = c.outstanding.is_empty() && c.ops.is_empty();
            if drained || ended || now - t >= DRAIN_LIMIT {
                break;
            }
        }

        if now - last_progress >= PROGRESS_EVERY {
            println!(
                "progress: t={:.1}s state={} sent={} answered={} outstanding={} losses={} resumes={}",
                (now - start).as_secs_f64(),
                state.map_or("ended", State::name),
                c.tally.requests,
                c.tally.answered,
                c.outstanding.len(),
                c.tally.losses,
                c.tally.resumes
            );
            last_progress = now;
        }

        if !busy {
            let cap = now + WAIT_CAP;
            // Returns on the first arrival, the node's next timer or `cap`;
            // the loop polls again either way.
            let _ = c.node.wait(Some(cap));
        }
    }

    // 4. Close: the session says goodbye (the server closes its half at
    //    once instead of recovering), then the node runs a moment longer
    //    so the goodbye leaves before the process does.
    if c.node.state(s).is_some_and(|st| !st.is_terminal()) {
        if let Err(e) = c.node.close(s) {
            println!("close: {e}");
        }
    }
    c.node.run_for(Duration::from_millis(200));
    c.take_events();
    // Operations still open now (only after a give-up or the drain limit)
    // completed with the close.
    c.take_completions();

    let t = &c.tally;
    let unanswered = c.outstanding.len() as u64;
    let unfinished = c.ops.len() as u64;
    let ok = t.answered == t.requests
        && unanswered == 0
        && t.duplicates == 0
        && t.wrong == 0
        && t.unexpected == 0
        && t.ops_failed == 0
        && t.ops_indeterminate == 0
        && unfinished == 0;
    println!(
        "RESULT role=client requests={} answered_once={} duplicates={} unanswered={unanswered} \
         wrong={} unexpected={} puts={} gets={} found={} writes={} ops_ok={} ops_failed={} \
         ops_indeterminate={} ops_unfinished={unfinished} losses={} resumes={} gave_up={} ok={ok}",
        t.requests,
        t.answered,
        t.duplicates,
        t.wrong,
        t.unexpected,
        t.puts,
        t.gets,
        t.found,
        t.writes,
        t.ops_ok,
        t.ops_failed,
        t.ops_indeterminate,
        t.losses,
        t.resumes,
        t.gave_up,
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

impl Client {
    /// Print the session's events; count losses and resumes.
    fn take_events(&mut self) -> bool {
        let mut any = false;
        while let Some(ev) = self.node.poll_event(self.s) {
            any = true;
            match ev {
                SessionEvent::DeviceLost { cause } => {
                    self.tally.losses += 1;
                    println!("event: device lost ({cause})");
                }
                SessionEvent::Recovering { attempt } => {
                    println!("event: recovering (attempt {attempt})");
                }
                SessionEvent::Resumed {
                    downtime,
                    replayed,
                    deduplicated,
                    device,
                } => {
                    self.tally.resumes += 1;
                    let dev = device.map_or("-".to_string(), |d| d.to_string());
                    println!(
                        "event: resumed after {downtime:.1?} on {dev} \
                         ({replayed} replayed, {deduplicated} duplicates dropped)"
                    );
                }
                SessionEvent::GaveUp => {
                    self.tally.gave_up = true;
                    println!("event: gave up");
                }
                SessionEvent::Refused { reason, retrying } => {
                    println!("event: refused ({reason:?}, retrying: {retrying})");
                }
                SessionEvent::AttemptFailed { attempt, reason } => {
                    println!("event: attempt {attempt} failed ({reason})");
                }
                SessionEvent::PeerLost { reason } => println!("event: peer lost ({reason})"),
                SessionEvent::Disconnected => println!("event: closed"),
                // Transitions: the events above say what matters; we
                // print only the first connection.
                SessionEvent::Transition(t) => {
                    if t.to == State::Established && !self.connected {
                        self.connected = true;
                        println!("event: connected");
                    }
                }
                other => println!("event: {other:?}"),
            }
        }
        any
    }

    /// Check the server's answers.
    fn take_answers(&mut self) -> bool {
        let mut any = false;
        while let Some((_seq, msg)) = self.node.poll_delivery(self.s) {
            any = true;
            let text = String::from_utf8_lossy(&msg);
            let (id, answer) = text.split_once(' ').unwrap_or((&text, ""));
            let Ok(id) = id.parse::<u64>() else {
                self.tally.unexpected += 1;
                println!("unexpected message {text:?}");
                continue;
            };
            if id == 0 {
                self.on_hello(answer);
                continue;
            }
            let Some(expect) = self.outstanding.remove(&id) else {
                if self.answered.contains(&id) {
                    self.tally.duplicates += 1;
                    println!("request {id} answered again: {answer:?}");
                } else {
                    self.tally.unexpected += 1;
                    println!("answer to request {id}, which was never sent: {answer:?}");
                }
                continue;
            };
            self.answered.insert(id);
            self.tally.answered += 1;
            if !expect.matches(answer) {
                self.tally.wrong += 1;
                println!("request {id}: expected {expect:?}, got {answer:?}");
            }
            if answer.starts_with("VALUE ") {
                self.tally.found += 1;
            }
            // A committed slot is ours again.
            if let Some(slot) = self.slot_of.remove(&id) {
                self.free_slots.push(slot);
            }
        }
        any
    }

    /// `0 HELLO <region> <len> <slot>`: where the server lets us write.
    fn on_hello(&mut self, hello: &str) {
        let f: Vec<u64> = hello
            .strip_prefix("HELLO ")
            .unwrap_or("")
            .split(' ')
            .filter_map(|w| w.parse().ok())
            .collect();
        match f[..] {
            [region, len, slot] if slot == SLOT && region <= u64::from(u32::MAX) => {
                let hello = Hello {
                    region: RegionId(region as u32),
                    slots: (len / SLOT).min(SLOTS),
                };
                println!("server region r{region}: {} slots", hello.slots);
                self.free_slots.retain(|&s| s < hello.slots);
                self.hello = Some(hello);
            }
            _ => {
                self.tally.unexpected += 1;
                println!("unexpected hello {hello:?}");
            }
        }
    }

    /// Each operation completes once: a message when the server's
    /// application has it, a WRITE when the server's memory holds it.
    fn take_completions(&mut self) -> bool {
        let mut any = false;
        while let Some(done) = self.node.poll_completion(self.s) {
            any = true;
            let Some(op) = self.ops.remove(&done.op) else {
                self.tally.ops_failed += 1;
                println!("a second completion of {}", done.op);
                continue;
            };
            match done.outcome {
                Outcome::Success { .. } => self.tally.ops_ok += 1,
                Outcome::Failed(e) => {
                    self.tally.ops_failed += 1;
                    println!("{} failed: {e}", done.op);
                }
                Outcome::Indeterminate { executed } => {
                    self.tally.ops_indeterminate += 1;
                    println!("{} indeterminate (executed: {executed:?})", done.op);
                }
                other => {
                    self.tally.ops_failed += 1;
                    println!("{} ended {other:?}", done.op);
                }
            }
            if let Op::Write { key, value, slot } = op {
                self.reserved -= 2;
                if done.outcome.is_success() {
                    // The value is in the server's memory: commit it, then
                    // read it back through the server.
                    self.tally.writes += 1;
                    let offset = slot * SLOT;
                    let id =
                        self.request(format!("PUTAT {key} {offset} {}", value.len()), Expect::Ok);
                    if let Some(id) = id {
                        self.slot_of.insert(id, slot);
                    }
                    self.model.insert(key.clone(), value.clone());
                    self.tally.gets += 1;
                    self.request(format!("GET {key}"), Expect::Value(value));
                } else {
                    self.free_slots.push(slot);
                }
            }
        }
        any
    }

    /// Send one request; remember what it must be answered.
    fn request(&mut self, body: String, expect: Expect) -> Option<u64> {
        let id = self.next_id;
        let text = format!("{id} {body}");
        match self.node.send(self.s, text.as_bytes()) {
            Ok(op) => {
                self.next_id += 1;
                self.tally.requests += 1;
                self.outstanding.insert(id, expect);
                self.ops.insert(op, Op::Request);
                Some(id)
            }
            Err(e) => {
                println!("cannot send request {id}: {e}");
                None
            }
        }
    }

    /// Fill the window with new work (at most `budget` requests).
    fn send_more(&mut self, mut budget: u64) -> bool {
        let mut any = false;
        while budget > 0 && self.outstanding.len() + self.ops.len() < WINDOW {
            any = true;
            let n = self.draws;
            self.draws += 1;
            let r = mix(n);
            let key = format!("{}-k{}", self.key_prefix, (r >> 8) % KEYS);
            match r % 10 {
                // A value by RDMA WRITE: needs the server's HELLO, a free
                // slot, and room for its PUTAT and GET.
                0 | 1 if self.hello.is_some() && budget >= 2 && !self.free_slots.is_empty() => {
                    let hello = self.hello.expect("checked");
                    let slot = self.free_slots.pop().expect("checked");
                    let value = value(n, 16 + (r >> 20) % (SLOT - 16));
                    let offset = slot * SLOT;
                    // Stage the bytes in our region; they must stay put
                    // until the WRITE completes.
                    let staging = self.node.region(self.s, STAGING).expect("our region");
                    staging
                        .write(offset as usize, value.as_bytes())
                        .expect("inside the region");
                    let local = LocalRange {
                        region: STAGING,
                        offset,
                        len: value.len() as u32,
                    };
                    // The server's slot, by token: relink translates it
                    // through the server's advertisement of the current
                    // connection when it posts the WRITE, also after a
                    // reconnection (new device, new rkey).
                    let remote = BufferToken {
                        region: hello.region,
                        offset,
                    };
                    match self.node.write(self.s, local, remote) {
                        Ok(op) => {
                            self.ops.insert(op, Op::Write { key, value, slot });
                            self.reserved += 2;
                            budget -= 2;
                        }
                        Err(e) => {
                            println!("cannot write: {e}");
                            self.free_slots.push(slot);
                            return any;
                        }
                    }
                }
                0..=5 => {
                    let value = value(n, 8 + (r >> 20) % 48);
                    self.model.insert(key.clone(), value.clone());
                    self.tally.puts += 1;
                    if self
                        .request(format!("PUT {key} {value}"), Expect::Ok)
                        .is_none()
                    {
                        return any;
                    }
                    budget -= 1;
                }
                _ => {
                    let expect = match self.model.get(&key) {
                        Some(v) => Expect::Value(v.clone()),
                        None => Expect::NotFound,
                    };
                    self.tally.gets += 1;
                    if self.request(format!("GET {key}"), expect).is_none() {
                        return any;
                    }
                    budget -= 1;
                }
            }
        }
        any
    }
}

/// A value of `len` letters and digits, different for every `n`.
fn value(n: u64, len: u64) -> String {
    let head = format!("v{n}-");
    let mut v = head.clone();
    let mut x = mix(n ^ 0xabcd);
    while (v.len() as u64) < len.max(head.len() as u64 + 1) {
        v.push(char::from(
            b"abcdefghijklmnopqrstuvwxyz0123456789"[(x % 36) as usize],
        ));
        x = mix(x);
    }
    v
}

/// splitmix64: a fixed, well-spread pseudo-random number for `n`.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
