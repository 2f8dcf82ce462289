//! The configuration's tests: what parses, and what is refused with the
//! offending key named.

use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(Path::new("/etc/relinkd.toml"), text)
}

fn invalid(text: &str) -> (String, String) {
    match parse(text) {
        Err(ConfigError::Invalid { file, key, reason }) => {
            assert_eq!(file, Path::new("/etc/relinkd.toml"));
            (key, reason)
        }
        other => panic!("expected an invalid value, got {other:?}"),
    }
}

const BOTH: &str = r#"
        [backend]
        soft_dir = "/run/soft"
        [[export]]
        name = "d0"
        listen = "10.0.0.2:7471"
        file = "/srv/d0.img"
        [[connect]]
        name = "r0"
        targets = ["10.0.0.2:7471", "10.0.1.2:7471"]
        nbd_socket = "/run/r0.sock"
        nbd_tcp = "127.0.0.1:10809"
        give_up_secs = 30
    "#;

#[test]
fn both_roles_parse() {
    let c = parse(BOTH).unwrap();
    assert_eq!(
        c.backend,
        Backend::Soft {
            dir: "/run/soft".into()
        }
    );
    assert_eq!(c.exports.len(), 1);
    assert!(!c.exports[0].read_only);
    assert_eq!(c.exports[0].listen, "10.0.0.2:7471".parse().unwrap());
    assert_eq!(c.connects[0].targets.len(), 2);
    assert_eq!(
        c.connects[0].nbd_tcp,
        Some("127.0.0.1:10809".parse().unwrap())
    );
    assert_eq!(c.connects[0].give_up, Some(Duration::from_secs(30)));
    assert_eq!(c.control, ControlConfig::default());
}

#[test]
fn the_control_section_parses() {
    let c = parse(&format!(
        "{BOTH}\n[control]\nsocket = \"/tmp/c.sock\"\nmetrics_listen = \"127.0.0.1:9477\"\n"
    ))
    .unwrap();
    assert_eq!(c.control.socket, Path::new("/tmp/c.sock"));
    assert!(c.control.configured);
    assert_eq!(
        c.control.metrics_listen,
        Some("127.0.0.1:9477".parse().unwrap())
    );
    let bad = format!("{BOTH}\n[control]\nmetrics_listen = \"x\"\n");
    assert_eq!(invalid(&bad).0, "control.metrics_listen");
}

#[cfg(not(feature = "rdma"))]
#[test]
fn rdma_core_backend_is_refused_without_the_feature() {
    let (key, reason) = invalid(&BOTH.replace("soft_dir = \"/run/soft\"", "kind = \"rdma-core\""));
    assert_eq!(key, "backend.kind");
    assert!(
        reason.contains("built without rdma-core support"),
        "{reason}"
    );
}

#[cfg(feature = "rdma")]
#[test]
fn rdma_core_backend_parses_with_its_source() {
    let text = BOTH.replace("soft_dir = \"/run/soft\"", "kind = \"rdma-core\"");
    assert_eq!(
        parse(&text).unwrap().backend,
        Backend::RdmaCore { source: None }
    );
    let with = text.replace(
        "kind = \"rdma-core\"",
        "kind = \"rdma-core\"\nsource = \"10.0.0.1\"",
    );
    assert_eq!(
        parse(&with).unwrap().backend,
        Backend::RdmaCore {
            source: Some("10.0.0.1".parse().unwrap())
        }
    );
    let bad = with.replace("10.0.0.1", "nowhere");
    assert_eq!(invalid(&bad).0, "backend.source");
    let soft = text.replace(
        "kind = \"rdma-core\"",
        "kind = \"rdma-core\"\nsoft_dir = \"/x\"",
    );
    assert_eq!(invalid(&soft).0, "backend.soft_dir");
}

#[test]
fn backend_keys_of_the_other_kind_and_unknown_kinds_are_refused() {
    let src = BOTH.replace("soft_dir = \"/run/soft\"", "source = \"10.0.0.1\"");
    assert_eq!(invalid(&src).0, "backend.source");
    let (key, reason) = invalid(&BOTH.replace("soft_dir = \"/run/soft\"", "kind = \"ib\""));
    assert_eq!(key, "backend.kind");
    assert!(reason.contains("rdma-core"), "{reason}");
}

