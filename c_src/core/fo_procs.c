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
    t->slots = calloc(PROCS_INITIAL_SLOTS, sizeof(uint32_t));
    if (t->slots == NULL)
        return 0;
    t->slot_mask = PROCS_INITIAL_SLOTS - 1;
    return 1;
}

void fo_procs_destroy(fo_procs *t)
{
    for (uint32_t i = 0; i < t->count; i++) {
        free(t->procs[i].stack_frames);
        free(t->procs[i].stack_nodes);
    }
    free(t->procs);
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

uint32_t fo_procs_find(const fo_procs *t, uint64_t pid)
{
    uint32_t i = (uint32_t)fo_hash_mix(pid) & t->slot_mask;
    while (t->slots[i] != 0) {
        uint32_t index = t->slots[i] - 1;
        if (t->procs[index].pid == pid)
            return index;
        i = (i + 1) & t->slot_mask;
    }
    return UINT32_MAX;
}

static void slot_put(uint32_t *slots, uint32_t mask, uint64_t pid, uint32_t index)
{
    uint32_t i = (uint32_t)fo_hash_mix(pid) & mask;
    while (slots[i] != 0)
        i = (i + 1) & mask;
    slots[i] = index + 1;
}

static int grow_slots(fo_procs *t)
{
    uint32_t size = (t->slot_mask + 1) * 2;
    uint32_t *slots = calloc(size, sizeof(uint32_t));
    if (slots == NULL)
        return 0;
    for (uint32_t i = 0; i < t->count; i++)
        slot_put(slots, size - 1, t->procs[i].pid, i);
    free(t->slots);
    t->slots = slots;
    t->slot_mask = size - 1;
    return 1;
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
    if ((t->count + 1) * 2 > t->slot_mask + 1 && !grow_slots(t))
        return UINT32_MAX;
    uint32_t index = t->count++;
    memset(&t->procs[index], 0, sizeof(fo_proc));
    t->procs[index].pid = pid;
    slot_put(t->slots, t->slot_mask, pid, index);
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
    t->stack_bytes += (size_t)(cap - p->stack_cap) * 2 * sizeof(uint32_t);
    p->stack_cap = cap;
    return 1;
}

size_t fo_procs_memory(const fo_procs *t)
{
    return (size_t)t->cap * sizeof(fo_proc) + ((size_t)t->slot_mask + 1) * sizeof(uint32_t) +
           t->stack_bytes;
}
