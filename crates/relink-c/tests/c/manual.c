/*
 * Manual recovery from C: a session whose application decides. The
 * client's device is reset; the session reports
 * RELINK_EVENT_AWAITING_DECISION, keeps its messages queued and makes no
 * attempt until the program calls relink_resume; then every message is
 * delivered exactly once, in order. Exits 0 when every check holds.
 */
#define PROGRAM "manual"
#include "harness.h"
/* The soft fabric's fault hooks: relink_soft_fabric_fault. */
#include <relink_soft.h>

/* The session events the program waits for. */
typedef struct {
  int awaiting, resumed;
} seen;

static void on_event(world *w, char side, const relink_event *e) {
  seen *n = w->data;
  if (side != 'a')
    return;
  if (e->kind == RELINK_EVENT_AWAITING_DECISION) {
    printf("client: %s\n", e->text);
    n->awaiting = 1;
  }
  if (e->kind == RELINK_EVENT_RESUMED)
    n->resumed++;
}

int main(void) {
  relink_soft_fabric *f = NULL;
  check(relink_soft_fabric_new(3, &f), "fabric");
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
  check(relink_options_set_manual_recovery(o, 1), "manual");
  check(relink_connect(w.a, "10.0.0.2:7471", NULL, o, &w.s), "connect");
  relink_options_free(o);
  if (relink_resume(w.a, w.s, -1) != RELINK_ERR_SESSION)
    fail("resume of a session that awaits nothing is refused");

  send_n(&w, 0, 20);
  for (int i = 0; i < 500 && w.got < 20; i++)
    turn(&w);
  if (w.got != 20)
    fail("the first 20 messages");

  check(relink_soft_fabric_fault(f, "a", "soft0", RELINK_FAULT_RESET), "reset");
  send_n(&w, 20, 40);
  for (int i = 0; i < 200 && !n.awaiting; i++)
    turn(&w);
  if (!n.awaiting)
    fail("no AWAITING_DECISION after the reset");
  /* The application takes its time: 2 s of virtual time, no attempt. */
  for (int i = 0; i < 1000; i++)
    turn(&w);
  relink_state st;
  check(relink_session_state(w.a, w.s, &st), "state");
  relink_counters c;
  check(relink_session_counters(w.a, w.s, &c), "counters");
  if (st != RELINK_STATE_RECOVERING || n.resumed || w.got != 20)
    fail("the held session stays recovering, delivers nothing, resumes not");
  uint64_t attempts = c.attempts;

  check(relink_resume(w.a, w.s, -1), "resume");
  for (int i = 0; i < 2000 && (w.got < 40 || !n.resumed); i++)
    turn(&w);
  check(relink_session_counters(w.a, w.s, &c), "counters");
  if (w.got != 40 || n.resumed != 1 || c.attempts <= attempts)
    fail("after resume: all 40 delivered once, one resume, a new attempt");
  printf("manual: %u delivered, %d resume, %llu attempts\n", w.got, n.resumed,
         (unsigned long long)c.attempts);

  check(relink_session_set_recovery(w.a, 999, 1000, 0) == RELINK_ERR_NO_SESSION
            ? RELINK_OK
            : RELINK_ERR_INTERNAL,
        "set_recovery on an unknown session is RELINK_ERR_NO_SESSION");
  check(relink_session_set_recovery(w.a, w.s, -1, 0), "live policy");
  relink_node_free(w.a);
  relink_node_free(w.b);
  relink_soft_fabric_free(f);
  printf("manual: ok\n");
  return 0;
}
