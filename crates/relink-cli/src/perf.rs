//! `relink perf`: a bandwidth test over the soft TCP fabric, in the manner
//! of perftest's `ib_send_bw` / `ib_write_bw`.
//!
//! - `relink perf server --bind ADDR:PORT` listens, and for every connection
//!   registers a buffer (sent to the client in the accept's private data)
//!   and keeps receives posted. It survives connections ending and devices
//!   going away: it cleans up what belonged to them, and when its own
//!   listener loses its device it listens again once a device owning the
//!   address comes back. It prints one line per event.
//! - `relink perf client --connect ADDR:PORT --op send|write` keeps `--depth`
//!   requests outstanding for `--iters` requests or `--duration` seconds and
//!   prints messages/s and GB/s.
//!
//! Both sides use nothing but the [`Provider`] trait, on a
//! [`TcpHost`] attached to the soft devices of the runtime directory.
//!
//! The client prints the line `running` (in either output mode) once its
//! first request completed, so that a script can wait for traffic to flow;
//! then one result: a text report, or with `--json` one JSON object on the
//! last line. The server prints one line (or JSON object) per event.
//!
//! Private data, all integers big-endian, each led by the magic `RLPF` and
//! version 1 (decoders check the length and ignore trailing bytes, which a
//! transport may add as padding):
//!
//! - connect (client to server, 14 bytes): magic, version, op (0 send,
//!   1 write), message size u32, depth u32;
//! - accept (server to client, 21 bytes): magic, version, buffer address
//!   u64, rkey u32, length u32.
//!
//! Client exit status: 0 when every request succeeded; 3 when a completion
//! had an error status or the connection ended (the report names the first
//! error status and accounts for every outstanding request); 4 when no
//! completion arrived for [`STALL_TIMEOUT`] while requests were outstanding;
//! 1 for any other failure (connection setup, bad arguments found late).

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use clap::{Args, Subcommand, ValueEnum};
use relink_fabric::{
    Access, AsyncEvent, CmEvent, CmEventKind, CmId, ConnParams, ContextId, CqId, DestroyError,
    Destroyed, DeviceEvent, DeviceEventKind, DeviceId, ErrorClass, Event, Memory, MrId, MrInfo,
    PdId, Provider, QpCaps, QpId, QpInit, RecvWr, RejectReason, RemoteAddr, SendOp, SendWr, Sge,
    Timestamp, WcStatus, WorkCompletion, MAX_REJECT_PRIVATE_DATA,
};
use relink_soft::{Registry, TcpHost};
use serde_json::json;

/// How long the client waits for a completion while requests are
/// outstanding before it gives up (exit status 4).
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connection setup (resolve, route, connect) may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Address and route resolution timeout handed to the provider.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest message (and server buffer): the soft fabric's largest payload.
pub const MAX_SIZE: u64 = relink_soft::MAX_PAYLOAD as u64;
/// Largest `--depth`.
pub const MAX_DEPTH: u32 = 16384;
/// Most receives the server keeps posted per connection.
const MAX_SERVER_RECVS: u32 = 2 * MAX_DEPTH;
/// Completions polled per call.
const POLL_BATCH: usize = 256;
/// Longest sleep of an event loop between checks.
const TICK: Duration = Duration::from_millis(100);
/// How often the server retries listening after its listener lost its device.
const RELISTEN_INTERVAL: Duration = Duration::from_millis(200);

/// Exit status of a run whose traffic failed (error completion, connection end).
pub const EXIT_TRAFFIC_ERROR: i32 = 3;
/// Exit status of a run that stalled (no completion for [`STALL_TIMEOUT`]).
pub const EXIT_STALLED: i32 = 4;

/// `relink perf <server|client> ...`.
#[derive(Debug, Args)]
pub struct PerfArgs {
    #[command(subcommand)]
    role: Role,
}

/// Which end to run.
#[derive(Debug, Subcommand)]
enum Role {
    /// Accept connections and serve as the target of the traffic, until
    /// killed (or after one connection with --once).
    Server(ServerArgs),
    /// Connect to a server, run the traffic and report the rates. Exit
    /// status 3 if a request fails or the connection ends, 4 if completions
    /// stop arriving for 10 s.
    Client(ClientArgs),
}

/// Options of `relink perf server`.
#[derive(Debug, Args)]
struct ServerArgs {
    /// Soft device registry directory [default: $RELINK_SOFT_DIR, else
    /// $XDG_RUNTIME_DIR/relink-soft, else /tmp/relink-soft-<uid>].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Address to listen on: a soft device's address, or 0.0.0.0 / :: for
    /// every device (port 0 picks a port, printed in the `listening` line).
    #[arg(long, value_name = "ADDR:PORT")]
    bind: SocketAddr,
    /// Exit after the first connection ends.
    #[arg(long)]
    once: bool,
    /// Print each event as one JSON object per line.
    #[arg(long)]
    json: bool,
    /// Bytes of the buffer registered per connection; messages may be at
    /// most this long (K and M suffixes: KiB, MiB).
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = parse_size)]
    buf_size: u32,
}

/// Options of `relink perf client`.
#[derive(Debug, Args)]
struct ClientArgs {
    /// Soft device registry directory [default: $RELINK_SOFT_DIR, else
    /// $XDG_RUNTIME_DIR/relink-soft, else /tmp/relink-soft-<uid>].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The server's address.
    #[arg(long, value_name = "ADDR:PORT")]
    connect: SocketAddr,
    /// The operation: two-sided SEND or one-sided RDMA WRITE.
    #[arg(long, value_enum)]
    op: Op,
    /// Bytes per message (K and M suffixes: KiB, MiB); at most the
    /// server's buffer size.
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    size: u32,
    /// Requests kept outstanding (1..=16384).
    #[arg(long, value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_DEPTH)))]
    depth: u32,
    #[command(flatten)]
    amount: Amount,
    /// Print the result as one JSON object (on the last line).
    #[arg(long)]
    json: bool,
}

/// How much traffic to run: exactly one of the two.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
struct Amount {
    /// Number of requests to complete.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    iters: Option<u64>,
    /// Seconds to post requests for (fractions allowed, e.g. 0.5).
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    duration: Option<Duration>,
}

/// The operation the client runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Op {
    /// SEND: consumes a receive the server posted.
    Send,
    /// RDMA WRITE into the server's buffer.
    Write,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::Write => "write",
        }
    }

    fn code(self) -> u8 {
        match self {
            Op::Send => 0,
            Op::Write => 1,
        }
    }

    fn from_code(c: u8) -> Option<Op> {
        match c {
            0 => Some(Op::Send),
            1 => Some(Op::Write),
            _ => None,
        }
    }
}

