#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "fxc_runtime.h"

/* Peak resident set size: VmHWM from /proc/self/status, else getrusage (kB on Linux). */
int64_t fxc_peak_rss_bytes(void)
{
    char line[256];
    FILE *fh = fopen("/proc/self/status", "r");
    if (fh) {
        while (fgets(line, sizeof line, fh)) {
            long long kb;
            if (strncmp(line, "VmHWM:", 6) == 0 && sscanf(line + 6, "%lld", &kb) == 1) {
                fclose(fh);
                return (int64_t)kb * 1024;
            }
        }
        fclose(fh);
    }
    struct rusage usage;
    if (getrusage(RUSAGE_SELF, &usage) == 0)
        return (int64_t)usage.ru_maxrss * 1024;
    return -1;
}
