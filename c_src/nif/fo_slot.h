/* Tracer slots. A session's tracer state is a small integer, its key,
 * instead of the session resource: the VM hands the state to every
 * callback, and turning a resource term back into a pointer costs a
 * third of our per-event budget, while a key is one array index away.
 *
 * The slot table is static and never freed, so a callback holding a stale
 * key (the session finished, or its slot went to another session since)
 * is always safe: it finds a different key in the slot and drops the
 * event. Keys are never reused: each one carries its slot's generation.
 *
 * Locks, always in this order: the table mutex (register, unregister),
 * a slot's lock (producers: the callbacks of the slot's session), the
 * session's own lock (the core). */
#ifndef FO_SLOT_H
#define FO_SLOT_H

#include <stdint.h>

#include "fo_resource.h"

#define FO_SLOT_BITS 14u
/* Sessions that can be tracers at the same time, node-wide. */
#define FO_SLOT_COUNT (1u << FO_SLOT_BITS)
#define FO_SLOT_MASK (FO_SLOT_COUNT - 1u)

typedef struct {
    _Alignas(64) fo_spinlock lock; /* one line per slot: sessions do not share */
    _Atomic uint64_t key;          /* of the session in it; 0 when free */
    fo_session_res *res;           /* under lock */
    uint64_t generation;           /* last one handed out (table mutex) */
} fo_slot;

/* The table; the callbacks read it through the inline functions below
 * (they run once per traced event). */
extern fo_slot fo_slots[FO_SLOT_COUNT];

int fo_slot_init(void);

/* Gives res a slot and a ring (growing to res->ring_request records) unless it
 * has them; res->slot_key is its tracer state from then on. 0 when every
 * slot is taken, memory is short or res no longer takes events. */
int fo_slot_register(fo_session_res *res);

/* res leaves its slot: when this returns, no callback uses res through
 * its key any more, and none ever will. Idempotent. */
void fo_slot_unregister(fo_session_res *res);

/* The session of key with its slot locked (producers one at a time), or
 * NULL, not locked, when key reaches no session. */
static inline fo_session_res *fo_slot_acquire(uint64_t key)
{
    fo_slot *s = &fo_slots[key & FO_SLOT_MASK];
    if (key == 0 || atomic_load_explicit(&s->key, memory_order_relaxed) != key)
        return NULL;
    fo_spin_lock(&s->lock);
    if (atomic_load_explicit(&s->key, memory_order_relaxed) != key) {
        fo_spin_unlock(&s->lock);
        return NULL;
    }
    return s->res;
}

static inline void fo_slot_release(uint64_t key)
{
    fo_spin_unlock(&fo_slots[key & FO_SLOT_MASK].lock);
}

/* 1 while key's session takes events (no lock). */
static inline int fo_slot_live(uint64_t key)
{
    return key != 0 && atomic_load_explicit(&fo_slots[key & FO_SLOT_MASK].key, memory_order_relaxed) == key;
}

#endif
