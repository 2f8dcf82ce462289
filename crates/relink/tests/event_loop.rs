//! Event-loop integration of a `Node` over the TCP soft fabric (two
//! `TcpHost`s of this process, each with a runtime directory of its own):
//! the node's `event_fd` becomes readable when the peer sends and is clear
//! once `poll` drained it; `wait` returns when a message arrives, long
//! before its deadline; and a loop that sleeps on nothing but the fds
//! (`poll(2)` with the next session deadline as timeout) carries a
//! session's traffic to its end. `wait` and the loop on the fds are
//! tried in both poll modes (`PollMode::Busy` arms the CQs only in
//! `prepare_to_sleep`).
#![cfg(unix)]

use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use relink::{
    Node, Path, Policy, PollMode, SessionEvent, SessionHandle, SessionOptions, State, Timestamp,
};
use relink_sim::{TcpHosts, INITIATOR, TARGET};
use rustix::event::{poll, PollFd, PollFlags, Timespec};

/// Session options with the keepalive far off, so that an idle session
/// stays silent for the length of a test.
fn quiet() -> SessionOptions {
    SessionOptions::builder()
        .policy(
            Policy::builder()
                .keepalive(Some(Duration::from_secs(120)))
                .build()
                .expect("valid policy"),
        )
        .build()
        .expect("valid session options")
}

/// Two nodes on two TCP hosts (the directories outlive them: declared
/// first, dropped last) and one established session, `a` → `b`.
struct Setup {
    a: Node,
    b: Node,
    s: SessionHandle,
    t: SessionHandle,
    _dirs: TcpHosts,
}

