/* Samplers that sleep while their process waits. A sampler that finds its
 * process waiting, with nothing run since its last look, arms a wake-up
 * here and blocks; the tracer callback of the process's next `in` event
 * has it sent {flame_on_in, Pid} (by the drainer's thread: fo_drainer.h). While the process waits, its sampler costs
 * nothing: no timer, no tick, no scheduler woken every interval. */
#ifndef FO_WAKE_H
#define FO_WAKE_H

#include <erl_nif.h>
#include <stdatomic.h>
#include <stdint.h>

#include "fo_event.h"
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

/* pid was scheduled in: have its sampler sent {flame_on_in, Pid} once
 * (by the drainer's thread) and disarm. */
void fo_wakes_fire(fo_wakes *w, uint64_t pid);

/* Every tracer path that takes a session's process events calls this with
 * each one (the slot-key tracer and the graph tracer's followers): an
 * `in` wakes the process's sleeping sampler, if any. */
static inline void fo_wakes_note(fo_wakes *w, unsigned kind, uint64_t pid)
{
    if (kind == FO_EV_IN && fo_wakes_any(w))
        fo_wakes_fire(w, pid);
}

// sample_sleep(Session, Pid, Sampler) -> ok | full | stopped
//   arm Pid's wake-up to Sampler (its next `in` event has Sampler sent
//   {flame_on_in, Pid}); full: no room, the sampler polls instead.
// sample_wake_cancel(Session, Pid) -> ok
ERL_NIF_TERM fo_wake_sleep_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM fo_wake_cancel_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
