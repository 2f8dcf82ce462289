/*
 * Messages sent from the program's own registered memory, without a copy
 * (relink_post with RELINK_WR_FROM_REGION and RELINK_WR_SGL). The sender
 * registers two buffers of its own (relink_register: A on the heap, B a
 * static array) and has a region of its session; it posts messages from
 * one range of A, from one range of its session's region, and from a
 * scatter/gather list of 3 ranges (A, then B, then A again). The
 * receiver gets exactly the bytes of the ranges, one after the other, in
 * order and once each; every completion carries its context, kind
 * MESSAGE and the total length. Again with the sender's device reset
 * while messages are in flight, and reset before messages are posted
 * (they wait for the resume): each is delivered exactly once with its
 * bytes (a replay reads the ranges again; the program leaves them
 * unchanged until the completion). relink_deregister of a buffer a
 * message not yet completed is sent from is RELINK_ERR_BUSY, and
 * succeeds after the completion. A request of the struct's first layout
 * (88 bytes, before `sgl` and `num_sge`) is read no further than its end.
 * Bad input gets its documented status
 * (none aborts, none submits anything). The sender's
 * RELINK_COUNTER_SEND_COPIED_BYTES stays 0 for all of it, and grows with
 * a relink_send; the receiver's RELINK_COUNTER_RECEIVE_COPIED_BYTES is
 * the bytes it was delivered. Exits 0 when every check holds.
 */
/* mmap's MAP_ANONYMOUS, under -std=c11. */
#define _DEFAULT_SOURCE
#define PROGRAM "send_from"
#include "harness.h"
/* The soft fabric's fault hooks: relink_soft_fabric_fault. */
#include <relink_soft.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* The sender's session region. */
#define REGION 1
#define REGION_LEN 65536
/* Registration A: a part of SLOT_A bytes for each message of a round. */
#define A_LEN 65536
#define SLOT_A 2048
/* Registration B: a part of SLOT_B bytes for each message of a round. */
#define B_LEN 16384
#define SLOT_B 1024
/* Messages per round. */
#define ROUND 16
/* The session's max_message (the default). */
#define MAX_MESSAGE 4096
#define MAX_MESSAGES 128

static pair p;
static relink_soft_fabric *fabric;
static unsigned char *a_buf;
static unsigned char b_buf[B_LEN];
static uint32_t a_id, b_id;

/* What the receiver must get, in order: message n's bytes. */
static unsigned char *want[MAX_MESSAGES];
static size_t want_len[MAX_MESSAGES];
static unsigned posted, delivered;
static uint64_t delivered_bytes;

/* What each message's completion must say. */
static struct {
  relink_op op;
  uint64_t context;
  uint64_t len;
  int done;
} ops[MAX_MESSAGES];
static unsigned completed;

static void deliveries(void) {
  unsigned char buf[MAX_MESSAGE];
  size_t len;
  uint64_t seq;
  relink_status st;
  while ((st = relink_poll_delivery(p.b, p.t, buf, sizeof buf, &len, &seq)) ==
         RELINK_OK) {
    if (delivered >= posted) {
      fprintf(stderr, PROGRAM ": message seq %llu of %zu bytes: none is due\n",
              (unsigned long long)seq, len);
      fail("a message delivered twice, or one never sent");
    }
    if (seq != (uint64_t)delivered + 1 || len != want_len[delivered] ||
        memcmp(buf, want[delivered], len) != 0) {
      fprintf(stderr,
              PROGRAM ": message %u: seq %llu, %zu bytes; want seq %u, %zu bytes\n",
              delivered, (unsigned long long)seq, len, delivered + 1,
              want_len[delivered]);
      fail("the receiver did not get the ranges' bytes, in order, once");
    }
    delivered++;
    delivered_bytes += len;
  }
  check(st, "delivery");
}

