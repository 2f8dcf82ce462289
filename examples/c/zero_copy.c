/*
 * zero_copy — messages sent from the application's own memory without a
 * copy, received into buffers the receiver posted, across a device reset.
 *
 * Two nodes in this process on the in-process soft fabric: a sends, b
 * receives.
 *
 * - Both register buffers of their own with their node (relink_register,
 *   as ibv_reg_mr): a an "outbox" on the heap and a static array of
 *   message headers; b a "ring" of receive buffers and a "board" the
 *   peer may WRITE into.
 * - a sends each message from where its bytes are, with no copy into
 *   relink: the even ones from one range of the outbox
 *   (RELINK_WR_FROM_REGION: header and text side by side), the odd ones
 *   from a scatter/gather list of two ranges (RELINK_WR_SGL: a header of
 *   the static array, then the text in the outbox). It leaves those bytes
 *   unchanged until each message's completion: a replay after the reset
 *   reads them again.
 * - b posts the ring's buffers (relink_post_receive); each message fills
 *   one, in order (relink_poll_received), and b posts it again once it
 *   has read it.
 * - a's device is reset halfway with messages in flight (relink_soft.h's
 *   hook): nothing here retries or re-sends; relink replays what was not
 *   confirmed and delivers every message exactly once.
 * - Then a WRITEs a summary, gathered from two ranges (RELINK_WR_SGL on a
 *   WRITE_IMM), into b's board, whose id b told a in a message; b is told
 *   in a posted buffer (RELINK_RECEIVE_WRITTEN) once the bytes are there,
 *   and reads them in its own memory.
 *
 * It prints what arrived, the copy counters (a's
 * RELINK_COUNTER_SEND_COPIED_BYTES: 0, nothing was copied to be sent; b's
 * RELINK_COUNTER_RECEIVE_COPIED_BYTES: each message's bytes once, from
 * the receive slot it arrived in into the posted buffer), and a line
 * `RESULT messages=N received=N duplicates=0 notices=1 ...`; it exits 0
 * when every message arrived exactly once, in order, with its bytes.
 *
 * Build (librelink installed, or see `examples/c/README.md`):
 *     cc -o zero_copy zero_copy.c $(pkg-config --cflags --libs relink)
 * Run:
 *     zero_copy [MESSAGES]        (24 by default, at most 200)
 */
#include <relink.h>
/* relink_soft_fabric_fault: the device reset in the middle. */
#include <relink_soft.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MESSAGES 200
/* Each message's part of a's outbox, and each of b's receive buffers. */
#define SLOT 256
/* Receive buffers b keeps posted. */
#define RING 8
/* Messages a keeps outstanding (submitted, not completed). */
#define WINDOW 8
/* The board: where a's summary lands. */
#define BOARD_LEN 1024
#define MAGIC 0x7a63u /* "zc" */
/* Give up (as a failure) after this long of the nodes' virtual clock. */
#define STALL_MS 60000

/* What starts every message (and the summary): its number and the length
 * of the text after it. */
typedef struct {
  uint16_t magic;
  uint16_t number;
  uint32_t len;
} header;

static void check(relink_status st, const char *what) {
  if (st < 0) {
    fprintf(stderr, "zero_copy: %s: %s: %s\n", what, relink_status_name(st),
            relink_last_error());
    exit(1);
  }
}

static void die(const char *what) {
  fprintf(stderr, "zero_copy: %s\n", what);
  exit(1);
}

static uint64_t counter(relink_node *n, relink_session s, relink_counter which) {
  uint64_t v = 0;
  check(relink_session_counter(n, s, which, &v), "counter");
  return v;
}

/* Print a session's events (all but state transitions); count resumes;
 * end the program if the session ended. */
static unsigned events(relink_node *n, relink_session s, const char *who) {
  relink_event e;
  unsigned resumes = 0;
  while (relink_poll_event(n, s, &e) == RELINK_OK) {
    if (e.kind != RELINK_EVENT_TRANSITION)
      printf("%s: %s\n", who, e.text);
    if (e.kind == RELINK_EVENT_RESUMED)
      resumes++;
    if (e.kind == RELINK_EVENT_GAVE_UP || e.kind == RELINK_EVENT_PEER_LOST)
      die("a session ended");
  }
  return resumes;
}

/* ---- the sender, a ---------------------------------------------------- */

typedef struct {
  relink_node *node;
  relink_session session;
  unsigned char *outbox; /* registered: message i's bytes at i * SLOT */
  uint32_t outbox_id, headers_id;
  unsigned total, sent, completed;
  int have_board;
  relink_token board; /* b's board, once b said where it is */
  int summary_sent, summary_done;
  unsigned resumes;
} sender;

