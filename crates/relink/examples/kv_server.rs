//! A small key-value server over relink sessions — run it with
//! `kv_client` (see the README's "Sessions across two processes").
//!
//! ```sh
//! cargo run --release -p relink --example kv_server -- \
//!     --dir /tmp/kv/b --listen 127.0.0.2:7480
//! ```
//!
//! What it shows: how a process makes a provider (the soft fabric over
//! TCP) and a [`Node`], listens, accepts sessions, advertises a memory
//! region the peer writes into with one-sided RDMA, answers messages, and
//! drives everything from one real-time loop: [`Node::poll`], then the
//! application's work, then [`Node::wait`] until something arrives or
//! the node's next deadline. Device loss, recovery and resumption happen inside the
//! session: the server only prints the events; it answers every request
//! exactly once and never re-sends anything itself.
//!
//! # The protocol (text messages, one request or answer per message)
//!
//! | client → server | server → client |
//! |---|---|
//! | | `0 HELLO <region> <len> <slot>` (first message of every session) |
//! | `<id> PUT <key> <value>` | `<id> OK` |
//! | `<id> GET <key>` | `<id> VALUE <value>` or `<id> NOTFOUND` |
//! | `<id> PUTAT <key> <offset> <len>` | `<id> OK` (the value is read from the advertised region) |
//! | anything else | `<id> ERROR <why>` |
//!
//! `<id>` numbers a session's requests from 1; the server checks that they
//! arrive in order, each once. `PUTAT` commits a value the client wrote
//! into the server's advertised region with an RDMA WRITE (named by a
//! token: region id + offset, never an address or rkey, so it stays valid
//! across a device reset).
//!
//! Arguments: `--dir DIR` (this host's soft device directory, default
//! `$RELINK_SOFT_DIR` or the per-user runtime directory), `--listen
//! ADDR:PORT` (an address of a device in DIR), `--once` (exit after the
//! first session ended). For every session that ends it prints one
//! `RESULT role=server ...` line; with `--once` it exits 0 if that session
//! saw nothing wrong, 1 otherwise.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use relink::{
    Access, Node, OpId, RegionId, RegionOptions, SessionEvent, SessionHandle, SessionOptions, State,
};
use relink_soft::{Registry, TcpHost};

/// The region every session advertises for the client's RDMA WRITEs.
const VALUES: RegionId = RegionId(1);
/// Its slots: one value each.
const SLOT: u64 = 256;
const SLOTS: u64 = 64;
/// The longest the loop sleeps when there is nothing to do (it wakes
/// earlier for any event or session timer).
const WAIT_CAP: Duration = Duration::from_millis(100);
/// How often a progress line is printed (when anything changed).
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

struct Args {
    dir: PathBuf,
    listen: SocketAddr,
    once: bool,
}

fn usage() -> ! {
    eprintln!("usage: kv_server --listen ADDR:PORT [--dir DIR] [--once]");
    std::process::exit(2);
}

fn parse_args() -> Args {
    let mut dir = None;
    let mut listen = None;
    let mut once = false;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--dir" => dir = it.next().map(PathBuf::from),
            "--listen" => listen = it.next().and_then(|s| s.parse().ok()),
            "--once" => once = true,
            _ => usage(),
        }
    }
    Args {
        dir: dir.unwrap_or_else(Registry::default_dir),
        listen: listen.unwrap_or_else(|| usage()),
        once,
    }
}

/// What the server keeps for one session (one client).
#[derive(Default)]
struct Conn {
    /// The last request id received: the next must be this + 1.
    last_id: u64,
    requests: u64,
    /// Requests whose id was not the next one (a duplicate or a gap: never
    /// expected, relink delivers every message once, in order).
    out_of_order: u64,
    puts: u64,
    gets: u64,
    putats: u64,
    errors: u64,
    /// Answers (and the HELLO) sent, and how their sends completed.
    answers: u64,
    answers_ok: u64,
    answers_failed: u64,
    /// Answer operations not completed yet.
    in_flight: HashSet<OpId>,
    losses: u64,
    resumes: u64,
}

impl Conn {
    fn clean(&self) -> bool {
        self.out_of_order == 0 && self.answers_failed == 0
    }
}

