/*
 * Backpressure and what a completion says, from C, on the in-process soft
 * fabric:
 *
 * - a session to an address nobody serves, max_outstanding 100: of 1,000
 *   sends exactly 100 are accepted, the rest are RELINK_ERR_AGAIN (as is
 *   every other submitting call), and relink_room says 0;
 * - a connected pair, max_outstanding 16: filled, its completions wait to
 *   be taken and still count; taking one gives RELINK_EVENT_WRITABLE
 *   (once per refusal) and a room of 1;
 * - relink_post of every kind with its own context: each completion's
 *   context, kind and length are the ones submitted (the per-kind calls'
 *   context is 0), the atomics' old values land; bad input to relink_post
 *   gets the documented status and costs the session nothing.
 *
 * Exits 0 when every check holds, 1 (naming the check) otherwise.
 */
#define PROGRAM "backpressure"
#include "harness.h"

#include <stdint.h>

#define REGION 1

/* Messages b delivered so far. */
static unsigned delivered;

/* One turn of both nodes (1 ms of virtual time each); b takes what it has.
 * a's outputs stay for the program. */
static void turn_pair(pair *p) {
  pair_turn(p);
  if (!p->have_t)
    return;
  unsigned char buf[64];
  size_t len;
  while (relink_poll_delivery(p->b, p->t, buf, sizeof buf, &len, NULL) == RELINK_OK)
    delivered++;
  relink_event e;
  while (relink_poll_event(p->b, p->t, &e) == RELINK_OK) {
  }
}

static uint64_t counter(relink_node *n, relink_session s, relink_counter which) {
  uint64_t v = 0;
  check(relink_session_counter(n, s, which, &v), "counter");
  return v;
}

static uint64_t room(relink_node *n, relink_session s) {
  uint64_t r = UINT64_MAX;
  check(relink_room(n, s, &r), "room");
  return r;
}

/* Take a's events; count the WRITABLE ones. */
static int writable_events(pair *p) {
  int n = 0;
  relink_event e;
  while (relink_poll_event(p->a, p->s, &e) == RELINK_OK)
    if (e.kind == RELINK_EVENT_WRITABLE) {
      if (e.text[0] == '\0')
        fail("a WRITABLE event without words");
      n++;
    }
  return n;
}

/* (a) Nobody serves the address: nothing completes, so the session holds
 * its 100 and refuses the rest. */
