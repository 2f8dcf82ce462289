/*
 * A shared receive queue and a memory window from C. The client's two
 * sessions receive through one shared queue; the server's region is
 * exposed through a type 2 window. Messages from both sessions are
 * delivered exactly once, in order, and the client's RDMA WRITEs land
 * through the same token, before and after the server's device is reset.
 * A queue too small for another session refuses it. Both nodes busy-poll
 * (RELINK_POLL_BUSY: relink_wait arms their CQs before it sleeps). Exits 0
 * when every check holds.
 */
#define PROGRAM "shared"
#include "harness.h"
/* The soft fabric's fault hooks: relink_soft_fabric_fault. */
#include <relink_soft.h>

#define SESSIONS 2
#define REGION 1

typedef struct {
  relink_node *a, *b;
  relink_session s[SESSIONS], t[SESSIONS];
  int accepted;
  unsigned got[SESSIONS];
  unsigned done;
} clients;

/* One turn of both nodes (1 ms of virtual time each); take everything. */
static void turn_all(clients *w) {
  int did;
  check(relink_wait(w->a, 1, &did), "wait a");
  check(relink_wait(w->b, 1, &did), "wait b");
  relink_accepted acc;
  while (w->accepted < SESSIONS && relink_accept(w->b, &acc) == RELINK_OK)
    w->t[w->accepted++] = acc.session;
  for (int i = 0; i < w->accepted; i++) {
    unsigned char buf[16];
    size_t len;
    uint64_t seq;
    while (relink_poll_delivery(w->b, w->t[i], buf, sizeof buf, &len, &seq) ==
           RELINK_OK) {
      unsigned n;
      memcpy(&n, buf, sizeof n);
      if (n != w->got[i] || seq != (uint64_t)w->got[i] + 1)
        fail("a message out of order or twice");
      w->got[i]++;
    }
    relink_event e;
    while (relink_poll_event(w->b, w->t[i], &e) == RELINK_OK) {
    }
  }
  for (int i = 0; i < SESSIONS; i++) {
    relink_event e;
    while (relink_poll_event(w->a, w->s[i], &e) == RELINK_OK) {
    }
    relink_completion c;
    while (relink_poll_completion(w->a, w->s[i], &c) == RELINK_OK) {
      if (c.outcome != RELINK_OUTCOME_SUCCESS)
        fail("an operation did not succeed");
      w->done++;
    }
  }
}

static void traffic(clients *w, unsigned from, unsigned to, unsigned char fill) {
  for (int i = 0; i < SESSIONS; i++)
    for (unsigned n = from; n < to; n++) {
      unsigned char buf[16] = {0};
      memcpy(buf, &n, sizeof n);
      check(relink_send(w->a, w->s[i], buf, sizeof buf, NULL), "send");
    }
  /* Session 0 writes 64 bytes of `fill` at offset 0 of the server's region. */
  unsigned char block[64];
  memset(block, fill, sizeof block);
  check(relink_region_write(w->a, w->s[0], REGION, 0, block, sizeof block),
        "local");
  relink_token to_server = {REGION, 0};
  check(relink_write(w->a, w->s[0], REGION, 0, sizeof block, to_server, NULL),
        "write");
}

static void expect_block(clients *w, unsigned char fill) {
  unsigned char got[64];
  check(relink_region_read(w->b, w->t[0], REGION, 0, got, sizeof got), "read");
  for (size_t i = 0; i < sizeof got; i++)
    if (got[i] != fill)
      fail("the WRITE through the window did not land");
}

