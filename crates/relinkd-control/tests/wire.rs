//! The wire form: request lines parsed and refused, responses carrying
//! results or errors.

use relinkd_control::{
    parse_request, AckResult, Command, ControlError, ErrorKind, Limit, Mode, Never, ProtocolError,
    Request, Response, MAX_LINE,
};

#[test]
fn a_status_request_parses() {
    let r = parse_request(b"{\"version\":1,\"command\":\"status\"}\n").unwrap();
    assert_eq!(r.command, Command::Status {});
}

#[test]
fn requests_round_trip() {
    let cmds = [
        Command::Connect {
            name: "d".into(),
            targets: vec!["127.0.0.1:1".parse().unwrap()],
            nbd_socket: "/x".into(),
            nbd_tcp: None,
            give_up_secs: Some(3),
            fast_fail_secs: Some(2),
            queue_depth: Some(8),
            max_io: None,
        },
        Command::PolicySet {
            name: "d".into(),
            give_up_secs: Some(Limit::Off(Never::None)),
            fast_fail_secs: Some(Limit::Secs(4)),
            mode: Some(Mode::Manual),
        },
        Command::Resume {
            name: "d".into(),
            path: Some(1),
        },
        Command::Events { follow: true },
        Command::Metrics {},
        Command::Reload {},
    ];
    for c in cmds {
        let line = Request::new(c.clone()).to_line();
        assert_eq!(parse_request(line.as_bytes()).unwrap().command, c, "{line}");
    }
}

#[test]
fn an_unknown_version_names_the_supported_one() {
    let e = parse_request(b"{\"version\":2,\"command\":\"status\"}").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnsupportedVersion);
    assert!(e.to_string().contains("version 1"), "{e}");
    let e = parse_request(b"{\"command\":\"status\"}").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnsupportedVersion);
}

#[test]
fn an_unknown_command_is_named() {
    let e = parse_request(b"{\"version\":1,\"command\":\"reboot\"}").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownCommand);
    assert!(e.to_string().contains("\"reboot\""), "{e}");
}

#[test]
fn unknown_fields_and_bad_lines_are_refused() {
    for line in [
        &b"{\"version\":1,\"command\":\"status\",\"x\":1}"[..],
        b"{\"version\":1,\"command\":\"disconnect\"}",
        b"{\"version\":1,\"command\":\"hold\",\"name\":3}",
        b"[1]",
        b"not json",
        b"",
    ] {
        let e = parse_request(line).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadRequest, "{e}");
    }
    let long = vec![b' '; MAX_LINE + 2];
    assert!(matches!(
        parse_request(&long),
        Err(ProtocolError::TooLong { .. })
    ));
}

#[test]
fn responses_carry_results_or_errors() {
    let ok = Response::ok(&AckResult {
        message: "done".into(),
    });
    let back: Response = serde_json::from_str(ok.to_line().trim()).unwrap();
    assert_eq!(back.into_result::<AckResult>().unwrap().message, "done");
    let err = Response::err(ControlError::new(ErrorKind::NotFound, "no connection"));
    let line = err.to_line();
    assert!(line.contains("\"kind\":\"not_found\""), "{line}");
    let back: Response = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(
        back.into_result::<AckResult>().unwrap_err().kind,
        ErrorKind::NotFound
    );
}
