/* Cache-line round trip between two cores: `cacheline_pingpong [CPU_A CPU_B]` (default 0 1) pins two threads and
 * passes one 64-byte line back and forth 200,000 times; prints the mean round trip. Cores that share a cache take
 * tens of ns; cores in different cache domains (CCDs, sockets, a VM's vCPUs placed apart) several hundred, and then
 * every line one thread writes and another reads costs as much (docs/THREADS.md "Why home shards").
 * Build: cc -O2 -pthread cacheline_pingpong.c -o cacheline_pingpong */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { ROUNDS = 200000 };
static _Atomic int flag __attribute__((aligned(64)));
static int cpu_b = 1;

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *answer(void *arg)
{
    (void)arg;
    pin(cpu_b);
    for (int i = 0; i < ROUNDS; i++) {
        while (atomic_load_explicit(&flag, memory_order_acquire) != 1)
            ;
        atomic_store_explicit(&flag, 0, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int cpu_a = argc > 2 ? atoi(argv[1]) : 0;
    cpu_b = argc > 2 ? atoi(argv[2]) : 1;
    pin(cpu_a);
    pthread_t other;
    if (pthread_create(&other, NULL, answer, NULL) != 0)
        return 1;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < ROUNDS; i++) {
        atomic_store_explicit(&flag, 1, memory_order_release);
        while (atomic_load_explicit(&flag, memory_order_acquire) != 0)
            ;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    pthread_join(other, NULL);
    printf("round trip %.1f ns\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / ROUNDS);
    return 0;
}
