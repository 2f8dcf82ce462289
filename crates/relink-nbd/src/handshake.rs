//! The fixed newstyle handshake, server side, sans-IO: the greeting, the
//! client flags, option headers and the reply to each option.
//!
//! A driver sends [`greeting`], reads [`CLIENT_FLAGS_LEN`] bytes into
//! [`parse_client_flags`], builds a [`Negotiator`], then loops: read
//! [`OPTION_HEADER_LEN`] bytes into [`OptionHeader::parse`], read its `len`
//! data bytes (after checking `len` against [`MAX_OPTION_LEN`]), call
//! [`Negotiator::handle`], send [`OptionOutcome::reply`] and follow
//! [`OptionOutcome::next`].

use crate::consts::*;
use crate::error::ProtocolError;
use crate::export::ExportInfo;
use crate::reply::push_option_reply;

/// Length of the server's greeting.
pub const GREETING_LEN: usize = 18;
/// Length of the client flags.
pub const CLIENT_FLAGS_LEN: usize = 4;
/// Length of an option header (`IHAVEOPT`, option, length).
pub const OPTION_HEADER_LEN: usize = 16;
/// The longest option data accepted: a 4096-byte name plus room for
/// information requests. A longer option ends the connection unread.
pub const MAX_OPTION_LEN: u32 = 16 * 1024;
/// The longest string (export name) the protocol allows.
pub const MAX_STRING_LEN: usize = 4096;

/// `NBDMAGIC`, `IHAVEOPT`, and the handshake flags `FIXED_NEWSTYLE | NO_ZEROES`.
#[must_use]
pub fn greeting() -> [u8; GREETING_LEN] {
    let mut b = [0u8; GREETING_LEN];
    b[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..18].copy_from_slice(&(NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES).to_be_bytes());
    b
}

/// The client's handshake flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientFlags {
    /// `NBD_FLAG_C_FIXED_NEWSTYLE`.
    pub fixed_newstyle: bool,
    /// `NBD_FLAG_C_NO_ZEROES`: no 124 zero bytes after `NBD_OPT_EXPORT_NAME`.
    pub no_zeroes: bool,
}

/// Parses the 4-byte client flags.
///
/// # Errors
/// [`ProtocolError::Truncated`] for fewer than 4 bytes;
/// [`ProtocolError::UnknownClientFlags`] for any bit but the two known ones
/// (the spec requires the server to close then).
pub fn parse_client_flags(buf: &[u8]) -> Result<ClientFlags, ProtocolError> {
    let Some(b) = buf.get(..CLIENT_FLAGS_LEN) else {
        return Err(ProtocolError::Truncated {
            what: "client flags",
            need: CLIENT_FLAGS_LEN,
            have: buf.len(),
        });
    };
    let flags = u32::from_be_bytes(b.try_into().expect("4 bytes"));
    if flags & !(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES) != 0 {
        return Err(ProtocolError::UnknownClientFlags(flags));
    }
    Ok(ClientFlags {
        fixed_newstyle: flags & NBD_FLAG_C_FIXED_NEWSTYLE != 0,
        no_zeroes: flags & NBD_FLAG_C_NO_ZEROES != 0,
    })
}

/// An option's header; `len` data bytes follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    /// `NBD_OPT_*`.
    pub option: u32,
    /// Length of the option data.
    pub len: u32,
}

impl OptionHeader {
    /// Parses the first [`OPTION_HEADER_LEN`] bytes of `buf`.
    ///
    /// # Errors
    /// [`ProtocolError::Truncated`] if shorter; [`ProtocolError::BadMagic`]
    /// if it does not start with `IHAVEOPT`.
    pub fn parse(buf: &[u8]) -> Result<Self, ProtocolError> {
        if buf.len() < OPTION_HEADER_LEN {
            return Err(ProtocolError::Truncated {
                what: "option header",
                need: OPTION_HEADER_LEN,
                have: buf.len(),
            });
        }
        let magic = u64::from_be_bytes(buf[0..8].try_into().expect("8 bytes"));
        if magic != IHAVEOPT {
            return Err(ProtocolError::BadMagic {
                what: "option",
                found: magic,
            });
        }
        Ok(OptionHeader {
            option: u32::from_be_bytes(buf[8..12].try_into().expect("4 bytes")),
            len: u32::from_be_bytes(buf[12..16].try_into().expect("4 bytes")),
        })
    }

