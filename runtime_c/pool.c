/* The thread pool behind fxc_parallel_for: persistent workers started by fxc_init / fxc_set_threads.
 *
 * The generated code calls fxc_parallel_for(task, ctx, n) for a heavy op whose outputs split into n
 * independent tiles; task(ctx, begin, end) computes tiles [begin, end). Every tile computes its outputs
 * completely (no reduction is split), so results do not depend on which thread ran a tile or on the
 * thread count. Nothing here allocates after the pool started.
 *
 * One pool per process, shared by every model linked into it (each model's glue starts or grows it).
 * A job's tiles are dealt into one contiguous home shard per thread (the caller's first, then each
 * worker's), so a thread runs the same tiles in every job of the same op and its data stays in its own
 * caches: the tiles it wrote last run, the weights it read (between cores that share no cache, writing a
 * line another core holds costs several times a local write). A thread that finishes its shard takes
 * tiles from the others'. Tiles are claimed one at a time with a compare-and-swap on their shard's 64-bit
 * word = generation << 40 | shard end << 20 | next tile, so a claim checks the job it belongs to and its
 * bound in one atomic step, and the caller never waits for a worker that did not take part (asleep,
 * descheduled); the job's task and ctx are read after the claim succeeded, when the job cannot have
 * finished (its tile is not done). `state` = generation << 40 | tile count << 20 announces the job.
 * One job at a time: a caller that finds the pool busy (another thread runs a model meanwhile) runs its
 * tiles itself. Workers sleep until the first job; after a job they spin (YIELD_NS, then yielding the
 * core between checks) up to SPIN_NS, then sleep on a condition variable until the next job.
 * Configuration (start, ensure, set_parallel_for) is serialized by config_lock and must not overlap a run.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "fxc_runtime.h"

#define IDX_BITS 20u
#define IDX_MASK ((UINT64_C(1) << IDX_BITS) - 1u)
#define GEN_SHIFT (2u * IDX_BITS)
#define MAX_TILES (IDX_MASK - 1u)
#define GEN_MASK ((UINT64_C(1) << (64u - GEN_SHIFT)) - 1u)
#define SPIN_NS 300000 /* idle workers poll this long for the next job, then sleep */
#define YIELD_NS 20000 /* after this long, polling yields the core between checks */
#define WORKER_STACK_BYTES ((size_t)1 << 20) /* kernels keep packing buffers up to 256 KiB on the stack */

enum { UNSET, BY_MODEL, BY_APPLICATION }; /* who chose the pool's threads: nobody yet, a model's init, the application */

static struct {
    _Atomic uint64_t word;
    char pad[64 - sizeof(uint64_t)];
} shard[FXC_MAX_THREADS] __attribute__((aligned(64)));

static struct {
    int threads;    /* including the calling thread */
    int workers;    /* worker threads running */
    pthread_t tid[FXC_MAX_THREADS];
    _Atomic uint64_t state;
    _Atomic(fxc_task_fn) task;
    _Atomic(void *) ctx;
    _Atomic uint32_t done;
    _Atomic int busy;
    _Atomic int sleepers;
    _Atomic int stop;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    fxc_parallel_for_fn user_pfor;
    void *user;
    int chosen;
} pool = {1, 0, {0}, 0, NULL, NULL, 0, 0, 0, 0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, UNSET};

static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || (defined(__arm__) && __ARM_ARCH >= 7)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}

/* Claim and run tiles of shard k of job `gen` until it has none left; returns the number run. */
static uint32_t run_shard(int k, uint64_t gen)
{
    uint32_t ran = 0;
    uint64_t s = atomic_load_explicit(&shard[k].word, memory_order_acquire);
    for (;;) {
        uint64_t idx = s & IDX_MASK;
        if (s >> GEN_SHIFT != gen || idx >= ((s >> IDX_BITS) & IDX_MASK))
            return ran;
        if (!atomic_compare_exchange_weak_explicit(&shard[k].word, &s, s + 1u, memory_order_acq_rel, memory_order_acquire))
            continue;
        /* the claimed tile's job is current until the tile is done: its task and ctx are this job's */
        fxc_task_fn task = atomic_load_explicit(&pool.task, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&pool.ctx, memory_order_relaxed);
        task(ctx, (int64_t)idx, (int64_t)idx + 1);
        atomic_fetch_add_explicit(&pool.done, 1u, memory_order_release);
        ran++;
        s = atomic_load_explicit(&shard[k].word, memory_order_acquire);
    }
}

/* Run tiles of job `gen`: thread `self`'s home shard first, then the others' in turn. */
static void run_tiles(int self, uint64_t gen, int shards)
{
    for (int i = 0; i < shards; i++)
        run_shard((self + i) % shards, gen);
}

static void sleep_until_changed(uint64_t seen)
{
    pthread_mutex_lock(&pool.lock);
    atomic_fetch_add(&pool.sleepers, 1);
    while (atomic_load(&pool.state) == seen && !atomic_load(&pool.stop))
        pthread_cond_wait(&pool.wake, &pool.lock);
    atomic_fetch_sub(&pool.sleepers, 1);
    pthread_mutex_unlock(&pool.lock);
}

