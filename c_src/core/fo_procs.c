#include "fo_procs.h"

#include <bsd/stdlib.h>
#include <stdlib.h>
#include <string.h>

#include "fo_hash.h"

#define PROCS_INITIAL_SLOTS 64u
#define STACK_INITIAL 32u

int fo_procs_init(fo_procs *t, uint32_t limit)
{
    memset(t, 0, sizeof(*t));
    t->limit = limit;
    return fo_index_init(&t->index, PROCS_INITIAL_SLOTS);
}

void fo_procs_destroy(fo_procs *t)
{
    for (uint32_t i = 0; i < t->count; i++) {
        free(t->procs[i].stack_frames);
        free(t->procs[i].stack_nodes);
        free(t->procs[i].stack_repeats);
    }
    free(t->procs);
    fo_index_destroy(&t->index);
    memset(t, 0, sizeof(*t));
}

uint32_t fo_procs_find(const fo_procs *t, uint64_t pid)
{
    for (uint32_t i = fo_index_start(&t->index, fo_hash_mix(pid)); t->index.slots[i] != 0;
         i = fo_index_next(&t->index, i)) {
        uint32_t index = t->index.slots[i] - 1;
        if (t->procs[index].pid == pid)
            return index;
    }
    return UINT32_MAX;
}

static uint64_t rehash_proc(const void *table, uint32_t index)
{
    return fo_hash_mix(((const fo_procs *)table)->procs[index].pid);
}

uint32_t fo_procs_add(fo_procs *t, uint64_t pid)
{
    if (t->count >= t->limit)
        return UINT32_MAX;
    if (t->count == t->cap) {
        uint32_t cap = t->cap == 0 ? 16u : t->cap * 2;
        if (cap > t->limit)
            cap = t->limit;
        fo_proc *procs = reallocarray(t->procs, cap, sizeof(fo_proc));
        if (procs == NULL)
            return UINT32_MAX;
        t->procs = procs;
        t->cap = cap;
    }
    uint32_t index = t->count;
    memset(&t->procs[index], 0, sizeof(fo_proc));
    t->procs[index].pid = pid;
    if (!fo_index_put(&t->index, fo_hash_mix(pid), index, rehash_proc, t))
        return UINT32_MAX;
    t->count++;
    return index;
}

int fo_procs_reserve_stack(fo_procs *t, fo_proc *p, uint32_t need, uint32_t limit)
{
    if (need <= p->stack_cap)
        return 1;
    if (need > limit)
        return 0;
    uint32_t cap = p->stack_cap == 0 ? STACK_INITIAL : p->stack_cap;
    while (cap < need)
        cap = cap > limit / 2 ? limit : cap * 2;
    if (cap > limit)
        cap = limit;
    uint32_t *frames = reallocarray(p->stack_frames, cap, sizeof(uint32_t));
    if (frames == NULL)
        return 0;
    p->stack_frames = frames;
    uint32_t *nodes = reallocarray(p->stack_nodes, cap, sizeof(uint32_t));
    if (nodes == NULL)
        return 0;
    p->stack_nodes = nodes;
    uint32_t *repeats = reallocarray(p->stack_repeats, cap, sizeof(uint32_t));
    if (repeats == NULL)
        return 0;
    p->stack_repeats = repeats;
    t->stack_bytes += (size_t)(cap - p->stack_cap) * 3 * sizeof(uint32_t);
    p->stack_cap = cap;
    return 1;
}

size_t fo_procs_memory(const fo_procs *t)
{
    return (size_t)t->cap * sizeof(fo_proc) + fo_index_memory(&t->index) +
           t->stack_bytes;
}
