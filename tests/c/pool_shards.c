/* The pool's home shards (runtime_c/pool.c): `pool_shards TILES JOBS` runs JOBS jobs of TILES tiles on two threads.
 * The caller's first tile of a job waits (up to 2 s) until the worker has claimed a tile, and the program prints the
 * first tile the worker claimed in each job (-1: it took none). With a contiguous home share per thread that is
 * TILES / 2 every time; with tiles claimed in turn it would be 1. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fxc_runtime.h"

static pthread_t caller;
static _Atomic int worker_first;
static _Atomic int caller_started;

static long elapsed_ns(const struct timespec *a)
{
    struct timespec b;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (b.tv_sec - a->tv_sec) * 1000000000L + (b.tv_nsec - a->tv_nsec);
}

static void task(void *ctx, int64_t begin, int64_t end)
{
    (void)ctx;
    for (int64_t i = begin; i < end; i++) {
        if (!pthread_equal(pthread_self(), caller)) {
            int none = -1;
            atomic_compare_exchange_strong(&worker_first, &none, (int)i);
        } else if (!atomic_exchange(&caller_started, 1)) {
            struct timespec start;
            clock_gettime(CLOCK_MONOTONIC, &start);
            while (atomic_load(&worker_first) < 0 && elapsed_ns(&start) < 2000000000L)
                ;
        }
    }
}

int main(int argc, char **argv)
{
    int tiles = argc > 2 ? atoi(argv[1]) : 0, jobs = argc > 2 ? atoi(argv[2]) : 0;
    if (tiles < 2 || jobs < 1 || fxc_pool_start(2) != 0)
        return 2;
    caller = pthread_self();
    for (int job = 0; job < jobs; job++) {
        atomic_store(&worker_first, -1);
        atomic_store(&caller_started, 0);
        fxc_parallel_for(task, NULL, tiles);
        printf("%d\n", atomic_load(&worker_first));
    }
    return 0;
}
