//! The blocking client against a scripted daemon: a Unix socket in a
//! temporary directory whose one connection a thread serves as each test
//! says.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::thread::{self, JoinHandle};

use relinkd_control::{
    parse_request, AckResult, Client, ClientError, Command, ControlError, ErrorKind, EventRecord,
    Response, StatusResult,
};

/// A socket whose first connection `serve` handles on a thread.
fn daemon(
    serve: impl FnOnce(UnixStream) + Send + 'static,
) -> (tempfile::TempDir, PathBuf, JoinHandle<()>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("control.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let thread = thread::spawn(move || serve(listener.accept().unwrap().0));
    (dir, path, thread)
}

/// Read one request line: its command.
fn request(stream: &UnixStream) -> Command {
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    parse_request(line.as_bytes()).unwrap().command
}

fn answer(mut stream: &UnixStream, response: &Response) {
    stream.write_all(response.to_line().as_bytes()).unwrap();
}

#[test]
fn a_call_takes_the_typed_result() {
    let (_dir, path, thread) = daemon(|s| {
        assert_eq!(request(&s), Command::Status {});
        answer(&s, &Response::ok(&StatusResult::default()));
    });
    let mut c = Client::connect(&path).unwrap();
    assert_eq!(c.path(), path);
    let r: StatusResult = c.call(Command::Status {}).unwrap();
    assert_eq!(r, StatusResult::default());
    thread.join().unwrap();
}

#[test]
fn a_refused_command_is_the_daemons_error() {
    let (_dir, path, thread) = daemon(|s| {
        request(&s);
        answer(
            &s,
            &Response::err(ControlError::new(
                ErrorKind::NotFound,
                "no connection \"x\"",
            )),
        );
    });
    let mut c = Client::connect(&path).unwrap();
    let e = c
        .call::<AckResult>(Command::Hold { name: "x".into() })
        .unwrap_err();
    assert!(
        matches!(&e, ClientError::Control(c) if c.kind == ErrorKind::NotFound),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "no connection \"x\"");
    thread.join().unwrap();
}

#[test]
fn a_client_refused_before_its_request_gets_the_refusal() {
    // The daemon answers and closes before the request is written.
    let (_dir, path, thread) = daemon(|s| {
        answer(
            &s,
            &Response::err(ControlError::new(
                ErrorKind::PermissionDenied,
                "permission denied: uid 65534",
            )),
        );
    });
    let mut c = Client::connect(&path).unwrap();
    thread.join().unwrap();
    let e = c.call::<StatusResult>(Command::Status {}).unwrap_err();
    assert!(
        matches!(&e, ClientError::Control(c) if c.kind == ErrorKind::PermissionDenied),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "permission denied: uid 65534");
}

#[test]
fn a_stream_ends_when_the_daemon_closes() {
    let (_dir, path, thread) = daemon(|s| {
        assert_eq!(request(&s), Command::Events { follow: true });
        answer(
            &s,
            &Response::ok(&AckResult {
                message: "following events".into(),
            }),
        );
        for (name, event) in [
            ("device_lost", "transport lost: disconnected"),
            ("resumed", "resumed after 0.100 s down"),
        ] {
            answer(
                &s,
                &Response::ok(&EventRecord {
                    at: "2026-12-06T13:04:05.123Z".into(),
                    source: "connect disk".into(),
                    kind: "session".into(),
                    session: Some(1),
                    name: name.into(),
                    event: event.into(),
                }),
            );
        }
    });
    let mut c = Client::connect(&path).unwrap();
    let _: AckResult = c.call(Command::Events { follow: true }).unwrap();
    let mut events = Vec::new();
    while let Some(r) = c.next_response().unwrap() {
        events.push(r.into_result::<EventRecord>().unwrap().name);
    }
    assert_eq!(events, ["device_lost", "resumed"]);
    thread.join().unwrap();
}

#[test]
fn no_daemon_closed_and_garbage_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.sock");
    let e = Client::connect(&missing).unwrap_err();
    assert!(matches!(e, ClientError::Connect { .. }), "{e:?}");
    let prefix = format!("cannot reach relinkd at {}: ", missing.display());
    assert!(e.to_string().starts_with(&prefix), "{e}");
    assert!(std::error::Error::source(&e).is_none());

    let (_dir, path, thread) = daemon(|s| {
        request(&s);
    });
    let e = Client::connect(&path)
        .unwrap()
        .call::<StatusResult>(Command::Status {})
        .unwrap_err();
    assert!(matches!(e, ClientError::Closed { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!("relinkd at {} closed the connection", path.display())
    );
    thread.join().unwrap();

    let (_dir, path, thread) = daemon(|mut s| {
        request(&s);
        s.write_all(b"hello\n").unwrap();
    });
    let e = Client::connect(&path)
        .unwrap()
        .call::<StatusResult>(Command::Status {})
        .unwrap_err();
    assert!(matches!(e, ClientError::NotAResponse(_)), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("relinkd answered a line that is not a response: "),
        "{e}"
    );
    thread.join().unwrap();
}
