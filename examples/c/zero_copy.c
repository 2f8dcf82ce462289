/*
 * zero_copy — messages sent from the application's own memory without a
 * copy, received into buffers the receiver posted, across device resets.
 *
 * A client sends numbered messages; a server answers each with an echo of
 * it. Both use memory of their own registered with their node
 * (relink_register, as ibv_reg_mr) for everything they send and receive:
 *
 * - The client sends each message from where its bytes are, with no copy
 *   into relink: the even ones from one range of its "outbox"
 *   (RELINK_WR_FROM_REGION: header and text side by side), the odd ones
 *   from a scatter/gather list of two ranges (RELINK_WR_SGL: a header of
 *   its "headers" array, then the text in the outbox). It leaves those
 *   bytes unchanged until each message's completion: a replay after a
 *   reset reads them again.
 * - The server posts the buffers of its "ring" (relink_post_receive);
 *   each message fills one, in order (relink_poll_received). It answers
 *   from registered memory too (RELINK_WR_SGL): a reply header of its
 *   own, then the message's bytes sent straight from the buffer they
 *   landed in; it posts that buffer again once the reply completed (until
 *   then the reply may still be read from it).
 * - The client receives the replies in buffers of its "inbox" it posted,
 *   and posts each again once it has read it. The first message it gets
 *   says where the server's "board" is (sent from registered memory too).
 * - Once every reply came, the client WRITEs a summary, gathered from two
 *   ranges (RELINK_WR_SGL on a WRITE_IMM), into the server's board; the
 *   server is told in a posted buffer (RELINK_RECEIVE_WRITTEN) once the
 *   bytes are there, and reads and checks them in its own memory. Then the
 *   client closes the session.
 * - Devices are reset while messages are in flight. Nothing here retries
 *   or re-sends: relink replays what was not confirmed and delivers every
 *   message, reply and notice exactly once.
 *
 * Each side checks what it gets: the server every message (once, in
 * order, with its bytes) and the summary; the client every reply (once,
 * in order, echoing its message's bytes exactly) and every completion.
 * Each prints its copy counters: RELINK_COUNTER_SEND_COPIED_BYTES is 0 on
 * both sides, nothing was copied to be sent;
 * RELINK_COUNTER_RECEIVE_COPIED_BYTES is each received message's bytes
 * once, from the receive slot it arrived in into the posted buffer (and
 * once more for a message that found no buffer posted: it waited in line,
 * a copy, for the next one).
 *
 * Build (librelink installed, or see `examples/c/README.md`):
 *     cc -o zero_copy zero_copy.c $(pkg-config --cflags --libs relink)
 *
 * It includes relink.h, the API, and relink_soft.h, the soft fabric's
 * fault hooks, with which the inproc and tcp modes reset their own
 * devices. The verbs mode calls no hook: on RDMA devices, faults come
 * from outside.
 *
 * Run:
 *     zero_copy [inproc [MESSAGES]]
 *         both nodes in this process on the in-process soft fabric (24
 *         messages by default); the client's device is reset halfway with
 *         messages in flight.
 *     zero_copy tcp DIR server ADDR [RESET_AFTER RESET_DEVICE]
 *     zero_copy tcp DIR client ADDR MESSAGES [RESET_DEVICE]
 *         two processes on the TCP soft fabric, DIR being each one's soft
 *         device directory; the server resets its own soft device
 *         RESET_DEVICE after receiving RESET_AFTER messages, the client
 *         its own halfway (if given); `relink soft-device` may reset,
 *         remove or replace either at any time.
 *     zero_copy verbs server ADDR
 *     zero_copy verbs client ADDR MESSAGES
 *         on RDMA devices through rdma-core (e.g. rxe); reset them with
 *         `rdma link delete/add` while it runs.
 *
 * Each side ends with a line `RESULT role=client ...` or
 * `RESULT role=server ...` (in-process, both), with its counts, copy
 * counters, resumes and replays. The client exits 0 when every reply
 * arrived exactly once, in order, with its bytes, the summary was
 * delivered, and it copied nothing to send; the server exits 0 when its
 * client closed the session after it got every message once and the
 * summary, answered every message, and copied nothing to send. In one
 * process it exits 0 when both would, and the client's session resumed
 * after the reset.
 */
