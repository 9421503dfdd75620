/* Garbage collection as a class of time (see fo_session.h): between a
 * process's gc start and end events its time goes to a GC leaf under the
 * stack that was on top when the collection started, whatever it was
 * doing (running, or scheduled out: the VM may collect a process that
 * waits). Minor and major collections have leaves of their own.
 *
 * Allocation, when the events carry heap sizes (FO_EVF_HAS_HEAP): each
 * collection is a sample of the process's allocation, taken where it
 * started (the stack on top then: exact in the exact modes, the last one
 * known in the sampled ones, where it stays: unlike the collection's
 * time, a sample after an unseen burst does not move it), and weighing the words allocated since the
 * previous collection: the young heap in use at this start (heap
 * fragments included) less what the previous one left in it. The
 * allocation profilers of other runtimes sample the allocation slow path
 * the same way: the words are charged to the stack that ran out of room,
 * not spread over the stacks that allocated them. A process's first
 * collection in the trace counts from the level the front end read as the
 * trace started (fo_session_heap_level), else it only sets the level
 * (stats.alloc_unknown: what the process allocated before it is not
 * counted); what it allocated after its last one is not either. */
#include "fo_session_parts.h"

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* words and samples charged to node, and counted in the totals; 0 when
 * memory is short (nothing changed) */
static int charge(fo_session *s, uint32_t node, uint64_t words, uint64_t samples)
{
    if (!fo_alloc_charge(&s->alloc, node, words, samples))
        return 0;
    s->stats.alloc_words = add_sat(s->stats.alloc_words, words);
    s->stats.alloc_samples = add_sat(s->stats.alloc_samples, samples);
    return 1;
}

void fo_s_alloc_release(fo_session *s, fo_proc *p)
{
    if (p->alloc_held_samples == 0 && p->alloc_held_words == 0)
        return;
    /* No stack came after them (a server's last requests, in a sampled
     * mode, with no sample in them): where its words went last, the same
     * work most often (as fo_session_alloc_tail guesses), else its root. */
    uint32_t node = p->alloc_node != FO_NONE ? p->alloc_node : p->root;
    charge(s, node, p->alloc_held_words, p->alloc_held_samples);
    p->alloc_held_words = 0;
    p->alloc_held_samples = 0;
}

void fo_s_alloc_place_held(fo_session *s, fo_proc *p)
{
    uint32_t node = fo_s_current_node(p);
    if ((p->alloc_held_samples == 0 && p->alloc_held_words == 0) || node == p->root)
        return;
    if (charge(s, node, p->alloc_held_words, p->alloc_held_samples)) {
        p->alloc_held_words = 0;
        p->alloc_held_samples = 0;
        p->alloc_node = node;
    }
}

/* The words since p's last collection less the tracer's own, for a level
 * read now; the level becomes words_now. */
static uint64_t words_since(const fo_session *s, fo_proc *p, uint64_t words_now)
{
    uint64_t words = words_now > p->heap_after ? words_now - p->heap_after : 0;
    uint64_t tracer =
        p->alloc_events > UINT64_MAX / (s->alloc_event_words + 1) ? UINT64_MAX : p->alloc_events * s->alloc_event_words;
    p->heap_after = words_now;
    p->alloc_events = 0;
    return words > tracer ? words - tracer : 0;
}

void fo_session_alloc_tail(fo_session *s, uint64_t pid, uint64_t words_now)
{
    uint32_t index = fo_procs_find(&s->procs, pid);
    if (index == UINT32_MAX)
        return;
    fo_proc *p = &s->procs.procs[index];
    if (p->root == FO_NONE || !p->heap_known)
        return;
    uint64_t words = words_since(s, p, words_now);
    if (words == 0)
        return;
    /* where it is now; a follower between requests is nowhere known: the
     * stack its last words went to */
    uint32_t node = fo_s_current_node(p);
    if (node == p->root && p->alloc_node != FO_NONE)
        node = p->alloc_node;
    if (node == p->root)
        p->alloc_held_words = add_sat(p->alloc_held_words, words); /* to the root, at close */
    else
        charge(s, node, words, 0);
}

int fo_session_heap_known(const fo_session *s, uint32_t proc)
{
    return proc < s->procs.count && s->procs.procs[proc].root != FO_NONE && s->procs.procs[proc].heap_known;
}

void fo_s_gc_forget(fo_session *s, fo_proc *p)
{
    fo_s_alloc_release(s, p);
    p->alloc_node = FO_NONE;
    p->heap_known = 0;
    p->heap_after = 0;
    p->alloc_events = 0;
}

void fo_session_set_alloc_event_words(fo_session *s, uint64_t words)
{
    s->alloc_event_words = words;
}

void fo_session_heap_level(fo_session *s, uint64_t pid, uint64_t words)
{
    fo_proc *p = fo_s_proc_for(s, pid);
    if (p == NULL)
        return;
    p->heap_after = words;
    p->heap_known = 1;
    p->alloc_events = 0;
}

