/*
 * ping_pong — a C program on librelink: a client sends numbered 64-byte
 * pings, a server answers each with a pong; every 50th round the client
 * first RDMA WRITEs the round number into the server's advertised region,
 * and the server puts what its region holds into the pong. Devices are
 * reset, unplugged or replaced in the middle; nothing here retries or
 * re-sends. The client checks that every pong comes exactly once, in
 * order, with the right number and the right written value, and that every
 * operation completed successfully.
 *
 * Build (librelink installed, or see `examples/c/README.md`):
 *     cc -o ping_pong ping_pong.c $(pkg-config --cflags --libs relink)
 *
 * It includes relink.h, the API, and relink_soft.h, the soft fabric's
 * fault hooks, with which the inproc and tcp modes reset and replace their
 * own devices (librelink has them unless built without its default `soft`
 * feature). The verbs mode calls no hook: on RDMA devices, faults come
 * from outside.
 *
 * Run:
 *     ping_pong inproc ROUNDS
 *         both nodes in this process on the in-process soft fabric; the
 *         server's device is reset at a third of the rounds and the
 *         client's replaced at two thirds.
 *     ping_pong tcp DIR server ADDR [RESET_AFTER RESET_DEVICE]
 *     ping_pong tcp DIR client ADDR ROUNDS [RESET_DEVICE]
 *         two processes on the TCP soft fabric, DIR being each one's soft
 *         device directory; the server resets its own soft device
 *         RESET_DEVICE after answering RESET_AFTER pings, the client its
 *         own halfway (if given); `relink soft-device` may reset, remove or
 *         replace either at any time.
 *     ping_pong verbs server ADDR
 *     ping_pong verbs client ADDR ROUNDS
 *         on RDMA devices through rdma-core (e.g. rxe); reset them with
 *         `rdma link delete/add` while it runs.
 *
 * The client exits 0 when all ROUNDS were answered correctly and prints
 * `RESULT rounds=... resumes=... replayed=...`; the server exits 0 when its
 * client closed the session after answering everything.
 */
#include <relink.h>
/* relink_soft_fabric_fault and relink_soft_device, for the soft modes. */
#include <relink_soft.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MSG 64
#define REGION 1
#define HELLO "ping_pong client"
#define WRITE_EVERY 50
/* Give up (as a test failure) if no progress for this long, in ms of the
 * node's clock. */
#define STALL_MS 120000

static void check(relink_status st, const char *what) {
  if (st < 0) {
    fprintf(stderr, "ping_pong: %s: %s: %s\n", what, relink_status_name(st),
            relink_last_error());
    exit(1);
  }
}

static uint64_t now_ms(relink_node *n) {
  uint64_t ns = 0;
  check(relink_now_ns(n, &ns), "now");
  return ns / 1000000;
}

/* Print a session's events; count resumes. */
static int drain_events(relink_node *n, relink_session s, const char *who,
                        int *disconnected) {
  relink_event ev;
  int resumes = 0;
  while (relink_poll_event(n, s, &ev) == RELINK_OK) {
    if (ev.kind != RELINK_EVENT_TRANSITION)
      printf("%s: %s\n", who, ev.text);
    if (ev.kind == RELINK_EVENT_RESUMED)
      resumes++;
    if (ev.kind == RELINK_EVENT_DISCONNECTED && disconnected)
      *disconnected = 1;
    if (ev.kind == RELINK_EVENT_GAVE_UP || ev.kind == RELINK_EVENT_PEER_LOST) {
      fprintf(stderr, "ping_pong: %s: session ended: %s\n", who, ev.text);
      exit(1);
    }
  }
  return resumes;
}

/* Every completion must be a success. */
static void drain_completions(relink_node *n, relink_session s, const char *who,
                              relink_op *last, int *last_done) {
  relink_completion c;
  while (relink_poll_completion(n, s, &c) == RELINK_OK) {
    if (c.outcome != RELINK_OUTCOME_SUCCESS) {
      fprintf(stderr, "ping_pong: %s: operation %" PRIu64 " ended %d (error %d)\n",
              who, c.op, (int)c.outcome, (int)c.error);
      exit(1);
    }
    if (last && last_done && c.op == *last)
      *last_done = 1;
  }
}

/* ---- server ------------------------------------------------------------ */

