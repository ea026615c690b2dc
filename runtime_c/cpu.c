/* What the CPU running this program has: cpuid + xgetbv on x86, getauxval(AT_HWCAP / AT_HWCAP2) on ARM.
 * Compiled for the architecture's baseline CPU, so it runs on any CPU the glue may have to refuse. */
#include <stddef.h>
#include <stdint.h>

#include "fxc_runtime.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xcr0(void)
{
    uint32_t a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE: the OS saves the vector state */
        return 0;
    __asm__ volatile("xgetbv" : "=a"(a), "=d"(d) : "c"(0));
    return ((uint64_t)d << 32) | a;
}

int fxc_cpu_has(uint32_t leaf, uint32_t subleaf, uint32_t bit, uint32_t xcr0_mask)
{
    uint32_t r[4] = {0, 0, 0, 0};
    if (__get_cpuid_max(leaf & 0x80000000u, NULL) < leaf)
        return 0;
    __cpuid_count(leaf, subleaf, r[0], r[1], r[2], r[3]);
    if (bit >= 128 || !(r[bit / 32] & (1u << (bit % 32))))
        return 0;
    return (xcr0() & xcr0_mask) == xcr0_mask;
}

#elif defined(__aarch64__) || defined(__arm__)
#include <sys/auxv.h>

#ifndef AT_HWCAP2
#define AT_HWCAP2 26
#endif

int fxc_cpu_has(uint32_t leaf, uint32_t subleaf, uint32_t bit, uint32_t xcr0_mask)
{
    (void)subleaf;
    (void)xcr0_mask;
    unsigned long caps = getauxval(leaf == 2 ? AT_HWCAP2 : AT_HWCAP);
    return bit < 8 * sizeof caps && (caps >> bit) & 1u;
}

#else
int fxc_cpu_has(uint32_t leaf, uint32_t subleaf, uint32_t bit, uint32_t xcr0_mask)
{
    (void)leaf;
    (void)subleaf;
    (void)bit;
    (void)xcr0_mask;
    return 1;
}
#endif
