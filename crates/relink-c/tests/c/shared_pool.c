/*
 * A shared receive queue's pool of posted buffers, from C
 * (relink_post_shared_receive, relink_take_shared_receives). The target b
 * accepts two sessions on one shared receive queue and posts buffers of a
 * registration of its own to the queue's pool; one session also posts a
 * buffer of its own (relink_post_receive). The initiator a sends messages
 * on both sessions (and a WRITE with immediate data):
 *
 * - each receive ends on the session its message came on
 *   (relink_poll_received of that session), in order per session, with
 *   the message's bytes at the buffer's start and nothing written past
 *   them; the session with a buffer of its own fills it first, then the
 *   pool's; the pool's buffers are taken oldest first;
 * - across a reset of b's device the pool serves the sessions again, each
 *   message once; a WRITE notice takes a pool buffer
 *   (RELINK_RECEIVE_WRITTEN) on its session;
 * - relink_deregister of the registration is RELINK_ERR_BUSY while a
 *   buffer in it is in the pool, and relink_shared_receive_free of a
 *   queue with buffers in its pool RELINK_ERR_SESSION;
 * - relink_take_shared_receives hands the untaken buffers back in the
 *   order they were posted, at most `cap` a call, the rest staying posted
 *   for the next; then the deregistration succeeds;
 * - bad input gets its documented status and posts or takes nothing.
 *
 * librelink prints nothing. Exits 0 when every check holds.
 */
#define PROGRAM "shared_pool"
#include "harness.h"
/* The soft fabric's fault hooks: relink_soft_fabric_fault. */
#include <relink_soft.h>

#include <stdint.h>

#define SESSIONS 2
#define REGION 1
#define REGION_LEN 4096
/* b's registration: SLOTS buffers of SLOT bytes. */
#define R_LEN (64 * 1024)
#define SLOT 1024
#define SENTINEL 0xee
#define POOL_CTX 1000u
#define OWN_CTX 99u

static relink_soft_fabric *fabric;
static relink_node *a, *b;
static relink_session s[SESSIONS], t[SESSIONS];
static int accepted;
static unsigned char *rbuf;
static uint32_t r_id;
static relink_shared_receive q;

/* What each of a's sessions sent, in order: message n of session k is
 * `len[k][n]` bytes of pat(k, n, i), or a WRITE notice (len 0, imm). */
#define MAX_SENT 32
static unsigned sent_len[SESSIONS][MAX_SENT];
static int sent_imm[SESSIONS][MAX_SENT];
static unsigned sent[SESSIONS];
/* Which of a's sessions each of b's is (by the bytes that came on it):
 * -1 until known. */
static int peer_of[SESSIONS] = {-1, -1};
/* Receives ended on each of b's sessions, and their contexts in order. */
static unsigned got[SESSIONS];
static uint64_t got_ctx[SESSIONS][MAX_SENT];
/* Where each context's buffer is: context POOL_CTX + i is slot i, OWN_CTX
 * slot 60. */
static unsigned completed, ops;

static unsigned char pat(unsigned k, unsigned n, size_t i) {
  return (unsigned char)(k * 97u + n * 31u + i * 5u + 7u);
}

static uint64_t slot_of(uint64_t context) {
  return context == OWN_CTX ? 60 : context - POOL_CTX;
}

/* Post pool buffer `i` (context POOL_CTX + i, slot i), sentinel first. */
static void post_pool(unsigned i) {
  memset(rbuf + (size_t)i * SLOT, SENTINEL, SLOT);
  check(relink_post_shared_receive(b, q, r_id, (uint64_t)i * SLOT, SLOT, POOL_CTX + i),
        "post to the pool");
}

