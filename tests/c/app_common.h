/* Shared by the test programs: read raw inputs (argv: IN... OUT...), write raw outputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

static unsigned char arena[FXC_ARENA_BYTES + 1] __attribute__((aligned(FXC_ARENA_ALIGN)));
static const void *inputs[FXC_NUM_INPUTS + 1];
static void *outputs[FXC_NUM_OUTPUTS + 1];

static int load_inputs(char **paths)
{
    for (int i = 0; i < FXC_NUM_INPUTS; i++) {
        void *buf = malloc(fxc_input_specs[i].nbytes + 1);
        FILE *f = fopen(paths[i], "rb");
        if (!buf || !f || fread(buf, 1, fxc_input_specs[i].nbytes, f) != fxc_input_specs[i].nbytes) {
            fprintf(stderr, "cannot read input %d from %s\n", i, paths[i]);
            return -1;
        }
        fclose(f);
        inputs[i] = buf;
    }
    for (int i = 0; i < FXC_NUM_OUTPUTS; i++)
        if (!(outputs[i] = calloc(1, fxc_output_specs[i].nbytes + 1)))
            return -1;
    return 0;
}

static int save_outputs(char **paths)
{
    for (int i = 0; i < FXC_NUM_OUTPUTS; i++) {
        FILE *f = fopen(paths[i], "wb");
        if (!f || fwrite(outputs[i], 1, fxc_output_specs[i].nbytes, f) != fxc_output_specs[i].nbytes || fclose(f) != 0) {
            fprintf(stderr, "cannot write output %d to %s\n", i, paths[i]);
            return -1;
        }
    }
    return 0;
}
