#include "fo_slot.h"

#include <string.h>

#define SLOT_MASK FO_SLOT_MASK



fo_slot fo_slots[FO_SLOT_COUNT];

static uint32_t free_list[FO_SLOT_COUNT];
static uint32_t free_count;
static ErlNifMutex *table_lock;

int fo_slot_init(void)
{
    if (table_lock != NULL)
        return 1; /* an upgrade: the library's statics are shared */
    table_lock = enif_mutex_create("flame_on_slots");
    if (table_lock == NULL)
        return 0;
    /* Generations start from the load time: keys held from a library
     * unloaded and loaded again almost surely match nothing. */
    uint64_t epoch = ((uint64_t)enif_monotonic_time(ERL_NIF_USEC) & 0xffffu) << 24;
    for (uint32_t i = 0; i < FO_SLOT_COUNT; i++) {
        fo_spin_init(&fo_slots[i].lock);
        atomic_store(&fo_slots[i].key, 0);
        fo_slots[i].res = NULL;
        fo_slots[i].generation = epoch;
        free_list[i] = FO_SLOT_COUNT - 1u - i; /* slot 0 first */
    }
    free_count = FO_SLOT_COUNT;
    return 1;
}

int fo_slot_register(fo_session_res *res)
{
    int ok = 0;
    enif_mutex_lock(table_lock);
    if (res->slot_key != 0) {
        ok = 1;
    } else if (free_count > 0 && atomic_load(&res->active) &&
               fo_ring_alloc(&res->ring, res->ring_request)) {
        uint32_t index = free_list[--free_count];
        fo_slot *s = &fo_slots[index];
        uint64_t key = (++s->generation << FO_SLOT_BITS) | index;
        fo_spin_lock(&s->lock);
        s->res = res;
        atomic_store(&s->key, key);
        fo_spin_unlock(&s->lock);
        res->slot_key = key;
        ok = 1;
    }
    enif_mutex_unlock(table_lock);
    return ok;
}

void fo_slot_unregister(fo_session_res *res)
{
    enif_mutex_lock(table_lock);
    uint64_t key = res->slot_key;
    if (key != 0) {
        fo_slot *s = &fo_slots[key & SLOT_MASK];
        /* Taking the lock waits for a callback inside; later ones find
         * the key gone. */
        fo_spin_lock(&s->lock);
        atomic_store(&s->key, 0);
        s->res = NULL;
        fo_spin_unlock(&s->lock);
        atomic_store(&res->slot_key, 0);
        free_list[free_count++] = (uint32_t)(key & SLOT_MASK);
    }
    enif_mutex_unlock(table_lock);
}