#include <relink.h>
/* relink_soft_fabric_fault and relink_soft_device, for the soft modes. */
#include <relink_soft.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MESSAGES 10000
/* Each message's part of the client's outbox, and each of the server's
 * receive buffers. */
#define SLOT 256
/* Each of the client's receive buffers: a reply header and a message. */
#define REPLY_SLOT (sizeof(header) + SLOT)
/* Messages the client keeps waiting for their reply. */
#define WINDOW 8
/* The server's receive buffers: a buffer stays busy until the reply sent
 * from it completed, so twice the window lets the next messages find one
 * free (a message that finds none waits in line for the next posted). */
#define RING (2 * WINDOW)
/* The client's receive buffers: it reads each reply at once. */
#define INBOX WINDOW
/* The server's board: where the client's summary lands. */
#define BOARD_LEN 1024
/* The server's first message: where its board is. */
#define NOTE_LEN 64
/* The context of that message's completion (the replies' are the
 * numbers of the receive buffers they are sent from, below RING). */
#define NOTE_CONTEXT 1000
#define MAGIC 0x7a63u       /* "zc": a message, or the summary */
#define REPLY_MAGIC 0x6b6fu /* "ok": a reply */
/* Give up (as a failure) after this long without a reply, in ms of the
 * node's clock (virtual in one process). */
#define STALL_MS 120000

/* What starts every message, reply and the summary: its number and the
 * length of what follows it. */
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

static void die(const char *who, const char *what) {
  fprintf(stderr, "zero_copy: %s: %s\n", who, what);
  exit(1);
}

static uint64_t counter(relink_node *n, relink_session s, relink_counter which) {
  uint64_t v = 0;
  check(relink_session_counter(n, s, which, &v), "counter");
  return v;
}

static uint64_t now_ms(relink_node *n) {
  uint64_t ns = 0;
  check(relink_now_ns(n, &ns), "clock");
  return ns / 1000000;
}

/* A zeroed buffer of the program's own, registered with node `n` with the
 * rights `access`; its id in `*id`. It stays the program's to keep valid
 * until the node is freed (or relink_deregister). A SEND and a WRITE only
 * read their ranges: no right is needed for that. */
static unsigned char *registered(relink_node *n, size_t len, uint32_t access,
                                 uint32_t *id, const char *what) {
  unsigned char *buf = calloc(1, len);
  if (!buf)
    die(what, "out of memory");
  check(relink_register(n, buf, len, access, id), what);
  return buf;
}

/* Message i's text, and the summary's: both sides build them, one to
 * send, the other to check what arrived. */
static int text_of(unsigned i, char *dst, size_t cap) {
  return snprintf(dst, cap, "hello #%u, %s", i,
                  i % 2 ? "gathered from a header and a text" : "from one range");
}

static int summary_of(unsigned total, char *dst, size_t cap) {
  return snprintf(dst, cap, "summary: %u messages sent from registered memory",
                  total);
}

/* Message i as it travels: its header, then its text; returns its length. */
static size_t message_of(unsigned i, unsigned char *dst) {
  char text[SLOT];
  int len = text_of(i, text, sizeof text);
  header h = {MAGIC, (uint16_t)i, (uint32_t)len};
  memcpy(dst, &h, sizeof h);
  memcpy(dst + sizeof h, text, (size_t)len);
  return sizeof h + (size_t)len;
}

/* Take a session's events: print them (all but state transitions), count
 * resumes, note the close; end the program if the session ended
 * otherwise. */
static void take_events(relink_node *n, relink_session s, const char *who,
                        unsigned *resumes, int *closed) {
  relink_event e;
  while (relink_poll_event(n, s, &e) == RELINK_OK) {
    if (e.kind != RELINK_EVENT_TRANSITION)
      printf("%s: %s\n", who, e.text);
    if (e.kind == RELINK_EVENT_RESUMED)
      (*resumes)++;
    if (e.kind == RELINK_EVENT_DISCONNECTED && closed)
      *closed = 1;
    if (e.kind == RELINK_EVENT_GAVE_UP || e.kind == RELINK_EVENT_PEER_LOST)
      die(who, "the session ended");
  }
}

