/* Samplers that sleep while their process waits. A sampler that finds its
 * process waiting, with nothing run since its last look, arms a wake-up
 * here and blocks; the process's next `in` event takes the wake-up and the
 * tracer path has the sampler woken (fo_wake_note.h). While the process
 * waits, its sampler costs nothing: no timer, no tick, no scheduler woken
 * every interval. A plain table: it sends nothing and knows no session. */
#ifndef FO_WAKE_H
#define FO_WAKE_H

#include <erl_nif.h>
#include <stdatomic.h>
#include <stdint.h>

#include "fo_spinlock.h"

/* Armed wake-ups per session: a sampler that finds no room polls. */
#define FO_WAKE_SLOTS 64u

typedef struct {
    _Atomic uint64_t pid; /* the process a sampler sleeps on; 0: free */
    ErlNifPid to;         /* that sampler (written under the lock) */
} fo_wake_slot;

typedef struct {
    atomic_uint armed; /* slots in use: the tracer's only test when 0 */
    fo_spinlock lock;  /* arming, cancelling, and taking a match */
    fo_wake_slot slots[FO_WAKE_SLOTS];
} fo_wakes;

void fo_wakes_init(fo_wakes *w);

/* Arm (or re-arm) pid's wake-up to `to`. 0 when every slot is taken. */
int fo_wakes_arm(fo_wakes *w, uint64_t pid, const ErlNifPid *to);

/* Disarm pid's wake-up, if armed. */
void fo_wakes_cancel(fo_wakes *w, uint64_t pid);

/* Any wake-up armed: one relaxed load, on every `in` event. */
static inline int fo_wakes_any(fo_wakes *w)
{
    return atomic_load_explicit(&w->armed, memory_order_relaxed) != 0;
}

/* pid was scheduled in: when a sampler sleeps on it, 1 and *to (that
 * sampler), its wake-up disarmed, so only one `in` takes it; else 0. */
int fo_wakes_take(fo_wakes *w, uint64_t pid, ErlNifPid *to);

#endif