/// Parses a byte count: digits with an optional `K`/`KiB` or `M`/`MiB`
/// suffix, 1..=[`MAX_SIZE`].
fn parse_size(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let (digits, mult) = if let Some(d) = t.strip_suffix("KiB").or(t.strip_suffix(['K', 'k'])) {
        (d, 1u64 << 10)
    } else if let Some(d) = t.strip_suffix("MiB").or(t.strip_suffix(['M', 'm'])) {
        (d, 1u64 << 20)
    } else {
        (t, 1)
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a byte count (digits, optionally K or M)"))?;
    let bytes = n
        .checked_mul(mult)
        .filter(|b| (1..=MAX_SIZE).contains(b))
        .ok_or_else(|| format!("{s:?} is out of range (1 byte ..= {MAX_SIZE} bytes)"))?;
    u32::try_from(bytes).map_err(|_| format!("{s:?} is too large"))
}

/// Parses a positive number of seconds (at most a day).
fn parse_secs(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= 86_400.0) {
        return Err(format!(
            "{s:?} is out of range (more than 0, at most 86400)"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

// ---------------------------------------------------------------------------
// private data
// ---------------------------------------------------------------------------

/// Leads both private data formats.
const MAGIC: [u8; 4] = *b"RLPF";
/// Version of both private data formats.
const VERSION: u8 = 1;

/// What the client tells the server in the connect's private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hello {
    op: Op,
    size: u32,
    depth: u32,
}

impl Hello {
    /// Encoded length: magic, version, op, size, depth.
    const LEN: usize = 4 + 1 + 1 + 4 + 4;

    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        v.extend_from_slice(&MAGIC);
        v.push(VERSION);
        v.push(self.op.code());
        v.extend_from_slice(&self.size.to_be_bytes());
        v.extend_from_slice(&self.depth.to_be_bytes());
        v
    }

    /// Decodes; trailing bytes are ignored (a transport may pad private data).
    fn decode(data: &[u8]) -> Result<Hello, String> {
        let b = check_header(data, Self::LEN, "connect")?;
        let op = Op::from_code(b[5]).ok_or_else(|| format!("unknown operation code {}", b[5]))?;
        Ok(Hello {
            op,
            size: u32::from_be_bytes(b[6..10].try_into().expect("4 bytes")),
            depth: u32::from_be_bytes(b[10..14].try_into().expect("4 bytes")),
        })
    }
}

/// What the server tells the client in the accept's private data: its
/// buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BufferInfo {
    addr: u64,
    rkey: u32,
    len: u32,
}

impl BufferInfo {
    /// Encoded length: magic, version, addr, rkey, len.
    const LEN: usize = 4 + 1 + 8 + 4 + 4;

    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        v.extend_from_slice(&MAGIC);
        v.push(VERSION);
        v.extend_from_slice(&self.addr.to_be_bytes());
        v.extend_from_slice(&self.rkey.to_be_bytes());
        v.extend_from_slice(&self.len.to_be_bytes());
        v
    }

    /// Decodes; trailing bytes are ignored (a transport may pad private data).
    fn decode(data: &[u8]) -> Result<BufferInfo, String> {
        let b = check_header(data, Self::LEN, "accept")?;
        Ok(BufferInfo {
            addr: u64::from_be_bytes(b[5..13].try_into().expect("8 bytes")),
            rkey: u32::from_be_bytes(b[13..17].try_into().expect("4 bytes")),
            len: u32::from_be_bytes(b[17..21].try_into().expect("4 bytes")),
        })
    }
}

/// Checks length, magic and version of private data; returns its first
/// `len` bytes.
fn check_header<'a>(data: &'a [u8], len: usize, what: &str) -> Result<&'a [u8], String> {
    if data.len() < len {
        return Err(format!(
            "{what} private data of {} bytes is too short for relink perf ({len} bytes)",
            data.len()
        ));
    }
    if data[..4] != MAGIC {
        return Err(format!("{what} private data is not from relink perf"));
    }
    if data[4] != VERSION {
        return Err(format!(
            "{what} private data has version {}, this relink perf speaks {VERSION}",
            data[4]
        ));
    }
    Ok(&data[..len])
}

// ---------------------------------------------------------------------------
// names
// ---------------------------------------------------------------------------

/// The `ibv_wc_status` name of a status, without the `IBV_WC_` prefix.
fn status_name(s: WcStatus) -> &'static str {
    match s {
        WcStatus::Success => "SUCCESS",
        WcStatus::LocLenErr => "LOC_LEN_ERR",
        WcStatus::LocQpOpErr => "LOC_QP_OP_ERR",
        WcStatus::LocProtErr => "LOC_PROT_ERR",
        WcStatus::WrFlushErr => "WR_FLUSH_ERR",
        WcStatus::MwBindErr => "MW_BIND_ERR",
        WcStatus::RemInvReqErr => "REM_INV_REQ_ERR",
        WcStatus::RemAccessErr => "REM_ACCESS_ERR",
        WcStatus::RemOpErr => "REM_OP_ERR",
        WcStatus::RetryExcErr => "RETRY_EXC_ERR",
        WcStatus::RnrRetryExcErr => "RNR_RETRY_EXC_ERR",
        WcStatus::GeneralErr => "GENERAL_ERR",
        _ => "UNKNOWN_ERR",
    }
}

/// The `rdma_cm_event_type` name of a CM event, without `RDMA_CM_EVENT_`.
fn cm_event_name(k: &CmEventKind) -> &'static str {
    match k {
        CmEventKind::AddrResolved => "ADDR_RESOLVED",
        CmEventKind::AddrError => "ADDR_ERROR",
        CmEventKind::RouteResolved => "ROUTE_RESOLVED",
        CmEventKind::RouteError => "ROUTE_ERROR",
        CmEventKind::ConnectRequest { .. } => "CONNECT_REQUEST",
        CmEventKind::Established { .. } => "ESTABLISHED",
        CmEventKind::Rejected { .. } => "REJECTED",
        CmEventKind::Unreachable => "UNREACHABLE",
        CmEventKind::ConnectError => "CONNECT_ERROR",
        CmEventKind::Disconnected => "DISCONNECTED",
        CmEventKind::DeviceRemoval => "DEVICE_REMOVAL",
        CmEventKind::AddrChange => "ADDR_CHANGE",
    }
}

// ---------------------------------------------------------------------------
// output
// ---------------------------------------------------------------------------

/// Line-oriented output that is flushed after every line, so a reader (a
/// test, a pipe) sees each event as it happens.
struct Lines<'a> {
    out: &'a mut dyn Write,
    json: bool,
}

