/* A sampled process's unseen burst (see fo_session.h, "sample"): running
 * since an `in` with no sample, its stack is unknown, yet events inside
 * the burst (a garbage collection's start and end) charge the time so far
 * to the stack it had before, which it has left. What was charged so is
 * noted here, and the burst's first sample moves it under the stack that
 * sample shows: the running time, and each collection's time to a GC leaf
 * of the same kind there. A burst that ends with no sample (its `out`)
 * keeps its notes until the next `in`: a sample of the process waiting
 * shows the stack the burst ended in, which beats the one before it. */
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

void fo_s_unseen_place(fo_session *s, fo_proc *p)
{
    uint32_t here = fo_s_current_node(p);
    fo_s_move_time(s, p->unseen_node, here, p->unseen_ns);
    static const uint32_t kinds[2] = {FO_FRAME_GC_MINOR, FO_FRAME_GC_MAJOR};
    for (int k = 0; k < 2; k++) {
        if (p->unseen_gc_ns[k] == 0)
            continue;
        uint32_t leaf = fo_s_regular_child(s, here, kinds[k]);
        if (leaf == FO_NONE)
            s->stats.node_limit_hits++; /* it stays where it was charged */
        else
            fo_s_move_time(s, p->unseen_gc_node[k], leaf, p->unseen_gc_ns[k]);
    }
    fo_s_unseen_forget(p);
}
