/* Allocation counts per tree node (allocation profiles, fo_session_gc.c):
 * the words a process allocated between two garbage collections, charged
 * to the node it was in when the second one started, and how many
 * collections were charged there (samples).
 *
 * A side table, not fields of fo_tree_node: only the nodes where
 * collections start ever hold any (a few per distinct allocating stack),
 * so the tree's nodes, which every call event touches, stay 40 bytes,
 * and a session that gets no heap sizes allocates nothing here. Bounded
 * by the tree: at most one entry per node. */
#ifndef FO_ALLOC_H
#define FO_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "fo_index.h"

typedef struct {
    uint32_t node;
    uint64_t words;
    uint64_t samples;
} fo_alloc_entry;

typedef struct {
    fo_alloc_entry *entries; /* NULL until the first charge */
    uint32_t count;
    uint32_t cap;
    fo_index index; /* node -> entry */
} fo_alloc;

void fo_alloc_destroy(fo_alloc *a);

/* Adds words and samples to node (both saturating). 0 when memory is
 * short: nothing changed. */
int fo_alloc_charge(fo_alloc *a, uint32_t node, uint64_t words, uint64_t samples);

/* What node holds (0 and 0 for a node never charged). */
void fo_alloc_get(const fo_alloc *a, uint32_t node, uint64_t *words, uint64_t *samples);

size_t fo_alloc_memory(const fo_alloc *a);

#endif
