//! One connection: the handshake driver and the transmission loop (a reader
//! that dispatches, tasks that await the backend, a writer for replies).

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::consts::{BASE_ALLOCATION_ID, NBD_EIO};
use crate::error::{BlockError, ProtocolError};
use crate::export::{BlockOp, BlockReply, BlockRequest, Export};
use crate::handshake::{
    greeting, parse_client_flags, CloseReason, Negotiator, Next, OptionHeader, CLIENT_FLAGS_LEN,
    MAX_OPTION_LEN, OPTION_HEADER_LEN,
};
use crate::reply::{block_status_reply, reply_header};
use crate::request::{check, Command, RequestHeader, REQUEST_HEADER_LEN};
use crate::server::Shared;

/// Bytes of payload per unit of the in-flight byte budget.
const BUDGET_UNIT: usize = 4096;
/// Chunk size for discarding a rejected write's payload.
const DISCARD_CHUNK: usize = 64 * 1024;

/// A reply ready for the writer: its header bytes (simple, or one
/// structured chunk: [`reply_header`]) and a read's data.
struct Outgoing {
    header: Vec<u8>,
    data: Option<Vec<u8>>,
}

fn is_eof(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::UnexpectedEof
}

pub(crate) async fn serve<S>(shared: Arc<Shared>, mut stream: S) -> Result<(), ProtocolError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Some(chosen) = handshake(&shared, &mut stream).await? else {
        return Ok(());
    };
    transmission(shared, chosen, stream).await
}

/// What the handshake settled: the export, whether replies are
/// structured, whether `base:allocation` was selected for it.
#[derive(Debug, Clone, Copy)]
struct Chosen {
    index: usize,
    structured: bool,
    allocation: bool,
}

/// Runs the handshake; `Ok(None)` when the client ends it cleanly.
async fn handshake<S>(shared: &Shared, stream: &mut S) -> Result<Option<Chosen>, ProtocolError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    stream.write_all(&greeting()).await?;
    stream.flush().await?;
    let mut flags = [0u8; CLIENT_FLAGS_LEN];
    stream.read_exact(&mut flags).await?;
    let client = parse_client_flags(&flags)?;
    let negotiator = Negotiator::new(shared.infos.clone(), shared.config.max_payload, client);
    let mut structured = false;
    // The export whose `base:allocation` the client selected, if any.
    let mut selected = None;
    loop {
        let mut hdr = [0u8; OPTION_HEADER_LEN];
        match stream.read_exact(&mut hdr).await {
            Ok(_) => {}
            Err(e) if is_eof(&e) => return Err(ProtocolError::HandshakeAborted),
            Err(e) => return Err(e.into()),
        }
        let header = OptionHeader::parse(&hdr)?;
        if header.len > MAX_OPTION_LEN {
            return Err(ProtocolError::OptionTooLong {
                option: header.option,
                len: header.len,
                max: MAX_OPTION_LEN,
            });
        }
        let mut data = vec![0u8; header.len as usize];
        stream.read_exact(&mut data).await?;
        let outcome = negotiator.handle(header, &data, structured);
        structured |= outcome.structured;
        if let Some((export, on)) = outcome.meta {
            selected = on.then_some(export);
        }
        if !outcome.reply.is_empty() {
            // A client that aborts may close before reading the ACK.
            let sent = stream.write_all(&outcome.reply).await;
            let flushed = stream.flush().await;
            if !matches!(outcome.next, Next::Close(CloseReason::Aborted)) {
                sent?;
                flushed?;
            }
        }
        match outcome.next {
            Next::Continue => {}
            Next::Transmit(index) => {
                return Ok(Some(Chosen {
                    index,
                    structured,
                    allocation: structured && selected == Some(index),
                }))
            }
            Next::Close(CloseReason::Aborted) => return Ok(None),
            Next::Close(CloseReason::UnknownExport(name)) => {
                return Err(ProtocolError::UnknownExport(name))
            }
        }
    }
}

