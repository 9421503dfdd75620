/* A kept tail request's copy (fo_tail_kept.h). */
#include "fo_tail_kept.h"

#include <bsd/stdlib.h>
#include <stdlib.h>
#include <string.h>

#include "fo_cpu.h"
#include "fo_hash.h"
#include "fo_index.h"
#include "fo_perf.h"

static ErlNifResourceType *kept_type;

static void kept_dtor(ErlNifEnv *env, void *obj)
{
    (void)env;
    fo_tail_kept *k = obj;
    if (k->slices_owned)
        free(k->slices);
    free(k->ctx);
    free(k->ctx_frames);
    free(k->samples);
    free(k->frames);
}

int fo_tail_kept_open(ErlNifEnv *env)
{
    kept_type = enif_open_resource_type(env, NULL, "flame_on_tail_kept", kept_dtor,
                                        ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER, NULL);
    return kept_type != NULL;
}

const fo_tail_kept *fo_tail_kept_get(ErlNifEnv *env, ERL_NIF_TERM term)
{
    void *obj;
    return kept_type != NULL && enif_get_resource(env, term, kept_type, &obj) ? obj : NULL;
}

/* Copies n items of size each (NULL for none; *failed when memory is short). */
static void *copy_of(const void *from, size_t n, size_t each, int *failed)
{
    if (n == 0)
        return NULL;
    void *to = reallocarray(NULL, n, each);
    if (to == NULL)
        *failed = 1;
    else
        memcpy(to, from, n * each);
    return to;
}

typedef struct {
    fo_tail_kept *k;
    uint64_t thread;
    uint32_t max_samples, max_frames;
    uint32_t samples_cap, frames_cap;
    fo_index index; /* (parent, mfa) -> frame */
    int failed;
} gather;

/* Room for one more of size each in *items (cap *cap, count used), within
 * limit; nonzero when there is. */
static int grow(void **items, uint32_t *cap, uint32_t used, uint32_t limit, size_t each, int *failed)
{
    if (used < *cap)
        return 1;
    if (used >= limit)
        return 0;
    uint32_t next = *cap == 0 ? 64 : *cap * 2;
    if (next > limit)
        next = limit;
    void *grown = reallocarray(*items, next, each);
    if (grown == NULL) {
        *failed = 1;
        return 0;
    }
    *items = grown;
    *cap = next;
    return 1;
}

static uint64_t frame_hash(uint32_t parent, const fo_mfa *mfa)
{
    return fo_hash_pair(fo_hash_pair(mfa->module, mfa->function), ((uint64_t)parent << 8) ^ mfa->arity);
}

static uint64_t rehash_frame(const void *table, uint32_t index)
{
    const kept_frame *f = &((const kept_frame *)table)[index];
    return frame_hash(f->parent, &f->mfa);
}

/* The frame of mfa under parent, made if new; KEPT_ROOT when the copy
 * has no room. */
static uint32_t frame_of(gather *g, uint32_t parent, const fo_mfa *mfa)
{
    fo_tail_kept *k = g->k;
    /* made at the first sample: most kept requests of a short one have none */
    if (g->index.slots == NULL && !fo_index_init(&g->index, 64)) {
        g->failed = 1;
        return KEPT_ROOT;
    }
    uint64_t hash = frame_hash(parent, mfa);
    for (uint32_t i = fo_index_start(&g->index, hash);; i = fo_index_next(&g->index, i)) {
        uint32_t slot = g->index.slots[i];
        if (slot == 0)
            break;
        const kept_frame *f = &k->frames[slot - 1];
        if (f->parent == parent && fo_mfa_equal(&f->mfa, mfa))
            return slot - 1;
    }
    if (!grow((void **)&k->frames, &g->frames_cap, k->frame_count, g->max_frames, sizeof(kept_frame), &g->failed))
        return KEPT_ROOT;
    k->frames[k->frame_count] = (kept_frame){*mfa, parent};
    if (!fo_index_put(&g->index, hash, k->frame_count, rehash_frame, k->frames)) {
        g->failed = 1;
        return KEPT_ROOT;
    }
    return k->frame_count++;
}

