#include "fo_tracer_slots.h"

#include <string.h>

fo_tracer_slot fo_tracer_slot_table[FO_TRACER_SLOT_COUNT];

static ErlNifMutex *table_lock;
static uint64_t next_key; /* table mutex */

/* Attempts to find a free slot for a new key: the slot is where the key's
 * term hashes, so a busy table may take a few keys. */
#define REGISTER_TRIES 64

int fo_tracer_slots_init(void)
{
    if (table_lock != NULL)
        return 1; /* an upgrade: the library's statics are shared */
    table_lock = enif_mutex_create("flame_on_slots");
    if (table_lock == NULL)
        return 0;
    /* Keys count from the load time: a key held from a library unloaded
     * and loaded again almost surely matches nothing. */
    next_key = (((uint64_t)enif_monotonic_time(ERL_NIF_USEC) & 0xffffu) << 32) + 1;
    for (uint32_t i = 0; i < FO_TRACER_SLOT_COUNT; i++) {
        fo_spin_init(&fo_tracer_slot_table[i].lock);
        atomic_store(&fo_tracer_slot_table[i].term, 0);
        fo_tracer_slot_table[i].res = NULL;
    }
    return 1;
}

int fo_tracer_slots_register(ErlNifEnv *env, fo_session_res *res)
{
    int ok = 0;
    enif_mutex_lock(table_lock);
    if (res->slot_term != 0) {
        ok = 1;
    } else if (atomic_load(&res->active) && fo_ring_alloc(&res->ring, res->ring_request)) {
        for (int tries = 0; tries < REGISTER_TRIES && !ok; tries++) {
            ERL_NIF_TERM term = enif_make_uint64(env, next_key++);
            fo_tracer_slot *s = &fo_tracer_slot_table[fo_tracer_slots_index(term)];
            if (atomic_load(&s->term) != 0)
                continue;
            fo_spin_lock(&s->lock);
            s->res = res;
            atomic_store(&s->term, term);
            fo_spin_unlock(&s->lock);
            atomic_store(&res->slot_term, term);
            ok = 1;
        }
    }
    enif_mutex_unlock(table_lock);
    return ok;
}

void fo_tracer_slots_unregister(fo_session_res *res)
{
    enif_mutex_lock(table_lock);
    ERL_NIF_TERM term = atomic_load(&res->slot_term);
    if (term != 0) {
        fo_tracer_slot *s = &fo_tracer_slot_table[fo_tracer_slots_index(term)];
        /* Taking the lock waits for a callback inside; later ones find
         * the key gone. */
        fo_spin_lock(&s->lock);
        atomic_store(&s->term, 0);
        s->res = NULL;
        fo_spin_unlock(&s->lock);
        atomic_store(&res->slot_term, 0);
    }
    enif_mutex_unlock(table_lock);
}
