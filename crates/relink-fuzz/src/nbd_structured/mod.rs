//! Drives relink-nbd's server (`Server::serve_connection`, over an
//! in-memory stream) through a handshake of the options around structured
//! replies (`NBD_OPT_STRUCTURED_REPLY`, `NBD_OPT_SET_META_CONTEXT`,
//! `NBD_OPT_LIST_META_CONTEXT`, with `NBD_OPT_INFO`, `NBD_OPT_LIST` and an
//! unknown option among them), then `NBD_OPT_GO` (or
//! `NBD_OPT_EXPORT_NAME`) and a batch of transmission requests, answered
//! by a backend whose replies the input chooses too: the right one, an
//! error with a message of any length, the wrong kind, a read of the
//! wrong length, a dropped request, and for `NBD_CMD_BLOCK_STATUS` the
//! extents relinkd's bridge passes on (the block service's
//! `Extents::decode` of the target's bytes, a hole reading as zeros) or
//! any extents at all.
//!
//! The server's output is read back as a client would, with a small
//! length-checked parser, and beyond "never panics" checks:
//! - the greeting; every option's replies are whole and answer that
//!   option, and end in one final reply (`NBD_REP_ACK` or an error);
//! - a metadata context reply names `base:allocation` with id
//!   `BASE_ALLOCATION_ID` when set and 0 when listed; setting one before
//!   structured replies is `NBD_REP_ERR_INVALID`;
//! - in transmission, replies are structured chunks exactly when
//!   structured replies were acknowledged (simple replies otherwise):
//!   the magic, only `NBD_REPLY_FLAG_DONE` among the flags and on the
//!   last chunk of each reply, a known type with its exact length, every
//!   request before `NBD_CMD_DISC` answered once, by its cookie, none
//!   after it;
//! - each reply is the one `request::check` and the backend call for:
//!   a refusal's errno and message, a backend error's errno and its
//!   message (cut to 4096 bytes at a character boundary), `EIO` for a
//!   backend reply that does not fit; a read's data at the request's
//!   offset, of its length, the backend's bytes, in one chunk that
//!   describes at least one byte (a read of no bytes is `NONE`);
//! - a block status chunk: for context `BASE_ALLOCATION_ID`, at least
//!   one descriptor, each a whole number of the export's minimum blocks
//!   with only the hole and zero flags, a hole or zeros only where every
//!   extent under it says so, as far as the extents reach (rounded up to
//!   a block) and no further than the request, one descriptor for
//!   `NBD_CMD_FLAG_REQ_ONE`.

mod client;

use std::sync::{Arc, Mutex};

use relink_nbd::consts::*;
use relink_nbd::handshake::{ClientFlags, Negotiator, OptionHeader, MAX_OPTION_LEN};
use relink_nbd::request::RequestHeader;
use relink_nbd::{
    BlockError, BlockOp, BlockReply, BlockRequest, BlockSizes, Export, ExportFlags, ExportInfo,
    Extent, Server, ServerConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The server's maximum payload: small, so that reads stay cheap.
const MAX_PAYLOAD: u32 = 64 << 10;
/// The options a script chooses from: those around structured replies,
/// two that describe exports, and one the server does not know. (The
/// handshake ends with the `NBD_OPT_GO` or `NBD_OPT_EXPORT_NAME` the body
/// adds.)
const OPTIONS: [u32; 6] = [
    NBD_OPT_STRUCTURED_REPLY,
    NBD_OPT_SET_META_CONTEXT,
    NBD_OPT_LIST_META_CONTEXT,
    NBD_OPT_INFO,
    NBD_OPT_LIST,
    0x4242,
];
/// Most transmission requests per input.
const MAX_REQUESTS: usize = 8;
/// Cookies are this plus the request's index.
const COOKIE_BASE: u64 = 0xc00c_1e00_0000_0000;

/// The bytes of the input, taken from the front.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    /// The next `n` bytes, or as many as are left.
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }

    /// The next `N` bytes, if there are as many.
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let head = self.0.get(..N)?.try_into().ok()?;
        self.0 = &self.0[N..];
        Some(head)
    }

    /// The next `n` bytes, if there are as many.
    fn array_vec(&mut self, n: usize) -> Option<Vec<u8>> {
        let head = self.0.get(..n)?.to_vec();
        self.0 = &self.0[n..];
        Some(head)
    }
}

