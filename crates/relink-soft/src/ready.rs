//! The readiness fd of a soft host ([`Provider::event_fd`]): a connected
//! pair of Unix sockets, the read end handed out. One byte in the pair
//! makes the read end readable; the host engine says when to write it and
//! when to take it back (`HostState::take_ready` / `take_drained`).
//!
//! Every change happens under the host's lock (the world's in-process, the
//! host's over TCP): the transport calls [`ReadyFd::sync`] after each
//! change of the host, before it lets the lock go. Until the caller first
//! asks for the fd nothing is created and `sync` costs one atomic load.
//!
//! Off Unix there is no fd, and [`ReadyFd::sync`] does nothing.
//!
//! [`Provider::event_fd`]: relink_fabric::Provider::event_fd

#[cfg(unix)]
pub(crate) use imp::ReadyFd;
#[cfg(not(unix))]
pub(crate) use stub::ReadyFd;

#[cfg(unix)]
mod imp {
    use std::io::{ErrorKind, Read, Write};
    use std::os::fd::{AsFd, BorrowedFd};
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;

    use crate::host::HostState;

    /// One host's readiness fd (see the module docs).
    #[derive(Default)]
    pub(crate) struct ReadyFd {
        /// The read end (handed out) and the write end; created by the first
        /// [`fd`](ReadyFd::fd).
        pair: OnceLock<(UnixStream, UnixStream)>,
        /// A byte sits in the pair: the read end is readable. Changed only
        /// under the host's lock (atomic only to be shared).
        signalled: AtomicBool,
    }

    impl ReadyFd {
        /// The read end, created on the first call — readable until the caller
        /// next drains the event stream, as the host cannot tell what the
        /// caller has seen so far. `None` if the sockets cannot be created.
        /// Call under the host's lock.
        pub(crate) fn fd(&self, host: &mut HostState) -> Option<BorrowedFd<'_>> {
            if self.pair.get().is_none() {
                let pair = UnixStream::pair().and_then(|(r, w)| {
                    r.set_nonblocking(true)?;
                    w.set_nonblocking(true)?;
                    Ok((r, w))
                });
                match pair {
                    Ok(pair) => {
                        // Stale: the new fd starts readable either way.
                        host.take_drained();
                        host.take_ready();
                        let _ = (&pair.1).write(&[1]);
                        self.signalled.store(true, Ordering::Relaxed);
                        let _ = self.pair.set(pair);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "soft fabric: no event fd");
                        return None;
                    }
                }
            }
            self.pair.get().map(|(r, _)| r.as_fd())
        }

        /// Whether the read end is readable (a byte sits in the pair).
        pub(crate) fn is_signalled(&self) -> bool {
            self.signalled.load(Ordering::Relaxed)
        }

        /// Bring the fd up to date with `host`: taken back if the caller
        /// drained the event stream since the last call, then made readable if
        /// anything came for the caller. Call under the host's lock, after
        /// every change of the host.
        pub(crate) fn sync(&self, host: &mut HostState) {
            let Some((r, w)) = self.pair.get() else {
                return;
            };
            if host.take_drained() && self.signalled.swap(false, Ordering::Relaxed) {
                let mut buf = [0u8; 16];
                loop {
                    match (&*r).read(&mut buf) {
                        Ok(n) if n > 0 => continue,
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        _ => break,
                    }
                }
            }
            if host.take_ready() && !self.signalled.swap(true, Ordering::Relaxed) {
                let _ = (&*w).write(&[1]);
            }
        }
    }
}

#[cfg(not(unix))]
mod stub {
    use crate::host::HostState;

    /// No readiness fd off Unix.
    #[derive(Default)]
    pub(crate) struct ReadyFd;

    impl ReadyFd {
        /// Nothing to bring up to date.
        pub(crate) fn sync(&self, _host: &mut HostState) {}

        /// Never readable: there is no fd.
        pub(crate) fn is_signalled(&self) -> bool {
            false
        }
    }
}