impl Lines<'_> {
    /// Prints `text`, or `value` as one line of JSON with `--json`.
    fn event(&mut self, text: &str, value: serde_json::Value) -> std::io::Result<()> {
        if self.json {
            serde_json::to_writer(&mut *self.out, &value)?;
            writeln!(self.out)?;
        } else {
            writeln!(self.out, "{text}")?;
        }
        self.out.flush()
    }

    /// Prints `text` as is, in either mode.
    fn raw(&mut self, text: &str) -> std::io::Result<()> {
        writeln!(self.out, "{text}")?;
        self.out.flush()
    }
}

/// Prints a warning that must not stop the run.
fn warn(msg: &str) {
    eprintln!("relink: warning: {msg}");
}

// ---------------------------------------------------------------------------
// verbs objects of one connection
// ---------------------------------------------------------------------------

/// What to create for one end of a connection.
struct EndSpec {
    cq_depth: u32,
    caps: QpCaps,
    buf_len: u32,
    access: Access,
}

/// The verbs objects of one end of a connection (the CM id is held apart).
#[derive(Debug)]
struct Resources {
    ctx: ContextId,
    pd: PdId,
    cq: CqId,
    qp: QpId,
    mem: Memory,
    mr: MrInfo,
}

/// Destroys whatever of a connection's objects exist, in dependency order
/// (QP, MR, CQ, PD, context). After a device loss the calls report
/// [`Destroyed::AlreadyReleased`], which is fine. Returns the failures.
fn destroy_objects(
    p: &dyn Provider,
    qp: Option<QpId>,
    mr: Option<MrId>,
    cq: Option<CqId>,
    pd: Option<PdId>,
    ctx: Option<ContextId>,
) -> Vec<String> {
    let mut failures = Vec::new();
    let mut check = |what: String, r: Result<Destroyed, DestroyError>| {
        if let Err(e) = r {
            failures.push(format!("destroying {what}: {e}"));
        }
    };
    if let Some(qp) = qp {
        check(qp.to_string(), p.destroy_qp(qp));
    }
    if let Some(mr) = mr {
        check(mr.to_string(), p.dereg_mr(mr));
    }
    if let Some(cq) = cq {
        check(cq.to_string(), p.destroy_cq(cq));
    }
    if let Some(pd) = pd {
        check(pd.to_string(), p.dealloc_pd(pd));
    }
    if let Some(ctx) = ctx {
        check(ctx.to_string(), p.close_device(ctx));
    }
    failures
}

/// Destroys what [`Resources::open`] created so far if it fails half way.
struct Undo<'a> {
    p: &'a dyn Provider,
    ctx: Option<ContextId>,
    pd: Option<PdId>,
    cq: Option<CqId>,
    qp: Option<QpId>,
    mr: Option<MrId>,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        for f in destroy_objects(self.p, self.qp, self.mr, self.cq, self.pd, self.ctx) {
            warn(&f);
        }
    }
}

impl Resources {
    /// Opens `device` and creates a PD, one CQ (for sends and receives), an
    /// RC QP, and `buf_len` bytes of memory registered as one MR.
    fn open(p: &dyn Provider, device: &DeviceId, spec: &EndSpec) -> anyhow::Result<Resources> {
        let mut undo = Undo {
            p,
            ctx: None,
            pd: None,
            cq: None,
            qp: None,
            mr: None,
        };
        let ctx = p
            .open_device(device)
            .with_context(|| format!("cannot open device {device}"))?;
        undo.ctx = Some(ctx);
        let pd = p
            .alloc_pd(ctx)
            .with_context(|| format!("cannot allocate a PD on {device}"))?;
        undo.pd = Some(pd);
        let cq = p
            .create_cq(ctx, spec.cq_depth)
            .with_context(|| format!("cannot create a CQ of {} on {device}", spec.cq_depth))?;
        undo.cq = Some(cq);
        let qp = p
            .create_qp(
                pd,
                QpInit {
                    send_cq: cq,
                    recv_cq: cq,
                    srq: None,
                    caps: spec.caps,
                    sq_sig_all: false,
                },
            )
            .with_context(|| format!("cannot create a QP on {device}"))?;
        undo.qp = Some(qp);
        let len = spec.buf_len as usize;
        let mem = p
            .alloc_memory(len)
            .with_context(|| format!("cannot allocate {len} bytes of memory"))?;
        let mr = p
            .reg_mr(pd, &mem, mem.addr(), u64::from(spec.buf_len), spec.access)
            .with_context(|| format!("cannot register {len} bytes on {device}"))?;
        undo.mr = Some(mr.id);
        // Everything exists: nothing to undo.
        undo.ctx = None;
        undo.pd = None;
        undo.cq = None;
        undo.qp = None;
        undo.mr = None;
        Ok(Resources {
            ctx,
            pd,
            cq,
            qp,
            mem,
            mr,
        })
    }

    /// Destroys everything in dependency order; returns the failures.
    fn destroy(self, p: &dyn Provider) -> Vec<String> {
        destroy_objects(
            p,
            Some(self.qp),
            Some(self.mr.id),
            Some(self.cq),
            Some(self.pd),
            Some(self.ctx),
        )
    }

    /// One SGE over `len` bytes at the start of the buffer.
    fn sge(&self, len: u32) -> Sge {
        Sge {
            addr: self.mem.addr(),
            length: len,
            lkey: self.mr.lkey,
        }
    }
}

/// Destroys a CM id, warning on failure.
fn destroy_id(p: &dyn Provider, id: CmId) {
    if let Err(e) = p.cm_destroy_id(id) {
        warn(&format!("destroying {id}: {e}"));
    }
}

fn open_host(dir: Option<PathBuf>) -> anyhow::Result<TcpHost> {
    let dir = dir.unwrap_or_else(Registry::default_dir);
    TcpHost::open(&dir)
        .with_context(|| format!("cannot attach to the soft devices in {}", dir.display()))
}

