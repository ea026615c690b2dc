/* Runs a compiled RegexFullMatch matcher (tests/test_regex_dfa.py) on every line of a file: each line is one
   string in hex ("" for the empty string); prints 1 or 0 per line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern _Bool fxc_regex_match(const unsigned char *bytes, long long len);

static int nibble(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    FILE *f = fopen(argv[1], "r");
    if (!f) return 2;
    static char line[1 << 16];
    static unsigned char bytes[1 << 15];
    while (fgets(line, sizeof line, f)) {
        size_t n = strcspn(line, "\r\n") / 2;
        for (size_t i = 0; i < n; i++) bytes[i] = (unsigned char)(nibble(line[2 * i]) << 4 | nibble(line[2 * i + 1]));
        putchar(fxc_regex_match(bytes, (long long)n) ? '1' : '0');
    }
    putchar('\n');
    fclose(f);
    return 0;
}
