/*
 * One-sided operations over scatter/gather lists, from C (relink_post with
 * RELINK_WR_SGL on RELINK_OP_KIND_WRITE, READ and WRITE_IMM). The
 * initiator a has two buffers of its own it registered (relink_register:
 * G1 on the heap, G2 a static array) and a region of its session; the
 * target b advertises a region of its session. In each round a posts:
 *
 * - WRITEs gathering 3 ranges (one of G1, one of G2, one of its session
 *   region) into b's region: b's bytes are the ranges' bytes, one after
 *   the other, checked byte for byte at b (relink_region_read), and the
 *   ranges at a are unchanged;
 * - READs scattering b's bytes over 2 ranges (one of G1, one of G2):
 *   checked byte for byte at a, in its own buffers, against what b's
 *   region holds (read at b too);
 * - a WRITE_IMM from a list of 2 ranges: its notice at b
 *   (relink_poll_written) says the total length and where it landed, and
 *   the bytes are there.
 *
 * Every completion is SUCCESS with its kind, context and the ranges'
 * total as `len`. Round 0 has no fault; in round 1 a's device is reset
 * with the operations in flight (they are replayed); in round 2 b's
 * device is reset before they are posted (they wait for the resume).
 * relink_deregister of G2 while a WRITE over it is not completed is
 * RELINK_ERR_BUSY, and succeeds after. Bad input gets its documented
 * status and submits nothing. librelink prints nothing. Exits 0 when every
 * check holds.
 */
#define PROGRAM "sgl_one_sided"
#include "harness.h"
/* The soft fabric's fault hooks: relink_soft_fabric_fault. */
#include <relink_soft.h>

#include <stdint.h>

/* Both sides' session region. b's: WRITE targets in [0, 32K), READ
 * sources in [32K, 64K), WRITE_IMM targets in [64K, 96K). a's: the third
 * range of each WRITE, the second of each WRITE_IMM. */
#define REGION 1
#define REGION_LEN (128 * 1024)
#define W_AT 0
#define R_AT (32 * 1024)
#define I_AT (64 * 1024)
#define SLOT 2048
/* a's own buffers. G1: WRITE ranges at [0, 16K), READ ranges at [16K,
 * 32K), WRITE_IMM ranges at [32K, 48K). G2: WRITE ranges at [0, 8K), READ
 * ranges at [8K, 16K). */
#define G1_LEN (64 * 1024)
#define G2_LEN (16 * 1024)
#define PART 1024
/* Operations of each kind per round. */
#define PER_ROUND 8
#define MAX_OPS 256
#define SENTINEL 0x5a

static pair p;
static relink_soft_fabric *fabric;
static unsigned char *g1;
static unsigned char g2[G2_LEN];
static uint32_t g1_id, g2_id;

/* Each operation: what its completion must say, and what to check once it
 * completed. */
typedef struct {
  relink_op op;
  relink_op_kind kind;
  uint64_t context;
  uint64_t len;
  int done;
  /* Its ranges at a (region, offset, len) and the peer's offset. */
  relink_sge sgl[3];
  unsigned nsge;
  uint64_t remote;
  unsigned n; /* its number: the bytes' pattern */
} op_t;
static op_t ops[MAX_OPS];
static unsigned nops, completed, notices;

/* Byte i of the bytes of operation n, range k. */
static unsigned char pat(unsigned n, unsigned k, size_t i) {
  return (unsigned char)(n * 151u + k * 29u + i * 11u + 3u);
}

/* The bytes at a of range `r`. */
static void read_at_a(const relink_sge *r, unsigned char *dst) {
  if (r->region == g1_id)
    memcpy(dst, g1 + r->offset, r->len);
  else if (r->region == g2_id)
    memcpy(dst, g2 + r->offset, r->len);
  else
    check(relink_region_read(p.a, p.s, r->region, r->offset, dst, r->len),
          "read a's region");
}

