/*
 * The program's own buffers, registered with the node (relink_register).
 * The target registers a heap buffer of its own with every right and
 * tells the initiator the id in a message; the initiator registers a
 * stack buffer of its own for its local ranges. The initiator then WRITEs
 * from its buffer into the target's, READs it back, READs bytes the
 * target stored in its buffer itself, and runs a FETCH_ADD (relink_post)
 * on a counter in it: the target sees everything in its own buffer, and
 * the initiator in its own, with no relink_region_read. Again after a
 * reset of the target's device, and after one of the initiator's.
 * Deregistration is refused while an operation uses the registration and
 * for an unknown id; after it the buffer is the program's again (the
 * peer's WRITE fails and leaves it untouched). Bad input gets its code.
 * Exits 0 when every check holds.
 */
#define PROGRAM "registrations"
#include "harness.h"
/* The soft fabric's fault hooks: relink_soft_fabric_fault. */
#include <relink_soft.h>

#include <stdint.h>

#define LEN 8192
#define ACCESS_ALL                                                                    \
  (RELINK_ACCESS_LOCAL_WRITE | RELINK_ACCESS_REMOTE_WRITE |                    \
   RELINK_ACCESS_REMOTE_READ | RELINK_ACCESS_REMOTE_ATOMIC)

/* One turn of both nodes (1 ms of virtual time each); events and the
 * target's completions are taken and dropped. */
static void turn2(pair *p) {
  pair_turn(p);
  relink_event e;
  relink_completion c;
  while (relink_poll_event(p->a, p->s, &e) == RELINK_OK) {
  }
  if (p->have_t) {
    while (relink_poll_event(p->b, p->t, &e) == RELINK_OK) {
    }
    while (relink_poll_completion(p->b, p->t, &c) == RELINK_OK)
      if (c.outcome != RELINK_OUTCOME_SUCCESS)
        fail("the target's message did not succeed");
  }
}

static int established(pair *p) {
  relink_state sa, sb;
  return p->have_t && relink_session_state(p->a, p->s, &sa) == RELINK_OK &&
         relink_session_state(p->b, p->t, &sb) == RELINK_OK &&
         sa == RELINK_STATE_ESTABLISHED && sb == RELINK_STATE_ESTABLISHED;
}

static void until_established(pair *p, const char *what) {
  for (int i = 0; i < 10000 && !established(p); i++)
    turn2(p);
  if (!established(p))
    fail(what);
}

/* Run until the initiator's operation op completes; its completion. */
static relink_completion complete(pair *p, relink_op op) {
  relink_completion c;
  memset(&c, 0, sizeof c);
  for (int i = 0; i < 10000; i++) {
    if (relink_poll_completion(p->a, p->s, &c) == RELINK_OK) {
      if (c.op != op)
        fail("a completion of another operation");
      return c;
    }
    turn2(p);
  }
  fail("an operation never completed");
  return c;
}

static void succeeds(pair *p, relink_op op, const char *what) {
  relink_completion c = complete(p, op);
  if (c.outcome != RELINK_OUTCOME_SUCCESS) {
    fprintf(stderr, PROGRAM ": %s: outcome %d, error %d\n", what, (int)c.outcome,
            (int)c.error);
    fail(what);
  }
}

/* One round of one-sided operations between the initiator's buffer
 * `local` (registration `local_id`) and the target's `target`
 * (`target_id`), checked in both programs' own memory. */
