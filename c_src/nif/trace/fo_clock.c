#include "fo_clock.h"

#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

/* The rate is measured over at least this long (reading both clocks
 * takes tens of ns, so the error is under 2 parts per million); sessions
 * started sooner after load read CLOCK_MONOTONIC. */
#define CALIBRATION_NS 20000000

static int tsc_usable;
static uint64_t load_tsc;
static int64_t load_ns;

#if defined(__x86_64__)
static int invariant_tsc(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
        return 0;
    __get_cpuid(0x80000007u, &a, &b, &c, &d);
    return (d >> 8) & 1u;
}

/* The kernel checked the TSC (stable, in step across CPUs) only if it
 * keeps time with it. */
static int kernel_uses_tsc(void)
{
    char name[32] = {0};
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (f == NULL)
        return 0;
    int ok = fgets(name, sizeof(name), f) != NULL && strcmp(name, "tsc\n") == 0;
    fclose(f);
    return ok;
}

/* Both clocks at one instant: the TSC read between two CLOCK_MONOTONIC
 * reads, paired with their midpoint. */
static void read_pair(uint64_t *tsc, int64_t *ns)
{
    int64_t before = fo_tracer_clock_ns();
    *tsc = __rdtsc();
    int64_t after = fo_tracer_clock_ns();
    *ns = before + (after - before) / 2;
}
#endif

void fo_clock_init(void)
{
#if defined(__x86_64__)
    if (tsc_usable || !invariant_tsc() || !kernel_uses_tsc())
        return;
    read_pair(&load_tsc, &load_ns);
    tsc_usable = 1;
#endif
}

void fo_clock_start(fo_clock *c, int precise)
{
    memset(c, 0, sizeof(*c));
#if defined(__x86_64__)
    if (!precise || !tsc_usable)
        return;
    uint64_t tsc;
    int64_t ns;
    read_pair(&tsc, &ns);
    if (ns - load_ns < CALIBRATION_NS || tsc <= load_tsc)
        return;
    unsigned __int128 rate = ((unsigned __int128)(uint64_t)(ns - load_ns) << 32) / (tsc - load_tsc);
    if (rate == 0 || rate > UINT32_MAX * (unsigned __int128)64)
        return; /* a counter slower than 16 MHz or faster than 4 THz: not a TSC we understand */
    c->base_tsc = tsc;
    c->base_ns = ns;
    c->ns_per_tick = (uint64_t)rate;
#else
    (void)precise;
#endif
}