int main(void) {
  relink_soft_fabric *f = NULL;
  check(relink_soft_fabric_new(9, &f), "fabric");
  check(relink_soft_fabric_add_device(f, "a", "soft0", "10.0.0.1/24"), "device");
  check(relink_soft_fabric_add_device(f, "b", "soft0", "10.0.0.2/24"), "device");
  clients w;
  memset(&w, 0, sizeof w);
  check(relink_node_new_soft(f, "a", &w.a), "node");
  check(relink_node_new_soft(f, "b", &w.b), "node");
  check(relink_set_poll_mode(w.a, RELINK_POLL_BUSY), "busy a");
  check(relink_set_poll_mode(w.b, RELINK_POLL_BUSY), "busy b");
  int may_sleep = -1;
  check(relink_prepare_to_sleep(w.a, &may_sleep), "prepare a");
  if (may_sleep != 1)
    fail("a node with no session may sleep at once");

  /* The server: each accepted session has its own 64-byte region, behind a
   * window. */
  relink_options *so = NULL;
  check(relink_options_new(&so), "options");
  check(relink_options_add_region(so, REGION, 64,
                                  RELINK_ACCESS_LOCAL_WRITE |
                                      RELINK_ACCESS_REMOTE_WRITE,
                                  1),
        "region");
  check(relink_options_set_region_window(so, REGION, 1), "window");
  if (relink_options_set_region_window(so, 7, 1) != RELINK_ERR_NO_REGION)
    fail("a window on a region that does not exist is RELINK_ERR_NO_REGION");
  relink_listener l;
  check(relink_listen(w.b, "10.0.0.2:7471", so, &l), "listen");
  relink_options_free(so);

  /* The client: two sessions of 32 receive slots on one queue of 64. */
  relink_shared_receive q;
  check(relink_shared_receive_new(w.a, 64, 256, &q), "shared receive");
  relink_shared_receive bad;
  if (relink_shared_receive_new(w.a, 1, 256, &bad) != RELINK_ERR_OPTIONS)
    fail("a depth of 1 is RELINK_ERR_OPTIONS");
  relink_options *co = NULL;
  check(relink_options_new(&co), "options");
  check(relink_options_set_recv_slots(co, 32), "slots");
  check(relink_options_set_max_message(co, 256), "size");
  check(relink_options_add_region(co, REGION, 64, RELINK_ACCESS_LOCAL_WRITE, 0),
        "local region");
  check(relink_options_set_shared_receive(co, q, 1), "use the queue");
  for (int i = 0; i < SESSIONS; i++)
    check(relink_connect(w.a, "10.0.0.2:7471", NULL, co, &w.s[i]), "connect");
  relink_session third;
  if (relink_connect(w.a, "10.0.0.2:7471", NULL, co, &third) !=
      RELINK_ERR_SESSION)
    fail("a third session does not fit in the queue");
  relink_options_free(co);
  if (relink_shared_receive_free(w.a, q) != RELINK_ERR_SESSION)
    fail("a queue in use cannot be removed");

  traffic(&w, 0, 50, 0x11);
  for (int i = 0; i < 1000 && (w.got[0] < 50 || w.got[1] < 50 || w.done < 101);
       i++)
    turn_all(&w);
  if (w.got[0] != 50 || w.got[1] != 50 || w.done != 101)
    fail("the first 50 messages of each session and the WRITE");
  expect_block(&w, 0x11);

  check(relink_soft_fabric_fault(f, "b", "soft0", RELINK_FAULT_RESET), "reset");
  traffic(&w, 50, 100, 0x22);
  for (int i = 0; i < 3000 && (w.got[0] < 100 || w.got[1] < 100 || w.done < 202);
       i++)
    turn_all(&w);
  if (w.got[0] != 100 || w.got[1] != 100 || w.done != 202)
    fail("after the reset: every message once, the WRITE through the window");
  expect_block(&w, 0x22);
  printf("shared: %u + %u delivered through one queue, 2 WRITEs through a "
         "window, across a reset\n",
         w.got[0], w.got[1]);

  for (int i = 0; i < SESSIONS; i++)
    check(relink_close(w.a, w.s[i]), "close");
  relink_node_free(w.a);
  relink_node_free(w.b);
  relink_soft_fabric_free(f);
  printf("shared: ok\n");
  return 0;
}
