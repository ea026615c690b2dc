/* The application's own parallel-for (fxc_set_parallel_for): each call runs the tiles on THREADS
 * application threads, every thread taking tiles in reverse order from a shared atomic counter;
 * THREADS 0: on the calling thread in two uneven ranges, [0, 1) and [1, n).
 * usage: app_pfor THREADS IN... OUT... ; prints how many calls and tiles went through it. */
#include <pthread.h>
#include <stdatomic.h>

#include "app_common.h"

typedef struct {
    fxc_task_fn task;
    void *ctx;
    int64_t n;
    atomic_long next;
} job_t;

static atomic_long calls, tiles;

static void *help(void *arg)
{
    job_t *job = arg;
    for (;;) {
        long i = atomic_fetch_add(&job->next, 1);
        if (i >= job->n)
            return NULL;
        job->task(job->ctx, job->n - 1 - i, job->n - i);
        atomic_fetch_add(&tiles, 1);
    }
}

static void app_parallel_for(void *user, fxc_task_fn task, void *ctx, int64_t n)
{
    int threads = *(int *)user;
    if (threads == 0) {
        atomic_fetch_add(&calls, 1);
        task(ctx, 0, 1);
        if (n > 1)
            task(ctx, 1, n);
        atomic_fetch_add(&tiles, n);
        return;
    }
    job_t job = {task, ctx, n, 0};
    pthread_t tid[16];
    pthread_attr_t attr;
    int started = 0;
    atomic_fetch_add(&calls, 1);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    for (; started < threads - 1 && started < 16; started++)
        if (pthread_create(&tid[started], &attr, help, &job) != 0)
            break;
    help(&job);
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    pthread_attr_destroy(&attr);
}

int main(int argc, char **argv)
{
    if (argc != 2 + FXC_NUM_INPUTS + FXC_NUM_OUTPUTS)
        return 2;
    int threads = atoi(argv[1]);
    if (load_inputs(argv + 2) != 0)
        return 1;
    if (fxc_set_parallel_for(app_parallel_for, &threads) != FXC_OK || fxc_init(arena, sizeof arena) != FXC_OK)
        return 1;
    int rc = fxc_run(arena, inputs, outputs);
    if (rc != FXC_OK) {
        fprintf(stderr, "fxc_run: %s\n", fxc_strerror(rc));
        return 1;
    }
    printf("calls %lld tiles %lld threads %d\n", (long long)atomic_load(&calls), (long long)atomic_load(&tiles), fxc_get_threads());
    return save_outputs(argv + 2 + FXC_NUM_INPUTS) != 0;
}