static void completions(void) {
  relink_completion c;
  while (relink_poll_completion(p.a, p.s, &c) == RELINK_OK) {
    unsigned i = 0;
    while (i < posted && ops[i].op != c.op)
      i++;
    if (i == posted || ops[i].done)
      fail("a completion of no operation, or a second one");
    if (c.outcome != RELINK_OUTCOME_SUCCESS || c.kind != RELINK_OP_KIND_MESSAGE ||
        c.context != ops[i].context || c.len != ops[i].len) {
      fprintf(stderr,
              PROGRAM ": message %u: outcome %d kind %d context %#llx len %llu; "
              "want SUCCESS, MESSAGE, %#llx, %llu\n",
              i, (int)c.outcome, (int)c.kind, (unsigned long long)c.context,
              (unsigned long long)c.len, (unsigned long long)ops[i].context,
              (unsigned long long)ops[i].len);
      fail("a completion's outcome, kind, context or length");
    }
    ops[i].done = 1;
    completed++;
  }
}

/* One turn of both nodes: events dropped, deliveries and completions
 * checked. */
static void turn2(void) {
  pair_turn(&p);
  pair_drop_events(&p);
  if (p.have_t)
    deliveries();
  completions();
}

/* Run until every message posted is delivered and completed. */
static void until_done(const char *what) {
  for (int i = 0; i < 20000 && (delivered < posted || completed < posted); i++)
    turn2();
  if (delivered != posted || completed != posted) {
    fprintf(stderr, PROGRAM ": %s: %u posted, %u delivered, %u completed\n", what,
            posted, delivered, completed);
    fail(what);
  }
}

static uint64_t counter(relink_node *n, relink_session s, relink_counter which) {
  uint64_t v = 0;
  check(relink_session_counter(n, s, which, &v), "counter");
  return v;
}

/* Message n's bytes for its part `part`. */
static void fill(unsigned char *dst, size_t len, unsigned n, unsigned part) {
  for (size_t i = 0; i < len; i++)
    dst[i] = (unsigned char)(n * 131u + part * 17u + i * 7u + 1u);
}

/* Post `wr` as message `posted`, whose receiver must get `len` bytes of
 * `bytes` (copied here, for the check). */
static void post(relink_work_request *wr, const unsigned char *bytes, size_t len) {
  if (posted == MAX_MESSAGES)
    fail("too many messages for the test's table");
  unsigned n = posted;
  wr->context = 0x5e0d0000u + n;
  relink_op op = 0;
  check(relink_post(p.a, p.s, wr, &op), "post");
  want[n] = malloc(len ? len : 1);
  if (!want[n])
    fail("malloc");
  memcpy(want[n], bytes, len);
  want_len[n] = len;
  ops[n].op = op;
  ops[n].context = wr->context;
  ops[n].len = len;
  ops[n].done = 0;
  posted++;
}

/* Message n from one range of registration A. */
static void post_from_a(unsigned n, unsigned slot) {
  size_t len = 64 + (n * 97u) % 1900;
  unsigned char *at = a_buf + (size_t)slot * SLOT_A;
  fill(at, len, n, 0);
  relink_work_request wr = {.kind = RELINK_OP_KIND_MESSAGE,
                            .flags = RELINK_WR_FROM_REGION,
                            .region = a_id,
                            .offset = (uint64_t)slot * SLOT_A,
                            .len = len};
  post(&wr, at, len);
}

/* Message n from one range of the session's own region. */
static void post_from_region(unsigned n, unsigned slot) {
  unsigned char bytes[SLOT_A];
  size_t len = 100 + (n * 53u) % 1500;
  fill(bytes, len, n, 3);
  uint64_t offset = (uint64_t)slot * SLOT_A + 8;
  check(relink_region_write(p.a, p.s, REGION, offset, bytes, len), "region write");
  relink_work_request wr = {.kind = RELINK_OP_KIND_MESSAGE,
                            .flags = RELINK_WR_FROM_REGION,
                            .region = REGION,
                            .offset = offset,
                            .len = len};
  post(&wr, bytes, len);
}

