//! The client's side of `nbd_structured`: the server's bytes read back
//! with a small length-checked parser, and checked against the options
//! and requests sent and what the backend answered.

use relink_nbd::consts::*;
use relink_nbd::handshake::{greeting, Negotiator, MAX_OPTION_LEN};
use relink_nbd::reply::{OptionReply, SimpleReply, MAX_ERROR_MESSAGE, SIMPLE_REPLY_LEN};
use relink_nbd::request::{check, Command};
use relink_nbd::{BlockOp, BlockReply, ExportInfo, Extent};

use super::{Answer, Input, Sent, COOKIE_BASE, MAX_PAYLOAD};

/// What the handshake settled, as the client saw it.
pub(super) struct State {
    pub(super) export: usize,
    pub(super) structured: bool,
    pub(super) allocation: bool,
}

/// Reads the greeting and the replies to `options` from `out`; `None` when
/// the server closed before transmission.
pub(super) fn check_handshake(
    out: &mut Input<'_>,
    options: &[(u32, Vec<u8>)],
    negotiator: &Negotiator,
    infos: &[ExportInfo],
    no_zeroes: bool,
) -> Option<State> {
    assert_eq!(out.array::<18>().expect("a greeting"), greeting());
    let mut structured = false;
    let mut selected = None;
    for (option, body) in options {
        if body.len() > MAX_OPTION_LEN as usize {
            assert!(out.0.is_empty(), "an option over the limit is not answered");
            return None;
        }
        if *option == NBD_OPT_EXPORT_NAME {
            let name = std::str::from_utf8(body).expect("the body's own name");
            let i = negotiator.lookup(name).expect("an export of the list");
            let size = out.array::<8>().expect("the export's size");
            assert_eq!(u64::from_be_bytes(size), infos[i].size);
            let flags = out.array::<2>().expect("the export's flags");
            assert_eq!(
                u16::from_be_bytes(flags),
                infos[i].flags.transmission_flags()
            );
            if !no_zeroes {
                assert_eq!(out.array::<124>().expect("124 zeroes"), [0; 124]);
            }
            return Some(State {
                export: i,
                structured,
                allocation: structured && selected == Some(i),
            });
        }
        // Replies up to the final one.
        let mut metas = Vec::new();
        let fin = loop {
            let (r, used) = OptionReply::parse(out.0).expect("a whole option reply");
            out.0 = &out.0[used..];
            assert_eq!(r.option, *option, "a reply to another option");
            if r.reply_type == NBD_REP_ACK || r.reply_type & NBD_REP_FLAG_ERROR != 0 {
                break r;
            }
            match (*option, r.reply_type) {
                (NBD_OPT_SET_META_CONTEXT | NBD_OPT_LIST_META_CONTEXT, NBD_REP_META_CONTEXT) => {
                    assert!(r.data.len() >= 4, "a context without an id");
                    let id = u32::from_be_bytes(r.data[..4].try_into().expect("4 bytes"));
                    assert_eq!(&r.data[4..], BASE_ALLOCATION.as_bytes());
                    let want = if *option == NBD_OPT_SET_META_CONTEXT {
                        BASE_ALLOCATION_ID
                    } else {
                        0
                    };
                    assert_eq!(id, want, "context id");
                    metas.push(id);
                }
                (NBD_OPT_INFO | NBD_OPT_GO, NBD_REP_INFO) | (NBD_OPT_LIST, NBD_REP_SERVER) => {}
                (o, t) => panic!("reply type {t:#x} to option {o}"),
            }
        };
        assert!(metas.len() <= 1, "one context, listed once");
        let ack = fin.reply_type == NBD_REP_ACK;
        assert!(ack || metas.is_empty(), "contexts before an error");
        match *option {
            NBD_OPT_STRUCTURED_REPLY => structured |= ack,
            NBD_OPT_SET_META_CONTEXT => {
                if !structured {
                    assert_eq!(fin.reply_type, NBD_REP_ERR_INVALID, "set before structured");
                }
                if ack {
                    // The export the query named (the body parses: acked).
                    let name_len =
                        u32::from_be_bytes(body[..4].try_into().expect("4 bytes")) as usize;
                    let name = std::str::from_utf8(&body[4..4 + name_len]).expect("acked");
                    let i = negotiator.lookup(name).expect("acked");
                    selected = (!metas.is_empty()).then_some(i);
                }
            }
            NBD_OPT_GO => {
                assert!(ack, "GO on an export that exists, asking for block sizes");
                let name_len = u32::from_be_bytes(body[..4].try_into().expect("4 bytes")) as usize;
                let name = std::str::from_utf8(&body[4..4 + name_len]).expect("the body's own");
                let i = negotiator.lookup(name).expect("an export of the list");
                return Some(State {
                    export: i,
                    structured,
                    allocation: structured && selected == Some(i),
                });
            }
            _ => {}
        }
    }
    unreachable!("the options end with GO or EXPORT_NAME")
}

