#include "fo_frames.h"

#include <bsd/stdlib.h>
#include <stdlib.h>
#include <string.h>

#include "fo_hash.h"

#define FRAMES_INITIAL_SLOTS 1024u

static uint64_t mfa_hash(const fo_mfa *m)
{
    /* one multiply-xorshift round: the keys are atom terms and small arities */
    uint64_t h = (m->module * 0x9E3779B97F4A7C15ULL) ^ m->function ^ ((uint64_t)m->arity << 58);
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 31);
}

static int mfa_equal(const fo_mfa *a, const fo_mfa *b)
{
    return a->module == b->module && a->function == b->function && a->arity == b->arity;
}

int fo_frames_init(fo_frames *t, uint32_t limit, uint32_t first_id)
{
    memset(t, 0, sizeof(*t));
    t->limit = limit;
    t->first_id = first_id;
    t->slots = calloc(FRAMES_INITIAL_SLOTS, sizeof(uint32_t));
    if (t->slots == NULL)
        return 0;
    t->slot_mask = FRAMES_INITIAL_SLOTS - 1;
    return 1;
}

void fo_frames_destroy(fo_frames *t)
{
    free(t->mfas);
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

static void slots_insert(uint32_t *slots, uint32_t mask, uint64_t hash, uint32_t index)
{
    uint32_t i = (uint32_t)hash & mask;
    while (slots[i] != 0)
        i = (i + 1) & mask;
    slots[i] = index + 1;
}

/* Keep the load under one half so probes stay short. */
static int grow_slots(fo_frames *t)
{
    uint32_t old_size = t->slot_mask + 1;
    if (old_size > UINT32_MAX / 2)
        return 0;
    uint32_t size = old_size * 2;
    uint32_t *slots = calloc(size, sizeof(uint32_t));
    if (slots == NULL)
        return 0;
    for (uint32_t i = 0; i < t->count; i++)
        slots_insert(slots, size - 1, mfa_hash(&t->mfas[i]), i);
    free(t->slots);
    t->slots = slots;
    t->slot_mask = size - 1;
    return 1;
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
    uint32_t i = (uint32_t)hash & t->slot_mask;
    while (t->slots[i] != 0) {
        uint32_t index = t->slots[i] - 1;
        if (mfa_equal(&t->mfas[index], mfa))
            return t->first_id + index;
        i = (i + 1) & t->slot_mask;
    }
    if (t->count >= t->limit)
        return UINT32_MAX;
    if (t->count == t->cap && !grow_mfas(t))
        return UINT32_MAX;
    if ((t->count + 1) * 2 > t->slot_mask + 1) {
        if (!grow_slots(t))
            return UINT32_MAX;
        i = (uint32_t)hash & t->slot_mask;
        while (t->slots[i] != 0)
            i = (i + 1) & t->slot_mask;
    }
    t->mfas[t->count] = *mfa;
    t->slots[i] = t->count + 1;
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
    return (size_t)t->cap * sizeof(fo_mfa) + ((size_t)t->slot_mask + 1) * sizeof(uint32_t);
}
