/*
 * Posted receives and WRITE with immediate data, from C. The receiver b
 * posts buffers of its registered memory (relink_post_receive) — in a
 * heap buffer of its own it registered (relink_register) and in its
 * session's region — and the sender a sends messages and WRITEs with
 * immediate data (relink_write_imm, and relink_post of
 * RELINK_OP_KIND_WRITE_IMM with a context) into b's advertised region:
 *
 * - without posted receives, a notice comes through relink_poll_written
 *   in its place between two messages, and relink_poll_delivery says
 *   RELINK_EMPTY while it is next (relink_poll_written says RELINK_EMPTY
 *   while a message is next, one left first by RELINK_ERR_TRUNCATED
 *   included); the WRITE's bytes are in b's region before its notice;
 * - messages sent before any buffer is posted fill the buffers posted
 *   later, at once;
 * - posted buffers are filled in the order they were posted, one message
 *   each, with the message's bytes, length, sequence number and the
 *   buffer's context; a message longer than its buffer is truncated and
 *   says so; bytes past what was written stay as they were;
 * - a WRITE notice takes a posted buffer (RELINK_RECEIVE_WRITTEN, a
 *   buffer of 0 bytes is enough) and writes nothing in it;
 * - with the session's max_outstanding buffers posted, one more is
 *   RELINK_ERR_AGAIN;
 * - across resets of the sender's device, with messages and WRITEs with
 *   immediate data in flight and posted during the recovery, every
 *   message and notice arrives exactly once, in order;
 * - node-wide, relink_poll_output gives RELINK_OUTPUT_RECEIVED and
 *   RELINK_OUTPUT_WRITTEN, and for the other kinds writes nothing past
 *   `len` (a program built before `received` and `written` passes a
 *   struct that ends there);
 * - relink_deregister of a registration a buffer is posted in is
 *   RELINK_ERR_BUSY; closing the session flushes the buffers
 *   (RELINK_RECEIVE_FLUSHED), a buffer posted then is RELINK_ERR_SESSION,
 *   and the deregistration succeeds;
 * - every completion of the sender says SUCCESS with its kind, context
 *   and length (RELINK_OP_KIND_WRITE_IMM for the WRITEs with immediate
 *   data);
 * - bad input gets its documented status and never aborts.
 *
 * Exits 0 when every check holds.
 */
/* mmap's MAP_ANONYMOUS, under -std=c11. */
#define _DEFAULT_SOURCE
#define PROGRAM "posted_receives"
#include "harness.h"
/* The soft fabric's fault hooks: relink_soft_fabric_fault. */
#include <relink_soft.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* Both sides' session region: the sender's source of its WRITEs (its
 * first half), the receiver's target of them (its first half, advertised)
 * and place of posted buffers (its second half). */
#define REGION 1
#define REGION_LEN 65536
#define HALF 32768
/* The receiver's own registered buffer: SLOTS slots of SLOT bytes. */
#define RBUF_LEN 65536
#define SLOT 1024
#define SLOTS 64
/* The receiver's max_outstanding: the most buffers posted and not filled. */
#define MAX_OUT 64
/* What a buffer holds before anything is written in it. */
#define SENTINEL 0xa5

static pair p;
static relink_soft_fabric *fabric;
static unsigned char *rbuf;
static uint32_t r_id;

/* What the sender sent, in order: message n, or WRITE n with immediate
 * data 0x1000 + n of `len` bytes at `off` (of both sides' region). The
 * receiver must get item k with sequence number k + 1. */
#define MAX_ITEMS 256
typedef struct {
  int imm;
  unsigned len;
  uint64_t off;
} item;
static item line[MAX_ITEMS];
static unsigned sent, taken;

/* The buffers the receiver posted, in order (context CTX + index). */
#define MAX_BUFS 512
#define CTX 0xb0f00000u
typedef struct {
  uint32_t region;
  uint64_t offset;
  unsigned len;
} buffer;
static buffer bufs[MAX_BUFS];
static unsigned nbufs, ended, flushed;

/* The sender's operations and what their completions must say. */
#define MAX_OPS 256
static struct {
  relink_op op;
  relink_op_kind kind;
  uint64_t context, len;
  int done;
} ops[MAX_OPS];
static unsigned nops, completed;

/* Byte i of item n. */
static unsigned char pat(unsigned n, size_t i) {
  return (unsigned char)(n * 131u + i * 7u + 1u);
}

