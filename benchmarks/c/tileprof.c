/* Tile profiler for benchmarks/tile_profile.py: runs the model with its tiles handed to this program's
 * parallel-for (fxc_set_parallel_for) and times every tile in thread CPU time, which other processes on
 * the machine do not inflate the way they inflate wall time.
 *   usage: tileprof THREADS RUNS
 * THREADS 1: tiles in order on the calling thread; more: the caller and THREADS - 1 spinning helpers
 * claim tiles in order, one at a time (as runtime_c/pool.c does). Inputs: a fixed pseudo-random fill.
 * Prints one JSON object: per parallel-for call the CPU time of the calling thread since the previous
 * call (the serial ops between them) and each tile's CPU time, each the minimum over RUNS runs after one
 * warm-up run. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "model.h"

#define MAX_CALLS 1024
#define MAX_TILES 1024
#define MAX_HELPERS 15

static unsigned char arena[FXC_ARENA_BYTES + 1] __attribute__((aligned(FXC_ARENA_ALIGN)));
static const void *inputs[FXC_NUM_INPUTS + 1];
static void *outputs[FXC_NUM_OUTPUTS + 1];

static double tile_ms[MAX_CALLS][MAX_TILES], best_tile[MAX_CALLS][MAX_TILES];
static double gap_ms[MAX_CALLS + 1], best_gap[MAX_CALLS + 1];
static int tiles_of[MAX_CALLS];
static int calls, overflow;
static double serial_since;

static struct {
    fxc_task_fn task;
    void *ctx;
    int64_t n;
    int call;
    atomic_long next, done, generation;
} job;

static double cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static void run_tiles(void)
{
    for (;;) {
        long i = atomic_fetch_add(&job.next, 1);
        if (i >= job.n)
            return;
        double start = cpu_ms();
        job.task(job.ctx, i, i + 1);
        if (job.call < MAX_CALLS && i < MAX_TILES)
            tile_ms[job.call][i] = cpu_ms() - start;
        atomic_fetch_add(&job.done, 1);
    }
}

static void *helper(void *arg)
{
    (void)arg;
    long seen = 0;
    for (;;) {
        long g;
        while ((g = atomic_load(&job.generation)) == seen)
            __builtin_ia32_pause();
        if (g < 0)
            return NULL;
        seen = g;
        run_tiles();
    }
}

static void parallel_for(void *user, fxc_task_fn task, void *ctx, int64_t n)
{
    int helpers = *(int *)user;
    if (calls < MAX_CALLS) {
        gap_ms[calls] = cpu_ms() - serial_since;
        tiles_of[calls] = (int)(n < MAX_TILES ? n : MAX_TILES);
    }
    overflow |= calls >= MAX_CALLS || n > MAX_TILES;
    job.task = task;
    job.ctx = ctx;
    job.n = n;
    job.call = calls;
    atomic_store(&job.done, 0);
    atomic_store(&job.next, 0);
    if (helpers)
        atomic_fetch_add(&job.generation, 1);
    run_tiles();
    while (atomic_load(&job.done) < n)
        __builtin_ia32_pause();
    calls++;
    serial_since = cpu_ms();
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    int threads = atoi(argv[1]), runs = atoi(argv[2]);
    int helpers = threads - 1;
    if (threads < 1 || helpers > MAX_HELPERS || runs < 1)
        return 2;
    srand(1);
    for (int i = 0; i < FXC_NUM_INPUTS; i++) {
        size_t nbytes = fxc_input_specs[i].nbytes;
        unsigned char *buf = calloc(1, nbytes + 4);
        if (!buf)
            return 1;
        if (fxc_input_specs[i].dtype == FXC_DTYPE_FLOAT32)
            for (size_t j = 0; j < nbytes / 4; j++)
                ((float *)buf)[j] = (float)rand() / (float)RAND_MAX;
        else
            for (size_t j = 0; j < nbytes; j++)
                buf[j] = (unsigned char)(rand() % 8);
        inputs[i] = buf;
    }
    for (int i = 0; i < FXC_NUM_OUTPUTS; i++)
        if (!(outputs[i] = calloc(1, fxc_output_specs[i].nbytes + 1)))
            return 1;
    if (fxc_set_parallel_for(parallel_for, &helpers) != FXC_OK || fxc_init(arena, sizeof arena) != FXC_OK)
        return 1;
    pthread_t tid[MAX_HELPERS];
    for (int h = 0; h < helpers; h++)
        if (pthread_create(&tid[h], NULL, helper, NULL) != 0)
            return 1;
    for (int r = 0; r <= runs; r++) {
        calls = 0;
        serial_since = cpu_ms();
        if (fxc_run(arena, inputs, outputs) != FXC_OK)
            return 1;
        int n_calls = calls < MAX_CALLS ? calls : MAX_CALLS;
        gap_ms[n_calls] = cpu_ms() - serial_since;
        for (int c = 0; c <= n_calls; c++) {
            if (r <= 1 || gap_ms[c] < best_gap[c])
                best_gap[c] = gap_ms[c];
            for (int t = 0; c < n_calls && t < tiles_of[c]; t++)
                if (r <= 1 || tile_ms[c][t] < best_tile[c][t])
                    best_tile[c][t] = tile_ms[c][t];
        }
    }
    atomic_store(&job.generation, -1);
    for (int h = 0; h < helpers; h++)
        pthread_join(tid[h], NULL);
    int n_calls = calls < MAX_CALLS ? calls : MAX_CALLS;
    printf("{\"threads\": %d, \"runs\": %d, \"overflow\": %s, \"tail_ms\": %.5f, \"calls\": [", threads, runs,
           overflow ? "true" : "false", best_gap[n_calls]);
    for (int c = 0; c < n_calls; c++) {
        printf("%s{\"serial_ms\": %.5f, \"tiles_ms\": [", c ? ", " : "", best_gap[c]);
        for (int t = 0; t < tiles_of[c]; t++)
            printf("%s%.5f", t ? ", " : "", best_tile[c][t]);
        printf("]}");
    }
    printf("]}\n");
    return 0;
}
