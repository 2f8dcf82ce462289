//! The conformance suite on the in-process soft fabric.
relink_testkit::conformance_tests!(relink_testkit::soft_rigs::InProcRig::new(7));