    /// The header's wire form.
    #[must_use]
    pub fn encode(&self) -> [u8; OPTION_HEADER_LEN] {
        let mut b = [0u8; OPTION_HEADER_LEN];
        b[0..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
        b[8..12].copy_from_slice(&self.option.to_be_bytes());
        b[12..16].copy_from_slice(&self.len.to_be_bytes());
        b
    }
}

/// A parsed option.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OptionRequest {
    /// `NBD_OPT_EXPORT_NAME`.
    ExportName(String),
    /// `NBD_OPT_ABORT`.
    Abort,
    /// `NBD_OPT_LIST`.
    List,
    /// `NBD_OPT_INFO` (`go == false`) or `NBD_OPT_GO` (`go == true`).
    Info {
        /// `NBD_OPT_GO`: enter transmission on success.
        go: bool,
        /// The export name.
        name: String,
        /// The `NBD_INFO_*` types requested.
        requests: Vec<u16>,
    },
    /// `NBD_OPT_STRUCTURED_REPLY`: replies in chunks, errors with a
    /// message.
    StructuredReply,
    /// `NBD_OPT_LIST_META_CONTEXT` (`set == false`) or
    /// `NBD_OPT_SET_META_CONTEXT` (`set == true`).
    MetaContext {
        /// `NBD_OPT_SET_META_CONTEXT`: select them for the transmission.
        set: bool,
        /// The export name.
        export: String,
        /// The queries (context names, or for a list `namespace:`).
        queries: Vec<String>,
    },
    /// Any other option, answered `NBD_REP_ERR_UNSUP`.
    Unsupported(u32),
}

/// Option data that does not parse; answered `NBD_REP_ERR_INVALID` (or, for
/// `NBD_OPT_EXPORT_NAME`, which has no error reply, by closing).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed option {option}: {why}")]
pub struct OptionParseError {
    /// The option.
    pub option: u32,
    /// What is wrong.
    pub why: &'static str,
}

fn parse_name(option: u32, b: &[u8]) -> Result<String, OptionParseError> {
    let bad = |why| OptionParseError { option, why };
    if b.len() > MAX_STRING_LEN {
        return Err(bad("name longer than 4096 bytes"));
    }
    if b.contains(&0) {
        return Err(bad("name contains NUL"));
    }
    String::from_utf8(b.to_vec()).map_err(|_| bad("name is not UTF-8"))
}

