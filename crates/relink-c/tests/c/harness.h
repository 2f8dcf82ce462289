/*
 * What the C test programs share: fatal checks, expected refusals, and a
 * "world" of two soft nodes (a connects, b accepts) turned 1 ms of virtual
 * time at a time, with the messages b receives checked for order and
 * exactly-once delivery and every send of a required to succeed. A
 * program defines PROGRAM (its name, for messages) before including it,
 * and may set world.on_event to see both ends' session events. It needs
 * relink.h alone; a program that injects faults includes relink_soft.h.
 */
#ifndef RELINK_TEST_HARNESS_H
#define RELINK_TEST_HARNESS_H

#include <relink.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef PROGRAM
#error "define PROGRAM before including harness.h"
#endif

/* Checks that failed without ending the program (see expect). */
static int failures __attribute__((unused)) = 0;

/* End the program if st is an error. */
static inline void check(relink_status st, const char *what) {
  if (st < 0) {
    fprintf(stderr, PROGRAM ": %s: %s: %s\n", what, relink_status_name(st),
            relink_last_error());
    exit(1);
  }
}

/* End the program: a check did not hold. */
static inline void fail(const char *what) {
  fprintf(stderr, PROGRAM ": FAIL %s\n", what);
  exit(1);
}

/* Count a failure unless got is want and the last error message contains
 * needle (if any); print the outcome either way. */
static inline void expect(relink_status got, relink_status want, const char *needle,
                   const char *what) {
  const char *msg = relink_last_error();
  if (got != want || (needle && !strstr(msg, needle))) {
    fprintf(stderr, "FAIL %s: got %s (\"%s\"), want %s containing \"%s\"\n", what,
            relink_status_name(got), msg, relink_status_name(want),
            needle ? needle : "");
    failures++;
  } else {
    printf("ok   %s: %s %s\n", what, relink_status_name(got), msg);
  }
}

/* Every right a region or registration can have. */
#define ACCESS_ALL                                                             \
  (RELINK_ACCESS_LOCAL_WRITE | RELINK_ACCESS_REMOTE_WRITE |                    \
   RELINK_ACCESS_REMOTE_READ | RELINK_ACCESS_REMOTE_ATOMIC)

/* Two nodes and one session between them: a's session s, b's accepted
 * session t (once have_t). */
typedef struct {
  relink_node *a, *b;
  relink_session s, t;
  int have_t;
} pair;

/* A fresh in-process soft fabric (seed `seed`) with host a on 10.0.0.1/24
 * and host b on 10.0.0.2/24 (a device soft0 each), and p's two nodes on
 * them; no session yet. The fabric is stored in *fabric. */
static inline void pair_open(pair *p, uint64_t seed, relink_soft_fabric **fabric) {
  check(relink_soft_fabric_new(seed, fabric), "fabric");
  check(relink_soft_fabric_add_device(*fabric, "a", "soft0", "10.0.0.1/24"), "device");
  check(relink_soft_fabric_add_device(*fabric, "b", "soft0", "10.0.0.2/24"), "device");
  memset(p, 0, sizeof *p);
  check(relink_node_new_soft(*fabric, "a", &p->a), "node a");
  check(relink_node_new_soft(*fabric, "b", &p->b), "node b");
}

/* One turn of both nodes (1 ms of virtual time each); b's session is
 * taken when it is accepted. Every output stays for the program. */
static inline void pair_turn(pair *p) {
  int did;
  check(relink_wait(p->a, 1, &did), "wait a");
  check(relink_wait(p->b, 1, &did), "wait b");
  relink_accepted acc;
  if (!p->have_t && relink_accept(p->b, &acc) == RELINK_OK) {
    p->t = acc.session;
    p->have_t = 1;
  }
}

/* Drop the session events of both ends (b's once it is taken). */
static inline void pair_drop_events(pair *p) {
  relink_event e;
  while (relink_poll_event(p->a, p->s, &e) == RELINK_OK) {
  }
  if (p->have_t)
    while (relink_poll_event(p->b, p->t, &e) == RELINK_OK) {
    }
}

/* Whether b's session is taken and both ends are ESTABLISHED. */
static inline int pair_established(const pair *p) {
  relink_state sa, sb;
  return p->have_t && relink_session_state(p->a, p->s, &sa) == RELINK_OK &&
         relink_session_state(p->b, p->t, &sb) == RELINK_OK &&
         sa == RELINK_STATE_ESTABLISHED && sb == RELINK_STATE_ESTABLISHED;
}

/* Call turn (the program's turn of both nodes) until the pair is
 * established (pair_established), at most 10,000 times; fail(what) if it
 * is not. */
static inline void pair_until_established(pair *p, void (*turn)(void),
                                          const char *what) {
  for (int i = 0; i < 10000 && !pair_established(p); i++)
    turn();
  if (!pair_established(p))
    fail(what);
}

typedef struct world world;

struct world {
  relink_node *a, *b;
  relink_session s, t;
  int have_t;
  /* Messages b received, in order: message n carries n in its first bytes. */
  unsigned got;
  /* Called with each session event: side 'a' or 'b'. */
  void (*on_event)(world *w, char side, const relink_event *e);
  /* The program's own state, for on_event. */
  void *data;
};

/* One turn of both nodes (1 ms of virtual time each); take everything. */
static inline void turn(world *w) {
  int did;
  relink_event e;
  check(relink_wait(w->a, 1, &did), "wait a");
  check(relink_wait(w->b, 1, &did), "wait b");
  relink_accepted acc;
  if (!w->have_t && relink_accept(w->b, &acc) == RELINK_OK) {
    w->t = acc.session;
    w->have_t = 1;
  }
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
      if (w->on_event)
        w->on_event(w, 'b', &e);
  }
  while (relink_poll_event(w->a, w->s, &e) == RELINK_OK)
    if (w->on_event)
      w->on_event(w, 'a', &e);
  relink_completion c;
  while (relink_poll_completion(w->a, w->s, &c) == RELINK_OK)
    if (c.outcome != RELINK_OUTCOME_SUCCESS)
      fail("a send did not succeed");
}

/* Send messages from..to-1 from a, each 16 bytes carrying its number. */
static inline void send_n(world *w, unsigned from, unsigned to) {
  for (unsigned i = from; i < to; i++) {
    unsigned char buf[16] = {0};
    memcpy(buf, &i, sizeof i);
    check(relink_send(w->a, w->s, buf, sizeof buf, NULL), "send");
  }
}

#endif