static void round_trip(pair *p, unsigned round, unsigned char *target,
                       uint32_t target_id, uint64_t *local, uint32_t local_id) {
  unsigned char *mine = (unsigned char *)local;
  relink_op op;
  /* WRITE 512 bytes of the initiator's buffer into the target's. */
  for (unsigned i = 0; i < 512; i++)
    mine[i] = (unsigned char)((i * 31u) ^ round);
  relink_token at = {target_id, 1024};
  check(relink_write(p->a, p->s, local_id, 0, 512, at, &op), "write");
  succeeds(p, op, "the WRITE");
  if (memcmp(target + 1024, mine, 512) != 0)
    fail("the WRITE did not land in the target's own buffer");
  /* READ them back into another part of the initiator's buffer. */
  memset(mine + 4096, 0, 512);
  check(relink_read(p->a, p->s, local_id, 4096, 512, at, &op), "read");
  succeeds(p, op, "the READ");
  if (memcmp(mine + 4096, mine, 512) != 0)
    fail("the READ did not land in the initiator's own buffer");
  /* READ what the target stored in its buffer itself. */
  char note[64] = {0};
  snprintf(note, sizeof note, "stored by the target in round %u", round);
  memcpy(target + 2048, note, sizeof note);
  relink_token noted = {target_id, 2048};
  check(relink_read(p->a, p->s, local_id, 6144, sizeof note, noted, &op),
        "read the note");
  succeeds(p, op, "the READ of the note");
  if (memcmp(mine + 6144, note, sizeof note) != 0)
    fail("the READ did not bring what the target stored");
  /* FETCH_ADD on the target's counter (its word 0) through relink_post;
   * the old value lands in the initiator's word 1. */
  relink_work_request wr;
  memset(&wr, 0, sizeof wr);
  wr.kind = RELINK_OP_KIND_FETCH_ADD;
  wr.context = 100 + round;
  wr.region = local_id;
  wr.offset = 8;
  wr.remote.region = target_id;
  wr.remote.offset = 0;
  wr.add = 1;
  local[1] = 12345;
  check(relink_post(p->a, p->s, &wr, &op), "fetch-add");
  relink_completion c = complete(p, op);
  if (c.outcome != RELINK_OUTCOME_SUCCESS || c.context != 100 + round ||
      c.kind != RELINK_OP_KIND_FETCH_ADD)
    fail("the FETCH_ADD");
  if (local[1] != round)
    fail("the FETCH_ADD's old value is not in the initiator's own buffer");
  uint64_t counter;
  memcpy(&counter, target, sizeof counter);
  if (counter != (uint64_t)round + 1)
    fail("the FETCH_ADD did not count in the target's own buffer");
  printf("round %u: WRITE, READs and FETCH_ADD in the programs' own buffers\n",
         round);
}

/* Reset `host`'s device; run until the session is back, after a resume on
 * both sides. */
static void reset(relink_soft_fabric *f, pair *p, const char *host) {
  relink_counters ca, cb;
  check(relink_session_counters(p->a, p->s, &ca), "counters a");
  check(relink_session_counters(p->b, p->t, &cb), "counters b");
  check(relink_soft_fabric_fault(f, host, "soft0", RELINK_FAULT_RESET), "reset");
  for (int i = 0; i < 50; i++)
    turn2(p);
  until_established(p, "the session did not come back after the reset");
  uint64_t resumes_a = ca.resumes, resumes_b = cb.resumes;
  check(relink_session_counters(p->a, p->s, &ca), "counters a");
  check(relink_session_counters(p->b, p->t, &cb), "counters b");
  if (ca.resumes <= resumes_a || cb.resumes <= resumes_b)
    fail("the reset cost both sides their transport");
}

static void bad_input(relink_node *n) {
  uint32_t id = 0;
  uint64_t buf[8];
  const uint32_t lw = RELINK_ACCESS_LOCAL_WRITE;
  expect(relink_register(NULL, buf, sizeof buf, lw, &id), RELINK_ERR_ARGUMENT,
         "`node` is NULL", "register on no node");
  expect(relink_register(n, buf, sizeof buf, lw, NULL), RELINK_ERR_ARGUMENT,
         "`id_out` is NULL", "register with no id_out");
  expect(relink_register(n, NULL, 64, lw, &id), RELINK_ERR_ARGUMENT,
         "`addr` is NULL", "register NULL");
  expect(relink_register(n, buf, 0, lw, &id), RELINK_ERR_ARGUMENT, "`len` is 0",
         "register 0 bytes");
  expect(relink_register(n, (void *)(UINTPTR_MAX - 15), 64, lw, &id),
         RELINK_ERR_ARGUMENT, "wrap around", "register past the address space");
  expect(relink_register(n, buf, sizeof buf, 1u << 7, &id), RELINK_ERR_ARGUMENT,
         "no RELINK_ACCESS_* names", "register with an unknown access bit");
  expect(relink_register(n, buf, sizeof buf, RELINK_ACCESS_REMOTE_WRITE, &id),
         RELINK_ERR_ARGUMENT, "need RELINK_ACCESS_LOCAL_WRITE",
         "register REMOTE_WRITE without LOCAL_WRITE");
  expect(relink_register(n, buf, sizeof buf,
                         RELINK_ACCESS_REMOTE_ATOMIC | RELINK_ACCESS_REMOTE_READ,
                         &id),
         RELINK_ERR_ARGUMENT, "need RELINK_ACCESS_LOCAL_WRITE",
         "register REMOTE_ATOMIC without LOCAL_WRITE");
  if (id != 0)
    fail("a refused registration stored an id");
  expect(relink_deregister(NULL, 1), RELINK_ERR_ARGUMENT, "`node` is NULL",
         "deregister on no node");
  if (strcmp(relink_status_name(RELINK_ERR_BUSY), "RELINK_ERR_BUSY") != 0)
    fail("relink_status_name(RELINK_ERR_BUSY)");
}

