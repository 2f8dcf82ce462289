//! The conformance suite on the TCP soft fabric (two hosts on loopback).
relink_testkit::conformance_tests!(relink_testkit::soft_rigs::TcpRig::new());