/* Message n from 3 ranges: a part of A, one of B, another of A. */
static void post_sgl(unsigned n, unsigned slot) {
  size_t l1 = 1 + (n * 37u) % 1000, l2 = 1 + (n * 59u) % 1000,
         l3 = 1 + (n * 71u) % 1000;
  unsigned char *r1 = a_buf + (size_t)slot * SLOT_A;
  unsigned char *r2 = b_buf + (size_t)slot * SLOT_B;
  unsigned char *r3 = a_buf + (size_t)slot * SLOT_A + 1024;
  fill(r1, l1, n, 0);
  fill(r2, l2, n, 1);
  fill(r3, l3, n, 2);
  unsigned char whole[3 * 1000];
  memcpy(whole, r1, l1);
  memcpy(whole + l1, r2, l2);
  memcpy(whole + l1 + l2, r3, l3);
  /* Positional initializers: {region, offset, len}. The array is read
   * during the call only. */
  relink_sge sgl[3] = {
      {a_id, (uint64_t)slot * SLOT_A, (uint32_t)l1},
      {b_id, (uint64_t)slot * SLOT_B, (uint32_t)l2},
      {a_id, (uint64_t)slot * SLOT_A + 1024, (uint32_t)l3},
  };
  relink_work_request wr = {.kind = RELINK_OP_KIND_MESSAGE,
                            .flags = RELINK_WR_SGL,
                            .sgl = sgl,
                            .num_sge = 3};
  post(&wr, whole, l1 + l2 + l3);
  memset(sgl, 0xff, sizeof sgl);
}

/* A round of ROUND messages, each from its own parts of A and B (left
 * unchanged until its completion): every kind in turn. */
static void post_round(void) {
  for (unsigned slot = 0; slot < ROUND; slot++) {
    unsigned n = posted;
    switch (n % 4) {
    case 0:
      post_from_a(n, slot);
      break;
    case 2:
      post_from_region(n, slot);
      break;
    default:
      post_sgl(n, slot);
    }
  }
}

/* A program built against the header before `sgl` and `num_sge` passes
 * the struct of then, which ends at `swap`: librelink reads no byte past
 * it, for a message of bytes nor for one from registered memory (the
 * page after it is inaccessible: a read there would end the program). */
static void old_layout(void) {
  long page = sysconf(_SC_PAGESIZE);
  unsigned char *m = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED || mprotect(m + page, (size_t)page, PROT_NONE) != 0)
    fail("mmap");
  const size_t old = offsetof(relink_work_request, sgl);
  if (old != 88 && sizeof(void *) == 8)
    fail("the first layout ended at 88 bytes");
  relink_work_request *at = (relink_work_request *)(m + page - old);
  unsigned char bytes[300];
  fill(bytes, sizeof bytes, posted, 5);
  relink_work_request wr = {.kind = RELINK_OP_KIND_MESSAGE, .buf = bytes,
                            .len = sizeof bytes};
  memcpy(at, &wr, old);
  post(at, bytes, sizeof bytes);
  unsigned char *range = a_buf + 4 * SLOT_A;
  fill(range, 700, posted, 6);
  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE,
                             .flags = RELINK_WR_FROM_REGION, .region = a_id,
                             .offset = 4 * SLOT_A, .len = 700};
  memcpy(at, &wr, old);
  post(at, range, 700);
  until_done("messages of the first layout");
  munmap(m, 2 * (size_t)page);
  printf("first layout: 2 messages from an 88-byte request\n");
}

/* Reset the sender's device. */
static void reset_sender(void) {
  check(relink_soft_fabric_fault(fabric, "a", "soft0", RELINK_FAULT_RESET),
        "reset");
}

/* Bad input: each refused with its status, nothing submitted, nothing
 * written to *op. */
