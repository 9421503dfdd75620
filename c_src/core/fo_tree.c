#include "fo_tree.h"

#include <bsd/stdlib.h>
#include <stdlib.h>
#include <string.h>

#include "fo_hash.h"

#define TREE_INITIAL_SLOTS 1024u
#define TREE_INITIAL_NODES 1024u

static uint64_t child_hash(uint32_t parent, uint32_t frame)
{
    /* Fibonacci hashing: the high half of one multiply */
    return (((uint64_t)parent << 32 | frame) * 0x9E3779B97F4A7C15ULL) >> 32;
}

int fo_tree_init(fo_tree *t, uint32_t hard_cap)
{
    memset(t, 0, sizeof(*t));
    t->hard_cap = hard_cap;
    t->slots = calloc(TREE_INITIAL_SLOTS, sizeof(uint32_t));
    if (t->slots == NULL)
        return 0;
    t->slot_mask = TREE_INITIAL_SLOTS - 1;
    return 1;
}

void fo_tree_destroy(fo_tree *t)
{
    free(t->nodes);
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

static int grow_nodes(fo_tree *t)
{
    if (t->cap >= t->hard_cap)
        return 0;
    uint32_t cap = t->cap == 0 ? TREE_INITIAL_NODES : t->cap;
    cap = cap > t->hard_cap / 2 ? t->hard_cap : cap * 2;
    fo_tree_node *nodes = reallocarray(t->nodes, cap, sizeof(fo_tree_node));
    if (nodes == NULL)
        return 0;
    t->nodes = nodes;
    t->cap = cap;
    return 1;
}

static uint32_t new_node(fo_tree *t, uint32_t parent, uint32_t frame, uint32_t proc,
                         uint32_t depth)
{
    if (t->count == t->cap && !grow_nodes(t))
        return UINT32_MAX;
    uint32_t id = t->count++;
    fo_tree_node *n = &t->nodes[id];
    n->parent = parent;
    n->frame = frame;
    n->proc = proc;
    n->depth = depth;
    n->self_ns = 0;
    return id;
}

uint32_t fo_tree_add_root(fo_tree *t, uint32_t frame, uint32_t proc, uint32_t depth)
{
    return new_node(t, UINT32_MAX, frame, proc, depth);
}

uint32_t fo_tree_find_child(const fo_tree *t, uint32_t parent, uint32_t frame)
{
    uint32_t i = (uint32_t)child_hash(parent, frame) & t->slot_mask;
    while (t->slots[i] != 0) {
        const fo_tree_node *n = &t->nodes[t->slots[i] - 1];
        if (n->parent == parent && n->frame == frame)
            return t->slots[i] - 1;
        i = (i + 1) & t->slot_mask;
    }
    return UINT32_MAX;
}

static void slot_put(uint32_t *slots, uint32_t mask, uint64_t hash, uint32_t id)
{
    uint32_t i = (uint32_t)hash & mask;
    while (slots[i] != 0)
        i = (i + 1) & mask;
    slots[i] = id + 1;
}

static int grow_slots(fo_tree *t)
{
    uint32_t old_size = t->slot_mask + 1;
    if (old_size > UINT32_MAX / 2)
        return 0;
    uint32_t size = old_size * 2;
    uint32_t *slots = calloc(size, sizeof(uint32_t));
    if (slots == NULL)
        return 0;
    for (uint32_t i = 0; i < old_size; i++) {
        uint32_t id = t->slots[i];
        if (id != 0) {
            const fo_tree_node *n = &t->nodes[id - 1];
            slot_put(slots, size - 1, child_hash(n->parent, n->frame), id - 1);
        }
    }
    free(t->slots);
    t->slots = slots;
    t->slot_mask = size - 1;
    return 1;
}

uint32_t fo_tree_child(fo_tree *t, uint32_t parent, uint32_t frame, int may_create)
{
    uint32_t found = fo_tree_find_child(t, parent, frame);
    if (found != UINT32_MAX || !may_create)
        return found;
    if ((t->slot_used + 1) * 2 > t->slot_mask + 1 && !grow_slots(t))
        return UINT32_MAX;
    uint32_t id = new_node(t, parent, frame, t->nodes[parent].proc, t->nodes[parent].depth + 1);
    if (id == UINT32_MAX)
        return UINT32_MAX;
    slot_put(t->slots, t->slot_mask, child_hash(parent, frame), id);
    t->slot_used++;
    return id;
}

size_t fo_tree_memory(const fo_tree *t)
{
    return (size_t)t->cap * sizeof(fo_tree_node) + ((size_t)t->slot_mask + 1) * sizeof(uint32_t);
}
