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
    both_devices_out_and_back(d, &env, "busy_polling_across_both_devices_unplug_replug");
}
