/* The session lock. Tracer callbacks take it once per event for a few tens
 * of nanoseconds, so a test-and-set spinlock beats a mutex there (measured
 * in bench/anatomy.exs); waiters yield the CPU after a short spin, so a
 * holder that was descheduled (or finish/2 exporting a large result on a
 * dirty scheduler) does not burn a core. */
#ifndef FO_SPINLOCK_H
#define FO_SPINLOCK_H

#include <sched.h>
#include <stdatomic.h>

typedef struct {
    atomic_flag held;
} fo_spinlock;

#define FO_SPIN_BEFORE_YIELD 64

static inline void fo_spin_init(fo_spinlock *l)
{
    atomic_flag_clear_explicit(&l->held, memory_order_release);
}

static inline void fo_spin_lock(fo_spinlock *l)
{
    unsigned spins = 0;
    while (atomic_flag_test_and_set_explicit(&l->held, memory_order_acquire)) {
        if (++spins == FO_SPIN_BEFORE_YIELD) {
            sched_yield();
            spins = 0;
        }
    }
}

static inline void fo_spin_unlock(fo_spinlock *l)
{
    atomic_flag_clear_explicit(&l->held, memory_order_release);
}

#endif