/* A receive that ended on b's session j. */
static void take_received(unsigned j, const relink_received *r) {
  if (r->region != r_id || r->offset != slot_of(r->context) * SLOT)
    fail("a receive's buffer is not the one posted with its context");
  const unsigned char *at = rbuf + r->offset;
  if (r->outcome == RELINK_RECEIVE_MESSAGE) {
    if (r->len < 2)
      fail("a message too short to name its session");
    unsigned k = at[0], n = at[1];
    if (k >= SESSIONS)
      fail("a message of no session");
    if (peer_of[j] < 0)
      peer_of[j] = (int)k;
    if (peer_of[j] != (int)k) {
      fprintf(stderr, PROGRAM ": b's session %u got a message of a's session %u\n", j,
              k);
      fail("a receive ended on a session its message did not come on");
    }
    if (n != got[j] || r->seq != (uint64_t)got[j] + 1 || n >= sent[k] ||
        sent_imm[k][n] || r->len != sent_len[k][n] || r->truncated) {
      fprintf(stderr,
              PROGRAM ": b's session %u: message %u seq %llu len %u; want %u, "
              "seq %u\n",
              j, n, (unsigned long long)r->seq, r->len, got[j], got[j] + 1);
      fail("a message out of order, twice, or of the wrong length");
    }
    for (size_t i = 2; i < r->len; i++)
      if (at[i] != pat(k, n, i))
        fail("a received message's bytes");
    for (size_t i = r->len; i < SLOT; i++)
      if (at[i] != SENTINEL)
        fail("a buffer written past its message");
  } else if (r->outcome == RELINK_RECEIVE_WRITTEN) {
    int k = peer_of[j];
    if (k < 0 || r->seq != (uint64_t)got[j] + 1 || got[j] >= sent[k] ||
        !sent_imm[k][got[j]] || r->imm != 0x77000u + (unsigned)k ||
        r->written_region != REGION || r->written_len != 64)
      fail("a WRITE notice out of place, or on the wrong session");
    for (size_t i = 0; i < SLOT; i++)
      if (at[i] != SENTINEL)
        fail("a WRITE notice wrote into its buffer");
  } else {
    fprintf(stderr, PROGRAM ": outcome %d\n", (int)r->outcome);
    fail("a receive that neither a message nor a notice took");
  }
  got_ctx[j][got[j]++] = r->context;
}

static void turn_all(void) {
  int did;
  check(relink_wait(a, 1, &did), "wait a");
  check(relink_wait(b, 1, &did), "wait b");
  relink_accepted acc;
  while (accepted < SESSIONS && relink_accept(b, &acc) == RELINK_OK)
    t[accepted++] = acc.session;
  relink_event e;
  relink_completion c;
  for (int i = 0; i < SESSIONS; i++) {
    while (relink_poll_event(a, s[i], &e) == RELINK_OK) {
    }
    while (relink_poll_completion(a, s[i], &c) == RELINK_OK) {
      if (c.outcome != RELINK_OUTCOME_SUCCESS)
        fail("an operation of a did not succeed");
      completed++;
    }
  }
  for (int j = 0; j < accepted; j++) {
    while (relink_poll_event(b, t[j], &e) == RELINK_OK) {
    }
    relink_received r;
    while (relink_poll_received(b, t[j], &r) == RELINK_OK)
      take_received((unsigned)j, &r);
  }
}

static int established(void) {
  if (accepted < SESSIONS)
    return 0;
  for (int i = 0; i < SESSIONS; i++) {
    relink_state sa, sb;
    if (relink_session_state(a, s[i], &sa) != RELINK_OK ||
        relink_session_state(b, t[i], &sb) != RELINK_OK ||
        sa != RELINK_STATE_ESTABLISHED || sb != RELINK_STATE_ESTABLISHED)
      return 0;
  }
  return 1;
}

static void until_established(const char *what) {
  for (int i = 0; i < 10000 && !established(); i++)
    turn_all();
  if (!established())
    fail(what);
}

static unsigned all_got(void) {
  unsigned n = 0;
  for (int j = 0; j < SESSIONS; j++)
    n += got[j];
  return n;
}

static void until_got(unsigned want, const char *what) {
  for (int i = 0; i < 20000 && (all_got() < want || completed < ops); i++)
    turn_all();
  if (all_got() != want || completed != ops) {
    fprintf(stderr, PROGRAM ": %s: %u of %u receives, %u of %u completions\n", what,
            all_got(), want, completed, ops);
    fail(what);
  }
}

/* a's session k sends its next message: 2 bytes naming it, then pat. */
static void send_on(unsigned k, unsigned len) {
  unsigned n = sent[k];
  unsigned char buf[SLOT];
  buf[0] = (unsigned char)k;
  buf[1] = (unsigned char)n;
  for (size_t i = 2; i < len; i++)
    buf[i] = pat(k, n, i);
  check(relink_send(a, s[k], buf, len, NULL), "send");
  sent_len[k][n] = len;
  sent_imm[k][n] = 0;
  sent[k]++;
  ops++;
}

