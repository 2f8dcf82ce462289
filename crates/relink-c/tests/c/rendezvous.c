/*
 * Messages the receiver reads itself (relink_options_set_rendezvous), from
 * C. The receiver b listens with a rendezvous from 256 bytes and posts
 * buffers of a heap buffer of its own it registered; the sender a sends
 * messages from one range of a heap buffer it registered with
 * RELINK_ACCESS_REMOTE_READ (relink_post, RELINK_WR_FROM_REGION), most of
 * them 256 bytes or longer (b RDMA-READs those into its next posted
 * buffer), some shorter (they come in their SEND). a overwrites each
 * message's bytes as soon as its completion comes: a message whose
 * completion came before b had its bytes would show it.
 *
 * - every message fills its buffer in order, once, with its own bytes,
 *   length and sequence number, also with a's device reset and then b's
 *   while messages are in flight;
 * - b counts each long message read once (RELINK_COUNTER_FETCHED) and
 *   copied none of its bytes (RELINK_COUNTER_RECEIVE_COPIED_BYTES counts
 *   short messages only); a copied nothing (RELINK_COUNTER_SEND_COPIED_BYTES
 *   is 0);
 * - bad input gets its documented status.
 *
 * Exits 0 when every check holds.
 */
#define PROGRAM "rendezvous"
#include "harness.h"
/* The soft fabric's fault hooks: relink_soft_fabric_fault. */
#include <relink_soft.h>

#define SLOT 2048
#define MESSAGES 60
/* b reads messages of at least this many bytes. */
#define MIN 256

static pair p;
static relink_soft_fabric *fabric;
static unsigned char *a_buf, *b_buf;
static uint32_t a_id, b_id;
static relink_op ops[MESSAGES];
static unsigned sent, completed, received;

/* Message n's length: 40 to 1,999 bytes, about 1 in 8 shorter than MIN. */
static size_t len_of(unsigned n) { return 40 + (n * 577u + 311u) % 1960; }

static unsigned char byte_of(unsigned n, size_t i) {
  return (unsigned char)(n * 131u + i * 7u + 1u);
}

static void completions(void) {
  relink_completion c;
  while (relink_poll_completion(p.a, p.s, &c) == RELINK_OK) {
    if (c.outcome != RELINK_OUTCOME_SUCCESS || c.kind != RELINK_OP_KIND_MESSAGE)
      fail("a message did not succeed");
    unsigned n = (unsigned)(c.context - 0x7e00);
    if (n >= sent || ops[n] != c.op)
      fail("a completion of no message");
    /* The memory is the program's again: overwrite it. */
    memset(a_buf + (size_t)n * SLOT, 0xee, SLOT);
    completed++;
  }
}

static void receives(void) {
  relink_received r;
  while (relink_poll_received(p.b, p.t, &r) == RELINK_OK) {
    unsigned n = received;
    if (r.outcome != RELINK_RECEIVE_MESSAGE || r.seq != (uint64_t)n + 1 ||
        r.context != 0xb0 + n || r.len != len_of(n) || r.truncated) {
      fprintf(stderr,
              PROGRAM ": receive %u: outcome %d seq %llu context %#llx len %u%s\n", n,
              (int)r.outcome, (unsigned long long)r.seq, (unsigned long long)r.context,
              r.len, r.truncated ? " truncated" : "");
      fail("a message in another buffer, out of order, or twice");
    }
    const unsigned char *at = b_buf + (size_t)n * SLOT;
    for (size_t i = 0; i < r.len; i++)
      if (at[i] != byte_of(n, i)) {
        fprintf(stderr, PROGRAM ": message %u: byte %zu is %#x, not %#x\n", n, i, at[i],
                byte_of(n, i));
        fail("a message with bytes that are not its own");
      }
    received++;
  }
}

static void turn2(void) {
  pair_turn(&p);
  pair_drop_events(&p);
  completions();
  if (p.have_t)
    receives();
}

static void send_from(unsigned n) {
  size_t len = len_of(n);
  unsigned char *at = a_buf + (size_t)n * SLOT;
  for (size_t i = 0; i < len; i++)
    at[i] = byte_of(n, i);
  relink_work_request wr = {.kind = RELINK_OP_KIND_MESSAGE,
                            .flags = RELINK_WR_FROM_REGION,
                            .region = a_id,
                            .offset = (uint64_t)n * SLOT,
                            .len = len,
                            .context = 0x7e00 + n};
  check(relink_post(p.a, p.s, &wr, &ops[n]), "post");
  sent++;
}