static void refuses_past_max_outstanding(relink_soft_fabric *f) {
  relink_node *c = NULL;
  check(relink_node_new_soft(f, "c", &c), "node c");
  relink_options *o = NULL;
  check(relink_options_new(&o), "options");
  expect(relink_options_set_max_outstanding(o, 0), RELINK_ERR_OPTIONS,
         "max_outstanding", "max_outstanding 0 names the key");
  expect(relink_options_set_max_outstanding(NULL, 5), RELINK_ERR_ARGUMENT,
         "`options` is NULL", "max_outstanding on NULL options");
  check(relink_options_set_max_outstanding(o, 100), "max_outstanding 100");
  check(relink_options_add_region(o, REGION, 4096, RELINK_ACCESS_LOCAL_WRITE, 0),
        "region");
  relink_session s;
  /* Host b has the device of 10.0.0.2, no node listens on it yet. */
  check(relink_connect(c, "10.0.0.2:7999", NULL, o, &s), "connect");
  relink_options_free(o);
  if (room(c, s) != 100)
    fail("a new session's room is its max_outstanding");

  unsigned char payload[1024];
  memset(payload, 7, sizeof payload);
  unsigned accepted = 0, again = 0;
  for (int i = 0; i < 1000; i++) {
    relink_status st = relink_send(c, s, payload, sizeof payload, NULL);
    if (st == RELINK_OK)
      accepted++;
    else if (st == RELINK_ERR_AGAIN)
      again++;
    else
      check(st, "send");
  }
  printf("nobody serves: %u accepted, %u RELINK_ERR_AGAIN\n", accepted, again);
  if (accepted != 100 || again != 900)
    fail("exactly 100 of 1000 sends accepted, 900 RELINK_ERR_AGAIN");
  expect(relink_send(c, s, "x", 1, NULL), RELINK_ERR_AGAIN,
         "100 operations outstanding, its most (100)", "the message says why");
  /* Nothing completes however long it tries. */
  for (int i = 0; i < 200; i++) {
    int did;
    check(relink_wait(c, 1, &did), "wait c");
  }
  relink_completion done;
  if (relink_poll_completion(c, s, &done) != RELINK_EMPTY)
    fail("nothing completes on a session nobody serves");
  if (room(c, s) != 0)
    fail("relink_room is 0 when full");

  /* Every submitting call says the same. */
  relink_token tok = {.region = REGION, .offset = 0};
  relink_op op = 12345;
  expect(relink_write(c, s, REGION, 0, 8, tok, &op), RELINK_ERR_AGAIN, NULL,
         "write when full");
  expect(relink_read(c, s, REGION, 0, 8, tok, &op), RELINK_ERR_AGAIN, NULL,
         "read when full");
  expect(relink_fetch_add(c, s, REGION, 0, tok, 1, &op), RELINK_ERR_AGAIN, NULL,
         "fetch_add when full");
  expect(relink_cmp_swap(c, s, REGION, 0, tok, 0, 1, &op), RELINK_ERR_AGAIN, NULL,
         "cmp_swap when full");
  relink_work_request wr = {.kind = RELINK_OP_KIND_MESSAGE,
                            .context = 1,
                            .buf = payload,
                            .len = 16};
  expect(relink_post(c, s, &wr, &op), RELINK_ERR_AGAIN, NULL, "post a message when full");
  wr = (relink_work_request){.kind = RELINK_OP_KIND_WRITE,
                             .context = 2,
                             .region = REGION,
                             .len = 8,
                             .remote = tok};
  expect(relink_post(c, s, &wr, &op), RELINK_ERR_AGAIN, NULL, "post a write when full");
  if (op != 12345)
    fail("a refused submit wrote an op id");
  if (room(c, s) != 0 || counter(c, s, RELINK_COUNTER_COMPLETED) != 0)
    fail("refusals changed nothing");
  uint64_t r = 0;
  expect(relink_room(c, 999, &r), RELINK_ERR_NO_SESSION, "no session 999",
         "room of an unknown session");
  expect(relink_room(c, s, NULL), RELINK_ERR_ARGUMENT, "`room` is NULL",
         "room into NULL");
  expect(relink_room(NULL, s, &r), RELINK_ERR_ARGUMENT, "`node` is NULL",
         "room of a NULL node");
  relink_node_free(c);
}

/* (b) Full, completions waiting: taking one makes room, once WRITABLE. */
static void taking_a_completion_makes_room(pair *p) {
  unsigned sent = 0;
  relink_status st;
  for (;;) {
    unsigned char buf[16] = {0};
    memcpy(buf, &sent, sizeof sent);
    st = relink_send(p->a, p->s, buf, sizeof buf, NULL);
    if (st != RELINK_OK)
      break;
    sent++;
  }
  expect(st, RELINK_ERR_AGAIN, "16 operations outstanding", "the 17th send");
  if (sent != 16)
    fail("16 sends fill a session of max_outstanding 16");
  /* Delivered and confirmed: the completions wait, and still count. */
  for (int i = 0; i < 2000 && counter(p->a, p->s, RELINK_COUNTER_COMPLETED) < 16; i++)
    turn_pair(p);
  if (counter(p->a, p->s, RELINK_COUNTER_COMPLETED) != 16 || delivered != 16)
    fail("the 16 messages delivered and completed");
  if (room(p->a, p->s) != 0)
    fail("completions not taken still count");
  expect(relink_send(p->a, p->s, "more", 4, NULL), RELINK_ERR_AGAIN, NULL,
         "still full");
  if (writable_events(p) != 0)
    fail("WRITABLE before a completion was taken");

  relink_completion c;
  check(relink_poll_completion(p->a, p->s, &c), "take one completion");
  if (c.outcome != RELINK_OUTCOME_SUCCESS || c.kind != RELINK_OP_KIND_MESSAGE ||
      c.len != 16 || c.context != 0)
    fail("a relink_send's completion: SUCCESS, MESSAGE, 16 bytes, context 0");
  int w = writable_events(p);
  printf("took one completion: %d WRITABLE event(s), room %llu\n", w,
         (unsigned long long)room(p->a, p->s));
  if (w != 1)
    fail("one RELINK_EVENT_WRITABLE after the refusals");
  if (room(p->a, p->s) != 1)
    fail("room 1 after one completion taken");
  check(relink_send(p->a, p->s, "fits", 4, NULL), "room for one");
  if (room(p->a, p->s) != 0)
    fail("room 0 again");
  while (relink_poll_completion(p->a, p->s, &c) == RELINK_OK) {
  }
  for (int i = 0; i < 2000 && counter(p->a, p->s, RELINK_COUNTER_COMPLETED) < 17; i++)
    turn_pair(p);
  while (relink_poll_completion(p->a, p->s, &c) == RELINK_OK) {
  }
  if (room(p->a, p->s) != 16)
    fail("every completion taken: room 16");
  if (writable_events(p) != 0)
    fail("WRITABLE with no refusal since the last one");
}

