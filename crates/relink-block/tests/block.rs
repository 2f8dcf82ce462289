//! The block service end to end on the deterministic simulator: mixed
//! commands with a queue depth, every command completing exactly once
//! with the right result and the volume's file equal to a model of the
//! writes — across device resets on either side, a replacement and a
//! failover to a second device pair, all in the middle of traffic; typed
//! errors for bad commands; garbage from either peer breaks nothing; a
//! give-up or a restarted target fails what is outstanding, never hangs.

mod common;

use std::time::Duration;

use common::{Setup, Traffic, World, BLOCK, BLOCKS, MAX_IO, PORT};
use relink::{BufferToken, Path, Policy, RegionId};
use relink_block::wire::{Command, Opcode, Tag, WireError};
use relink_block::{
    BlockError, BlockOp, BlockReply, InitiatorConfig, InitiatorEngine, InitiatorEvent, SessionEnd,
    SubmitError, TargetConfig, TargetEngine, TargetError, TargetEvent, Volume, DATA_REGION,
};
use relink_sim::{INITIATOR, TARGET};
use relink_soft::Fault;

const DEPTH: usize = 24;

/// Traffic, `fault` at round 20 with at least 16 commands in flight,
/// more traffic, then everything drained and checked. Returns the world.
fn under_traffic(setup: Setup, fault: impl Fn(&mut World)) -> World {
    let seed = setup.seed;
    let mut w = World::new(setup);
    let mut t = Traffic::new(seed);
    let mut in_flight_at_fault = 0;
    t.run(&mut w, 60, DEPTH, |r, w| {
        if r == 20 {
            in_flight_at_fault = w.init.outstanding();
            fault(w);
        }
    });
    t.finish(&mut w);
    assert!(
        in_flight_at_fault >= 16,
        "only {in_flight_at_fault} in flight at the fault"
    );
    let [reads, writes, flushes, zeroes] = t.counts;
    assert!(
        reads > 50 && writes > 50 && flushes > 5 && zeroes > 5,
        "{:?}",
        t.counts
    );
    let s = w.init.session();
    let losses = w.sim.node(INITIATOR).counters(s).expect("session").losses;
    assert!(losses >= 1, "the fault was a loss");
    let ic = w.sim.node(INITIATOR).counters(s).expect("session");
    let ts = w.target.sessions()[0];
    let tc = w.sim.node(TARGET).counters(ts).expect("session");
    assert!(ic.resumes >= 1 && tc.resumes >= 1);
    assert!(ic.adverts_sent >= 2, "the data region advertised again");
    assert!(ic.replayed + tc.replayed >= 1, "something was in flight");
    assert_eq!(w.init.ended(), None);
    w
}

fn inject(w: &World, host: usize, fault: impl Fn(relink_soft::HostIdx) -> Fault) {
    w.sim.fabric().inject(fault(w.sim.host(host).index()));
}

#[test]
fn mixed_commands_complete_once_with_the_right_bytes_without_faults() {
    let mut w = World::new(Setup::default());
    let mut t = Traffic::new(5);
    t.run(&mut w, 40, DEPTH, |_, _| {});
    t.finish(&mut w);
    let stats = w.target.stats();
    assert!(stats.peak_in_flight >= 16, "{stats:?}");
    assert_eq!(stats.peak_waiting, 0, "{stats:?}");
}

#[test]
fn an_initiator_device_reset_mid_traffic_loses_and_repeats_nothing() {
    under_traffic(
        Setup {
            seed: 11,
            ..Setup::default()
        },
        |w| inject(w, INITIATOR, |h| Fault::Reset(h, "soft0".into())),
    );
}

#[test]
fn a_target_device_reset_mid_traffic_loses_and_repeats_nothing() {
    under_traffic(
        Setup {
            seed: 12,
            ..Setup::default()
        },
        |w| inject(w, TARGET, |h| Fault::Reset(h, "soft0".into())),
    );
}

