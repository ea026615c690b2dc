/* Runs a dynamic model's object once at given symbol values: fxc_model_run(inputs, outputs, arena, syms).
 * argv: ARENA_BYTES IN_FILE IN_BYTES OUT_FILE OUT_BYTES SYM...  (one input and one output, capacity-sized: the
 * actual elements at the start of each capacity dim). The arena and the output start as 0xFF bytes (NaN), so a
 * read of an unwritten element shows in the result. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fxc_model_run(const void *const *inputs, void *const *outputs, uint8_t *arena, const int64_t *syms);

static void *filled(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p)
        memset(p, 0xFF, bytes);
    return p;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: %s ARENA_BYTES IN_FILE IN_BYTES OUT_FILE OUT_BYTES SYM...\n", argv[0]);
        return 2;
    }
    size_t arena_bytes = strtoull(argv[1], NULL, 10), in_bytes = strtoull(argv[3], NULL, 10);
    size_t out_bytes = strtoull(argv[5], NULL, 10);
    int64_t syms[16];
    int nsyms = argc - 6;
    for (int i = 0; i < nsyms && i < 16; i++)
        syms[i] = strtoll(argv[6 + i], NULL, 10);
    void *arena = filled(arena_bytes), *in = filled(in_bytes), *out = filled(out_bytes);
    FILE *f = fopen(argv[2], "rb");
    if (!arena || !in || !out || !f || fread(in, 1, in_bytes, f) != in_bytes) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 1;
    }
    fclose(f);
    const void *ins[1] = {in};
    void *outs[1] = {out};
    fxc_model_run(ins, outs, arena, syms);
    f = fopen(argv[4], "wb");
    if (!f || fwrite(out, 1, out_bytes, f) != out_bytes || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", argv[4]);
        return 1;
    }
    return 0;
}
