//! A listening socket of the TCP transport and the thread that accepts on
//! it ([`Acceptor`]).
//!
//! On Unix the thread sleeps in `poll(2)` on the socket and on a wake-up
//! socket, so an idle listener costs no CPU; elsewhere it polls the socket
//! every 2 ms. Either way dropping the [`Acceptor`] closes the listening
//! socket before the drop returns: a re-listen on the same address right
//! after succeeds.

use std::net::{TcpListener, TcpStream};

#[cfg(unix)]
pub(crate) use imp::Acceptor;
#[cfg(not(unix))]
pub(crate) use stub::Acceptor;

/// What an acceptor does with each accepted stream (blocking mode, no
/// delay set).
pub(crate) type OnStream = Box<dyn Fn(TcpStream) + Send>;

/// Accept every connection the (nonblocking) `listener` has queued and
/// hand each to `on_stream`; `false` on an error other than "none left"
/// (the caller pauses before trying again).
fn accept_queued(listener: &TcpListener, on_stream: &OnStream) -> bool {
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_nodelay(true);
                on_stream(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

#[cfg(unix)]
mod imp {
    use std::io::Write;
    use std::net::TcpListener;
    use std::os::unix::net::UnixStream;
    use std::sync::mpsc;
    use std::thread;
    use std::time::Duration;

    use rustix::event::{poll, PollFd, PollFlags};

    use super::{accept_queued, OnStream};

    /// A listening socket and its accepting thread, which sleeps until a
    /// connection comes or the acceptor is dropped.
    pub(crate) struct Acceptor {
        /// One byte written here wakes the thread to end.
        wake: UnixStream,
        /// Disconnected once the thread has closed the listening socket.
        done: mpsc::Receiver<()>,
    }

    impl Acceptor {
        /// Start accepting on `listener`; each stream goes to `on_stream`.
        pub(crate) fn spawn(listener: TcpListener, on_stream: OnStream) -> std::io::Result<Self> {
            listener.set_nonblocking(true)?;
            let (wake, woken) = UnixStream::pair()?;
            let (done_tx, done) = mpsc::channel::<()>();
            thread::Builder::new()
                .name("soft-tcp-accept".into())
                .spawn(move || {
                    // Locals drop in reverse order: the listening socket
                    // (moved in here, not left in the closure's captures,
                    // which drop only after `_done`) closes before `done`
                    // tells the dropping thread it may return.
                    let _done = done_tx;
                    let listener = listener;
                    loop {
                        let mut fds = [
                            PollFd::new(&listener, PollFlags::IN),
                            PollFd::new(&woken, PollFlags::IN),
                        ];
                        match poll(&mut fds, None) {
                            Ok(_) => {}
                            Err(rustix::io::Errno::INTR) => continue,
                            Err(_) => thread::sleep(Duration::from_millis(10)),
                        }
                        if !fds[1].revents().is_empty() {
                            // Dropped: the listener closes with this thread.
                            return;
                        }
                        if !accept_queued(&listener, &on_stream) {
                            // Out of file descriptors or the like.
                            thread::sleep(Duration::from_millis(10));
                        }
                    }
                })?;
            Ok(Acceptor { wake, done })
        }
    }

    impl Drop for Acceptor {
        fn drop(&mut self) {
            let _ = (&self.wake).write(&[1]);
            // Returns once the thread dropped `_done` (and the listener
            // before it).
            let _ = self.done.recv_timeout(Duration::from_secs(5));
        }
    }
}

#[cfg(not(unix))]
mod stub {
    use std::net::TcpListener;
    use std::sync::Arc;
    use std::thread;
    use std::time::Duration;

    use super::{accept_queued, OnStream};

    /// A listening socket and its accepting thread, which polls it every
    /// 2 ms and holds it only meanwhile: dropping the acceptor closes the
    /// socket at once.
    pub(crate) struct Acceptor {
        _listener: Arc<TcpListener>,
    }

    impl Acceptor {
        /// Start accepting on `listener`; each stream goes to `on_stream`.
        pub(crate) fn spawn(listener: TcpListener, on_stream: OnStream) -> std::io::Result<Self> {
            listener.set_nonblocking(true)?;
            let listener = Arc::new(listener);
            let weak = Arc::downgrade(&listener);
            thread::Builder::new()
                .name("soft-tcp-accept".into())
                .spawn(move || loop {
                    let Some(l) = weak.upgrade() else { break };
                    let ok = accept_queued(&l, &on_stream);
                    drop(l);
                    thread::sleep(Duration::from_millis(if ok { 2 } else { 10 }));
                })?;
            Ok(Acceptor {
                _listener: listener,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::mpsc;
    use std::time::Duration;

    use super::Acceptor;

    #[test]
    fn accepts_and_closes_the_socket_when_dropped() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        let acceptor = Acceptor::spawn(
            l,
            Box::new(move |s| {
                let _ = tx.lock().unwrap().send(s);
            }),
        )
        .unwrap();
        for i in 0..3u8 {
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(&[i]).unwrap();
            let mut s = rx.recv_timeout(Duration::from_secs(10)).expect("accepted");
            let mut b = [0u8];
            s.read_exact(&mut b).unwrap();
            assert_eq!(b, [i], "a blocking stream");
        }
        drop(acceptor);
        // Closed by the drop: the address is free at once, and nothing
        // listens on it meanwhile.
        assert!(TcpStream::connect(addr).is_err(), "still listening");
        let again = TcpListener::bind(addr).expect("re-listen right after the drop");
        drop(again);
    }
}