#[test]
fn bad_values_name_their_key() {
    let base = BOTH.replace("10.0.1.2:7471", "nowhere");
    assert_eq!(invalid(&base).0, "connect[0].targets[1]");
    let zero = BOTH.replace("give_up_secs = 30", "give_up_secs = 0");
    assert_eq!(invalid(&zero).0, "connect[0].give_up_secs");
    let listen = BOTH.replace("10.0.0.2:7471\"\n        file", "x\"\n        file");
    assert_eq!(invalid(&listen).0, "export[0].listen");
    let twice =
        format!("{BOTH}\n[[export]]\nname = \"d0\"\nlisten = \"10.0.0.2:1\"\nfile = \"/x\"\n");
    let (key, reason) = invalid(&twice);
    assert_eq!(key, "export[1].name");
    assert!(reason.contains("twice"), "{reason}");
    let none = BOTH.replace("[\"10.0.0.2:7471\", \"10.0.1.2:7471\"]", "[]");
    assert_eq!(invalid(&none).0, "connect[0].targets");
    assert_eq!(
        invalid("[backend]\nsoft_dir = \"/x\"\n").0,
        "export, connect"
    );
}

#[test]
fn unknown_keys_and_types_are_syntax_errors_naming_the_key() {
    let e = parse(
        &BOTH
            .replace("read_only", "x")
            .replace("give_up_secs", "give_up"),
    )
    .unwrap_err();
    let text = e.to_string();
    assert!(text.starts_with("/etc/relinkd.toml: "), "{text}");
    assert!(text.contains("give_up"), "{text}");
    let e = parse("[[export]]\nname = 1\n").unwrap_err();
    assert!(matches!(e, ConfigError::Syntax { .. }), "{e:?}");
}

#[test]
fn engine_settings_default_and_are_checked_by_key() {
    let c = parse(BOTH).unwrap();
    let d = relink_block::InitiatorConfig::default();
    assert_eq!(
        (c.connects[0].queue_depth, c.connects[0].max_io),
        (d.queue_depth, d.max_io)
    );
    assert_eq!(
        (c.exports[0].queue_depth, c.exports[0].max_io),
        (32, 131072)
    );
    let set = BOTH
        .replace(
            "file = \"/srv/d0.img\"",
            "file = \"/srv/d0.img\"\nqueue_depth = 8\nmax_io = 65536",
        )
        .replace(
            "give_up_secs = 30",
            "give_up_secs = 30\nqueue_depth = 1024\nmax_io = 4096",
        );
    let c = parse(&set).unwrap();
    assert_eq!((c.exports[0].queue_depth, c.exports[0].max_io), (8, 65536));
    assert_eq!(
        (c.connects[0].queue_depth, c.connects[0].max_io),
        (1024, 4096)
    );
    for (add, key) in [
        ("queue_depth = 0", "connect[0].queue_depth"),
        ("queue_depth = 1025", "connect[0].queue_depth"),
        ("max_io = 1000", "connect[0].max_io"),
        ("max_io = 0", "connect[0].max_io"),
        ("max_io = 33554432", "connect[0].max_io"),
    ] {
        let text = BOTH.replace("give_up_secs = 30", &format!("give_up_secs = 30\n{add}"));
        assert_eq!(invalid(&text).0, key, "{add}");
    }
    let text = BOTH.replace(
        "file = \"/srv/d0.img\"",
        "file = \"/srv/d0.img\"\nmax_io = 6000",
    );
    let (key, reason) = invalid(&text);
    assert_eq!(key, "export[0].max_io");
    assert!(reason.contains("4096"), "{reason}");
    let negative = BOTH.replace("give_up_secs = 30", "give_up_secs = 30\nqueue_depth = -1");
    assert!(matches!(parse(&negative), Err(ConfigError::Syntax { .. })));
}