void fo_session_heap_level_unless_known(fo_session *s, uint64_t pid, uint64_t words)
{
    fo_proc *p = fo_s_proc_for(s, pid);
    if (p == NULL || p->heap_known)
        return;
    p->heap_after = words;
    p->heap_known = 1;
    p->alloc_events = 0;
}

void fo_session_gc_outside(fo_session *s, const fo_event *ev)
{
    if (ev->kind != FO_EV_GC_END || !(ev->flags & FO_EVF_HAS_HEAP))
        return;
    uint32_t index = fo_procs_find(&s->procs, ev->pid);
    if (index == UINT32_MAX || s->procs.procs[index].root == FO_NONE)
        return;
    fo_proc *p = &s->procs.procs[index];
    p->heap_after = ev->heap_words;
    p->heap_known = 1;
    p->alloc_events = 0;
}

/* A sample of p's allocation at the start of a collection, on node. */
static void count_alloc(fo_session *s, fo_proc *p, const fo_event *ev, uint32_t node)
{
    if (!p->heap_known) {
        s->stats.alloc_unknown++;
        return;
    }
    uint64_t words = ev->heap_words > p->heap_after ? ev->heap_words - p->heap_after : 0;
    /* the tracer's own terms (fo_session_set_alloc_event_words) */
    uint64_t tracer =
        p->alloc_events > UINT64_MAX / (s->alloc_event_words + 1) ? UINT64_MAX : p->alloc_events * s->alloc_event_words;
    words = words > tracer ? words - tracer : 0;
    if (node == p->root) {
        /* Nothing of its stack is known: a follower of a cross-process
         * trace that just joined, or came back for another request,
         * collects before its first call or sample. Its root would show
         * them as an empty stack; the next stack known (a sample's, or
         * the next collection's) is the best guess of where they were
         * allocated. */
        p->alloc_held_words = add_sat(p->alloc_held_words, words);
        p->alloc_held_samples = add_sat(p->alloc_held_samples, 1);
        return;
    }
    if (charge(s, node, add_sat(words, p->alloc_held_words), add_sat(1, p->alloc_held_samples))) {
        p->alloc_held_words = 0;
        p->alloc_held_samples = 0;
        p->alloc_node = node;
    }
}

void fo_s_gc_event(fo_session *s, fo_proc *p, const fo_event *ev)
{
    if (ev->kind == FO_EV_GC_END) {
        p->gc_node = FO_NONE;
        p->gc_pooled = 0;
        if (ev->flags & FO_EVF_HAS_HEAP) {
            p->heap_after = ev->heap_words;
            p->heap_known = 1;
            p->alloc_events = 0;
        }
        return;
    }
    if (p->gc_node != FO_NONE)
        return; /* one collection at a time: a nested start is the same one */
    if (ev->flags & FO_EVF_HAS_HEAP)
        count_alloc(s, p, ev, fo_s_current_node(p));
    int major = (ev->flags & FO_EVF_MAJOR_GC) != 0;
    p->gcs[major]++;
    if (major)
        s->stats.gc_major++;
    else
        s->stats.gc_minor++;
    /* CPU-sampled, back from a wait a message ended, and no sample yet in
     * this slice: the stack on top is still the wait's, in a receive the
     * process has left since; the collection comes from the code after
     * it. Its place is not known: its time is placed as the settle says
     * (fo_session_cpu_settle). Left under the wait, a request's
     * collections after its call went to the call, not to the render that
     * allocated them (bench/RESULTS.md). After a preemption the stack on
     * top is where the process goes on: its collection stays there. */
    if (s->cpu_sampled && p->state == FO_PROC_RUNNING && !p->slice_sampled && p->left_wait) {
        p->gc_pooled = (uint8_t)(1 + major);
        p->gc_node = p->root;
        return;
    }
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
    int major;
    if (p->gc_pooled != 0) {
        major = p->gc_pooled == 2;
        p->gc_pool_ns[major] = add_sat(p->gc_pool_ns[major], delta);
    } else {
        fo_tree_charge(&s->tree, p->gc_node, delta);
        major = p->gc_node != p->node_cap && s->tree.nodes[p->gc_node].frame == FO_FRAME_GC_MAJOR;
    }
    if (major)
        s->stats.gc_major_ns += delta;
    else
        s->stats.gc_minor_ns += delta;
    return 1;
}

void fo_s_gc_place(fo_session *s, uint32_t node, const uint64_t ns[2])
{
    for (int major = 0; major < 2; major++) {
        if (ns[major] == 0)
            continue;
        uint32_t leaf = fo_s_regular_child(s, node, major ? FO_FRAME_GC_MAJOR : FO_FRAME_GC_MINOR);
        if (leaf == FO_NONE) {
            s->stats.node_limit_hits++;
            leaf = node;
        }
        fo_tree_charge(&s->tree, leaf, ns[major]);
    }
}