/* Fill range `r` at a with operation n's range k bytes (or the sentinel). */
static void fill_at_a(const relink_sge *r, unsigned n, unsigned k, int sentinel) {
  unsigned char bytes[PART];
  for (size_t i = 0; i < r->len; i++)
    bytes[i] = sentinel ? SENTINEL : pat(n, k, i);
  if (r->region == g1_id)
    memcpy(g1 + r->offset, bytes, r->len);
  else if (r->region == g2_id)
    memcpy(g2 + r->offset, bytes, r->len);
  else
    check(relink_region_write(p.a, p.s, r->region, r->offset, bytes, r->len),
          "fill a's region");
}

/* Operation `o` completed: its bytes are where they belong, at both ends. */
static void check_done(const op_t *o) {
  unsigned char want[3 * PART], got[3 * PART], at_a[PART];
  size_t total = 0;
  for (unsigned k = 0; k < o->nsge; k++) {
    for (size_t i = 0; i < o->sgl[k].len; i++)
      want[total + i] = pat(o->n, k, i);
    total += o->sgl[k].len;
  }
  if (total != o->len)
    fail("an operation's total");
  /* b's end: what the WRITE put there, what the READ read. */
  check(relink_region_read(p.b, p.t, REGION, o->remote, got, total), "read b");
  if (memcmp(got, want, total) != 0) {
    fprintf(stderr, PROGRAM ": operation %u (kind %d): b's bytes at %llu\n", o->n,
            (int)o->kind, (unsigned long long)o->remote);
    fail("b's region does not hold the ranges' bytes, in order");
  }
  /* a's end: each range holds its part (a WRITE's unchanged, a READ's
   * filled with what b holds). */
  size_t at = 0;
  for (unsigned k = 0; k < o->nsge; k++) {
    read_at_a(&o->sgl[k], at_a);
    if (memcmp(at_a, want + at, o->sgl[k].len) != 0) {
      fprintf(stderr, PROGRAM ": operation %u (kind %d): range %u at a\n", o->n,
              (int)o->kind, k);
      fail("a range at a does not hold its part");
    }
    at += o->sgl[k].len;
  }
}

static void completions(void) {
  relink_completion c;
  while (relink_poll_completion(p.a, p.s, &c) == RELINK_OK) {
    unsigned i = 0;
    while (i < nops && ops[i].op != c.op)
      i++;
    if (i == nops || ops[i].done)
      fail("a completion of no operation, or a second one");
    if (c.outcome != RELINK_OUTCOME_SUCCESS || c.kind != ops[i].kind ||
        c.context != ops[i].context || c.len != ops[i].len) {
      fprintf(stderr,
              PROGRAM ": operation %u: outcome %d error %d kind %d context %#llx "
              "len %llu; want SUCCESS, kind %d, %#llx, %llu\n",
              i, (int)c.outcome, (int)c.error, (int)c.kind,
              (unsigned long long)c.context, (unsigned long long)c.len,
              (int)ops[i].kind, (unsigned long long)ops[i].context,
              (unsigned long long)ops[i].len);
      fail("a completion's outcome, kind, context or length");
    }
    ops[i].done = 1;
    completed++;
    check_done(&ops[i]);
  }
}

/* b's notices of the WRITE_IMMs: in order, each once, its total and
 * place, its bytes there first. */
static void written(void) {
  relink_written w;
  uint64_t seq;
  while (relink_poll_written(p.b, p.t, &seq, &w) == RELINK_OK) {
    unsigned k = 0, seen = 0;
    for (k = 0; k < nops; k++)
      if (ops[k].kind == RELINK_OP_KIND_WRITE_IMM && seen++ == notices)
        break;
    if (k == nops)
      fail("a notice of no WRITE_IMM, or a second one");
    const op_t *o = &ops[k];
    if (seq != (uint64_t)notices + 1 || w.imm != 0x1a0000u + o->n ||
        w.region != REGION || w.offset != o->remote || w.len != o->len) {
      fprintf(stderr,
              PROGRAM ": notice seq %llu: imm %#x region %u offset %llu len %u; "
              "want seq %u, %#x, %d, %llu, %llu\n",
              (unsigned long long)seq, w.imm, w.region, (unsigned long long)w.offset,
              w.len, notices + 1, 0x1a0000u + o->n, REGION,
              (unsigned long long)o->remote, (unsigned long long)o->len);
      fail("a notice's immediate data, place or length");
    }
    unsigned char got[3 * PART];
    check(relink_region_read(p.b, p.t, REGION, w.offset, got, w.len), "read b");
    size_t at = 0;
    for (unsigned r = 0; r < o->nsge; r++)
      for (size_t i = 0; i < o->sgl[r].len; i++)
        if (got[at++] != pat(o->n, r, i))
          fail("a WRITE_IMM's bytes were not in place when its notice came");
    notices++;
  }
}

