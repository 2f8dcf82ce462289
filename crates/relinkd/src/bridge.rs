//! NBD requests as block commands: each [`BlockRequest`] becomes one or
//! more initiator commands (reads and writes split at `max_io`), and its
//! reply is sent once every part completed.
//!
//! When the session ends under a request (the target restarted, was
//! stopped, or the session gave up), the bridge can *hold* it: each part
//! that ended with the session is kept and sent again, whole, on the next
//! session that serves the same volume ([`Bridge::reissue`]). Every block
//! command is idempotent — a READ, a WRITE of the same bytes at the same
//! place, WRITE_ZEROES, TRIM — so a part that took effect on the old
//! target and is done again changes nothing, and the client sees one
//! answer. A FLUSH is honest across it: the bridge counts the writes the
//! target acknowledged and which of them a completed FLUSH covered; when
//! the new session's target runs on another boot of its host (the host
//! restarted, not only the daemon), writes acknowledged and never flushed
//! may be lost, and the next FLUSH fails (`EIO`) instead of claiming them
//! durable ([`Bridge::target_restarted`]).

use std::collections::HashMap;

use relink_block::{
    BlockCompletion, BlockError, BlockOp, BlockReply, InitiatorEngine, Node, Tag, TargetError,
};
use relink_nbd::{self as nbd, BlockRequest};

/// The NBD error for a failed block command.
#[must_use]
pub fn nbd_error(e: BlockError) -> nbd::BlockError {
    match e {
        BlockError::Target(TargetError::ReadOnly) => nbd::BlockError::PermissionDenied,
        BlockError::Target(TargetError::NoSpace) => nbd::BlockError::NoSpace,
        BlockError::Target(TargetError::OutOfRange | TargetError::Invalid) => {
            nbd::BlockError::InvalidArgument
        }
        BlockError::Target(TargetError::Unsupported) => nbd::BlockError::NotSupported,
        BlockError::SessionEnded(_) => nbd::BlockError::ShuttingDown,
        BlockError::FastFail => nbd::BlockError::Io(
            "fast_fail_secs passed in an outage: the request failed while the session recovers \
             (it may still take effect once the session is back)"
                .into(),
        ),
        other => nbd::BlockError::Io(other.to_string()),
    }
}

/// What a FLUSH that cannot be honest answers: the target's host
/// restarted since it acknowledged writes no FLUSH covered.
const FLUSH_LOST: &str = "the target's host restarted: writes it acknowledged before and that no \
     flush had made durable may be lost";

/// One NBD request in progress.
struct Job {
    reply: tokio::sync::oneshot::Sender<Result<nbd::BlockReply, nbd::BlockError>>,
    /// What it asks (a write keeps its bytes): its parts are made from it
    /// again for a new session.
    op: nbd::BlockOp,
    parts_left: usize,
    /// A read's bytes, filled in as its parts complete.
    data: Option<Vec<u8>>,
    /// A read's length.
    read_len: usize,
    /// A block status's extents, once its one part completed.
    extents: Option<Vec<nbd::Extent>>,
    /// A write's length.
    written: u64,
    error: Option<nbd::BlockError>,
}

/// One command of a job: where it starts in the request (bytes) and how
/// long it is; for a FLUSH, the count of acknowledged writes when it was
/// sent (what it makes durable).
#[derive(Debug, Clone, Copy)]
struct Part {
    job: u64,
    at: usize,
    len: usize,
    covers: u64,
}

/// The NBD requests of one connection in progress, and which command
/// belongs to which.
#[derive(Default)]
pub struct Bridge {
    next_job: u64,
    jobs: HashMap<u64, Job>,
    /// The commands outstanding on the engine, by tag.
    parts: HashMap<Tag, Part>,
    /// Parts whose session ended before they completed, held for the next
    /// session ([`Bridge::reissue`]), in the order they were sent.
    held: Vec<Part>,
    /// Which acknowledged writes a FLUSH made durable.
    flushes: FlushBook,
    /// Bytes of the reads answered.
    bytes_read: u64,
    /// Bytes of the writes answered.
    bytes_written: u64,
}