/* a's session k WRITEs 64 bytes into b's region with immediate data. */
static void write_imm_on(unsigned k) {
  relink_token at = {.region = REGION, .offset = 0};
  check(relink_write_imm(a, s[k], REGION, 0, 64, at, 0x77000u + k, NULL),
        "write_imm");
  sent_imm[k][sent[k]] = 1;
  sent_len[k][sent[k]] = 0;
  sent[k]++;
  ops++;
}

/* Take back the pool's buffers, `cap` a call: their contexts, in order. */
static unsigned take_back(size_t cap, uint64_t *ctx, unsigned max) {
  relink_posted_buffer out[8];
  unsigned total = 0;
  size_t n;
  do {
    n = 99;
    check(relink_take_shared_receives(b, q, out, cap, &n), "take back");
    if (n > cap)
      fail("more handed back than asked for");
    for (size_t i = 0; i < n; i++) {
      if (total == max)
        fail("more handed back than posted");
      if (out[i].region != r_id || out[i].len != SLOT ||
          out[i].offset != slot_of(out[i].context) * SLOT)
        fail("a buffer handed back is not as it was posted");
      ctx[total++] = out[i].context;
    }
  } while (n == cap);
  return total;
}

static void bad_input(void) {
  size_t n = 55;
  relink_posted_buffer out[2];
  expect(relink_post_shared_receive(NULL, q, r_id, 0, SLOT, 1), RELINK_ERR_ARGUMENT,
         "`node` is NULL", "post_shared_receive on a NULL node");
  expect(relink_post_shared_receive(b, 999, r_id, 0, SLOT, 1), RELINK_ERR_OPTIONS,
         "no shared receive queue 999", "post_shared_receive to an unknown queue");
  expect(relink_post_shared_receive(b, q, REGION, 0, 64, 1), RELINK_ERR_NO_REGION,
         "region 1 is no registration of the node",
         "post_shared_receive in a session's region");
  expect(relink_post_shared_receive(b, q, 9, 0, 64, 1), RELINK_ERR_NO_REGION,
         "region 9 is no registration", "post_shared_receive in an unknown region");
  expect(relink_post_shared_receive(b, q, r_id, R_LEN - 8, 64, 1), RELINK_ERR_RANGE,
         "buffer 0xfff8+64 is outside region", "post_shared_receive past the end");
  expect(relink_post_shared_receive(b, q, r_id, UINT64_MAX, 1, 1), RELINK_ERR_RANGE,
         "is outside region", "post_shared_receive at offset UINT64_MAX");
  expect(relink_post_shared_receive(b, q, r_id, 0, (uint64_t)1 << 32, 1),
         RELINK_ERR_TOO_LARGE, "4294967296 bytes", "post_shared_receive of 2^32 bytes");
  expect(relink_take_shared_receives(NULL, q, out, 2, &n), RELINK_ERR_ARGUMENT,
         "`node` is NULL", "take_shared_receives on a NULL node");
  expect(relink_take_shared_receives(b, q, out, 2, NULL), RELINK_ERR_ARGUMENT,
         "`n` is NULL", "take_shared_receives into a NULL n");
  expect(relink_take_shared_receives(b, q, NULL, 2, &n), RELINK_ERR_ARGUMENT,
         "`out` is NULL", "take_shared_receives into a NULL out with a cap");
  expect(relink_take_shared_receives(b, 999, out, 2, &n), RELINK_ERR_OPTIONS,
         "no shared receive queue 999", "take_shared_receives of an unknown queue");
  if (n != 55)
    fail("a refused call wrote *n");
  expect(relink_take_shared_receives(b, q, out, 2, &n), RELINK_OK, NULL,
         "take_shared_receives of an empty pool");
  if (n != 0)
    fail("an empty pool handed something back");
  expect(relink_take_shared_receives(b, q, NULL, 0, &n), RELINK_OK, NULL,
         "take_shared_receives with a cap of 0");
  if (n != 0)
    fail("a cap of 0 handed something back");
  /* The refusals posted nothing: the registration is free. */
  expect(relink_deregister(b, r_id), RELINK_OK, NULL,
         "deregister after refused posts");
  check(relink_register(b, rbuf, R_LEN, RELINK_ACCESS_LOCAL_WRITE, &r_id),
        "register again");
}

