//! The in-process fabric's event fd (`Provider::event_fd`) on virtual
//! time: it follows whatever runs the world — a fault injected by the
//! fabric, another host's `wait` — not only the host's own calls, and it
//! clears when the host's `poll_event` returns `None`. (Completions and CM
//! events on both soft modes: the conformance case `event_fd_readiness`.)
#![cfg(unix)]

use std::os::fd::BorrowedFd;
use std::time::Duration;

use relink_fabric::{DeviceEventKind, Event, Provider};
use relink_soft::SoftFabric;
use rustix::event::{poll, PollFd, PollFlags, Timespec};

fn readable(fd: BorrowedFd<'_>) -> bool {
    let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
    poll(&mut fds, Some(&Timespec::try_from(Duration::ZERO).unwrap())).unwrap();
    fds[0].revents().contains(PollFlags::IN)
}

fn drain(h: &impl Provider) -> Vec<Event> {
    std::iter::from_fn(|| h.poll_event()).collect()
}

#[test]
fn inproc_event_fd_follows_the_world() {
    let fabric = SoftFabric::new(3);
    let a = fabric.add_host("a");
    let b = fabric.add_host("b");
    let fd = a.event_fd().expect("the soft fabric has an event fd");
    assert_eq!(
        a.event_fd().map(|f| std::os::fd::AsRawFd::as_raw_fd(&f)),
        Some(std::os::fd::AsRawFd::as_raw_fd(&fd)),
        "one fd per host"
    );
    assert!(readable(fd), "a new fd is readable until the first drain");
    assert!(drain(&a).is_empty());
    assert!(!readable(fd), "cleared by poll_event returning None");

    // A fault the fabric applies, with no call on the host.
    fabric.add_device(&a, "soft0", "10.0.0.1/24");
    assert!(readable(fd), "an Added event is queued");
    let ev = a.poll_event().expect("the Added event");
    assert!(matches!(ev, Event::Device(d) if d.kind == DeviceEventKind::Added));
    assert!(readable(fd), "readable until poll_event returns None");
    assert!(a.poll_event().is_none());
    assert!(!readable(fd));

    // A device of the other host: nothing for this one.
    fabric.add_device(&b, "soft0", "10.0.0.2/24");
    assert!(!readable(fd), "b's device is not a's business");
    let fd_b = b.event_fd().expect("b's fd");
    assert!(readable(fd_b));
    drain(&b);
    assert!(!readable(fd_b));

    // A scheduled fault, run by the other host's wait.
    let at = fabric.now() + Duration::from_millis(5);
    fabric.schedule(at, relink_soft::Fault::Reset(a.index(), "soft0".into()));
    assert!(!readable(fd), "not due yet");
    let until = at + Duration::from_millis(1);
    while b.now() < until {
        b.wait(Some(until));
    }
    assert!(readable(fd), "the reset ran in b's wait");
    let kinds: Vec<DeviceEventKind> = drain(&a)
        .into_iter()
        .filter_map(|e| match e {
            Event::Device(d) => Some(d.kind),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        [
            DeviceEventKind::Fatal,
            DeviceEventKind::Removed,
            DeviceEventKind::Added
        ]
    );
    assert!(!readable(fd));
    assert!(!readable(fd_b));
}
