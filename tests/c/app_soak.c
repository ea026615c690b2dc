/* Soak of the C API: RUNS calls of fxc_run on each of THREADS application threads, each thread with its own
 * arena, input and output buffers. Before every run the output buffers are poisoned (0xA5); after it every
 * output must equal, byte for byte, the first run's of thread 0. Resident memory (VmRSS) and the open file
 * descriptors are read after the first tenth of the runs and after the last.
 * usage: app_soak RUNS THREADS IN... OUT...   (raw tensors; OUT gets thread 0's outputs of its last run)
 * prints one JSON line: runs, threads, rss_start_bytes, rss_end_bytes, fds_start, fds_end, wall_s, mismatches */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "app_common.h"

#define MAX_THREADS 8

typedef struct {
    int index;
    long runs;
    unsigned char *arena;
    void *outs[FXC_NUM_OUTPUTS + 1];
    int rc;
} worker_t;

static void *expected[FXC_NUM_OUTPUTS + 1];
static atomic_long mismatches, progress;
static pthread_barrier_t start_line;
static long rss_start, fds_start, total_runs;
static atomic_int sampled;

static long resident_bytes(void)
{
    long pages = -1, resident = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = -1;
        fclose(f);
    }
    return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

static long open_fds(void)
{
    long n = 0;
    DIR *dir = opendir("/proc/self/fd");
    if (!dir)
        return -1;
    for (struct dirent *e; (e = readdir(dir));)
        n += e->d_name[0] != '.';
    closedir(dir);
    return n - 1; /* the directory's own descriptor */
}

static void sample_start_once(void)
{
    int expected_flag = 0;
    if (atomic_compare_exchange_strong(&sampled, &expected_flag, 1)) {
        rss_start = resident_bytes();
        fds_start = open_fds();
    }
}

static int check(void *const *outs)
{
    for (int i = 0; i < FXC_NUM_OUTPUTS; i++)
        if (memcmp(outs[i], expected[i], fxc_output_specs[i].nbytes) != 0)
            return 1;
    return 0;
}

static void *soak(void *arg)
{
    worker_t *w = arg;
    pthread_barrier_wait(&start_line);
    for (long r = 0; r < w->runs; r++) {
        for (int i = 0; i < FXC_NUM_OUTPUTS; i++)
            memset(w->outs[i], 0xA5, fxc_output_specs[i].nbytes);
        if ((w->rc = fxc_run(w->arena, inputs, (void *const *)w->outs)) != FXC_OK)
            return NULL;
        if (check((void *const *)w->outs))
            atomic_fetch_add(&mismatches, 1);
        if (atomic_fetch_add(&progress, 1) + 1 == total_runs / 10)
            sample_start_once();
    }
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 3 + FXC_NUM_INPUTS + FXC_NUM_OUTPUTS)
        return 2;
    long runs = atol(argv[1]);
    int n_threads = atoi(argv[2]);
    if (runs < 1 || n_threads < 1 || n_threads > MAX_THREADS || load_inputs(argv + 3) != 0)
        return 2;
    if (fxc_init(arena, sizeof arena) != FXC_OK || fxc_run(arena, inputs, outputs) != FXC_OK)
        return 1;
    for (int i = 0; i < FXC_NUM_OUTPUTS; i++) { /* the reference: the first run's outputs */
        if (!(expected[i] = malloc(fxc_output_specs[i].nbytes + 1)))
            return 1;
        memcpy(expected[i], outputs[i], fxc_output_specs[i].nbytes);
    }
    worker_t workers[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    pthread_attr_t attr;
    total_runs = runs * n_threads;
    if (pthread_attr_init(&attr) || pthread_attr_setstacksize(&attr, 1 << 20) ||
        pthread_barrier_init(&start_line, NULL, (unsigned)n_threads + 1))
        return 1;
    for (int t = 0; t < n_threads; t++) {
        worker_t *w = &workers[t];
        w->index = t;
        w->runs = runs;
        w->rc = FXC_OK;
        void *own = arena;
        if (t > 0 && posix_memalign(&own, FXC_ARENA_ALIGN, FXC_ARENA_BYTES + 1) != 0)
            return 1;
        w->arena = own;
        if (fxc_init(w->arena, FXC_ARENA_BYTES) != FXC_OK)
            return 1;
        for (int i = 0; i < FXC_NUM_OUTPUTS; i++)
            if (!(w->outs[i] = t == 0 ? outputs[i] : malloc(fxc_output_specs[i].nbytes + 1)))
                return 1;
        if (pthread_create(&tids[t], &attr, soak, w))
            return 1;
    }
    double start = now_s();
    pthread_barrier_wait(&start_line);
    for (int t = 0; t < n_threads; t++)
        pthread_join(tids[t], NULL);
    double wall = now_s() - start;
    sample_start_once();
    long rss_end = resident_bytes(), fds_end = open_fds();
    for (int t = 0; t < n_threads; t++)
        if (workers[t].rc != FXC_OK) {
            fprintf(stderr, "fxc_run on thread %d: %s\n", t, fxc_strerror(workers[t].rc));
            return 1;
        }
    printf("{\"runs\": %ld, \"threads\": %d, \"rss_start_bytes\": %ld, \"rss_end_bytes\": %ld, \"fds_start\": %ld, "
           "\"fds_end\": %ld, \"wall_s\": %.3f, \"mismatches\": %ld}\n", runs, n_threads, rss_start, rss_end, fds_start,
           fds_end, wall, (long)atomic_load(&mismatches));
    return save_outputs(argv + 3 + FXC_NUM_INPUTS) != 0;
}