/* ---- the server ---------------------------------------------------------- */

typedef struct {
  relink_node *node;
  relink_session session;
  int have_session, closed;
  /* Registered: receive buffer k at k * SLOT; the header of the reply
   * sent from buffer k; the first message; the board. */
  unsigned char *ring;
  header *reply_headers;
  char *note;
  unsigned char *board;
  uint32_t ring_id, reply_headers_id, note_id, board_id;
  unsigned received, duplicates, replies, notices, resumes;
  /* Read when the session closed (it is reaped at the next poll). */
  uint64_t send_copied, receive_copied, replayed;
} server;

static void server_start(server *sv, relink_node *n, const char *addr) {
  memset(sv, 0, sizeof *sv);
  sv->node = n;
  /* Registered before the session exists: every session of the node has
   * them, and the board's advertisement reaches the client before
   * anything the server sends. */
  sv->ring = registered(n, (size_t)RING * SLOT, RELINK_ACCESS_LOCAL_WRITE,
                        &sv->ring_id, "register the ring");
  sv->reply_headers = (header *)registered(n, RING * sizeof(header), 0,
                                           &sv->reply_headers_id,
                                           "register the reply headers");
  sv->note = (char *)registered(n, NOTE_LEN, 0, &sv->note_id, "register the note");
  sv->board = registered(n, BOARD_LEN,
                         RELINK_ACCESS_LOCAL_WRITE | RELINK_ACCESS_REMOTE_WRITE,
                         &sv->board_id, "register the board");
  relink_listener l;
  check(relink_listen(n, addr, NULL, &l), "listen");
}

/* Post receive buffer k (again). Once the client closed the session the
 * buffer is refused (RELINK_ERR_SESSION) and stays the server's: the last
 * replies may complete in the same turn as the close. */
static void server_post_buffer(server *sv, unsigned k) {
  relink_status st = relink_post_receive(sv->node, sv->session, sv->ring_id,
                                         (uint64_t)k * SLOT, SLOT, k);
  if (st != RELINK_ERR_SESSION)
    check(st, "post a receive buffer");
}

/* A session came: post the ring, and tell the client where the board is
 * (a message from registered memory, like everything the server sends). */
static void server_accepted(server *sv, const relink_accepted *acc) {
  if (sv->have_session)
    die("server", "a second session");
  printf("server: accepted %s\n", acc->peer);
  sv->session = acc->session;
  sv->have_session = 1;
  for (unsigned k = 0; k < RING; k++)
    server_post_buffer(sv, k);
  int len = snprintf(sv->note, NOTE_LEN, "board %" PRIu32 " 0", sv->board_id);
  relink_work_request wr = {.kind = RELINK_OP_KIND_MESSAGE,
                            .flags = RELINK_WR_FROM_REGION,
                            .context = NOTE_CONTEXT,
                            .region = sv->note_id,
                            .offset = 0,
                            .len = (uint64_t)len};
  check(relink_post(sv->node, sv->session, &wr, NULL), "send the board's place");
}

/* A message filled buffer k: check it, and echo it from where it is. */
static void server_take_message(server *sv, unsigned k, const relink_received *r) {
  const unsigned char *at = sv->ring + (size_t)k * SLOT;
  header h;
  if (r->truncated || r->len < sizeof h)
    die("server", "a message too long or too short for its buffer");
  memcpy(&h, at, sizeof h);
  if (h.magic != MAGIC || sizeof h + h.len != r->len)
    die("server", "a message that is not one the client sent");
  if (h.number < sv->received) {
    /* Never happens: relink delivers each message once. */
    fprintf(stderr, "zero_copy: server: message %u arrived twice\n", h.number);
    sv->duplicates++;
    server_post_buffer(sv, k);
    return;
  }
  if (h.number != sv->received || r->seq != (uint64_t)sv->received + 1)
    die("server", "a message out of order");
  unsigned char want[SLOT];
  if (message_of(h.number, want) != r->len || memcmp(at, want, r->len) != 0)
    die("server", "a message's bytes are not what the client sent");
  sv->received++;
  printf("server: message %u (%" PRIu32 " bytes, seq %" PRIu64 ") in buffer %u: "
         "\"%.*s\"\n",
         h.number, r->len, r->seq, k, (int)h.len, (const char *)at + sizeof h);

  /* The reply: a header of the server's, then the message's bytes read
   * from buffer k where they landed. Buffer k is posted again once the
   * reply completed: until then a replay may read it again. */
  sv->reply_headers[k] = (header){REPLY_MAGIC, h.number, r->len};
  relink_sge sgl[2] = {
      {sv->reply_headers_id, (uint64_t)k * sizeof(header), sizeof(header)},
      {sv->ring_id, (uint64_t)k * SLOT, r->len},
  };
  relink_work_request wr = {.kind = RELINK_OP_KIND_MESSAGE,
                            .flags = RELINK_WR_SGL,
                            .context = k,
                            .sgl = sgl,
                            .num_sge = 2};
  check(relink_post(sv->node, sv->session, &wr, NULL), "post a reply");
}