/* Registered too: the headers of the messages sent from two ranges, and
 * the summary's. Static, so it outlives every operation. */
static header headers[MAX_MESSAGES + 1];

static int text_of(unsigned i, char *dst, size_t cap) {
  return snprintf(dst, cap, "hello #%u, %s", i,
                  i % 2 ? "gathered from a header and a text" : "from one range");
}

/* Send message i from registered memory, without a copy. */
static void send_message(sender *a, unsigned i) {
  unsigned char *slot = a->outbox + (size_t)i * SLOT;
  relink_work_request wr = {.kind = RELINK_OP_KIND_MESSAGE, .context = i};
  relink_sge sgl[2];
  if (i % 2 == 0) {
    /* Header and text side by side in the outbox: one range. */
    char *text = (char *)slot + sizeof(header);
    int len = text_of(i, text, SLOT - sizeof(header));
    header h = {MAGIC, (uint16_t)i, (uint32_t)len};
    memcpy(slot, &h, sizeof h);
    wr.flags = RELINK_WR_FROM_REGION;
    wr.region = a->outbox_id;
    wr.offset = (uint64_t)i * SLOT;
    wr.len = sizeof(header) + (uint64_t)len;
  } else {
    /* The header in the static array, the text in the outbox: two ranges,
     * sent one after the other as one message. */
    int len = text_of(i, (char *)slot, SLOT);
    headers[i] = (header){MAGIC, (uint16_t)i, (uint32_t)len};
    sgl[0] = (relink_sge){a->headers_id, (uint64_t)i * sizeof(header), sizeof(header)};
    sgl[1] = (relink_sge){a->outbox_id, (uint64_t)i * SLOT, (uint32_t)len};
    wr.flags = RELINK_WR_SGL;
    wr.sgl = sgl;
    wr.num_sge = 2;
  }
  check(relink_post(a->node, a->session, &wr, NULL), "post a message");
  a->sent++;
}

/* WRITE a summary into b's board, gathered from two ranges, with
 * immediate data: b is told once the bytes are there. */
static void send_summary(sender *a) {
  unsigned i = a->total;
  char *text = (char *)a->outbox + (size_t)i * SLOT;
  int len = snprintf(text, SLOT, "summary: %u messages sent from registered memory",
                     a->total);
  headers[i] = (header){MAGIC, (uint16_t)i, (uint32_t)len};
  relink_sge sgl[2] = {
      {a->headers_id, (uint64_t)i * sizeof(header), sizeof(header)},
      {a->outbox_id, (uint64_t)i * SLOT, (uint32_t)len},
  };
  relink_work_request wr = {.kind = RELINK_OP_KIND_WRITE_IMM,
                            .flags = RELINK_WR_SGL,
                            .context = i,
                            .remote = a->board,
                            .sgl = sgl,
                            .num_sge = 2,
                            .imm = a->total};
  check(relink_post(a->node, a->session, &wr, NULL), "post the summary");
  a->summary_sent = 1;
}

static void sender_step(sender *a) {
  a->resumes += events(a->node, a->session, "a");
  relink_completion c;
  while (relink_poll_completion(a->node, a->session, &c) == RELINK_OK) {
    if (c.outcome != RELINK_OUTCOME_SUCCESS) {
      fprintf(stderr, "zero_copy: a: operation %" PRIu64 " ended %d (error %d)\n",
              c.context, (int)c.outcome, (int)c.error);
      exit(1);
    }
    /* Its bytes are a's again from here. */
    if (c.kind == RELINK_OP_KIND_WRITE_IMM)
      a->summary_done = 1;
    else
      a->completed++;
  }
  /* b's message: where its board is. */
  char buf[64];
  size_t len = 0;
  if (relink_poll_delivery(a->node, a->session, buf, sizeof buf - 1, &len, NULL) ==
      RELINK_OK) {
    buf[len] = 0;
    uint32_t region = 0;
    uint64_t offset = 0;
    if (sscanf(buf, "board %" SCNu32 " %" SCNu64, &region, &offset) != 2)
      die("a: b's message is not where its board is");
    a->board = (relink_token){.region = region, .offset = offset};
    a->have_board = 1;
    printf("a: b's board is registration %" PRIu32 "\n", region);
  }
  while (a->sent < a->total && a->sent - a->completed < WINDOW)
    send_message(a, a->sent);
  if (a->completed == a->total && a->have_board && !a->summary_sent)
    send_summary(a);
}

/* ---- the receiver, b -------------------------------------------------- */