static void bad_input(void) {
  relink_op op = 777;
  uint64_t room_before = 0, room_after = 0;
  check(relink_room(p.a, p.s, &room_before), "room");
  relink_sge five[5] = {
      {a_id, 0, 8}, {a_id, 8, 8}, {a_id, 16, 8}, {a_id, 24, 8}, {a_id, 32, 8}};
  relink_work_request wr;

  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE, .flags = RELINK_WR_SGL,
                             .sgl = NULL, .num_sge = 3};
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "`sgl` is NULL",
         "an SGL message with a NULL sgl");
  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE, .flags = RELINK_WR_SGL,
                             .sgl = five, .num_sge = 0};
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "`num_sge` is 0",
         "an SGL message of 0 ranges");
  wr.num_sge = 5;
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "`num_sge` is 5",
         "an SGL message of 5 ranges");
  wr.num_sge = UINT32_MAX;
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "`num_sge`",
         "an SGL message of UINT32_MAX ranges");
  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE, .flags = 1u << 2,
                             .region = a_id, .len = 8};
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT,
         "no RELINK_WR_* names", "a message with an unknown flag");
  wr.flags = RELINK_WR_FROM_REGION | (1u << 31);
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT,
         "no RELINK_WR_* names", "FROM_REGION with an unknown flag");
  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE,
                             .flags = RELINK_WR_FROM_REGION | RELINK_WR_SGL,
                             .region = a_id, .len = 8, .sgl = five, .num_sge = 1};
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "both",
         "a message with both flags");
  relink_token tok = {.region = 1, .offset = 0};
  wr = (relink_work_request){.kind = RELINK_OP_KIND_WRITE,
                             .flags = RELINK_WR_FROM_REGION, .region = a_id,
                             .len = 8, .remote = tok};
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "a MESSAGE's only",
         "FROM_REGION on a WRITE");
  wr = (relink_work_request){.kind = RELINK_OP_KIND_FETCH_ADD, .flags = RELINK_WR_SGL,
                             .region = a_id, .len = 8, .remote = tok, .sgl = five,
                             .num_sge = 1};
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT,
         "RELINK_WR_SGL is a MESSAGE's, WRITE's, WRITE_IMM's or READ's only",
         "SGL on a FETCH_ADD");
  /* Ranges outside their region: the code and message relink_write gives. */
  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE,
                             .flags = RELINK_WR_FROM_REGION, .region = a_id,
                             .offset = A_LEN - 8, .len = 64};
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_RANGE,
         "local range 0xfff8+64 is outside region", "FROM_REGION past the end");
  wr.offset = UINT64_MAX;
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_RANGE, "is outside region",
         "FROM_REGION at offset UINT64_MAX");
  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE,
                             .flags = RELINK_WR_FROM_REGION, .region = 9, .len = 8};
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_NO_REGION, "no region 9",
         "FROM_REGION of an unknown region");
  relink_sge past[3] = {{a_id, 0, 16}, {b_id, B_LEN - 4, 16}, {a_id, 64, 16}};
  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE, .flags = RELINK_WR_SGL,
                             .sgl = past, .num_sge = 3};
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_RANGE,
         "local range 0x3ffc+16 is outside region", "an SGL range past the end");
  relink_sge unknown[2] = {{a_id, 0, 16}, {9, 0, 16}};
  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE, .flags = RELINK_WR_SGL,
                             .sgl = unknown, .num_sge = 2};
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_NO_REGION, "no region 9",
         "an SGL range of an unknown region");
  /* Over max_message: the one range, or the list's total. */
  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE,
                             .flags = RELINK_WR_FROM_REGION, .region = a_id,
                             .len = MAX_MESSAGE + 1};
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_TOO_LARGE, "4097 bytes",
         "FROM_REGION over max_message");
  wr.len = (uint64_t)1 << 40;
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_TOO_LARGE,
         "1099511627776 bytes", "FROM_REGION of 2^40 bytes");
  relink_sge big[3] = {{a_id, 0, 2000}, {b_id, 0, 2000}, {a_id, 4096, 2000}};
  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE, .flags = RELINK_WR_SGL,
                             .sgl = big, .num_sge = 3};
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_TOO_LARGE, "6000 bytes",
         "an SGL over max_message");
  relink_sge huge[4] = {{a_id, 0, UINT32_MAX}, {a_id, 0, UINT32_MAX},
                        {a_id, 0, UINT32_MAX}, {a_id, 0, UINT32_MAX}};
  wr.sgl = huge;
  wr.num_sge = 4;
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_TOO_LARGE, "max_message",
         "an SGL of 4 ranges of UINT32_MAX bytes");
  /* Another session's, and no node's. */
  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE,
                             .flags = RELINK_WR_FROM_REGION, .region = a_id,
                             .len = 8};
  expect(relink_post(p.a, 999, &wr, &op), RELINK_ERR_NO_SESSION, "no session 999",
         "FROM_REGION on an unknown session");
  expect(relink_post(NULL, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "`node` is NULL",
         "FROM_REGION on a NULL node");

  if (op != 777)
    fail("a refused post wrote an op id");
  check(relink_room(p.a, p.s, &room_after), "room");
  if (room_after != room_before)
    fail("refused posts took room");
  for (int i = 0; i < 20; i++)
    turn2();
  if (delivered != 0 || completed != 0)
    fail("a refused post sent something");
}