/* The summary's notice took a buffer: its bytes are on the board already. */
static void server_take_notice(server *sv, const relink_received *r) {
  header h;
  if (r->written_region != sv->board_id || r->written_len < sizeof h ||
      r->written_offset + r->written_len > BOARD_LEN)
    die("server", "a WRITE landed somewhere else");
  const unsigned char *at = sv->board + r->written_offset;
  memcpy(&h, at, sizeof h);
  char want[SLOT];
  int len = summary_of(r->imm, want, sizeof want);
  if (h.magic != MAGIC || h.number != r->imm || sizeof h + h.len != r->written_len ||
      h.len != (uint32_t)len || memcmp(at + sizeof h, want, h.len) != 0)
    die("server", "the summary is not what the client wrote");
  if (r->imm != sv->received || r->seq != (uint64_t)sv->received + 1)
    die("server", "the summary came before the messages it counts");
  sv->notices++;
  printf("server: notice (imm %" PRIu32 ", %" PRIu32 " bytes on the board, seq %" PRIu64
         "): \"%.*s\"\n",
         r->imm, r->written_len, r->seq, (int)h.len, (const char *)at + sizeof h);
}

static void server_step(server *sv) {
  relink_accepted acc;
  while (relink_accept(sv->node, &acc) == RELINK_OK)
    server_accepted(sv, &acc);
  if (!sv->have_session || sv->closed)
    return;
  relink_received r;
  while (relink_poll_received(sv->node, sv->session, &r) == RELINK_OK) {
    unsigned k = (unsigned)r.context;
    if (r.outcome == RELINK_RECEIVE_MESSAGE) {
      server_take_message(sv, k, &r);
    } else if (r.outcome == RELINK_RECEIVE_WRITTEN) {
      /* Nothing was written in the buffer: it goes back at once. */
      server_take_notice(sv, &r);
      server_post_buffer(sv, k);
    } else if (r.outcome == RELINK_RECEIVE_FLUSHED) {
      /* The session ended with the buffer posted: the client closed it. */
      if (sv->notices != 1)
        die("server", "a receive buffer flushed before the summary came");
    } else {
      die("server", "a receive ended in a way this program does not know");
    }
  }
  relink_completion c;
  while (relink_poll_completion(sv->node, sv->session, &c) == RELINK_OK) {
    if (c.outcome != RELINK_OUTCOME_SUCCESS) {
      fprintf(stderr, "zero_copy: server: operation %" PRIu64 " ended %d (error %d)\n",
              c.context, (int)c.outcome, (int)c.error);
      exit(1);
    }
    if (c.context != NOTE_CONTEXT) {
      /* The reply sent from buffer c.context is done with it. */
      sv->replies++;
      server_post_buffer(sv, (unsigned)c.context);
    }
  }
  take_events(sv->node, sv->session, "server", &sv->resumes, &sv->closed);
  if (sv->closed) {
    /* The session is reaped at the next poll: its counters now. */
    sv->send_copied = counter(sv->node, sv->session, RELINK_COUNTER_SEND_COPIED_BYTES);
    sv->receive_copied =
        counter(sv->node, sv->session, RELINK_COUNTER_RECEIVE_COPIED_BYTES);
    sv->replayed = counter(sv->node, sv->session, RELINK_COUNTER_REPLAYED);
  }
}

