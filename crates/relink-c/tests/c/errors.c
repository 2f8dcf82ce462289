/*
 * librelink's error contract, from C: bad input gets a negative status and
 * a one-line message naming what is wrong, in plain words; the same
 * mistake gets the same status in every call; lengths are checked before
 * anything is read or allocated (a length of 2^40 or SIZE_MAX is refused,
 * never a crash); a misaligned atomic is refused before it costs the
 * session anything; a poll with nothing gives RELINK_EMPTY; a too-small
 * buffer loses nothing. Exits 0 when every check holds, 1 (naming the
 * check) otherwise.
 */
#define PROGRAM "errors"
#include "harness.h"
/* The soft fabric's fault hooks: relink_soft_fabric_fault. */
#include <relink_soft.h>

#include <stdint.h>

/* Count a failure if the last error message shows Rust's debug output
 * (type names, braces) instead of plain words. */
static void plain(const char *what) {
  const char *msg = relink_last_error();
  const char *debug[] = {"RegionId", "SessionHandle", "LocalRange", "{", "}",
                         "SharedReceiveHandle"};
  for (size_t i = 0; i < sizeof debug / sizeof *debug; i++) {
    if (strstr(msg, debug[i])) {
      fprintf(stderr, "FAIL %s: the message \"%s\" is not plain words\n", what,
              msg);
      failures++;
      return;
    }
  }
}

/* Both nodes one turn (1 ms each). */
static void turn2(relink_node *a, relink_node *b) {
  int did;
  relink_wait(a, 1, &did);
  relink_wait(b, 1, &did);
}

