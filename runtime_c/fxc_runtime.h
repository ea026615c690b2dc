/* fluidml-xc runtime: internal interface between runner.c, the runtime helpers and the generated glue. */
#ifndef FXC_RUNTIME_H
#define FXC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifndef FXC_TENSOR_SPEC_DEFINED
#define FXC_TENSOR_SPEC_DEFINED
typedef struct {
    const char *name;
    int32_t dtype;          /* ONNX TensorProto data type code */
    int32_t rank;
    const int64_t *shape;   /* rank entries, NULL for scalars */
    size_t nbytes;
} fxc_tensor_spec;
#endif

/* Defined by the generated glue (model_glue.c, or NAME_glue.c of a build --name NAME, whose symbols carry
 * NAME_ instead of fxc_: a runner for it is compiled with -DFXC_PREFIX=NAME_, which maps these names). */
#ifdef FXC_PREFIX
#define FXC_CAT_(a, b) a##b
#define FXC_CAT(a, b) FXC_CAT_(a, b)
#define fxc_num_inputs FXC_CAT(FXC_PREFIX, num_inputs)
#define fxc_num_outputs FXC_CAT(FXC_PREFIX, num_outputs)
#define fxc_num_ops FXC_CAT(FXC_PREFIX, num_ops)
#define fxc_arena_bytes FXC_CAT(FXC_PREFIX, arena_bytes)
#define fxc_arena_align FXC_CAT(FXC_PREFIX, arena_align)
#define fxc_input_specs FXC_CAT(FXC_PREFIX, input_specs)
#define fxc_output_specs FXC_CAT(FXC_PREFIX, output_specs)
#define fxc_op_names FXC_CAT(FXC_PREFIX, op_names)
#define fxc_op_types FXC_CAT(FXC_PREFIX, op_types)
#define fxc_init FXC_CAT(FXC_PREFIX, init)
#define fxc_run FXC_CAT(FXC_PREFIX, run)
#define fxc_run_profiled FXC_CAT(FXC_PREFIX, run_profiled)
#define fxc_strerror FXC_CAT(FXC_PREFIX, strerror)
#define fxc_output_shape FXC_CAT(FXC_PREFIX, output_shape)
#define fxc_output_is_dynamic FXC_CAT(FXC_PREFIX, output_is_dynamic)
#define fxc_default_threads FXC_CAT(FXC_PREFIX, default_threads)
#define fxc_set_threads FXC_CAT(FXC_PREFIX, set_threads)
#define fxc_get_threads FXC_CAT(FXC_PREFIX, get_threads)
#define fxc_cpu_check FXC_CAT(FXC_PREFIX, cpu_check)
#define fxc_num_symbols FXC_CAT(FXC_PREFIX, num_symbols)
#define fxc_run_shaped FXC_CAT(FXC_PREFIX, run_shaped)
#define fxc_run_shaped_profiled FXC_CAT(FXC_PREFIX, run_shaped_profiled)
#define fxc_check_input_shapes FXC_CAT(FXC_PREFIX, check_input_shapes)
#define fxc_shape_error FXC_CAT(FXC_PREFIX, shape_error)
#endif
extern const int32_t fxc_num_inputs;
extern const int32_t fxc_num_outputs;
extern const int32_t fxc_num_ops;
extern const size_t fxc_arena_bytes;
extern const size_t fxc_arena_align;
extern const fxc_tensor_spec fxc_input_specs[];
extern const fxc_tensor_spec fxc_output_specs[];
extern const char *const fxc_op_names[];
extern const char *const fxc_op_types[];
int fxc_init(void *arena, size_t arena_bytes);
int fxc_run(void *arena, const void *const *inputs, void *const *outputs);
int fxc_run_profiled(void *arena, const void *const *inputs, void *const *outputs,
                     void (*enter)(int32_t op), void (*exit)(int32_t op));
const char *fxc_strerror(int code);
/* A dynamic model (fxc_num_symbols > 0): runs with each input's actual dims, checked against the ranges first. */
extern const int32_t fxc_num_symbols;
int fxc_run_shaped(void *arena, const void *const *inputs, const int64_t *const *shapes, void *const *outputs);
int fxc_run_shaped_profiled(void *arena, const void *const *inputs, const int64_t *const *shapes, void *const *outputs,
                            void (*enter)(int32_t op), void (*exit)(int32_t op));
int fxc_check_input_shapes(const int64_t *const *shapes);
const char *fxc_shape_error(void);
/* Output i's actual shape after a run (data-dependent outputs: written into the arena). */
const int64_t *fxc_output_shape(const void *arena, int32_t i);
int fxc_output_is_dynamic(int32_t i);

