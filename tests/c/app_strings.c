/* String tensors through the C API (tests/test_strings.py): y = StringConcat(a[2], b[1]) built with
   --max-string-bytes 7. Prints each run's return code and outputs; output bytes are printed raw. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "model.h"

static unsigned char arena[FXC_ARENA_BYTES] __attribute__((aligned(FXC_ARENA_ALIGN)));

static int run(const char *a0, const char *a1, const char *b0, const char **y)
{
    const char *a[2] = {a0, a1}, *b[1] = {b0};
    const void *inputs[FXC_NUM_INPUTS] = {a, b};
    void *outputs[FXC_NUM_OUTPUTS] = {y};
    return fxc_run(arena, inputs, outputs);
}

int main(void)
{
    const char *y[2] = {NULL, NULL};
    if (fxc_init(arena, sizeof arena) != FXC_OK || FXC_MAX_STRING_BYTES != 7)
        return 1;
    int rc = run("ab\xff", "\xc3(", "!", y); /* invalid UTF-8 is passed through byte for byte */
    printf("rc=%d [%s] [%s]\n", rc, y[0], y[1]);
    int inside = 1;
    for (int i = 0; i < 2; i++)
        inside &= (const unsigned char *)y[i] >= arena && (const unsigned char *)y[i] + strlen(y[i]) < arena + sizeof arena;
    printf("in-arena=%d\n", inside);
    rc = run("a", "12345678", "!", y);
    printf("rc=%d %s\n", rc, rc == FXC_ERR_RUN ? fxc_strerror(rc) : "");
    return 0;
}
