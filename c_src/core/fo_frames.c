#include "fo_frames.h"

#include <bsd/stdlib.h>
#include <stdlib.h>
#include <string.h>


/* small to start, as the tree (fo_tree.c) */
#define FRAMES_INITIAL_SLOTS 64u

static uint64_t mfa_hash(const fo_mfa *m)
{
    /* one multiply-xorshift round: the keys are atom terms and small arities */
    uint64_t h = (m->module * 0x9E3779B97F4A7C15ULL) ^ m->function ^ ((uint64_t)m->arity << 58);
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 31);
}

static uint64_t rehash_frame(const void *table, uint32_t index)
{
    return mfa_hash(&((const fo_frames *)table)->mfas[index]);
}

int fo_frames_init(fo_frames *t, uint32_t limit, uint32_t first_id)
{
    memset(t, 0, sizeof(*t));
    t->limit = limit;
    t->first_id = first_id;
    return fo_index_init(&t->index, FRAMES_INITIAL_SLOTS);
}

void fo_frames_destroy(fo_frames *t)
{
    free(t->mfas);
    fo_index_destroy(&t->index);
    memset(t, 0, sizeof(*t));
}

static int grow_mfas(fo_frames *t)
{
    uint32_t cap = t->cap == 0 ? 256u : t->cap * 2;
    if (cap > t->limit)
        cap = t->limit;
    fo_mfa *mfas = reallocarray(t->mfas, cap, sizeof(fo_mfa));
    if (mfas == NULL)
        return 0;
    t->mfas = mfas;
    t->cap = cap;
    return 1;
}

uint32_t fo_frames_intern(fo_frames *t, const fo_mfa *mfa)
{
    uint64_t hash = mfa_hash(mfa);
    for (uint32_t i = fo_index_start(&t->index, hash); t->index.slots[i] != 0; i = fo_index_next(&t->index, i)) {
        uint32_t index = t->index.slots[i] - 1;
        if (fo_mfa_equal(&t->mfas[index], mfa))
            return t->first_id + index;
    }
    if (t->count >= t->limit)
        return UINT32_MAX;
    if (t->count == t->cap && !grow_mfas(t))
        return UINT32_MAX;
    t->mfas[t->count] = *mfa;
    if (!fo_index_put(&t->index, hash, t->count, rehash_frame, t))
        return UINT32_MAX;
    return t->first_id + t->count++;
}

int fo_frames_get(const fo_frames *t, uint32_t id, fo_mfa *out)
{
    if (id < t->first_id || id - t->first_id >= t->count)
        return 0;
    *out = t->mfas[id - t->first_id];
    return 1;
}

size_t fo_frames_memory(const fo_frames *t)
{
    return (size_t)t->cap * sizeof(fo_mfa) + fo_index_memory(&t->index);
}