static void expect_op(relink_op op, relink_op_kind kind, uint64_t context,
                      uint64_t len) {
  if (nops == MAX_OPS)
    fail("too many operations for the test's table");
  ops[nops].op = op;
  ops[nops].kind = kind;
  ops[nops].context = context;
  ops[nops].len = len;
  ops[nops].done = 0;
  nops++;
}

/* A completion of the sender: one of its operations, once, SUCCESS, with
 * the operation's kind, context and length. */
static void check_completion(const relink_completion *c) {
  unsigned i = 0;
  while (i < nops && ops[i].op != c->op)
    i++;
  if (i == nops || ops[i].done)
    fail("a completion of no operation, or a second one");
  if (c->outcome != RELINK_OUTCOME_SUCCESS || c->kind != ops[i].kind ||
      c->context != ops[i].context || c->len != ops[i].len) {
    fprintf(stderr,
            PROGRAM ": operation %u: outcome %d error %d kind %d context %#llx "
            "len %llu; want SUCCESS, kind %d, %#llx, %llu\n",
            i, (int)c->outcome, (int)c->error, (int)c->kind,
            (unsigned long long)c->context, (unsigned long long)c->len,
            (int)ops[i].kind, (unsigned long long)ops[i].context,
            (unsigned long long)ops[i].len);
    fail("a completion's outcome, kind, context or length");
  }
  ops[i].done = 1;
  completed++;
}

static void completions(void) {
  relink_completion c;
  while (relink_poll_completion(p.a, p.s, &c) == RELINK_OK)
    check_completion(&c);
}

/* One turn of both nodes: events dropped, the sender's completions
 * checked; what the receiver got stays for the checks. */
static void turn2(void) {
  pair_turn(&p);
  pair_drop_events(&p);
  completions();
}

static void until_completed(const char *what) {
  for (int i = 0; i < 20000 && completed < nops; i++)
    turn2();
  if (completed != nops) {
    fprintf(stderr, PROGRAM ": %s: %u of %u operations completed\n", what,
            completed, nops);
    fail(what);
  }
}

/* Send message `sent` of `len` bytes (relink_post, with a context). */
static void send_msg(unsigned len) {
  if (sent == MAX_ITEMS)
    fail("too many items for the test's table");
  unsigned n = sent;
  unsigned char bytes[4096];
  for (unsigned i = 0; i < len; i++)
    bytes[i] = pat(n, i);
  relink_work_request wr = {.kind = RELINK_OP_KIND_MESSAGE,
                            .context = 0x3e550000u + n,
                            .buf = bytes,
                            .len = len};
  relink_op op;
  check(relink_post(p.a, p.s, &wr, &op), "send");
  expect_op(op, RELINK_OP_KIND_MESSAGE, wr.context, len);
  line[sent++] = (item){.imm = 0, .len = len};
}

/* WRITE `len` bytes with immediate data 0x1000 + n as item n = `sent`:
 * from the sender's region at (n % 32) KiB into the receiver's, by
 * relink_post with a context or by relink_write_imm. The source stays
 * unchanged until the completion. */
static void send_imm(unsigned len, int by_post) {
  if (sent == MAX_ITEMS)
    fail("too many items for the test's table");
  unsigned n = sent;
  uint64_t off = (uint64_t)(n % 32) * SLOT;
  unsigned char bytes[SLOT];
  for (unsigned i = 0; i < len; i++)
    bytes[i] = pat(n, i);
  check(relink_region_write(p.a, p.s, REGION, off, bytes, len), "source");
  relink_token at = {.region = REGION, .offset = off};
  relink_op op;
  if (by_post) {
    relink_work_request wr = {.kind = RELINK_OP_KIND_WRITE_IMM,
                              .context = 0x1e550000u + n,
                              .region = REGION,
                              .offset = off,
                              .len = len,
                              .remote = at,
                              .imm = 0x1000u + n};
    check(relink_post(p.a, p.s, &wr, &op), "post a WRITE_IMM");
    expect_op(op, RELINK_OP_KIND_WRITE_IMM, wr.context, len);
  } else {
    check(relink_write_imm(p.a, p.s, REGION, off, len, at, 0x1000u + n, &op),
          "relink_write_imm");
    expect_op(op, RELINK_OP_KIND_WRITE_IMM, 0, len);
  }
  line[sent++] = (item){.imm = 1, .len = len, .off = off};
}

/* The next item in line, which arrived with sequence number seq as a
 * notice (imm) or a message. */