/// Runs `relink perf ...`, printing to `out`. A client run that fails with
/// exit status 3 or 4 ends the process with that status after printing its
/// report.
pub fn run(args: PerfArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    match args.role {
        Role::Server(a) => {
            let host = open_host(a.dir.clone())?;
            let mut lines = Lines { out, json: a.json };
            Server::new(&host, &a).run(&mut lines)
        }
        Role::Client(a) => {
            let host = open_host(a.dir.clone())?;
            let mut lines = Lines { out, json: a.json };
            let code = client(&host, &a, &mut lines)?;
            drop(host);
            if code != 0 {
                out.flush()?;
                std::process::exit(code);
            }
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------
// server
// ---------------------------------------------------------------------------

/// One connection the server holds.
struct ServerConn {
    res: Resources,
    hello: Hello,
    peer: Option<SocketAddr>,
    device: DeviceId,
    since: Timestamp,
    messages: u64,
    bytes: u64,
}

struct Server<'a> {
    p: &'a dyn Provider,
    dir: &'a std::path::Path,
    bind: SocketAddr,
    buf_size: u32,
    once: bool,
    listener: Option<CmId>,
    /// When to try listening again (the listener lost its device).
    relisten_at: Option<Timestamp>,
    conns: BTreeMap<CmId, ServerConn>,
    /// Connections that ended.
    ended: u64,
}

impl<'a> Server<'a> {
    fn new(host: &'a TcpHost, a: &ServerArgs) -> Server<'a> {
        Server {
            p: host,
            dir: host.dir(),
            bind: a.bind,
            buf_size: a.buf_size,
            once: a.once,
            listener: None,
            relisten_at: None,
            conns: BTreeMap::new(),
            ended: 0,
        }
    }

    fn run(mut self, out: &mut Lines<'_>) -> anyhow::Result<()> {
        let id = self.listen().with_context(|| {
            format!(
                "cannot listen on {} with the soft devices in {}",
                self.bind,
                self.dir.display()
            )
        })?;
        self.listener = Some(id);
        self.print_listening(out)?;
        let result = self.serve(out);
        // Whatever happened, release what is left.
        let ids: Vec<CmId> = self.conns.keys().copied().collect();
        for id in ids {
            self.close_conn(id);
        }
        if let Some(l) = self.listener.take() {
            destroy_id(self.p, l);
        }
        result
    }

    fn serve(&mut self, out: &mut Lines<'_>) -> anyhow::Result<()> {
        let mut wcs = Vec::with_capacity(POLL_BATCH);
        loop {
            while let Some(ev) = self.p.poll_event() {
                self.on_event(ev, out)?;
            }
            self.poll_cqs(&mut wcs);
            if self.listener.is_none() && self.relisten_at.is_some_and(|t| self.p.now() >= t) {
                self.try_relisten(out)?;
            }
            if self.once && self.ended > 0 && self.conns.is_empty() {
                return Ok(());
            }
            let mut deadline = self.p.now() + TICK;
            if let Some(t) = self.relisten_at {
                deadline = deadline.min(t);
            }
            self.p.wait(Some(deadline));
        }
    }

    /// Creates a CM id, binds it to the address and listens. A port 0 is
    /// replaced by the port bound, which later listens reuse.
    fn listen(&mut self) -> Result<CmId, relink_fabric::CmError> {
        let id = self.p.cm_create_id()?;
        let bound = self.p.cm_bind(id, self.bind).and_then(|local| {
            self.p.cm_listen(id, 64)?;
            Ok(local)
        });
        match bound {
            Ok(local) => {
                self.bind = local;
                Ok(id)
            }
            Err(e) => {
                destroy_id(self.p, id);
                Err(e)
            }
        }
    }

    fn print_listening(&self, out: &mut Lines<'_>) -> std::io::Result<()> {
        out.event(
            &format!("listening on {} ({})", self.bind, self.p.kind()),
            json!({"event": "listening", "addr": self.bind.to_string()}),
        )
    }

    /// Whether some device now owns the address to listen on.
    fn address_present(&self) -> bool {
        self.bind.ip().is_unspecified() || self.p.devices().iter().any(|d| d.owns(self.bind.ip()))
    }

    fn try_relisten(&mut self, out: &mut Lines<'_>) -> anyhow::Result<()> {
        self.relisten_at = None;
        if !self.address_present() {
            // A Device(Added) event brings us back.
            return Ok(());
        }
        match self.listen() {
            Ok(id) => {
                self.listener = Some(id);
                self.print_listening(out)?;
            }
            Err(e) if e.class() == ErrorClass::Retryable => {
                self.relisten_at = Some(self.p.now() + RELISTEN_INTERVAL);
            }
            Err(e) => return Err(e).with_context(|| format!("cannot listen on {}", self.bind)),
        }
        Ok(())
    }

    fn on_event(&mut self, ev: Event, out: &mut Lines<'_>) -> anyhow::Result<()> {
        match ev {
            Event::Cm(CmEvent { id, kind }) => self.on_cm(id, kind, out)?,
            Event::Device(DeviceEvent { kind, device }) => match kind {
                DeviceEventKind::Added => {
                    out.event(
                        &format!("device added {}", device.id),
                        json!({"event": "device_added", "device": device.id.to_string()}),
                    )?;
                    if self.listener.is_none() {
                        self.relisten_at = Some(self.p.now());
                    }
                }
                DeviceEventKind::Removed => out.event(
                    &format!("device removed {}", device.id),
                    json!({"event": "device_removed", "device": device.id.to_string()}),
                )?,
                DeviceEventKind::Fatal => out.event(
                    &format!("device fatal error on {}", device.id),
                    json!({"event": "device_fatal", "device": device.id.to_string()}),
                )?,
                _ => {}
            },
            Event::Async { ctx, event } => {
                if let AsyncEvent::CqErr(cq) = event {
                    warn(&format!("{cq} on {ctx} overran"));
                }
            }
            Event::CqReady(_) => {}
        }
        Ok(())
    }

    fn on_cm(&mut self, id: CmId, kind: CmEventKind, out: &mut Lines<'_>) -> anyhow::Result<()> {
        if Some(id) == self.listener {
            if kind == CmEventKind::DeviceRemoval {
                let device = self.p.cm_device(id);
                destroy_id(self.p, id);
                self.listener = None;
                let dev = device.map(|d| d.to_string()).unwrap_or_else(|| "-".into());
                out.event(
                    &format!(
                        "device removal on listener {} ({dev}): listening again once a device owns {}",
                        self.bind,
                        self.bind.ip()
                    ),
                    json!({"event": "device_removal", "listener": self.bind.to_string(), "device": dev}),
                )?;
                self.relisten_at = Some(self.p.now());
            }
            return Ok(());
        }
        match kind {
            CmEventKind::ConnectRequest {
                private_data, peer, ..
            } => self.on_request(id, &private_data, peer, out)?,
            CmEventKind::Established { .. } => {
                if let Some(c) = self.conns.get_mut(&id) {
                    c.since = self.p.now();
                    let (local, peer) = self.p.cm_addrs(id);
                    let peer = peer.or(c.peer);
                    let c = &self.conns[&id];
                    out.event(
                        &format!(
                            "connected {} -> {} on {}: op {}, size {}, depth {}",
                            addr_text(peer),
                            addr_text(local),
                            c.device,
                            c.hello.op.name(),
                            c.hello.size,
                            c.hello.depth
                        ),
                        json!({
                            "event": "connected",
                            "peer": addr_text(peer),
                            "local": addr_text(local),
                            "device": c.device.to_string(),
                            "op": c.hello.op.name(),
                            "size": c.hello.size,
                            "depth": c.hello.depth,
                        }),
                    )?;
                }
            }
            CmEventKind::Disconnected | CmEventKind::DeviceRemoval => {
                if let Some(c) = self.conns.get_mut(&id) {
                    // Count the messages that completed before the end.
                    poll_conn(self.p, self.buf_size, c, &mut Vec::new());
                    let (word, key) = if kind == CmEventKind::Disconnected {
                        ("disconnected", "disconnected")
                    } else {
                        ("device removal on connection", "device_removal")
                    };
                    let secs = self.p.now().saturating_since(c.since).as_secs_f64();
                    out.event(
                        &format!(
                            "{word} {} ({}): {} messages, {} bytes received in {secs:.2} s",
                            addr_text(c.peer),
                            c.device,
                            c.messages,
                            c.bytes
                        ),
                        json!({
                            "event": key,
                            "peer": addr_text(c.peer),
                            "device": c.device.to_string(),
                            "messages": c.messages,
                            "bytes": c.bytes,
                            "seconds": secs,
                        }),
                    )?;
                    self.close_conn(id);
                    self.ended += 1;
                }
            }
            CmEventKind::ConnectError | CmEventKind::Unreachable | CmEventKind::Rejected { .. } => {
                if let Some(c) = self.conns.get(&id) {
                    let name = cm_event_name(&kind);
                    out.event(
                        &format!("connection from {} failed: {name}", addr_text(c.peer)),
                        json!({"event": "connect_failed", "peer": addr_text(c.peer), "cm_event": name}),
                    )?;
                    self.close_conn(id);
                    self.ended += 1;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn on_request(
        &mut self,
        id: CmId,
        private_data: &[u8],
        peer: SocketAddr,
        out: &mut Lines<'_>,
    ) -> anyhow::Result<()> {
        match self.accept(id, private_data, peer) {
            Ok(conn) => {
                self.conns.insert(id, conn);
            }
            Err(reason) => {
                let mut msg = reason.clone().into_bytes();
                msg.truncate(MAX_REJECT_PRIVATE_DATA);
                if let Err(e) = self.p.cm_reject(id, &msg) {
                    warn(&format!("rejecting {peer}: {e}"));
                }
                destroy_id(self.p, id);
                out.event(
                    &format!("rejected {peer}: {reason}"),
                    json!({"event": "rejected", "peer": peer.to_string(), "reason": reason}),
                )?;
            }
        }
        Ok(())
    }

    /// Sets a connection up and accepts it; the error is the reason to
    /// reject it with.
    fn accept(
        &mut self,
        id: CmId,
        private_data: &[u8],
        peer: SocketAddr,
    ) -> Result<ServerConn, String> {
        let hello = Hello::decode(private_data)?;
        if hello.size > self.buf_size {
            return Err(format!(
                "message size {} exceeds the server's buffer of {} bytes",
                hello.size, self.buf_size
            ));
        }
        if !(1..=MAX_DEPTH).contains(&hello.depth) {
            return Err(format!("depth {} is not in 1..={MAX_DEPTH}", hello.depth));
        }
        let device = self
            .p
            .cm_device(id)
            .ok_or_else(|| "the request has no device".to_string())?;
        let recvs = match hello.op {
            Op::Send => (2 * hello.depth).min(MAX_SERVER_RECVS),
            Op::Write => 0,
        };
        let spec = EndSpec {
            cq_depth: recvs + 1,
            caps: QpCaps {
                max_send_wr: 1,
                max_recv_wr: recvs.max(1),
                max_send_sge: 1,
                max_recv_sge: 1,
            },
            buf_len: self.buf_size,
            access: Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
        };
        let res = Resources::open(self.p, &device, &spec).map_err(|e| format!("{e:#}"))?;
        let info = BufferInfo {
            addr: res.mr.addr,
            rkey: res.mr.rkey,
            len: self.buf_size,
        };
        let wrs: Vec<RecvWr> = (0..recvs)
            .map(|i| RecvWr {
                wr_id: u64::from(i),
                sgl: vec![res.sge(self.buf_size)],
            })
            .collect();
        let setup = self
            .p
            .post_recv(res.qp, &wrs)
            .map_err(|e| format!("cannot post receives: {e}"))
            .and_then(|()| {
                self.p
                    .cm_accept(id, res.qp, &info.encode())
                    .map_err(|e| format!("cannot accept: {e}"))
            });
        if let Err(e) = setup {
            for f in res.destroy(self.p) {
                warn(&f);
            }
            return Err(e);
        }
        Ok(ServerConn {
            res,
            hello,
            peer: Some(peer),
            device,
            since: self.p.now(),
            messages: 0,
            bytes: 0,
        })
    }

    /// Polls every connection's CQ, counting messages and reposting
    /// receives.
    fn poll_cqs(&mut self, wcs: &mut Vec<WorkCompletion>) {
        for c in self.conns.values_mut() {
            poll_conn(self.p, self.buf_size, c, wcs);
        }
    }

    /// Destroys a connection's objects and CM id.
    fn close_conn(&mut self, id: CmId) {
        if let Some(c) = self.conns.remove(&id) {
            for f in c.res.destroy(self.p) {
                warn(&f);
            }
            destroy_id(self.p, id);
        }
    }
}

/// Polls one connection's CQ until it is empty, counting messages and
/// reposting their receives.
fn poll_conn(p: &dyn Provider, buf_size: u32, c: &mut ServerConn, wcs: &mut Vec<WorkCompletion>) {
    loop {
        wcs.clear();
        match p.poll_cq(c.res.cq, POLL_BATCH, wcs) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                warn(&format!("polling {}: {e}", c.res.cq));
                return;
            }
        }
        let mut repost = Vec::new();
        for wc in wcs.iter() {
            if wc.status.is_ok() {
                c.messages += 1;
                c.bytes += u64::from(wc.byte_len);
                repost.push(RecvWr {
                    wr_id: wc.wr_id,
                    sgl: vec![c.res.sge(buf_size)],
                });
            }
        }
        if !repost.is_empty() {
            if let Err(e) = p.post_recv(c.res.qp, &repost) {
                // A lost device: the CM event that follows cleans up.
                if e.class() != ErrorClass::DeviceFatal {
                    warn(&format!("reposting receives: {e}"));
                }
            }
        }
    }
}

fn addr_text(a: Option<SocketAddr>) -> String {
    a.map(|a| a.to_string()).unwrap_or_else(|| "-".into())
}

// ---------------------------------------------------------------------------
// client
// ---------------------------------------------------------------------------

/// The client's connection: CM id, verbs objects and the server's buffer.
struct ClientConn {
    id: CmId,
    res: Resources,
    remote: BufferInfo,
    device: DeviceId,
}

/// Waits for the next CM event on `id` until `deadline`; other events are
/// dropped (a device event is of no use before the connection is up).
fn next_cm(
    p: &dyn Provider,
    id: CmId,
    deadline: Timestamp,
    what: &str,
) -> anyhow::Result<CmEventKind> {
    loop {
        while let Some(ev) = p.poll_event() {
            if let Event::Cm(CmEvent { id: eid, kind }) = ev {
                if eid == id {
                    return Ok(kind);
                }
            }
        }
        if p.now() >= deadline {
            bail!(
                "timed out after {} s waiting for {what}",
                SETUP_TIMEOUT.as_secs()
            );
        }
        p.wait(Some(deadline.min(p.now() + TICK)));
    }
}

/// Resolves, opens the device and connects; on failure everything created
/// is destroyed.
fn connect(p: &dyn Provider, a: &ClientArgs, dir: &str) -> anyhow::Result<ClientConn> {
    let deadline = p.now() + SETUP_TIMEOUT;
    let dst = a.connect;
    let id = p.cm_create_id().context("cannot create a CM id")?;
    let mut res: Option<Resources> = None;
    let r = connect_id(p, a, dir, id, deadline, &mut res);
    match r {
        Ok((remote, device)) => Ok(ClientConn {
            id,
            res: res.expect("set on success"),
            remote,
            device,
        }),
        Err(e) => {
            if let Some(res) = res {
                for f in res.destroy(p) {
                    warn(&f);
                }
            }
            destroy_id(p, id);
            Err(e.context(format!("cannot connect to {dst}")))
        }
    }
}

fn connect_id(
    p: &dyn Provider,
    a: &ClientArgs,
    dir: &str,
    id: CmId,
    deadline: Timestamp,
    res: &mut Option<Resources>,
) -> anyhow::Result<(BufferInfo, DeviceId)> {
    let dst = a.connect;
    p.cm_resolve_addr(id, None, dst, RESOLVE_TIMEOUT)
        .context("address resolution failed")?;
    match next_cm(p, id, deadline, "address resolution")? {
        CmEventKind::AddrResolved => {}
        CmEventKind::AddrError => {
            bail!("no soft device in {dir} reaches {} (ADDR_ERROR)", dst.ip())
        }
        other => bail!("address resolution ended with {}", cm_event_name(&other)),
    }
    p.cm_resolve_route(id, RESOLVE_TIMEOUT)
        .context("route resolution failed")?;
    match next_cm(p, id, deadline, "route resolution")? {
        CmEventKind::RouteResolved => {}
        other => bail!("route resolution ended with {}", cm_event_name(&other)),
    }
    let device = p
        .cm_device(id)
        .ok_or_else(|| anyhow!("the resolved CM id has no device"))?;
    let spec = EndSpec {
        cq_depth: a.depth + 1,
        caps: QpCaps {
            max_send_wr: a.depth,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
        },
        buf_len: a.size,
        access: Access::LOCAL_WRITE,
    };
    let r = res.insert(Resources::open(p, &device, &spec)?);
    // A recognisable pattern, for anyone looking at the server's buffer.
    let pattern: Vec<u8> = (0..a.size).map(|i| (i % 251) as u8).collect();
    r.mem
        .write(0, &pattern)
        .context("cannot fill the send buffer")?;
    let hello = Hello {
        op: a.op,
        size: a.size,
        depth: a.depth,
    };
    p.cm_connect(id, r.qp, ConnParams::default(), &hello.encode())
        .context("connect failed")?;
    let remote = match next_cm(p, id, deadline, "the server's answer")? {
        CmEventKind::Established { private_data } => {
            BufferInfo::decode(&private_data).map_err(|e| anyhow!("bad answer: {e}"))?
        }
        CmEventKind::Rejected {
            reason: RejectReason::Consumer,
            private_data,
        } => bail!(
            "the server rejected the connection: {}",
            String::from_utf8_lossy(&private_data)
        ),
        CmEventKind::Rejected {
            reason: RejectReason::NoListener,
            ..
        } => bail!("nobody listens on {dst}"),
        CmEventKind::Rejected { reason, .. } => bail!("rejected ({reason:?})"),
        CmEventKind::Unreachable => bail!(
            "the server did not answer (UNREACHABLE): is `relink perf server` listening on {dst}?"
        ),
        other => bail!("the connection failed with {}", cm_event_name(&other)),
    };
    if remote.len < a.size {
        // The server checked too, but do not trust it with our bounds.
        let _ = p.cm_disconnect(id);
        bail!(
            "--size {} exceeds the server's buffer of {} bytes",
            a.size,
            remote.len
        );
    }
    Ok((remote, device))
}

/// Counts of a client run, and what made it stop early.
///
/// The moment of a failure is taken in completion order: an RC QP reports
/// its requests in order, and after the first error everything still
/// outstanding flushes. So the requests outstanding when the failure
/// happened are those posted minus those that succeeded before the first
/// error completion, wherever the failure was first noticed (a CM event or
/// a failed post may be seen before the completions are polled).
#[derive(Debug, Default)]
struct Tally {
    posted: u64,
    completed: u64,
    ok: u64,
    by_status: BTreeMap<&'static str, u64>,
    /// The first completion with an error status: status and wr_id.
    first_error: Option<(WcStatus, u64)>,
    /// Successful completions before the first error completion.
    ok_before_error: Option<u64>,
    /// The event that ended the connection (a CM event, `CQ_ERR`,
    /// `DEVICE_FATAL`), if one did.
    ended_by: Option<&'static str>,
    /// A post that failed for good, if one did.
    post_error: Option<String>,
}

impl Tally {
    /// Requests posted and not yet completed.
    fn outstanding(&self) -> u64 {
        self.posted - self.completed
    }

    /// Whether the run must stop posting and report a failure.
    fn failed(&self) -> bool {
        self.first_error.is_some() || self.ended_by.is_some() || self.post_error.is_some()
    }

    fn complete(&mut self, wc: &WorkCompletion) {
        self.completed += 1;
        *self.by_status.entry(status_name(wc.status)).or_default() += 1;
        if wc.status.is_ok() {
            self.ok += 1;
        } else if self.first_error.is_none() {
            self.first_error = Some((wc.status, wc.wr_id));
            self.ok_before_error = Some(self.ok);
        }
    }

    /// Successful completions before the failure (see [`Tally`]).
    fn ok_before_failure(&self) -> u64 {
        self.ok_before_error.unwrap_or(self.ok)
    }

    /// Requests outstanding when the failure happened.
    fn outstanding_at_failure(&self) -> u64 {
        self.posted - self.ok_before_failure()
    }

    /// Completions since the failure, by status.
    fn since_failure(&self) -> BTreeMap<&'static str, u64> {
        let mut m = self.by_status.clone();
        let before = self.ok_before_failure();
        if let Some(ok) = m.get_mut(status_name(WcStatus::Success)) {
            *ok -= before;
            if *ok == 0 {
                m.remove(status_name(WcStatus::Success));
            }
        }
        m
    }
}

fn counts_text(m: &BTreeMap<&'static str, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs the client; returns the exit status (0, 3 or 4).
fn client(host: &TcpHost, a: &ClientArgs, out: &mut Lines<'_>) -> anyhow::Result<i32> {
    let p: &dyn Provider = host;
    let dir = host.dir().display().to_string();
    let conn = connect(p, a, &dir)?;
    let result = traffic(p, a, &conn, out);
    // Leave in order: disconnect (if still up), then destroy everything.
    let _ = p.cm_disconnect(conn.id);
    for f in conn.res.destroy(p) {
        warn(&f);
    }
    destroy_id(p, conn.id);
    result
}

fn traffic(
    p: &dyn Provider,
    a: &ClientArgs,
    conn: &ClientConn,
    out: &mut Lines<'_>,
) -> anyhow::Result<i32> {
    let qp = conn.res.qp;
    let slots = u64::from((conn.remote.len / a.size).max(1));
    let make_wr = |n: u64| {
        let op = match a.op {
            Op::Send => SendOp::Send,
            Op::Write => SendOp::Write {
                remote: RemoteAddr {
                    addr: conn.remote.addr + (n % slots) * u64::from(a.size),
                    rkey: conn.remote.rkey,
                },
            },
        };
        SendWr::new(n, op, vec![conn.res.sge(a.size)])
    };
    let depth = u64::from(a.depth);
    let start = p.now();
    let end_posting = a.amount.duration.map(|d| start + d);
    let mut t = Tally::default();
    let mut running = false;
    let mut last_progress = start;
    let mut finished_at = start;
    let mut wcs = Vec::with_capacity(POLL_BATCH);
    let mut batch = Vec::with_capacity(a.depth as usize);
    loop {
        let now = p.now();
        // Post up to the depth while there is more to do.
        let posting = !t.failed() && end_posting.is_none_or(|e| now < e);
        if posting {
            let room = depth - t.outstanding();
            let left = a.amount.iters.map_or(u64::MAX, |n| n - t.posted);
            let n = room.min(left);
            if n > 0 {
                batch.clear();
                batch.extend((t.posted..t.posted + n).map(make_wr));
                let (accepted, err) = match p.post_send(qp, &batch) {
                    Ok(()) => (n, None),
                    Err(e) => (e.posted() as u64, Some(e)),
                };
                if accepted > 0 && t.outstanding() == 0 {
                    last_progress = now;
                }
                t.posted += accepted;
                if let Some(e) = err {
                    if e.class() != ErrorClass::Retryable {
                        t.post_error = Some(e.to_string());
                    }
                }
            }
        }
        // Reap completions.
        let mut reaped = false;
        loop {
            wcs.clear();
            let n = p
                .poll_cq(conn.res.cq, POLL_BATCH, &mut wcs)
                .context("cannot poll the CQ")?;
            if n == 0 {
                break;
            }
            last_progress = p.now();
            reaped = true;
            for wc in &wcs {
                t.complete(wc);
                if wc.status.is_ok() {
                    finished_at = last_progress;
                }
            }
            if !running && t.ok > 0 {
                running = true;
                out.raw("running")?;
            }
        }
        // Connection events.
        while let Some(ev) = p.poll_event() {
            let ended = match &ev {
                Event::Cm(CmEvent { id, kind }) if *id == conn.id => match kind {
                    CmEventKind::Disconnected | CmEventKind::DeviceRemoval => {
                        Some(cm_event_name(kind))
                    }
                    _ => None,
                },
                Event::Async {
                    event: AsyncEvent::CqErr(_),
                    ..
                } => Some("CQ_ERR"),
                Event::Async {
                    event: AsyncEvent::DeviceFatal,
                    ..
                } => Some("DEVICE_FATAL"),
                _ => None,
            };
            if let Some(name) = ended {
                t.ended_by.get_or_insert(name);
            }
        }
        let now = p.now();
        if t.failed() {
            if t.outstanding() == 0 {
                report_failure(a, &t, conn, out)?;
                return Ok(EXIT_TRAFFIC_ERROR);
            }
        } else {
            let done = match (a.amount.iters, end_posting) {
                (Some(n), _) => t.completed == n,
                (None, Some(e)) => now >= e && t.outstanding() == 0,
                (None, None) => unreachable!("clap requires --iters or --duration"),
            };
            if done {
                report_success(a, &t, finished_at.saturating_since(start), conn, out)?;
                return Ok(0);
            }
        }
        if t.outstanding() > 0 && now.saturating_since(last_progress) >= STALL_TIMEOUT {
            report_stall(a, &t, out)?;
            return Ok(EXIT_STALLED);
        }
        if reaped {
            // Slots freed: post again before sleeping (the wake-up these
            // completions caused may already have been used).
            continue;
        }
        let mut deadline = now + TICK;
        if let Some(e) = end_posting.filter(|e| *e > now) {
            deadline = deadline.min(e);
        }
        if t.outstanding() > 0 {
            deadline = deadline.min(last_progress + STALL_TIMEOUT);
        }
        p.wait(Some(deadline));
    }
}

fn report_success(
    a: &ClientArgs,
    t: &Tally,
    elapsed: Duration,
    conn: &ClientConn,
    out: &mut Lines<'_>,
) -> std::io::Result<()> {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let bytes = t.ok * u64::from(a.size);
    let msgs_per_sec = t.ok as f64 / secs;
    let gb_per_sec = bytes as f64 / secs / 1e9;
    out.event(
        &format!(
            "{} {} messages of {} bytes (depth {}) to {} on {} in {secs:.3} s: \
             {msgs_per_sec:.0} msg/s, {gb_per_sec:.3} GB/s",
            a.op.name(),
            t.ok,
            a.size,
            a.depth,
            a.connect,
            conn.device
        ),
        json!({
            "result": "ok",
            "op": a.op.name(),
            "size": a.size,
            "depth": a.depth,
            "server": a.connect.to_string(),
            "device": conn.device.to_string(),
            "messages": t.ok,
            "bytes": bytes,
            "seconds": secs,
            "msgs_per_sec": msgs_per_sec,
            "gb_per_sec": gb_per_sec,
        }),
    )
}

fn report_failure(
    a: &ClientArgs,
    t: &Tally,
    conn: &ClientConn,
    out: &mut Lines<'_>,
) -> std::io::Result<()> {
    let first = t.first_error.map(|(s, _)| status_name(s));
    let outstanding = t.outstanding_at_failure();
    let after = t.since_failure();
    let completed_after: u64 = after.values().sum();
    let lost = outstanding.saturating_sub(completed_after);
    let mut text = match t.first_error {
        Some((s, wr_id)) => format!(
            "error: first error status {} ({}) on request {wr_id}",
            status_name(s),
            s.name()
        ),
        None => "error: no request failed".to_string(),
    };
    if let Some(ev) = t.ended_by {
        text.push_str(&format!("; connection ended: {ev}"));
    }
    if let Some(e) = &t.post_error {
        text.push_str(&format!("; post failed: {e}"));
    }
    text.push_str(&format!(
        "\noutstanding when it failed: {}; completed since: {} ({}); {lost} lost\n\
         all completions: {} ({} posted, {} completed, {} successful {} bytes each)",
        outstanding,
        completed_after,
        counts_text(&after),
        counts_text(&t.by_status),
        t.posted,
        t.completed,
        t.ok,
        a.size
    ));
    out.event(
        &text,
        json!({
            "result": "error",
            "op": a.op.name(),
            "size": a.size,
            "depth": a.depth,
            "device": conn.device.to_string(),
            "first_error": first,
            "ended_by": t.ended_by,
            "post_error": t.post_error,
            "outstanding": outstanding,
            "completed_after": completed_after,
            "after_by_status": after,
            "lost": lost,
            "posted": t.posted,
            "completed": t.completed,
            "by_status": t.by_status,
        }),
    )
}

fn report_stall(a: &ClientArgs, t: &Tally, out: &mut Lines<'_>) -> std::io::Result<()> {
    let secs = STALL_TIMEOUT.as_secs();
    let first = t.first_error.map(|(s, _)| status_name(s));
    out.event(
        &format!(
            "error: no completion for {secs} s with {} requests outstanding; giving up\n\
             first error status: {}; all completions: {} ({} posted, {} completed)",
            t.outstanding(),
            first.unwrap_or("none"),
            counts_text(&t.by_status),
            t.posted,
            t.completed
        ),
        json!({
            "result": "stalled",
            "op": a.op.name(),
            "stall_seconds": secs,
            "outstanding": t.outstanding(),
            "first_error": first,
            "posted": t.posted,
            "completed": t.completed,
            "by_status": t.by_status,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64"), Ok(64));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("2MiB"), Ok(2 << 20));
        assert!(parse_size("0").is_err());
        assert!(parse_size("17M").is_err());
        assert!(parse_size("lots").unwrap_err().contains("lots"));
        assert!(parse_size("99999999999999999999M").is_err());
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_secs("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_secs("0").is_err());
        assert!(parse_secs("-1").is_err());
        assert!(parse_secs("NaN").is_err());
        assert!(parse_secs("soon").is_err());
    }

    #[test]
    fn hello_round_trip_and_checks() {
        let h = Hello {
            op: Op::Write,
            size: 65536,
            depth: 32,
        };
        let mut data = h.encode();
        assert_eq!(data.len(), Hello::LEN);
        assert!(data.len() <= relink_fabric::MAX_CONNECT_PRIVATE_DATA);
        assert_eq!(Hello::decode(&data), Ok(h));
        // Padding (as IB CM adds) is ignored.
        data.resize(56, 0);
        assert_eq!(Hello::decode(&data), Ok(h));
        assert!(Hello::decode(&data[..Hello::LEN - 1])
            .unwrap_err()
            .contains("too short"));
        data[0] = b'X';
        assert!(Hello::decode(&data).unwrap_err().contains("not from"));
        let mut bad_op = h.encode();
        bad_op[5] = 9;
        assert!(Hello::decode(&bad_op).unwrap_err().contains("operation"));
        let mut bad_version = h.encode();
        bad_version[4] = 2;
        assert!(Hello::decode(&bad_version).unwrap_err().contains("version"));
    }

    #[test]
    fn buffer_info_round_trip() {
        let b = BufferInfo {
            addr: 0x1234_5678_9abc_def0,
            rkey: 0xdead_beef,
            len: 1 << 20,
        };
        let data = b.encode();
        assert_eq!(data.len(), BufferInfo::LEN);
        assert!(data.len() <= relink_fabric::MAX_ACCEPT_PRIVATE_DATA);
        assert_eq!(BufferInfo::decode(&data), Ok(b));
        assert!(BufferInfo::decode(&data[..10]).is_err());
        assert!(BufferInfo::decode(&[]).is_err());
    }

    fn wc(wr_id: u64, status: WcStatus) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode: relink_fabric::WcOpcode::RdmaWrite,
            qp: QpId(1),
            byte_len: 0,
            imm: None,
            invalidated_rkey: None,
        }
    }

    #[test]
    fn failure_is_placed_at_the_first_error_completion() {
        let mut t = Tally {
            posted: 40,
            ..Tally::default()
        };
        for i in 0..8 {
            t.complete(&wc(i, WcStatus::Success));
        }
        // The connection end is noticed before the completions that
        // preceded it are polled: they still count as before the failure.
        t.ended_by = Some("DISCONNECTED");
        assert!(t.failed());
        for i in 8..10 {
            t.complete(&wc(i, WcStatus::Success));
        }
        for i in 10..40 {
            t.complete(&wc(i, WcStatus::WrFlushErr));
        }
        assert_eq!(t.first_error, Some((WcStatus::WrFlushErr, 10)));
        assert_eq!(t.outstanding(), 0);
        assert_eq!(t.outstanding_at_failure(), 30);
        assert_eq!(t.since_failure(), BTreeMap::from([("WR_FLUSH_ERR", 30)]));
        assert_eq!(
            t.by_status,
            BTreeMap::from([("SUCCESS", 10), ("WR_FLUSH_ERR", 30)])
        );
    }

    #[test]
    fn connection_end_without_error_completions() {
        let mut t = Tally {
            posted: 3,
            ..Tally::default()
        };
        for i in 0..3 {
            t.complete(&wc(i, WcStatus::Success));
        }
        t.ended_by = Some("DISCONNECTED");
        assert_eq!(t.outstanding_at_failure(), 0);
        assert!(t.since_failure().is_empty());
    }

    #[test]
    fn status_names() {
        assert_eq!(status_name(WcStatus::WrFlushErr), "WR_FLUSH_ERR");
        assert_eq!(status_name(WcStatus::Success), "SUCCESS");
        assert_eq!(cm_event_name(&CmEventKind::DeviceRemoval), "DEVICE_REMOVAL");
    }
}