typedef struct {
  relink_node *node;
  relink_session session;
  int have_session;
  int disconnected;
  uint64_t answered;
} server;

static relink_options *server_options(void) {
  relink_options *o = NULL;
  check(relink_options_new(&o), "options");
  check(relink_options_add_region(o, REGION, 4096,
                                  RELINK_ACCESS_LOCAL_WRITE |
                                      RELINK_ACCESS_REMOTE_WRITE,
                                  1),
        "region");
  return o;
}

static void server_start(server *sv, relink_node *n, const char *addr) {
  memset(sv, 0, sizeof *sv);
  sv->node = n;
  relink_options *o = server_options();
  relink_listener l;
  check(relink_listen(n, addr, o, &l), "listen");
  relink_options_free(o);
}

/* Answer one ping. */
static void server_answer(server *sv, const char *buf, size_t len, uint64_t seq) {
  if (len != MSG || memcmp(buf, "ping ", 5) != 0) {
    fprintf(stderr, "ping_pong: server: bad message %" PRIu64 "\n", seq);
    exit(1);
  }
  uint64_t written = 0;
  check(relink_region_read(sv->node, sv->session, REGION, 0,
                           &written, sizeof written),
        "region read");
  char reply[MSG];
  memset(reply, 0, sizeof reply);
  snprintf(reply, sizeof reply, "pong %.20s %" PRIu64, buf + 5, written);
  check(relink_send(sv->node, sv->session, reply, MSG, NULL),
        "send pong");
  sv->answered++;
}

/* Take everything the server's node produced, of every session, with the
 * node-wide poll: the accepted session (and the client's connect data),
 * its pings, completions and events. */
static void server_step(server *sv) {
  relink_output o;
  char buf[MSG];
  relink_status st;
  while ((st = relink_poll_output(sv->node, &o, buf, sizeof buf)) == RELINK_OK) {
    switch (o.kind) {
    case RELINK_OUTPUT_ACCEPTED:
      if (sv->have_session || o.accepted.connect_data_len != strlen(HELLO) ||
          memcmp(o.accepted.connect_data, HELLO, strlen(HELLO)) != 0) {
        fprintf(stderr, "ping_pong: server: unexpected session from %s\n",
                o.accepted.peer);
        exit(1);
      }
      printf("server: accepted %s (\"%.*s\")\n", o.accepted.peer,
             (int)o.accepted.connect_data_len,
             (const char *)o.accepted.connect_data);
      sv->session = o.session;
      sv->have_session = 1;
      break;
    case RELINK_OUTPUT_DELIVERY:
      server_answer(sv, buf, o.len, o.seq);
      break;
    case RELINK_OUTPUT_COMPLETION:
      if (o.completion.outcome != RELINK_OUTCOME_SUCCESS) {
        fprintf(stderr, "ping_pong: server: a pong ended %d\n",
                (int)o.completion.outcome);
        exit(1);
      }
      break;
    case RELINK_OUTPUT_EVENT:
      if (o.event.kind != RELINK_EVENT_TRANSITION)
        printf("server: %s\n", o.event.text);
      if (o.event.kind == RELINK_EVENT_DISCONNECTED)
        sv->disconnected = 1;
      if (o.event.kind == RELINK_EVENT_GAVE_UP ||
          o.event.kind == RELINK_EVENT_PEER_LOST) {
        fprintf(stderr, "ping_pong: server: session ended: %s\n", o.event.text);
        exit(1);
      }
      break;
    default:
      break;
    }
  }
  check(st, "poll output");
}

/* ---- client ------------------------------------------------------------ */

typedef struct {
  relink_node *node;
  relink_session session;
  uint64_t rounds, sent, answered;
  int in_flight; /* a ping is out */
  relink_op write_op;
  int write_pending, write_done;
  int resumes;
  uint64_t last_progress;
} client;

static void client_start(client *cl, relink_node *n, const char *peer,
                         uint64_t rounds) {
  memset(cl, 0, sizeof *cl);
  cl->node = n;
  cl->rounds = rounds;
  relink_options *o = NULL;
  check(relink_options_new(&o), "options");
  check(relink_options_add_region(o, REGION, 4096, RELINK_ACCESS_LOCAL_WRITE, 0),
        "region");
  check(relink_options_set_connect_data(o, HELLO, strlen(HELLO)), "connect data");
  check(relink_connect(n, peer, NULL, o, &cl->session), "connect");
  relink_options_free(o);
  cl->last_progress = now_ms(n);
}