static const item *next_item(uint64_t seq, int imm) {
  if (taken >= sent) {
    fprintf(stderr, PROGRAM ": seq %llu arrived; %u were sent\n",
            (unsigned long long)seq, sent);
    fail("something arrived twice, or was never sent");
  }
  if (seq != (uint64_t)taken + 1 || line[taken].imm != imm) {
    fprintf(stderr, PROGRAM ": got seq %llu (%s), want seq %u (%s)\n",
            (unsigned long long)seq, imm ? "a notice" : "a message", taken + 1,
            line[taken].imm ? "a notice" : "a message");
    fail("out of order");
  }
  return &line[taken++];
}

/* A notice of item seq - 1: what it says, and the WRITE's bytes in the
 * receiver's region. */
static void check_notice(uint64_t seq, uint32_t imm, uint32_t region,
                         uint64_t offset, uint32_t len) {
  const item *it = next_item(seq, 1);
  unsigned n = (unsigned)(seq - 1);
  if (imm != 0x1000u + n || region != REGION || offset != it->off ||
      len != it->len) {
    fprintf(stderr,
            PROGRAM ": notice seq %llu: imm %#x region %u offset %llu len %u; "
            "want %#x, %d, %llu, %u\n",
            (unsigned long long)seq, imm, region, (unsigned long long)offset, len,
            0x1000u + n, REGION, (unsigned long long)it->off, it->len);
    fail("a notice's immediate data or range");
  }
  unsigned char got[SLOT];
  check(relink_region_read(p.b, p.t, REGION, offset, got, len), "read the WRITE");
  for (unsigned i = 0; i < len; i++)
    if (got[i] != pat(n, i))
      fail("a WRITE's bytes were not in place when its notice came");
}

static void check_written(uint64_t seq, const relink_written *w) {
  check_notice(seq, w->imm, w->region, w->offset, w->len);
}

/* The message with sequence number seq, as relink_poll_delivery gave it. */
static void check_message(uint64_t seq, const unsigned char *bytes, size_t len) {
  const item *it = next_item(seq, 0);
  unsigned n = (unsigned)(seq - 1);
  if (len != it->len)
    fail("a message's length");
  for (size_t i = 0; i < len; i++)
    if (bytes[i] != pat(n, i))
      fail("a message's bytes");
}

/* Take one delivery (relink_poll_delivery): it must be there. */
static void take_delivery(void) {
  unsigned char buf[4096];
  size_t len = 0;
  uint64_t seq = 0;
  check(relink_poll_delivery(p.b, p.t, buf, sizeof buf, &len, &seq), "delivery");
  check_message(seq, buf, len);
}

/* Take one notice (relink_poll_written): it must be there. */
static void take_written(void) {
  relink_written w;
  uint64_t seq = 0;
  relink_status st = relink_poll_written(p.b, p.t, &seq, &w);
  if (st != RELINK_OK) {
    fprintf(stderr, PROGRAM ": relink_poll_written: %s\n", relink_status_name(st));
    fail("no notice where one was due");
  }
  check_written(seq, &w);
}

/* The bytes of a posted buffer. */
static void read_buffer(const buffer *b, unsigned char *dst) {
  if (b->len == 0)
    return;
  if (b->region == r_id)
    memcpy(dst, rbuf + b->offset, b->len);
  else
    check(relink_region_read(p.b, p.t, b->region, b->offset, dst, b->len),
          "read a buffer");
}

/* Post a buffer of `len` bytes at `offset` of `region`, SENTINEL bytes
 * first. */
static void post_buffer(uint32_t region, uint64_t offset, unsigned len) {
  if (nbufs == MAX_BUFS)
    fail("too many buffers for the test's table");
  if (region == r_id) {
    memset(rbuf + offset, SENTINEL, len);
  } else {
    unsigned char s[SLOT];
    memset(s, SENTINEL, sizeof s);
    check(relink_region_write(p.b, p.t, region, offset, s, len), "sentinel");
  }
  check(relink_post_receive(p.b, p.t, region, offset, len, CTX + nbufs),
        "post a receive");
  bufs[nbufs++] = (buffer){.region = region, .offset = offset, .len = len};
}

/* Buffer `slot` of the receiver's own registration, or of the second half
 * of its session's region. */