/* Print the server's counters and RESULT line; 1 if all went well. */
static int server_finish(server *sv) {
  printf("server: %" PRIu64 " bytes copied to be sent (RELINK_COUNTER_SEND_COPIED_BYTES)"
         "; %" PRIu64 " bytes copied from the receive slots into the posted buffers "
         "(RELINK_COUNTER_RECEIVE_COPIED_BYTES)\n",
         sv->send_copied, sv->receive_copied);
  printf("RESULT role=server received=%u duplicates=%u replies=%u notices=%u "
         "send_copied_bytes=%" PRIu64 " receive_copied_bytes=%" PRIu64
         " resumes=%u replayed=%" PRIu64 "\n",
         sv->received, sv->duplicates, sv->replies, sv->notices, sv->send_copied,
         sv->receive_copied, sv->resumes, sv->replayed);
  return sv->closed && sv->duplicates == 0 && sv->notices == 1 &&
         sv->replies == sv->received && sv->send_copied == 0;
}

/* ---- the client ---------------------------------------------------------- */

typedef struct {
  relink_node *node;
  relink_session session;
  unsigned total;
  /* Registered: message i's bytes at i * SLOT (the summary's after them);
   * the headers of the messages sent from two ranges, and the summary's;
   * receive buffer k at k * REPLY_SLOT. */
  unsigned char *outbox;
  header *headers;
  unsigned char *inbox;
  uint32_t outbox_id, headers_id, inbox_id;
  unsigned sent, completed, replies, duplicates, resumes;
  int have_board;
  relink_token board; /* the server's board, once it said where it is */
  int summary_sent, summary_done;
  uint64_t last_progress;
} client;

static void client_post_buffer(client *cl, unsigned k) {
  check(relink_post_receive(cl->node, cl->session, cl->inbox_id,
                            (uint64_t)k * REPLY_SLOT, REPLY_SLOT, k),
        "post a receive buffer");
}

static void client_start(client *cl, relink_node *n, const char *addr,
                         unsigned total) {
  memset(cl, 0, sizeof *cl);
  cl->node = n;
  cl->total = total;
  cl->outbox = registered(n, (size_t)(total + 1) * SLOT, 0, &cl->outbox_id,
                          "register the outbox");
  cl->headers = (header *)registered(n, (total + 1) * sizeof(header), 0,
                                     &cl->headers_id, "register the headers");
  cl->inbox = registered(n, INBOX * REPLY_SLOT, RELINK_ACCESS_LOCAL_WRITE,
                         &cl->inbox_id, "register the inbox");
  check(relink_connect(n, addr, NULL, NULL, &cl->session), "connect");
  /* Posted before the session is up: what the server sends fills them. */
  for (unsigned k = 0; k < INBOX; k++)
    client_post_buffer(cl, k);
  cl->last_progress = now_ms(n);
}

/* Send message i from registered memory, without a copy. */
static void client_send_message(client *cl, unsigned i) {
  unsigned char *slot = cl->outbox + (size_t)i * SLOT;
  relink_work_request wr = {.kind = RELINK_OP_KIND_MESSAGE, .context = i};
  relink_sge sgl[2];
  if (i % 2 == 0) {
    /* Header and text side by side in the outbox: one range. */
    size_t len = message_of(i, slot);
    wr.flags = RELINK_WR_FROM_REGION;
    wr.region = cl->outbox_id;
    wr.offset = (uint64_t)i * SLOT;
    wr.len = len;
  } else {
    /* The header in the headers array, the text in the outbox: two
     * ranges, sent one after the other as one message. */
    int len = text_of(i, (char *)slot, SLOT);
    cl->headers[i] = (header){MAGIC, (uint16_t)i, (uint32_t)len};
    sgl[0] = (relink_sge){cl->headers_id, (uint64_t)i * sizeof(header), sizeof(header)};
    sgl[1] = (relink_sge){cl->outbox_id, (uint64_t)i * SLOT, (uint32_t)len};
    wr.flags = RELINK_WR_SGL;
    wr.sgl = sgl;
    wr.num_sge = 2;
  }
  check(relink_post(cl->node, cl->session, &wr, NULL), "post a message");
  cl->sent++;
}

