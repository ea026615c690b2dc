/* Stand-in for prof.c in the plain runner: reports that profiling is unavailable; the hooks are never called. */
#include "fxc_runtime.h"

int fxc_prof_available(void) { return 0; }

void fxc_prof_attach(int64_t *samples, int32_t num_ops, int32_t runs)
{
    (void)samples;
    (void)num_ops;
    (void)runs;
}

void fxc_prof_begin_run(int32_t run) { (void)run; }

void fxc_prof_enter(int32_t op) { (void)op; }

void fxc_prof_exit(int32_t op) { (void)op; }