typedef struct {
  relink_node *node;
  relink_session session;
  int have_session;
  unsigned char *ring; /* registered: receive buffer k at k * SLOT */
  unsigned char *board;
  uint32_t ring_id, board_id;
  unsigned total, received, duplicates, notices;
  unsigned char seen[MAX_MESSAGES];
} receiver;

static void post_buffer(receiver *b, unsigned k) {
  check(relink_post_receive(b->node, b->session, b->ring_id, (uint64_t)k * SLOT, SLOT,
                            k),
        "post a receive buffer");
}

/* A message filled buffer `r->context` of the ring. */
static void take_message(receiver *b, const relink_received *r) {
  const unsigned char *at = b->ring + (size_t)r->context * SLOT;
  header h;
  if (r->truncated || r->len < sizeof h)
    die("b: a message too long or too short for its buffer");
  memcpy(&h, at, sizeof h);
  if (h.magic != MAGIC || h.number >= b->total || sizeof h + h.len != r->len)
    die("b: a message that is not one a sent");
  if (b->seen[h.number]) {
    b->duplicates++;
    fprintf(stderr, "zero_copy: b: message %u arrived twice\n", h.number);
    return;
  }
  if (h.number != b->received || r->seq != (uint64_t)b->received + 1)
    die("b: a message out of order");
  char want[SLOT];
  int len = text_of(h.number, want, sizeof want);
  if ((uint32_t)len != h.len || memcmp(at + sizeof h, want, h.len) != 0)
    die("b: a message's bytes are not what a sent");
  b->seen[h.number] = 1;
  b->received++;
  printf("b: message %u (%" PRIu32 " bytes, seq %" PRIu64 ") in buffer %" PRIu64
         ": \"%.*s\"\n",
         h.number, r->len, r->seq, r->context, (int)h.len,
         (const char *)at + sizeof h);
}

/* The summary's notice took buffer `r->context`: its bytes are on the
 * board already. */
static void take_notice(receiver *b, const relink_received *r) {
  header h;
  if (r->written_region != b->board_id || r->written_len < sizeof h ||
      r->written_offset + r->written_len > BOARD_LEN)
    die("b: a WRITE landed somewhere else");
  const unsigned char *at = b->board + r->written_offset;
  memcpy(&h, at, sizeof h);
  if (h.magic != MAGIC || h.number != b->total || r->imm != b->total ||
      sizeof h + h.len != r->written_len || b->received != b->total)
    die("b: the summary is not what a wrote, or came before the messages");
  b->notices++;
  printf("b: notice (imm %" PRIu32 ", %" PRIu32 " bytes on the board, seq %" PRIu64
         "): \"%.*s\"\n",
         r->imm, r->written_len, r->seq, (int)h.len, (const char *)at + sizeof h);
}

