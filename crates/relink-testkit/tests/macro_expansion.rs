//! `conformance_tests!` expands to one test per case that type-checks
//! against a rig. The stub rig has no hosts, so every case panics at its
//! first provider call: the tests expect exactly that panic.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use relink_fabric::Provider;
use relink_testkit::{Rig, Side, Skip, CASES};

struct StubRig;

impl Rig for StubRig {
    fn host(&self, _side: Side) -> &dyn Provider {
        panic!("stub rig has no hosts")
    }
    fn device_name(&self, _side: Side) -> String {
        "stub0".to_string()
    }
    fn addr(&self, side: Side) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1 + side.index() as u8))
    }
    fn port(&self) -> u16 {
        7471
    }
    fn remove_device(&self, _side: Side) -> Result<(), Skip> {
        Err(Skip::new("stub"))
    }
    fn add_device_back(&self, _side: Side) -> Result<(), Skip> {
        Err(Skip::new("stub"))
    }
    fn reset_device(&self, _side: Side) -> Result<(), Skip> {
        Err(Skip::new("stub"))
    }
    fn replace_device(&self, _side: Side) -> Result<(), Skip> {
        Err(Skip::new("stub"))
    }
    fn settle_time(&self) -> Duration {
        Duration::from_secs(1)
    }
}

mod boxed {
    relink_testkit::conformance_tests!(
        Box::new(super::StubRig) as Box<dyn relink_testkit::Rig>;
        #[should_panic(expected = "stub rig has no hosts")]
    );
}

mod plain {
    relink_testkit::conformance_tests!(
        super::StubRig;
        #[should_panic(expected = "stub rig has no hosts")]
    );
}

#[test]
fn table_lists_every_case_once() {
    let mut names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
    let n = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), n, "duplicate case names");
    assert_eq!(n, 31);
}

#[test]
fn skip_defaults() {
    let rig = StubRig;
    assert_eq!(rig.tick(), Duration::from_millis(1));
    assert_eq!(rig.quiet_time(), Duration::from_millis(250));
    assert_eq!(Side::Target.peer(), Side::Initiator);
}
