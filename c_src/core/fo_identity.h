/* Which Erlang process a CPU sample caught, without trace flags.
 *
 * The BEAM's JIT (x86-64, OTP 24+) keeps the running process's Process
 * pointer in a fixed register (r13) for as long as Erlang code runs; the
 * runtime's C code that Erlang code calls (BIFs, collections, term
 * building) gets it as an argument and, where it needs r13 itself, saves
 * it on the C stack first. A sample's user registers and its copy of the
 * C stack therefore name the process, checked against the pointers of the
 * processes being traced (a NIF called by a process learns its own).
 * Measured on one scheduler against the `running` flag's in/out log: 97%
 * of 1 488 samples named the process that ran, 1.2% another (almost all
 * at a slice's edge or in the scheduler's code after an `out`), 1.6%
 * none. bench/RESULTS.md has the run.
 *
 * Pure functions, tested in c_src/test/test_identity.c. */
#ifndef FO_IDENTITY_H
#define FO_IDENTITY_H

#include <stdint.h>

/* The traced process a sample names, or 0: `reg` (the register the JIT
 * keeps it in) if it is one of `known` (n of them, sorted ascending),
 * else the first of the C stack copy's words (lowest address first) that
 * is. */
uint64_t fo_identity_of(uint64_t reg, const uint64_t *stack, uint64_t words, const uint64_t *known, uint32_t n);

/* Sorts n pointers ascending and drops repeats; returns how many stay. */
uint32_t fo_identity_sort(uint64_t *known, uint32_t n);

/* One thread's samples in time order, for fo_identity_runs: when, the
 * thread's CPU time then (0: unknown), and the process each named (0:
 * none). */
typedef struct {
    int64_t ts_ns;
    int64_t cpu_ns;
    uint64_t proc;
} fo_identity_sample;

/* Cuts the CPU time of process `proc` on one thread, between from_ns and
 * to_ns, into slices from that thread's samples (n, in time order): each
 * run of consecutive samples naming proc is one slice, unless the thread
 * slept between two of them: their times differ by more than their CPU
 * times do, by half a period (without CPU times, they are more than two
 * periods apart). A gap alone says nothing: a sample that would fall in
 * the kernel is not taken. Each slice runs from a sample period before
 * its first sample (not before the sample before it, of someone else,
 * nor from_ns) to just after its last. `each` gets every slice
 * [from, to): a sample at ts is taken by a slice with from <= ts < to.
 * Returns the slices given. */
typedef void (*fo_identity_slice_fn)(void *ctx, int64_t from_ns, int64_t to_ns);
uint32_t fo_identity_runs(const fo_identity_sample *samples, uint32_t n, uint64_t proc, int64_t from_ns,
                          int64_t to_ns, int64_t period_ns, fo_identity_slice_fn each, void *ctx);

#endif