static void receiver_step(receiver *b) {
  relink_accepted acc;
  if (!b->have_session && relink_accept(b->node, &acc) == RELINK_OK) {
    b->session = acc.session;
    b->have_session = 1;
    for (unsigned k = 0; k < RING; k++)
      post_buffer(b, k);
    /* Tell a where the board is (a message sent after the registration
     * travels behind its advertisement). */
    char msg[64];
    int len = snprintf(msg, sizeof msg, "board %" PRIu32 " 0", b->board_id);
    check(relink_send(b->node, b->session, msg, (size_t)len, NULL), "send the board");
  }
  if (!b->have_session)
    return;
  events(b->node, b->session, "b");
  relink_completion c;
  while (relink_poll_completion(b->node, b->session, &c) == RELINK_OK)
    if (c.outcome != RELINK_OUTCOME_SUCCESS)
      die("b: its message did not succeed");
  relink_received r;
  while (relink_poll_received(b->node, b->session, &r) == RELINK_OK) {
    if (r.outcome == RELINK_RECEIVE_MESSAGE)
      take_message(b, &r);
    else if (r.outcome == RELINK_RECEIVE_WRITTEN)
      take_notice(b, &r);
    else
      die("b: a receive buffer flushed: the session ended");
    /* Read: the buffer goes back to the ring. */
    post_buffer(b, (unsigned)r.context);
  }
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  unsigned total = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 24;
  if (argc > 2 || total < 2 || total > MAX_MESSAGES) {
    fprintf(stderr, "usage: zero_copy [MESSAGES (2 to %d)]\n", MAX_MESSAGES);
    return 2;
  }

  relink_soft_fabric *f = NULL;
  check(relink_soft_fabric_new(11, &f), "fabric");
  check(relink_soft_fabric_add_device(f, "a", "soft0", "10.0.0.1/24"), "device a");
  check(relink_soft_fabric_add_device(f, "b", "soft0", "10.0.0.2/24"), "device b");
  sender a = {.total = total};
  static receiver b;
  b.total = total;
  check(relink_node_new_soft(f, "a", &a.node), "node a");
  check(relink_node_new_soft(f, "b", &b.node), "node b");

  /* The application's own memory, registered with its node: it stays the
   * application's to keep valid until the node is freed (or
   * relink_deregister). A SEND and a WRITE only read their ranges: no
   * right is needed for that. */
  a.outbox = calloc(MAX_MESSAGES + 1, SLOT);
  b.ring = calloc(RING, SLOT);
  b.board = calloc(1, BOARD_LEN);
  if (!a.outbox || !b.ring || !b.board)
    die("out of memory");
  check(relink_register(a.node, a.outbox, (size_t)(MAX_MESSAGES + 1) * SLOT, 0,
                        &a.outbox_id),
        "register the outbox");
  check(relink_register(a.node, headers, sizeof headers, 0, &a.headers_id),
        "register the headers");
  check(relink_register(b.node, b.ring, (size_t)RING * SLOT, RELINK_ACCESS_LOCAL_WRITE,
                        &b.ring_id),
        "register the ring");
  check(relink_register(b.node, b.board, BOARD_LEN,
                        RELINK_ACCESS_LOCAL_WRITE | RELINK_ACCESS_REMOTE_WRITE,
                        &b.board_id),
        "register the board");

  relink_listener l;
  check(relink_listen(b.node, "10.0.0.2:7471", NULL, &l), "listen");
  check(relink_connect(a.node, "10.0.0.2:7471", NULL, NULL, &a.session), "connect");

  int reset_done = 0;
  uint64_t start = 0, now = 0;
  check(relink_now_ns(a.node, &start), "clock");
  while (!(a.summary_done && b.notices == 1)) {
    int did = 0;
    /* Two nodes share this thread and the fabric's virtual clock: turns of
     * at most 1 ms each. */
    check(relink_wait(a.node, 1, &did), "wait a");
    check(relink_wait(b.node, 1, &did), "wait b");
    receiver_step(&b);
    sender_step(&a);
    if (!reset_done && a.sent >= total / 2) {
      printf("a: resetting my device with %u messages in flight\n",
             a.sent - a.completed);
      check(relink_soft_fabric_fault(f, "a", "soft0", RELINK_FAULT_RESET), "reset");
      reset_done = 1;
    }
    check(relink_now_ns(a.node, &now), "clock");
    if (now - start > (uint64_t)STALL_MS * 1000000)
      die("no progress: stalled");
  }
  /* Nothing more arrives. */
  for (int i = 0; i < 200; i++) {
    int did = 0;
    check(relink_wait(a.node, 1, &did), "wait a");
    check(relink_wait(b.node, 1, &did), "wait b");
    receiver_step(&b);
    sender_step(&a);
  }

  uint64_t send_copied = counter(a.node, a.session, RELINK_COUNTER_SEND_COPIED_BYTES);
  uint64_t receive_copied =
      counter(b.node, b.session, RELINK_COUNTER_RECEIVE_COPIED_BYTES);
  uint64_t replayed = counter(a.node, a.session, RELINK_COUNTER_REPLAYED);
  printf("a: %" PRIu64 " bytes copied to be sent (RELINK_COUNTER_SEND_COPIED_BYTES)"
         "; %" PRIu64 " operations replayed after the reset\n",
         send_copied, replayed);
  printf("b: %" PRIu64 " bytes copied from the receive slots into the posted "
         "buffers (RELINK_COUNTER_RECEIVE_COPIED_BYTES)\n",
         receive_copied);
  printf("RESULT messages=%u received=%u duplicates=%u notices=%u "
         "send_copied_bytes=%" PRIu64 " receive_copied_bytes=%" PRIu64
         " resumes=%u\n",
         total, b.received, b.duplicates, b.notices, send_copied, receive_copied,
         a.resumes);

  check(relink_close(a.node, a.session), "close");
  for (int i = 0; i < 50; i++) {
    int did = 0;
    check(relink_wait(a.node, 10, &did), "wait a");
    check(relink_wait(b.node, 10, &did), "wait b");
  }
  /* Freeing a node ends its sessions and gives its registered buffers
   * back: free them after. */
  relink_node_free(a.node);
  relink_node_free(b.node);
  relink_soft_fabric_free(f);
  free(a.outbox);
  free(b.ring);
  free(b.board);
  int ok = b.received == total && b.duplicates == 0 && b.notices == 1 &&
           send_copied == 0 && a.resumes >= 1;
  return ok ? 0 : 1;
}
