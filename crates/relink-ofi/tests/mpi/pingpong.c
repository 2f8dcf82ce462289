/*
 * An MPI ping-pong for the provider's benchmark: between ranks 0 and 1,
 * the round-trip latency of 8-byte messages (half of it reported, as
 * OSU's osu_latency does) and the bandwidth of 1 MiB messages sent in
 * windows of 16 nonblocking sends, each window acknowledged by one 4-byte
 * reply (as osu_bw). Every received message's first and last bytes are
 * checked. Rank 0 prints:
 *
 *   pingpong: latency_us=L bandwidth_mbps=B
 *
 * Usage: pingpong [ITERATIONS] (default 1000; bandwidth windows: a tenth).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WINDOW = 16 };

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iters = argc > 1 ? atoi(argv[1]) : 1000;
    int windows = iters / 10 > 2 ? iters / 10 : 2;
    const size_t big = 1 << 20;
    unsigned char *buf = malloc(big * WINDOW), small[8] = {0}, ack[4] = {0};
    if (!buf || size < 2) {
        fprintf(stderr, "pingpong: needs 2 ranks and memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(buf, 0x5a, big * WINDOW);
    double lat = 0, bw = 0;
    if (rank < 2) {
        int peer = 1 - rank;
        for (int phase = 0; phase < 2; phase++) { /* warm-up, then timed */
            int n = phase ? iters : iters / 10 + 1;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; i < n; i++) {
                if (rank == 0) {
                    small[0] = (unsigned char)i;
                    MPI_Send(small, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                    MPI_Recv(small, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(small, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(small, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                }
                if (small[0] != (unsigned char)i) {
                    fprintf(stderr, "pingpong: rank %d: message %d is wrong\n", rank, i);
                    MPI_Abort(MPI_COMM_WORLD, 2);
                }
            }
            lat = (MPI_Wtime() - t0) / n / 2 * 1e6;
        }
        for (int phase = 0; phase < 2; phase++) {
            int n = phase ? windows : 2;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int w = 0; w < n; w++) {
                MPI_Request req[WINDOW];
                for (int k = 0; k < WINDOW; k++) {
                    unsigned char *b = buf + (size_t)k * big;
                    if (rank == 0) {
                        b[0] = b[big - 1] = (unsigned char)(w + k);
                        MPI_Isend(b, (int)big, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[k]);
                    } else {
                        MPI_Irecv(b, (int)big, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[k]);
                    }
                }
                MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
                if (rank == 0) {
                    MPI_Recv(ack, 4, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    for (int k = 0; k < WINDOW; k++) {
                        unsigned char *b = buf + (size_t)k * big;
                        if (b[0] != (unsigned char)(w + k) || b[big - 1] != (unsigned char)(w + k)) {
                            fprintf(stderr, "pingpong: window %d message %d is wrong\n", w, k);
                            MPI_Abort(MPI_COMM_WORLD, 2);
                        }
                    }
                    MPI_Send(ack, 4, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
                }
            }
            bw = (double)big * WINDOW * n / (MPI_Wtime() - t0) / 1e6;
        }
    } else {
        for (int i = 0; i < 4; i++)
            MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 0)
        printf("pingpong: latency_us=%.2f bandwidth_mbps=%.1f\n", lat, bw);
    free(buf);
    MPI_Finalize();
    return 0;
}