#[test]
fn fast_fail_secs_is_a_connect_key_checked_by_name() {
    let set = BOTH.replace("give_up_secs = 30", "give_up_secs = 30\nfast_fail_secs = 5");
    let c = parse(&set).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.connects[0].fast_fail, Some(Duration::from_secs(5)));
    assert_eq!(parse(BOTH).unwrap().connects[0].fast_fail, None);
    for (value, why) in [("0", "at least 1"), ("31", "give_up_secs")] {
        let text = BOTH.replace(
            "give_up_secs = 30",
            &format!("give_up_secs = 30\nfast_fail_secs = {value}"),
        );
        let (key, reason) = invalid(&text);
        assert_eq!(key, "connect[0].fast_fail_secs", "{value}");
        assert!(reason.contains(why), "{value}: {reason}");
    }
    // Without give_up_secs, relink's default give-up deadline bounds it.
    let text = BOTH.replace("give_up_secs = 30", "fast_fail_secs = 601");
    assert_eq!(invalid(&text).0, "connect[0].fast_fail_secs");
    let text = BOTH.replace("give_up_secs = 30", "fast_fail_secs = 600");
    assert!(parse(&text).is_ok());
}

#[test]
fn an_allow_list_takes_addresses_and_subnets_and_names_a_bad_entry() {
    let allowed = BOTH.replace(
        "file = \"/srv/d0.img\"",
        "file = \"/srv/d0.img\"\nallow = [\"10.0.0.1\", \"10.0.1.0/24\"]",
    );
    let e = &parse(&allowed).unwrap().exports[0];
    assert!(e.allows("10.0.0.1".parse().unwrap()));
    assert!(e.allows("10.0.1.77".parse().unwrap()));
    assert!(!e.allows("10.0.0.2".parse().unwrap()));
    assert!(parse(BOTH).unwrap().exports[0].allows("192.0.2.1".parse().unwrap()));
    let (key, reason) = invalid(&allowed.replace("10.0.1.0/24", "10.0.1.0/99"));
    assert_eq!(key, "export[0].allow[1]");
    assert!(reason.contains("prefix"), "{reason}");
    let (key, _) = invalid(&allowed.replace("[\"10.0.0.1\", \"10.0.1.0/24\"]", "[]"));
    assert_eq!(key, "export[0].allow");
}

#[test]
fn load_names_a_missing_file() {
    let e = Config::load(Path::new("/nonexistent/relinkd.toml")).unwrap_err();
    assert!(e
        .to_string()
        .starts_with("/nonexistent/relinkd.toml: cannot read"));
}

#[test]
fn nbd_socket_access_and_client_limit_default_and_are_checked_by_key() {
    let c = parse(BOTH).unwrap();
    assert_eq!(c.connects[0].nbd, NbdAccess::default());
    assert_eq!(
        (c.connects[0].nbd.mode, c.connects[0].nbd.max_clients),
        (0o600, 16)
    );
    let set = BOTH.replace(
        "give_up_secs = 30",
        "give_up_secs = 30\nnbd_socket_mode = 0o660\nnbd_socket_group = \"root\"\nmax_clients = 4",
    );
    let c = parse(&set).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.connects[0].nbd,
        NbdAccess {
            mode: 0o660,
            group: Some(0),
            max_clients: 4
        }
    );
    let by_number = BOTH.replace(
        "give_up_secs = 30",
        "give_up_secs = 30\nnbd_socket_group = \"65534\"",
    );
    assert_eq!(
        parse(&by_number).unwrap().connects[0].nbd.group,
        Some(65534)
    );
    for (add, key) in [
        ("nbd_socket_mode = 0o1777", "connect[0].nbd_socket_mode"),
        ("nbd_socket_mode = -1", "connect[0].nbd_socket_mode"),
        (
            "nbd_socket_group = \"no-such-group-here\"",
            "connect[0].nbd_socket_group",
        ),
        ("max_clients = 0", "connect[0].max_clients"),
        ("max_clients = 1025", "connect[0].max_clients"),
    ] {
        let text = BOTH.replace("give_up_secs = 30", &format!("give_up_secs = 30\n{add}"));
        assert_eq!(invalid(&text).0, key, "{add}");
    }
}