static void take_one(void *ctx, int64_t ts_ns, const uint64_t *ips, uint32_t n, uint64_t caller)
{
    gather *g = ctx;
    fo_tail_kept *k = g->k;
    fo_cpu_chain chain;
    fo_cpu_resolve(ips, n, caller, &chain);
    /* a chain that names nothing is no sample (fo_cpu_place) */
    if (g->failed || (chain.count == 0 && !chain.has_c_leaf))
        return;
    if (!grow((void **)&k->samples, &g->samples_cap, k->sample_count, g->max_samples, sizeof(kept_sample),
              &g->failed)) {
        k->samples_dropped++;
        return;
    }
    uint32_t frame = KEPT_ROOT;
    int has_caller = chain.count == 0 && chain.has_caller;
    if (has_caller)
        frame = frame_of(g, frame, &chain.caller);
    for (uint32_t i = chain.count; i > 0 && (i == chain.count || frame != KEPT_ROOT); i--)
        frame = frame_of(g, frame, &chain.leafward[i - 1]);
    if (chain.has_c_leaf && (frame != KEPT_ROOT || (chain.count == 0 && !has_caller)))
        frame = frame_of(g, frame, &chain.c_leaf);
    if (frame == KEPT_ROOT) {
        k->samples_dropped++;
        return;
    }
    k->samples[k->sample_count++] = (kept_sample){ts_ns, g->thread, frame, (uint8_t)chain.long_chain,
                                                  (uint8_t)chain.has_c_leaf, (uint8_t)has_caller};
}

void fo_tail_kept_chain(const fo_tail_kept *k, const kept_sample *sm, fo_cpu_chain *chain)
{
    uint32_t frame = sm->frame;
    chain->long_chain = sm->long_chain;
    chain->has_c_leaf = sm->has_c_leaf;
    chain->has_caller = sm->has_caller;
    if (sm->has_c_leaf) {
        chain->c_leaf = k->frames[frame].mfa;
        frame = k->frames[frame].parent;
    }
    chain->count = 0;
    if (sm->has_caller) {
        chain->caller = k->frames[frame].mfa;
        return;
    }
    for (; frame != KEPT_ROOT && chain->count < FO_PERF_MAX_FRAMES; frame = k->frames[frame].parent)
        chain->leafward[chain->count++] = k->frames[frame].mfa;
}

static int by_time(const void *a, const void *b)
{
    const kept_sample *x = a, *y = b;
    return x->ts_ns < y->ts_ns ? -1 : x->ts_ns > y->ts_ns;
}

fo_tail_kept *fo_tail_kept_make(tail_entry *e, tail_slice *owned, uint32_t max_samples, uint32_t max_frames)
{
    /* a short request's slices in the resource itself (one allocation) */
    size_t inline_slices = owned == NULL ? e->count : 0;
    fo_tail_kept *k = enif_alloc_resource(kept_type, sizeof(fo_tail_kept) + inline_slices * sizeof(tail_slice));
    if (k == NULL) {
        free(owned);
        return NULL;
    }
    memset(k, 0, sizeof(*k));
    int failed = 0;
    k->pid = e->pid;
    k->end_ns = e->end_ns;
    k->count = e->count;
    k->dropped = e->dropped;
    k->slices_owned = owned != NULL;
    k->slices = owned != NULL ? owned : k->inline_slices;
    if (inline_slices > 0)
        memcpy(k->inline_slices, e->slices, inline_slices * sizeof(tail_slice));
    fo_spin_lock(&e->ctx_lock);
    if (e->answers != NULL) {
        k->ctx_count = e->ctx_count;
        k->ctx = copy_of(e->answers->ctx, e->ctx_count, sizeof(tail_context), &failed);
        k->ctx_frame_count = e->frame_count;
        k->ctx_frames = copy_of(e->answers->frames, e->frame_count, sizeof(fo_mfa), &failed);
    }
    fo_spin_unlock(&e->ctx_lock);
    gather g = {k, 0, max_samples, max_frames, 0, 0, {0}, failed};
    for (uint32_t i = 0; i < k->count && !g.failed; i++) {
        const tail_slice *s = &k->slices[i];
        if (s->thread == 0 || s->to_ns <= s->from_ns)
            continue;
        g.thread = s->thread;
        fo_perf_take(s->thread, s->from_ns, s->to_ns, take_one, &g);
    }
    fo_index_destroy(&g.index);
    if (g.failed) {
        enif_release_resource(k); /* the destructor frees what was made */
        return NULL;
    }
    if (k->sample_count > 1)
        qsort(k->samples, k->sample_count, sizeof(kept_sample), by_time);
    k->bytes = sizeof(*k) + (uint64_t)k->count * sizeof(tail_slice) + (uint64_t)k->ctx_count * sizeof(tail_context) +
               (uint64_t)k->ctx_frame_count * sizeof(fo_mfa) + (uint64_t)g.samples_cap * sizeof(kept_sample) +
               (uint64_t)g.frames_cap * sizeof(kept_frame);
    return k;
}