/* What an operation's completion must say. */
typedef struct {
  relink_op op;
  uint64_t context;
  relink_op_kind kind;
  uint64_t len;
  int done;
} expected;

/* (c) relink_post of every kind, each with its own context; bad input. */
static void post_carries_context_kind_and_length(pair *p) {
  relink_status st;
  uint64_t losses = counter(p->a, p->s, RELINK_COUNTER_LOSSES);
  uint64_t before = room(p->a, p->s);
  char small[16] = "0123456789abcdef";
  relink_work_request wr;
  relink_op op = 777;

  /* Refused, each with its code, before anything is read or copied. */
  expect(relink_post(p->a, p->s, NULL, &op), RELINK_ERR_ARGUMENT, "`wr` is NULL",
         "post NULL");
  wr = (relink_work_request){.kind = 42, .context = 1};
  expect(relink_post(p->a, p->s, &wr, &op), RELINK_ERR_ARGUMENT, "`kind` 42",
         "post an unknown kind");
  wr = (relink_work_request){.kind = RELINK_OP_KIND_NONE, .buf = small, .len = 1};
  expect(relink_post(p->a, p->s, &wr, &op), RELINK_ERR_ARGUMENT, "`kind` 0",
         "post a kind not set");
  wr = (relink_work_request){.kind = RELINK_OP_KIND_OTHER, .buf = small, .len = 1};
  expect(relink_post(p->a, p->s, &wr, &op), RELINK_ERR_ARGUMENT, "`kind` 99",
         "post RELINK_OP_KIND_OTHER");
  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE, .flags = 1u << 9,
                             .buf = small, .len = 1};
  expect(relink_post(p->a, p->s, &wr, &op), RELINK_ERR_ARGUMENT, "`flags`",
         "post with a flag no RELINK_WR_* names");
  /* Lengths no buffer has (small has 16 bytes): refused unread. */
  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE, .buf = small,
                             .len = (uint64_t)1 << 40};
  expect(relink_post(p->a, p->s, &wr, &op), RELINK_ERR_TOO_LARGE,
         "a message of 1099511627776 bytes", "post a message of 2^40 bytes");
  wr.len = UINT64_MAX;
  expect(relink_post(p->a, p->s, &wr, &op), RELINK_ERR_TOO_LARGE, "max_message",
         "post a message of UINT64_MAX bytes");
  wr.len = 4097;
  expect(relink_post(p->a, p->s, &wr, &op), RELINK_ERR_TOO_LARGE, "4096",
         "post a message over max_message");
  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE, .buf = NULL, .len = 1};
  expect(relink_post(p->a, p->s, &wr, &op), RELINK_ERR_ARGUMENT, "`buf` is NULL",
         "post a message from NULL");
  relink_token tok = {.region = REGION, .offset = 0};
  wr = (relink_work_request){.kind = RELINK_OP_KIND_WRITE, .region = REGION,
                             .len = (uint64_t)1 << 32, .remote = tok};
  expect(relink_post(p->a, p->s, &wr, &op), RELINK_ERR_TOO_LARGE, "UINT32_MAX",
         "post a write of 2^32 bytes");
  wr.len = UINT64_MAX;
  expect(relink_post(p->a, p->s, &wr, &op), RELINK_ERR_TOO_LARGE, "UINT32_MAX",
         "post a write of UINT64_MAX bytes");
  wr = (relink_work_request){.kind = RELINK_OP_KIND_READ, .region = REGION,
                             .offset = 4090, .len = 8, .remote = tok};
  expect(relink_post(p->a, p->s, &wr, &op), RELINK_ERR_RANGE,
         "local range 0xffa+8 is outside region 1 (4096 bytes)", "post a read past the end");
  wr = (relink_work_request){.kind = RELINK_OP_KIND_WRITE, .region = 9, .len = 8,
                             .remote = tok};
  expect(relink_post(p->a, p->s, &wr, &op), RELINK_ERR_NO_REGION, "no region 9",
         "post a write from an unknown region");
  wr = (relink_work_request){.kind = RELINK_OP_KIND_FETCH_ADD, .region = REGION,
                             .offset = 8, .len = 4, .remote = tok, .add = 1};
  expect(relink_post(p->a, p->s, &wr, &op), RELINK_ERR_ARGUMENT, "8 bytes",
         "post a fetch_add of 4 bytes");
  wr.len = 8;
  wr.offset = 4;
  expect(relink_post(p->a, p->s, &wr, &op), RELINK_ERR_MISALIGNED,
         "local offset 0x4 is not a multiple of 8", "post a misaligned fetch_add");
  wr = (relink_work_request){.kind = RELINK_OP_KIND_CMP_SWAP, .region = REGION,
                             .remote = {.region = REGION, .offset = 12}};
  expect(relink_post(p->a, p->s, &wr, &op), RELINK_ERR_MISALIGNED,
         "remote offset 0xc", "post a cmp_swap at a misaligned token");
  wr = (relink_work_request){.kind = RELINK_OP_KIND_MESSAGE, .buf = small, .len = 1};
  expect(relink_post(p->a, 999, &wr, &op), RELINK_ERR_NO_SESSION, "no session 999",
         "post on an unknown session");
  expect(relink_post(NULL, p->s, &wr, &op), RELINK_ERR_ARGUMENT, "`node` is NULL",
         "post on a NULL node");
  if (op != 777)
    fail("a refused post wrote an op id");
  if (room(p->a, p->s) != before)
    fail("refused posts took room");

  /* Every kind, each with its own context; and the per-kind calls'
   * context 0. */
  unsigned char block[64];
  memset(block, 0x5a, sizeof block);
  check(relink_region_write(p->a, p->s, REGION, 0, block, sizeof block), "source");
  relink_token word = {.region = REGION, .offset = 512};
  const char hello[] = "hello, post";
  relink_work_request wrs[] = {
      {.kind = RELINK_OP_KIND_MESSAGE, .context = 0x1001, .buf = hello,
       .len = sizeof hello},
      {.kind = RELINK_OP_KIND_WRITE, .context = 0x2002, .region = REGION, .offset = 0,
       .len = 64, .remote = {.region = REGION, .offset = 1024}},
      {.kind = RELINK_OP_KIND_READ, .context = 0x3003, .region = REGION, .offset = 128,
       .len = 32, .remote = {.region = REGION, .offset = 1024}},
      {.kind = RELINK_OP_KIND_FETCH_ADD, .context = 0x4004, .region = REGION,
       .offset = 256, .remote = word, .add = 5},
      {.kind = RELINK_OP_KIND_CMP_SWAP, .context = 0x5005, .region = REGION,
       .offset = 264, .len = 8, .remote = word, .compare = 5, .swap = 9},
      /* A message with no bytes, and a pointer as its context. */
      {.kind = RELINK_OP_KIND_MESSAGE, .context = (uint64_t)(uintptr_t)&before},
      /* A flush: after every operation above, before the two below. */
      {.kind = RELINK_OP_KIND_FLUSH, .context = 0x6006},
  };
  enum { POSTED = sizeof wrs / sizeof *wrs, ALL = POSTED + 2 };
  expected want[ALL];
  const uint64_t lens[POSTED] = {sizeof hello, 64, 32, 8, 8, 0, 0};
  for (int i = 0; i < POSTED; i++) {
    check(relink_post(p->a, p->s, &wrs[i], &want[i].op), "post");
    want[i] = (expected){want[i].op, wrs[i].context, (relink_op_kind)wrs[i].kind,
                         lens[i], 0};
  }
  check(relink_send(p->a, p->s, small, 10, &want[POSTED].op), "send");
  want[POSTED] = (expected){want[POSTED].op, 0, RELINK_OP_KIND_MESSAGE, 10, 0};
  check(relink_write(p->a, p->s, REGION, 0, 48, tok, &want[POSTED + 1].op), "write");
  want[POSTED + 1] = (expected){want[POSTED + 1].op, 0, RELINK_OP_KIND_WRITE, 48, 0};

  /* Taken node-wide, through relink_output. */
  int completed = 0, flushed_at = -1;
  relink_output out;
  for (int i = 0; i < 3000 && completed < ALL; i++) {
    turn_pair(p);
    while ((st = relink_poll_output(p->a, &out, NULL, 0)) == RELINK_OK) {
      if (out.kind != RELINK_OUTPUT_COMPLETION)
        continue;
      const relink_completion *c = &out.completion;
      int k = 0;
      while (k < ALL && want[k].op != c->op)
        k++;
      if (k == ALL || out.session != p->s || want[k].done++)
        fail("a completion of no operation submitted, or twice");
      printf("op %llu: context %#llx kind %d len %llu outcome %d\n",
             (unsigned long long)c->op, (unsigned long long)c->context, (int)c->kind,
             (unsigned long long)c->len, (int)c->outcome);
      if (c->outcome != RELINK_OUTCOME_SUCCESS || c->context != want[k].context ||
          c->kind != want[k].kind || c->len != want[k].len)
        fail("a completion's outcome, context, kind or length");
      if (c->kind == RELINK_OP_KIND_FLUSH)
        flushed_at = completed;
      completed++;
    }
    if (st != RELINK_EMPTY)
      check(st, "poll output");
  }
  if (completed != ALL)
    fail("every operation completed");
  if (flushed_at != POSTED - 1)
    fail("the flush completed after every operation before it, before the later ones");
  /* The atomics ran in order on b's word: 0 + 5, then 5 -> 9; their old
   * values landed in a's region. */
  uint64_t v;
  check(relink_region_read(p->b, p->t, REGION, 512, &v, sizeof v), "b's word");
  if (v != 9)
    fail("b's word is 9 after FETCH_ADD 5 and CMP_SWAP 5 -> 9");
  check(relink_region_read(p->a, p->s, REGION, 256, &v, sizeof v), "fetched");
  if (v != 0)
    fail("FETCH_ADD's old value 0");
  check(relink_region_read(p->a, p->s, REGION, 264, &v, sizeof v), "swapped");
  if (v != 5)
    fail("CMP_SWAP's old value 5");
  unsigned char got[32];
  check(relink_region_read(p->a, p->s, REGION, 128, got, sizeof got), "read back");
  for (size_t i = 0; i < sizeof got; i++)
    if (got[i] != 0x5a)
      fail("the READ brought back what the WRITE put");
  if (counter(p->a, p->s, RELINK_COUNTER_LOSSES) != losses)
    fail("bad input cost the session its transport");
  if (room(p->a, p->s) != before)
    fail("every completion taken: the room as before");
}