/// One reply read from the transmission: the request's index, the error
/// (0: success) and message, and what it carried.
#[derive(Debug)]
struct Got {
    error: u32,
    message: Option<String>,
    data: Option<Vec<u8>>,
    descriptors: Option<Vec<(u32, u32)>>,
}

/// Reads every reply of the transmission from `out` and checks each
/// against its request.
pub(super) fn check_transmission(
    mut out: Input<'_>,
    requests: &[Sent],
    info: &ExportInfo,
    state: &State,
    log: &[(BlockOp, Answer)],
) {
    // Requests after the first NBD_CMD_DISC are not read.
    let read = requests
        .iter()
        .position(|r| r.header.kind == NBD_CMD_DISC)
        .map_or(requests.len(), |i| i + 1);
    let mut got: Vec<Option<Got>> = (0..requests.len()).map(|_| None).collect();
    while !out.0.is_empty() {
        let (i, g) = if state.structured {
            read_chunk(&mut out, requests)
        } else {
            read_simple(&mut out, requests)
        };
        assert!(i < read, "a reply to request {i}, after NBD_CMD_DISC");
        assert!(got[i].is_none(), "request {i} answered twice");
        got[i] = Some(g);
    }

    let mut backend = log.iter();
    for (i, r) in requests[..read].iter().enumerate() {
        let h = &r.header;
        let g = got[i].take();
        let cmd = match check(h, info, MAX_PAYLOAD, state.allocation) {
            Err(rej) => {
                let g = g.expect("a refused request is answered");
                assert_eq!(g.error, rej.nbd_errno(), "request {i}: {rej}");
                check_message(&g, &rej.to_string(), state);
                continue;
            }
            Ok(Command::Disconnect) => {
                assert!(g.is_none(), "NBD_CMD_DISC is not answered");
                continue;
            }
            Ok(c) => c,
        };
        let g = g.unwrap_or_else(|| panic!("request {i} ({cmd:?}) is not answered"));
        let zero_len = matches!(
            cmd,
            Command::Read { len: 0, .. }
                | Command::Write { len: 0, .. }
                | Command::Trim { len: 0, .. }
                | Command::WriteZeroes { len: 0, .. }
        );
        if zero_len {
            assert_eq!(g.error, 0, "request {i} of no bytes");
            assert!(g.data.as_ref().is_none_or(Vec::is_empty));
            continue;
        }
        let (op, answer) = backend
            .next()
            .unwrap_or_else(|| panic!("request {i} ({cmd:?}) never reached the backend"));
        check_op(op, &cmd, &r.payload);
        let eio = |g: &Got| {
            assert_eq!(
                g.error, NBD_EIO,
                "request {i}: {answer:?} does not fit {cmd:?}"
            );
        };
        match (answer, cmd) {
            (Answer::Dropped, _) => eio(&g),
            (Answer::Reply(Err(e)), _) => {
                assert_eq!(g.error, e.nbd_errno(), "request {i}");
                check_message(&g, &e.to_string(), state);
            }
            (Answer::Reply(Ok(BlockReply::Data(d))), Command::Read { len, .. })
                if d.len() == len as usize =>
            {
                assert_eq!(g.error, 0);
                assert_eq!(g.data.as_ref(), Some(d), "request {i}: the backend's bytes");
            }
            (Answer::Reply(Ok(BlockReply::Extents(e))), Command::BlockStatus { len, one, .. })
                if e.first().is_some_and(|e| e.len > 0) =>
            {
                assert_eq!(g.error, 0);
                check_descriptors(
                    g.descriptors.as_ref().expect("a block status chunk"),
                    e,
                    len,
                    info.block_sizes.minimum,
                    one,
                );
            }
            (
                Answer::Reply(Ok(BlockReply::Done)),
                Command::Write { .. }
                | Command::Flush
                | Command::Trim { .. }
                | Command::WriteZeroes { .. },
            ) => assert_eq!(g.error, 0, "request {i}"),
            _ => eio(&g),
        }
    }
    assert!(
        backend.next().is_none(),
        "the backend saw more than was sent"
    );
}