static uint64_t counter(relink_node *n, relink_session s, relink_counter which) {
  uint64_t v = 0;
  check(relink_session_counter(n, s, which, &v), "counter");
  return v;
}

int main(void) {
  expect(relink_options_set_rendezvous(NULL, 1), RELINK_ERR_ARGUMENT, NULL,
         "rendezvous on NULL options");
  pair_open(&p, 29, &fabric);
  a_buf = calloc(MESSAGES, SLOT);
  b_buf = calloc(MESSAGES, SLOT);
  if (!a_buf || !b_buf)
    fail("calloc");
  check(relink_register(p.a, a_buf, (size_t)MESSAGES * SLOT, RELINK_ACCESS_REMOTE_READ,
                        &a_id),
        "register a's buffer for the peer to read");
  check(relink_register(p.b, b_buf, (size_t)MESSAGES * SLOT, RELINK_ACCESS_LOCAL_WRITE,
                        &b_id),
        "register b's buffer");

  relink_options *o = NULL;
  check(relink_options_new(&o), "options");
  check(relink_options_set_rendezvous(o, MIN), "rendezvous");
  relink_listener l;
  check(relink_listen(p.b, "10.0.0.2:7471", o, &l), "listen");
  relink_options_free(o);
  check(relink_connect(p.a, "10.0.0.2:7471", NULL, NULL, &p.s), "connect");
  pair_until_established(&p, turn2, "the session did not come up");
  for (unsigned i = 0; i < MESSAGES; i++)
    check(relink_post_receive(p.b, p.t, b_id, (uint64_t)i * SLOT, SLOT, 0xb0 + i),
          "post a receive");

  /* A third sent, a's device reset; a third more, b's reset; the rest. */
  for (unsigned n = 0; n < MESSAGES; n++) {
    send_from(n);
    if (n == MESSAGES / 3 || n == 2 * MESSAGES / 3) {
      turn2();
      const char *host = n == MESSAGES / 3 ? "a" : "b";
      check(relink_soft_fabric_fault(fabric, host, "soft0", RELINK_FAULT_RESET), "reset");
    }
  }
  for (int i = 0; i < 20000 && (received < MESSAGES || completed < MESSAGES); i++)
    turn2();
  if (received != MESSAGES || completed != MESSAGES) {
    fprintf(stderr, PROGRAM ": %u received, %u completed of %u\n", received, completed,
            MESSAGES);
    fail("not every message arrived and completed");
  }

  uint64_t long_ones = 0, short_bytes = 0;
  for (unsigned n = 0; n < MESSAGES; n++) {
    if (len_of(n) >= MIN)
      long_ones++;
    else
      short_bytes += len_of(n);
  }
  uint64_t fetched = counter(p.b, p.t, RELINK_COUNTER_FETCHED);
  uint64_t rewound = counter(p.b, p.t, RELINK_COUNTER_FETCHES_REWOUND);
  uint64_t copied_in = counter(p.b, p.t, RELINK_COUNTER_RECEIVE_COPIED_BYTES);
  uint64_t copied_out = counter(p.a, p.s, RELINK_COUNTER_SEND_COPIED_BYTES);
  printf("read %llu of %u messages (%llu reads given up and read again); copied "
         "%llu bytes in (short messages: %llu bytes), %llu out\n",
         (unsigned long long)fetched, MESSAGES, (unsigned long long)rewound,
         (unsigned long long)copied_in, (unsigned long long)short_bytes,
         (unsigned long long)copied_out);
  if (fetched != long_ones)
    fail("every long message read once");
  if (copied_out != 0)
    fail("the sender copied a message");
  /* A short message is copied once or twice (when it waited behind a
   * read) each time it arrives; a long one never. */
  if (copied_in > 2 * short_bytes * (1 + rewound))
    fail("the receiver copied a long message");

  relink_node_free(p.a);
  relink_node_free(p.b);
  relink_soft_fabric_free(fabric);
  free(a_buf);
  free(b_buf);
  if (failures)
    return 1;
  printf(PROGRAM ": ok\n");
  return 0;
}