#[test]
fn a_device_replacement_mid_traffic_loses_and_repeats_nothing() {
    under_traffic(
        Setup {
            seed: 13,
            ..Setup::default()
        },
        |w| inject(w, TARGET, |h| Fault::Replace(h, "soft0".into(), None)),
    );
}

#[test]
fn a_failover_to_the_second_device_pair_mid_traffic_loses_and_repeats_nothing() {
    let mut w = under_traffic(
        Setup {
            seed: 14,
            two_pairs: true,
            ..Setup::default()
        },
        |w| inject(w, INITIATOR, |h| Fault::Remove(h, "soft0".into())),
    );
    let s = w.init.session();
    assert_eq!(w.sim.node(INITIATOR).device(s).expect("up").name, "soft1");
}

#[test]
fn commands_beyond_the_targets_queue_depth_wait_for_a_staging_slot() {
    let w = under_traffic(
        Setup {
            seed: 15,
            target_qd: 4,
            ..Setup::default()
        },
        |w| inject(w, TARGET, |h| Fault::Reset(h, "soft0".into())),
    );
    let stats = w.target.stats();
    assert!(stats.peak_in_flight <= 4, "{stats:?}");
    assert!(stats.peak_waiting > 0, "{stats:?}");
    assert_eq!(stats.in_flight, 0);
}

/// More commands than the initiator has slots, half of the writes from
/// the caller's bytes (`submit_write`: straight into a free slot, or a
/// copy queued when none is), across a reset of the initiator's device:
/// every command completes once and the file holds every write.
#[test]
fn commands_beyond_the_initiators_queue_depth_wait_for_a_slot() {
    let mut w = World::new(Setup {
        seed: 16,
        init_qd: 4,
        ..Setup::default()
    });
    let mut t = Traffic::new(16);
    let mut queued = 0;
    t.run(&mut w, 60, DEPTH, |r, w| {
        queued = queued.max(w.init.queued());
        if r == 20 {
            inject(w, INITIATOR, |h| Fault::Reset(h, "soft0".into()));
        }
    });
    // Drained and checked: each command once, the file as the model.
    t.finish(&mut w);
    assert!(queued > 0, "no command waited for a slot");
    assert_eq!((w.init.outstanding(), w.init.queued()), (0, 0));
    let s = w.init.session();
    assert!(w.sim.node(INITIATOR).counters(s).expect("session").losses >= 1);
}

#[test]
fn identify_describes_the_volume_and_bad_ranges_get_typed_errors() {
    let mut w = World::new(Setup::default());
    let Ok(BlockReply::Volume(v)) = w.call(BlockOp::Identify) else {
        panic!("identify")
    };
    assert_eq!(v.size, BLOCK * BLOCKS);
    assert_eq!((v.block_size, v.max_io, v.read_only), (512, MAX_IO, false));
    let size = BLOCK * BLOCKS;
    let bad = [
        (
            BlockOp::Read {
                offset: size,
                len: 512,
            },
            TargetError::OutOfRange,
        ),
        (
            BlockOp::Read {
                offset: size - 512,
                len: 1024,
            },
            TargetError::OutOfRange,
        ),
        (
            BlockOp::Read {
                offset: u64::MAX - 511,
                len: 512,
            },
            TargetError::OutOfRange,
        ),
        (
            BlockOp::WriteZeroes {
                offset: 0,
                len: (size + 512) as u32,
                fua: false,
            },
            TargetError::OutOfRange,
        ),
        (
            BlockOp::Read {
                offset: 100,
                len: 512,
            },
            TargetError::Invalid,
        ),
        (BlockOp::Read { offset: 0, len: 0 }, TargetError::Invalid),
        (
            BlockOp::Write {
                offset: 0,
                data: vec![1; 100],
                fua: false,
            },
            TargetError::Invalid,
        ),
    ];
    assert_eq!(
        BlockError::Target(TargetError::OutOfRange).errno(),
        22,
        "EINVAL"
    );
    for (op, want) in bad {
        assert_eq!(w.call(op.clone()), Err(BlockError::Target(want)), "{op:?}");
    }
    let too_large = w.init.submit(
        w.sim.node(INITIATOR),
        BlockOp::Read {
            offset: 0,
            len: MAX_IO + 512,
        },
    );
    assert_eq!(
        too_large,
        Err(SubmitError::TooLarge {
            len: (MAX_IO + 512) as usize,
            max: MAX_IO
        })
    );
    // The volume is untouched and still served.
    assert_eq!(
        w.call(BlockOp::Write {
            offset: 512,
            data: vec![7; 512],
            fua: true
        }),
        Ok(BlockReply::Done)
    );
    assert_eq!(
        w.call(BlockOp::Read {
            offset: 512,
            len: 512
        }),
        Ok(BlockReply::Data(vec![7; 512]))
    );
    assert_eq!(
        w.call(BlockOp::Trim {
            offset: 512,
            len: 512
        }),
        Ok(BlockReply::Done)
    );
    assert_eq!(
        w.call(BlockOp::Read {
            offset: 512,
            len: 512
        }),
        Ok(BlockReply::Data(vec![0; 512]))
    );
    assert_eq!(w.call(BlockOp::Flush), Ok(BlockReply::Done));
}

