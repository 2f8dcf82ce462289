/*
 * The standby and probe knobs from C. Each setter takes what the policy
 * allows and refuses the rest with RELINK_ERR_OPTIONS and a message naming
 * the key (probe_interval 0, probe_timeout 0, a standby with manual
 * recovery), a refused change leaving the options as they were. A session
 * made with the standby on, probes every 5 ms of at least 20 ms and
 * keepalives every 2 ms (relink_connect gives it one path: it keeps the
 * knob, with no second device to build a standby on) delivers its messages
 * once and in order across a device reset of the connecting side and a
 * long idle stretch, with one loss counted; relink_session_counter gives
 * every counter by number (the struct's, failovers, standbys, completed,
 * packed) and refuses a number that is no relink_counter. Exits 0 when
 * every check holds.
 */
#define PROGRAM "standby"
#include "harness.h"
/* The soft fabric's fault hooks: relink_soft_fabric_fault. */
#include <relink_soft.h>

int main(void) {
  relink_options *o = NULL;
  check(relink_options_new(&o), "options");
  expect(relink_options_set_standby(NULL, 1), RELINK_ERR_ARGUMENT, "options",
         "standby on NULL options");
  expect(relink_options_set_probe_interval_ms(o, 0), RELINK_ERR_OPTIONS,
         "probe_interval", "probe_interval 0");
  expect(relink_options_set_probe_interval_ms(o, -1), RELINK_OK, NULL,
         "probe_interval off");
  expect(relink_options_set_probe_interval_ms(o, 5), RELINK_OK, NULL,
         "probe_interval 5 ms");
  expect(relink_options_set_probe_timeout_ms(o, 0), RELINK_ERR_OPTIONS,
         "probe_timeout", "probe_timeout 0");
  expect(relink_options_set_probe_timeout_ms(o, 20), RELINK_OK, NULL,
         "probe_timeout 20 ms");
  expect(relink_options_set_standby(o, 1), RELINK_OK, NULL, "standby on");
  expect(relink_options_set_manual_recovery(o, 1), RELINK_ERR_OPTIONS, "standby",
         "manual recovery with the standby on");
  expect(relink_options_set_standby(o, 0), RELINK_OK, NULL, "standby off");
  expect(relink_options_set_manual_recovery(o, 1), RELINK_OK, NULL,
         "manual recovery with the standby off");
  expect(relink_options_set_standby(o, 1), RELINK_ERR_OPTIONS, "standby",
         "the standby with manual recovery");
  expect(relink_options_set_manual_recovery(o, 0), RELINK_OK, NULL,
         "automatic recovery");
  expect(relink_options_set_standby(o, 1), RELINK_OK, NULL, "standby on again");
  expect(relink_options_set_keepalive_ms(o, 2), RELINK_OK, NULL, "keepalive 2 ms");
  expect(relink_options_set_give_up_ms(o, 2000), RELINK_OK, NULL, "give-up 2 s");

  relink_soft_fabric *f = NULL;
  check(relink_soft_fabric_new(7, &f), "fabric");
  check(relink_soft_fabric_add_device(f, "a", "soft0", "10.0.0.1/24"), "device");
  check(relink_soft_fabric_add_device(f, "b", "soft0", "10.0.0.2/24"), "device");
  world w;
  memset(&w, 0, sizeof w);
  check(relink_node_new_soft(f, "a", &w.a), "node");
  check(relink_node_new_soft(f, "b", &w.b), "node");
  relink_listener l;
  check(relink_listen(w.b, "10.0.0.2:7471", NULL, &l), "listen");
  check(relink_connect(w.a, "10.0.0.2:7471", NULL, o, &w.s), "connect");
  relink_options_free(o);

  send_n(&w, 0, 20);
  for (int i = 0; i < 500 && w.got < 20; i++)
    turn(&w);
  check(relink_soft_fabric_fault(f, "a", "soft0", RELINK_FAULT_RESET), "reset");
  send_n(&w, 20, 40);
  for (int i = 0; i < 2000 && w.got < 40; i++)
    turn(&w);
  /* Idle: keepalives only, for 100 periods. */
  for (int i = 0; i < 200; i++)
    turn(&w);
  relink_counters c;
  check(relink_session_counters(w.a, w.s, &c), "counters");
  relink_state st;
  check(relink_session_state(w.a, w.s, &st), "state");
  if (w.got != 40 || c.losses != 1 || c.resumes != 1 ||
      st != RELINK_STATE_ESTABLISHED) {
    fprintf(stderr, "standby: FAIL %u delivered, %llu losses, %llu resumes\n",
            w.got, (unsigned long long)c.losses, (unsigned long long)c.resumes);
    failures++;
  }
  printf("standby: %u delivered across a reset, %llu loss\n", w.got,
         (unsigned long long)c.losses);
  /* Every counter by number: the struct's agree, and those it lacks are
   * there (one path: no standby to build, so no failover; the messages
   * sent back to back shared SENDs at b). */
  uint64_t losses = 0, resumes = 0, failovers = 7, standbys = 7, completed = 0,
           packed = 0, delivered = 0;
  check(relink_session_counter(w.a, w.s, RELINK_COUNTER_LOSSES, &losses), "losses");
  check(relink_session_counter(w.a, w.s, RELINK_COUNTER_RESUMES, &resumes), "resumes");
  check(relink_session_counter(w.a, w.s, RELINK_COUNTER_FAILOVERS, &failovers),
        "failovers");
  check(relink_session_counter(w.a, w.s, RELINK_COUNTER_STANDBYS, &standbys),
        "standbys");
  check(relink_session_counter(w.a, w.s, RELINK_COUNTER_COMPLETED, &completed),
        "completed");
  check(relink_session_counter(w.b, w.t, RELINK_COUNTER_PACKED, &packed), "packed");
  check(relink_session_counter(w.b, w.t, RELINK_COUNTER_DELIVERED, &delivered),
        "delivered");
  if (losses != c.losses || resumes != c.resumes || failovers != 0 ||
      standbys != 0 || completed != 40 || packed == 0 || delivered != 40) {
    fprintf(stderr,
            "standby: FAIL counters: %llu losses, %llu resumes, %llu failovers, "
            "%llu standbys, %llu completed; at b %llu packed, %llu delivered\n",
            (unsigned long long)losses, (unsigned long long)resumes,
            (unsigned long long)failovers, (unsigned long long)standbys,
            (unsigned long long)completed, (unsigned long long)packed,
            (unsigned long long)delivered);
    failures++;
  }
  printf("standby: %llu of 40 messages packed behind another at b\n",
         (unsigned long long)packed);
  uint64_t untouched = 99;
  expect(relink_session_counter(w.a, w.s, RELINK_COUNTER_FETCHES_REWOUND + 1,
                                 &untouched),
         RELINK_ERR_ARGUMENT, "which", "the counter after the last");
  expect(relink_session_counter(w.a, w.s, -1, &untouched), RELINK_ERR_ARGUMENT,
         "which", "counter -1");
  expect(relink_session_counter(w.a, w.s, RELINK_COUNTER_LOSSES, NULL),
         RELINK_ERR_ARGUMENT, "out", "counter into NULL");
  expect(relink_session_counter(w.a, 9999, RELINK_COUNTER_LOSSES, &untouched),
         RELINK_ERR_NO_SESSION, NULL, "counter of no session");
  if (untouched != 99) {
    fprintf(stderr, "standby: FAIL a refused counter call wrote %llu\n",
            (unsigned long long)untouched);
    failures++;
  }
  relink_node_free(w.a);
  relink_node_free(w.b);
  relink_soft_fabric_free(f);
  printf("standby: %d failure(s)\n", failures);
  if (failures == 0)
    printf("standby: ok\n");
  return failures == 0 ? 0 : 1;
}