static void turn2(void) {
  pair_turn(&p);
  pair_drop_events(&p);
  if (p.have_t)
    written();
  completions();
}

static unsigned imm_posted(void) {
  unsigned k = 0;
  for (unsigned i = 0; i < nops; i++)
    k += ops[i].kind == RELINK_OP_KIND_WRITE_IMM;
  return k;
}

static void until_done(const char *what) {
  for (int i = 0; i < 20000 && (completed < nops || notices < imm_posted()); i++)
    turn2();
  if (completed != nops || notices != imm_posted()) {
    fprintf(stderr, PROGRAM ": %s: %u of %u completed, %u of %u notices\n", what,
            completed, nops, notices, imm_posted());
    fail(what);
  }
}

static uint64_t counter(relink_node *n, relink_session s, relink_counter which) {
  uint64_t v = 0;
  check(relink_session_counter(n, s, which, &v), "counter");
  return v;
}

/* Post `o` (its ranges, kind and remote set) with relink_post. */
static void post(op_t *o) {
  relink_work_request wr = {.kind = o->kind,
                            .flags = RELINK_WR_SGL,
                            .context = 0xc0de0000u + o->n,
                            .remote = {.region = REGION, .offset = o->remote},
                            .sgl = o->sgl,
                            .num_sge = o->nsge,
                            .imm = o->kind == RELINK_OP_KIND_WRITE_IMM
                                       ? 0x1a0000u + o->n
                                       : 0};
  /* Ignored with RELINK_WR_SGL. */
  wr.region = 777;
  wr.offset = UINT64_MAX;
  wr.len = UINT64_MAX;
  o->context = wr.context;
  o->len = 0;
  for (unsigned k = 0; k < o->nsge; k++)
    o->len += o->sgl[k].len;
  check(relink_post(p.a, p.s, &wr, &o->op), "post");
}

static op_t *new_op(relink_op_kind kind) {
  if (nops == MAX_OPS)
    fail("too many operations for the test's table");
  op_t *o = &ops[nops];
  memset(o, 0, sizeof *o);
  o->kind = kind;
  o->n = nops++;
  return o;
}

/* A WRITE gathering 3 ranges (G1, G2, a's region) into b's slot. */
static void post_write(unsigned slot) {
  op_t *o = new_op(RELINK_OP_KIND_WRITE);
  unsigned n = o->n;
  o->nsge = 3;
  o->sgl[0] = (relink_sge){g1_id, (uint64_t)slot * PART, 1 + (n * 37u) % 600};
  o->sgl[1] = (relink_sge){g2_id, (uint64_t)slot * PART, 1 + (n * 53u) % 600};
  o->sgl[2] = (relink_sge){REGION, (uint64_t)slot * PART, 1 + (n * 71u) % 600};
  for (unsigned k = 0; k < 3; k++)
    fill_at_a(&o->sgl[k], n, k, 0);
  o->remote = W_AT + (uint64_t)slot * SLOT;
  post(o);
}

/* A READ of b's slot scattered over 2 ranges (G1, G2); b's bytes put
 * there first. */