async fn writer<W: AsyncWrite + Unpin>(
    w: W,
    mut rx: mpsc::Receiver<Outgoing>,
) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(256 * 1024, w);
    while let Some(mut out) = rx.recv().await {
        loop {
            w.write_all(&out.header).await?;
            if let Some(d) = &out.data {
                w.write_all(d).await?;
            }
            match rx.try_recv() {
                Ok(next) => out = next,
                Err(_) => break,
            }
        }
        w.flush().await?;
    }
    w.flush().await?;
    w.shutdown().await
}

/// Reads and drops `len` bytes in bounded chunks.
async fn discard<R: AsyncRead + Unpin>(r: &mut R, mut len: u64) -> std::io::Result<()> {
    let mut buf = vec![0u8; DISCARD_CHUNK.min(len as usize)];
    while len > 0 {
        let n = (len as usize).min(buf.len());
        r.read_exact(&mut buf[..n]).await?;
        len -= n as u64;
    }
    Ok(())
}

fn to_op(cmd: Command, data: Option<Vec<u8>>) -> Option<BlockOp> {
    Some(match cmd {
        Command::Read { offset, len } => BlockOp::Read { offset, len },
        Command::Write { offset, fua, .. } => BlockOp::Write {
            offset,
            data: data.unwrap_or_default(),
            fua,
        },
        Command::Flush => BlockOp::Flush,
        Command::Trim { offset, len, fua } => BlockOp::Trim { offset, len, fua },
        Command::WriteZeroes {
            offset,
            len,
            fua,
            may_trim,
        } => BlockOp::WriteZeroes {
            offset,
            len,
            fua,
            may_trim,
        },
        Command::BlockStatus { offset, len, .. } => BlockOp::BlockStatus { offset, len },
        Command::Disconnect => return None,
    })
}

