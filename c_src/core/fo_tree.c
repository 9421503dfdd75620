#include "fo_tree.h"

#include <bsd/stdlib.h>
#include <stdlib.h>
#include <string.h>

/* Small to start: a kept tail request makes a session of a few nodes, and
 * under load thousands a second; the first 2 048 nodes (80 KB), zeroed
 * and freed each time, cost page faults and the allocator's trims. The
 * tables double as they fill. */
#define TREE_INITIAL_SLOTS 64u
#define TREE_INITIAL_NODES 32u

static uint64_t child_hash(uint32_t parent, uint32_t frame)
{
    /* Fibonacci hashing: the high half of one multiply */
    return (((uint64_t)parent << 32 | frame) * 0x9E3779B97F4A7C15ULL) >> 32;
}

int fo_tree_init(fo_tree *t, uint32_t hard_cap)
{
    memset(t, 0, sizeof(*t));
    t->hard_cap = hard_cap;
    return fo_index_init(&t->children, TREE_INITIAL_SLOTS);
}

void fo_tree_destroy(fo_tree *t)
{
    free(t->nodes);
    fo_index_destroy(&t->children);
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
    n->samples = 0;
    n->weight = 0;
    n->settled = 0;
    return id;
}

uint32_t fo_tree_add_root(fo_tree *t, uint32_t frame, uint32_t proc, uint32_t depth)
{
    return new_node(t, UINT32_MAX, frame, proc, depth);
}

uint32_t fo_tree_find_child(const fo_tree *t, uint32_t parent, uint32_t frame)
{
    const fo_index *index = &t->children;
    for (uint32_t i = fo_index_start(index, child_hash(parent, frame)); index->slots[i] != 0;
         i = fo_index_next(index, i)) {
        const fo_tree_node *n = &t->nodes[index->slots[i] - 1];
        if (n->parent == parent && n->frame == frame)
            return index->slots[i] - 1;
    }
    return UINT32_MAX;
}

static uint64_t rehash_child(const void *table, uint32_t id)
{
    const fo_tree_node *n = &((const fo_tree *)table)->nodes[id];
    return child_hash(n->parent, n->frame);
}

uint32_t fo_tree_child(fo_tree *t, uint32_t parent, uint32_t frame, int may_create)
{
    uint32_t found = fo_tree_find_child(t, parent, frame);
    if (found != UINT32_MAX || !may_create)
        return found;
    uint32_t id = new_node(t, parent, frame, t->nodes[parent].proc, t->nodes[parent].depth + 1);
    if (id == UINT32_MAX)
        return UINT32_MAX;
    if (!fo_index_put(&t->children, child_hash(parent, frame), id, rehash_child, t)) {
        t->count--; /* unindexed, it could never be found again */
        return UINT32_MAX;
    }
    return id;
}

size_t fo_tree_memory(const fo_tree *t)
{
    return (size_t)t->cap * sizeof(fo_tree_node) + fo_index_memory(&t->children);
}