static void post_rbuf(unsigned slot, unsigned len) {
  post_buffer(r_id, (uint64_t)(slot % SLOTS) * SLOT, len);
}
static void post_region(unsigned slot, unsigned len) {
  post_buffer(REGION, HALF + (uint64_t)(slot % 32) * SLOT, len);
}

/* A receive that ended: the next buffer posted, and what it holds. */
static void take_received(const relink_received *r) {
  if (ended >= nbufs)
    fail("a receive ended that was never posted, or twice");
  const buffer *b = &bufs[ended];
  if (r->context != CTX + ended || r->region != b->region ||
      r->offset != b->offset) {
    fprintf(stderr,
            PROGRAM ": receive context %#llx region %u offset %llu; want %#x, %u, "
            "%llu\n",
            (unsigned long long)r->context, r->region,
            (unsigned long long)r->offset, CTX + ended, b->region,
            (unsigned long long)b->offset);
    fail("buffers not ended in the order they were posted");
  }
  ended++;
  unsigned char got[SLOT];
  read_buffer(b, got);
  unsigned written = 0;
  switch (r->outcome) {
  case RELINK_RECEIVE_MESSAGE: {
    const item *it = next_item(r->seq, 0);
    unsigned n = (unsigned)(r->seq - 1);
    unsigned want = it->len < b->len ? it->len : b->len;
    if (r->len != want || r->truncated != (it->len > b->len) || r->imm != 0 ||
        r->written_region != 0 || r->written_offset != 0 || r->written_len != 0) {
      fprintf(stderr,
              PROGRAM ": message seq %llu of %u bytes in a buffer of %u: len %u "
              "truncated %d\n",
              (unsigned long long)r->seq, it->len, b->len, r->len, r->truncated);
      fail("a received message's length or truncation");
    }
    for (unsigned i = 0; i < want; i++)
      if (got[i] != pat(n, i))
        fail("a received message's bytes");
    written = want;
    break;
  }
  case RELINK_RECEIVE_WRITTEN:
    if (r->len != 0 || r->truncated != 0)
      fail("a notice wrote into its buffer");
    check_notice(r->seq, r->imm, r->written_region, r->written_offset,
                 r->written_len);
    break;
  case RELINK_RECEIVE_FLUSHED:
    if (r->seq != 0 || r->len != 0 || r->truncated != 0 || r->imm != 0)
      fail("a flushed receive says something arrived");
    flushed++;
    break;
  default:
    fprintf(stderr, PROGRAM ": outcome %d\n", (int)r->outcome);
    fail("an unknown receive outcome");
  }
  for (unsigned i = written; i < b->len; i++)
    if (got[i] != SENTINEL)
      fail("a buffer written past what its receive says");
}

/* Run until `want` receives ended in all. */
static void until_ended(unsigned want, const char *what) {
  relink_received r;
  for (int i = 0; i < 20000 && ended < want; i++) {
    turn2();
    while (relink_poll_received(p.b, p.t, &r) == RELINK_OK)
      take_received(&r);
  }
  if (ended != want) {
    fprintf(stderr, PROGRAM ": %s: %u of %u receives ended\n", what, ended, want);
    fail(what);
  }
}

static uint64_t counter(relink_node *n, relink_session s, relink_counter which) {
  uint64_t v = 0;
  check(relink_session_counter(n, s, which, &v), "counter");
  return v;
}

static void reset_sender(void) {
  check(relink_soft_fabric_fault(fabric, "a", "soft0", RELINK_FAULT_RESET),
        "reset");
}

/* Nothing waits for the receiver, in any way. */
static void nothing_waits(const char *what) {
  relink_received r;
  relink_written w;
  unsigned char buf[16];
  size_t len;
  if (relink_poll_received(p.b, p.t, &r) != RELINK_EMPTY ||
      relink_poll_written(p.b, p.t, NULL, &w) != RELINK_EMPTY ||
      relink_poll_delivery(p.b, p.t, buf, sizeof buf, &len, NULL) != RELINK_EMPTY)
    fail(what);
}

/* Bad input: each refused with its status, nothing posted or submitted,
 * nothing written to *op. */
