/* The model runner: runner [-i IN.npy]... [-o OUT.npy]... [--bench N] [--warmup W] [--profile] [--threads T] */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fxc_runtime.h"

#define EXIT_BAD 2
#define FXC_STRING_DTYPE 8 /* ONNX TensorProto.STRING: const char * per element (docs/STRINGS.md) */
#define EXIT_CPU 4 /* this CPU lacks an extension the model's code uses */
#define EXIT_RUN 3 /* the run's data failed a kernel's check (FXC_ERR_RUN): no output written */
#define ERR_RUN (-7) /* FXC_ERR_RUN (model.h; a named build prefixes it) */
#define DEFAULT_WARMUP 5
#define BUFFER_ALIGN 64

static const char USAGE[] =
    "usage: runner [-i IN.npy]... [-o OUT.npy]... [--bench N] [--warmup W] [--profile] [--threads T]\n"
    "  -i FILE      input .npy, in model input order (missing inputs get a deterministic random fill)\n"
    "  -o FILE      write an output .npy, in model output order (an existing FILE only with --force)\n"
    "  --force      overwrite existing -o files\n"
    "  --bench N    time N runs and print one JSON object\n"
    "  --warmup W   untimed runs before timing (default 5)\n"
    "  --profile    per-op median times (profiling runner only)\n"
    "  --threads T  run on T threads, 1 to the count built in (default: that count)\n";

static void die(const char *fmt, const char *arg)
{
    fputs("runner: error: ", stderr);
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    exit(EXIT_BAD);
}

static int32_t parse_count(const char *text, const char *option, int32_t minimum)
{
    char *end;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno || end == text || *end || value < minimum || value > 10000000)
        die("bad value for %s (expected a non-negative integer, at least 1 for --bench and --threads)", option);
    return (int32_t)value;
}

static void *aligned_buffer(size_t nbytes, size_t align)
{
    void *ptr = NULL;
    if (align < sizeof(void *))
        align = sizeof(void *);
    if (posix_memalign(&ptr, align, nbytes ? nbytes : align) != 0)
        die("out of memory allocating %s", "buffers");
    memset(ptr, 0, nbytes ? nbytes : align);
    return ptr;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* times must be sorted ascending. */
static double median(const double *times, int32_t n)
{
    return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

static double percentile(const double *times, int32_t n, int32_t pct)
{
    int64_t rank = ((int64_t)pct * n + 99) / 100;
    return times[rank > 0 ? rank - 1 : 0];
}

static void print_json_string(const char *text)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        case '\n': fputs("\\n", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                printf("\\u%04x", (unsigned)*p);
            else
                putchar(*p);
        }
    }
    putchar('"');
}

/* What the process holds now (soak tests: flat from the first timed run to the last): resident bytes from
   /proc/self/statm and open file descriptors from /proc/self/fd; -1 where /proc is missing. */
typedef struct {
    int64_t rss_bytes;
    int64_t fds;
} holdings;

static holdings now_holding(void)
{
    holdings h = {-1, -1};
    long pages, resident;
    FILE *statm = fopen("/proc/self/statm", "r");
    if (statm) {
        if (fscanf(statm, "%ld %ld", &pages, &resident) == 2)
            h.rss_bytes = (int64_t)resident * sysconf(_SC_PAGESIZE);
        fclose(statm);
    }
    DIR *dir = opendir("/proc/self/fd");
    if (dir) {
        h.fds = -1; /* the directory's own descriptor */
        for (struct dirent *e; (e = readdir(dir));)
            h.fds += e->d_name[0] != '.';
        closedir(dir);
    }
    return h;
}

/* shapes: each input's actual dims for a dynamic model (fxc_num_symbols > 0), else NULL */
static void run_once(void *arena, const void **inputs, const int64_t **shapes, void **outputs, int profile)
{
    int rc;
    if (shapes)
        rc = profile ? fxc_run_shaped_profiled(arena, inputs, shapes, outputs, fxc_prof_enter, fxc_prof_exit)
                     : fxc_run_shaped(arena, inputs, shapes, outputs);
    else
        rc = profile ? fxc_run_profiled(arena, inputs, outputs, fxc_prof_enter, fxc_prof_exit)
                     : fxc_run(arena, inputs, outputs);
    if (rc == ERR_RUN) {
        fprintf(stderr, "runner: error: %s\n", fxc_strerror(rc));
        exit(EXIT_RUN);
    }
    if (rc != 0)
        die("fxc_run failed: %s", fxc_strerror(rc));
}