int main(void) {
  pair_open(&p, 23, &fabric);

  /* The sender's own buffers: A on the heap (no right but reading it,
   * which a SEND needs), B a static array. */
  a_buf = malloc(A_LEN);
  if (!a_buf)
    fail("malloc");
  memset(a_buf, 0, A_LEN);
  check(relink_register(p.a, a_buf, A_LEN, 0, &a_id), "register A");
  check(relink_register(p.a, b_buf, sizeof b_buf, RELINK_ACCESS_LOCAL_WRITE, &b_id),
        "register B");

  relink_options *o = NULL;
  check(relink_options_new(&o), "options");
  check(relink_options_add_region(o, REGION, REGION_LEN, RELINK_ACCESS_LOCAL_WRITE, 0),
        "region");
  relink_listener l;
  check(relink_listen(p.b, "10.0.0.2:7471", NULL, &l), "listen");
  check(relink_connect(p.a, "10.0.0.2:7471", NULL, o, &p.s), "connect");
  relink_options_free(o);
  pair_until_established(&p, turn2, "the session did not come up");

  bad_input();

  /* Round 0: no fault. While the messages are outstanding (no progress
   * since they were posted), their buffers cannot be deregistered. */
  post_round();
  expect(relink_deregister(p.a, a_id), RELINK_ERR_BUSY, "in use",
         "deregister A while messages are sent from it");
  expect(relink_deregister(p.a, b_id), RELINK_ERR_BUSY, "in use",
         "deregister B while messages are sent from it");
  until_done("round 0");
  printf("round 0: %u messages from registered memory, each delivered once\n",
         posted);

  /* Round 1: the sender's device resets right after the messages were
   * posted on it, before the receiver confirmed any: they are replayed
   * from the same ranges. */
  uint64_t resumes = counter(p.a, p.s, RELINK_COUNTER_RESUMES);
  uint64_t replayed = counter(p.a, p.s, RELINK_COUNTER_REPLAYED);
  unsigned before = posted;
  post_round();
  unsigned in_flight = posted - completed;
  reset_sender();
  until_done("round 1, across a reset");
  pair_until_established(&p, turn2, "round 1: the session did not come back");
  replayed = counter(p.a, p.s, RELINK_COUNTER_REPLAYED) - replayed;
  if (in_flight != ROUND || counter(p.a, p.s, RELINK_COUNTER_RESUMES) <= resumes ||
      replayed == 0) {
    fprintf(stderr, PROGRAM ": round 1: %u in flight at the reset, %llu replayed\n",
            in_flight, (unsigned long long)replayed);
    fail("round 1: the reset did not cost the messages in flight their transport");
  }
  printf("round 1: %u messages, %llu replayed after the reset, each delivered once\n",
         posted - before, (unsigned long long)replayed);

  /* Round 2: messages posted while the device is down wait for the
   * resume. */
  resumes = counter(p.a, p.s, RELINK_COUNTER_RESUMES);
  before = posted;
  reset_sender();
  turn2();
  post_round();
  until_done("round 2, posted during a recovery");
  pair_until_established(&p, turn2, "round 2: the session did not come back");
  if (counter(p.a, p.s, RELINK_COUNTER_RESUMES) <= resumes)
    fail("round 2: no resume");
  printf("round 2: %u messages posted during a recovery, each delivered once\n",
         posted - before);
  /* Nothing more arrives. */
  for (int i = 0; i < 100; i++)
    turn2();
  if (delivered != posted)
    fail("a message delivered twice");

  /* Zero-copy: the sender copied none of those bytes, replays included;
   * the receiver copied each message it was delivered once. */
  uint64_t send_copied = counter(p.a, p.s, RELINK_COUNTER_SEND_COPIED_BYTES);
  uint64_t receive_copied = counter(p.b, p.t, RELINK_COUNTER_RECEIVE_COPIED_BYTES);
  printf("copied: %llu bytes to send, %llu to deliver (%llu delivered); "
         "%llu operations replayed\n",
         (unsigned long long)send_copied, (unsigned long long)receive_copied,
         (unsigned long long)delivered_bytes,
         (unsigned long long)counter(p.a, p.s, RELINK_COUNTER_REPLAYED));
  if (send_copied != 0)
    fail("messages from registered memory were copied to be sent");
  if (receive_copied != delivered_bytes)
    fail("RELINK_COUNTER_RECEIVE_COPIED_BYTES is not the bytes delivered");

  old_layout();

  /* A message of bytes is copied: the counter sees it. */
  unsigned char plain[100];
  fill(plain, sizeof plain, posted, 9);
  relink_work_request wr = {.kind = RELINK_OP_KIND_MESSAGE, .buf = plain,
                            .len = sizeof plain};
  post(&wr, plain, sizeof plain);
  until_done("a message of bytes");
  send_copied = counter(p.a, p.s, RELINK_COUNTER_SEND_COPIED_BYTES);
  if (send_copied < sizeof plain)
    fail("a message of bytes was not counted as copied");

  /* Deregistration waits for the completion of the last message sent
   * from the buffer, then succeeds; after it, the buffer is named by no
   * range. */
  post_sgl(posted, 0);
  expect(relink_deregister(p.a, b_id), RELINK_ERR_BUSY, "in use",
         "deregister B while a message is sent from it");
  until_done("the message the deregistration waits for");
  expect(relink_deregister(p.a, b_id), RELINK_OK, NULL,
         "deregister B after the completion");
  expect(relink_deregister(p.a, a_id), RELINK_OK, NULL,
         "deregister A after the completions");
  relink_op op = 777;
  relink_sge gone[1] = {{b_id, 0, 8}};
  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE, .flags = RELINK_WR_SGL,
                             .sgl = gone, .num_sge = 1};
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_NO_REGION, "has no region",
         "an SGL range of a deregistered buffer");
  if (op != 777)
    fail("a refused post wrote an op id");

  relink_node_free(p.a);
  relink_node_free(p.b);
  relink_soft_fabric_free(fabric);
  free(a_buf);
  for (unsigned i = 0; i < posted; i++)
    free(want[i]);
  if (failures) {
    fprintf(stderr, PROGRAM ": %d failure(s)\n", failures);
    return 1;
  }
  printf("send_from: ok (%u messages)\n", posted);
  return 0;
}