static void bad_input(void) {
  relink_op op = 777;
  uint64_t room_before = 0, room_after = 0;
  check(relink_room(p.a, p.s, &room_before), "room");

  expect(relink_post_receive(NULL, p.t, r_id, 0, 64, 1), RELINK_ERR_ARGUMENT,
         "`node` is NULL", "post_receive on a NULL node");
  expect(relink_post_receive(p.b, 999, r_id, 0, 64, 1), RELINK_ERR_NO_SESSION,
         "no session 999", "post_receive on an unknown session");
  expect(relink_post_receive(p.b, p.t, r_id, RBUF_LEN - 8, 64, 1), RELINK_ERR_RANGE,
         "local range 0xfff8+64 is outside region", "post_receive past the end");
  expect(relink_post_receive(p.b, p.t, r_id, UINT64_MAX, 1, 1), RELINK_ERR_RANGE,
         "is outside region", "post_receive at offset UINT64_MAX");
  expect(relink_post_receive(p.b, p.t, REGION, REGION_LEN, 1, 1), RELINK_ERR_RANGE,
         "is outside region", "post_receive past the session region's end");
  expect(relink_post_receive(p.b, p.t, 9, 0, 64, 1), RELINK_ERR_NO_REGION,
         "no region 9", "post_receive in an unknown region");
  expect(relink_post_receive(p.b, p.t, r_id, 0, (uint64_t)1 << 32, 1),
         RELINK_ERR_TOO_LARGE, "4294967296 bytes", "post_receive of 2^32 bytes");
  expect(relink_post_receive(p.b, p.t, r_id, 0, UINT64_MAX, 1), RELINK_ERR_TOO_LARGE,
         "UINT32_MAX", "post_receive of UINT64_MAX bytes");

  relink_received r;
  relink_written w;
  uint64_t seq = 55;
  expect(relink_poll_received(p.b, p.t, NULL), RELINK_ERR_ARGUMENT, "`out` is NULL",
         "poll_received into NULL");
  expect(relink_poll_received(NULL, p.t, &r), RELINK_ERR_ARGUMENT, "`node` is NULL",
         "poll_received on a NULL node");
  expect(relink_poll_received(p.b, 999, &r), RELINK_EMPTY, NULL,
         "poll_received on an unknown session");
  expect(relink_poll_received(p.b, p.t, &r), RELINK_EMPTY, NULL,
         "poll_received with nothing posted");
  expect(relink_poll_written(p.b, p.t, &seq, NULL), RELINK_ERR_ARGUMENT,
         "`out` is NULL", "poll_written into NULL");
  expect(relink_poll_written(NULL, p.t, &seq, &w), RELINK_ERR_ARGUMENT,
         "`node` is NULL", "poll_written on a NULL node");
  expect(relink_poll_written(p.b, 999, &seq, &w), RELINK_EMPTY, NULL,
         "poll_written on an unknown session");
  expect(relink_poll_written(p.b, p.t, &seq, &w), RELINK_EMPTY, NULL,
         "poll_written with nothing written");
  if (seq != 55)
    fail("an empty poll wrote a sequence number");

  relink_token tok = {.region = REGION, .offset = 0};
  expect(relink_write_imm(p.a, p.s, REGION, REGION_LEN - 8, 64, tok, 1, &op),
         RELINK_ERR_RANGE, "local range 0xfff8+64 is outside region",
         "write_imm past the end");
  expect(relink_write_imm(p.a, p.s, 9, 0, 64, tok, 1, &op), RELINK_ERR_NO_REGION,
         "no region 9", "write_imm from an unknown region");
  expect(relink_write_imm(p.a, 999, REGION, 0, 64, tok, 1, &op),
         RELINK_ERR_NO_SESSION, "no session 999", "write_imm on an unknown session");
  expect(relink_write_imm(NULL, p.s, REGION, 0, 64, tok, 1, &op), RELINK_ERR_ARGUMENT,
         "`node` is NULL", "write_imm on a NULL node");
  relink_work_request wr = {.kind = RELINK_OP_KIND_WRITE_IMM,
                            .flags = RELINK_WR_FROM_REGION,
                            .region = REGION,
                            .len = 64,
                            .remote = tok,
                            .imm = 1};
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "a MESSAGE's only",
         "a WRITE_IMM with RELINK_WR_FROM_REGION");
  wr.flags = 0;
  wr.len = (uint64_t)1 << 32;
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_TOO_LARGE, "UINT32_MAX",
         "a WRITE_IMM of 2^32 bytes");
  wr.len = 64;
  wr.offset = REGION_LEN;
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_RANGE, "is outside region",
         "a WRITE_IMM past the end");
  wr.offset = 0;
  wr.kind = RELINK_OP_KIND_WRITE_IMM + 1;
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "MESSAGE to WRITE_IMM",
         "a kind past WRITE_IMM");

  if (op != 777)
    fail("a refused call wrote an op id");
  check(relink_room(p.a, p.s, &room_after), "room");
  if (room_after != room_before)
    fail("refused calls took room");
  for (int i = 0; i < 20; i++)
    turn2();
  nothing_waits("a refused call sent or posted something");
  if (completed != 0)
    fail("a refused call completed something");
}

