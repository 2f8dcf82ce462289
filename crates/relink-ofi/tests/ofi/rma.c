/*
 * The project's own libfabric RMA check: an FI_EP_MSG client writes
 * rounds of checked bytes into the server's registered memory with
 * fi_writedata and fi_inject_writedata (the round number as remote CQ
 * data), the server verifies each round when its notice arrives, and the
 * client reads the last round back with fi_read; then the client counts
 * on a word of the server's with atomics (fi_fetch_atomic FI_SUM,
 * fi_compare_atomic FI_CSWAP, fi_atomic FI_SUM), one at a time, and the
 * server checks the word holds the client's count.
 *
 *   rma -s ADDR PORT ROUNDS     the server: listens at ADDR:PORT
 *   rma -c ADDR PORT ROUNDS [ATOMICS]
 *                               the client: connects to ADDR:PORT (ATOMICS
 *                               atomics after the rounds; default: as many
 *                               as rounds, at most 1000)
 *
 * What it asserts (exit 0 only if all hold): every round's notice arrives
 * exactly once and in order (remote CQ data 0, 1, 2, ...), with the
 * round's length, after the round's bytes landed; every non-inject write
 * completes once at the client; the read returns the last round's bytes.
 * Every fetched old value is the count so far (an atomic is never applied
 * twice); one that completes with FI_EIO may or may not have taken effect
 * (an atomic in flight when a connection is lost: nothing else is
 * honest), so the client reads the word (FI_ATOMIC_READ) and goes on from
 * there, checking it moved by one at most.
 * The client writes KSLOTS rounds into distinct slots and then waits for
 * the server's acknowledgement, so a slot is rewritten only after the
 * server checked it. The client prints its progress every 1000 rounds;
 * both print one summary line at the end ("rma client: ..." / "rma
 * server: ...").
 *
 * Any libfabric provider with FI_EP_MSG, FI_RMA, FI_ATOMIC (64-bit sum
 * and compare-and-swap) and remote CQ data runs
 * it; the tests name the relink provider (FI_PROVIDER=relink).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define KSLOTS 8
#define SLOT (64 * 1024)
#define MSG 64
/* The server's region: KSLOTS slots, then the atomics' word. */
#define COUNTER (KSLOTS * SLOT)
#define REGION (COUNTER + 4096)

static const size_t SIZES[] = {1, 64, 1000, 4096, 4097, 20000, SLOT};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])

static const char *role = "rma";

#define CHECK(call)                                                            \
	do {                                                                   \
		long _r = (long)(call);                                        \
		if (_r < 0) {                                                  \
			fprintf(stderr, "%s: %s:%d: %s: %s (%ld)\n", role,     \
				__FILE__, __LINE__, #call,                     \
				fi_strerror((int)-_r), _r);                    \
			exit(1);                                               \
		}                                                              \
	} while (0)

static void die(const char *what)
{
	fprintf(stderr, "%s: %s\n", role, what);
	exit(1);
}

static uint8_t pattern(uint64_t round, size_t i)
{
	return (uint8_t)(round * 131 + i * 7 + (i >> 8));
}

static size_t round_len(uint64_t round)
{
	return SIZES[round % NSIZES];
}

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_eq *eq;
static struct fid_ep *ep;
static struct fid_cq *cq;
static struct fi_info *info;

/* The next completion: 0, or a failed one's error (its entry in `err`). */
static int try_cq(struct fi_cq_data_entry *e, struct fi_cq_err_entry *err)
{
	for (;;) {
		ssize_t n = fi_cq_read(cq, e, 1);
		if (n == 1)
			return 0;
		if (n == -FI_EAGAIN)
			continue;
		if (n == -FI_EAVAIL) {
			memset(err, 0, sizeof *err);
			fi_cq_readerr(cq, err, 0);
			fprintf(stderr, "%s: a completion failed: %s (%s)\n",
				role, fi_strerror(err->err),
				fi_cq_strerror(cq, err->prov_errno, err->err_data,
					       NULL, 0));
			return err->err ? err->err : FI_EOTHER;
		}
		CHECK(n);
	}
}