#[test]
fn a_read_only_volume_refuses_writes_and_serves_reads() {
    let mut w = World::new(Setup {
        read_only: true,
        ..Setup::default()
    });
    std::fs::write(w.file.path(), vec![9u8; (BLOCK * BLOCKS) as usize]).expect("fill");
    let Ok(BlockReply::Volume(v)) = w.call(BlockOp::Identify) else {
        panic!("identify")
    };
    assert!(v.read_only);
    for op in [
        BlockOp::Write {
            offset: 0,
            data: vec![1; 512],
            fua: false,
        },
        BlockOp::WriteZeroes {
            offset: 0,
            len: 512,
            fua: true,
        },
        BlockOp::Trim {
            offset: 0,
            len: 512,
        },
    ] {
        let got = w.call(op);
        assert_eq!(got, Err(BlockError::Target(TargetError::ReadOnly)));
        assert_eq!(got.unwrap_err().errno(), 1, "EPERM");
    }
    assert_eq!(w.call(BlockOp::Flush), Ok(BlockReply::Done));
    assert_eq!(
        w.call(BlockOp::Read {
            offset: 1024,
            len: 1024
        }),
        Ok(BlockReply::Data(vec![9; 1024]))
    );
    assert!(w.file_bytes().iter().all(|b| *b == 9));
}

#[test]
fn garbage_from_either_peer_gets_a_typed_error_and_breaks_nothing() {
    let mut w = World::new(Setup::default());
    assert!(matches!(
        w.call(BlockOp::Identify),
        Ok(BlockReply::Volume(_))
    ));
    let s = w.init.session();
    let t = w.target.sessions()[0];
    // Too short to carry a tag: reported, not answered.
    w.sim.node(INITIATOR).send(s, b"garbage!").expect("send");
    // A tag, then an unknown opcode: answered BadCommand under that tag.
    let mut cmd = Command {
        tag: Tag(1_000_000),
        opcode: Opcode::Read,
        fua: false,
        offset: 0,
        len: 512,
        buffer: BufferToken {
            region: DATA_REGION,
            offset: 0,
        },
    }
    .encode();
    cmd[1] = 0x42;
    w.sim.node(INITIATOR).send(s, &cmd).expect("send");
    // A valid READ whose buffer is outside what the initiator advertised:
    // the transfer fails, the command is answered, the session goes on.
    let stray = Command {
        tag: Tag(1_000_001),
        opcode: Opcode::Read,
        fua: false,
        offset: 0,
        len: 512,
        buffer: BufferToken {
            region: RegionId(77),
            offset: 0,
        },
    };
    w.sim
        .node(INITIATOR)
        .send(s, &stray.encode())
        .expect("send");
    // The target sends garbage: dropped and reported by the initiator.
    w.sim
        .node(TARGET)
        .send(t, &[relink_block::wire::VERSION, 0x99, 0, 0])
        .expect("send");
    w.run_until(Duration::from_millis(50), |w| w.init_events.len() >= 3);
    assert_eq!(
        w.target_events[1..],
        [
            TargetEvent::BadCommand {
                session: t,
                error: WireError::Version(b'g')
            },
            TargetEvent::BadCommand {
                session: t,
                error: WireError::UnknownOpcode(0x42)
            },
        ]
    );
    let mut events = w.init_events.clone();
    events.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(
        events,
        [
            InitiatorEvent::BadReply(WireError::UnknownReplyKind(0x99)),
            InitiatorEvent::UnknownTag(Tag(1_000_000)),
            InitiatorEvent::UnknownTag(Tag(1_000_001)),
        ]
    );
    assert_eq!(w.target.stats().bad_commands, 2);
    // Traffic goes on.
    let mut traffic = Traffic::new(9);
    traffic.run(&mut w, 20, DEPTH, |_, _| {});
    traffic.finish(&mut w);
}

