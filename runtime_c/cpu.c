/* What the CPU running this program has: cpuid + xgetbv on x86, getauxval(AT_HWCAP / AT_HWCAP2) on ARM and
 * RISC-V, and RISC-V's vector length from the vlenb CSR.
 * Compiled for the architecture's baseline CPU, so it runs on any CPU the glue may have to refuse. */
#if defined(__riscv)
#define _POSIX_C_SOURCE 200809L /* sigaction, sigsetjmp: the vlenb probe */
#endif
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

#elif defined(__riscv) && __riscv_xlen == 64
#include <setjmp.h>
#include <signal.h>
#include <sys/auxv.h>

static sigjmp_buf vlenb_trap;

static void vlenb_trapped(int sig)
{
    (void)sig;
    siglongjmp(vlenb_trap, 1);
}

/* VLEN in bits: 8 x the vlenb CSR (0xc22), 0 when reading it traps: no V, a kernel that does not enable it, or
 * T-Head's RVV 0.7.1 (C906/C910), which has no vlenb and whose vector code is not RVV 1.0's. */
static uint32_t vlen_bits(void)
{
    static volatile int known = 0;
    static volatile uint32_t bits = 0;
    struct sigaction trap, saved;
    if (known)
        return bits;
    trap.sa_handler = vlenb_trapped;
    trap.sa_flags = 0;
    sigemptyset(&trap.sa_mask);
    if (sigaction(SIGILL, &trap, &saved) == 0) {
        if (sigsetjmp(vlenb_trap, 1) == 0) {
            unsigned long vlenb;
            __asm__ volatile("csrr %0, 0xc22" : "=r"(vlenb));
            bits = (uint32_t)(8 * vlenb);
        }
        sigaction(SIGILL, &saved, NULL);
    }
    known = 1;
    return bits;
}

/* leaf 1: AT_HWCAP bit (letter - 'a'); leaf 3: an RVV 1.0 vector unit of VLEN >= bit. */
int fxc_cpu_has(uint32_t leaf, uint32_t subleaf, uint32_t bit, uint32_t xcr0_mask)
{
    (void)subleaf;
    (void)xcr0_mask;
    if (leaf == 3)
        return vlen_bits() >= bit;
    unsigned long caps = getauxval(AT_HWCAP);
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