/// The two exports: `disk` (1 MiB, no block size constraint; the input
/// chooses read-only and block status) and `sect` (256 KiB, 512-byte
/// blocks, block status).
fn exports(cfg: u8) -> Vec<(String, u64, ExportFlags, BlockSizes)> {
    let disk = if cfg & 4 == 0 {
        ExportFlags::read_write()
    } else {
        ExportFlags::read_only()
    };
    vec![
        (
            "disk".into(),
            1 << 20,
            disk.with_block_status(cfg & 2 != 0),
            BlockSizes::default(),
        ),
        (
            "sect".into(),
            256 << 10,
            ExportFlags::read_write().with_block_status(true),
            BlockSizes::new(512, 4096, 32 << 10),
        ),
    ]
}

/// What the backend did with one request.
#[derive(Debug, Clone)]
enum Answer {
    Reply(Result<BlockReply, BlockError>),
    Dropped,
}

/// The backend's answer to `op`, chosen by the script `s` (the right
/// reply once it runs out).
fn answer(op: &BlockOp, s: &mut Input<'_>) -> Answer {
    let right = |s: &mut Input<'_>| match op {
        BlockOp::Read { offset, len } => {
            Ok(BlockReply::Data(pattern(*offset ^ 0x5a, *len as usize)))
        }
        BlockOp::BlockStatus { len, .. } => match s.byte() {
            None => Ok(BlockReply::Extents(vec![Extent {
                len: u64::from(*len),
                hole: false,
                zero: false,
            }])),
            Some(n) => relinkd_extents(s.take(usize::from(n))),
        },
        _ => Ok(BlockReply::Done),
    };
    let Some(kind) = s.byte() else {
        return Answer::Reply(right(s));
    };
    Answer::Reply(match kind % 8 {
        0 | 1 => right(s),
        2 => {
            let n = usize::from(s.byte().unwrap_or(0));
            let text = String::from_utf8_lossy(s.take(n)).into_owned();
            let times = usize::from(s.byte().unwrap_or(1));
            Err(BlockError::Io(text.repeat(times)))
        }
        3 => Err(match s.byte().unwrap_or(0) % 6 {
            0 => BlockError::PermissionDenied,
            1 => BlockError::OutOfMemory,
            2 => BlockError::InvalidArgument,
            3 => BlockError::NoSpace,
            4 => BlockError::NotSupported,
            _ => BlockError::ShuttingDown,
        }),
        4 => match op {
            BlockOp::Read { .. } => Ok(BlockReply::Done),
            _ => Ok(BlockReply::Data(vec![0; 3])),
        },
        5 => match op {
            BlockOp::Read { len, .. } => Ok(BlockReply::Data(vec![0; *len as usize + 1])),
            BlockOp::BlockStatus { .. } => Ok(BlockReply::Extents(Vec::new())),
            _ => Ok(BlockReply::Extents(vec![Extent {
                len: 1,
                hole: true,
                zero: true,
            }])),
        },
        6 => return Answer::Dropped,
        _ => match op {
            // Any extents at all: lengths of 0 and past 4 GiB, any flags.
            BlockOp::BlockStatus { .. } => {
                let n = usize::from(s.byte().unwrap_or(0) % 8);
                let extents = (0..n)
                    .map_while(|_| {
                        let b: [u8; 9] = s.array()?;
                        Some(Extent {
                            len: u64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
                            hole: b[8] & 1 != 0,
                            zero: b[8] & 2 != 0,
                        })
                    })
                    .collect();
                Ok(BlockReply::Extents(extents))
            }
            _ => right(s),
        },
    })
}

/// The extents relinkd's bridge gives the NBD server for a block status
/// whose extents the target wrote as `bytes`: the block service's
/// decoding (an initiator refuses extents that do not decode, or none),
/// a hole reading as zeros.
fn relinkd_extents(bytes: &[u8]) -> Result<BlockReply, BlockError> {
    match relink_block::Extents::decode(bytes) {
        Ok(e) if !e.is_empty() => Ok(BlockReply::Extents(
            e.iter()
                .map(|e| Extent {
                    len: e.len,
                    hole: e.hole,
                    zero: e.hole,
                })
                .collect(),
        )),
        _ => Err(BlockError::Io("the target's extents do not decode".into())),
    }
}