/// The backend was asked what `cmd` asks.
fn check_op(op: &BlockOp, cmd: &Command, payload: &[u8]) {
    let same = match (op, *cmd) {
        (BlockOp::Read { offset, len }, Command::Read { offset: o, len: l }) => {
            (*offset, *len) == (o, l)
        }
        (
            BlockOp::Write { offset, data, fua },
            Command::Write {
                offset: o,
                len,
                fua: f,
            },
        ) => (*offset, *fua) == (o, f) && data.len() == len as usize && data == payload,
        (BlockOp::Flush, Command::Flush) => true,
        (
            BlockOp::Trim { offset, len, fua },
            Command::Trim {
                offset: o,
                len: l,
                fua: f,
            },
        ) => (*offset, *len, *fua) == (o, l, f),
        (
            BlockOp::WriteZeroes {
                offset,
                len,
                fua,
                may_trim,
            },
            Command::WriteZeroes {
                offset: o,
                len: l,
                fua: f,
                may_trim: m,
            },
        ) => (*offset, *len, *fua, *may_trim) == (o, l, f, m),
        (
            BlockOp::BlockStatus { offset, len },
            Command::BlockStatus {
                offset: o, len: l, ..
            },
        ) => (*offset, *len) == (o, l),
        _ => false,
    };
    assert!(same, "the backend got {op:?} for {cmd:?}");
}

/// A structured error carries `full`, cut to [`MAX_ERROR_MESSAGE`] bytes
/// at a character boundary; a simple reply carries no message.
fn check_message(g: &Got, full: &str, state: &State) {
    let Some(m) = &g.message else {
        assert!(!state.structured, "a structured error without a message");
        return;
    };
    assert!(m.len() <= MAX_ERROR_MESSAGE);
    assert!(
        full.starts_with(m.as_str()),
        "{m:?} is not the start of {full:?}"
    );
    if full.len() > MAX_ERROR_MESSAGE {
        assert!(m.len() > MAX_ERROR_MESSAGE - 4, "cut too short");
    } else {
        assert_eq!(m, full);
    }
}

/// A block status's descriptors describe the backend's extents in whole
/// blocks of the export's `minimum` size (as the protocol requires): each
/// a multiple of it, together as far as the extents reach (rounded up to
/// a block) within the request's `len`, only the first for `one`; a
/// descriptor claims a hole or zeros only where every extent under it
/// does, and its first block has the state all that block's pieces share
/// (data where the extents end inside it).
fn check_descriptors(d: &[(u32, u32)], extents: &[Extent], len: u32, minimum: u32, one: bool) {
    let block = u64::from(minimum.max(1));
    let len = u64::from(len);
    // The extents as (start, end, flags) from the range's start.
    let mut pieces = Vec::new();
    let mut at = 0u64;
    for e in extents.iter().take_while(|e| e.len > 0) {
        if at >= len {
            break;
        }
        let end = at.saturating_add(e.len).min(len);
        let flags = (u32::from(e.hole) * NBD_STATE_HOLE) | (u32::from(e.zero) * NBD_STATE_ZERO);
        pieces.push((at, end, flags));
        at = end;
    }
    let covered = at;
    // The state the pieces under [a, b) share; 0 where none is.
    let shared = |a: u64, b: u64| {
        let mut f = NBD_STATE_HOLE | NBD_STATE_ZERO;
        let mut reached = a;
        for &(s, e, g) in pieces.iter().filter(|p| p.0 < b && p.1 > a) {
            if s > reached {
                return 0;
            }
            f &= g;
            reached = e;
        }
        if reached < b {
            0
        } else {
            f
        }
    };
    assert!(!d.is_empty(), "a block status with no descriptor");
    assert!(!one || d.len() == 1, "NBD_CMD_FLAG_REQ_ONE: one descriptor");
    let mut start = 0u64;
    for (i, &(n, flags)) in d.iter().enumerate() {
        let n = u64::from(n);
        assert!(n > 0, "descriptor {i} of no bytes");
        assert_eq!(
            n % block,
            0,
            "descriptor {i} of {n} bytes: not whole {block}-byte blocks"
        );
        assert_eq!(
            flags & !(NBD_STATE_HOLE | NBD_STATE_ZERO),
            0,
            "descriptor {i}'s flags"
        );
        let end = start + n;
        assert!(end <= len, "descriptor {i} past the request");
        assert_eq!(
            flags & !shared(start, end),
            0,
            "descriptor {i} claims more than its extents"
        );
        assert_eq!(
            flags,
            shared(start, start + block),
            "descriptor {i}'s first block"
        );
        start = end;
    }
    if !one {
        let reach = covered.div_ceil(block) * block;
        assert_eq!(
            start,
            reach.min(len),
            "the descriptors describe as far as the extents reach"
        );
    }
}

