/* The tracer clock: nanoseconds on CLOCK_MONOTONIC. A tracer-module event
 * is stamped in the traced process, and clock_gettime costs 25 ns there
 * (the vDSO, here) where the CPU's time-stamp counter costs 10: where the
 * TSC is what the kernel itself keeps time with (x86-64, invariant TSC,
 * clocksource "tsc"), a session's clock reads the TSC and scales it with a
 * rate measured against CLOCK_MONOTONIC since the library loaded. Each
 * session keeps the rate it started with, so its times never jump. */
#ifndef FO_CLOCK_H
#define FO_CLOCK_H

#include <stdint.h>
#include <time.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

typedef struct {
    uint64_t base_tsc;
    int64_t base_ns;
    uint64_t ns_per_tick; /* 32.32 fixed point; 0: read CLOCK_MONOTONIC */
} fo_clock;

/* At load: whether the TSC can be used, and the first calibration point. */
void fo_clock_init(void);

/* CLOCK_MONOTONIC in nanoseconds. */
static inline int64_t fo_tracer_clock_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* A new session's clock: on the TSC once the rate is known well (some
 * time after load), else CLOCK_MONOTONIC itself. precise = 0 forces the
 * latter (graph sessions share the tracer clock with the router). */
void fo_clock_start(fo_clock *c, int precise);

/* A raw reading: TSC ticks, or nanoseconds when the clock has no TSC.
 * The traced process only reads; whoever folds its events scales them
 * (fo_clock_ns), so the multiply is off its path. */
static inline int64_t fo_clock_read(const fo_clock *c)
{
#if defined(__x86_64__)
    if (c->ns_per_tick != 0)
        return (int64_t)__rdtsc();
#endif
    return fo_tracer_clock_ns();
}

/* A reading of c in nanoseconds. */
static inline int64_t fo_clock_ns(const fo_clock *c, int64_t raw)
{
    if (c->ns_per_tick == 0)
        return raw;
    /* another core's counter may be a hair behind the base */
    int64_t ticks = (int64_t)((uint64_t)raw - c->base_tsc);
    unsigned __int128 magnitude = (unsigned __int128)(ticks < 0 ? -(uint64_t)ticks : (uint64_t)ticks);
    int64_t ns = (int64_t)((magnitude * c->ns_per_tick) >> 32);
    return ticks < 0 ? c->base_ns - ns : c->base_ns + ns;
}

static inline int64_t fo_clock_now(const fo_clock *c)
{
    return fo_clock_ns(c, fo_clock_read(c));
}

#endif