/* WRITE a summary into the server's board, gathered from two ranges, with
 * immediate data: the server is told once the bytes are there. */
static void client_send_summary(client *cl) {
  unsigned i = cl->total;
  char *text = (char *)cl->outbox + (size_t)i * SLOT;
  int len = summary_of(cl->total, text, SLOT);
  cl->headers[i] = (header){MAGIC, (uint16_t)i, (uint32_t)len};
  relink_sge sgl[2] = {
      {cl->headers_id, (uint64_t)i * sizeof(header), sizeof(header)},
      {cl->outbox_id, (uint64_t)i * SLOT, (uint32_t)len},
  };
  relink_work_request wr = {.kind = RELINK_OP_KIND_WRITE_IMM,
                            .flags = RELINK_WR_SGL,
                            .context = i,
                            .remote = cl->board,
                            .sgl = sgl,
                            .num_sge = 2,
                            .imm = cl->total};
  check(relink_post(cl->node, cl->session, &wr, NULL), "post the summary");
  cl->summary_sent = 1;
}

/* The server's first message: where its board is. */
static void client_take_note(client *cl, const unsigned char *at,
                             const relink_received *r) {
  char note[NOTE_LEN + 1];
  uint32_t region = 0;
  uint64_t offset = 0;
  if (r->len > NOTE_LEN || r->seq != 1)
    die("client", "the server's first message is not where its board is");
  memcpy(note, at, r->len);
  note[r->len] = 0;
  if (sscanf(note, "board %" SCNu32 " %" SCNu64, &region, &offset) != 2)
    die("client", "the server's first message is not where its board is");
  cl->board = (relink_token){.region = region, .offset = offset};
  cl->have_board = 1;
  printf("client: the server's board is registration %" PRIu32 " (%" PRIu32
         " bytes, seq %" PRIu64 ")\n",
         region, r->len, r->seq);
}

/* A reply: the next message's bytes, echoed after a reply header. */
static void client_take_reply(client *cl, unsigned k, const unsigned char *at,
                              const relink_received *r) {
  header h;
  if (r->truncated || r->len < sizeof h)
    die("client", "a reply too long or too short for its buffer");
  memcpy(&h, at, sizeof h);
  if (h.magic != REPLY_MAGIC || sizeof h + h.len != r->len || h.number >= cl->sent)
    die("client", "a reply that is not one the server sent");
  if (h.number < cl->replies) {
    /* Never happens: relink delivers each message once. */
    fprintf(stderr, "zero_copy: client: reply %u arrived twice\n", h.number);
    cl->duplicates++;
    return;
  }
  /* Seq 1 was the server's note: reply i is seq i + 2. */
  if (h.number != cl->replies || r->seq != (uint64_t)cl->replies + 2)
    die("client", "a reply out of order");
  unsigned char want[SLOT];
  size_t len = message_of(h.number, want);
  if (h.len != len || memcmp(at + sizeof h, want, len) != 0)
    die("client", "a reply does not echo its message's bytes");
  cl->replies++;
  cl->last_progress = now_ms(cl->node);
  printf("client: reply %u (%" PRIu32 " bytes, seq %" PRIu64 ") in buffer %u\n",
         h.number, r->len, r->seq, k);
}

/* Take what the client's node produced; send what is due. Returns 1 when
 * every reply came and the summary was delivered. */
static int client_step(client *cl) {
  relink_completion c;
  while (relink_poll_completion(cl->node, cl->session, &c) == RELINK_OK) {
    if (c.outcome != RELINK_OUTCOME_SUCCESS) {
      fprintf(stderr, "zero_copy: client: operation %" PRIu64 " ended %d (error %d)\n",
              c.context, (int)c.outcome, (int)c.error);
      exit(1);
    }
    /* Its bytes are the client's again from here. */
    if (c.kind == RELINK_OP_KIND_WRITE_IMM)
      cl->summary_done = 1;
    else
      cl->completed++;
  }
  relink_received r;
  while (relink_poll_received(cl->node, cl->session, &r) == RELINK_OK) {
    unsigned k = (unsigned)r.context;
    const unsigned char *at = cl->inbox + (size_t)k * REPLY_SLOT;
    if (r.outcome != RELINK_RECEIVE_MESSAGE)
      die("client", "a receive buffer ended without a message");
    if (!cl->have_board)
      client_take_note(cl, at, &r);
    else
      client_take_reply(cl, k, at, &r);
    /* Read: the buffer goes back to the inbox. */
    client_post_buffer(cl, k);
  }
  take_events(cl->node, cl->session, "client", &cl->resumes, NULL);
  while (cl->sent < cl->total && cl->sent - cl->replies < WINDOW)
    client_send_message(cl, cl->sent);
  if (cl->replies == cl->total && cl->have_board && !cl->summary_sent)
    client_send_summary(cl);
  if (now_ms(cl->node) - cl->last_progress > STALL_MS)
    die("client", "no reply for too long: stalled");
  return cl->summary_done && cl->completed == cl->total;
}