int main(void) {
  char small_buf[16] = {0};
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
  expect(relink_set_poll_mode(a, 9), RELINK_ERR_ARGUMENT, "relink_poll_mode",
         "a poll mode C made up");
  expect(relink_prepare_to_sleep(a, NULL), RELINK_ERR_ARGUMENT, "may_sleep",
         "NULL out-pointer of prepare_to_sleep");

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
  expect(relink_options_set_connect_data(o, big, sizeof big), RELINK_ERR_TOO_LARGE,
         "connect data of 64 bytes", "connect data over RELINK_MAX_CONNECT_DATA");
  /* Refused before a byte is read: big has 64 bytes, not SIZE_MAX. */
  expect(relink_options_set_connect_data(o, big, SIZE_MAX), RELINK_ERR_TOO_LARGE,
         "connect data", "connect data of SIZE_MAX bytes");
  expect(relink_options_set_connect_data(o, NULL, 2), RELINK_ERR_ARGUMENT, "`data`",
         "connect data from NULL");
  expect(relink_options_set_region_window(o, 7, 1), RELINK_ERR_NO_REGION, "region 7",
         "a window on a region the options lack");
  expect(relink_options_add_region(o, 1, 4096,
                                   RELINK_ACCESS_LOCAL_WRITE | RELINK_ACCESS_REMOTE_WRITE |
                                       RELINK_ACCESS_REMOTE_READ |
                                       RELINK_ACCESS_REMOTE_ATOMIC,
                                   1),
         RELINK_OK, NULL, "region 1, 4096 bytes, every right, advertised");
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
  expect(relink_send(a, 999, "x", 1, NULL), RELINK_ERR_NO_SESSION, "no session 999",
         "send on an unknown session");
  plain("send on an unknown session");
  char huge[5000] = {0};
  expect(relink_send(a, s, huge, sizeof huge, NULL), RELINK_ERR_TOO_LARGE, "4096",
         "a message over max_message");
  /* Lengths no buffer has: refused before a byte is read or allocated (huge
   * has 5000 bytes). */
  expect(relink_send(a, s, huge, (size_t)1 << 40, NULL), RELINK_ERR_TOO_LARGE,
         "1099511627776 bytes", "a message of 2^40 bytes");
  expect(relink_send(a, s, huge, SIZE_MAX, NULL), RELINK_ERR_TOO_LARGE,
         "max_message", "a message of SIZE_MAX bytes");
  expect(relink_send(a, s, NULL, 1, NULL), RELINK_ERR_ARGUMENT, "`buf` is NULL",
         "send from NULL");
  expect(relink_send(NULL, s, "x", 1, NULL), RELINK_ERR_ARGUMENT, "`node` is NULL",
         "send on a NULL node");

  /* One code per mistake, whichever call makes it. */
  relink_token tok = {.region = 1, .offset = 0};
  relink_op op;
  /* An unknown region. */
  expect(relink_region_write(a, s, 9, 0, "x", 1), RELINK_ERR_NO_REGION,
         "no region 9", "region_write to an unknown region");
  expect(relink_region_read(a, s, 9, 0, small_buf, 1), RELINK_ERR_NO_REGION,
         "no region 9", "region_read of an unknown region");
  expect(relink_write(a, s, 9, 0, 1, tok, &op), RELINK_ERR_NO_REGION,
         "no region 9", "write from an unknown region");
  plain("write from an unknown region");
  expect(relink_read(a, s, 9, 0, 1, tok, &op), RELINK_ERR_NO_REGION, "no region 9",
         "read into an unknown region");
  expect(relink_fetch_add(a, s, 9, 0, tok, 1, &op), RELINK_ERR_NO_REGION,
         "no region 9", "fetch_add into an unknown region");
  /* A range outside its region, the same message everywhere. */
  expect(relink_region_write(a, s, 1, 4090, "12345678", 8), RELINK_ERR_RANGE,
         "0xffa+8 is outside region 1 (4096 bytes)", "region_write past the end");
  expect(relink_region_read(a, s, 1, 4090, small_buf, 8), RELINK_ERR_RANGE,
         "0xffa+8 is outside region 1 (4096 bytes)", "region_read past the end");
  expect(relink_write(a, s, 1, 4090, 8, tok, &op), RELINK_ERR_RANGE,
         "local range 0xffa+8 is outside region 1 (4096 bytes)", "write past the end");
  plain("write past the end");
  expect(relink_read(a, s, 1, 0x1000, 64, tok, &op), RELINK_ERR_RANGE,
         "local range 0x1000+64 is outside region 1 (4096 bytes)", "read past the end");
  expect(relink_cmp_swap(a, s, 1, 4096, tok, 0, 1, &op), RELINK_ERR_RANGE,
         "outside region 1", "cmp_swap past the end");
  /* Lengths no buffer has (small_buf has 16 bytes): out of the region,
   * refused before a byte is touched. */
  expect(relink_region_write(a, s, 1, 0, small_buf, (size_t)1 << 40), RELINK_ERR_RANGE,
         "outside region 1", "region_write of 2^40 bytes");
  expect(relink_region_write(a, s, 1, 0, small_buf, SIZE_MAX), RELINK_ERR_RANGE,
         "outside region 1", "region_write of SIZE_MAX bytes");
  expect(relink_region_read(a, s, 1, 0, small_buf, SIZE_MAX), RELINK_ERR_RANGE,
         "outside region 1", "region_read of SIZE_MAX bytes");
  expect(relink_region_read(a, s, 1, UINT64_MAX, small_buf, 2), RELINK_ERR_RANGE,
         "outside region 1", "region_read at offset UINT64_MAX");
  expect(relink_write(a, s, 1, UINT64_MAX, UINT32_MAX, tok, &op), RELINK_ERR_RANGE,
         "outside region 1", "write at offset UINT64_MAX");
  /* An unknown session. */
  expect(relink_region_write(a, 999, 1, 0, "x", 1), RELINK_ERR_NO_SESSION,
         "no session 999", "region_write on an unknown session");
  plain("region_write on an unknown session");
  expect(relink_write(a, 999, 1, 0, 1, tok, &op), RELINK_ERR_NO_SESSION,
         "no session 999", "write on an unknown session");
  expect(relink_fetch_add(a, 999, 1, 0, tok, 1, &op), RELINK_ERR_NO_SESSION,
         "no session 999", "fetch_add on an unknown session");
  /* A NULL pointer. */
  expect(relink_region_write(a, s, 1, 0, NULL, 1), RELINK_ERR_ARGUMENT,
         "`buf` is NULL", "region_write from NULL");
  expect(relink_region_read(a, s, 1, 0, NULL, 1), RELINK_ERR_ARGUMENT,
         "`buf` is NULL", "region_read into NULL");
  expect(relink_write(NULL, s, 1, 0, 1, tok, &op), RELINK_ERR_ARGUMENT,
         "`node` is NULL", "write on a NULL node");
  expect(relink_region_write(a, s, 1, 0, NULL, 0), RELINK_OK, NULL,
         "region_write of 0 bytes from NULL");

  /* Misaligned atomics: refused at once, locally, before they cost the
   * session a transport. */
  relink_token odd = {.region = 1, .offset = 12};
  expect(relink_fetch_add(a, s, 1, 4, tok, 1, &op), RELINK_ERR_MISALIGNED,
         "local offset 0x4 is not a multiple of 8", "fetch_add, local offset 4");
  expect(relink_fetch_add(a, s, 1, 8, odd, 1, &op), RELINK_ERR_MISALIGNED,
         "remote offset 0xc is not a multiple of 8", "fetch_add, remote offset 12");
  expect(relink_cmp_swap(a, s, 1, 1, tok, 0, 1, &op), RELINK_ERR_MISALIGNED,
         "local offset 0x1", "cmp_swap, local offset 1");
  expect(relink_cmp_swap(a, s, 1, 0, odd, 0, 1, &op), RELINK_ERR_MISALIGNED,
         "remote offset 0xc", "cmp_swap, remote offset 12");
  plain("cmp_swap, remote offset 12");

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
  /* An aligned atomic after the refused ones: it succeeds, and the session
   * lost no transport to the misaligned ones. */
  expect(relink_fetch_add(a, s, 1, 8, tok, 5, &op), RELINK_OK, NULL,
         "fetch_add, aligned");
  relink_completion done;
  int completed = 0;
  for (int i = 0; i < 2000 && !completed; i++) {
    turn2(a, b);
    while (relink_poll_completion(a, s, &done) == RELINK_OK)
      if (done.op == op)
        completed = 1;
  }
  if (!completed || done.outcome != RELINK_OUTCOME_SUCCESS || done.executed != 0) {
    fprintf(stderr, "FAIL the aligned fetch_add: completed %d outcome %d executed %d\n",
            completed, (int)done.outcome, done.executed);
    failures++;
  }
  uint64_t losses = 99;
  expect(relink_session_counter(a, s, RELINK_COUNTER_LOSSES, &losses), RELINK_OK, NULL,
         "losses");
  if (losses != 0) {
    fprintf(stderr, "FAIL %llu transport losses after misaligned atomics\n",
            (unsigned long long)losses);
    failures++;
  }

  expect(relink_close(a, 12345), RELINK_ERR_NO_SESSION, NULL, "close an unknown session");
  expect(relink_node_new_verbs(NULL), RELINK_ERR_ARGUMENT, NULL, "verbs, NULL out");
  if (strcmp(relink_status_name(-12345), "RELINK_UNKNOWN_STATUS") != 0) {
    fprintf(stderr, "FAIL status name of an unknown status\n");
    failures++;
  }
  if (strcmp(relink_status_name(RELINK_ERR_TOO_LARGE), "RELINK_ERR_TOO_LARGE") != 0 ||
      strcmp(relink_status_name(RELINK_ERR_RANGE), "RELINK_ERR_RANGE") != 0 ||
      strcmp(relink_status_name(RELINK_ERR_MISALIGNED), "RELINK_ERR_MISALIGNED") != 0 ||
      strcmp(relink_status_name(RELINK_ERR_AGAIN), "RELINK_ERR_AGAIN") != 0) {
    fprintf(stderr, "FAIL status names of the new codes\n");
    failures++;
  }
  const char *version = relink_version();
  unsigned major, minor, patch;
  if (!version || sscanf(version, "%u.%u.%u", &major, &minor, &patch) != 3) {
    fprintf(stderr, "FAIL relink_version() is \"%s\"\n", version ? version : "(NULL)");
    failures++;
  }
  printf("version %s\n", version ? version : "");

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