static void post_read(unsigned slot) {
  op_t *o = new_op(RELINK_OP_KIND_READ);
  unsigned n = o->n;
  o->nsge = 2;
  o->sgl[0] = (relink_sge){g1_id, 16 * 1024 + (uint64_t)slot * PART,
                           1 + (n * 43u) % 1000};
  o->sgl[1] = (relink_sge){g2_id, 8 * 1024 + (uint64_t)slot * PART,
                           1 + (n * 61u) % 1000};
  for (unsigned k = 0; k < 2; k++)
    fill_at_a(&o->sgl[k], n, k, 1);
  o->remote = R_AT + (uint64_t)slot * SLOT;
  unsigned char src[2 * PART];
  size_t at = 0;
  for (unsigned k = 0; k < 2; k++)
    for (size_t i = 0; i < o->sgl[k].len; i++)
      src[at++] = pat(n, k, i);
  check(relink_region_write(p.b, p.t, REGION, o->remote, src, at), "b's source");
  post(o);
}

/* A WRITE_IMM from 2 ranges (G1, a's region) into b's slot. */
static void post_write_imm(unsigned slot) {
  op_t *o = new_op(RELINK_OP_KIND_WRITE_IMM);
  unsigned n = o->n;
  o->nsge = 2;
  o->sgl[0] = (relink_sge){g1_id, 32 * 1024 + (uint64_t)slot * PART,
                           1 + (n * 29u) % 900};
  o->sgl[1] = (relink_sge){REGION, 32 * 1024 + (uint64_t)slot * PART,
                           1 + (n * 31u) % 900};
  for (unsigned k = 0; k < 2; k++)
    fill_at_a(&o->sgl[k], n, k, 0);
  o->remote = I_AT + (uint64_t)slot * SLOT;
  post(o);
}

static void post_round(void) {
  for (unsigned slot = 0; slot < PER_ROUND; slot++) {
    post_write(slot);
    post_read(slot);
    if (slot % 4 == 0)
      post_write_imm(slot);
  }
}

static void reset(const char *host) {
  check(relink_soft_fabric_fault(fabric, host, "soft0", RELINK_FAULT_RESET),
        "reset");
}

/* Bad input: each refused with its status, nothing submitted, nothing
 * written to *op. */