/// The writes the target acknowledged and which of them a completed FLUSH
/// made durable, to keep FLUSH honest across a restart of the target's
/// host.
#[derive(Debug, Default)]
struct FlushBook {
    /// Writes (WRITE, WRITE_ZEROES, TRIM; not FUA) acknowledged, counted.
    acknowledged: u64,
    /// How many of them a completed FLUSH covered.
    flushed: u64,
    /// The target's host restarted with writes not flushed: the next
    /// FLUSH fails.
    lost: bool,
}

impl FlushBook {
    fn write_acknowledged(&mut self) {
        self.acknowledged += 1;
    }

    /// What a FLUSH sent now covers: the writes acknowledged before it.
    fn flush_sent(&self) -> u64 {
        self.acknowledged
    }

    /// A FLUSH sent when `covers` writes were acknowledged completed.
    fn flush_done(&mut self, covers: u64) {
        self.flushed = self.flushed.max(covers);
    }

    /// The target came back on the same boot of its host, or not.
    fn host_restarted(&mut self, same_boot: bool) {
        if !same_boot && self.acknowledged > self.flushed {
            self.lost = true;
        }
    }

    /// Whether the FLUSH about to be sent must fail instead (once: the
    /// writes it could not vouch for count as reported then).
    fn take_lost(&mut self) -> bool {
        if !self.lost {
            return false;
        }
        self.lost = false;
        self.flushed = self.acknowledged;
        true
    }
}

/// The command for bytes `at..at + len` of `op` (all of it for those
/// that move no data); a write's go by [`InitiatorEngine::submit_write`]
/// instead, from the request's bytes.
fn part_op(op: &nbd::BlockOp, at: usize, len: usize) -> Option<BlockOp> {
    Some(match op {
        nbd::BlockOp::Read { offset, .. } => BlockOp::Read {
            offset: offset + at as u64,
            len: len as u32,
        },
        nbd::BlockOp::Flush => BlockOp::Flush,
        nbd::BlockOp::Trim { offset, len, .. } => BlockOp::Trim {
            offset: *offset,
            len: *len,
        },
        nbd::BlockOp::WriteZeroes {
            offset, len, fua, ..
        } => BlockOp::WriteZeroes {
            offset: *offset,
            len: *len,
            fua: *fua,
        },
        nbd::BlockOp::BlockStatus { offset, len } => BlockOp::BlockStatus {
            offset: *offset,
            len: *len,
        },
        _ => return None,
    })
}

/// The ranges (start, length) of `op`'s parts, reads and writes split at
/// `max_io`; `None` for an operation the bridge does not serve.
fn split(op: &nbd::BlockOp, max_io: u32) -> Option<Vec<(usize, usize)>> {
    let step = max_io.max(1) as usize;
    let chunks = |total: usize| {
        (0..total.div_ceil(step))
            .map(|i| (i * step, step.min(total - i * step)))
            .collect()
    };
    Some(match op {
        nbd::BlockOp::Read { len, .. } => chunks(*len as usize),
        nbd::BlockOp::Write { data, .. } => chunks(data.len()),
        nbd::BlockOp::Flush
        | nbd::BlockOp::Trim { .. }
        | nbd::BlockOp::WriteZeroes { .. }
        | nbd::BlockOp::BlockStatus { .. } => vec![(0, 0)],
        _ => return None,
    })
}

/// Whether `op` changes the volume (counted for FLUSH's honesty): a
/// write without FUA, a write of zeroes without FUA, a trim.
fn is_unflushed_write(op: &nbd::BlockOp) -> bool {
    match op {
        nbd::BlockOp::Write { fua, .. } | nbd::BlockOp::WriteZeroes { fua, .. } => !fua,
        nbd::BlockOp::Trim { .. } => true,
        _ => false,
    }
}

impl Bridge {
    /// NBD requests not answered yet.
    #[must_use]
    pub fn in_progress(&self) -> usize {
        self.jobs.len()
    }

