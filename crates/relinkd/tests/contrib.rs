//! The files in `contrib/` are what they claim: the example configuration
//! loads, and the systemd unit is `Type=notify` and runs relinkd.

use std::path::PathBuf;

fn contrib(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../contrib")
        .join(name)
}

#[test]
fn the_example_configuration_loads() {
    let config = relinkd::Config::load(&contrib("relinkd.toml")).expect("contrib/relinkd.toml");
    assert_eq!(config.exports.len(), 1);
    assert_eq!(config.connects.len(), 1);
    assert_eq!(config.connects[0].targets.len(), 2);
}

#[test]
fn the_unit_waits_for_readiness_and_the_rule_asks_for_it() {
    let unit = std::fs::read_to_string(contrib("relinkd.service")).unwrap();
    assert!(unit.lines().any(|l| l == "Type=notify"));
    assert!(unit
        .lines()
        .any(|l| l.starts_with("ExecStart=/usr/bin/relinkd ")));
    let rule = std::fs::read_to_string(contrib("90-relinkd.rules")).unwrap();
    assert!(rule.contains("SUBSYSTEM==\"infiniband\""));
    assert!(rule.contains("ENV{SYSTEMD_WANTS}+=\"relinkd.service\""));
}
