/*
 * Planned outages from C. A session is suspended with messages in flight
 * and more submitted while it is suspended; both halves report
 * RELINK_STATE_SUSPENDED and stay so through a device reset, far past any
 * deadline; relink_resume brings it back and every message is delivered
 * exactly once, in order, with nothing replayed and no loss counted. A
 * drain of the only device a session has cannot move it: it is reported
 * blocked and stays. Exits 0 when every check holds.
 */
#define PROGRAM "planned"
#include "harness.h"
/* The soft fabric's fault hooks: relink_soft_fabric_fault. */
#include <relink_soft.h>

/* The session events the program waits for. */
typedef struct {
  int suspended_a, suspended_b, quiescing, blocked;
} seen;

static void on_event(world *w, char side, const relink_event *e) {
  seen *n = w->data;
  if (e->kind == RELINK_EVENT_SUSPENDED) {
    if (side == 'a')
      n->suspended_a++;
    else
      n->suspended_b++;
  }
  if (side == 'a' && e->kind == RELINK_EVENT_QUIESCING)
    n->quiescing++;
  if (side == 'a' && e->kind == RELINK_EVENT_DRAIN_BLOCKED)
    n->blocked++;
}

int main(void) {
  relink_soft_fabric *f = NULL;
  check(relink_soft_fabric_new(5, &f), "fabric");
  check(relink_soft_fabric_add_device(f, "a", "soft0", "10.0.0.1/24"), "device");
  check(relink_soft_fabric_add_device(f, "b", "soft0", "10.0.0.2/24"), "device");
  world w;
  memset(&w, 0, sizeof w);
  seen n = {0};
  w.data = &n;
  w.on_event = on_event;
  check(relink_node_new_soft(f, "a", &w.a), "node");
  check(relink_node_new_soft(f, "b", &w.b), "node");
  relink_listener l;
  check(relink_listen(w.b, "10.0.0.2:7471", NULL, &l), "listen");
  relink_options *o = NULL;
  check(relink_options_new(&o), "options");
  check(relink_options_set_give_up_ms(o, 2000), "give-up");
  check(relink_connect(w.a, "10.0.0.2:7471", NULL, o, &w.s), "connect");
  relink_options_free(o);

  send_n(&w, 0, 20);
  for (int i = 0; i < 500 && w.got < 20; i++)
    turn(&w);
  if (w.got != 20)
    fail("the first 20 messages");
  if (relink_suspend(w.b, w.t) != RELINK_ERR_SESSION)
    fail("the accepting side cannot suspend");

  send_n(&w, 20, 40);
  check(relink_suspend(w.a, w.s), "suspend");
  send_n(&w, 40, 60);
  for (int i = 0; i < 100 && !(n.suspended_a && n.suspended_b); i++)
    turn(&w);
  relink_state sa, sb;
  check(relink_session_state(w.a, w.s, &sa), "state a");
  check(relink_session_state(w.b, w.t, &sb), "state b");
  if (sa != RELINK_STATE_SUSPENDED || sb != RELINK_STATE_SUSPENDED)
    fail("both halves are suspended");
  /* A reset and 5 s of virtual time (past the 2 s give-up deadline). */
  check(relink_soft_fabric_fault(f, "a", "soft0", RELINK_FAULT_RESET), "reset");
  for (int i = 0; i < 2500; i++)
    turn(&w);
  check(relink_session_state(w.a, w.s, &sa), "state a");
  check(relink_session_state(w.b, w.t, &sb), "state b");
  if (sa != RELINK_STATE_SUSPENDED || sb != RELINK_STATE_SUSPENDED)
    fail("both halves stay suspended");

  check(relink_resume(w.a, w.s, -1), "resume");
  for (int i = 0; i < 2000 && w.got < 60; i++)
    turn(&w);
  relink_counters c;
  check(relink_session_counters(w.a, w.s, &c), "counters");
  if (w.got != 60 || c.losses != 0 || c.replayed != 0 || c.planned != 1 ||
      n.quiescing != 1)
    fail("after resume: all 60 delivered once, no loss, nothing replayed");
  printf("planned: %u delivered across a suspend and a reset, %llu losses\n",
         w.got, (unsigned long long)c.losses);

  /* A drain of the only device: nothing can move. */
  uint32_t moving = 99, blocked = 99, on = 0;
  if (relink_drain(w.a, "nosuch", &moving, &blocked) != RELINK_ERR_ARGUMENT)
    fail("a drain of an unknown device is RELINK_ERR_ARGUMENT");
  check(relink_drain(w.a, "soft0", &moving, &blocked), "drain");
  for (int i = 0; i < 10; i++)
    turn(&w);
  check(relink_sessions_on(w.a, "soft0", &on), "sessions_on");
  if (moving != 0 || blocked != 1 || on != 1 || n.blocked != 1)
    fail("a session with one path is reported blocked and stays");
  check(relink_undrain(w.a, "soft0"), "undrain");

  relink_node_free(w.a);
  relink_node_free(w.b);
  relink_soft_fabric_free(f);
  printf("planned: ok\n");
  return 0;
}
