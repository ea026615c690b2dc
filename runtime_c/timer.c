#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "fxc_runtime.h"

int64_t fxc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}

/* The calling thread's CPU time plus the pool workers' (each thread's own clock: the process clock
 * adds a running worker's time only at scheduler ticks). */
int64_t fxc_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec + fxc_pool_worker_cpu_ns();
}
