//! Busy-polling nodes on real verbs (`PollMode::Busy`): their CQs are
//! looked at every round and armed only before a sleep
//! (`Node::prepare_to_sleep`), the CQs of every new transport too.

use super::*;

/// Both nodes busy-poll through an unplug and replug of both devices: the
/// checked workload completes every operation exactly once before, across
/// and after the outage, on the transports made after it as on the first.
#[test]
fn busy_polling_across_both_devices_unplug_replug() {
    let env = env_or_skip!(need_nothing);
    let (listen, paths) = main_pair(&env, port());
    let mut d = Duo::start(env.clone(), listen, paths);
    d.a.set_poll_mode(PollMode::Busy);
    d.b.set_poll_mode(PollMode::Busy);
    d.pump(Duration::from_millis(500));
    d.delete(&env.init.device);
    d.delete(&env.target.device);
    d.pump(Duration::from_millis(300));
    d.add(&env.target.device, &env.target.netdev);
    d.mark = None;
    d.add(&env.init.device, &env.init.netdev);
    d.wait_resumed("both devices back");
    d.pump(Duration::from_millis(500));
    d.finish("busy_polling_across_both_devices_unplug_replug");
}