int main(void) {
  relink_soft_fabric *f = NULL;
  check(relink_soft_fabric_new(11, &f), "fabric");
  check(relink_soft_fabric_add_device(f, "a", "soft0", "10.0.0.1/24"), "device a");
  check(relink_soft_fabric_add_device(f, "b", "soft0", "10.0.0.2/24"), "device b");
  check(relink_soft_fabric_add_device(f, "c", "soft0", "10.0.0.3/24"), "device c");

  refuses_past_max_outstanding(f);

  pair p;
  memset(&p, 0, sizeof p);
  check(relink_node_new_soft(f, "a", &p.a), "node a");
  check(relink_node_new_soft(f, "b", &p.b), "node b");
  relink_options *o = NULL;
  check(relink_options_new(&o), "options");
  check(relink_options_set_max_outstanding(o, 16), "max_outstanding 16");
  check(relink_options_add_region(o, REGION, 4096, ACCESS_ALL, 1), "region");
  relink_listener l;
  check(relink_listen(p.b, "10.0.0.2:7471", o, &l), "listen");
  check(relink_connect(p.a, "10.0.0.2:7471", NULL, o, &p.s), "connect");
  relink_options_free(o);

  taking_a_completion_makes_room(&p);
  post_carries_context_kind_and_length(&p);

  if (strcmp(relink_status_name(RELINK_ERR_AGAIN), "RELINK_ERR_AGAIN") != 0)
    fail("relink_status_name knows RELINK_ERR_AGAIN");
  check(relink_close(p.a, p.s), "close");
  relink_node_free(p.a);
  relink_node_free(p.b);
  relink_soft_fabric_free(f);
  printf("%d failure(s)\n", failures);
  if (failures)
    return 1;
  printf("backpressure: ok\n");
  return 0;
}
