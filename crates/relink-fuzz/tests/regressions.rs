//! Replays, on stable, every input the project keeps for each fuzz target
//! through the target's body: the crash inputs of
//! `fuzz/regressions/<target>/` (kept by hand: see its README) and the
//! kept corpus `fuzz/corpus/<target>/`. A failure names the target and
//! the file; each target prints how many inputs it replayed.

use relink_fuzz::kept::replay;
use relink_fuzz::TARGETS;

macro_rules! replays {
    ($($target:ident),* $(,)?) => {
        $(
            #[test]
            fn $target() {
                replay(stringify!($target), relink_fuzz::$target::run);
            }
        )*

        /// Every target of `TARGETS` has its test above.
        #[test]
        fn every_target_is_replayed() {
            let tested = [$(stringify!($target)),*];
            for (name, _) in TARGETS {
                assert!(tested.contains(name), "{name} has no replay test");
            }
            assert_eq!(tested.len(), TARGETS.len());
        }
    };
}

replays!(
    wire_decode,
    core_handshake,
    core_message,
    registry_parse,
    netlink_parse,
    uevent_parse,
    nbd_handshake,
    nbd_request,
    nbd_structured,
    block_command,
    control_request,
    relinkd_config,
    relinkd_conf_dir,
);