/// Parses the data of option `option`.
///
/// # Errors
/// [`OptionParseError`] when the data's lengths disagree with its size (any
/// truncation or excess), or a name is not a valid NBD string.
pub fn parse_option(option: u32, data: &[u8]) -> Result<OptionRequest, OptionParseError> {
    let bad = |why| OptionParseError { option, why };
    match option {
        NBD_OPT_EXPORT_NAME => parse_name(option, data).map(OptionRequest::ExportName),
        NBD_OPT_ABORT => Ok(OptionRequest::Abort),
        NBD_OPT_LIST if data.is_empty() => Ok(OptionRequest::List),
        NBD_OPT_LIST => Err(bad("NBD_OPT_LIST carries data")),
        NBD_OPT_STRUCTURED_REPLY if data.is_empty() => Ok(OptionRequest::StructuredReply),
        NBD_OPT_STRUCTURED_REPLY => Err(bad("NBD_OPT_STRUCTURED_REPLY carries data")),
        NBD_OPT_LIST_META_CONTEXT | NBD_OPT_SET_META_CONTEXT => {
            let mut rest = data;
            let mut take = |n: usize, why| {
                let (head, tail) = (rest.get(..n).ok_or(bad(why))?, &rest[n..]);
                rest = tail;
                Ok::<&[u8], OptionParseError>(head)
            };
            let u32_of = |b: &[u8]| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize;
            let name_len = u32_of(take(4, "truncated export name length")?);
            let export = parse_name(option, take(name_len, "truncated export name")?)?;
            let count = u32_of(take(4, "truncated query count")?);
            // Each query takes 4 bytes at least: no allocation for a lie.
            if count > data.len() / 4 {
                return Err(bad("more queries than the data holds"));
            }
            let mut queries = Vec::with_capacity(count);
            for _ in 0..count {
                let len = u32_of(take(4, "truncated query length")?);
                queries.push(parse_name(option, take(len, "truncated query")?)?);
            }
            if !rest.is_empty() {
                return Err(bad("bytes after the queries"));
            }
            Ok(OptionRequest::MetaContext {
                set: option == NBD_OPT_SET_META_CONTEXT,
                export,
                queries,
            })
        }
        NBD_OPT_INFO | NBD_OPT_GO => {
            let name_len = data
                .get(0..4)
                .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize)
                .ok_or(bad("truncated name length"))?;
            let rest = &data[4..];
            let name = rest.get(..name_len).ok_or(bad("truncated name"))?;
            let rest = &rest[name_len..];
            let count = rest
                .get(0..2)
                .map(|b| u16::from_be_bytes(b.try_into().expect("2 bytes")) as usize)
                .ok_or(bad("truncated information count"))?;
            let rest = &rest[2..];
            if rest.len() != count * 2 {
                return Err(bad("information requests disagree with the count"));
            }
            let requests = rest
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            Ok(OptionRequest::Info {
                go: option == NBD_OPT_GO,
                name: parse_name(option, name)?,
                requests,
            })
        }
        other => Ok(OptionRequest::Unsupported(other)),
    }
}

/// What follows an option's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Next {
    /// Read the next option.
    Continue,
    /// Enter transmission on the export at this index of the negotiator's list.
    Transmit(usize),
    /// Close the connection (after sending the reply, if any).
    Close(CloseReason),
}

/// Why the handshake ends without transmission.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// The client sent `NBD_OPT_ABORT`.
    Aborted,
    /// `NBD_OPT_EXPORT_NAME` named no export (or was malformed).
    UnknownExport(String),
}

/// The reply to one option and what follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionOutcome {
    /// Bytes to send (may be empty).
    pub reply: Vec<u8>,
    /// What to do after sending them.
    pub next: Next,
    /// This option turned structured replies on (`NBD_OPT_STRUCTURED_REPLY`
    /// acknowledged): the transmission that follows answers in chunks.
    pub structured: bool,
    /// This option (`NBD_OPT_SET_META_CONTEXT`) selected the metadata
    /// contexts of the export at this index: `Some((export,
    /// base_allocation))`, replacing an earlier selection.
    pub meta: Option<(usize, bool)>,
}

/// Answers options against a list of exports.
#[derive(Debug, Clone)]
pub struct Negotiator {
    exports: Vec<ExportInfo>,
    max_payload: u32,
    client: ClientFlags,
}

impl Negotiator {
    /// A negotiator for `exports`, capping their maximum block size to
    /// `max_payload`, for a client that sent `client`.
    #[must_use]
    pub fn new(exports: Vec<ExportInfo>, max_payload: u32, client: ClientFlags) -> Self {
        Negotiator {
            exports,
            max_payload,
            client,
        }
    }

    /// The export a name selects: an exact match, else for the empty name
    /// (the protocol's default export) the first export.
    #[must_use]
    pub fn lookup(&self, name: &str) -> Option<usize> {
        self.exports
            .iter()
            .position(|e| e.name == name)
            .or_else(|| (name.is_empty() && !self.exports.is_empty()).then_some(0))
    }

