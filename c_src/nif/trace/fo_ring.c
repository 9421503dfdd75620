#include "fo_ring.h"

#include <erl_nif.h>
#include <string.h>

#include "fo_decode.h"

uint32_t fo_ring_capacity(uint32_t requested)
{
    uint32_t capacity = FO_RING_MIN_RECORDS;
    while (capacity < requested && capacity < FO_RING_MAX_RECORDS)
        capacity <<= 1;
    return capacity;
}

int fo_ring_alloc(fo_ring *r, uint32_t limit)
{
    if (r->recs != NULL)
        return 1;
    limit = fo_ring_capacity(limit);
    uint32_t capacity = limit < FO_RING_INITIAL_RECORDS ? limit : FO_RING_INITIAL_RECORDS;
    r->recs = enif_alloc(sizeof(fo_rec) * (size_t)capacity);
    if (r->recs == NULL)
        return 0;
    r->capacity = capacity;
    r->largest = capacity;
    r->limit = limit;
    atomic_store(&r->eager, capacity < FO_RING_EAGER_RECORDS && capacity < limit);
    return 1;
}

void fo_ring_grow(fo_ring *r)
{
    if (r->recs == NULL || r->capacity >= r->limit || fo_ring_pending(r) != 0)
        return;
    fo_rec *bigger = enif_alloc(sizeof(fo_rec) * (size_t)r->capacity * 2);
    if (bigger == NULL)
        return;
    enif_free(r->recs);
    r->recs = bigger;
    r->capacity *= 2;
    r->largest = r->capacity;
    atomic_store(&r->eager, r->capacity < FO_RING_EAGER_RECORDS && r->capacity < r->limit);
    /* empty: both ends start over */
    atomic_store_explicit(&r->tail, 0, memory_order_relaxed);
    atomic_store_explicit(&r->head, 0, memory_order_release);
}

void fo_ring_free(fo_ring *r)
{
    enif_free(r->recs);
    r->recs = NULL;
    r->capacity = 0;
}

uint64_t fo_ring_fold(fo_ring *r, fo_session *core, const fo_clock *clock, ErlNifEnv *env)
{
    uint64_t ignored = atomic_exchange_explicit(&r->ignored, 0, memory_order_relaxed);
    uint64_t malformed = atomic_exchange_explicit(&r->malformed, 0, memory_order_relaxed);
    if (ignored > 0)
        fo_session_count_ignored(core, ignored);
    if (malformed > 0)
        fo_session_count_malformed(core, malformed);
    if (r->recs == NULL)
        return 0;
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t mask = r->capacity - 1;
    fo_event ev;
    for (uint64_t i = tail; i != head; i++) {
        const fo_rec *rec = &r->recs[i & mask];
        ev.kind = (fo_event_kind)rec->kind;
        ev.flags = rec->flags;
        ev.pid = rec->pid;
        ev.ts_ns = fo_clock_ns(clock, rec->ts);
        ev.mfa.module = rec->module;
        ev.mfa.function = rec->function;
        ev.mfa.arity = rec->arity;
        ev.caller.module = rec->caller_module;
        ev.caller.function = rec->caller_function;
        ev.caller.arity = rec->caller_arity;
        ev.thread = (rec->flags & FO_EVF_HAS_THREAD) ? rec->caller_module : 0;
        ev.heap_words = (rec->flags & FO_EVF_HAS_HEAP) ? rec->caller_module : 0;
        if (fo_decode_check_atoms(env, &ev) == FO_DECODED)
            fo_session_apply(core, &ev);
        else
            fo_session_count_malformed(core, 1);
    }
    atomic_store_explicit(&r->tail, head, memory_order_release);
    return head - tail;
}

size_t fo_ring_memory(const fo_ring *r)
{
    return r->recs == NULL ? 0 : sizeof(fo_rec) * (size_t)r->capacity;
}