#[test]
fn a_give_up_fails_every_outstanding_command_and_never_hangs() {
    let policy = Policy::builder()
        .ctrl_loss_tmo(Some(Duration::from_millis(200)))
        .build()
        .expect("policy");
    let mut w = World::new(Setup {
        seed: 21,
        policy,
        ..Setup::default()
    });
    let mut t = Traffic::new(21);
    t.run(&mut w, 10, DEPTH, |_, _| {});
    t.fill(&mut w, 40);
    let waiting = w.init.outstanding() + w.init.queued();
    assert!(waiting >= 16);
    // The target's only device goes for good.
    inject(&w, TARGET, |h| Fault::Remove(h, "soft0".into()));
    let ended = w.run_until(Duration::from_secs(5), |w| w.init.ended().is_some());
    assert!(ended, "the session never gave up");
    assert_eq!(w.init.ended(), Some(SessionEnd::GaveUp));
    assert_eq!((w.init.outstanding(), w.init.queued()), (0, 0));
    let failed = w.done.values().filter(|r| r.is_err()).count();
    assert!(failed >= 1, "nothing failed");
    for (tag, r) in w.done.drain() {
        assert!(t.expect.remove(&tag).is_some(), "{tag:?} completed once");
        if let Err(e) = r {
            assert_eq!(e, BlockError::SessionEnded(SessionEnd::GaveUp));
            assert_eq!(e.errno(), 107, "ENOTCONN");
        }
    }
    assert!(t.expect.is_empty(), "every command completed");
    assert!(w
        .init_events
        .contains(&InitiatorEvent::Ended(SessionEnd::GaveUp)));
    assert_eq!(
        w.init.submit(w.sim.node(INITIATOR), BlockOp::Flush),
        Err(SubmitError::Ended(SessionEnd::GaveUp))
    );
}

#[test]
fn a_restarted_target_fails_what_was_outstanding_and_a_new_session_carries_on() {
    let mut w = World::new(Setup {
        seed: 31,
        ..Setup::default()
    });
    let mut t = Traffic::new(31);
    t.run(&mut w, 10, DEPTH, |_, _| {});
    t.fill(&mut w, DEPTH);
    assert!(w.init.outstanding() >= 16);
    // The target's process restarts: a new node, a new engine, the same file.
    w.sim.restart(TARGET);
    let addr = w.sim.target_addr(PORT);
    let volume = Volume::open(w.file.path(), false).expect("volume");
    let cfg = TargetConfig::default().max_io(MAX_IO);
    w.target = TargetEngine::listen(w.sim.node(TARGET), addr, volume, cfg).expect("listen");
    let ended = w.run_until(Duration::from_secs(5), |w| w.init.ended().is_some());
    assert!(ended, "the initiator never noticed");
    assert_eq!(w.init.ended(), Some(SessionEnd::PeerLost));
    for (tag, r) in w.done.drain() {
        t.expect.remove(&tag).expect("completed once");
        if let Err(e) = r {
            assert_eq!(e, BlockError::SessionEnded(SessionEnd::PeerLost));
        }
    }
    assert!(t.expect.is_empty(), "every command completed");
    // A new session; the volume holds what was acknowledged (the model of
    // unacknowledged writes is unknown: write everything again).
    let paths = vec![Path {
        local: None,
        peer: addr,
    }];
    let cfg = InitiatorConfig::default().max_io(MAX_IO);
    w.init = InitiatorEngine::connect(w.sim.node(INITIATOR), paths, cfg).expect("connect");
    let image: Vec<u8> = (0..BLOCK * BLOCKS).map(|i| (i / 512) as u8).collect();
    for (i, chunk) in image.chunks(MAX_IO as usize).enumerate() {
        let op = BlockOp::Write {
            offset: (i * MAX_IO as usize) as u64,
            data: chunk.to_vec(),
            fua: false,
        };
        t.expect.insert(w.submit(op), common::Expect::Done);
    }
    t.model = image;
    t.finish(&mut w);
    assert_eq!(w.call(BlockOp::Flush), Ok(BlockReply::Done));
}