/* Print the client's counters and RESULT line, close the session; 1 if
 * all went well. */
static int client_finish(client *cl) {
  uint64_t send_copied = counter(cl->node, cl->session, RELINK_COUNTER_SEND_COPIED_BYTES);
  uint64_t receive_copied =
      counter(cl->node, cl->session, RELINK_COUNTER_RECEIVE_COPIED_BYTES);
  uint64_t replayed = counter(cl->node, cl->session, RELINK_COUNTER_REPLAYED);
  printf("client: %" PRIu64 " bytes copied to be sent (RELINK_COUNTER_SEND_COPIED_BYTES)"
         "; %" PRIu64 " bytes copied from the receive slots into the posted buffers "
         "(RELINK_COUNTER_RECEIVE_COPIED_BYTES)\n",
         send_copied, receive_copied);
  printf("RESULT role=client messages=%u replies=%u duplicates=%u summary=%d "
         "send_copied_bytes=%" PRIu64 " receive_copied_bytes=%" PRIu64
         " resumes=%u replayed=%" PRIu64 "\n",
         cl->total, cl->replies, cl->duplicates, cl->summary_done, send_copied,
         receive_copied, cl->resumes, replayed);
  check(relink_close(cl->node, cl->session), "close");
  /* Let the goodbye go out. */
  for (int i = 0; i < 50; i++) {
    int did = 0;
    check(relink_wait(cl->node, 10, &did), "wait");
  }
  return cl->replies == cl->total && cl->duplicates == 0 && cl->summary_done &&
         send_copied == 0;
}

/* ---- modes --------------------------------------------------------------- */

static int run_inproc(unsigned total) {
  relink_soft_fabric *f = NULL;
  check(relink_soft_fabric_new(11, &f), "fabric");
  check(relink_soft_fabric_add_device(f, "a", "soft0", "10.0.0.1/24"), "device a");
  check(relink_soft_fabric_add_device(f, "b", "soft0", "10.0.0.2/24"), "device b");
  relink_node *na = NULL, *nb = NULL;
  check(relink_node_new_soft(f, "a", &na), "node a");
  check(relink_node_new_soft(f, "b", &nb), "node b");
  static server sv;
  static client cl;
  server_start(&sv, nb, "10.0.0.2:7471");
  client_start(&cl, na, "10.0.0.2:7471", total);
  int reset_done = 0;
  for (;;) {
    int did = 0;
    /* Two nodes share this thread and the fabric's virtual clock: turns of
     * at most 1 ms each. */
    check(relink_wait(nb, 1, &did), "wait server");
    server_step(&sv);
    check(relink_wait(na, 1, &did), "wait client");
    if (client_step(&cl))
      break;
    if (!reset_done && cl.sent >= total / 2) {
      printf("client: resetting my device with %u messages in flight\n",
             cl.sent - cl.completed);
      check(relink_soft_fabric_fault(f, "a", "soft0", RELINK_FAULT_RESET), "reset");
      reset_done = 1;
    }
  }
  int ok = client_finish(&cl) && cl.resumes >= 1;
  /* The server sees the goodbye. */
  for (int i = 0; i < 1000 && !sv.closed; i++) {
    int did = 0;
    check(relink_wait(nb, 1, &did), "wait server");
    server_step(&sv);
  }
  ok = server_finish(&sv) && sv.received == total && ok;
  /* Freeing a node ends its sessions and gives its registered buffers
   * back: free them after. */
  relink_node_free(na);
  relink_node_free(nb);
  relink_soft_fabric_free(f);
  free(cl.outbox);
  free(cl.headers);
  free(cl.inbox);
  free(sv.ring);
  free(sv.reply_headers);
  free(sv.note);
  free(sv.board);
  return ok ? 0 : 1;
}