static void bad_input(void) {
  relink_op op = 777;
  uint64_t room_before = 0, room_after = 0;
  check(relink_room(p.a, p.s, &room_before), "room");
  relink_token tok = {.region = REGION, .offset = 0};
  relink_sge five[5] = {{g1_id, 0, 8}, {g1_id, 8, 8}, {g1_id, 16, 8},
                        {g1_id, 24, 8}, {g1_id, 32, 8}};
  relink_work_request wr;
  const relink_op_kind kinds[3] = {RELINK_OP_KIND_WRITE, RELINK_OP_KIND_READ,
                                   RELINK_OP_KIND_WRITE_IMM};
  for (unsigned k = 0; k < 3; k++) {
    wr = (relink_work_request){.kind = kinds[k], .flags = RELINK_WR_SGL,
                               .remote = tok, .sgl = NULL, .num_sge = 2};
    expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "`sgl` is NULL",
           "a one-sided SGL with a NULL sgl");
    wr.sgl = five;
    wr.num_sge = 0;
    expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "`num_sge` is 0",
           "a one-sided SGL of 0 ranges");
    wr.num_sge = 5;
    expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "`num_sge` is 5",
           "a one-sided SGL of 5 ranges");
    wr.num_sge = UINT32_MAX;
    expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "`num_sge`",
           "a one-sided SGL of UINT32_MAX ranges");
    /* Past the end, of an unknown region: the codes relink_write gives. */
    relink_sge past[3] = {{g1_id, 0, 16}, {g2_id, G2_LEN - 4, 16}, {REGION, 0, 16}};
    wr.sgl = past;
    wr.num_sge = 3;
    expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_RANGE,
           "local range 0x3ffc+16 is outside region", "a one-sided SGL range past the end");
    relink_sge far[2] = {{REGION, UINT64_MAX, 1}, {g1_id, 0, 16}};
    wr.sgl = far;
    wr.num_sge = 2;
    expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_RANGE, "is outside region",
           "a one-sided SGL range at offset UINT64_MAX");
    relink_sge unknown[2] = {{g1_id, 0, 16}, {9, 0, 16}};
    wr.sgl = unknown;
    expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_NO_REGION, "no region 9",
           "a one-sided SGL range of an unknown region");
    /* UINT32_MAX in all is a length a one-sided operation may have (the
     * range is too long for its buffer); one byte more is not. */
    relink_sge most[1] = {{g1_id, 0, UINT32_MAX}};
    wr.sgl = most;
    wr.num_sge = 1;
    expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_RANGE, "is outside region",
           "a one-sided SGL of UINT32_MAX bytes past its region");
    relink_sge over[2] = {{g1_id, 0, UINT32_MAX}, {g2_id, 0, 1}};
    wr.sgl = over;
    wr.num_sge = 2;
    expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_TOO_LARGE,
           "4294967296 bytes", "a one-sided SGL of UINT32_MAX + 1 bytes");
    relink_sge huge[4] = {{g1_id, 0, UINT32_MAX}, {g1_id, 0, UINT32_MAX},
                          {g1_id, 0, UINT32_MAX}, {g1_id, 0, UINT32_MAX}};
    wr.sgl = huge;
    wr.num_sge = 4;
    expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_TOO_LARGE, "UINT32_MAX",
           "a one-sided SGL of 4 ranges of UINT32_MAX bytes");
    /* FROM_REGION stays a MESSAGE's. */
    wr = (relink_work_request){.kind = kinds[k], .flags = RELINK_WR_FROM_REGION,
                               .region = g1_id, .len = 8, .remote = tok};
    expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "a MESSAGE's only",
           "RELINK_WR_FROM_REGION on a one-sided operation");
    wr.flags = RELINK_WR_FROM_REGION | RELINK_WR_SGL;
    wr.sgl = five;
    wr.num_sge = 1;
    expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "both",
           "both flags on a one-sided operation");
    /* An unknown session, no node. */
    wr = (relink_work_request){.kind = kinds[k], .flags = RELINK_WR_SGL,
                               .remote = tok, .sgl = five, .num_sge = 2};
    expect(relink_post(p.a, 999, &wr, &op), RELINK_ERR_NO_SESSION, "no session 999",
           "a one-sided SGL on an unknown session");
    expect(relink_post(NULL, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "`node` is NULL",
           "a one-sided SGL on a NULL node");
  }
  /* Not on an atomic, not on a FLUSH. */
  wr = (relink_work_request){.kind = RELINK_OP_KIND_FETCH_ADD, .flags = RELINK_WR_SGL,
                             .remote = tok, .sgl = five, .num_sge = 1};
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT,
         "RELINK_WR_SGL is a MESSAGE's, WRITE's, WRITE_IMM's or READ's only",
         "RELINK_WR_SGL on a FETCH_ADD");
  wr.kind = RELINK_OP_KIND_CMP_SWAP;
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "RELINK_WR_SGL is",
         "RELINK_WR_SGL on a CMP_SWAP");
  wr.kind = RELINK_OP_KIND_FLUSH;
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_ARGUMENT, "RELINK_WR_SGL is",
         "RELINK_WR_SGL on a FLUSH");

  if (op != 777)
    fail("a refused post wrote an op id");
  check(relink_room(p.a, p.s, &room_after), "room");
  if (room_after != room_before)
    fail("refused posts took room");
  for (int i = 0; i < 20; i++)
    turn2();
  if (completed != 0 || notices != 0)
    fail("a refused post did something");
}