#[test]
fn a_fast_fail_fails_outstanding_commands_and_their_slots_come_back_after_the_recovery() {
    let policy = Policy::builder()
        .fast_io_fail_tmo(Some(Duration::from_millis(5)))
        .ctrl_loss_tmo(Some(Duration::from_secs(30)))
        .build()
        .expect("policy");
    let mut w = World::new(Setup {
        seed: 41,
        policy,
        ..Setup::default()
    });
    let mut t = Traffic::new(41);
    t.run(&mut w, 10, DEPTH, |_, _| {});
    t.fill(&mut w, DEPTH);
    assert!(w.init.outstanding() >= 16);
    inject(&w, INITIATOR, |h| Fault::Remove(h, "soft0".into()));
    let failed = w.run_until(Duration::from_secs(1), |w| {
        w.init.outstanding() == 0 && w.init.queued() == 0
    });
    assert!(failed, "outstanding commands never fast-failed");
    // While the session is down, a new command fails fast too.
    let late = w.submit(BlockOp::Flush);
    w.run_until(Duration::from_millis(5), |w| w.done.contains_key(&late));
    assert_eq!(w.done.remove(&late), Some(Err(BlockError::FastFail)));
    let mut fast = 0;
    for (tag, r) in w.done.drain() {
        t.expect.remove(&tag).expect("completed once");
        if let Err(e) = r {
            assert_eq!(e, BlockError::FastFail);
            assert_eq!(e.errno(), 67, "ENOLINK");
            fast += 1;
        }
    }
    assert!(fast >= 16, "{fast} fast-failed");
    assert!(t.expect.is_empty(), "every command completed");
    assert_eq!(w.init.ended(), None, "the session keeps recovering");
    // The device comes back: the session resumes, every slot is free
    // again, and the volume is served as before.
    inject(&w, INITIATOR, |h| Fault::Readd(h, "soft0".into()));
    let back = w.run_until(Duration::from_secs(5), |w| w.init.quarantined() == 0);
    assert!(back, "{} slots still quarantined", w.init.quarantined());
    assert!(
        w.target.stats().replies_resent >= 1,
        "replies that never left went again"
    );
    let image: Vec<u8> = (0..BLOCK * BLOCKS)
        .map(|i| (i / 512) as u8 ^ 0x5a)
        .collect();
    let mut t = Traffic::new(42);
    for (i, chunk) in image.chunks(MAX_IO as usize).enumerate() {
        let op = BlockOp::Write {
            offset: (i * MAX_IO as usize) as u64,
            data: chunk.to_vec(),
            fua: true,
        };
        t.expect.insert(w.submit(op), common::Expect::Done);
    }
    t.model = image;
    t.run(&mut w, 20, DEPTH, |_, _| {});
    t.finish(&mut w);
}

/// A policy that fast-fails after `fast` and gives up after 30 s.
fn fast_fail_policy(fast: Option<Duration>) -> Policy {
    Policy::builder()
        .fast_io_fail_tmo(fast)
        .ctrl_loss_tmo(Some(Duration::from_secs(30)))
        .build()
        .expect("policy")
}