/* A dynamic model's inputs: the dims of each -i file (the others at their maximum), checked against the model's
   ranges before any data is read, then the data dense at those dims (each file's header read once). */
static const int64_t **read_shaped_inputs(const char **in_paths, int32_t n_in, const void **inputs, char *err, size_t len)
{
    const int64_t **shapes = calloc((size_t)fxc_num_inputs + 1, sizeof *shapes);
    fxc_npy_file *files = calloc((size_t)fxc_num_inputs + 1, sizeof *files);
    if (!shapes || !files)
        die("out of memory allocating %s", "shapes");
    for (int32_t i = 0; i < fxc_num_inputs; i++) {
        int64_t *dims = calloc((size_t)fxc_input_specs[i].rank + 1, sizeof *dims);
        if (!dims)
            die("out of memory allocating %s", "shapes");
        if (i >= n_in)
            memcpy(dims, fxc_input_specs[i].shape, sizeof *dims * (size_t)fxc_input_specs[i].rank);
        else if (fxc_npy_open(in_paths[i], &fxc_input_specs[i], &files[i], err, len) != 0)
            die("%s", err);
        else
            memcpy(dims, files[i].shape, sizeof *dims * (size_t)fxc_input_specs[i].rank);
        shapes[i] = dims;
    }
    if (fxc_check_input_shapes(shapes) != 0) {
        if (n_in >= fxc_num_inputs)
            die("%s: feed sizes within the model's ranges (model.h lists them)", fxc_shape_error());
        int used = snprintf(err, len, "%s: input%s", fxc_shape_error(), fxc_num_inputs - n_in > 1 ? "s" : "");
        for (int32_t i = n_in; i < fxc_num_inputs && used >= 0 && (size_t)used < len; i++)
            used += snprintf(err + used, len - (size_t)used, "%s '%s'", i > n_in ? "," : "", fxc_input_specs[i].name);
        die("%s got no -i and took the maximum shape: give every input with -i, at sizes within the model's ranges", err);
    }
    for (int32_t i = 0; i < fxc_num_inputs; i++) {
        void *buffer = (void *)inputs[i];
        if (i >= n_in)
            fxc_fill_random(&fxc_input_specs[i], buffer, 0, i);
        else if (fxc_npy_read_open(&files[i], &fxc_input_specs[i], buffer, err, len) != 0)
            die("%s", err);
    }
    free(files);
    return shapes;
}

static void print_report(double *times, int32_t runs, int32_t warmup, int64_t *samples, int profile, double cpu_ms,
                         const holdings *held)
{
    double sum = 0.0;
    for (int32_t r = 0; r < runs; r++)
        sum += times[r];
    qsort(times, (size_t)runs, sizeof *times, compare_double);
    printf("{\"runs\": %" PRId32 ", \"warmup\": %" PRId32 ", \"median_ms\": %.6f, \"p90_ms\": %.6f, "
           "\"p99_ms\": %.6f, \"min_ms\": %.6f, \"max_ms\": %.6f, \"mean_ms\": %.6f, "
           "\"peak_rss_bytes\": %" PRId64 ", \"arena_bytes\": %zu",
           runs, warmup, median(times, runs), percentile(times, runs, 90), percentile(times, runs, 99), times[0],
           times[runs - 1], sum / runs, fxc_peak_rss_bytes(), fxc_arena_bytes);
    /* CPU time of all threads over wall time of the timed runs (workers' spinning counts as CPU time) */
    printf(", \"threads\": %d, \"cpu_ms\": %.6f, \"cpu_over_wall\": %.3f", fxc_get_threads(), cpu_ms / runs,
           sum > 0 ? cpu_ms / sum : 0.0);
    printf(", \"rss_start_bytes\": %" PRId64 ", \"rss_end_bytes\": %" PRId64 ", \"fds_start\": %" PRId64
           ", \"fds_end\": %" PRId64, held[0].rss_bytes, held[1].rss_bytes, held[0].fds, held[1].fds);
    if (profile) {
        fputs(", \"ops\": [", stdout);
        for (int32_t op = 0; op < fxc_num_ops; op++) {
            double *op_times = times; /* the run times are printed already: reuse their buffer */
            for (int32_t r = 0; r < runs; r++)
                op_times[r] = (double)samples[(int64_t)op * runs + r] / 1e6;
            qsort(op_times, (size_t)runs, sizeof *op_times, compare_double);
            fputs(op ? ", {\"name\": " : "{\"name\": ", stdout);
            print_json_string(fxc_op_names[op]);
            fputs(", \"type\": ", stdout);
            print_json_string(fxc_op_types[op]);
            printf(", \"ms\": %.6f}", median(op_times, runs));
        }
        putchar(']');
    }
    puts("}");
}