    /// Bytes of the reads answered with their data.
    #[must_use]
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Bytes of the writes answered done.
    #[must_use]
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Parts held for the next session.
    #[must_use]
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Answer every request in progress with `error` at once (the
    /// connection goes); their commands' completions are ignored.
    pub fn fail_all(&mut self, error: &nbd::BlockError) {
        self.parts.clear();
        self.held.clear();
        for (_, job) in self.jobs.drain() {
            let _ = job.reply.send(Err(error.clone()));
        }
    }

    /// Answer the requests whose parts are held with `error` (no session
    /// will serve them: the give-up deadline passed, or the target serves
    /// another volume now).
    pub fn fail_held(&mut self, error: &nbd::BlockError) {
        for part in std::mem::take(&mut self.held) {
            self.part_done(part.job, Some(error.clone()));
        }
    }

    /// The session that completes the held parts serves a new incarnation
    /// of the target: `same_boot` when its host did not restart meanwhile
    /// (the boot ids match and are known). With another boot, writes the
    /// old one acknowledged and no FLUSH covered may be lost: the next
    /// FLUSH fails.
    pub fn target_restarted(&mut self, same_boot: bool) {
        self.flushes.host_restarted(same_boot);
    }

    /// Submit `req` to `engine` in parts of at most `max_io` bytes. A
    /// request the engine refuses is answered at once.
    pub fn submit(
        &mut self,
        node: &mut Node,
        engine: &mut InitiatorEngine,
        max_io: u32,
        req: BlockRequest,
    ) {
        let Some(ranges) = split(&req.op, max_io) else {
            let _ = req.reply.send(Err(nbd::BlockError::NotSupported));
            return;
        };
        // A read's buffer is made when its first part's bytes come (a read
        // in one part takes them as they are).
        let (data, read_len, written) = match &req.op {
            nbd::BlockOp::Read { len, .. } => (Some(Vec::new()), *len as usize, 0),
            nbd::BlockOp::Write { data, .. } => (None, 0, data.len() as u64),
            _ => (None, 0, 0),
        };
        let id = self.next_job;
        self.next_job += 1;
        self.jobs.insert(
            id,
            Job {
                reply: req.reply,
                op: req.op,
                parts_left: 0,
                data,
                read_len,
                extents: None,
                written,
                error: None,
            },
        );
        if ranges.is_empty() {
            // Nothing to move (a read or write of 0 bytes).
            if let Some(job) = self.jobs.remove(&id) {
                self.finish(job);
            }
            return;
        }
        let parts = ranges.into_iter().map(|(at, len)| Part {
            job: id,
            at,
            len,
            covers: 0,
        });
        self.send(node, engine, parts.collect());
    }

    /// Send the held parts again on `engine`, a new session that serves
    /// the same volume (split again if its `max_io` is smaller).
    pub fn reissue(&mut self, node: &mut Node, engine: &mut InitiatorEngine, max_io: u32) {
        let held = std::mem::take(&mut self.held);
        let mut parts = Vec::with_capacity(held.len());
        for p in held {
            // Counted again in `send`.
            if let Some(job) = self.jobs.get_mut(&p.job) {
                job.parts_left -= 1;
            }
            let step = max_io.max(1) as usize;
            if p.len <= step {
                parts.push(p);
                continue;
            }
            let mut at = 0;
            while at < p.len {
                let n = step.min(p.len - at);
                parts.push(Part {
                    at: p.at + at,
                    len: n,
                    ..p
                });
                at += n;
            }
        }
        self.send(node, engine, parts);
    }

    /// Submit `parts` (of jobs in `jobs`) to `engine`. A FLUSH that cannot
    /// be honest fails instead; a part the engine refuses fails its job.
    fn send(&mut self, node: &mut Node, engine: &mut InitiatorEngine, parts: Vec<Part>) {
        for mut part in parts {
            let Some(job) = self.jobs.get_mut(&part.job) else {
                continue;
            };
            job.parts_left += 1;
            if matches!(job.op, nbd::BlockOp::Flush) && self.flushes.take_lost() {
                self.part_done(part.job, Some(nbd::BlockError::Io(FLUSH_LOST.into())));
                continue;
            }
            if job.error.is_some() {
                // An earlier part failed: the request fails anyway.
                self.part_done(part.job, None);
                continue;
            }
            part.covers = self.flushes.flush_sent();
            let submitted = if let nbd::BlockOp::Write { offset, data, fua } = &job.op {
                // Straight from the request's bytes into a free slot.
                let bytes = &data[part.at..part.at + part.len];
                engine.submit_write(node, offset + part.at as u64, bytes, *fua)
            } else {
                let Some(op) = part_op(&job.op, part.at, part.len) else {
                    self.part_done(part.job, Some(nbd::BlockError::NotSupported));
                    continue;
                };
                engine.submit(node, op)
            };
            match submitted {
                Ok(tag) => {
                    self.parts.insert(tag, part);
                }
                Err(e) => {
                    let error = match e {
                        relink_block::SubmitError::Ended(end) => {
                            nbd_error(BlockError::SessionEnded(end))
                        }
                        _ => nbd::BlockError::InvalidArgument,
                    };
                    self.part_done(part.job, Some(error));
                }
            }
        }
    }

    /// Take the engine's completions and answer the requests they
    /// finish; returns the completions of commands not submitted here.
    /// With `hold`, a part that ended with the session is kept for
    /// [`reissue`](Self::reissue) instead of failing its request.
    pub fn complete(&mut self, engine: &mut InitiatorEngine, hold: bool) -> Vec<BlockCompletion> {
        let mut others = Vec::new();
        while let Some((tag, result)) = engine.poll_completion() {
            let Some(part) = self.parts.remove(&tag) else {
                others.push((tag, result));
                continue;
            };
            let Some(job) = self.jobs.get_mut(&part.job) else {
                continue;
            };
            let error = match result {
                Err(BlockError::SessionEnded(_)) if hold => {
                    self.held.push(part);
                    continue;
                }
                Ok(BlockReply::Data(bytes)) => match job.data.as_mut() {
                    // The whole read in one part: its bytes as they came.
                    Some(buf) if buf.is_empty() && part.at == 0 && bytes.len() == job.read_len => {
                        *buf = bytes;
                        None
                    }
                    Some(buf) if part.at + bytes.len() <= job.read_len => {
                        let end = part.at + bytes.len();
                        if buf.is_empty() && part.at == 0 {
                            // The first part: its bytes as they came, with
                            // room for the rest.
                            *buf = bytes;
                            buf.reserve_exact(job.read_len - end);
                        } else if part.at == buf.len() {
                            // The next part in order.
                            buf.extend_from_slice(&bytes);
                        } else {
                            // Out of order: the gap is zeros until its
                            // part fills it.
                            if buf.len() < end {
                                buf.resize(end, 0);
                            }
                            buf[part.at..end].copy_from_slice(&bytes);
                        }
                        None
                    }
                    _ => Some(nbd::BlockError::Io(
                        "a read's data of a wrong length".into(),
                    )),
                },
                Ok(BlockReply::Extents(extents)) => {
                    // A hole reads as zeros.
                    let extents = extents
                        .iter()
                        .map(|e| nbd::Extent {
                            len: e.len,
                            hole: e.hole,
                            zero: e.hole,
                        })
                        .collect();
                    job.extents = Some(extents);
                    None
                }
                Ok(_) => {
                    if is_unflushed_write(&job.op) {
                        self.flushes.write_acknowledged();
                    } else if matches!(job.op, nbd::BlockOp::Flush) {
                        self.flushes.flush_done(part.covers);
                    }
                    None
                }
                Err(e) => Some(nbd_error(e)),
            };
            self.part_done(part.job, error);
        }
        others
    }

    /// A part of job `id` ended (`error`: how it failed): answer the
    /// request once its last part did.
    fn part_done(&mut self, id: u64, error: Option<nbd::BlockError>) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if let Some(e) = error {
            job.error.get_or_insert(e);
        }
        job.parts_left -= 1;
        if job.parts_left == 0 {
            if let Some(job) = self.jobs.remove(&id) {
                self.finish(job);
            }
        }
    }
}

