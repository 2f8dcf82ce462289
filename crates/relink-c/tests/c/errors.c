/*
 * librelink's error contract, from C: bad input gets a negative status and
 * a one-line message naming what is wrong; a poll with nothing gives
 * RELINK_EMPTY; a too-small buffer loses nothing. Exits 0 when every check
 * holds, 1 (naming the check) otherwise.
 */
#define PROGRAM "errors"
#include "harness.h"
/* The soft fabric's fault hooks: relink_soft_fabric_fault. */
#include <relink_soft.h>

int main(void) {
  relink_soft_fabric *f = NULL;
  expect(relink_soft_fabric_new(1, NULL), RELINK_ERR_ARGUMENT, "`out` is NULL",
         "NULL out-pointer");
  expect(relink_soft_fabric_new(1, &f), RELINK_OK, NULL, "fabric");
  expect(relink_soft_fabric_add_device(f, "a", "soft0", "ten.0.0.1/24"),
         RELINK_ERR_ARGUMENT, "prefix length", "not an address");
  expect(relink_soft_fabric_add_device(f, "a", "soft0", "10.0.0.1/24"), RELINK_OK,
         NULL, "device a");
  expect(relink_soft_fabric_add_device(f, "b", "soft0", "10.0.0.2/24"), RELINK_OK,
         NULL, "device b");
  expect(relink_soft_fabric_fault(f, "nohost", "soft0", RELINK_FAULT_RESET),
         RELINK_ERR_ARGUMENT, "no host", "fault on an unknown host");
  expect(relink_soft_fabric_fault(f, "a", "soft0", 42), RELINK_ERR_ARGUMENT,
         "relink_soft_fault", "an enum value C made up");

  relink_node *a = NULL, *b = NULL;
  expect(relink_node_new_soft(f, "a", &a), RELINK_OK, NULL, "node a");
  expect(relink_node_new_soft(f, "b", &b), RELINK_OK, NULL, "node b");

  relink_options *o = NULL;
  expect(relink_options_new(&o), RELINK_OK, NULL, "options");
  expect(relink_options_set_recv_slots(o, 4), RELINK_ERR_OPTIONS, "recv_slots",
         "too few receive slots names the key");
  expect(relink_options_set_reconnect_delay_ms(o, 0), RELINK_ERR_OPTIONS,
         "reconnect_delay", "a zero backoff cap names the policy key");
  expect(relink_options_add_region(o, 1, 64, 1u << 9, 0), RELINK_ERR_ARGUMENT,
         "access", "unknown access bits");
  expect(relink_options_add_region(o, 1, 0, RELINK_ACCESS_LOCAL_WRITE, 0),
         RELINK_ERR_OPTIONS, "length 0", "an empty region");
  char big[64] = {0};
  expect(relink_options_set_connect_data(o, big, sizeof big), RELINK_ERR_OPTIONS,
         "connect data", "connect data over RELINK_MAX_CONNECT_DATA");
  expect(relink_options_set_connect_data(o, "hi", 2), RELINK_OK, NULL,
         "connect data");

  relink_listener l;
  expect(relink_listen(b, "10.0.0.2", o, &l), RELINK_ERR_ARGUMENT, "port",
         "listen without a port");
  expect(relink_listen(b, "10.0.0.2:0", o, &l), RELINK_ERR_ARGUMENT, NULL,
         "listen on port 0");
  expect(relink_listen(b, "10.0.0.2:7471", o, &l), RELINK_OK, NULL, "listen");
  relink_session s;
  expect(relink_connect(a, "nowhere", NULL, o, &s), RELINK_ERR_ARGUMENT, "peer",
         "connect to a non-address");
  expect(relink_connect(a, "10.0.0.2:7471", "10.0.0.1:5", o, &s),
         RELINK_ERR_ARGUMENT, "local", "a local address with a port");
  expect(relink_connect(a, "10.0.0.2:7471", NULL, o, &s), RELINK_OK, NULL,
         "connect");

  relink_completion c;
  expect(relink_poll_completion(a, s, &c), RELINK_EMPTY, NULL,
         "nothing completed yet");
  expect(relink_send(a, 999, "x", 1, NULL), RELINK_ERR_NO_SESSION, "999",
         "send on an unknown session");
  char huge[5000] = {0};
  expect(relink_send(a, s, huge, sizeof huge, NULL), RELINK_ERR_SESSION, "4096",
         "a message over max_message");
  expect(relink_region_write(a, s, 9, 0, "x", 1), RELINK_ERR_NO_REGION, "9",
         "an unknown region");

  /* A 100-byte message into a 10-byte buffer: truncated, then taken whole. */
  expect(relink_send(a, s, huge, 100, NULL), RELINK_OK, NULL, "send 100 bytes");
  relink_session t = 0;
  int got_session = 0;
  for (int i = 0; i < 1000 && !got_session; i++) {
    int did;
    relink_wait(a, 1, &did);
    relink_wait(b, 1, &did);
    relink_accepted acc;
    if (relink_accept(b, &acc) == RELINK_OK) {
      t = acc.session;
      got_session = 1;
      if (acc.connect_data_len != 2 || memcmp(acc.connect_data, "hi", 2) != 0) {
        fprintf(stderr, "FAIL connect data not seen on accept\n");
        failures++;
      }
    }
  }
  char small[10], whole[200];
  size_t len = 0;
  relink_status st = RELINK_EMPTY;
  for (int i = 0; i < 1000 && st == RELINK_EMPTY; i++) {
    int did;
    relink_wait(a, 1, &did);
    relink_wait(b, 1, &did);
    st = relink_poll_delivery(b, t, small, sizeof small, &len, NULL);
  }
  expect(st, RELINK_ERR_TRUNCATED, "100 bytes", "a too-small buffer");
  if (len != 100) {
    fprintf(stderr, "FAIL truncated length %zu, want 100\n", len);
    failures++;
  }
  relink_output out;
  expect(relink_poll_output(b, &out, whole, sizeof whole), RELINK_OK, NULL,
         "the same message, whole, through the node-wide poll");
  if (out.kind != RELINK_OUTPUT_DELIVERY || out.len != 100 || out.seq != 1) {
    fprintf(stderr, "FAIL output kind %d len %zu seq %llu\n", (int)out.kind,
            out.len, (unsigned long long)out.seq);
    failures++;
  }
  expect(relink_close(a, 12345), RELINK_ERR_NO_SESSION, NULL, "close an unknown session");
  expect(relink_node_new_verbs(NULL), RELINK_ERR_ARGUMENT, NULL, "verbs, NULL out");
  if (strcmp(relink_status_name(-12345), "RELINK_UNKNOWN_STATUS") != 0) {
    fprintf(stderr, "FAIL status name of an unknown status\n");
    failures++;
  }

  relink_options_free(o);
  relink_node_free(a);
  relink_node_free(b);
  relink_soft_fabric_free(f);
  relink_node_free(NULL);
  relink_options_free(NULL);
  relink_soft_fabric_free(NULL);
  printf("%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
