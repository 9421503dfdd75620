/* Tracer slots. A session's tracer state is a small integer, its key,
 * instead of the session resource: the VM hands the state to every
 * callback, and turning a resource term back into a pointer costs a
 * third of our per-event budget, while a key is one array index away. The
 * key's term itself (an immediate) is hashed to find its slot, so the
 * callbacks do not even decode it; a key is registered where its term
 * hashes to a free slot.
 *
 * The slot table is static and never freed, so a callback holding a stale
 * key (the session finished, or the slot went to another session since)
 * is always safe: it finds another term in the slot and drops the event.
 * Keys are never reused (they count up from the load time).
 *
 * Locks, always in this order: the table mutex (register, unregister),
 * a slot's lock (producers: the callbacks of the slot's session), the
 * session's own lock (the core). */
#ifndef FO_TRACER_SLOTS_H
#define FO_TRACER_SLOTS_H

#include <stdint.h>

#include "fo_resource.h"

#define FO_TRACER_SLOT_BITS 14u
/* Sessions that can be tracers at the same time, node-wide. */
#define FO_TRACER_SLOT_COUNT (1u << FO_TRACER_SLOT_BITS)

typedef struct {
    _Alignas(64) fo_spinlock lock; /* one line per slot: sessions do not share */
    _Atomic ERL_NIF_TERM term;     /* the key of the session in it; 0 when free */
    fo_session_res *res;           /* under lock */
} fo_tracer_slot;

/* The table; the callbacks read it through the inline functions below
 * (they run once per traced event). */
extern fo_tracer_slot fo_tracer_slot_table[FO_TRACER_SLOT_COUNT];

int fo_tracer_slots_init(void);

/* The slot a key's term belongs in: the top bits of one multiply. */
static inline uint32_t fo_tracer_slots_index(ERL_NIF_TERM term)
{
    return (uint32_t)(((uint64_t)term * 0x9E3779B97F4A7C15ULL) >> (64 - FO_TRACER_SLOT_BITS));
}

/* Gives res a slot and a ring (growing to res->ring_request records) unless
 * it has them; res->slot_term is its tracer state from then on. 0 when no
 * free slot was found, memory is short or res no longer takes events. */
int fo_tracer_slots_register(ErlNifEnv *env, fo_session_res *res);

/* res leaves its slot: when this returns, no callback uses res through
 * its key any more, and none ever will. Idempotent. */
void fo_tracer_slots_unregister(fo_session_res *res);

/* The session of the key term with its slot locked (producers one at a
 * time), or NULL, not locked, when it reaches no session. */
static inline fo_session_res *fo_tracer_slots_acquire(ERL_NIF_TERM term)
{
    fo_tracer_slot *s = &fo_tracer_slot_table[fo_tracer_slots_index(term)];
    if (term == 0 || atomic_load_explicit(&s->term, memory_order_relaxed) != term)
        return NULL;
    fo_spin_lock(&s->lock);
    if (atomic_load_explicit(&s->term, memory_order_relaxed) != term) {
        fo_spin_unlock(&s->lock);
        return NULL;
    }
    return s->res;
}

static inline void fo_tracer_slots_release(ERL_NIF_TERM term)
{
    fo_spin_unlock(&fo_tracer_slot_table[fo_tracer_slots_index(term)].lock);
}

/* 1 while the key term's session takes events (no lock). */
static inline int fo_tracer_slots_live(ERL_NIF_TERM term)
{
    return term != 0 &&
           atomic_load_explicit(&fo_tracer_slot_table[fo_tracer_slots_index(term)].term, memory_order_relaxed) == term;
}

#endif