fn initiator_state(w: &mut World) -> Option<relink::State> {
    let s = w.init.session();
    w.sim.node(INITIATOR).state(s)
}

#[test]
fn commands_fast_failed_before_they_left_give_their_slots_back_after_every_outage() {
    // A queue depth of 4 and three commands submitted in each outage
    // (they wait in relink, unsent, until the fast-fail deadline fails
    // them): a slot kept by any of them stalls the engine by the second
    // outage.
    let mut w = World::new(Setup {
        seed: 43,
        init_qd: 4,
        policy: fast_fail_policy(Some(Duration::from_millis(20))),
        ..Setup::default()
    });
    assert_eq!(w.call(BlockOp::Flush), Ok(BlockReply::Done));
    for outage in 0..4 {
        inject(&w, INITIATOR, |h| Fault::Remove(h, "soft0".into()));
        let down = w.run_until(Duration::from_secs(1), |w| {
            initiator_state(w) == Some(relink::State::Recovering)
        });
        assert!(down, "outage {outage}: the loss was never noticed");
        let tags: Vec<Tag> = (0..3)
            .map(|i| {
                w.submit(BlockOp::Write {
                    offset: i * BLOCK,
                    data: vec![outage as u8 + 1; BLOCK as usize],
                    fua: false,
                })
            })
            .collect();
        let failed = w.run_until(Duration::from_secs(1), |w| {
            tags.iter().all(|t| w.done.contains_key(t))
        });
        assert!(failed, "outage {outage}: commands never fast-failed");
        for t in &tags {
            assert_eq!(w.done.remove(t), Some(Err(BlockError::FastFail)));
        }
        inject(&w, INITIATOR, |h| Fault::Readd(h, "soft0".into()));
        let back = w.run_until(Duration::from_secs(5), |w| {
            initiator_state(w) == Some(relink::State::Established) && w.init.quarantined() == 0
        });
        assert!(
            back,
            "outage {outage}: {} slot(s) still held after the resume ({:?})",
            w.init.quarantined(),
            initiator_state(&mut w)
        );
        assert_eq!(
            w.call(BlockOp::Flush),
            Ok(BlockReply::Done),
            "outage {outage}"
        );
        // Reported once per outage (at its fast-fail deadline), with the
        // count.
        let reports: Vec<&InitiatorEvent> = w
            .init_events
            .iter()
            .filter(|e| matches!(e, InitiatorEvent::FastFailed { .. }))
            .collect();
        assert_eq!(
            reports,
            vec![&InitiatorEvent::FastFailed { commands: 3 }; outage as usize + 1],
            "outage {outage}"
        );
    }
    // More commands than the queue depth still go through.
    let tags: Vec<Tag> = (0..12).map(|_| w.submit(BlockOp::Flush)).collect();
    let all = w.run_until(Duration::from_secs(5), |w| {
        tags.iter().all(|t| w.done.contains_key(t))
    });
    assert!(
        all,
        "{} outstanding, {} queued",
        w.init.outstanding(),
        w.init.queued()
    );
}

#[test]
fn a_fast_fail_set_live_on_the_session_reaches_the_engine() {
    // Made without a fast-fail deadline; one is set on the live session.
    let mut w = World::new(Setup {
        seed: 44,
        policy: fast_fail_policy(None),
        ..Setup::default()
    });
    let s = w.init.session();
    w.sim
        .node(INITIATOR)
        .set_policy(s, fast_fail_policy(Some(Duration::from_millis(5))))
        .expect("set the policy");
    let mut t = Traffic::new(44);
    t.run(&mut w, 10, DEPTH, |_, _| {});
    t.fill(&mut w, DEPTH);
    assert!(w.init.outstanding() >= 16);
    inject(&w, INITIATOR, |h| Fault::Remove(h, "soft0".into()));
    let failed = w.run_until(Duration::from_secs(1), |w| {
        w.init.outstanding() == 0 && w.init.queued() == 0
    });
    assert!(
        failed,
        "{} commands outstanding past the live fast-fail deadline",
        w.init.outstanding()
    );
    let fast = w
        .done
        .values()
        .filter(|r| **r == Err(BlockError::FastFail))
        .count();
    assert!(fast >= 16, "{fast} fast-failed");
    inject(&w, INITIATOR, |h| Fault::Readd(h, "soft0".into()));
    let back = w.run_until(Duration::from_secs(5), |w| w.init.quarantined() == 0);
    assert!(back, "{} slots still quarantined", w.init.quarantined());
    assert_eq!(w.call(BlockOp::Flush), Ok(BlockReply::Done));
}

