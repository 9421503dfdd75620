#include "fo_alloc.h"

#include <bsd/stdlib.h>
#include <stdlib.h>
#include <string.h>

#include "fo_hash.h"

#define ALLOC_INITIAL_ENTRIES 64u
#define ALLOC_INITIAL_SLOTS 128u

static uint64_t node_hash(uint32_t node)
{
    return fo_hash_mix(node);
}

static uint64_t rehash_entry(const void *table, uint32_t index)
{
    return node_hash(((const fo_alloc *)table)->entries[index].node);
}

static uint64_t add_saturating(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

void fo_alloc_destroy(fo_alloc *a)
{
    free(a->entries);
    if (a->index.slots != NULL)
        fo_index_destroy(&a->index);
    memset(a, 0, sizeof(*a));
}

static fo_alloc_entry *find(const fo_alloc *a, uint32_t node)
{
    if (a->count == 0)
        return NULL;
    for (uint32_t i = fo_index_start(&a->index, node_hash(node)); a->index.slots[i] != 0;
         i = fo_index_next(&a->index, i)) {
        fo_alloc_entry *e = &a->entries[a->index.slots[i] - 1];
        if (e->node == node)
            return e;
    }
    return NULL;
}

static fo_alloc_entry *find_or_add(fo_alloc *a, uint32_t node)
{
    fo_alloc_entry *e = find(a, node);
    if (e != NULL)
        return e;
    if (a->index.slots == NULL && !fo_index_init(&a->index, ALLOC_INITIAL_SLOTS))
        return NULL;
    if (a->count == a->cap) {
        if (a->cap > UINT32_MAX / 2)
            return NULL;
        uint32_t cap = a->cap == 0 ? ALLOC_INITIAL_ENTRIES : a->cap * 2;
        fo_alloc_entry *grown = reallocarray(a->entries, cap, sizeof(fo_alloc_entry));
        if (grown == NULL)
            return NULL;
        a->entries = grown;
        a->cap = cap;
    }
    e = &a->entries[a->count];
    e->node = node;
    e->words = 0;
    e->samples = 0;
    if (!fo_index_put(&a->index, node_hash(node), a->count, rehash_entry, a))
        return NULL;
    a->count++;
    return e;
}

int fo_alloc_charge(fo_alloc *a, uint32_t node, uint64_t words, uint64_t samples)
{
    fo_alloc_entry *e = find_or_add(a, node);
    if (e == NULL)
        return 0;
    e->words = add_saturating(e->words, words);
    e->samples = add_saturating(e->samples, samples);
    return 1;
}

void fo_alloc_get(const fo_alloc *a, uint32_t node, uint64_t *words, uint64_t *samples)
{
    const fo_alloc_entry *e = find(a, node);
    *words = e == NULL ? 0 : e->words;
    *samples = e == NULL ? 0 : e->samples;
}

size_t fo_alloc_memory(const fo_alloc *a)
{
    return (size_t)a->cap * sizeof(fo_alloc_entry) + (a->index.slots == NULL ? 0 : fo_index_memory(&a->index));
}
