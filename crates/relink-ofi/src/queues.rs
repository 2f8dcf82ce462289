//! Event queues and completion queues as the provider keeps them: what an
//! `fi_eq_read` or `fi_cq_read` hands out, in Rust types. The FFI module
//! writes them into libfabric's entry formats.
//!
//! An error entry at the head of a queue stops the reads (`-FI_EAVAIL`)
//! until `fi_eq_readerr` / `fi_cq_readerr` takes it, as libfabric
//! specifies; the entries behind it wait in order.

#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::net::SocketAddrV4;

/// One event of an event queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EqEvent {
    /// `FI_CONNREQ`: a connection request reached a passive endpoint.
    ConnReq {
        /// The passive endpoint's fid (libfabric's pointer).
        fid: usize,
        /// The request's handle for `fi_accept`/`fi_reject`.
        connreq: u64,
        /// The address it was sent to.
        local: SocketAddrV4,
        /// The requester's address.
        peer: SocketAddrV4,
        /// The requester's CM data.
        data: Vec<u8>,
    },
    /// `FI_CONNECTED`: an endpoint's connection is up.
    Connected {
        /// The endpoint's fid.
        fid: usize,
        /// The peer's CM data (the acceptor's, for the connecting side).
        data: Vec<u8>,
    },
    /// `FI_SHUTDOWN`: an endpoint's connection ended for good.
    Shutdown {
        /// The endpoint's fid.
        fid: usize,
    },
}

/// An error entry of an event queue (`fi_eq_readerr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EqError {
    /// The endpoint's fid.
    pub fid: usize,
    /// The positive `FI_E*` errno.
    pub err: u32,
    /// The peer's CM data of a rejection.
    pub data: Vec<u8>,
    /// What happened, in words (`fi_eq_strerror`).
    pub message: String,
}

/// An event queue: events and errors in the order they happened.
#[derive(Debug, Default)]
pub struct EventQueue {
    entries: VecDeque<Result<EqEvent, EqError>>,
}

/// What the head of a queue holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Head<T, E> {
    /// Nothing.
    Empty,
    /// An entry.
    Entry(T),
    /// An error: take it with the readerr call.
    Error(E),
}

impl EventQueue {
    /// Add an event.
    pub fn push(&mut self, e: EqEvent) {
        self.entries.push_back(Ok(e));
    }

    /// Add an error entry.
    pub fn push_error(&mut self, e: EqError) {
        self.entries.push_back(Err(e));
    }

    /// Whether anything waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The head: taken unless `peek`; an error stays for `read_error`.
    pub fn read(&mut self, peek: bool) -> Head<EqEvent, ()> {
        match self.entries.front() {
            None => Head::Empty,
            Some(Err(_)) => Head::Error(()),
            Some(Ok(e)) => {
                let e = e.clone();
                if !peek {
                    self.entries.pop_front();
                }
                Head::Entry(e)
            }
        }
    }

    /// The error at the head, taken.
    pub fn read_error(&mut self) -> Option<EqError> {
        match self.entries.front() {
            Some(Err(_)) => self.entries.pop_front().and_then(Result::err),
            _ => None,
        }
    }

    /// Forget the entries of endpoint `fid` (it is being closed): the
    /// connection requests among them, which nobody read, for the caller
    /// to refuse.
    pub fn forget(&mut self, fid: usize) -> Vec<u64> {
        let mut unread = Vec::new();
        self.entries.retain(|e| match e {
            Ok(EqEvent::ConnReq {
                fid: f, connreq, ..
            }) if *f == fid => {
                unread.push(*connreq);
                false
            }
            Ok(EqEvent::ConnReq { fid: f, .. })
            | Ok(EqEvent::Connected { fid: f, .. })
            | Ok(EqEvent::Shutdown { fid: f }) => *f != fid,
            Err(e) => e.fid != fid,
        });
        unread
    }
}

/// One completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqEntry {
    /// The operation's context (the application's pointer).
    pub context: usize,
    /// `FI_SEND | FI_MSG`, `FI_RECV | FI_MSG`, `FI_RMA | FI_WRITE`, ...
    pub flags: u64,
    /// Bytes moved (a receive's message length).
    pub len: usize,
    /// Remote CQ data (with `FI_REMOTE_CQ_DATA` in `flags`).
    pub data: u64,
}

/// An error completion (`fi_cq_readerr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CqError {
    /// The completion it stands for.
    pub entry: CqEntry,
    /// The positive `FI_E*` errno.
    pub err: u32,
    /// Bytes that did not fit a receive buffer (`FI_ETRUNC`).
    pub olen: usize,
    /// What happened, in words (`fi_cq_strerror`).
    pub message: String,
}

/// A completion queue.
#[derive(Debug, Default)]
pub struct CompletionQueue {
    entries: VecDeque<Result<CqEntry, CqError>>,
}

impl CompletionQueue {
    /// Add a completion.
    pub fn push(&mut self, e: CqEntry) {
        self.entries.push_back(Ok(e));
    }

    /// Add an error completion.
    pub fn push_error(&mut self, e: CqError) {
        self.entries.push_back(Err(e));
    }

    /// Whether anything waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Up to `max` completions from the head, stopping before an error;
    /// `Head::Error` when the head is one.
    pub fn read(&mut self, max: usize) -> Head<Vec<CqEntry>, ()> {
        match self.entries.front() {
            None => return Head::Empty,
            Some(Err(_)) => return Head::Error(()),
            Some(Ok(_)) => {}
        }
        let mut out = Vec::new();
        while out.len() < max {
            match self.entries.front() {
                Some(Ok(e)) => {
                    out.push(*e);
                    self.entries.pop_front();
                }
                _ => break,
            }
        }
        Head::Entry(out)
    }

    /// The error at the head, taken.
    pub fn read_error(&mut self) -> Option<CqError> {
        match self.entries.front() {
            Some(Err(_)) => self.entries.pop_front().and_then(Result::err),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(context: usize) -> CqEntry {
        CqEntry {
            context,
            flags: 0,
            len: 0,
            data: 0,
        }
    }

    #[test]
    fn an_error_stops_reads_until_taken() {
        let mut q = CompletionQueue::default();
        q.push(entry(1));
        q.push(entry(2));
        q.push_error(CqError {
            entry: entry(3),
            err: 5,
            olen: 0,
            message: "x".into(),
        });
        q.push(entry(4));
        assert_eq!(q.read(8), Head::Entry(vec![entry(1), entry(2)]));
        assert_eq!(q.read(8), Head::Error(()));
        assert_eq!(q.read_error().unwrap().entry, entry(3));
        assert_eq!(q.read_error(), None);
        assert_eq!(q.read(1), Head::Entry(vec![entry(4)]));
        assert_eq!(q.read(1), Head::Empty);
    }

    #[test]
    fn peek_leaves_the_event() {
        let mut q = EventQueue::default();
        q.push(EqEvent::Shutdown { fid: 7 });
        assert_eq!(q.read(true), Head::Entry(EqEvent::Shutdown { fid: 7 }));
        assert_eq!(q.read(false), Head::Entry(EqEvent::Shutdown { fid: 7 }));
        assert_eq!(q.read(false), Head::Empty);
        q.push(EqEvent::Shutdown { fid: 7 });
        q.push(EqEvent::Shutdown { fid: 8 });
        q.forget(7);
        assert_eq!(q.read(false), Head::Entry(EqEvent::Shutdown { fid: 8 }));
    }
}