async fn transmission<S>(
    shared: Arc<Shared>,
    chosen: Chosen,
    stream: S,
) -> Result<(), ProtocolError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Chosen {
        index,
        structured,
        allocation,
    } = chosen;
    let export: Export = shared.exports[index].clone();
    // Block status descriptors come in whole blocks of it.
    let minimum = export.info.block_sizes.minimum;
    let cfg = shared.config;
    let (mut r, w) = tokio::io::split(stream);
    let (tx, rx) = mpsc::channel::<Outgoing>(cfg.queue_depth);
    let writer = tokio::spawn(writer(w, rx));
    let slots = Arc::new(Semaphore::new(cfg.queue_depth));
    let budget_units = cfg
        .max_in_flight_bytes
        .max(cfg.max_payload as usize)
        .div_ceil(BUDGET_UNIT);
    let budget = Arc::new(Semaphore::new(budget_units));
    let result = loop {
        let mut hdr = [0u8; REQUEST_HEADER_LEN];
        match r.read_exact(&mut hdr).await {
            Ok(_) => {}
            Err(e) if is_eof(&e) => break Ok(()),
            Err(e) => break Err(e.into()),
        }
        let header = match RequestHeader::parse(&hdr) {
            Ok(h) => h,
            Err(e) => break Err(e),
        };
        let cmd = match check(&header, &export.info, cfg.max_payload, allocation) {
            Ok(c) => c,
            Err(rej) => {
                tracing::debug!(cookie = header.cookie, %rej, "nbd request rejected");
                // A refused write's payload is read first (dropped as it
                // arrives, never held), then the reply goes out: the
                // protocol answers a request once it was received whole,
                // and a client still sending it (libnbd) takes an earlier
                // reply for a broken server and drops the connection.
                if let Err(e) = discard(&mut r, u64::from(header.payload_len())).await {
                    break Err(e.into());
                }
                let message = rej.to_string();
                let out = Outgoing {
                    header: reply_header(
                        structured,
                        header.cookie,
                        Err((rej.nbd_errno(), &message)),
                    ),
                    data: None,
                };
                if tx.send(out).await.is_err() {
                    break Ok(());
                }
                continue;
            }
        };
        if cmd == Command::Disconnect {
            break Ok(());
        }
        let payload_bytes = match cmd {
            Command::Read { len, .. } | Command::Write { len, .. } => len as usize,
            _ => 0,
        };
        let slot = slots.clone().acquire_owned().await.expect("never closed");
        let units = u32::try_from(payload_bytes.div_ceil(BUDGET_UNIT)).expect("payload fits");
        let bytes = budget
            .clone()
            .acquire_many_owned(units)
            .await
            .expect("never closed");
        let data = if let Command::Write { len, .. } = cmd {
            // Read into capacity as it is: a zero-filled buffer per request
            // cost a memset and, with glibc handing large blocks back and
            // forth, page faults on every write.
            let mut d = Vec::with_capacity(len as usize);
            match (&mut r).take(u64::from(len)).read_to_end(&mut d).await {
                Ok(n) if n == len as usize => {}
                Ok(_) => break Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into()),
                Err(e) => break Err(e.into()),
            }
            Some(d)
        } else {
            None
        };
        let cookie = header.cookie;
        let expect_len = match cmd {
            Command::Read { len, .. } => Some(len as usize),
            _ => None,
        };
        let status = match cmd {
            Command::BlockStatus { len, one, .. } => Some((len, one)),
            _ => None,
        };
        let offset = header.offset;
        let zero_len = match cmd {
            Command::Read { len, .. }
            | Command::Write { len, .. }
            | Command::Trim { len, .. }
            | Command::WriteZeroes { len, .. } => len == 0,
            _ => false,
        };
        let tx = tx.clone();
        if zero_len {
            let data = expect_len.map(|_| Vec::new());
            let out = Outgoing {
                header: reply_header(structured, cookie, Ok(expect_len.map(|_| (offset, 0)))),
                data,
            };
            if tx.send(out).await.is_err() {
                break Ok(());
            }
            continue;
        }
        let op = to_op(cmd, data).expect("disconnect handled above");
        let (reply_tx, reply_rx) = oneshot::channel();
        let sent = export
            .requests
            .send(BlockRequest {
                op,
                reply: reply_tx,
            })
            .await;
        tokio::spawn(async move {
            let result = match sent {
                Ok(()) => reply_rx
                    .await
                    .unwrap_or_else(|_| Err(BlockError::Io("backend dropped the request".into()))),
                Err(_) => Err(BlockError::ShuttingDown),
            };
            let status_reply = match (&result, status) {
                (Ok(BlockReply::Extents(extents)), Some((len, one))) => {
                    block_status_reply(cookie, BASE_ALLOCATION_ID, len, minimum, one, extents)
                }
                _ => None,
            };
            let out = match (result, expect_len) {
                (Ok(BlockReply::Extents(_)), None) if status_reply.is_some() => Outgoing {
                    header: status_reply.expect("checked"),
                    data: None,
                },
                (Ok(BlockReply::Data(d)), Some(n)) if d.len() == n => Outgoing {
                    header: reply_header(structured, cookie, Ok(Some((offset, n)))),
                    data: Some(d),
                },
                (Ok(BlockReply::Done), None) if status.is_none() => Outgoing {
                    header: reply_header(structured, cookie, Ok(None)),
                    data: None,
                },
                (Ok(other), _) => {
                    tracing::warn!(cookie, ?expect_len, reply = ?std::mem::discriminant(&other),
                        "nbd backend reply does not fit the request");
                    Outgoing {
                        header: reply_header(
                            structured,
                            cookie,
                            Err((
                                NBD_EIO,
                                "the server's backend answered the wrong kind of reply",
                            )),
                        ),
                        data: None,
                    }
                }
                (Err(e), _) => {
                    let message = e.to_string();
                    Outgoing {
                        header: reply_header(structured, cookie, Err((e.nbd_errno(), &message))),
                        data: None,
                    }
                }
            };
            let _ = tx.send(out).await;
            drop((slot, bytes));
        });
    };
    drop(tx);
    let written = writer.await.expect("writer task does not panic");
    result?;
    written.map_err(Into::into)
}
