//! relink on real RDMA: a client writes into a server's registered memory
//! with RDMA WRITE, the server checks the bytes, they exchange messages,
//! and the client closes the session in order.
//!
//! ```text
//! verbs_write server <listen-ip:port>
//! verbs_write client <local-ip> <server-ip:port> [bytes]
//! ```
//!
//! What happens:
//!
//! 1. The server listens; the client connects (`relink::Node` on
//!    `relink_verbs::VerbsProvider`). Each side registers one region of
//!    64 KiB on its device and advertises it to the peer.
//! 2. The client fills `bytes` (default 65536) of its region with a
//!    pattern, RDMA-WRITEs them into the server's region and waits for the
//!    WRITE's completion (RC acknowledged: the bytes are in the server's
//!    memory).
//! 3. The client sends a message `wrote <bytes> <checksum>`. RC executes in
//!    order, so when the server reads the message the WRITE has landed: it
//!    checksums its region and answers `ok <checksum>` (or `mismatch ...`).
//! 4. The client reads the answer, then shuts its node down
//!    (`Node::shutdown`: the session closes with its goodbye once nothing is
//!    pending). The server sees `SessionEvent::Disconnected` — a close, not
//!    a loss — and exits.
//!
//! Each side exits 0 when everything checked out, 1 otherwise (2: bad
//! arguments or no RDMA). Logs: `RELINK_LOG=relink=debug` (stderr).
//!
//! ## Two hosts with Soft-RoCE (rxe)
//!
//! Build with rdma-core's development files installed (Debian:
//! `apt-get install libibverbs-dev librdmacm-dev pkg-config libclang-dev`):
//!
//! ```text
//! cargo build --release -p relink-verbs --features rdma --example verbs_write
//! ```
//!
//! On each host, an rxe device on the interface that carries the address
//! (as root; `rdma` is in iproute2, `rdma_rxe` in the kernel):
//!
//! ```text
//! modprobe rdma_rxe
//! rdma link add rxe0 type rxe netdev eth0
//! ```
//!
//! Then, with the server at 192.0.2.2 and the client at 192.0.2.1:
//!
//! ```text
//! server$ RDMAV_ALLOW_DISASSOC_DESTROY=1 target/release/examples/verbs_write server 192.0.2.2:7471
//! client$ RDMAV_ALLOW_DISASSOC_DESTROY=1 target/release/examples/verbs_write client 192.0.2.1 192.0.2.2:7471
//! ```
//!
//! The VM tier (`tests/vm/run.sh`, group `example`) runs both roles on one
//! guest, the server on rxe1 (10.10.0.2), the client on rxe0 (10.10.0.1).

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use relink::{
    Access, BufferToken, LocalRange, Node, Path, RegionId, RegionOptions, SessionEvent,
    SessionHandle, SessionOptions, State,
};
use relink_verbs::{VerbsConfig, VerbsProvider};

/// The one region each side registers (the same id on both sides).
const REGION: RegionId = RegionId(1);
/// Its length.
const REGION_LEN: u64 = 64 * 1024;
/// How long each step may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);

fn options() -> SessionOptions {
    SessionOptions::builder()
        .region(
            RegionOptions::new(
                REGION,
                REGION_LEN,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            )
            .advertise(true),
        )
        .build()
        .expect("valid options")
}

/// FNV-1a of `bytes`: the checksum the two sides compare.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Poll `node` until `done` says so, or fail after [`STEP_TIMEOUT`].
fn until(
    node: &mut Node,
    what: &str,
    mut done: impl FnMut(&mut Node) -> Option<Result<(), String>>,
) -> Result<(), String> {
    let give_up = Instant::now() + STEP_TIMEOUT;
    loop {
        if let Some(r) = done(node) {
            return r;
        }
        if Instant::now() > give_up {
            return Err(format!("{what}: nothing after {STEP_TIMEOUT:?}"));
        }
        let _ = node.wait_for(Duration::from_millis(10));
    }
}

/// The next event of `s` that ends it, as an error (`None` while there
/// is none).
fn ended(node: &mut Node, s: SessionHandle) -> Option<String> {
    while let Some(e) = node.poll_event(s) {
        match e {
            SessionEvent::Transition(_) => {}
            SessionEvent::Disconnected | SessionEvent::GaveUp | SessionEvent::PeerLost { .. } => {
                return Some(format!("the session ended: {e:?}"));
            }
            other => println!("  event: {other:?}"),
        }
    }
    None
}

fn provider(source: Option<IpAddr>) -> Result<Arc<VerbsProvider>, String> {
    VerbsProvider::with_config(VerbsConfig {
        default_source: source,
        ..VerbsConfig::default()
    })
    .map(Arc::new)
    .map_err(|e| format!("no RDMA provider: {e}"))
}