int main(void) {
  relink_soft_fabric *f = NULL;
  pair p;
  pair_open(&p, 17, &f);
  bad_input(p.a);

  relink_listener l;
  check(relink_listen(p.b, "10.0.0.2:7471", NULL, &l), "listen");
  check(relink_connect(p.a, "10.0.0.2:7471", NULL, NULL, &p.s), "connect");
  until_established(&p, "the session did not come up");

  /* The target registers a heap buffer of its own while the session is up,
   * and tells the initiator its id in a message. */
  unsigned char *target = malloc(LEN);
  if (!target)
    fail("malloc");
  memset(target, 0, LEN);
  uint32_t target_id = 0;
  check(relink_register(p.b, target, LEN, ACCESS_ALL, &target_id), "register target");
  if (target_id < 0x80000000u)
    fail("a registration's id is 2^31 or more");
  check(relink_send(p.b, p.t, &target_id, sizeof target_id, NULL), "tell the id");
  uint32_t told = 0;
  uintptr_t len = 0;
  int got = 0;
  for (int i = 0; i < 1000 && !got; i++) {
    relink_status st =
        relink_poll_delivery(p.a, p.s, &told, sizeof told, &len, NULL);
    check(st, "delivery");
    got = st == RELINK_OK;
    if (!got)
      turn2(&p);
  }
  if (!got || len != sizeof told || told != target_id)
    fail("the initiator was not told the id");

  /* The initiator registers a buffer on its stack for its local ranges. */
  uint64_t local[LEN / 8];
  memset(local, 0, sizeof local);
  uint32_t local_id = 0;
  check(relink_register(p.a, local, sizeof local, RELINK_ACCESS_LOCAL_WRITE,
                        &local_id),
        "register local");
  relink_op op;
  relink_token at = {told, 1024};
  expect(relink_write(p.a, p.s, local_id, LEN - 8, 64, at, &op),
         RELINK_ERR_RANGE, "outside region", "a local range past the buffer");
  relink_token counter = {told, 0};
  expect(relink_fetch_add(p.a, p.s, local_id, 4, counter, 1, &op),
         RELINK_ERR_MISALIGNED, NULL, "a misaligned atomic into the buffer");

  round_trip(&p, 0, target, told, local, local_id);
  reset(f, &p, "b");
  round_trip(&p, 1, target, told, local, local_id);
  reset(f, &p, "a");
  round_trip(&p, 2, target, told, local, local_id);

  /* Deregistration: refused while an operation uses the registration (no
   * progress is made between the two calls: the WRITE is not done). */
  check(relink_write(p.a, p.s, local_id, 0, 64, at, &op), "write");
  expect(relink_deregister(p.a, local_id), RELINK_ERR_BUSY, "in use",
         "deregister while a WRITE uses it");
  succeeds(&p, op, "the WRITE the deregistration waited for");
  expect(relink_deregister(p.a, 0x80000000u + 77), RELINK_ERR_NO_REGION,
         "no registration", "deregister an unknown id");
  expect(relink_deregister(p.a, 7), RELINK_ERR_NO_REGION, "no registration",
         "deregister a session region's id");

  /* The target takes its buffer back: the initiator's next WRITE is refused
   * by the target's device and leaves the buffer untouched. */
  check(relink_deregister(p.b, target_id), "deregister target");
  expect(relink_deregister(p.b, target_id), RELINK_ERR_NO_REGION,
         "no registration", "deregister twice");
  unsigned char *before = malloc(LEN);
  if (!before)
    fail("malloc");
  memcpy(before, target, LEN);
  memset(local, 0xee, 64);
  check(relink_write(p.a, p.s, local_id, 0, 64, at, &op), "write after");
  relink_completion c = complete(&p, op);
  if (c.outcome != RELINK_OUTCOME_FAILED || c.error != RELINK_OP_REMOTE)
    fail("a WRITE into a deregistered buffer fails at the peer");
  if (memcmp(before, target, LEN) != 0)
    fail("a deregistered buffer was written");
  free(before);
  free(target);

  /* The initiator's: gone from its session too. */
  check(relink_deregister(p.a, local_id), "deregister local");
  expect(relink_write(p.a, p.s, local_id, 0, 64, at, &op), RELINK_ERR_NO_REGION,
         "has no region", "a local range in a deregistered buffer");
  for (int i = 0; i < 20; i++)
    turn2(&p);

  /* A registration the node still has when it is freed is given back by
   * relink_node_free. */
  uint64_t last[4] = {0};
  uint32_t last_id = 0;
  check(relink_register(p.a, last, sizeof last, RELINK_ACCESS_LOCAL_WRITE,
                        &last_id),
        "register last");
  if (last_id == local_id)
    fail("an id is never handed out twice");

  relink_node_free(p.a);
  relink_node_free(p.b);
  relink_soft_fabric_free(f);
  if (failures) {
    fprintf(stderr, PROGRAM ": %d failure(s)\n", failures);
    return 1;
  }
  printf("registrations: ok\n");
  return 0;
}