int main(int argc, char **argv)
{
    const char **in_paths = calloc((size_t)argc, sizeof *in_paths);
    const char **out_paths = calloc((size_t)argc, sizeof *out_paths);
    int32_t n_in = 0, n_out = 0, runs = 0, warmup = DEFAULT_WARMUP, threads = 0;
    int profile = 0, force = 0;
    char err[1024];
    if (!in_paths || !out_paths)
        die("out of memory allocating %s", "arguments");
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int has_value = i + 1 < argc;
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            fputs(USAGE, stdout);
            return 0;
        } else if (strcmp(arg, "--profile") == 0) {
            profile = 1;
        } else if (strcmp(arg, "--force") == 0) {
            force = 1;
        } else if (strcmp(arg, "-i") == 0 || strcmp(arg, "-o") == 0 || strcmp(arg, "--bench") == 0 ||
                   strcmp(arg, "--warmup") == 0 || strcmp(arg, "--threads") == 0) {
            if (!has_value)
                die("%s needs a value", arg);
            const char *value = argv[++i];
            if (arg[1] == 'i')
                in_paths[n_in++] = value;
            else if (arg[1] == 'o')
                out_paths[n_out++] = value;
            else if (arg[2] == 'b')
                runs = parse_count(value, arg, 1);
            else if (arg[2] == 't')
                threads = parse_count(value, arg, 1);
            else
                warmup = parse_count(value, arg, 0);
        } else {
            fputs(USAGE, stderr);
            die("unknown argument '%s'", arg);
        }
    }
    const char *cpu_problem = fxc_cpu_check();
    if (cpu_problem) {
        fprintf(stderr, "runner: error: %s\n", cpu_problem);
        return EXIT_CPU;
    }
    if (n_in > fxc_num_inputs) {
        snprintf(err, sizeof err, "%d -i files given but the model has %d inputs", (int)n_in, (int)fxc_num_inputs);
        die("%s", err);
    }
    if (n_out > fxc_num_outputs) {
        snprintf(err, sizeof err, "%d -o files given but the model has %d outputs", (int)n_out, (int)fxc_num_outputs);
        die("%s", err);
    }
    for (int32_t i = 0; i < n_out && !force; i++) {
        FILE *existing = fopen(out_paths[i], "rb");
        if (existing) {
            fclose(existing);
            die("%s already exists; pass --force to overwrite it", out_paths[i]);
        }
    }
    if (profile && !fxc_prof_available())
        die("%s: this runner has no profiling hooks; use runner_prof", "--profile");
    if (profile && runs == 0)
        runs = 1;

    if (threads > fxc_default_threads) {
        snprintf(err, sizeof err, "--threads %d is more than the %d threads this runner was built for (build --threads N)",
                 (int)threads, (int)fxc_default_threads);
        die("%s", err);
    }
    if (threads > 0 && fxc_set_threads(threads) != 0)
        die("--threads: %s", fxc_strerror(-4));
    void *arena = aligned_buffer(fxc_arena_bytes, fxc_arena_align);
    int rc = fxc_init(arena, fxc_arena_bytes);
    if (rc != 0)
        die("fxc_init failed: %s", fxc_strerror(rc));
    const void **inputs = calloc((size_t)fxc_num_inputs + 1, sizeof *inputs);
    void **outputs = calloc((size_t)fxc_num_outputs + 1, sizeof *outputs);
    double *times = calloc((size_t)runs + 1, sizeof *times);
    /* per-op samples only when profiling; the product must fit size_t (32 bits on armv7) */
    if (profile && fxc_num_ops > 0 && (size_t)runs > (SIZE_MAX / sizeof(int64_t) - 1) / (size_t)fxc_num_ops)
        die("%s: too many runs to keep every op's time; use fewer", "--bench");
    int64_t *samples = calloc(profile ? (size_t)fxc_num_ops * (size_t)runs + 1 : 1, sizeof *samples);
    if (!inputs || !outputs || !times || !samples)
        die("out of memory allocating %s", "buffers");
    const int64_t **shapes = NULL;
    char **pools = calloc((size_t)fxc_num_inputs + 1, sizeof *pools); /* string inputs' bytes */
    if (!pools)
        die("out of memory allocating %s", "buffers");
    for (int32_t i = 0; i < fxc_num_inputs; i++) {
        void *buffer = aligned_buffer(fxc_input_specs[i].nbytes, BUFFER_ALIGN);
        if (fxc_input_specs[i].dtype == FXC_STRING_DTYPE && fxc_num_symbols > 0) {
            die("input '%s' is a string tensor: a dynamic model's string inputs are not supported", fxc_input_specs[i].name);
        } else if (fxc_num_symbols > 0) {
            /* read below, once every input's dims are known and checked */
        } else if (i < n_in && fxc_input_specs[i].dtype == FXC_STRING_DTYPE) {
            if (fxc_npy_read_strings(in_paths[i], &fxc_input_specs[i], buffer, &pools[i], err, sizeof err) != 0)
                die("%s", err);
        } else if (i < n_in) {
            if (fxc_npy_read(in_paths[i], &fxc_input_specs[i], buffer, err, sizeof err) != 0)
                die("%s", err);
        } else {
            fxc_fill_random(&fxc_input_specs[i], buffer, 0, i);
        }
        inputs[i] = buffer;
    }
    if (fxc_num_symbols > 0)
        shapes = read_shaped_inputs(in_paths, n_in, inputs, err, sizeof err);
    for (int32_t i = 0; i < fxc_num_outputs; i++)
        outputs[i] = aligned_buffer(fxc_output_specs[i].nbytes, BUFFER_ALIGN);

    double cpu_ms = 0.0;
    holdings held[2];
    if (runs == 0) {
        run_once(arena, inputs, shapes, outputs, profile);
    } else {
        if (profile)
            fxc_prof_attach(samples, fxc_num_ops, runs);
        for (int32_t w = 0; w < warmup; w++) {
            if (profile)
                fxc_prof_begin_run(-1);
            run_once(arena, inputs, shapes, outputs, profile);
        }
        /* CPU time over the whole timed loop: Linux adds a running worker's time to the process clock
           at scheduler ticks, so per-run differences would miss most of it */
        for (int32_t r = 0; r < runs; r += 512) /* the times' pages resident before the first holdings */
            ((volatile double *)times)[r] = 0.0;
        held[0] = now_holding();
        int64_t cpu_start = fxc_cpu_ns();
        for (int32_t r = 0; r < runs; r++) {
            if (profile)
                fxc_prof_begin_run(r);
            int64_t start = fxc_now_ns();
            run_once(arena, inputs, shapes, outputs, profile);
            times[r] = (double)(fxc_now_ns() - start) / 1e6;
        }
        cpu_ms = (double)(fxc_cpu_ns() - cpu_start) / 1e6;
        held[1] = now_holding();
    }
    for (int32_t i = 0; i < n_out; i++) {
        fxc_tensor_spec actual = fxc_output_specs[i];
        if (fxc_output_is_dynamic(i)) { /* the shape depends on the data or the input dims: write the actual shape */
            const int64_t *dims = fxc_output_shape(arena, i);
            size_t nbytes = fxc_dtype_size(actual.dtype);
            for (int32_t d = 0; d < actual.rank; d++) {
                if (dims[d] < 0 || dims[d] > actual.shape[d])
                    die("%s", "a data-dependent output reported dims outside its bound");
                nbytes *= (size_t)dims[d];
            }
            actual.shape = dims;
            actual.nbytes = nbytes;
        }
        if (actual.dtype == FXC_STRING_DTYPE
                ? fxc_npy_write_strings(out_paths[i], &actual, outputs[i], err, sizeof err) != 0
                : fxc_npy_write(out_paths[i], &actual, outputs[i], err, sizeof err) != 0)
            die("%s", err);
    }
    if (runs > 0)
        print_report(times, runs, warmup, samples, profile, cpu_ms, held);
    if (fflush(stdout) != 0)
        die("%s", "cannot write to stdout");

    for (int32_t i = 0; i < fxc_num_inputs; i++)
        free((void *)inputs[i]);
    for (int32_t i = 0; i < fxc_num_outputs; i++)
        free(outputs[i]);
    for (int32_t i = 0; shapes && i < fxc_num_inputs; i++)
        free((void *)shapes[i]);
    free(shapes);
    free(inputs);
    for (int32_t i = 0; i < fxc_num_inputs; i++)
        free(pools[i]);
    free(pools);
    free(outputs);
    free(times);
    free(samples);
    free(arena);
    free(in_paths);
    free(out_paths);
    return 0;
}
