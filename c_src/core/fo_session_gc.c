/* Garbage collection as a class of time (see fo_session.h): between a
 * process's gc start and end events its time goes to a GC leaf under the
 * stack that was on top when the collection started, whatever it was
 * doing (running, or scheduled out: the VM may collect a process that
 * waits). Minor and major collections have leaves of their own. */
#include "fo_session_parts.h"

void fo_s_gc_event(fo_session *s, fo_proc *p, const fo_event *ev)
{
    if (ev->kind == FO_EV_GC_END) {
        p->gc_node = FO_NONE;
        return;
    }
    if (p->gc_node != FO_NONE)
        return; /* one collection at a time: a nested start is the same one */
    int major = (ev->flags & FO_EVF_MAJOR_GC) != 0;
    p->gcs[major]++;
    if (major)
        s->stats.gc_major++;
    else
        s->stats.gc_minor++;
    uint32_t node = fo_s_regular_child(s, fo_s_current_node(p), major ? FO_FRAME_GC_MAJOR : FO_FRAME_GC_MINOR);
    if (node == FO_NONE) {
        s->stats.node_limit_hits++;
        node = p->node_cap;
    }
    p->gc_node = node;
}

int fo_s_gc_charge(fo_session *s, fo_proc *p, uint64_t delta)
{
    if (p->gc_node == FO_NONE)
        return 0;
    fo_tree_charge(&s->tree, p->gc_node, delta);
    if (p->gc_node != p->node_cap && s->tree.nodes[p->gc_node].frame == FO_FRAME_GC_MAJOR)
        s->stats.gc_major_ns += delta;
    else
        s->stats.gc_minor_ns += delta;
    return 1;
}
