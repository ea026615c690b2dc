/* Profiling hooks that fxc_run_profiled calls around each op; linked only into runner_prof. */
#include "fxc_runtime.h"

static int64_t *prof_samples;
static int32_t prof_num_ops;
static int32_t prof_runs;
static int32_t prof_run = -1;
static int64_t prof_started;

int fxc_prof_available(void) { return 1; }

void fxc_prof_attach(int64_t *samples, int32_t num_ops, int32_t runs)
{
    prof_samples = samples;
    prof_num_ops = num_ops;
    prof_runs = runs;
    prof_run = -1;
}

/* run < 0 (warm-up) records nothing. */
void fxc_prof_begin_run(int32_t run)
{
    prof_run = (run >= 0 && run < prof_runs) ? run : -1;
    if (prof_run >= 0) {
        for (int32_t op = 0; op < prof_num_ops; op++)
            prof_samples[(int64_t)op * prof_runs + prof_run] = 0;
    }
}

void fxc_prof_enter(int32_t op)
{
    (void)op;
    prof_started = fxc_now_ns();
}

void fxc_prof_exit(int32_t op)
{
    int64_t elapsed = fxc_now_ns() - prof_started;
    if (prof_run >= 0 && op >= 0 && op < prof_num_ops)
        prof_samples[(int64_t)op * prof_runs + prof_run] += elapsed;
}