impl Bridge {
    fn finish(&mut self, job: Job) {
        let result = match (job.error, job.data) {
            (Some(e), _) => Err(e),
            (None, _) if job.extents.is_some() => {
                Ok(nbd::BlockReply::Extents(job.extents.unwrap_or_default()))
            }
            (None, Some(data)) => {
                self.bytes_read += data.len() as u64;
                Ok(nbd::BlockReply::Data(data))
            }
            (None, None) => {
                self.bytes_written += job.written;
                Ok(nbd::BlockReply::Done)
            }
        };
        // The client may be gone: nothing to answer then.
        let _ = job.reply.send(result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relink_block::SessionEnd;

    #[test]
    fn a_flush_fails_once_after_the_host_restarted_with_writes_it_did_not_cover() {
        // Flushed before the restart: nothing to report.
        let mut b = FlushBook::default();
        b.write_acknowledged();
        let covers = b.flush_sent();
        b.flush_done(covers);
        b.host_restarted(false);
        assert!(!b.take_lost());

        // A write no flush covered, then another boot: the next flush
        // fails, once.
        let mut b = FlushBook::default();
        b.write_acknowledged();
        b.host_restarted(false);
        assert!(b.take_lost());
        assert!(!b.take_lost());

        // The same boot: the page cache kept it, the flush is honest.
        let mut b = FlushBook::default();
        b.write_acknowledged();
        b.host_restarted(true);
        assert!(!b.take_lost());

        // A write acknowledged after the flush was sent is not covered by
        // it.
        let mut b = FlushBook::default();
        let covers = b.flush_sent();
        b.write_acknowledged();
        b.flush_done(covers);
        b.host_restarted(false);
        assert!(b.take_lost());
    }

    #[test]
    fn requests_split_at_max_io_and_re_form_their_parts() {
        let write = nbd::BlockOp::Write {
            offset: 4096,
            data: (0..10u8).collect(),
            fua: false,
        };
        assert_eq!(split(&write, 4), Some(vec![(0, 4), (4, 4), (8, 2)]));
        // A write's parts go from its bytes (`submit_write`), not as ops.
        assert_eq!(part_op(&write, 4, 4), None);
        let read = nbd::BlockOp::Read {
            offset: 512,
            len: 10,
        };
        assert_eq!(split(&read, 4), Some(vec![(0, 4), (4, 4), (8, 2)]));
        assert_eq!(
            part_op(&read, 8, 2),
            Some(BlockOp::Read {
                offset: 520,
                len: 2
            })
        );
        let read = nbd::BlockOp::Read { offset: 0, len: 0 };
        assert_eq!(split(&read, 4), Some(vec![]));
        assert_eq!(split(&nbd::BlockOp::Flush, 4), Some(vec![(0, 0)]));
        assert!(is_unflushed_write(&write));
        assert!(!is_unflushed_write(&nbd::BlockOp::Flush));
    }

    #[test]
    fn errors_map_to_the_nbd_errno_a_client_expects() {
        let errno = |e| nbd_error(e).nbd_errno();
        let n = |e: nbd::BlockError| e.nbd_errno();
        assert_eq!(
            errno(BlockError::Target(TargetError::ReadOnly)),
            n(nbd::BlockError::PermissionDenied)
        );
        assert_eq!(
            errno(BlockError::Target(TargetError::NoSpace)),
            n(nbd::BlockError::NoSpace)
        );
        assert_eq!(
            errno(BlockError::Target(TargetError::OutOfRange)),
            n(nbd::BlockError::InvalidArgument)
        );
        assert_eq!(
            errno(BlockError::SessionEnded(SessionEnd::GaveUp)),
            n(nbd::BlockError::ShuttingDown)
        );
        assert_eq!(
            errno(BlockError::FastFail),
            n(nbd::BlockError::Io(String::new()))
        );
        assert_eq!(
            errno(BlockError::Target(TargetError::Transfer)),
            n(nbd::BlockError::Io(String::new()))
        );
    }
}