/// `len` bytes that depend on `seed`.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed as usize).wrapping_add(i.wrapping_mul(31)) as u8)
        .collect()
}

/// One request as sent: its header and a write's payload.
struct Sent {
    header: RequestHeader,
    payload: Vec<u8>,
}

/// Runs the target on one input: panics only when the code under test
/// breaks what this module checks (the crate's contract).
///
/// The input: a configuration byte (bit 0: the client asks for no
/// zeroes; bit 1: `disk` offers block status; bit 2: `disk` is read-only;
/// bit 3: the transmission is on `sect`; bit 4: the handshake starts with
/// `NBD_OPT_STRUCTURED_REPLY` and `NBD_OPT_SET_META_CONTEXT
/// base:allocation`; bit 5: it ends with `NBD_OPT_EXPORT_NAME` instead of
/// `NBD_OPT_GO`), an option count, per option a selector byte, a 16-bit
/// length (clipped to what is left) and the data, a request count, per
/// request its type, flags (16 bits), offset (64) and length (32) (a
/// write's length is kept under twice the maximum payload; its payload is
/// made up), and what is left is the backend's script.
pub fn run(data: &[u8]) {
    let mut input = Input(data);
    let Some(cfg) = input.byte() else {
        return;
    };
    let exports = exports(cfg);
    let chosen = usize::from(cfg & 8 != 0);
    let chosen_name = exports[chosen].0.clone();
    let no_zeroes = cfg & 1 != 0;

    // The handshake.
    let mut options: Vec<(u32, Vec<u8>)> = Vec::new();
    if cfg & 16 != 0 {
        options.push((NBD_OPT_STRUCTURED_REPLY, Vec::new()));
        options.push((
            NBD_OPT_SET_META_CONTEXT,
            meta_query(&chosen_name, &[BASE_ALLOCATION]),
        ));
    }
    let count = input.byte().unwrap_or(0) % 5;
    for _ in 0..count {
        let Some(sel) = input.byte() else { break };
        let option = OPTIONS[usize::from(sel) % OPTIONS.len()];
        let len = input.array::<2>().map_or(0, u16::from_be_bytes);
        let body = input.take(usize::from(len)).to_vec();
        options.push((option, body));
    }
    let export_name = cfg & 32 != 0;
    if export_name {
        options.push((NBD_OPT_EXPORT_NAME, chosen_name.as_bytes().to_vec()));
    } else {
        let mut go = (chosen_name.len() as u32).to_be_bytes().to_vec();
        go.extend_from_slice(chosen_name.as_bytes());
        go.extend_from_slice(&1u16.to_be_bytes());
        go.extend_from_slice(&NBD_INFO_BLOCK_SIZE.to_be_bytes());
        options.push((NBD_OPT_GO, go));
    }

    // The requests.
    let count = usize::from(input.byte().unwrap_or(0)) % (MAX_REQUESTS + 1);
    let mut requests = Vec::new();
    for i in 0..count {
        let Some(b) = input.array::<15>() else { break };
        let kind = u16::from(b[0] % 9);
        let mut len = u32::from_be_bytes(b[11..15].try_into().expect("4 bytes"));
        if kind == NBD_CMD_WRITE {
            len %= 2 * MAX_PAYLOAD + 1;
        }
        let header = RequestHeader {
            flags: u16::from_be_bytes([b[1], b[2]]),
            kind,
            cookie: COOKIE_BASE + i as u64,
            offset: u64::from_be_bytes(b[3..11].try_into().expect("8 bytes")),
            len,
        };
        let payload = pattern(i as u64, header.payload_len() as usize);
        requests.push(Sent { header, payload });
    }
    let script = input.0.to_vec();

    let mut client = (NBD_FLAG_C_FIXED_NEWSTYLE | (u32::from(no_zeroes) * NBD_FLAG_C_NO_ZEROES))
        .to_be_bytes()
        .to_vec();
    for (option, body) in &options {
        let h = OptionHeader {
            option: *option,
            len: body.len() as u32,
        };
        client.extend_from_slice(&h.encode());
        client.extend_from_slice(body);
    }
    for r in &requests {
        client.extend_from_slice(&r.header.encode());
        client.extend_from_slice(&r.payload);
    }

    let served = serve(&exports, client, script);
    let infos: Vec<ExportInfo> = exports
        .iter()
        .map(|(name, size, flags, sizes)| ExportInfo {
            name: name.clone(),
            description: String::new(),
            size: *size,
            flags: *flags,
            block_sizes: *sizes,
        })
        .collect();
    let flags = ClientFlags {
        fixed_newstyle: true,
        no_zeroes,
    };
    let mut out = Input(&served.output);
    let Some(state) = client::check_handshake(
        &mut out,
        &options,
        &Negotiator::new(infos.clone(), MAX_PAYLOAD, flags),
        &infos,
        no_zeroes,
    ) else {
        // The server closed: only for an option over its limit.
        assert!(
            options
                .iter()
                .any(|(_, b)| b.len() > MAX_OPTION_LEN as usize),
            "the handshake ended early: {:?}",
            served.ended
        );
        assert!(served.ended.is_err());
        return;
    };
    assert!(
        served.ended.is_ok(),
        "the connection failed: {:?}",
        served.ended
    );
    assert_eq!(state.export, chosen);
    client::check_transmission(out, &requests, &infos[chosen], &state, &served.log);
}