/* A queue no session uses: its pool keeps it until it is taken back. */
static void idle_queue(void) {
  relink_shared_receive q2;
  check(relink_shared_receive_new(b, 16, 1024, &q2), "a second queue");
  check(relink_post_shared_receive(b, q2, r_id, 50 * SLOT, 16, 7), "post to it");
  check(relink_post_shared_receive(b, q2, r_id, 51 * SLOT, 32, 8), "post to it");
  expect(relink_shared_receive_free(b, q2), RELINK_ERR_SESSION, "in use",
         "free a queue with buffers in its pool");
  expect(relink_deregister(b, r_id), RELINK_ERR_BUSY, "shared receive queue",
         "deregister with buffers in an idle queue's pool");
  relink_posted_buffer out[4];
  size_t n = 0;
  check(relink_take_shared_receives(b, q2, out, 4, &n), "take back");
  if (n != 2 || out[0].context != 7 || out[0].offset != 50 * SLOT ||
      out[0].len != 16 || out[1].context != 8 || out[1].offset != 51 * SLOT ||
      out[1].len != 32 || out[0].region != r_id)
    fail("an idle queue's buffers, in order");
  expect(relink_shared_receive_free(b, q2), RELINK_OK, NULL,
         "free the queue once its pool is empty");
  expect(relink_post_shared_receive(b, q2, r_id, 0, 16, 9), RELINK_ERR_OPTIONS,
         "no shared receive queue", "post to a freed queue");
  printf("idle: a queue's pool kept it and the registration until taken back\n");
}