fn setup(mode: PollMode) -> Setup {
    let dirs = TcpHosts::new("event-loop");
    let mut a = Node::seeded_for_simulation(dirs.host(INITIATOR), 1);
    let mut b = Node::seeded_for_simulation(dirs.host(TARGET), 2);
    a.set_poll_mode(mode);
    b.set_poll_mode(mode);
    // The fds are made by the first call, readable until the first poll:
    // made now, they are clear once the setup polled.
    assert!(a.event_fd().is_some() && b.event_fd().is_some());
    let port = std::net::TcpListener::bind("127.0.0.2:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.2")
        .port();
    let addr = SocketAddr::new("127.0.0.2".parse().unwrap(), port);
    b.listen(addr, quiet()).unwrap();
    let s = a
        .connect(
            vec![Path {
                local: None,
                peer: addr,
            }],
            quiet(),
        )
        .unwrap();
    let t0 = Instant::now();
    let mut t = None;
    loop {
        // Both nodes on this thread: each waits at most 1 ms in turn.
        let _ = a.wait_for(Duration::from_millis(1));
        let _ = b.wait_for(Duration::from_millis(1));
        t = t.or_else(|| b.accept().map(|acc| acc.session));
        if let Some(t) = t {
            if a.state(s) == Some(State::Established) && b.state(t) == Some(State::Established) {
                break;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "not established: {:?}",
            a.state(s)
        );
    }
    let t = t.expect("accepted");
    Setup {
        a,
        b,
        s,
        t,
        _dirs: dirs,
    }
}

/// Poll both nodes until neither has done anything for 100 ms: nothing is
/// in flight any more (acks, credits and their completions included).
fn settle(a: &mut Node, b: &mut Node) {
    let mut last = Instant::now();
    while last.elapsed() < Duration::from_millis(100) {
        if a.poll() | b.poll() {
            last = Instant::now();
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Whether `fd` polls readable within `timeout`.
fn readable(fd: BorrowedFd<'_>, timeout: Duration) -> bool {
    let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
    let ts = Timespec::try_from(timeout).expect("timeout");
    poll(&mut fds, Some(&ts)).expect("poll");
    fds[0].revents().contains(PollFlags::IN)
}

#[test]
fn the_fd_is_readable_after_the_peer_sends_and_clear_after_poll() {
    let Setup {
        mut a,
        mut b,
        s,
        t,
        _dirs,
    } = setup(PollMode::Events);
    for round in 0..3u8 {
        settle(&mut a, &mut b);
        let fd = b.event_fd().expect("the TCP soft fabric has an event fd");
        assert!(
            !readable(fd, Duration::ZERO),
            "round {round}: readable with nothing in flight"
        );
        a.send(s, &[round; 100]).unwrap();
        // `send` posts at once on an idle send queue; else the node's next
        // poll does.
        a.poll();
        let fd = b.event_fd().expect("fd");
        assert!(
            readable(fd, Duration::from_secs(10)),
            "round {round}: not readable after the peer sent"
        );
        while b.poll() {}
        assert_eq!(
            b.poll_delivery(t).map(|(_, m)| m),
            Some(vec![round; 100]),
            "round {round}: readable, and poll found the message"
        );
        // The ack b sent and its completion, a's completion: once all of it
        // settled, the fd is clear again.
        settle(&mut a, &mut b);
        let fd = b.event_fd().expect("fd");
        assert!(
            !readable(fd, Duration::ZERO),
            "round {round}: still readable after poll drained it"
        );
        assert!(a.poll_completion(s).is_some_and(|c| c.outcome.is_success()));
    }
}

#[test]
fn wait_returns_when_a_message_arrives() {
    wait_returns_when_a_message_arrives_in(PollMode::Events);
}

#[test]
fn wait_returns_when_a_message_arrives_busy_polling() {
    wait_returns_when_a_message_arrives_in(PollMode::Busy);
}

fn wait_returns_when_a_message_arrives_in(mode: PollMode) {
    let Setup {
        mut a,
        mut b,
        s,
        t,
        _dirs,
    } = setup(mode);
    settle(&mut a, &mut b);
    // Nothing in flight, no timer due for two minutes: a short wait ends
    // at its deadline, with nothing done.
    let before = b.now();
    assert!(!b.wait_for(Duration::from_millis(20)), "nothing to do");
    assert!(b.now() >= before + Duration::from_millis(20));

    // The sender, on a thread of its own: sends after a while, then waits
    // for the completion (the peer's delivery).
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        a.send(s, b"wake up").unwrap();
        let give_up = Instant::now() + Duration::from_secs(20);
        loop {
            let _ = a.wait_for(Duration::from_secs(1));
            if let Some(c) = a.poll_completion(s) {
                assert!(c.outcome.is_success());
                return a;
            }
            assert!(Instant::now() < give_up, "no completion");
        }
    });

    // The receiver waits with a deadline far off: each return before it is
    // `true` (something was done), and the message is there after the
    // first return or the first few (an ack, a spurious wake-up).
    let deadline = b.now() + Duration::from_secs(30);
    let mut returns = 0;
    let msg = loop {
        let woke = b.wait(Some(deadline));
        returns += 1;
        assert!(woke, "the 30 s deadline passed: nothing arrived");
        if let Some((_, m)) = b.poll_delivery(t) {
            break m;
        }
        assert!(returns < 100, "{returns} returns and no message");
    };
    assert_eq!(msg, b"wake up");
    assert!(b.now() < deadline);
    // b's acknowledgement completes a's send: b keeps running meanwhile.
    while !sender.is_finished() {
        let _ = b.wait_for(Duration::from_millis(10));
    }
    let mut a = sender.join().expect("the sender");
    settle(&mut a, &mut b);
}

/// Poll both nodes' fds with the earlier of their next deadlines as the
/// timeout (none: no timeout): the loop sleeps on nothing else.
fn sleep_on_fds(a: &Node, b: &Node) {
    let timeout = [a, b]
        .iter()
        .filter_map(|n| {
            n.next_deadline()
                .map(|d: Timestamp| d.saturating_since(n.now()))
        })
        .min();
    let (fa, fb) = (a.event_fd().expect("fd"), b.event_fd().expect("fd"));
    let mut fds = [
        PollFd::from_borrowed_fd(fa, PollFlags::IN),
        PollFd::from_borrowed_fd(fb, PollFlags::IN),
    ];
    let ts = timeout.map(|t| Timespec::try_from(t).expect("timeout"));
    poll(&mut fds, ts.as_ref()).expect("poll");
}

#[test]
fn a_loop_on_the_fds_alone_carries_a_session_to_its_end() {
    fd_loop(PollMode::Events);
}

#[test]
fn a_busy_polling_loop_on_the_fds_alone_carries_a_session_to_its_end() {
    fd_loop(PollMode::Busy);
}

/// A loop that sleeps on nothing but the fds (`sleep_on_fds`), once
/// both nodes are ready to sleep (`prepare_to_sleep`, which arms the CQs
/// of busy-polling nodes), carries 500 messages and a goodbye.
fn fd_loop(mode: PollMode) {
    const N: usize = 500;
    let dirs = TcpHosts::new("event-loop");
    let mut a = Node::seeded_for_simulation(dirs.host(INITIATOR), 3);
    let mut b = Node::seeded_for_simulation(dirs.host(TARGET), 4);
    a.set_poll_mode(mode);
    b.set_poll_mode(mode);
    assert_eq!(a.poll_mode(), mode);
    let port = std::net::TcpListener::bind("127.0.0.2:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.2")
        .port();
    let addr = SocketAddr::new("127.0.0.2".parse().unwrap(), port);
    // Default options (keepalive every 5 s): the loop must not depend on
    // timers to notice arrivals.
    b.listen(addr, SessionOptions::default()).unwrap();
    let s = a
        .connect(
            vec![Path {
                local: None,
                peer: addr,
            }],
            SessionOptions::default(),
        )
        .unwrap();
    // Sent before the session is up, and more than the receive slots hold:
    // they go out as credits allow.
    for i in 0..N {
        a.send(s, &(i as u64).to_le_bytes()).unwrap();
    }
    let t0 = Instant::now();
    let (mut t, mut got, mut done, mut closed, mut rounds) = (None, 0usize, 0usize, false, 0u64);
    let mut b_events = Vec::new();
    loop {
        // On readiness (or the timer): poll until idle, take the outputs.
        while a.poll() | b.poll() {}
        t = t.or_else(|| b.accept().map(|acc| acc.session));
        if let Some(t) = t {
            while let Some((seq, m)) = b.poll_delivery(t) {
                assert_eq!(seq.0, got as u64 + 1);
                assert_eq!(m, (got as u64).to_le_bytes());
                got += 1;
            }
            b_events.extend(std::iter::from_fn(|| b.poll_event(t)));
        }
        while let Some(c) = a.poll_completion(s) {
            assert!(c.outcome.is_success(), "{c:?}");
            done += 1;
        }
        if done == N && !closed {
            // Everything delivered and confirmed: say goodbye.
            a.close(s).unwrap();
            closed = true;
            continue;
        }
        if closed && b_events.contains(&SessionEvent::Disconnected) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "stalled after {rounds} rounds: {got} delivered, {done} completed, closed {closed}"
        );
        // Both readied (`&`, not `&&`): each arms its CQs.
        if !(a.prepare_to_sleep() & b.prepare_to_sleep()) {
            continue;
        }
        sleep_on_fds(&a, &b);
        rounds += 1;
    }
    assert_eq!((got, done), (N, N));
    assert!(
        !b_events
            .iter()
            .any(|e| matches!(e, SessionEvent::DeviceLost { .. })),
        "the goodbye was taken for a loss: {b_events:?}"
    );
    assert_eq!(a.state(s), Some(State::Closed));
}

#[test]
fn a_node_moves_to_a_thread() {
    fn send<T: Send>() {}
    send::<Node>();
}