/// `NBD_OPT_*_META_CONTEXT` data for `export` with `queries`.
fn meta_query(export: &str, queries: &[&str]) -> Vec<u8> {
    let mut d = (export.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(export.as_bytes());
    d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        d.extend_from_slice(&(q.len() as u32).to_be_bytes());
        d.extend_from_slice(q.as_bytes());
    }
    d
}

fn config() -> ServerConfig {
    ServerConfig::default()
        .with_max_payload(MAX_PAYLOAD)
        .with_queue_depth(4)
}

/// The exports as the server takes them, and the receiving end of their
/// (shared) backend channel.
fn server_exports(
    exports: &[(String, u64, ExportFlags, BlockSizes)],
) -> (Vec<Export>, tokio::sync::mpsc::Receiver<BlockRequest>) {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let list = exports
        .iter()
        .map(|(name, size, flags, sizes)| {
            Export::new(name.clone(), *size, *flags, tx.clone()).with_block_sizes(*sizes)
        })
        .collect();
    (list, rx)
}

/// One connection served.
struct Served {
    /// The server's bytes.
    output: Vec<u8>,
    /// How `serve_connection` ended.
    ended: Result<(), relink_nbd::ProtocolError>,
    /// What the backend was asked and answered, in order.
    log: Vec<(BlockOp, Answer)>,
}

/// Serves `client` (the client's bytes, then its end of the stream) on
/// one connection with a backend following `script`.
fn serve(
    exports: &[(String, u64, ExportFlags, BlockSizes)],
    client: Vec<u8>,
    script: Vec<u8>,
) -> Served {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let log = Arc::new(Mutex::new(Vec::new()));
    let (list, mut rx) = server_exports(exports);
    let server = Server::new(list, config()).expect("the exports are valid");
    let (client_io, server_io) = tokio::io::duplex(64 << 10);
    let (mut read, mut write) = tokio::io::split(client_io);
    let backend_log = log.clone();
    let (output, ended) = rt.block_on(async move {
        let serving = async move {
            let r = server.serve_connection(server_io).await;
            drop(server);
            r
        };
        let backend = async move {
            let mut s = Input(&script);
            while let Some(req) = rx.recv().await {
                let a = answer(&req.op, &mut s);
                backend_log
                    .lock()
                    .expect("not poisoned")
                    .push((req.op, a.clone()));
                if let Answer::Reply(r) = a {
                    let _ = req.reply.send(r);
                }
            }
        };
        let writing = async move {
            // The server may close first (an option over its limit).
            let _ = write.write_all(&client).await;
            let _ = write.shutdown().await;
        };
        let reading = async move {
            let mut out = Vec::new();
            read.read_to_end(&mut out).await.expect("in-memory stream");
            out
        };
        let (ended, (), (), output) = tokio::join!(serving, backend, writing, reading);
        (output, ended)
    });
    let log = std::mem::take(&mut *log.lock().expect("not poisoned"));
    Served { output, ended, log }
}
