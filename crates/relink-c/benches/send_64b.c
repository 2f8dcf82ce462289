/*
 * The C half of the `c_vs_rust` bench: 64-byte messages from a client node
 * to a server node on the in-process soft fabric, through librelink, with
 * WINDOW messages in flight. The loop is the Rust half's, call for call
 * (benches/c_vs_rust.rs). Prints `RESULT messages=N seconds=S`.
 *
 *     send_64b MESSAGES
 */
#define _POSIX_C_SOURCE 199309L
#include <relink.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WINDOW 32
#define MSG 64

static void check(relink_status st, const char *what) {
  if (st < 0) {
    fprintf(stderr, "send_64b: %s: %s: %s\n", what, relink_status_name(st),
            relink_last_error());
    exit(1);
  }
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: send_64b MESSAGES\n");
    return 2;
  }
  unsigned long long total = strtoull(argv[1], NULL, 10);
  relink_soft_fabric *f = NULL;
  check(relink_soft_fabric_new(1, &f), "fabric");
  check(relink_soft_fabric_add_device(f, "a", "soft0", "10.0.0.1/24"), "device");
  check(relink_soft_fabric_add_device(f, "b", "soft0", "10.0.0.2/24"), "device");
  relink_node *client = NULL, *server = NULL;
  check(relink_node_new_soft(f, "a", &client), "node");
  check(relink_node_new_soft(f, "b", &server), "node");
  relink_listener l;
  check(relink_listen(server, "10.0.0.2:7471", NULL, &l), "listen");
  relink_session s, t = 0;
  check(relink_connect(client, "10.0.0.2:7471", NULL, NULL, &s), "connect");
  int have_t = 0;
  unsigned char msg[MSG], buf[4096];
  memset(msg, 7, sizeof msg);
  unsigned long long sent = 0, done = 0, got = 0;
  double start = now_s();
  while (done < total || got < total) {
    int did = 0;
    while (sent < total && sent - done < WINDOW) {
      check(relink_send(client, s, msg, MSG, NULL), "send");
      sent++;
    }
    check(relink_wait(server, 1, &did), "wait");
    relink_accepted a;
    if (!have_t && relink_accept(server, &a) == RELINK_OK) {
      t = a.session;
      have_t = 1;
    }
    if (have_t) {
      size_t len;
      while (relink_poll_delivery(server, t, buf, sizeof buf, &len, NULL) ==
             RELINK_OK)
        got++;
    }
    check(relink_wait(client, 1, &did), "wait");
    relink_completion c;
    while (relink_poll_completion(client, s, &c) == RELINK_OK) {
      if (c.outcome != RELINK_OUTCOME_SUCCESS) {
        fprintf(stderr, "send_64b: a send failed\n");
        return 1;
      }
      done++;
    }
  }
  double secs = now_s() - start;
  printf("RESULT messages=%llu seconds=%.6f\n", total, secs);
  relink_node_free(client);
  relink_node_free(server);
  relink_soft_fabric_free(f);
  return 0;
}