int main(void) {
  pair_open(&p, 31, &fabric);

  /* a's own buffers: the READs land in both, so both have local write. */
  g1 = malloc(G1_LEN);
  if (!g1)
    fail("malloc");
  memset(g1, 0, G1_LEN);
  check(relink_register(p.a, g1, G1_LEN, RELINK_ACCESS_LOCAL_WRITE, &g1_id),
        "register G1");
  check(relink_register(p.a, g2, sizeof g2, RELINK_ACCESS_LOCAL_WRITE, &g2_id),
        "register G2");

  relink_options *ob = NULL;
  check(relink_options_new(&ob), "options");
  check(relink_options_add_region(ob, REGION, REGION_LEN,
                                  RELINK_ACCESS_LOCAL_WRITE |
                                      RELINK_ACCESS_REMOTE_WRITE |
                                      RELINK_ACCESS_REMOTE_READ,
                                  1),
        "b's region");
  relink_listener l;
  check(relink_listen(p.b, "10.0.0.2:7471", ob, &l), "listen");
  relink_options_free(ob);
  relink_options *oa = NULL;
  check(relink_options_new(&oa), "options");
  check(relink_options_add_region(oa, REGION, REGION_LEN, RELINK_ACCESS_LOCAL_WRITE, 0),
        "a's region");
  check(relink_connect(p.a, "10.0.0.2:7471", NULL, oa, &p.s), "connect");
  relink_options_free(oa);
  pair_until_established(&p, turn2, "the session did not come up");

  bad_input();

  /* Round 0: no fault. G2 is in use while a WRITE over it is not
   * completed. */
  post_round();
  expect(relink_deregister(p.a, g2_id), RELINK_ERR_BUSY, "in use",
         "deregister G2 while one-sided operations use it");
  until_done("round 0");
  printf("round 0: %u operations over scatter/gather lists, %u notices\n", nops,
         notices);

  /* Round 1: a's device resets with the operations in flight. */
  uint64_t resumes = counter(p.a, p.s, RELINK_COUNTER_RESUMES);
  uint64_t replayed = counter(p.a, p.s, RELINK_COUNTER_REPLAYED);
  unsigned before = nops, in_flight;
  post_round();
  in_flight = nops - completed;
  reset("a");
  until_done("round 1, across a reset of a's device");
  pair_until_established(&p, turn2, "round 1: the session did not come back");
  replayed = counter(p.a, p.s, RELINK_COUNTER_REPLAYED) - replayed;
  if (in_flight != nops - before ||
      counter(p.a, p.s, RELINK_COUNTER_RESUMES) <= resumes || replayed == 0) {
    fprintf(stderr, PROGRAM ": round 1: %u in flight, %llu replayed\n", in_flight,
            (unsigned long long)replayed);
    fail("round 1: the reset did not cost the operations in flight their transport");
  }
  printf("round 1: %u operations, %llu replayed after the reset\n", nops - before,
         (unsigned long long)replayed);

  /* Round 2: b's device resets before they are posted. */
  resumes = counter(p.a, p.s, RELINK_COUNTER_RESUMES);
  before = nops;
  reset("b");
  turn2();
  post_round();
  until_done("round 2, posted while b's device was reset");
  pair_until_established(&p, turn2, "round 2: the session did not come back");
  if (counter(p.a, p.s, RELINK_COUNTER_RESUMES) <= resumes)
    fail("round 2: no resume");
  printf("round 2: %u operations posted during a recovery\n", nops - before);
  for (int i = 0; i < 100; i++)
    turn2();

  /* G2 is free once nothing names it any more. */
  expect(relink_deregister(p.a, g2_id), RELINK_OK, NULL,
         "deregister G2 after the completions");
  relink_op op = 777;
  relink_sge gone[2] = {{g1_id, 0, 8}, {g2_id, 0, 8}};
  relink_work_request wr = {.kind = RELINK_OP_KIND_WRITE, .flags = RELINK_WR_SGL,
                            .remote = {.region = REGION, .offset = 0},
                            .sgl = gone, .num_sge = 2};
  expect(relink_post(p.a, p.s, &wr, &op), RELINK_ERR_NO_REGION, "has no region",
         "a WRITE over a deregistered buffer");
  if (op != 777)
    fail("a refused post wrote an op id");

  relink_node_free(p.a);
  relink_node_free(p.b);
  relink_soft_fabric_free(fabric);
  free(g1);
  if (failures) {
    fprintf(stderr, PROGRAM ": %d failure(s)\n", failures);
    return 1;
  }
  printf("sgl_one_sided: ok (%u operations, %u notices)\n", nops, notices);
  return 0;
}