/* The next completion; a failed one ends the program. */
static void next_cq(struct fi_cq_data_entry *e)
{
	struct fi_cq_err_entry err;
	if (try_cq(e, &err))
		exit(1);
}

static void expect_event(uint32_t want, void *entry, size_t len)
{
	uint32_t event;
	ssize_t n = fi_eq_sread(eq, &event, entry, len, 60000, 0);
	if (n == -FI_EAVAIL) {
		struct fi_eq_err_entry err = {0};
		fi_eq_readerr(eq, &err, 0);
		fprintf(stderr, "%s: connection error: %s\n", role,
			fi_strerror(err.err));
		exit(1);
	}
	CHECK(n);
	if (event != want) {
		fprintf(stderr, "%s: event %u, not %u\n", role, event, want);
		exit(1);
	}
}

static struct fid_mr *reg(void *buf, size_t len, uint64_t access)
{
	/* Keys of our choosing where the provider does not choose them. */
	static uint64_t next_key = 1;
	struct fid_mr *mr;
	CHECK(fi_mr_reg(domain, buf, len, access, 0, next_key++, 0, &mr, NULL));
	return mr;
}

static void open_ep(struct fi_info *fi)
{
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_DATA,
				     .wait_obj = FI_WAIT_NONE};
	CHECK(fi_domain(fabric, fi, &domain, NULL));
	CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHECK(fi_endpoint(domain, fi, &ep, NULL));
	CHECK(fi_ep_bind(ep, &eq->fid, 0));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_enable(ep));
}

/* A message of MSG bytes (the buffer registered by `mr`). */
static void send_msg(void *buf, struct fid_mr *mr)
{
	struct fi_cq_data_entry e;
	CHECK(fi_send(ep, buf, MSG, fi_mr_desc(mr), 0, buf));
	do
		next_cq(&e);
	while (!(e.flags & FI_SEND));
}

/* The server's state: notices checked, acknowledgements in flight. */
#define ACKS 4
static uint8_t *region, *acks;
static struct fid_mr *amr;
static uint64_t seen, bytes, acks_posted, acks_done, dones;

/* One completion at the server: a notice (checked), an acknowledgement
 * sent, or the client's "done". */
static void server_entry(const struct fi_cq_data_entry *e)
{
	if (e->flags & FI_SEND) {
		acks_done++;
		return;
	}
	if (e->flags & FI_RECV) {
		dones++;
		return;
	}
	if (!(e->flags & FI_REMOTE_CQ_DATA))
		return;
	if (!(e->flags & FI_REMOTE_WRITE) || e->data != (seen & 0xffffffff)) {
		fprintf(stderr,
			"server: notice %" PRIu64 " has data %" PRIu64
			" (flags %#" PRIx64 "): lost, repeated or out of order\n",
			seen, (uint64_t)e->data, (uint64_t)e->flags);
		exit(1);
	}
	size_t len = round_len(seen);
	/* fi_cq(3): the length of the write; libfabric 1.17's tcp provider
	 * leaves it 0. */
	if (e->len != len && !(e->len == 0 && getenv("RMA_LEN_MAY_BE_0"))) {
		fprintf(stderr, "server: round %" PRIu64 " said %zu bytes, not %zu\n",
			seen, e->len, len);
		exit(1);
	}
	const uint8_t *slot = region + (seen % KSLOTS) * SLOT;
	for (size_t i = 0; i < len; i++)
		if (slot[i] != pattern(seen, i)) {
			fprintf(stderr,
				"server: round %" PRIu64 " byte %zu is %u, not %u\n",
				seen, i, slot[i], pattern(seen, i));
			exit(1);
		}
	bytes += len;
	seen++;
}

/* Send `a` and `b` (8 bytes each, in a message of MSG) from the next
 * free ack buffer, without waiting for its completion. */
