#include "fo_seen.h"

#include <stdlib.h>
#include <string.h>

#include "fo_hash.h"

static uint64_t hash_of(uint32_t proc, uint32_t frame)
{
    return fo_hash_mix(((uint64_t)proc << 32) | frame);
}

static uint64_t rehash(const void *table, uint32_t index)
{
    const fo_seen_entry *e = &((const fo_seen *)table)->entries[index];
    return hash_of(e->proc, e->frame);
}

int fo_seen_init(fo_seen *t)
{
    memset(t, 0, sizeof(*t));
    return fo_index_init(&t->index, 256);
}

void fo_seen_destroy(fo_seen *t)
{
    free(t->entries);
    fo_index_destroy(&t->index);
    memset(t, 0, sizeof(*t));
}

static uint32_t find(const fo_seen *t, uint32_t proc, uint32_t frame)
{
    if (t->index.slots == NULL)
        return UINT32_MAX;
    for (uint32_t i = fo_index_start(&t->index, hash_of(proc, frame));; i = fo_index_next(&t->index, i)) {
        uint32_t slot = t->index.slots[i];
        if (slot == 0)
            return UINT32_MAX;
        const fo_seen_entry *e = &t->entries[slot - 1];
        if (e->proc == proc && e->frame == frame)
            return slot - 1;
    }
}

void fo_seen_put(fo_seen *t, uint32_t proc, uint32_t frame, uint32_t node)
{
    uint32_t at = find(t, proc, frame);
    if (at != UINT32_MAX) {
        t->entries[at].node = node;
        return;
    }
    if (t->index.slots == NULL)
        return;
    if (t->count == t->cap) {
        uint32_t cap = t->cap == 0 ? 256 : t->cap * 2;
        fo_seen_entry *grown = cap > t->cap ? realloc(t->entries, sizeof(fo_seen_entry) * cap) : NULL;
        if (grown == NULL)
            return;
        t->entries = grown;
        t->cap = cap;
    }
    fo_seen_entry *e = &t->entries[t->count];
    e->proc = proc;
    e->frame = frame;
    e->node = node;
    if (fo_index_put(&t->index, hash_of(proc, frame), t->count, rehash, t))
        t->count++;
}

uint32_t fo_seen_get(const fo_seen *t, uint32_t proc, uint32_t frame)
{
    uint32_t at = find(t, proc, frame);
    return at == UINT32_MAX ? UINT32_MAX : t->entries[at].node;
}

size_t fo_seen_memory(const fo_seen *t)
{
    return (size_t)t->cap * sizeof(fo_seen_entry) + (t->index.slots == NULL ? 0 : fo_index_memory(&t->index));
}