fn server(listen: SocketAddr) -> Result<(), String> {
    let mut node = Node::new(provider(None)?);
    node.listen(listen, options())
        .map_err(|e| format!("listen on {listen}: {e}"))?;
    println!("server: listening on {listen}");
    let mut session = None;
    until(&mut node, "waiting for the client", |n| {
        session = n.accept().map(|a| a.session);
        session.map(|_| Ok(()))
    })?;
    let t = session.expect("accepted");
    println!("server: session accepted");

    // The client's announcement; its WRITE has landed before it (RC order).
    let mut note = Vec::new();
    until(&mut node, "waiting for the client's message", |n| {
        if let Some((_, m)) = n.poll_delivery(t) {
            note = m;
            return Some(Ok(()));
        }
        ended(n, t).map(Err)
    })?;
    let note = String::from_utf8_lossy(&note).into_owned();
    println!("server: received {note:?}");
    let mut words = note.split_whitespace();
    let (Some("wrote"), Some(len), Some(sum)) = (words.next(), words.next(), words.next()) else {
        return Err(format!("unexpected message {note:?}"));
    };
    let len: usize = len.parse().map_err(|_| format!("bad length in {note:?}"))?;
    if len as u64 > REGION_LEN {
        return Err(format!("{len} bytes do not fit the region"));
    }
    let region = node.region(t, REGION).map_err(|e| e.to_string())?;
    let got = region.read_vec(0, len).map_err(|e| e.to_string())?;
    let mine = format!("{:016x}", checksum(&got));
    let verified = mine == sum;
    let answer = if verified {
        format!("ok {mine}")
    } else {
        format!("mismatch: the region holds {mine}, not {sum}")
    };
    println!("server: the WRITE's {len} bytes in my region: {answer}");
    node.send(t, answer.as_bytes())
        .map_err(|e| format!("answer: {e}"))?;

    // The client closes: a close (its goodbye), never a loss.
    until(&mut node, "waiting for the client to close", |n| {
        while let Some(e) = n.poll_event(t) {
            match e {
                SessionEvent::Disconnected => return Some(Ok(())),
                SessionEvent::DeviceLost { cause } => {
                    return Some(Err(format!(
                        "the client's close looked like a loss ({cause})"
                    )))
                }
                _ => {}
            }
        }
        None
    })?;
    println!("server: the client closed the session");
    while node.poll_completion(t).is_some() {}
    if verified {
        Ok(())
    } else {
        Err("the WRITE's data did not check out".into())
    }
}

fn client(local: IpAddr, peer: SocketAddr, len: usize) -> Result<(), String> {
    if len == 0 || len as u64 > REGION_LEN {
        return Err(format!("bytes must be 1..={REGION_LEN}"));
    }
    let mut node = Node::new(provider(Some(local))?);
    let path = Path {
        local: Some(local),
        peer,
    };
    let started = Instant::now();
    let s = node
        .connect(vec![path], options())
        .map_err(|e| format!("connect: {e}"))?;
    until(&mut node, "connecting", |n| {
        if n.state(s) == Some(State::Established) {
            return Some(Ok(()));
        }
        ended(n, s).map(Err)
    })?;
    let device = node.device(s).map(|d| d.to_string()).unwrap_or_default();
    println!(
        "client: connected to {peer} on {device} in {:.1} ms",
        started.elapsed().as_secs_f64() * 1e3
    );

    // Fill the local region and WRITE it into the server's.
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
    let sum = format!("{:016x}", checksum(&data));
    let region = node.region(s, REGION).map_err(|e| e.to_string())?;
    region.write(0, &data).map_err(|e| e.to_string())?;
    let local_range = LocalRange {
        region: REGION,
        offset: 0,
        len: len as u32,
    };
    let remote = BufferToken {
        region: REGION,
        offset: 0,
    };
    let t0 = Instant::now();
    let op = node
        .write(s, local_range, remote)
        .map_err(|e| format!("write: {e}"))?;
    until(&mut node, "the WRITE's completion", |n| {
        if let Some(c) = n.poll_completion(s) {
            return Some(if c.op == op && c.outcome.is_success() {
                Ok(())
            } else {
                Err(format!("the WRITE completed {:?}", c.outcome))
            });
        }
        ended(n, s).map(Err)
    })?;
    println!(
        "client: RDMA WRITE of {len} bytes completed in {:.2} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );

    // Tell the server; read its verdict.
    let note = format!("wrote {len} {sum}");
    node.send(s, note.as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut answer = Vec::new();
    until(&mut node, "the server's answer", |n| {
        if let Some((_, m)) = n.poll_delivery(s) {
            answer = m;
            return Some(Ok(()));
        }
        ended(n, s).map(Err)
    })?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    println!("client: the server answered {answer:?}");
    let mut done = 0;
    while let Some(c) = node.poll_completion(s) {
        if !c.outcome.is_success() {
            return Err(format!("the message completed {:?}", c.outcome));
        }
        done += 1;
    }

    // Close in order: nothing is pending (the message's completion may
    // still be on its way), then the goodbye, then every object freed.
    let summary = node.shutdown(Duration::from_secs(5));
    while let Some(c) = node.poll_completion(s) {
        if !c.outcome.is_success() {
            return Err(format!("the message completed {:?}", c.outcome));
        }
        done += 1;
    }
    println!("client: shut down: {summary:?}");
    if done != 1 || summary.clean != 1 || summary.goodbyes_cut != 0 {
        return Err(format!(
            "the close was not clean ({done} message completions, {summary:?})"
        ));
    }
    if answer != format!("ok {sum}") {
        return Err(format!("the server did not confirm the data: {answer:?}"));
    }
    println!(
        "client: done in {:.1} ms; RELINK_VM_NOTE: {len} B written and verified, messages exchanged, closed cleanly",
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: verbs_write server <listen-ip:port>\n       verbs_write client <local-ip> <server-ip:port> [bytes]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RELINK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["server", listen] => match listen.parse() {
            Ok(addr) => server(addr),
            Err(_) => return usage(),
        },
        ["client", local, peer, rest @ ..] if rest.len() <= 1 => {
            let (Ok(local), Ok(peer)) = (local.parse(), peer.parse()) else {
                return usage();
            };
            let len = match rest.first().map(|b| b.parse()) {
                None => 65536,
                Some(Ok(n)) => n,
                Some(Err(_)) => return usage(),
            };
            client(local, peer, len)
        }
        _ => return usage(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.starts_with("no RDMA provider") => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("FAILED: {e}");
            ExitCode::from(1)
        }
    }
}