/// The request a cookie names.
fn request_of(cookie: u64, requests: &[Sent]) -> usize {
    let i = cookie.wrapping_sub(COOKIE_BASE) as usize;
    assert!(i < requests.len(), "cookie {cookie:#x} of no request");
    i
}

/// Reads one simple reply (and a successful read's data).
fn read_simple(out: &mut Input<'_>, requests: &[Sent]) -> (usize, Got) {
    let head = out
        .array::<SIMPLE_REPLY_LEN>()
        .expect("a whole simple reply");
    let r = SimpleReply::parse(&head).expect("a simple reply (no structured replies)");
    let i = request_of(r.cookie, requests);
    let h = &requests[i].header;
    let data = (h.kind == NBD_CMD_READ && r.error == 0).then(|| {
        out.array_vec(h.len as usize)
            .expect("a read's data after its simple reply")
    });
    (
        i,
        Got {
            error: r.error,
            message: None,
            data,
            descriptors: None,
        },
    )
}

/// Reads one structured reply: chunks of one cookie up to the one with
/// `NBD_REPLY_FLAG_DONE` (the server sends one chunk per reply).
fn read_chunk(out: &mut Input<'_>, requests: &[Sent]) -> (usize, Got) {
    let head = out.array::<20>().expect("a whole chunk header");
    let magic = u32::from_be_bytes(head[0..4].try_into().expect("4 bytes"));
    assert_eq!(magic, STRUCTURED_REPLY_MAGIC, "structured replies only");
    let flags = u16::from_be_bytes([head[4], head[5]]);
    let kind = u16::from_be_bytes([head[6], head[7]]);
    let cookie = u64::from_be_bytes(head[8..16].try_into().expect("8 bytes"));
    let len = u32::from_be_bytes(head[16..20].try_into().expect("4 bytes")) as usize;
    assert_eq!(
        flags, NBD_REPLY_FLAG_DONE,
        "one chunk per reply, marked done"
    );
    let i = request_of(cookie, requests);
    let h = &requests[i].header;
    let payload = out.array_vec(len).expect("a whole chunk payload");
    let mut g = Got {
        error: 0,
        message: None,
        data: None,
        descriptors: None,
    };
    match kind {
        NBD_REPLY_TYPE_NONE => {
            assert_eq!(len, 0, "NONE carries nothing");
            assert_ne!(h.kind, NBD_CMD_BLOCK_STATUS, "a block status answered NONE");
            if h.kind == NBD_CMD_READ {
                assert_eq!(h.len, 0, "a read of bytes answered NONE");
                g.data = Some(Vec::new());
            }
        }
        NBD_REPLY_TYPE_OFFSET_DATA => {
            assert_eq!(
                h.kind, NBD_CMD_READ,
                "data for a request that is not a read"
            );
            assert!(len > 8, "an OFFSET_DATA chunk describes at least one byte");
            let offset = u64::from_be_bytes(payload[..8].try_into().expect("8 bytes"));
            assert_eq!(offset, h.offset, "one chunk: the read's offset");
            assert_eq!(len - 8, h.len as usize, "one chunk: the read's length");
            g.data = Some(payload[8..].to_vec());
        }
        NBD_REPLY_TYPE_ERROR => {
            assert!(len >= 6, "an error chunk of {len} bytes");
            g.error = u32::from_be_bytes(payload[..4].try_into().expect("4 bytes"));
            assert_ne!(g.error, 0, "an error chunk with error 0");
            let n = usize::from(u16::from_be_bytes([payload[4], payload[5]]));
            assert_eq!(len, 6 + n, "the message fills the chunk");
            let m = std::str::from_utf8(&payload[6..]).expect("a UTF-8 message");
            g.message = Some(m.to_string());
        }
        NBD_REPLY_TYPE_BLOCK_STATUS => {
            assert_eq!(
                h.kind, NBD_CMD_BLOCK_STATUS,
                "block status for another request"
            );
            assert!(
                len >= 12 && (len - 4) % 8 == 0,
                "block status of {len} bytes"
            );
            let id = u32::from_be_bytes(payload[..4].try_into().expect("4 bytes"));
            assert_eq!(id, BASE_ALLOCATION_ID, "the selected context");
            g.descriptors = Some(
                payload[4..]
                    .chunks_exact(8)
                    .map(|c| {
                        (
                            u32::from_be_bytes(c[..4].try_into().expect("4 bytes")),
                            u32::from_be_bytes(c[4..].try_into().expect("4 bytes")),
                        )
                    })
                    .collect(),
            );
        }
        other => panic!("chunk type {other}"),
    }
    (i, g)
}