/* Without posted receives: a notice in its place between messages. */
static void written_alone(void) {
  unsigned first = taken;
  send_msg(100);
  send_imm(700, 0);
  send_imm(300, 1);
  send_msg(200);
  send_msg(300);
  send_imm(64, 1);
  until_completed("the messages and WRITEs with immediate data");
  relink_written w;
  unsigned char small[10];
  size_t len = 0;
  /* A message is next: no notice. */
  expect(relink_poll_written(p.b, p.t, NULL, &w), RELINK_EMPTY, NULL,
         "poll_written while a message is next");
  take_delivery();
  /* A notice is next: no message, until it is taken. */
  expect(relink_poll_delivery(p.b, p.t, small, sizeof small, &len, NULL),
         RELINK_EMPTY, NULL, "poll_delivery while a notice is next");
  take_written();
  expect(relink_poll_delivery(p.b, p.t, small, sizeof small, &len, NULL),
         RELINK_EMPTY, NULL, "poll_delivery while a second notice is next");
  take_written();
  take_delivery();
  /* A message a too-small buffer left first in line is still next. */
  expect(relink_poll_delivery(p.b, p.t, small, sizeof small, &len, NULL),
         RELINK_ERR_TRUNCATED, "the message is 300 bytes",
         "poll_delivery into a too-small buffer");
  expect(relink_poll_written(p.b, p.t, NULL, &w), RELINK_EMPTY, NULL,
         "poll_written while a truncated message is next");
  take_delivery();
  take_written();
  nothing_waits("more arrived than was sent");
  printf("alone: %u messages and notices in order, each once\n", taken - first);
}

/* Messages sent before any buffer is posted fill the buffers posted
 * later, at once. */
static void late_buffers(void) {
  send_msg(50);
  send_msg(1000);
  send_msg(1);
  until_completed("the messages sent before any buffer");
  for (int i = 0; i < 10; i++)
    turn2();
  relink_received r;
  if (relink_poll_received(p.b, p.t, &r) != RELINK_EMPTY)
    fail("a receive ended with no buffer posted");
  unsigned before = ended;
  post_rbuf(0, SLOT);
  post_region(0, SLOT);
  post_rbuf(1, SLOT);
  /* No poll in between: posting placed them. */
  while (relink_poll_received(p.b, p.t, &r) == RELINK_OK)
    take_received(&r);
  if (ended != before + 3)
    fail("the messages that waited did not fill the buffers posted at once");
  nothing_waits("a message left over");
  printf("late: 3 messages that waited filled the 3 buffers posted after\n");
}

/* Buffers filled in order; truncation. */
static void in_order(void) {
  unsigned first = ended;
  post_rbuf(2, SLOT);
  post_region(1, SLOT);
  post_rbuf(3, 100); /* truncates a message of 300 bytes */
  post_rbuf(4, SLOT);
  post_region(2, 512); /* exactly a message of 512 bytes */
  post_rbuf(5, SLOT);
  post_region(3, 10); /* truncates a message of 1024 bytes */
  post_rbuf(6, SLOT);
  send_msg(1000);
  send_msg(17);
  send_msg(300);
  send_msg(0);
  send_msg(512);
  send_msg(1024);
  send_msg(1024);
  send_msg(999);
  until_ended(first + 8, "the posted buffers");
  until_completed("the messages into posted buffers");
  nothing_waits("a message left over");
  printf("in order: 8 buffers filled in order, 2 truncated\n");
}

/* A notice takes a posted buffer and writes nothing in it. */
static void written_in_buffers(void) {
  unsigned first = ended;
  post_rbuf(7, SLOT);
  post_rbuf(8, 0); /* enough for a notice */
  post_region(4, SLOT);
  post_rbuf(9, SLOT);
  send_msg(400);
  send_imm(900, 0);
  send_imm(128, 1);
  send_msg(33);
  until_ended(first + 4, "a notice in a posted buffer");
  until_completed("the WRITEs with immediate data into posted buffers");
  nothing_waits("something left over");
  printf("written: 2 notices took posted buffers in their place\n");
}