    /// The reply to option `header` with its `data`, and what follows.
    /// Malformed data gets `NBD_REP_ERR_INVALID`, an unknown name
    /// `NBD_REP_ERR_UNKNOWN`, a `NBD_OPT_GO` that does not request
    /// `NBD_INFO_BLOCK_SIZE` for an export whose minimum block size exceeds
    /// 1 `NBD_REP_ERR_BLOCK_SIZE_REQD`, options other than EXPORT_NAME, ABORT, LIST,
    /// INFO, GO, STRUCTURED_REPLY and the metadata contexts'
    /// `NBD_REP_ERR_UNSUP`; all of those continue the handshake. The one
    /// metadata context is `base:allocation`, of an export with
    /// [`ExportFlags::block_status`](crate::ExportFlags::block_status).
    ///
    /// `structured`: the client negotiated structured replies earlier in
    /// the handshake (`NBD_OPT_SET_META_CONTEXT` needs them:
    /// `NBD_REP_ERR_INVALID` without).
    #[must_use]
    pub fn handle(&self, header: OptionHeader, data: &[u8], structured: bool) -> OptionOutcome {
        let option = header.option;
        let mut reply = Vec::new();
        let req = match parse_option(option, data) {
            Ok(r) => r,
            Err(_) if option == NBD_OPT_EXPORT_NAME => {
                return OptionOutcome {
                    reply,
                    next: Next::Close(CloseReason::UnknownExport(
                        String::from_utf8_lossy(data).into_owned(),
                    )),
                    structured: false,
                    meta: None,
                }
            }
            Err(e) => {
                push_option_reply(&mut reply, option, NBD_REP_ERR_INVALID, e.why.as_bytes());
                return OptionOutcome {
                    reply,
                    next: Next::Continue,
                    structured: false,
                    meta: None,
                };
            }
        };
        let already_structured = structured;
        let mut structured = false;
        let mut meta = None;
        let next = match req {
            OptionRequest::ExportName(name) => match self.lookup(&name) {
                Some(i) => {
                    let e = &self.exports[i];
                    reply.extend_from_slice(&e.size.to_be_bytes());
                    reply.extend_from_slice(&e.flags.transmission_flags().to_be_bytes());
                    if !self.client.no_zeroes {
                        reply.extend_from_slice(&[0u8; 124]);
                    }
                    Next::Transmit(i)
                }
                None => Next::Close(CloseReason::UnknownExport(name)),
            },
            OptionRequest::Abort => {
                push_option_reply(&mut reply, option, NBD_REP_ACK, &[]);
                Next::Close(CloseReason::Aborted)
            }
            OptionRequest::List => {
                for e in &self.exports {
                    let mut d = Vec::with_capacity(4 + e.name.len() + e.description.len());
                    d.extend_from_slice(&(e.name.len() as u32).to_be_bytes());
                    d.extend_from_slice(e.name.as_bytes());
                    d.extend_from_slice(e.description.as_bytes());
                    push_option_reply(&mut reply, option, NBD_REP_SERVER, &d);
                }
                push_option_reply(&mut reply, option, NBD_REP_ACK, &[]);
                Next::Continue
            }
            OptionRequest::Info { go, name, requests } => match self.lookup(&name) {
                Some(i)
                    if go
                        && self.exports[i].block_sizes.minimum > 1
                        && !requests.contains(&NBD_INFO_BLOCK_SIZE) =>
                {
                    push_option_reply(
                        &mut reply,
                        option,
                        NBD_REP_ERR_BLOCK_SIZE_REQD,
                        b"the export has a minimum block size: request NBD_INFO_BLOCK_SIZE",
                    );
                    Next::Continue
                }
                Some(i) => {
                    self.push_info(&mut reply, option, &self.exports[i], &requests);
                    push_option_reply(&mut reply, option, NBD_REP_ACK, &[]);
                    if go {
                        Next::Transmit(i)
                    } else {
                        Next::Continue
                    }
                }
                None => {
                    push_option_reply(&mut reply, option, NBD_REP_ERR_UNKNOWN, b"no such export");
                    Next::Continue
                }
            },
            OptionRequest::StructuredReply => {
                push_option_reply(&mut reply, option, NBD_REP_ACK, &[]);
                structured = true;
                Next::Continue
            }
            OptionRequest::MetaContext {
                set,
                export,
                queries,
            } => {
                match self.lookup(&export) {
                    _ if set && !already_structured => push_option_reply(
                        &mut reply,
                        option,
                        NBD_REP_ERR_INVALID,
                        b"negotiate structured replies before selecting metadata contexts",
                    ),
                    None => push_option_reply(
                        &mut reply,
                        option,
                        NBD_REP_ERR_UNKNOWN,
                        b"no such export",
                    ),
                    Some(i) => {
                        let offered = self.exports[i].flags.block_status;
                        // A list with no query lists every context; a
                        // namespace query (`base:`) every one of it.
                        let matches = offered
                            && if set {
                                queries.iter().any(|q| q == BASE_ALLOCATION)
                            } else {
                                queries.is_empty()
                                    || queries.iter().any(|q| q == BASE_ALLOCATION || q == "base:")
                            };
                        if matches {
                            // A list gives every context id 0.
                            let id = if set { BASE_ALLOCATION_ID } else { 0 };
                            let mut d = id.to_be_bytes().to_vec();
                            d.extend_from_slice(BASE_ALLOCATION.as_bytes());
                            push_option_reply(&mut reply, option, NBD_REP_META_CONTEXT, &d);
                        }
                        push_option_reply(&mut reply, option, NBD_REP_ACK, &[]);
                        if set {
                            meta = Some((i, matches));
                        }
                    }
                }
                Next::Continue
            }
            OptionRequest::Unsupported(_) => {
                push_option_reply(&mut reply, option, NBD_REP_ERR_UNSUP, &[]);
                Next::Continue
            }
        };
        OptionOutcome {
            reply,
            next,
            structured,
            meta,
        }
    }

