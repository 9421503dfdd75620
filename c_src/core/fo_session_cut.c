/* Cut chains of CPU-sampled sessions. The kernel walks at most 127
 * frames: a sample deep in a recursion keeps only its innermost ones,
 * which go under the stack the process was seen in at their outermost
 * frame; a recursion no sample has seen shallower yet goes under the cut
 * marker (a "…" root). As the session settles, those whose outermost
 * frame has been seen since move there, with everything counted on them,
 * so a recursion's first deep samples are not left apart from the rest. */
#include <stdlib.h>

#include "fo_session_parts.h"

/* node is a cut marker (on a process's root). */
static int is_marker(const fo_session *s, uint32_t node)
{
    return s->tree.nodes[node].frame == s->cut_marker && s->tree.nodes[node].depth == 1;
}

/* node is in a chain under the cut marker. */
static int under_marker(const fo_session *s, uint32_t node)
{
    for (uint32_t at = node; at != UINT32_MAX; at = s->tree.nodes[at].parent) {
        if (is_marker(s, at))
            return 1;
    }
    return 0;
}

/* Moves node's counters onto to (a node of the same frame elsewhere). */
static void merge_into(fo_session *s, uint32_t node, uint32_t to)
{
    fo_tree_node *from = &s->tree.nodes[node], *into = &s->tree.nodes[to];
    into->self_ns += from->self_ns;
    into->samples += from->samples;
    into->settled += from->settled;
    into->weight += from->weight;
    from->self_ns = 0;
    from->samples = 0;
    from->settled = 0;
    from->weight = 0;
}

void fo_s_rehome_cut_chains(fo_session *s)
{
    if (s->cut_marker == 0)
        return;
    uint32_t count = s->tree.count;
    uint32_t *moved_to = malloc(sizeof(uint32_t) * count);
    if (moved_to == NULL)
        return; /* they stay under the marker */
    fo_tree_node *nodes = s->tree.nodes;
    for (uint32_t n = 0; n < count; n++) {
        moved_to[n] = FO_NONE;
        uint32_t parent = nodes[n].parent;
        /* a chain's outermost frame: a child of a marker on a process's root */
        if (parent == UINT32_MAX || !is_marker(s, parent) || nodes[n].proc >= s->procs.count)
            continue;
        fo_proc *p = &s->procs.procs[nodes[n].proc];
        uint32_t prefix = fo_s_cut_prefix(s, p, nodes[n].frame);
        if (prefix == FO_NONE || prefix == p->root || nodes[prefix].depth >= s->limits.max_depth ||
            under_marker(s, prefix))
            continue;
        uint32_t to = fo_s_regular_child(s, prefix, nodes[n].frame);
        nodes = s->tree.nodes; /* the tree may have grown */
        if (to == FO_NONE)
            continue;
        moved_to[n] = to;
        merge_into(s, n, to);
        s->stats.cpu_rehomed_cuts++;
    }
    /* children come after their parents: one pass moves whole chains */
    for (uint32_t n = 0; n < count; n++) {
        uint32_t parent = nodes[n].parent;
        if (parent == UINT32_MAX || parent >= count || moved_to[parent] == FO_NONE || moved_to[n] != FO_NONE)
            continue;
        if (nodes[moved_to[parent]].depth >= s->limits.max_depth)
            continue;
        uint32_t to = fo_s_regular_child(s, moved_to[parent], nodes[n].frame);
        nodes = s->tree.nodes;
        if (to == FO_NONE)
            continue;
        moved_to[n] = to;
        merge_into(s, n, to);
    }
    free(moved_to);
}