static void server_ack(uint64_t a, uint64_t b)
{
	struct fi_cq_data_entry e;
	while (acks_posted - acks_done >= ACKS) {
		next_cq(&e);
		server_entry(&e);
	}
	uint8_t *buf = acks + (acks_posted % ACKS) * MSG;
	memset(buf, 0, MSG);
	memcpy(buf, &a, 8);
	memcpy(buf + 8, &b, 8);
	CHECK(fi_send(ep, buf, MSG, fi_mr_desc(amr), 0, buf));
	acks_posted++;
}

static void server(uint64_t rounds)
{
	struct fid_pep *pep;
	struct fi_eq_cm_entry cm;
	struct fi_eq_attr eq_attr = {.wait_obj = FI_WAIT_UNSPEC};
	region = aligned_alloc(4096, REGION);
	acks = aligned_alloc(4096, (ACKS + 1) * MSG);
	if (!region || !acks)
		die("out of memory");
	memset(region, 0, REGION);

	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	CHECK(fi_passive_ep(fabric, info, &pep, NULL));
	CHECK(fi_pep_bind(pep, &eq->fid, 0));
	CHECK(fi_listen(pep));
	expect_event(FI_CONNREQ, &cm, sizeof cm);
	struct fi_info *req = cm.info;
	open_ep(req);
	struct fid_mr *rmr = reg(region, REGION,
				 FI_REMOTE_WRITE | FI_REMOTE_READ);
	amr = reg(acks, (ACKS + 1) * MSG, FI_SEND | FI_RECV);
	uint8_t *done = acks + ACKS * MSG;
	CHECK(fi_recv(ep, done, MSG, fi_mr_desc(amr), 0, done));
	CHECK(fi_accept(ep, NULL, 0));
	expect_event(FI_CONNECTED, &cm, sizeof cm);

	/* The region's address (FI_MR_VIRT_ADDR: the peer writes there by
	 * address, else by offset) and key, in the first message. */
	uint64_t base = (req->domain_attr->mr_mode & FI_MR_VIRT_ADDR)
				? (uint64_t)(uintptr_t)region
				: 0;
	fi_freeinfo(req);
	uint64_t key = fi_mr_key(rmr);
	server_ack(base, key);

	struct fi_cq_data_entry e;
	while (seen < rounds) {
		uint64_t before = seen;
		next_cq(&e);
		server_entry(&e);
		if (seen != before && (seen % KSLOTS == 0 || seen == rounds))
			server_ack(seen, 0);
	}
	/* The client's read and atomics, then its "done" with its count. */
	while (dones == 0) {
		next_cq(&e);
		server_entry(&e);
	}
	uint64_t counted, word;
	memcpy(&counted, done, 8);
	memcpy(&word, region + COUNTER, 8);
	if (word != counted) {
		fprintf(stderr, "server: the atomics' word is %" PRIu64
			", the client counted %" PRIu64 "\n", word, counted);
		exit(1);
	}
	printf("rma server: %" PRIu64 " notices once each and in order, %" PRIu64
	       " bytes checked; the atomics' word is %" PRIu64 " as counted\n",
	       seen, bytes, word);
	fflush(stdout);
	fi_close(&ep->fid);
	fi_close(&rmr->fid);
	fi_close(&amr->fid);
	fi_close(&cq->fid);
	fi_close(&pep->fid);
	fi_close(&eq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
}

static void client(uint64_t rounds, uint64_t atomics)
{
	struct fi_eq_cm_entry cm;
	struct fi_eq_attr eq_attr = {.wait_obj = FI_WAIT_UNSPEC};
	uint8_t *src = aligned_alloc(4096, KSLOTS * SLOT);
	uint8_t *back = aligned_alloc(4096, SLOT);
	uint8_t *msg = aligned_alloc(4096, MSG);
	if (!src || !back || !msg)
		die("out of memory");

	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	open_ep(info);
	struct fid_mr *smr = reg(src, KSLOTS * SLOT, FI_WRITE);
	struct fid_mr *bmr = reg(back, SLOT, FI_READ | FI_WRITE);
	struct fid_mr *mmr = reg(msg, MSG, FI_SEND | FI_RECV);
	CHECK(fi_recv(ep, msg, MSG, fi_mr_desc(mmr), 0, msg));
	CHECK(fi_connect(ep, info->dest_addr, NULL, 0));
	expect_event(FI_CONNECTED, &cm, sizeof cm);

	struct fi_cq_data_entry e;
	do
		next_cq(&e);
	while (!(e.flags & FI_RECV));
	uint64_t base, key;
	memcpy(&base, msg, 8);
	memcpy(&key, msg + 8, 8);
	CHECK(fi_recv(ep, msg, MSG, fi_mr_desc(mmr), 0, msg));

	size_t inject = info->tx_attr->inject_size;
	uint64_t injected = 0, completed = 0, posted = 0, bytes = 0;
	for (uint64_t r = 0; r < rounds; r++) {
		size_t len = round_len(r);
		uint8_t *slot = src + (r % KSLOTS) * SLOT;
		for (size_t i = 0; i < len; i++)
			slot[i] = pattern(r, i);
		uint64_t at = base + (r % KSLOTS) * SLOT;
		for (;;) {
			ssize_t n;
			if (len <= inject && r % 2 == 0)
				n = fi_inject_writedata(ep, slot, len, r, 0, at, key);
			else
				n = fi_writedata(ep, slot, len, fi_mr_desc(smr), r, 0,
						 at, key, slot);
			if (n == -FI_EAGAIN) {
				/* Queues full: take completions, try again. */
				if (fi_cq_read(cq, &e, 1) == 1 && (e.flags & FI_WRITE))
					completed++;
				continue;
			}
			CHECK(n);
			break;
		}
		if (len <= inject && r % 2 == 0)
			injected++;
		else
			posted++;
		bytes += len;
		if ((r + 1) % 1000 == 0) {
			printf("rma client: %" PRIu64 " rounds written\n", r + 1);
			fflush(stdout);
		}
		if ((r + 1) % KSLOTS == 0 || r + 1 == rounds) {
			/* The server's acknowledgement of every round so far:
			 * the slots are free to write again. */
			uint64_t acked = 0;
			while (acked != r + 1) {
				next_cq(&e);
				if (e.flags & FI_WRITE) {
					completed++;
				} else if (e.flags & FI_RECV) {
					memcpy(&acked, msg, 8);
					if (acked != r + 1) {
						fprintf(stderr, "client: acknowledged %" PRIu64
							", not %" PRIu64 "\n", acked, r + 1);
						exit(1);
					}
					CHECK(fi_recv(ep, msg, MSG, fi_mr_desc(mmr), 0, msg));
				}
			}
		}
	}
	while (completed < posted) {
		next_cq(&e);
		if (e.flags & FI_WRITE)
			completed++;
	}
	if (completed != posted) {
		fprintf(stderr, "client: %" PRIu64 " write completions for %" PRIu64
			" writes\n", completed, posted);
		exit(1);
	}

	/* Read the last round back. */
	uint64_t last = rounds - 1;
	size_t len = round_len(last);
	CHECK(fi_read(ep, back, len, fi_mr_desc(bmr), 0,
		      base + (last % KSLOTS) * SLOT, key, back));
	do
		next_cq(&e);
	while (!(e.flags & FI_READ));
	for (size_t i = 0; i < len; i++)
		if (back[i] != pattern(last, i)) {
			fprintf(stderr, "client: read-back byte %zu is %u, not %u\n",
				i, back[i], pattern(last, i));
			exit(1);
		}

	/* Atomics, one at a time, on the server's word (0 at the start). */
	uint64_t count = 0, unsure = 0;
	printf("rma client: %" PRIu64 " atomics begin\n", atomics);
	fflush(stdout);
	uint64_t *old = (uint64_t *)back, one = 1;
	uint64_t word_at = base + COUNTER;
	for (uint64_t a = 0; a < atomics; a++) {
		int kind = a % 3;
		for (;;) {
			ssize_t n;
			*old = UINT64_MAX;
			if (kind == 0)
				n = fi_fetch_atomic(ep, &one, 1, NULL, old, fi_mr_desc(bmr), 0,
						    word_at, key, FI_UINT64, FI_SUM, old);
			else if (kind == 1) {
				uint64_t next = count + 1;
				n = fi_compare_atomic(ep, &next, 1, NULL, &count, NULL, old,
						      fi_mr_desc(bmr), 0, word_at, key,
						      FI_UINT64, FI_CSWAP, old);
			} else
				n = fi_atomic(ep, &one, 1, NULL, 0, word_at, key, FI_UINT64,
					      FI_SUM, old);
			if (n == -FI_EAGAIN) {
				fi_cq_read(cq, &e, 0);
				continue;
			}
			CHECK(n);
			break;
		}
		struct fi_cq_err_entry err;
		int r = try_cq(&e, &err);
		if (r == 0) {
			if (kind != 2 && *old != count) {
				fprintf(stderr, "client: atomic %" PRIu64 " fetched %" PRIu64
					", the count is %" PRIu64 ": lost or applied twice\n",
					a, *old, count);
				exit(1);
			}
			count++;
			continue;
		}
		if (r != FI_EIO)
			exit(1);
		/* Indeterminate: read the word until a read completes. */
		unsure++;
		for (;;) {
			CHECK(fi_fetch_atomic(ep, NULL, 1, NULL, old, fi_mr_desc(bmr), 0,
					      word_at, key, FI_UINT64, FI_ATOMIC_READ, old));
			if (try_cq(&e, &err) == 0)
				break;
		}
		if (*old != count && *old != count + 1) {
			fprintf(stderr, "client: after an indeterminate atomic the word is %"
				PRIu64 ", the count %" PRIu64 "\n", *old, count);
			exit(1);
		}
		count = *old;
	}
	memset(msg, 0, MSG);
	memcpy(msg, &count, 8);
	send_msg(msg, mmr);
	printf("rma client: %" PRIu64 " rounds (%" PRIu64 " fi_writedata, %" PRIu64
	       " fi_inject_writedata), %" PRIu64 " bytes, %" PRIu64
	       " write completions, read-back checked; %" PRIu64 " atomics (%" PRIu64
	       " indeterminate), count %" PRIu64 "\n",
	       rounds, posted, injected, bytes, completed, atomics, unsure, count);
	fflush(stdout);
	fi_close(&ep->fid);
	fi_close(&smr->fid);
	fi_close(&bmr->fid);
	fi_close(&mmr->fid);
	fi_close(&cq->fid);
	fi_close(&eq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
}

int main(int argc, char **argv)
{
	if (argc < 5 || argc > 6 || (strcmp(argv[1], "-s") && strcmp(argv[1], "-c"))) {
		fprintf(stderr, "usage: rma -s ADDR PORT ROUNDS | rma -c ADDR PORT ROUNDS [ATOMICS]\n");
		return 2;
	}
	int is_server = !strcmp(argv[1], "-s");
	role = is_server ? "server" : "client";
	uint64_t rounds = strtoull(argv[4], NULL, 10);
	if (rounds == 0)
		die("ROUNDS must be at least 1");
	uint64_t atomics = argc == 6 ? strtoull(argv[5], NULL, 10) : (rounds < 1000 ? rounds : 1000);
	alarm(600);

	struct fi_info *hints = fi_allocinfo();
	if (!hints)
		die("fi_allocinfo");
	hints->caps = FI_MSG | FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE |
		      FI_REMOTE_READ | FI_REMOTE_WRITE;
	hints->ep_attr->type = FI_EP_MSG;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
				      FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->domain_attr->cq_data_size = 4;
	hints->mode = FI_CONTEXT;
	/* A send completes once the peer has the message: the client's last
	 * message is delivered before it exits. */
	hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
	hints->addr_format = FI_SOCKADDR_IN;
	CHECK(fi_getinfo(FI_VERSION(1, 17), argv[2], argv[3],
			 is_server ? FI_SOURCE : 0, hints, &info));
	fi_freeinfo(hints);
	if (is_server)
		server(rounds);
	else
		client(rounds, atomics);
	fi_freeinfo(info);
	return 0;
}