fn main() -> ExitCode {
    let args = parse_args();

    // 1. The provider: this process's view of the soft devices in `dir`.
    //    The devices are host-wide (`relink soft-device add ... --dir DIR`);
    //    a reset or removal there reaches every process that opened DIR.
    let provider = match TcpHost::open(&args.dir) {
        Ok(p) => Arc::new(p),
        Err(e) => {
            eprintln!("kv_server: cannot open {}: {e}", args.dir.display());
            return ExitCode::from(2);
        }
    };

    // 2. The node: it owns every session of this process and drives them.
    //    `Node::new` draws session ids and secrets from the OS's random
    //    number generator (`Node::seeded_for_simulation` is for simulations).
    let mut node = Node::new(provider.clone());

    // 3. Listen. The options apply to every session the listener accepts:
    //    here, each session gets its own region of value slots, registered
    //    on whichever device carries the session and advertised to the
    //    client (again after every reconnection, with the new key).
    let opts = SessionOptions::builder()
        .region(
            RegionOptions::new(
                VALUES,
                SLOT * SLOTS,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            )
            .advertise(true),
        )
        .build()
        .expect("a value region of a valid size");
    if let Err(e) = node.listen(args.listen, opts) {
        eprintln!("kv_server: cannot listen on {}: {e}", args.listen);
        return ExitCode::from(2);
    }
    println!("listening on {}", args.listen);

    // The store, shared by every client.
    let mut store: HashMap<String, String> = HashMap::new();
    let mut conns: HashMap<SessionHandle, Conn> = HashMap::new();
    // One buffer every delivered message is swapped into (no allocation
    // per message).
    let mut msg = Vec::new();
    let mut last_progress = node.now();
    let mut changed = false;

    // 4. The loop, in real time: let the node do what it can (`poll`), do
    //    the application's work, and sleep in `Node::wait` only when
    //    neither did anything — until the node's next timer (keepalive,
    //    reconnection backoff, ...) or `WAIT_CAP`, whichever is first. Any
    //    provider event (a message, a completion, a device event) ends the
    //    wait early.
    loop {
        let mut busy = node.poll();

        // New sessions: greet each with where it may write values.
        while let Some(a) = node.accept() {
            let s = a.session;
            println!("session {s:?}: accepted from {}", a.peer);
            let mut c = Conn::default();
            let hello = format!("0 HELLO {} {} {SLOT}", VALUES.0, SLOT * SLOTS);
            answer(&mut node, s, &mut c, &hello);
            conns.insert(s, c);
            busy = true;
        }

        let mut ended = Vec::new();
        for (&s, c) in conns.iter_mut() {
            // Session events: print them. Recovery needs nothing from us.
            while let Some(ev) = node.poll_event(s) {
                busy = true;
                report_event(s, &ev, c);
            }
            // Requests, in order, each once.
            while node.poll_delivery_into(s, &mut msg).is_some() {
                busy = true;
                changed = true;
                let text = String::from_utf8_lossy(&msg).into_owned();
                let reply = serve(&node, s, c, &mut store, &text);
                answer(&mut node, s, c, &reply);
            }
            // Completions of our answers: each arrives once; success means
            // the client's application has the answer.
            while let Some(done) = node.poll_completion(s) {
                busy = true;
                if !c.in_flight.remove(&done.op) {
                    println!("session {s:?}: a second completion of {}", done.op);
                    c.answers_failed += 1;
                } else if done.outcome.is_success() {
                    c.answers_ok += 1;
                } else {
                    c.answers_failed += 1;
                    println!("session {s:?}: answer {} ended {:?}", done.op, done.outcome);
                }
            }
            // Ended: closed (the client's goodbye) or failed (gave up).
            // `None`: the node already forgot it (it reaps an ended session
            // once the application took everything the session produced).
            let state = node.state(s);
            if state.is_none_or(State::is_terminal) {
                ended.push((s, state));
            }
        }

        // 5. A session is over when it is closed (the client's goodbye) or
        //    failed (gave up): report it and forget it.
        for (s, state) in ended {
            let mut c = conns.remove(&s).expect("present");
            let state = state.map_or("reaped", State::name);
            // Answers still pending when the session ended complete now.
            while let Some(done) = node.poll_completion(s) {
                if c.in_flight.remove(&done.op) {
                    if done.outcome.is_success() {
                        c.answers_ok += 1;
                    } else {
                        c.answers_failed += 1;
                    }
                }
            }
            println!(
                "RESULT role=server session={s:?} end={state} requests={} out_of_order={} \
                 puts={} gets={} putats={} errors={} answers={} answers_ok={} answers_failed={} \
                 answers_pending={} losses={} resumes={} ok={}",
                c.requests,
                c.out_of_order,
                c.puts,
                c.gets,
                c.putats,
                c.errors,
                c.answers,
                c.answers_ok,
                c.answers_failed,
                c.in_flight.len(),
                c.losses,
                c.resumes,
                c.clean()
            );
            if args.once {
                return if c.clean() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                };
            }
        }

        let now = node.now();
        if changed && now - last_progress >= PROGRESS_EVERY {
            let requests: u64 = conns.values().map(|c| c.requests).sum();
            println!(
                "progress: sessions={} requests={requests} keys={}",
                conns.len(),
                store.len()
            );
            last_progress = now;
            changed = false;
        }

        if !busy {
            let cap = now + WAIT_CAP;
            // Returns on the first arrival, the node's next timer or `cap`;
            // the loop polls again either way.
            let _ = node.wait(Some(cap));
        }
    }
}

