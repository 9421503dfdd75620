/* The calling-context tree: one node per distinct (process, stack). A
 * process's position is a node id, so push and pop are O(1) and memory
 * grows with distinct stacks, not with events. */
#ifndef FO_TREE_H
#define FO_TREE_H

#include <stddef.h>
#include <stdint.h>

#include "fo_index.h"

typedef struct {
    uint32_t parent; /* UINT32_MAX for a process root */
    uint32_t frame;
    uint32_t proc;
    uint32_t depth;
    uint64_t self_ns;
    uint64_t samples; /* stack samples that landed here */
    uint64_t weight;  /* what those samples weighed (reductions since the previous one) */
    uint64_t settled; /* CPU-sampled: of samples, those whose stratum's time was shared on its own */
} fo_tree_node;

typedef struct {
    fo_tree_node *nodes;
    uint32_t count;
    uint32_t cap;
    uint32_t hard_cap;    /* regular limit + reserved nodes */
    fo_index children;    /* (parent, frame) -> child node id */
} fo_tree;

int fo_tree_init(fo_tree *t, uint32_t hard_cap);
void fo_tree_destroy(fo_tree *t);

/* A node with no parent (process roots, reserved buckets). UINT32_MAX
 * when hard_cap is reached or memory is short. */
uint32_t fo_tree_add_root(fo_tree *t, uint32_t frame, uint32_t proc, uint32_t depth);

/* The child of parent with frame, if it exists. */
uint32_t fo_tree_find_child(const fo_tree *t, uint32_t parent, uint32_t frame);

/* Find or create the child. Creating obeys the caller's budget: when
 * may_create is 0 only an existing child is returned. UINT32_MAX if none. */
uint32_t fo_tree_child(fo_tree *t, uint32_t parent, uint32_t frame, int may_create);

static inline void fo_tree_charge(fo_tree *t, uint32_t node, uint64_t ns)
{
    t->nodes[node].self_ns += ns;
}

/* The counters live in the node itself, so a sample allocates nothing.
 * Both saturate: a front end's bogus weight must not wrap a total. */
static inline void fo_tree_count_samples(fo_tree *t, uint32_t node, uint64_t count, uint64_t weight)
{
    fo_tree_node *n = &t->nodes[node];
    n->samples = n->samples > UINT64_MAX - count ? UINT64_MAX : n->samples + count;
    n->weight = n->weight > UINT64_MAX - weight ? UINT64_MAX : n->weight + weight;
}

size_t fo_tree_memory(const fo_tree *t);

#endif