#[test]
fn a_fast_fail_cancelled_live_on_the_session_stops_the_engine_failing() {
    // Made with a fast-fail deadline; the live session's is cancelled.
    let mut w = World::new(Setup {
        seed: 45,
        policy: fast_fail_policy(Some(Duration::from_millis(5))),
        ..Setup::default()
    });
    let mut t = Traffic::new(45);
    t.run(&mut w, 10, DEPTH, |_, _| {});
    // Both sides' (the target's transfers would fail fast too).
    let s = w.init.session();
    w.sim
        .node(INITIATOR)
        .set_policy(s, fast_fail_policy(None))
        .expect("set the policy");
    let ts = w.target.sessions()[0];
    w.sim
        .node(TARGET)
        .set_policy(ts, fast_fail_policy(None))
        .expect("set the target's policy");
    t.fill(&mut w, DEPTH);
    assert!(w.init.outstanding() >= 16);
    inject(&w, INITIATOR, |h| Fault::Remove(h, "soft0".into()));
    // Well past the deadline the engine was made with: nothing fails.
    w.run_until(Duration::from_millis(200), |_| false);
    assert!(
        w.done.values().all(|r| r.is_ok()),
        "commands failed although the session's fast-fail deadline was cancelled: {:?}",
        w.done.values().filter(|r| r.is_err()).collect::<Vec<_>>()
    );
    assert!(w.init.outstanding() >= 1);
    assert_eq!(w.init.quarantined(), 0);
    inject(&w, INITIATOR, |h| Fault::Readd(h, "soft0".into()));
    t.finish(&mut w);
}

/// BLOCK_STATUS describes the volume file's holes and data: a sparse file
/// with data written at two places shows a hole, data, a hole, data, a
/// hole, covering the range asked, in order; a range inside one piece
/// is one extent; bad ranges get the same typed errors as a READ's, and
/// no `max_io` bound (a status is not data).
#[test]
fn block_status_reports_the_volume_files_holes_and_data() {
    let mut w = World::new(Setup::default());
    let size = BLOCK * BLOCKS;
    assert_eq!(size, 256 << 10);
    // 4 KiB (whole file blocks) at 64 KiB and at 192 KiB.
    for offset in [64u64 << 10, 192 << 10] {
        let r = w.call(BlockOp::Write {
            offset,
            data: vec![0x77; 4096],
            fua: true,
        });
        assert!(r.is_ok(), "{r:?}");
    }
    let status =
        |w: &mut World, offset: u64, len: u32| match w.call(BlockOp::BlockStatus { offset, len }) {
            Ok(BlockReply::Extents(e)) => e.iter().map(|e| (e.len, e.hole)).collect::<Vec<_>>(),
            other => panic!("block status {offset}+{len}: {other:?}"),
        };
    assert_eq!(
        status(&mut w, 0, size as u32),
        [
            (64 << 10, true),
            (4 << 10, false),
            (124 << 10, true),
            (4 << 10, false),
            (60 << 10, true),
        ]
    );
    assert_eq!(status(&mut w, (64 << 10) + 512, 1024), [(1024, false)]);
    assert_eq!(status(&mut w, 0, 4096), [(4096, true)]);
    for (offset, len, want) in [
        (size, 512, TargetError::OutOfRange),
        (100, 512, TargetError::Invalid),
        (0, 0, TargetError::Invalid),
    ] {
        let r = w.call(BlockOp::BlockStatus { offset, len });
        assert!(
            matches!(r, Err(BlockError::Target(e)) if e == want),
            "{offset}+{len}: {r:?}"
        );
    }
}
