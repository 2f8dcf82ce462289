//! NBD requests as block commands: each [`BlockRequest`] becomes one or
//! more initiator commands (reads and writes split at `max_io`), and its
//! reply is sent once every part completed.

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

/// One NBD request in progress.
struct Job {
    reply: tokio::sync::oneshot::Sender<Result<nbd::BlockReply, nbd::BlockError>>,
    parts_left: usize,
    /// A read's bytes, filled in as its parts complete.
    data: Option<Vec<u8>>,
    /// A write's length.
    written: u64,
    error: Option<nbd::BlockError>,
}

/// The NBD requests of one connection in progress, and which command
/// belongs to which.
#[derive(Default)]
pub struct Bridge {
    next_job: u64,
    jobs: HashMap<u64, Job>,
    /// A command's job and where its bytes go in a read's buffer.
    parts: HashMap<Tag, (u64, usize)>,
    /// Bytes of the reads answered.
    bytes_read: u64,
    /// Bytes of the writes answered.
    bytes_written: u64,
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

    /// Answer every request in progress with `error` at once (the
    /// connection goes); their commands' completions are ignored.
    pub fn fail_all(&mut self, error: &nbd::BlockError) {
        self.parts.clear();
        for (_, job) in self.jobs.drain() {
            let _ = job.reply.send(Err(error.clone()));
        }
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
        let step = max_io.max(1) as usize;
        let mut ops: Vec<(BlockOp, usize)> = Vec::new();
        let mut data = None;
        let mut written = 0;
        match req.op {
            nbd::BlockOp::Read { offset, len } => {
                data = Some(vec![0; len as usize]);
                let mut at = 0usize;
                while at < len as usize {
                    let n = step.min(len as usize - at);
                    ops.push((
                        BlockOp::Read {
                            offset: offset + at as u64,
                            len: n as u32,
                        },
                        at,
                    ));
                    at += n;
                }
            }
            nbd::BlockOp::Write { offset, data, fua } => {
                written = data.len() as u64;
                for (i, chunk) in data.chunks(step).enumerate() {
                    ops.push((
                        BlockOp::Write {
                            offset: offset + (i * step) as u64,
                            data: chunk.to_vec(),
                            fua,
                        },
                        0,
                    ));
                }
            }
            nbd::BlockOp::Flush => ops.push((BlockOp::Flush, 0)),
            nbd::BlockOp::Trim { offset, len, .. } => ops.push((BlockOp::Trim { offset, len }, 0)),
            nbd::BlockOp::WriteZeroes {
                offset, len, fua, ..
            } => ops.push((BlockOp::WriteZeroes { offset, len, fua }, 0)),
            _ => {
                let _ = req.reply.send(Err(nbd::BlockError::NotSupported));
                return;
            }
        }
        let id = self.next_job;
        self.next_job += 1;
        let mut job = Job {
            reply: req.reply,
            parts_left: 0,
            data,
            written,
            error: None,
        };
        for (op, at) in ops {
            match engine.submit(node, op) {
                Ok(tag) => {
                    job.parts_left += 1;
                    self.parts.insert(tag, (id, at));
                }
                Err(e) => {
                    job.error = Some(match e {
                        relink_block::SubmitError::Ended(end) => {
                            nbd_error(BlockError::SessionEnded(end))
                        }
                        _ => nbd::BlockError::InvalidArgument,
                    });
                    break;
                }
            }
        }
        if job.parts_left == 0 {
            self.finish(job);
        } else {
            self.jobs.insert(id, job);
        }
    }

    /// Take the engine's completions and answer the requests they
    /// finish; returns the completions of commands not submitted here.
    pub fn complete(&mut self, engine: &mut InitiatorEngine) -> Vec<BlockCompletion> {
        let mut others = Vec::new();
        while let Some((tag, result)) = engine.poll_completion() {
            let Some((id, at)) = self.parts.remove(&tag) else {
                others.push((tag, result));
                continue;
            };
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
            match result {
                Ok(BlockReply::Data(bytes)) => match job.data.as_mut() {
                    Some(buf) if at + bytes.len() <= buf.len() => {
                        buf[at..at + bytes.len()].copy_from_slice(&bytes);
                    }
                    _ => {
                        job.error.get_or_insert(nbd::BlockError::Io(
                            "a read's data of a wrong length".into(),
                        ));
                    }
                },
                Ok(_) => {}
                Err(e) => {
                    job.error.get_or_insert(nbd_error(e));
                }
            }
            job.parts_left -= 1;
            if job.parts_left == 0 {
                if let Some(job) = self.jobs.remove(&id) {
                    self.finish(job);
                }
            }
        }
        others
    }
}

impl Bridge {
    fn finish(&mut self, job: Job) {
        let result = match (job.error, job.data) {
            (Some(e), _) => Err(e),
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
