/* A sampled process's unseen burst (see fo_session.h, "sample"): running
 * since an `in` with no sample, its stack is unknown, yet events inside
 * the burst (a garbage collection's start and end) charge the time so far
 * to the stack it had before, which it has left. What was charged so is
 * noted here, and the burst's first sample moves it under the stack that
 * sample shows: the running time, and each collection's time to a GC leaf
 * of the same kind there. A burst that ends with no sample (its `out`:
 * preempted or waiting) keeps its notes, and the bursts after it add to
 * them, until a sample comes: one of the process running takes them all;
 * one of it waiting shows the stack the last burst ended in, and the
 * frames that stack shares with the one before say where they ran. */
#include "fo_session_parts.h"

void fo_s_unseen_forget(fo_proc *p)
{
    p->unseen_node = FO_NONE;
    p->unseen_ns = 0;
    for (int k = 0; k < 2; k++) {
        p->unseen_gc_node[k] = FO_NONE;
        p->unseen_gc_ns[k] = 0;
    }
}

void fo_s_unseen_note(fo_session *s, fo_proc *p, uint32_t node, uint64_t delta)
{
    if (node == FO_NONE || node == p->node_cap)
        return;
    uint32_t frame = s->tree.nodes[node].frame;
    if (frame == FO_FRAME_GC_MINOR || frame == FO_FRAME_GC_MAJOR) {
        int k = frame == FO_FRAME_GC_MAJOR;
        if (p->unseen_gc_node[k] != node)
            p->unseen_gc_ns[k] = 0; /* a leaf of another stack: a call moved it */
        p->unseen_gc_node[k] = node;
        p->unseen_gc_ns[k] += delta;
        return;
    }
    if (p->unseen_node != node)
        p->unseen_ns = 0;
    p->unseen_node = node;
    p->unseen_ns += delta;
}

/* The stack the burst was charged to: its running time's node, else the
 * parent of a GC leaf it charged. */
static uint32_t stale_node(const fo_session *s, const fo_proc *p)
{
    if (p->unseen_node != FO_NONE)
        return p->unseen_node;
    for (int k = 0; k < 2; k++)
        if (p->unseen_gc_node[k] != FO_NONE)
            return s->tree.nodes[p->unseen_gc_node[k]].parent;
    return FO_NONE;
}

/* Where a burst that ended unseen goes, given the stack it was then
 * sampled waiting in (here): the deepest frame that stack shares with
 * the one the burst left, since the frames above it in `here` may have
 * been entered just to wait (a Process.sleep/1, a GenServer.call). Before
 * the process's first sample the stack it left is the one its trace began
 * in, and the burst was the traced code's: one frame deeper, toward here. */
static uint32_t ended_in(const fo_session *s, const fo_proc *p, uint32_t stale, uint32_t here)
{
    const fo_tree_node *nodes = s->tree.nodes;
    uint32_t a = stale, b = here;
    while (a != FO_NONE && b != FO_NONE && a != b) {
        if (nodes[a].depth >= nodes[b].depth)
            a = nodes[a].parent;
        else
            b = nodes[b].parent;
    }
    /* no frame in common (the process's root is none: a status frame, the
     * captured function's caller): the sampled stack is all we know */
    if (a == FO_NONE || a != b || a == p->root)
        return here;
    if (!p->sampled && a == stale && a != here) {
        uint32_t below = here;
        while (nodes[below].parent != a)
            below = nodes[below].parent;
        if (below != here)
            return below;
    }
    return a;
}

void fo_s_unseen_place(fo_session *s, fo_proc *p, int ended)
{
    uint32_t here = fo_s_current_node(p);
    uint32_t stale = stale_node(s, p);
    uint32_t to = ended && stale != FO_NONE ? ended_in(s, p, stale, here) : here;
    fo_s_move_time(s, p->unseen_node, to, p->unseen_ns);
    static const uint32_t kinds[2] = {FO_FRAME_GC_MINOR, FO_FRAME_GC_MAJOR};
    for (int k = 0; k < 2; k++) {
        if (p->unseen_gc_ns[k] == 0)
            continue;
        uint32_t leaf = fo_s_regular_child(s, to, kinds[k]);
        if (leaf == FO_NONE)
            s->stats.node_limit_hits++; /* it stays where it was charged */
        else
            fo_s_move_time(s, p->unseen_gc_node[k], leaf, p->unseen_gc_ns[k]);
    }
    fo_s_unseen_forget(p);
}
