/* The bounded buffer between the tracer callbacks and the core. trace/5
 * runs in the traced process, so it only stamps, decodes and appends a
 * compact record here; the records are folded into the core in bulk, on
 * the drainer thread (fo_drainer.h) while the process runs on, or by
 * whoever needs the core next (finish, stats, a sample). A producer that
 * finds the ring full folds it itself: nothing is dropped, the memory
 * stays bounded, and a drainer that falls behind costs only speed.
 *
 * Single producer at a time (the slot lock, fo_tracer_slots.h), single
 * consumer at a time (the session lock); head and tail are the only shared
 * words. */
#ifndef FO_RING_H
#define FO_RING_H

#include <erl_nif.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fo_clock.h"
#include "fo_session.h"

/* One event, 56 bytes: the atoms of the MFAs are immediates that never
 * move, so they are stored as they are and turned into frames by the
 * fold. kind is an fo_event_kind, flags FO_EVF_*. An `in` flagged
 * FO_EVF_HAS_THREAD keeps its thread in caller_module, a gc event flagged
 * FO_EVF_HAS_HEAP its heap words. */
typedef struct {
    int64_t ts;   /* a raw fo_clock reading, or nanoseconds (replays) */
    uint64_t pid;
    uint64_t module, function;
    uint64_t caller_module, caller_function;
    uint16_t arity, caller_arity;
    uint8_t kind, flags;
} fo_rec;

/* A ring starts small (a sample session only sees in/out events and
 * never fills it), and the drainer doubles it at each fold it is asked
 * for, up to FO_RING_EAGER_RECORDS; past that it doubles each time a
 * producer finds it full, up to its limit (new/1's buffer_events). The
 * default limit is that same size: 4096 records (224 KiB) stay in the
 * traced core's cache, and bigger rings measured slower per event even
 * where they spared the traced process folds (bench/RESULTS.md). */
#define FO_RING_INITIAL_RECORDS 1024u
#define FO_RING_EAGER_RECORDS 4096u
#define FO_RING_DEFAULT_RECORDS 4096u
#define FO_RING_MIN_RECORDS 64u
#define FO_RING_MAX_RECORDS (1u << 22)

typedef struct {
    fo_rec *recs;           /* NULL until the session becomes a tracer */
    uint32_t capacity;      /* a power of two */
    uint32_t limit;         /* the most it grows to, a power of two */
    uint32_t largest;       /* the most it held (kept when freed) */
    _Atomic uint64_t head;  /* records written: producers, under the slot lock */
    _Atomic uint64_t tail;  /* records folded: consumers, under the session lock */
    atomic_int drain_queued; /* the drainer has this session in its queue */
    atomic_int eager;       /* below FO_RING_EAGER_RECORDS: the drainer grows it */
    atomic_ullong ignored;  /* events the producers did not keep (kinds the core */
    atomic_ullong malformed; /*  does not use, undecodable): counted at the fold */
    uint64_t producer_folds; /* times a producer found the ring full (session lock) */
} fo_ring;

/* The capacity actually used for a requested one: a power of two within
 * the bounds above. */
uint32_t fo_ring_capacity(uint32_t requested);

/* Allocates the records: FO_RING_INITIAL_RECORDS, or limit if smaller
 * (limit from fo_ring_capacity). 0 when memory is short. Idempotent. */
int fo_ring_alloc(fo_ring *r, uint32_t limit);
void fo_ring_free(fo_ring *r);

/* Doubles an empty ring (just folded) below its limit; keeps it as it is
 * when memory is short. Caller holds both the slot and the session lock. */
void fo_ring_grow(fo_ring *r);

static inline uint64_t fo_ring_pending(const fo_ring *r)
{
    return atomic_load_explicit(&r->head, memory_order_acquire) -
           atomic_load_explicit(&r->tail, memory_order_acquire);
}

/* Producer side: the record to fill next, or NULL when the ring is full
 * (fold first). Publish it with fo_ring_publish. */
static inline fo_rec *fo_ring_next(fo_ring *r)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (head - atomic_load_explicit(&r->tail, memory_order_acquire) >= r->capacity)
        return NULL;
    return &r->recs[head & (r->capacity - 1)];
}

/* Makes the record from fo_ring_next visible to consumers; returns how
 * many records are now waiting. */
static inline uint64_t fo_ring_publish(fo_ring *r)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed) + 1;
    atomic_store_explicit(&r->head, head, memory_order_release);
    return head - atomic_load_explicit(&r->tail, memory_order_acquire);
}

/* Consumer side (caller holds the session lock): applies every published
 * record to core, in order, its time turned into nanoseconds on clock
 * (the producers' clock) and its atoms checked (fo_decode_check_atoms; env
 * is any environment the caller may use), and the producers'
 * ignored/malformed counts. Returns the records folded. */
uint64_t fo_ring_fold(fo_ring *r, fo_session *core, const fo_clock *clock, ErlNifEnv *env);

size_t fo_ring_memory(const fo_ring *r);

/* The most the ring held, in bytes (kept once it is freed). */
static inline uint64_t fo_ring_largest_bytes(const fo_ring *r)
{
    return (uint64_t)r->largest * sizeof(fo_rec);
}

#endif