/// Send `text` to the client as a message; relink delivers it exactly once
/// (replayed after a loss if needed) and completes the operation once.
fn answer(node: &mut Node, s: SessionHandle, c: &mut Conn, text: &str) {
    match node.send(s, text.as_bytes()) {
        Ok(op) => {
            c.answers += 1;
            c.in_flight.insert(op);
        }
        // Only a closed or failed session refuses a message here.
        Err(e) => println!("session {s:?}: cannot answer: {e}"),
    }
}

/// Carry out one request; returns the answer.
fn serve(
    node: &Node,
    s: SessionHandle,
    c: &mut Conn,
    store: &mut HashMap<String, String>,
    text: &str,
) -> String {
    let mut words = text.splitn(3, ' ');
    let Some(id) = words.next().and_then(|w| w.parse::<u64>().ok()) else {
        c.errors += 1;
        return "0 ERROR no request id".to_string();
    };
    c.requests += 1;
    if id != c.last_id + 1 {
        c.out_of_order += 1;
        println!(
            "session {s:?}: request {id} after {}: out of order",
            c.last_id
        );
    }
    c.last_id = c.last_id.max(id);
    let verb = words.next().unwrap_or("");
    let rest = words.next().unwrap_or("");
    match verb {
        "PUT" => {
            let Some((key, value)) = rest.split_once(' ') else {
                c.errors += 1;
                return format!("{id} ERROR PUT needs a key and a value");
            };
            c.puts += 1;
            store.insert(key.to_string(), value.to_string());
            format!("{id} OK")
        }
        "GET" => {
            c.gets += 1;
            match store.get(rest) {
                Some(v) => format!("{id} VALUE {v}"),
                None => format!("{id} NOTFOUND"),
            }
        }
        "PUTAT" => {
            // The value is already in our region: the client's RDMA WRITE
            // completed (the fabric acknowledged it) before it sent this.
            let mut f = rest.split(' ');
            let (Some(key), Some(off), Some(len)) = (f.next(), f.next(), f.next()) else {
                c.errors += 1;
                return format!("{id} ERROR PUTAT needs a key, an offset and a length");
            };
            let (Ok(off), Ok(len)) = (off.parse::<usize>(), len.parse::<usize>()) else {
                c.errors += 1;
                return format!("{id} ERROR bad offset or length");
            };
            let bytes = node
                .region(s, VALUES)
                .ok()
                .and_then(|m| m.read_vec(off, len).ok());
            match bytes.map(String::from_utf8) {
                Some(Ok(v)) => {
                    c.putats += 1;
                    store.insert(key.to_string(), v);
                    format!("{id} OK")
                }
                _ => {
                    c.errors += 1;
                    format!("{id} ERROR no text at {off}+{len}")
                }
            }
        }
        _ => {
            c.errors += 1;
            format!("{id} ERROR unknown request {verb:?}")
        }
    }
}

/// Print a session event (device lost, recovering, resumed, gave up, ...).
fn report_event(s: SessionHandle, ev: &SessionEvent, c: &mut Conn) {
    match ev {
        SessionEvent::DeviceLost { cause } => {
            c.losses += 1;
            println!("session {s:?}: event: device lost ({cause})");
        }
        SessionEvent::Recovering { attempt } => {
            println!("session {s:?}: event: recovering (attempt {attempt})");
        }
        SessionEvent::Resumed {
            downtime,
            replayed,
            device,
            ..
        } => {
            c.resumes += 1;
            let dev = device.as_ref().map_or("-".to_string(), |d| d.to_string());
            println!(
                "session {s:?}: event: resumed after {downtime:.1?} on {dev} ({replayed} replayed)"
            );
        }
        SessionEvent::GaveUp => println!("session {s:?}: event: gave up"),
        SessionEvent::PeerLost { reason } => println!("session {s:?}: event: peer lost ({reason})"),
        SessionEvent::Refused { reason, retrying } => {
            println!("session {s:?}: event: refused ({reason:?}, retrying: {retrying})");
        }
        SessionEvent::AttemptFailed { attempt, reason } => {
            println!("session {s:?}: event: attempt {attempt} failed ({reason})");
        }
        SessionEvent::Disconnected => println!("session {s:?}: event: closed by the client"),
        // State transitions: the events above say what matters.
        SessionEvent::Transition(_) => {}
        other => println!("session {s:?}: event: {other:?}"),
    }
}