static void *worker_main(void *arg)
{
    int self = (int)(intptr_t)arg;
    uint64_t seen = atomic_load_explicit(&pool.state, memory_order_acquire);
    sleep_until_changed(seen); /* no job yet: a model with no split op never wakes its workers */
    while (!atomic_load_explicit(&pool.stop, memory_order_acquire)) {
        run_tiles(self, atomic_load_explicit(&pool.state, memory_order_acquire) >> GEN_SHIFT, pool.threads);
        int64_t spin_start = now_ns();
        uint32_t spins = 0;
        uint64_t s;
        while ((s = atomic_load_explicit(&pool.state, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&pool.stop, memory_order_relaxed)) {
            cpu_relax();
            if (++spins % 256 != 0)
                continue;
            int64_t idle = now_ns() - spin_start;
            if (idle > YIELD_NS)
                sched_yield(); /* an oversubscribed core: let the thread that will publish the next job run */
            if (idle > SPIN_NS)
                sleep_until_changed(seen);
        }
        seen = s;
    }
    return NULL;
}

static void wake_sleepers(void)
{
    if (atomic_load(&pool.sleepers) > 0) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }
}

void fxc_parallel_for(fxc_task_fn task, void *ctx, int64_t n)
{
    if (n <= 0)
        return;
    if (pool.user_pfor) {
        pool.user_pfor(pool.user, task, ctx, n);
        return;
    }
    if (pool.workers == 0 || n == 1 || n > (int64_t)MAX_TILES ||
        atomic_exchange_explicit(&pool.busy, 1, memory_order_acquire)) {
        task(ctx, 0, n);
        return;
    }
    atomic_store_explicit(&pool.task, task, memory_order_relaxed);
    atomic_store_explicit(&pool.ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&pool.done, 0u, memory_order_relaxed);
    uint64_t gen = ((atomic_load_explicit(&pool.state, memory_order_relaxed) >> GEN_SHIFT) + 1u) & GEN_MASK;
    int shards = pool.threads;
    for (int k = 0; k < shards; k++) {
        uint64_t begin = (uint64_t)(n * k / shards), end = (uint64_t)(n * (k + 1) / shards);
        atomic_store_explicit(&shard[k].word, gen << GEN_SHIFT | end << IDX_BITS | begin, memory_order_release);
    }
    atomic_store(&pool.state, gen << GEN_SHIFT | (uint64_t)n << IDX_BITS); /* seq_cst: pairs with the sleepers count */
    wake_sleepers();
    run_tiles(0, gen, shards);
    uint32_t spins = 0;
    while (atomic_load_explicit(&pool.done, memory_order_acquire) < (uint32_t)n) {
        cpu_relax();
        if (++spins % 1024 == 0)
            sched_yield(); /* a worker holding a tile may be waiting for this core */
    }
    atomic_store_explicit(&pool.busy, 0, memory_order_release);
}

static void stop_workers(void)
{
    if (pool.workers == 0)
        return;
    pthread_mutex_lock(&pool.lock);
    atomic_store(&pool.stop, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    for (int i = 0; i < pool.workers; i++)
        pthread_join(pool.tid[i], NULL);
    pool.workers = 0;
    atomic_store(&pool.stop, 0);
}

static int start_locked(int threads, int chosen)
{
    if (threads < 1 || threads > FXC_MAX_THREADS)
        return -1;
    stop_workers();
    pool.user_pfor = NULL;
    pool.user = NULL;
    pool.chosen = chosen;
    pool.threads = 1;
    pthread_attr_t attr;
    if (threads > 1 && pthread_attr_init(&attr) == 0) {
        int ok = pthread_attr_setstacksize(&attr, WORKER_STACK_BYTES) == 0;
        for (int i = 0; ok && i < threads - 1; i++) {
            if (pthread_create(&pool.tid[i], &attr, worker_main, (void *)(intptr_t)(i + 1)) != 0)
                break;
            pool.workers++;
        }
        pthread_attr_destroy(&attr);
    }
    pool.threads = pool.workers + 1;
    return pool.threads == threads ? 0 : -1;
}

int fxc_pool_start(int threads)
{
    pthread_mutex_lock(&config_lock);
    int rc = start_locked(threads, BY_APPLICATION);
    pthread_mutex_unlock(&config_lock);
    return rc;
}

int fxc_pool_ensure(int threads)
{
    pthread_mutex_lock(&config_lock);
    int rc = 0;
    if (pool.chosen == UNSET || (pool.chosen == BY_MODEL && pool.threads < threads))
        rc = start_locked(threads, BY_MODEL);
    pthread_mutex_unlock(&config_lock);
    return rc;
}

int fxc_pool_threads(void)
{
    return pool.user_pfor ? 0 : pool.threads;
}

void fxc_pool_set_parallel_for(fxc_parallel_for_fn pfor, void *user)
{
    pthread_mutex_lock(&config_lock);
    stop_workers();
    pool.threads = 1;
    pool.chosen = BY_APPLICATION;
    pool.user_pfor = pfor;
    pool.user = pfor ? user : NULL;
    pthread_mutex_unlock(&config_lock);
}

int64_t fxc_pool_worker_cpu_ns(void)
{
    int64_t total = 0;
    for (int i = 0; i < pool.workers; i++) {
        clockid_t clock;
        struct timespec ts;
        if (pthread_getcpuclockid(pool.tid[i], &clock) == 0 && clock_gettime(clock, &ts) == 0)
            total += (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
    }
    return total;
}