/* Across resets of the sender's device: every message and notice once, in
 * order. */
static void across_resets(void) {
  unsigned first = ended;
  for (unsigned k = 0; k < MAX_OUT; k++) {
    if (k % 2)
      post_region(k / 2, SLOT);
    else
      post_rbuf(10 + k / 2, SLOT);
  }
  expect(relink_post_receive(p.b, p.t, r_id, 0, SLOT, 1), RELINK_ERR_AGAIN,
         "max_outstanding (64)", "a buffer past max_outstanding");
  uint64_t resumes = counter(p.a, p.s, RELINK_COUNTER_RESUMES);
  uint64_t replayed = counter(p.a, p.s, RELINK_COUNTER_REPLAYED);
  /* Batch 1: in flight when the device resets. */
  unsigned from = taken;
  for (unsigned k = 0; k < 32; k++) {
    if (k % 3 == 1)
      send_imm(64 + (k * 97) % 900, (int)(k % 2));
    else
      send_msg(1 + (k * 131) % 1000);
  }
  unsigned in_flight = nops - completed;
  reset_sender();
  until_ended(first + 32, "batch 1, across a reset");
  until_completed("batch 1's operations");
  pair_until_established(&p, turn2, "batch 1: the session did not come back");
  if (in_flight != 32 || counter(p.a, p.s, RELINK_COUNTER_RESUMES) <= resumes)
    fail("batch 1: the reset did not cost the operations in flight their transport");
  /* Batch 2: posted while the device is down. */
  resumes = counter(p.a, p.s, RELINK_COUNTER_RESUMES);
  reset_sender();
  turn2();
  for (unsigned k = 0; k < 32; k++) {
    if (k % 4 == 2)
      send_imm(32 + (k * 53) % 1000, (int)(k % 2));
    else
      send_msg((k * 71) % 1000);
  }
  until_ended(first + 64, "batch 2, posted during a recovery");
  until_completed("batch 2's operations");
  pair_until_established(&p, turn2, "batch 2: the session did not come back");
  if (counter(p.a, p.s, RELINK_COUNTER_RESUMES) <= resumes)
    fail("batch 2: no resume");
  replayed = counter(p.a, p.s, RELINK_COUNTER_REPLAYED) - replayed;
  for (int i = 0; i < 100; i++)
    turn2();
  nothing_waits("something arrived twice");
  printf("resets: %u messages and notices in 64 buffers, each once, in order; "
         "%llu replayed\n",
         taken - from, (unsigned long long)replayed);
}

/* Node-wide: relink_poll_output gives RECEIVED and WRITTEN. */
static void node_wide(void) {
  unsigned char buf[4096];
  relink_output o;
  int received = 0, written = 0;
  post_region(5, SLOT);
  send_msg(222);
  for (int i = 0; i < 20000 && !(received && written); i++) {
    turn2();
    while (relink_poll_output(p.b, &o, buf, sizeof buf) == RELINK_OK) {
      if (o.kind == RELINK_OUTPUT_RECEIVED) {
        if (o.session != p.t || received)
          fail("a RECEIVED output of another session, or a second one");
        take_received(&o.received);
        received = 1;
        /* No buffer is posted now: the notice comes alone. */
        send_imm(512, 1);
      } else if (o.kind == RELINK_OUTPUT_WRITTEN) {
        if (o.session != p.t || !received || written)
          fail("a WRITTEN output out of place");
        check_written(o.seq, &o.written);
        written = 1;
      } else if (o.kind != RELINK_OUTPUT_EVENT) {
        fprintf(stderr, PROGRAM ": output kind %d\n", (int)o.kind);
        fail("an output that was not due");
      }
    }
  }
  if (!received || !written)
    fail("relink_poll_output gave no RECEIVED or no WRITTEN");
  until_completed("the node-wide phase's operations");
  nothing_waits("something left over after relink_poll_output");
  printf("node-wide: RELINK_OUTPUT_RECEIVED and RELINK_OUTPUT_WRITTEN\n");
}

/* The other kinds of outputs are written up to `len` only: a struct of
 * the layout before `received` and `written`, whose end is followed by an
 * inaccessible page (a write there would end the program), takes them. */
