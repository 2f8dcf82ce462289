//! A target that reads the initiator's messages itself on real verbs
//! (`SessionOptions::rendezvous`): RDMA READs of the initiator's
//! registered memory into the target's posted receives, across device
//! loss.

use super::*;

/// The target reads the initiator's messages itself (a rendezvous,
/// `SessionOptions::rendezvous`, from 64 bytes: RDMA READs of the
/// initiator's staging memory into the target's posted receives) through
/// an unplug and replug of each device in turn: every message lands once,
/// in order, with its own bytes (the initiator poisons a message's memory
/// at its completion), and most of them were read, not copied.
/// `RELINK_VERBS_RENDEZVOUS_CYCLES` rounds of both (default 1).
#[test]
fn rendezvous_reads_across_unplug_replug_of_each_device() {
    let env = env_or_skip!(need_nothing);
    let (listen, paths) = main_pair(&env, port());
    let mut d = Duo::start_with(
        env.clone(),
        listen,
        paths,
        |_| options(INITIATOR, Policy::default()),
        |_| {
            options(TARGET, Policy::default())
                .to_builder()
                .rendezvous(Some(64))
                .build()
                .expect("options")
        },
    );
    d.w.post_receives(&mut d.b, 0x5eed_0001);
    d.pump(Duration::from_millis(500));
    let cycles: usize = env_or("RELINK_VERBS_RENDEZVOUS_CYCLES", 1);
    let devices = [
        (&env.target.device, &env.target.netdev),
        (&env.init.device, &env.init.netdev),
    ];
    for (dev, netdev) in devices.into_iter().cycle().take(2 * cycles) {
        d.delete(dev);
        d.pump(Duration::from_millis(300));
        d.add(dev, netdev);
        d.wait_resumed("device back");
        d.pump(Duration::from_millis(500));
    }
    let read =
        d.w.target
            .and_then(|t| d.b.counters(t))
            .map_or(0, |c| c.fetched);
    d.notes.push(format!("{read} messages read by the target"));
    if read == 0 {
        d.problems
            .push("the target read no message itself".to_string());
    }
    d.finish("rendezvous_reads_across_unplug_replug_of_each_device");
}