static int run_server(relink_node *n, const char *addr, const char *dir,
                      unsigned reset_after, const char *reset_device) {
  static server sv;
  server_start(&sv, n, addr);
  printf("server: listening on %s\n", addr);
  int reset_done = reset_device == NULL;
  while (!sv.closed) {
    int did = 0;
    check(relink_wait(n, 100, &did), "wait");
    server_step(&sv);
    if (!reset_done && sv.received >= reset_after) {
      printf("server: resetting my device %s\n", reset_device);
      check(relink_soft_device(dir, reset_device, RELINK_DEVICE_RESET), "reset");
      reset_done = 1;
    }
  }
  int ok = server_finish(&sv);
  relink_node_free(n);
  free(sv.ring);
  free(sv.reply_headers);
  free(sv.note);
  free(sv.board);
  return ok ? 0 : 1;
}

static int run_client(relink_node *n, const char *addr, unsigned total,
                      const char *dir, const char *reset_device) {
  static client cl;
  client_start(&cl, n, addr, total);
  int reset_done = reset_device == NULL;
  for (;;) {
    int did = 0;
    check(relink_wait(n, 100, &did), "wait");
    if (client_step(&cl))
      break;
    if (!reset_done && cl.sent >= total / 2) {
      printf("client: resetting my device %s with %u messages in flight\n",
             reset_device, cl.sent - cl.completed);
      check(relink_soft_device(dir, reset_device, RELINK_DEVICE_RESET), "reset");
      reset_done = 1;
    }
  }
  int ok = client_finish(&cl);
  relink_node_free(n);
  free(cl.outbox);
  free(cl.headers);
  free(cl.inbox);
  return ok ? 0 : 1;
}

static void usage(void) {
  fprintf(stderr,
          "usage: zero_copy [inproc [MESSAGES]]\n"
          "       zero_copy tcp DIR server ADDR [RESET_AFTER RESET_DEVICE]\n"
          "       zero_copy tcp DIR client ADDR MESSAGES [RESET_DEVICE]\n"
          "       zero_copy verbs server ADDR\n"
          "       zero_copy verbs client ADDR MESSAGES\n"
          "(MESSAGES: 2 to %d)\n",
          MAX_MESSAGES);
  exit(2);
}

static unsigned messages_arg(const char *arg) {
  unsigned long n = strtoul(arg, NULL, 10);
  if (n < 2 || n > MAX_MESSAGES)
    usage();
  return (unsigned)n;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 1)
    return run_inproc(24);
  if (strcmp(argv[1], "inproc") == 0 && argc <= 3)
    return run_inproc(argc == 3 ? messages_arg(argv[2]) : 24);
  relink_node *n = NULL;
  int arg = 2;
  const char *dir = NULL;
  if (argc > 3 && strcmp(argv[1], "tcp") == 0) {
    dir = argv[2];
    check(relink_node_new_tcp(dir, &n), "tcp node");
    arg = 3;
  } else if (argc > 2 && strcmp(argv[1], "verbs") == 0) {
    check(relink_node_new_verbs(&n), "verbs node");
  } else {
    usage();
  }
  if ((argc == arg + 2 || (dir && argc == arg + 4)) &&
      strcmp(argv[arg], "server") == 0)
    return run_server(n, argv[arg + 1], dir,
                      argc == arg + 4 ? (unsigned)strtoul(argv[arg + 2], NULL, 10) : 0,
                      argc == arg + 4 ? argv[arg + 3] : NULL);
  if ((argc == arg + 3 || (dir && argc == arg + 4)) &&
      strcmp(argv[arg], "client") == 0)
    return run_client(n, argv[arg + 1], messages_arg(argv[arg + 2]), dir,
                      argc == arg + 4 ? argv[arg + 3] : NULL);
  usage();
  return 2;
}