static void client_send_ping(client *cl) {
  char msg[MSG];
  memset(msg, 0, sizeof msg);
  snprintf(msg, sizeof msg, "ping %" PRIu64, cl->sent + 1);
  check(relink_send(cl->node, cl->session, msg, MSG, NULL),
        "send ping");
  cl->sent++;
  cl->in_flight = 1;
}

/* Take what the client's node produced; send the next ping when due.
 * Returns 1 when all rounds are answered. */
static int client_step(client *cl) {
  relink_node *n = cl->node;
  drain_completions(n, cl->session, "client", &cl->write_op, &cl->write_done);
  cl->resumes += drain_events(n, cl->session, "client", NULL);
  char buf[MSG];
  size_t len = 0;
  relink_status st;
  while ((st = relink_poll_delivery(n, cl->session, buf, sizeof buf, &len,
                                    NULL)) == RELINK_OK) {
    uint64_t round = 0, value = 0;
    if (len != MSG ||
        sscanf(buf, "pong %" SCNu64 " %" SCNu64, &round, &value) != 2 ||
        round != cl->answered + 1 || !cl->in_flight) {
      fprintf(stderr, "ping_pong: client: pong %.30s, expected round %" PRIu64 "\n",
              buf, cl->answered + 1);
      exit(1);
    }
    uint64_t expect = (round / WRITE_EVERY) * WRITE_EVERY;
    if (value != expect) {
      fprintf(stderr,
              "ping_pong: client: round %" PRIu64 ": the server's region holds %"
              PRIu64 ", the last write put %" PRIu64 "\n",
              round, value, expect);
      exit(1);
    }
    cl->answered++;
    cl->in_flight = 0;
    if (cl->answered % 1000 == 0)
      printf("client: answered %" PRIu64 "\n", cl->answered);
    cl->last_progress = now_ms(n);
  }
  check(st, "poll delivery");
  if (cl->answered == cl->rounds)
    return 1;
  if (!cl->in_flight) {
    uint64_t next = cl->sent + 1;
    if (next % WRITE_EVERY == 0 && !cl->write_done) {
      /* Write the round number into the server's region, then ping once
       * the write completed. */
      if (!cl->write_pending) {
        check(relink_region_write(n, cl->session, REGION, 0,
                                  &next, sizeof next),
              "region write");
        relink_token t = {REGION, 0};
        check(relink_write(n, cl->session, REGION, 0, sizeof next, t,
                           &cl->write_op),
              "write");
        cl->write_pending = 1;
      }
    } else {
      client_send_ping(cl);
      cl->write_pending = 0;
      cl->write_done = 0;
    }
  }
  if (now_ms(n) - cl->last_progress > STALL_MS) {
    fprintf(stderr, "ping_pong: client: no pong for %d ms at round %" PRIu64 "\n",
            STALL_MS, cl->answered + 1);
    exit(1);
  }
  return 0;
}

static void client_finish(client *cl) {
  relink_counters c;
  check(relink_session_counters(cl->node, cl->session, &c), "counters");
  check(relink_close(cl->node, cl->session), "close");
  /* Let the goodbye go out. */
  for (int i = 0; i < 50; i++) {
    int did = 0;
    check(relink_wait(cl->node, 10, &did), "wait");
  }
  printf("RESULT rounds=%" PRIu64 " resumes=%" PRIu64 " replayed=%" PRIu64
         " downtime_ms=%" PRIu64 "\n",
         cl->answered, c.resumes, c.replayed, c.downtime_ns / 1000000);
}

/* ---- modes ------------------------------------------------------------- */

