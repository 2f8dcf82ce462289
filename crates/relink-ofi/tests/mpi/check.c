/*
 * relink's checked MPI program: rounds of ping-pong, allreduce, alltoall,
 * large messages and many outstanding nonblocking messages, every payload
 * made from (round, ranks, index) and verified on arrival. It runs rounds
 * until SECONDS passed (rank 0 decides, so every rank runs the same
 * rounds), then prints one line per rank:
 *
 *   check: rank R of N: OK, ROUNDS rounds, BYTES bytes checked
 *
 * and exits 0 (after MPI_Init each rank says "check: rank R of N:
 * running"); at the first wrong byte it prints what and where and calls
 * MPI_Abort. Usage: check [SECONDS] (default 5).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;
static uint64_t checked;

/* The byte at index i of the payload of (round, from, to, tag). */
static unsigned char pattern(int round, int from, int to, int tag, size_t i)
{
    uint64_t x = (uint64_t)round * 1000003u + (uint64_t)from * 7919u +
                 (uint64_t)to * 104729u + (uint64_t)tag * 31u + i;
    x ^= x >> 13;
    x *= 0x9E3779B97F4A7C15ull;
    return (unsigned char)(x >> 56);
}

static void fill(unsigned char *b, size_t n, int round, int from, int to, int tag)
{
    for (size_t i = 0; i < n; i++)
        b[i] = pattern(round, from, to, tag, i);
}

static void verify(const char *what, const unsigned char *b, size_t n, int round,
                   int from, int to, int tag)
{
    for (size_t i = 0; i < n; i++) {
        if (b[i] != pattern(round, from, to, tag, i)) {
            fprintf(stderr,
                    "check: rank %d: %s: round %d from %d tag %d: byte %zu of %zu is %u, "
                    "expected %u\n",
                    rank, what, round, from, tag, i, n, b[i],
                    pattern(round, from, to, tag, i));
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    checked += n;
}

/* Rank 0 and each other rank: a message there and its echo back, for each
 * size. */
static void pingpong(int round, unsigned char *a, unsigned char *b)
{
    static const size_t sizes[] = {8, 1024, 16384, 65536, 1 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        for (int peer = 1; peer < size; peer++) {
            if (rank == 0) {
                fill(a, n, round, 0, peer, (int)s);
                MPI_Send(a, (int)n, MPI_BYTE, peer, (int)s, MPI_COMM_WORLD);
                MPI_Recv(b, (int)n, MPI_BYTE, peer, (int)s, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                verify("pingpong echo", b, n, round, peer, 0, (int)s);
            } else if (rank == peer) {
                MPI_Recv(b, (int)n, MPI_BYTE, 0, (int)s, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                verify("pingpong", b, n, round, 0, peer, (int)s);
                fill(a, n, round, peer, 0, (int)s);
                MPI_Send(a, (int)n, MPI_BYTE, 0, (int)s, MPI_COMM_WORLD);
            }
        }
    }
}

static void allreduce(int round)
{
    enum { N = 4096 };
    static int64_t in[N], out[N];
    for (int i = 0; i < N; i++)
        in[i] = (int64_t)round * 1000 + rank * 7 + i;
    MPI_Allreduce(in, out, N, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < N; i++) {
        int64_t want = 0;
        for (int r = 0; r < size; r++)
            want += (int64_t)round * 1000 + r * 7 + i;
        if (out[i] != want) {
            fprintf(stderr, "check: rank %d: allreduce round %d: [%d] is %lld, expected %lld\n",
                    rank, round, i, (long long)out[i], (long long)want);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    checked += sizeof out;
}

static void alltoall(int round, unsigned char *a, unsigned char *b)
{
    const size_t block = 32768;
    for (int to = 0; to < size; to++)
        fill(a + to * block, block, round, rank, to, 100);
    MPI_Alltoall(a, (int)block, MPI_BYTE, b, (int)block, MPI_BYTE, MPI_COMM_WORLD);
    for (int from = 0; from < size; from++)
        verify("alltoall", b + from * block, block, round, from, rank, 100);
}

/* A large message each way between neighbours (a rendezvous). */
static void large(int round, unsigned char *a, unsigned char *b)
{
    const size_t n = 4u << 20;
    int to = (rank + 1) % size, from = (rank + size - 1) % size;
    fill(a, n, round, rank, to, 200);
    MPI_Sendrecv(a, (int)n, MPI_BYTE, to, 200, b, (int)n, MPI_BYTE, from, 200, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    verify("large", b, n, round, from, rank, 200);
}

/* K nonblocking messages to and from every other rank at once. */
static void outstanding(int round, unsigned char *a, unsigned char *b)
{
    enum { K = 64 };
    const size_t n = 2048;
    int peers = size - 1, q = 0;
    MPI_Request *req = malloc(sizeof(MPI_Request) * 2 * K * (size_t)peers);
    for (int p = 0; p < size; p++) {
        if (p == rank)
            continue;
        int slot = p < rank ? p : p - 1;
        for (int k = 0; k < K; k++) {
            unsigned char *rb = b + ((size_t)slot * K + k) * n;
            MPI_Irecv(rb, (int)n, MPI_BYTE, p, 300 + k, MPI_COMM_WORLD, &req[q++]);
        }
    }
    for (int p = 0; p < size; p++) {
        if (p == rank)
            continue;
        int slot = p < rank ? p : p - 1;
        for (int k = 0; k < K; k++) {
            unsigned char *sb = a + ((size_t)slot * K + k) * n;
            fill(sb, n, round, rank, p, 300 + k);
            MPI_Isend(sb, (int)n, MPI_BYTE, p, 300 + k, MPI_COMM_WORLD, &req[q++]);
        }
    }
    MPI_Waitall(q, req, MPI_STATUSES_IGNORE);
    for (int p = 0; p < size; p++) {
        if (p == rank)
            continue;
        int slot = p < rank ? p : p - 1;
        for (int k = 0; k < K; k++)
            verify("nonblocking", b + ((size_t)slot * K + k) * n, n, round, p, rank, 300 + k);
    }
    free(req);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double seconds = argc > 1 ? atof(argv[1]) : 5.0;
    printf("check: rank %d of %d: running\n", rank, size);
    fflush(stdout);
    size_t room = (size_t)8 << 20;
    unsigned char *a = malloc(room), *b = malloc(room);
    if (!a || !b) {
        fprintf(stderr, "check: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double start = MPI_Wtime();
    int round = 0, more = 1;
    while (more) {
        pingpong(round, a, b);
        allreduce(round);
        alltoall(round, a, b);
        large(round, a, b);
        outstanding(round, a, b);
        round++;
        more = MPI_Wtime() - start < seconds;
        MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    printf("check: rank %d of %d: OK, %d rounds, %llu bytes checked\n", rank, size, round,
           (unsigned long long)checked);
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
