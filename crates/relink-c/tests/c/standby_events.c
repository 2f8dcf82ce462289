/*
 * A hot standby's events from C, at a target: a C server on the TCP soft
 * fabric (directory DIR, soft0 and soft1) accepts a session whose
 * initiator, the Rust test that runs this program, has a path through
 * each of two device pairs and the standby on (relink_connect gives a C
 * initiator one path: no standby). The program
 *
 *   1. sees RELINK_EVENT_STANDBY_UP on soft1, then removes its soft1
 *      (relink_soft_device);
 *   2. sees RELINK_EVENT_STANDBY_LOST with RELINK_STANDBY_DOWN (the text
 *      says how), then adds soft1 back;
 *   3. sees the initiator's new standby come up (STANDBY_UP again), then
 *      closes the session;
 *   4. sees STANDBY_LOST with RELINK_STANDBY_RELEASED, then DISCONNECTED;
 *
 * the current connection (soft0) never lost. Keepalives are off at both
 * ends, so a slow machine cannot make a standby silent. Prints a RESULT
 * line and exits 0 when every check holds.
 *
 *     standby_events DIR ADDR        (ADDR: "0.0.0.0:PORT")
 */
#define PROGRAM "standby_events"
#include "harness.h"
/* The soft fabric's fault hooks: relink_soft_device. */
#include <relink_soft.h>

#include <stddef.h>
#include <stdint.h>

/* The numbers are ABI: new kinds and causes came after the others. */
_Static_assert(RELINK_EVENT_DRAIN_BLOCKED == 13, "an event kind renumbered");
_Static_assert(RELINK_EVENT_STANDBY_UP == 14, "STANDBY_UP is 14");
_Static_assert(RELINK_EVENT_STANDBY_LOST == 15, "STANDBY_LOST is 15");
_Static_assert(RELINK_EVENT_OTHER == 99, "an event kind renumbered");
_Static_assert(RELINK_STANDBY_NONE == 0 && RELINK_STANDBY_SILENT == 1 &&
                   RELINK_STANDBY_DOWN == 2 && RELINK_STANDBY_RELEASED == 3 &&
                   RELINK_STANDBY_OTHER == 99,
               "the standby loss causes");
#if UINTPTR_MAX == UINT64_MAX
/* standby_loss took what was the tail padding: a relink_event is as big as
 * before it, and every other member where it was. */
_Static_assert(sizeof(relink_event) == 168, "relink_event grew");
_Static_assert(offsetof(relink_event, retrying) == 32, "a member moved");
_Static_assert(offsetof(relink_event, text) == 36, "a member moved");
_Static_assert(offsetof(relink_event, standby_loss) == 164, "in the padding");
#endif

/* What the program waits for next. */
enum step { UP, DOWN, UP_AGAIN, RELEASED, DISCONNECTED, DONE };

static const char *step_name(enum step s) {
  static const char *names[] = {"the standby up",      "its loss (down)",
                                "a new standby up",    "its release",
                                "the disconnect",      "nothing"};
  return names[s];
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: standby_events DIR ADDR\n");
    return 2;
  }
  const char *dir = argv[1], *addr = argv[2];
  relink_node *n = NULL;
  check(relink_node_new_tcp(dir, &n), "tcp node");
  relink_options *o = NULL;
  check(relink_options_new(&o), "options");
  check(relink_options_set_keepalive_ms(o, -1), "keepalives off");
  relink_listener l;
  check(relink_listen(n, addr, o, &l), "listen");
  relink_options_free(o);
  printf("standby_events: listening on %s\n", addr);
  fflush(stdout);

  enum step step = UP;
  relink_session s = 0;
  int have = 0;
  unsigned ups = 0, downs = 0, released = 0;
  /* At most 120 s: a hang's bound, not a measurement. */
  for (int i = 0; i < 12000 && step != DONE; i++) {
    int did;
    check(relink_wait(n, 10, &did), "wait");
    relink_accepted acc;
    if (!have && relink_accept(n, &acc) == RELINK_OK) {
      s = acc.session;
      have = 1;
    }
    if (!have)
      continue;
    relink_event e;
    while (step != DONE && relink_poll_event(n, s, &e) == RELINK_OK) {
      printf("standby_events: event %d (standby_loss %d): %s\n", (int)e.kind,
             (int)e.standby_loss, e.text);
      fflush(stdout);
      switch (e.kind) {
      case RELINK_EVENT_STANDBY_UP:
        if (e.standby_loss != RELINK_STANDBY_NONE || !strstr(e.text, "soft1"))
          fail("a standby up not on soft1, or with a loss cause");
        ups++;
        if (step == UP) {
          check(relink_soft_device(dir, "soft1", RELINK_DEVICE_REMOVE),
                "remove soft1");
          step = DOWN;
        } else if (step == UP_AGAIN) {
          check(relink_close(n, s), "close");
          step = RELEASED;
        } else {
          fprintf(stderr, "standby_events: waiting for %s\n", step_name(step));
          fail("a standby up out of turn");
        }
        break;
      case RELINK_EVENT_STANDBY_LOST:
        if (!strstr(e.text, "soft1") || !strstr(e.text, "(accepted)"))
          fail("a standby lost not naming soft1 and the accepting side");
        if (step == DOWN) {
          if (e.standby_loss != RELINK_STANDBY_DOWN || !strstr(e.text, "went: lost: "))
            fail("soft1 removed: not RELINK_STANDBY_DOWN with how it was lost");
          downs++;
          check(relink_soft_device_add(dir, "soft1", "127.0.1.2/24"), "add soft1");
          step = UP_AGAIN;
        } else if (step == RELEASED) {
          if (e.standby_loss != RELINK_STANDBY_RELEASED ||
              !strstr(e.text, "released by the session"))
            fail("closed: not RELINK_STANDBY_RELEASED");
          released++;
          step = DISCONNECTED;
        } else {
          fprintf(stderr, "standby_events: waiting for %s\n", step_name(step));
          fail("a standby lost out of turn");
        }
        break;
      case RELINK_EVENT_DISCONNECTED:
        if (step != DISCONNECTED) {
          fprintf(stderr, "standby_events: waiting for %s\n", step_name(step));
          fail("disconnected before the standby was released");
        }
        step = DONE;
        break;
      case RELINK_EVENT_DEVICE_LOST:
      case RELINK_EVENT_RECOVERING:
        fail("the current connection was lost: the standby's loss touched it");
        break;
      default:
        if (e.standby_loss != RELINK_STANDBY_NONE)
          fail("a standby loss cause on another event");
        break;
      }
    }
  }
  if (step != DONE) {
    fprintf(stderr, "standby_events: still waiting for %s\n", step_name(step));
    fail("the standby's events did not all come");
  }
  relink_node_free(n);
  printf("RESULT ups=%u downs=%u released=%u\n", ups, downs, released);
  printf("standby_events: ok\n");
  return 0;
}