static int run_inproc(uint64_t rounds) {
  relink_soft_fabric *f = NULL;
  check(relink_soft_fabric_new(7, &f), "fabric");
  check(relink_soft_fabric_add_device(f, "a", "soft0", "10.0.0.1/24"), "device a");
  check(relink_soft_fabric_add_device(f, "b", "soft0", "10.0.0.2/24"), "device b");
  relink_node *na = NULL, *nb = NULL;
  check(relink_node_new_soft(f, "a", &na), "node a");
  check(relink_node_new_soft(f, "b", &nb), "node b");
  server sv;
  client cl;
  server_start(&sv, nb, "10.0.0.2:7471");
  client_start(&cl, na, "10.0.0.2:7471", rounds);
  int reset_done = 0, replace_done = 0;
  for (;;) {
    int did = 0;
    /* Two nodes share this thread and the fabric's virtual clock: turns
     * of at most 1 ms each. */
    check(relink_wait(nb, 1, &did), "wait server");
    server_step(&sv);
    check(relink_wait(na, 1, &did), "wait client");
    if (client_step(&cl))
      break;
    if (!reset_done && cl.answered >= rounds / 3) {
      printf("inproc: resetting the server's device\n");
      check(relink_soft_fabric_fault(f, "b", "soft0", RELINK_FAULT_RESET), "reset");
      reset_done = 1;
    }
    if (!replace_done && cl.answered >= 2 * rounds / 3) {
      printf("inproc: replacing the client's device\n");
      check(relink_soft_fabric_fault(f, "a", "soft0", RELINK_FAULT_REPLACE),
            "replace");
      replace_done = 1;
    }
  }
  client_finish(&cl);
  /* The server sees the goodbye. */
  for (int i = 0; i < 1000 && !sv.disconnected; i++) {
    int did = 0;
    check(relink_wait(nb, 1, &did), "wait server");
    server_step(&sv);
  }
  if (!sv.disconnected || sv.answered != rounds) {
    fprintf(stderr, "ping_pong: server: answered %" PRIu64 ", closed %d\n",
            sv.answered, sv.disconnected);
    return 1;
  }
  if (cl.resumes < 2) {
    fprintf(stderr, "ping_pong: client resumed %d times, expected 2\n", cl.resumes);
    return 1;
  }
  relink_node_free(na);
  relink_node_free(nb);
  relink_soft_fabric_free(f);
  return 0;
}

static int run_server(relink_node *n, const char *addr, const char *dir,
                      uint64_t reset_after, const char *reset_device) {
  server sv;
  server_start(&sv, n, addr);
  printf("server: listening on %s\n", addr);
  int reset_done = reset_device == NULL;
  while (!sv.disconnected) {
    int did = 0;
    check(relink_wait(n, 100, &did), "wait");
    server_step(&sv);
    if (!reset_done && sv.answered >= reset_after) {
      printf("server: resetting my device %s\n", reset_device);
      check(relink_soft_device(dir, reset_device, RELINK_DEVICE_RESET), "reset");
      reset_done = 1;
    }
  }
  printf("RESULT role=server answered=%" PRIu64 "\n", sv.answered);
  relink_node_free(n);
  return 0;
}

static int run_client(relink_node *n, const char *addr, uint64_t rounds,
                      const char *dir, const char *reset_device) {
  client cl;
  client_start(&cl, n, addr, rounds);
  int reset_done = reset_device == NULL;
  for (;;) {
    int did = 0;
    check(relink_wait(n, 100, &did), "wait");
    if (client_step(&cl))
      break;
    if (!reset_done && cl.answered >= rounds / 2) {
      printf("client: resetting my device %s\n", reset_device);
      check(relink_soft_device(dir, reset_device, RELINK_DEVICE_RESET), "reset");
      reset_done = 1;
    }
  }
  client_finish(&cl);
  relink_node_free(n);
  return 0;
}

static void usage(void) {
  fprintf(stderr, "usage: ping_pong inproc ROUNDS\n"
                  "       ping_pong tcp DIR server ADDR [RESET_AFTER RESET_DEVICE]\n"
                  "       ping_pong tcp DIR client ADDR ROUNDS [RESET_DEVICE]\n"
                  "       ping_pong verbs server ADDR\n"
                  "       ping_pong verbs client ADDR ROUNDS\n");
  exit(2);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 3 && strcmp(argv[1], "inproc") == 0)
    return run_inproc(strtoull(argv[2], NULL, 10));
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
                      argc == arg + 4 ? strtoull(argv[arg + 2], NULL, 10) : 0,
                      argc == arg + 4 ? argv[arg + 3] : NULL);
  if ((argc == arg + 3 || argc == arg + 4) && strcmp(argv[arg], "client") == 0)
    return run_client(n, argv[arg + 1], strtoull(argv[arg + 2], NULL, 10), dir,
                      argc == arg + 4 ? argv[arg + 3] : NULL);
  usage();
  return 2;
}
