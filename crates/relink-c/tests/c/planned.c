/*
 * Planned outages from C. A session is suspended with messages in flight
 * and more submitted while it is suspended; both halves report
 * RELINK_STATE_SUSPENDED and stay so through a device reset, far past any
 * deadline; relink_resume brings it back and every message is delivered
 * exactly once, in order, with nothing replayed and no loss counted. A
 * drain of the only device a session has cannot move it: it is reported
 * blocked and stays. Exits 0 when every check holds.
 */
#include <relink.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(relink_status st, const char *what) {
  if (st < 0) {
    fprintf(stderr, "planned: %s: %s: %s\n", what, relink_status_name(st),
            relink_last_error());
    exit(1);
  }
}

static void fail(const char *what) {
  fprintf(stderr, "planned: FAIL %s\n", what);
  exit(1);
}

typedef struct {
  relink_node *a, *b;
  relink_session s, t;
  int have_t;
  unsigned got;
  int suspended_a, suspended_b, quiescing, blocked;
} world;

/* One turn of both nodes (1 ms of virtual time each); take everything. */
static void turn(world *w) {
  int did;
  check(relink_wait(w->a, 1, &did), "wait a");
  check(relink_wait(w->b, 1, &did), "wait b");
  relink_accepted acc;
  if (!w->have_t && relink_accept(w->b, &acc) == RELINK_OK) {
    w->t = acc.session;
    w->have_t = 1;
  }
  relink_event e;
  if (w->have_t) {
    unsigned char buf[16];
    size_t len;
    uint64_t seq;
    while (relink_poll_delivery(w->b, w->t, buf, sizeof buf, &len, &seq) ==
           RELINK_OK) {
      unsigned n;
      memcpy(&n, buf, sizeof n);
      if (n != w->got || seq != (uint64_t)w->got + 1)
        fail("a message out of order or twice");
      w->got++;
    }
    while (relink_poll_event(w->b, w->t, &e) == RELINK_OK)
      if (e.kind == RELINK_EVENT_SUSPENDED)
        w->suspended_b++;
  }
  while (relink_poll_event(w->a, w->s, &e) == RELINK_OK) {
    if (e.kind == RELINK_EVENT_SUSPENDED)
      w->suspended_a++;
    if (e.kind == RELINK_EVENT_QUIESCING)
      w->quiescing++;
    if (e.kind == RELINK_EVENT_DRAIN_BLOCKED)
      w->blocked++;
  }
  relink_completion c;
  while (relink_poll_completion(w->a, w->s, &c) == RELINK_OK)
    if (c.outcome != RELINK_OUTCOME_SUCCESS)
      fail("a send did not succeed");
}

static void send_n(world *w, unsigned from, unsigned to) {
  for (unsigned i = from; i < to; i++) {
    unsigned char buf[16] = {0};
    memcpy(buf, &i, sizeof i);
    check(relink_send(w->a, w->s, buf, sizeof buf, NULL), "send");
  }
}

int main(void) {
  relink_soft_fabric *f = NULL;
  check(relink_soft_fabric_new(5, &f), "fabric");
  check(relink_soft_fabric_add_device(f, "a", "soft0", "10.0.0.1/24"), "device");
  check(relink_soft_fabric_add_device(f, "b", "soft0", "10.0.0.2/24"), "device");
  world w;
  memset(&w, 0, sizeof w);
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
  for (int i = 0; i < 100 && !(w.suspended_a && w.suspended_b); i++)
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
      w.quiescing != 1)
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
  if (moving != 0 || blocked != 1 || on != 1 || w.blocked != 1)
    fail("a session with one path is reported blocked and stays");
  check(relink_undrain(w.a, "soft0"), "undrain");

  relink_node_free(w.a);
  relink_node_free(w.b);
  relink_soft_fabric_free(f);
  printf("planned: ok\n");
  return 0;
}
