//! The conformance suite on the TCP soft fabric (two hosts on loopback).
relink_testkit::conformance_tests!(relink_testkit::soft_rigs::TcpRig::new());

/// Large WRITEs and READs between two hosts of one process take the
/// same-host path (the receiving end reads the sender's memory), and every
/// byte arrives either way.
mod same_host {
    use relink_testkit::soft_rigs::TcpRig;
    use relink_testkit::Side;

    #[test]
    fn large_transfers_are_read_from_the_sending_process() {
        if let Err(why) = relink_soft::TcpHost::same_host_available() {
            let skip =
                relink_skip::Skip::new(format!("same-host transfers cannot work here: {why}"));
            return relink_skip::skip_test(
                "large_transfers_are_read_from_the_sending_process",
                &skip,
            );
        }
        let rig = TcpRig::new();
        relink_testkit::cases::large_transfers(&rig);
        let target = rig.tcp_host(Side::Target).same_host_bytes();
        let initiator = rig.tcp_host(Side::Initiator).same_host_bytes();
        println!("same-host bytes: target read {target} (WRITEs), initiator read {initiator} (READ responses)");
        // 6 WRITEs of 64 KiB and one of 48 KiB; 6 READs of 64 KiB.
        assert!(target >= 6 * 65_536 + 49_152, "target read {target} bytes");
        assert!(initiator >= 6 * 65_536, "initiator read {initiator} bytes");
    }

    #[test]
    fn turned_off_every_byte_crosses_the_stream() {
        let rig = TcpRig::new();
        for side in [Side::Initiator, Side::Target] {
            rig.tcp_host(side).set_same_host_transfers(false);
        }
        relink_testkit::cases::large_transfers(&rig);
        for side in [Side::Initiator, Side::Target] {
            assert_eq!(rig.tcp_host(side).same_host_bytes(), 0, "{side:?}");
        }
    }
}