int main(void) {
  check(relink_soft_fabric_new(37, &fabric), "fabric");
  check(relink_soft_fabric_add_device(fabric, "a", "soft0", "10.0.0.1/24"), "device");
  check(relink_soft_fabric_add_device(fabric, "b", "soft0", "10.0.0.2/24"), "device");
  check(relink_node_new_soft(fabric, "a", &a), "node a");
  check(relink_node_new_soft(fabric, "b", &b), "node b");

  rbuf = malloc(R_LEN);
  if (!rbuf)
    fail("malloc");
  memset(rbuf, SENTINEL, R_LEN);
  check(relink_register(b, rbuf, R_LEN, RELINK_ACCESS_LOCAL_WRITE, &r_id), "register");

  /* b: sessions on one queue, each with a region a WRITEs into. */
  check(relink_shared_receive_new(b, 64, 4096, &q), "queue");
  relink_options *ob = NULL;
  check(relink_options_new(&ob), "options");
  check(relink_options_set_recv_slots(ob, 16), "slots");
  check(relink_options_set_shared_receive(ob, q, 1), "use the queue");
  check(relink_options_add_region(ob, REGION, REGION_LEN,
                                  RELINK_ACCESS_LOCAL_WRITE | RELINK_ACCESS_REMOTE_WRITE,
                                  1),
        "b's region");
  relink_listener l;
  check(relink_listen(b, "10.0.0.2:7471", ob, &l), "listen");
  relink_options_free(ob);
  relink_options *oa = NULL;
  check(relink_options_new(&oa), "options");
  check(relink_options_add_region(oa, REGION, REGION_LEN, RELINK_ACCESS_LOCAL_WRITE, 0),
        "a's region");
  for (int i = 0; i < SESSIONS; i++)
    check(relink_connect(a, "10.0.0.2:7471", NULL, oa, &s[i]), "connect");
  relink_options_free(oa);
  until_established("the sessions did not come up");

  bad_input();
  idle_queue();

  /* Six buffers in the pool; b's first session has one of its own. */
  for (unsigned i = 0; i < 6; i++)
    post_pool(i);
  expect(relink_deregister(b, r_id), RELINK_ERR_BUSY, "shared receive queue",
         "deregister while buffers in it are in the pool");
  expect(relink_shared_receive_free(b, q), RELINK_ERR_SESSION, "in use",
         "free a queue in use");
  memset(rbuf + 60 * SLOT, SENTINEL, SLOT);
  check(relink_post_receive(b, t[0], r_id, 60 * SLOT, SLOT, OWN_CTX), "own buffer");

  /* Two messages on each session: four receives, t[0]'s own buffer first,
   * then three of the pool's, oldest first. */
  for (unsigned k = 0; k < SESSIONS; k++)
    for (unsigned m = 0; m < 2; m++)
      send_on(k, 100 + 300 * k + 50 * m);
  until_got(4, "the first messages");
  if (got[0] != 2 || got[1] != 2 || got_ctx[0][0] != OWN_CTX)
    fail("each session its two messages, t[0]'s own buffer first");
  uint64_t used[4] = {got_ctx[0][1], got_ctx[1][0], got_ctx[1][1], 0};
  for (unsigned i = 0; i < 3; i++)
    for (unsigned k = i + 1; k < 3; k++)
      if (used[k] < used[i]) {
        uint64_t x = used[i];
        used[i] = used[k];
        used[k] = x;
      }
  if (used[0] != POOL_CTX || used[1] != POOL_CTX + 1 || used[2] != POOL_CTX + 2)
    fail("the pool's buffers are not taken oldest first");
  printf("pool: 4 messages on 2 sessions, each on its own session; t[0]'s own "
         "buffer first, then the pool's 1000..1002\n");

  /* Across a reset of b's device: one more message on each session and a
   * WRITE notice on the second, into the pool's 1003..1005. */
  uint64_t resumes = 0;
  check(relink_session_counter(a, s[0], RELINK_COUNTER_RESUMES, &resumes), "counter");
  unsigned before[SESSIONS] = {got[0], got[1]};
  check(relink_soft_fabric_fault(fabric, "b", "soft0", RELINK_FAULT_RESET), "reset");
  send_on(0, 777);
  send_on(1, 10);
  write_imm_on(1);
  until_got(7, "across a reset");
  until_established("the sessions did not come back");
  uint64_t after = 0;
  check(relink_session_counter(a, s[0], RELINK_COUNTER_RESUMES, &after), "counter");
  if (after <= resumes)
    fail("no resume after the reset");
  uint64_t ctxs[3];
  unsigned nctx = 0;
  for (unsigned j = 0; j < SESSIONS; j++)
    for (unsigned i = before[j]; i < got[j] && nctx < 3; i++)
      ctxs[nctx++] = got_ctx[j][i];
  if (nctx != 3)
    fail("after the reset: 3 receives");
  for (unsigned i = 0; i < 3; i++)
    if (ctxs[i] < POOL_CTX + 3 || ctxs[i] > POOL_CTX + 5)
      fail("after the reset: the pool's next buffers");
  if (ctxs[0] == ctxs[1] || ctxs[1] == ctxs[2] || ctxs[0] == ctxs[2])
    fail("a pool buffer taken twice");
  for (int i = 0; i < 100; i++)
    turn_all();
  if (all_got() != 7)
    fail("something arrived twice");
  printf("reset: 2 messages and a WRITE notice in the pool's buffers, each once\n");

  /* Four more in the pool; nothing arrives; take them back 3 at a time:
   * in the order posted, the rest staying posted until the next call. */
  for (unsigned i = 6; i < 10; i++)
    post_pool(i);
  relink_posted_buffer first[3];
  size_t n = 0;
  check(relink_take_shared_receives(b, q, first, 3, &n), "take back 3");
  if (n != 3 || first[0].context != POOL_CTX + 6 || first[1].context != POOL_CTX + 7 ||
      first[2].context != POOL_CTX + 8)
    fail("the first 3 buffers handed back, in order");
  expect(relink_deregister(b, r_id), RELINK_ERR_BUSY, "shared receive queue",
         "deregister while one buffer is still in the pool");
  /* The one left still takes a message. */
  send_on(0, 64);
  until_got(8, "the buffer left in the pool");
  unsigned j0 = peer_of[0] == 0 ? 0 : 1;
  if (peer_of[j0] != 0 || got_ctx[j0][got[j0] - 1] != POOL_CTX + 9)
    fail("the buffer left in the pool took the next message");
  for (unsigned i = 10; i < 15; i++)
    post_pool(i);
  uint64_t back[8];
  unsigned k = take_back(2, back, 8);
  if (k != 5)
    fail("5 buffers handed back");
  for (unsigned i = 0; i < k; i++)
    if (back[i] != POOL_CTX + 10 + i)
      fail("buffers handed back out of order");
  expect(relink_deregister(b, r_id), RELINK_OK, NULL,
         "deregister once the pool's buffers are back");
  printf("take back: 3, then 5 two at a time, in order; then deregistered\n");

  relink_node_free(a);
  relink_node_free(b);
  relink_soft_fabric_free(fabric);
  free(rbuf);
  if (failures) {
    fprintf(stderr, PROGRAM ": %d failure(s)\n", failures);
    return 1;
  }
  printf("shared_pool: ok (%u receives)\n", all_got());
  return 0;
}
