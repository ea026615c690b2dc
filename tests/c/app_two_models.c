/* Two named models (build --name detector, --name classifier) in one program: one arena for both, one
 * runtime and one thread pool. usage: app_two_models DET_IN CLS_IN DET_OUT CLS_OUT [concurrent] (raw bytes).
 * Runs detector, classifier, then detector again on the arena the classifier overwrote; with `concurrent`,
 * a second thread runs the classifier on its own arena meanwhile, and every run must give the same bytes. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detector.h"
#include "classifier.h"

#define ARENA_BYTES FXC_ARENA_MAX(DETECTOR_ARENA_BYTES, CLASSIFIER_ARENA_BYTES)
#define ARENA_ALIGN FXC_ARENA_MAX(DETECTOR_ARENA_ALIGN, CLASSIFIER_ARENA_ALIGN)
#define CONCURRENT_RUNS 20

static unsigned char arena[ARENA_BYTES] __attribute__((aligned(ARENA_ALIGN)));
static unsigned char other_arena[CLASSIFIER_ARENA_BYTES + 1] __attribute__((aligned(CLASSIFIER_ARENA_ALIGN)));

static const void *cls_in[CLASSIFIER_NUM_INPUTS];
static void *cls_expected;
static int other_failures;

static void *read_file(const char *path, size_t n)
{
    void *buf = malloc(n + 1);
    FILE *f = fopen(path, "rb");
    if (!buf || !f || fread(buf, 1, n, f) != n) {
        fprintf(stderr, "cannot read %zu bytes from %s\n", n, path);
        exit(1);
    }
    fclose(f);
    return buf;
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static void *classify_elsewhere(void *arg)
{
    const classifier_tensor_spec *spec = &classifier_output_specs[0];
    void *y = calloc(1, spec->nbytes);
    void *outs[CLASSIFIER_NUM_OUTPUTS] = {y};
    (void)arg;
    for (int r = 0; r < CONCURRENT_RUNS; r++)
        if (classifier_run(other_arena, cls_in, outs) != CLASSIFIER_OK || memcmp(y, cls_expected, spec->nbytes) != 0)
            other_failures++;
    free(y);
    return NULL;
}

int main(int argc, char **argv)
{
    if ((argc != 5 && argc != 6) || DETECTOR_NUM_INPUTS != 1 || DETECTOR_NUM_OUTPUTS != 1 ||
        CLASSIFIER_NUM_INPUTS != 1 || CLASSIFIER_NUM_OUTPUTS != 1)
        return 2;
    const detector_tensor_spec *din = &detector_input_specs[0], *dout = &detector_output_specs[0];
    const classifier_tensor_spec *cin = &classifier_input_specs[0], *cout = &classifier_output_specs[0];
    const void *det_in[DETECTOR_NUM_INPUTS] = {read_file(argv[1], din->nbytes)};
    cls_in[0] = read_file(argv[2], cin->nbytes);
    void *det_y = calloc(1, dout->nbytes), *det_again = calloc(1, dout->nbytes), *cls_y = calloc(1, cout->nbytes);
    void *det_out[DETECTOR_NUM_OUTPUTS] = {det_y}, *again_out[DETECTOR_NUM_OUTPUTS] = {det_again};
    void *cls_out[CLASSIFIER_NUM_OUTPUTS] = {cls_y};
    if (!det_y || !det_again || !cls_y)
        return 1;

    int rc = detector_init(arena, sizeof arena);
    if (rc != DETECTOR_OK || (rc = classifier_init(arena, sizeof arena)) != CLASSIFIER_OK) {
        fprintf(stderr, "init: %s\n", detector_strerror(rc));
        return 1;
    }
    if ((rc = detector_run(arena, det_in, det_out)) != DETECTOR_OK || (rc = classifier_run(arena, cls_in, cls_out)) != CLASSIFIER_OK ||
        (rc = detector_run(arena, det_in, again_out)) != DETECTOR_OK) {
        fprintf(stderr, "run: %s\n", classifier_strerror(rc));
        return 1;
    }
    printf("arena %zu %zu %zu\n", sizeof arena, detector_arena_bytes, classifier_arena_bytes);
    printf("threads %d %d\n", detector_get_threads(), classifier_get_threads());
    printf("rerun %s\n", memcmp(det_y, det_again, dout->nbytes) == 0 ? "same" : "differs");

    if (argc == 6 && strcmp(argv[5], "concurrent") == 0) {
        cls_expected = cls_y;
        void *y = calloc(1, cout->nbytes), *d = calloc(1, dout->nbytes);
        void *outs[CLASSIFIER_NUM_OUTPUTS] = {y}, *douts[DETECTOR_NUM_OUTPUTS] = {d};
        int failures = 0;
        pthread_attr_t attr;
        pthread_t tid;
        if (!y || !d || pthread_attr_init(&attr) || pthread_attr_setstacksize(&attr, 1 << 20) ||
            pthread_create(&tid, &attr, classify_elsewhere, NULL))
            return 1;
        for (int r = 0; r < CONCURRENT_RUNS; r++) {
            if (classifier_run(arena, cls_in, outs) != CLASSIFIER_OK || memcmp(y, cls_y, cout->nbytes) != 0)
                failures++;
            if (detector_run(arena, det_in, douts) != DETECTOR_OK || memcmp(d, det_y, dout->nbytes) != 0)
                failures++;
        }
        if (pthread_join(tid, NULL))
            return 1;
        printf("concurrent mismatches %d\n", failures + other_failures);
    }
    write_file(argv[3], det_y, dout->nbytes);
    write_file(argv[4], cls_y, cout->nbytes);
    return 0;
}