static void old_output_layout(void) {
  long page = sysconf(_SC_PAGESIZE);
  unsigned char *m = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED || mprotect(m + page, (size_t)page, PROT_NONE) != 0)
    fail("mmap");
  const size_t old = offsetof(relink_output, received);
  if (old != offsetof(relink_output, len) + sizeof(size_t))
    fail("`received` does not follow `len`");
  relink_output *at = (relink_output *)(m + page - old);
  unsigned char buf[64];
  unsigned outputs = 0, done = completed;
  send_msg(40);
  for (int i = 0; i < 20000 && completed == done; i++) {
    pair_turn(&p);
    while (relink_poll_output(p.a, at, buf, sizeof buf) == RELINK_OK) {
      if (at->kind == RELINK_OUTPUT_COMPLETION)
        check_completion(&at->completion);
      else if (at->kind != RELINK_OUTPUT_EVENT)
        fail("an output of the sender that was not due");
      outputs++;
    }
  }
  if (completed == done)
    fail("no completion through relink_poll_output");
  munmap(m, 2 * (size_t)page);
  take_delivery();
  printf("first layout: %u outputs of the sender in a %zu-byte struct\n", outputs,
         old);
}

/* A posted buffer keeps its registration in use until the session's end
 * flushes it. */
static void busy_then_flushed(void) {
  post_rbuf(40, SLOT);
  post_rbuf(41, 16);
  post_region(6, SLOT);
  expect(relink_deregister(p.b, r_id), RELINK_ERR_BUSY,
         "or a receive buffer posted in it has not ended",
         "deregister a registration a buffer is posted in");
  check(relink_close(p.b, p.t), "close");
  relink_state st = RELINK_STATE_ESTABLISHED;
  for (int i = 0; i < 10000; i++) {
    check(relink_session_state(p.b, p.t, &st), "state");
    if (st == RELINK_STATE_CLOSED)
      break;
    turn2();
  }
  if (st != RELINK_STATE_CLOSED)
    fail("the session did not close");
  expect(relink_post_receive(p.b, p.t, r_id, 0, SLOT, 1), RELINK_ERR_SESSION, NULL,
         "post_receive on a closed session");
  relink_received r;
  while (relink_poll_received(p.b, p.t, &r) == RELINK_OK)
    take_received(&r);
  if (flushed != 3 || ended != nbufs)
    fail("closing the session did not flush the 3 buffers posted");
  expect(relink_deregister(p.b, r_id), RELINK_OK, NULL,
         "deregister once the buffers were flushed");
  printf("flushed: %u buffers at the close, then the registration was free\n",
         flushed);
}

int main(void) {
  pair_open(&p, 29, &fabric);

  /* The receiver's own buffer for posted receives. */
  rbuf = malloc(RBUF_LEN);
  if (!rbuf)
    fail("malloc");
  memset(rbuf, 0, RBUF_LEN);
  check(relink_register(p.b, rbuf, RBUF_LEN, RELINK_ACCESS_LOCAL_WRITE, &r_id),
        "register");

  relink_options *ob = NULL;
  check(relink_options_new(&ob), "options");
  check(relink_options_add_region(
            ob, REGION, REGION_LEN,
            RELINK_ACCESS_LOCAL_WRITE | RELINK_ACCESS_REMOTE_WRITE, 1),
        "the receiver's region");
  check(relink_options_set_max_outstanding(ob, MAX_OUT), "max_outstanding");
  relink_listener l;
  check(relink_listen(p.b, "10.0.0.2:7471", ob, &l), "listen");
  relink_options_free(ob);
  relink_options *oa = NULL;
  check(relink_options_new(&oa), "options");
  check(relink_options_add_region(oa, REGION, REGION_LEN, RELINK_ACCESS_LOCAL_WRITE, 0),
        "the sender's region");
  check(relink_connect(p.a, "10.0.0.2:7471", NULL, oa, &p.s), "connect");
  relink_options_free(oa);
  pair_until_established(&p, turn2, "the session did not come up");

  bad_input();
  written_alone();
  late_buffers();
  in_order();
  written_in_buffers();
  across_resets();
  node_wide();
  old_output_layout();
  busy_then_flushed();

  if (taken != sent || completed != nops)
    fail("not everything sent arrived and completed");
  relink_node_free(p.a);
  relink_node_free(p.b);
  relink_soft_fabric_free(fabric);
  free(rbuf);
  if (failures) {
    fprintf(stderr, PROGRAM ": %d failure(s)\n", failures);
    return 1;
  }
  printf("posted_receives: ok (%u messages and notices, %u buffers)\n", sent, nbufs);
  return 0;
}