/* pool.c: the thread pool behind fxc_parallel_for (the generated code's only call into the runtime). */
#define FXC_MAX_THREADS 64
#ifndef FXC_PARALLEL_FOR_DEFINED
#define FXC_PARALLEL_FOR_DEFINED
typedef void (*fxc_task_fn)(void *ctx, int64_t begin, int64_t end);
typedef void (*fxc_parallel_for_fn)(void *user, fxc_task_fn task, void *ctx, int64_t n_tiles);
#endif
void fxc_parallel_for(fxc_task_fn task, void *ctx, int64_t n);
int fxc_pool_start(int threads);          /* threads - 1 workers, the application's choice; 0 on success */
int fxc_pool_ensure(int threads);         /* a model's init: start the pool, or grow one a model started */
int fxc_pool_threads(void);               /* threads running the model (0: an application's parallel-for) */
void fxc_pool_set_parallel_for(fxc_parallel_for_fn pfor, void *user);
int64_t fxc_pool_worker_cpu_ns(void);     /* CPU time of the pool's workers so far */
/* Defined by the glue: the thread count built in (manifest `threads`). */
extern const int32_t fxc_default_threads;
int fxc_set_threads(int threads);
int fxc_get_threads(void);

/* cpu.c: 1 when the running CPU has an extension: x86 cpuid(leaf, subleaf) bit (register * 32 + bit) with the
 * XCR0 state bits xcr0_mask enabled by the OS; ARM getauxval(leaf 1: AT_HWCAP, 2: AT_HWCAP2) bit. */
int fxc_cpu_has(uint32_t leaf, uint32_t subleaf, uint32_t bit, uint32_t xcr0_mask);
/* Defined by the glue: NULL when this CPU runs the model, else one line naming what it lacks. */
const char *fxc_cpu_check(void);

/* npy.c: .npy I/O; errors are written into err (NUL-terminated) and return -1. */
size_t fxc_dtype_size(int32_t dtype);
const char *fxc_dtype_name(int32_t dtype);
int fxc_npy_read(const char *path, const fxc_tensor_spec *spec, void *data, char *err, size_t err_len);
/* A dynamic model's input file, its header read and parsed once: fxc_npy_open gives its dims (spec's rank and dtype
 * checked), fxc_npy_read_open then reads its data dense at those dims (each dim at most spec's: the buffer holds
 * spec->nbytes) and closes it. A file opened but never read: fxc_npy_close. */
#define FXC_NPY_MAX_RANK 32
typedef struct {
    void *fh;
    const char *path;
    int fortran;
    int32_t rank;
    int64_t shape[FXC_NPY_MAX_RANK];
} fxc_npy_file;
int fxc_npy_open(const char *path, const fxc_tensor_spec *spec, fxc_npy_file *file, char *err, size_t err_len);
int fxc_npy_read_open(fxc_npy_file *file, const fxc_tensor_spec *spec, void *data, char *err, size_t err_len);
void fxc_npy_close(fxc_npy_file *file);
int fxc_npy_write(const char *path, const fxc_tensor_spec *spec, const void *data, char *err, size_t err_len);
/* A string tensor (dtype 8) from a .npy 'U' or 'S' file: text[i] points into *pool (malloc'd, NUL-terminated UTF-8
 * strings; free it after the run); to a .npy 'U' file (invalid UTF-8 becomes U+FFFD). */
int fxc_npy_read_strings(const char *path, const fxc_tensor_spec *spec, const char **text, char **pool, char *err,
                         size_t err_len);
int fxc_npy_write_strings(const char *path, const fxc_tensor_spec *spec, const char *const *text, char *err,
                          size_t err_len);
void fxc_fill_random(const fxc_tensor_spec *spec, void *data, uint64_t seed, int32_t index);

/* timer.c */
int64_t fxc_now_ns(void);
int64_t fxc_cpu_ns(void);  /* CPU time of the calling thread and the pool's workers */

/* rss.c */
int64_t fxc_peak_rss_bytes(void);

/* prof.c (profiling runner) or noprof.c (plain runner). */
int fxc_prof_available(void);
/* samples: num_ops * runs slots, owned by the caller; recorded as samples[op * runs + run]. */
void fxc_prof_attach(int64_t *samples, int32_t num_ops, int32_t runs);
void fxc_prof_begin_run(int32_t run);
void fxc_prof_enter(int32_t op);
void fxc_prof_exit(int32_t op);

#endif