    /// `NBD_INFO_EXPORT` and `NBD_INFO_BLOCK_SIZE` always (the spec lets a
    /// server send the sizes unasked); the name and description when
    /// requested.
    fn push_info(&self, out: &mut Vec<u8>, option: u32, e: &ExportInfo, requests: &[u16]) {
        let mut d = Vec::new();
        d.extend_from_slice(&NBD_INFO_EXPORT.to_be_bytes());
        d.extend_from_slice(&e.size.to_be_bytes());
        d.extend_from_slice(&e.flags.transmission_flags().to_be_bytes());
        push_option_reply(out, option, NBD_REP_INFO, &d);
        d.clear();
        let sizes = e.block_sizes.effective(self.max_payload);
        d.extend_from_slice(&NBD_INFO_BLOCK_SIZE.to_be_bytes());
        d.extend_from_slice(&sizes.minimum.to_be_bytes());
        d.extend_from_slice(&sizes.preferred.to_be_bytes());
        d.extend_from_slice(&sizes.maximum.to_be_bytes());
        push_option_reply(out, option, NBD_REP_INFO, &d);
        if requests.contains(&NBD_INFO_NAME) {
            d.clear();
            d.extend_from_slice(&NBD_INFO_NAME.to_be_bytes());
            d.extend_from_slice(e.name.as_bytes());
            push_option_reply(out, option, NBD_REP_INFO, &d);
        }
        if requests.contains(&NBD_INFO_DESCRIPTION) && !e.description.is_empty() {
            d.clear();
            d.extend_from_slice(&NBD_INFO_DESCRIPTION.to_be_bytes());
            d.extend_from_slice(e.description.as_bytes());
            push_option_reply(out, option, NBD_REP_INFO, &d);
        }
    }
}
