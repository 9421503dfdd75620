/* CPU-sampled (native) sessions: the rules are in fo_session.h and
 * README.md ("CPU samples").
 *
 * A CPU sample says where a running process is; nothing says where it
 * stops. Its `out` names the function it stopped in, and the process keeps
 * a few stacks it was seen in, by the function it was seen at (contexts):
 * the innermost Erlang frame of each CPU sample, and the stacks its
 * tracer's helper reads with process_info for a function it stopped in
 * (fo_session_cpu_context). At an `out` the process's stack becomes the one
 * it was seen in at that function, the one sharing the most frames with
 * its stack of the moment; its wait hangs there, and so do samples of the
 * runtime's C code until the next sample with Erlang frames. Where it
 * stopped in a function it was never seen in, its stack is unknown until
 * the next sample with Erlang frames: C-code samples meanwhile go under
 * its root and the function it stopped in, not under the stack it left. */
#include <stdlib.h>
#include <string.h>

#include "fo_session_parts.h"

void fo_session_set_cpu_sampled(fo_session *s, fo_cpu_source source, void *ctx)
{
    fo_seen_init(&s->seen); /* without memory: stops find less, nothing else */
    s->cpu_sampled = 1;
    s->cpu_source = source;
    s->cpu_ctx = ctx;
}

void fo_session_swap_cpu_source(fo_session *s, fo_cpu_source source, void *ctx)
{
    s->cpu_source = source;
    s->cpu_ctx = ctx;
}

/* The samples of the slice that ends here, from the source, before the
 * event moves the process off-CPU. */
static void end_slice(fo_session *s, fo_proc *p, int64_t to_ns)
{
    uint64_t thread = p->thread;
    p->thread = 0;
    if (thread != 0 && s->cpu_source != NULL && to_ns > p->slice_from)
        s->cpu_source(s->cpu_ctx, s, p->pid, thread, p->slice_from, to_ns);
}

/* Keeps at most two stacks per function (the newer ones): a function in
 * recursion is sampled at every depth, and must not crowd out the other
 * functions' stacks. Past that room, a free entry, else the oldest one a
 * sample gave, else the oldest. */
static void remember(fo_proc *p, uint32_t key, uint32_t node, int asked)
{
    fo_cpu_context *same = NULL, *free_entry = NULL, *oldest_sampled = NULL, *oldest = NULL;
    uint32_t with_key = 0;
    for (uint32_t i = 0; i < FO_CPU_CONTEXTS; i++) {
        fo_cpu_context *c = &p->contexts[i];
        if (c->key == 0) {
            free_entry = free_entry != NULL ? free_entry : c;
            continue;
        }
        if (c->key == key && c->node == node) {
            c->stamp = ++p->context_clock;
            c->asked |= (uint8_t)asked;
            return;
        }
        if (c->key == key) {
            with_key++;
            if (same == NULL || c->stamp < same->stamp)
                same = c;
        }
        if (!c->asked && (oldest_sampled == NULL || c->stamp < oldest_sampled->stamp))
            oldest_sampled = c;
        if (oldest == NULL || c->stamp < oldest->stamp)
            oldest = c;
    }
    fo_cpu_context *at = with_key >= 2 ? same : free_entry != NULL ? free_entry : oldest_sampled != NULL ? oldest_sampled : oldest;
    at->key = key;
    at->node = node;
    at->stamp = ++p->context_clock;
    at->asked = (uint8_t)asked;
}

/* p was seen in its stack now: every frame of it, at its node. */
static void note_seen(fo_session *s, fo_proc *p, uint32_t frames)
{
    uint32_t proc = (uint32_t)(p - s->procs.procs);
    for (uint32_t i = 0; i < frames && i < p->depth; i++)
        fo_seen_put(&s->seen, proc, p->stack_frames[i], p->stack_nodes[i]);
}

/* p's stack becomes the path from its root to node. */
static int set_stack_to(fo_session *s, fo_proc *p, uint32_t node)
{
    const fo_tree_node *nodes = s->tree.nodes;
    uint32_t depth = nodes[node].depth;
    if (depth == 0 || !fo_procs_reserve_stack(&s->procs, p, depth, s->limits.max_stack_frames))
        return 0;
    uint32_t at = node;
    for (uint32_t i = depth; i-- > 0;) {
        p->stack_nodes[i] = at;
        p->stack_frames[i] = nodes[at].frame;
        p->stack_repeats[i] = 0; /* how often a recursion ran there is not known */
        at = nodes[at].parent;
    }
    p->depth = depth;
    p->overflow = 0;
    return 1;
}

/* How many frames two stacks of one process share from the root. */
static uint32_t shared_depth(const fo_tree *t, uint32_t a, uint32_t b)
{
    while (t->nodes[a].depth > t->nodes[b].depth)
        a = t->nodes[a].parent;
    while (t->nodes[b].depth > t->nodes[a].depth)
        b = t->nodes[b].parent;
    while (a != b && t->nodes[a].parent != UINT32_MAX) {
        a = t->nodes[a].parent;
        b = t->nodes[b].parent;
    }
    return t->nodes[a].depth;
}

/* C-code sample `leaf` of p goes under p's stack (known: where the
 * process is), else under its root and the function it stopped in. */
static void place_orphan(fo_session *s, fo_proc *p, uint32_t leaf, int known)
{
    uint32_t at = fo_s_current_node(p);
    if (!known) {
        at = p->root;
        if (p->out_key != 0) {
            uint32_t stop = fo_s_regular_child(s, at, p->out_key);
            at = stop == FO_NONE ? at : stop;
        }
    }
    if (at == p->root || !known)
        s->stats.cpu_rootless++;
    uint32_t node = leaf == FO_NONE || p->overflow > 0 ? FO_NONE : fo_s_regular_child(s, at, leaf);
    if (node == FO_NONE) {
        s->stats.node_limit_hits++;
        node = at;
    }
    fo_s_cpu_count(s, p, node);
}

static void flush_pending(fo_session *s, fo_proc *p, int known)
{
    for (uint32_t i = 0; i < p->pending_count; i++)
        place_orphan(s, p, p->pending[i], known);
    p->pending_count = 0;
}

/* The process stopped in the function of frame `key` (0: unknown, as
 * fo_s_stop_frame gives): 1 when its stack there is known (and is now its
 * stack). */
static int stop_at(fo_session *s, fo_proc *p, uint32_t key)
{
    p->out_key = key;
    if (p->out_key == 0 || p->overflow > 0)
        return p->stack_known;
    if (fo_s_top_frame(p) == key)
        return 1;
    /* returned into a caller: the frames above it are gone */
    uint32_t at = p->depth >= 2 ? fo_s_find_below(p, key, p->depth - 2) : FO_NONE;
    if (at != FO_NONE) {
        p->depth = at + 1;
        return 1;
    }
    uint32_t here = fo_s_current_node(p);
    uint32_t best = FO_NONE, best_shared = 0;
    for (uint32_t i = 0; i < FO_CPU_CONTEXTS; i++) {
        if (p->contexts[i].key != key)
            continue;
        uint32_t shared = shared_depth(&s->tree, p->contexts[i].node, here);
        if (best == FO_NONE || shared > best_shared) {
            best = p->contexts[i].node;
            best_shared = shared;
        }
    }
    if (best != FO_NONE && set_stack_to(s, p, best))
        return 1;
    /* seen in that function inside some other stack */
    uint32_t seen = fo_seen_get(&s->seen, (uint32_t)(p - s->procs.procs), key);
    if (seen != FO_NONE && set_stack_to(s, p, seen)) {
        s->stats.cpu_seen_stops++;
        return 1;
    }
    /* Preempted as it entered a function (the VM counts reductions at
     * calls), or stopped in a BIF that traps: called from where it was
     * last known to be. */
    if (p->stack_known) {
        fo_s_push_frame(s, p, key);
        s->stats.cpu_entered_stops++;
        return 1;
    }
    s->stats.cpu_unknown_stops++;
    return 0;
}

void fo_s_cpu_event(fo_session *s, fo_proc *p, const fo_event *ev)
{
    if (ev->kind == FO_EV_IN || ev->kind == FO_EV_EXIT) {
        end_slice(s, p, ev->ts_ns); /* an `out` went missing */
        flush_pending(s, p, 1);     /* its samples count in the stratum it ends */
    }
    fo_s_stratum_event(s, p, ev);
    switch (ev->kind) {
    case FO_EV_GC_START:
        /* The collection's time is exact (its GC leaf): the slice pauses
         * on its thread, and the collector's own samples are not taken */
        if (p->thread != 0 && p->gc_node == FO_NONE && p->slice_from != INT64_MAX) {
            uint64_t thread = p->thread;
            end_slice(s, p, ev->ts_ns);
            p->thread = thread;
            p->slice_from = INT64_MAX;
        }
        break;
    case FO_EV_GC_END:
        if (p->thread != 0 && p->slice_from == INT64_MAX)
            p->slice_from = ev->ts_ns;
        break;
    case FO_EV_IN:
        p->slice_sampled = 0;
        if (!s->track_receives)
            p->left_wait = (ev->flags & FO_EVF_LEFT_WAIT) != 0;
        if (ev->flags & FO_EVF_HAS_THREAD) {
            p->thread = ev->thread;
            p->slice_from = ev->ts_ns;
        }
        break;
    case FO_EV_OUT: {
        end_slice(s, p, ev->ts_ns);
        /* C code at the end of a slice is where it stopped (a BIF that
         * trapped, a GC before a wait) more often than where it was last
         * sampled: it goes under the stop's stack when that is known, else
         * under that sample */
        int known = stop_at(s, p, fo_s_stop_frame(s, ev));
        flush_pending(s, p, known || p->slice_sampled);
        p->stack_known = (uint8_t)known;
        break;
    }
    case FO_EV_EXIT:
        for (uint32_t i = 0; i < FO_CPU_CONTEXTS; i++)
            p->contexts[i].key = 0;
        p->out_key = 0;
        p->stack_known = 0;
        break;
    default:
        break;
    }
}

void fo_session_cpu_running(fo_session *s, uint64_t pid, int64_t ts_ns, uint64_t thread)
{
    fo_proc *p = fo_s_proc_for(s, pid);
    if (p == NULL || thread == 0 || (p->state == FO_PROC_RUNNING && p->thread == thread))
        return;
    fo_event in;
    memset(&in, 0, sizeof in);
    in.kind = FO_EV_IN;
    in.flags = FO_EVF_HAS_THREAD;
    in.pid = pid;
    in.ts_ns = ts_ns;
    in.thread = thread;
    fo_session_apply(s, &in);
}

/* The stack entries the first n of frames make (collapsing recursion, a
 * run of one frame is one entry). */
static uint32_t stack_entries(const fo_session *s, const fo_mfa *frames, uint32_t n)
{
    if (!s->collapse_recursion)
        return n;
    uint32_t entries = 0;
    for (uint32_t i = 0; i < n; i++)
        entries += i == 0 || !fo_mfa_equal(&frames[i], &frames[i - 1]);
    return entries;
}

void fo_session_cpu_sample(fo_session *s, uint64_t pid, const fo_mfa *frames, uint32_t count,
                           uint32_t erlang_frames)
{
    fo_proc *p = fo_s_proc_for(s, pid);
    if (p == NULL) {
        s->stats.dropped_events++;
        return;
    }
    /* The kernel follows frame pointers out of C code that keeps none: a
     * chain from a C leaf that does not reach the process's outermost
     * frame broke on the way (seen: one Erlang frame, at the root). Its
     * innermost Erlang frame is where the C code was called from, when
     * the process is in that function or was seen in it: C code may leave
     * the frame pointer at another process's stack (the scheduler's code
     * keeps the one that ran before), whose frames are not this
     * process's, so the sample counts only as C code. */
    if (count > erlang_frames && erlang_frames > 0 && p->depth > 0 && p->overflow == 0 &&
        fo_s_intern(s, &frames[0]) != p->stack_frames[0]) {
        s->stats.cpu_broken_chains++;
        uint32_t key = fo_s_intern(s, &frames[erlang_frames - 1]);
        if (key != FO_NONE && fo_s_find_below(p, key, p->depth - 1) == FO_NONE &&
            fo_seen_get(&s->seen, (uint32_t)(p - s->procs.procs), key) == FO_NONE) {
            s->stats.cpu_foreign_chains++;
            fo_session_cpu_orphan(s, pid, &frames[count - 1]);
            return;
        }
        fo_session_cpu_sample_in(s, pid, &frames[erlang_frames - 1], &frames[count - 1]);
        return;
    }
    s->stats.events++;
    s->stats.samples++;
    flush_pending(s, p, 1); /* between two samples: under the one before */
    fo_s_replace_stack(s, p, frames, count);
    p->sampled = 1;
    p->stack_known = 1;
    p->slice_sampled = 1;
    /* its own code innermost: it ran code in this slice (a signal it
     * handles runs the runtime's C code) */
    p->slice_ran |= count > 0 && erlang_frames >= count;
    fo_s_cpu_count(s, p, fo_s_current_node(p));
    erlang_frames = stack_entries(s, frames, erlang_frames);
    if (erlang_frames > 0 && erlang_frames <= p->depth && p->overflow == 0) {
        remember(p, p->stack_frames[erlang_frames - 1], p->stack_nodes[erlang_frames - 1], 0);
        note_seen(s, p, erlang_frames);
    }
}

void fo_session_cpu_inside(fo_session *s, uint64_t pid, const fo_mfa *frames, uint32_t count)
{
    uint32_t index = fo_procs_find(&s->procs, pid);
    if (index == UINT32_MAX || count == 0 || s->procs.procs[index].root == FO_NONE)
        return;
    fo_proc *p = &s->procs.procs[index];
    fo_s_replace_stack(s, p, frames, count);
    p->stack_known = 1;
}

/* Where a cut chain whose outermost frame is `frame` goes: the parent of
 * the first node of that frame on the path to where the process was seen
 * in it; FO_NONE when it was never seen there. */
uint32_t fo_s_cut_prefix(fo_session *s, fo_proc *p, uint32_t frame)
{
    uint32_t node = fo_seen_get(&s->seen, (uint32_t)(p - s->procs.procs), frame);
    if (node == FO_NONE)
        return FO_NONE;
    uint32_t first = FO_NONE;
    for (uint32_t at = node; at != FO_NONE && at != p->root; at = s->tree.nodes[at].parent) {
        if (s->tree.nodes[at].frame == frame)
            first = at;
    }
    return first == FO_NONE ? FO_NONE : s->tree.nodes[first].parent;
}

void fo_session_cpu_sample_cut(fo_session *s, uint64_t pid, const fo_mfa *frames, uint32_t count,
                               uint32_t erlang_frames, const fo_mfa *marker)
{
    fo_proc *p = fo_s_proc_for(s, pid);
    uint32_t outer = p == NULL || count == 0 ? FO_NONE : fo_s_intern(s, &frames[0]);
    if (outer == FO_NONE) {
        fo_session_cpu_sample(s, pid, frames, count, erlang_frames);
        return;
    }
    s->stats.events++;
    s->stats.samples++;
    s->stats.cpu_cut_samples++;
    flush_pending(s, p, 1);
    /* where its outermost frame was seen, else the first of its frames
     * that was (a mutual recursion keeps any of its functions outermost):
     * the chain goes there whole, its outer frames being the recursion's
     * part below that one */
    uint32_t prefix = fo_s_cut_prefix(s, p, outer);
    for (uint32_t i = 1; i < erlang_frames && i < count && prefix == FO_NONE; i++) {
        uint32_t frame = fo_s_intern(s, &frames[i]);
        prefix = frame == FO_NONE ? FO_NONE : fo_s_cut_prefix(s, p, frame);
    }
    if (prefix == FO_NONE || prefix == p->root || !set_stack_to(s, p, prefix)) {
        p->depth = 0;
        p->overflow = 0;
        if (marker != NULL) {
            s->cut_marker = fo_s_intern(s, marker);
            fo_s_push_frame(s, p, s->cut_marker);
        }
    }
    for (uint32_t i = 0; i < count; i++)
        fo_s_push_frame(s, p, fo_s_intern(s, &frames[i]));
    p->sampled = 1;
    p->stack_known = 1;
    p->slice_sampled = 1;
    p->slice_ran |= erlang_frames >= count;
    fo_s_cpu_count(s, p, fo_s_current_node(p));
}

void fo_session_cpu_sample_in(fo_session *s, uint64_t pid, const fo_mfa *caller, const fo_mfa *leaf)
{
    fo_proc *p = fo_s_proc_for(s, pid);
    if (p == NULL) {
        s->stats.dropped_events++;
        return;
    }
    uint32_t key = fo_s_intern(s, caller);
    if (key == FO_NONE || p->overflow > 0) {
        fo_session_cpu_orphan(s, pid, leaf);
        return;
    }
    s->stats.events++;
    s->stats.samples++;
    s->stats.cpu_called_samples++;
    flush_pending(s, p, 1);
    uint32_t at = p->depth > 0 ? fo_s_find_below(p, key, p->depth - 1) : FO_NONE;
    int guessed = 0;
    if (at != FO_NONE) {
        p->depth = at + 1;
    } else {
        /* where it was seen in it, else a call from where it is known to
         * be, else the caller alone */
        uint32_t seen = fo_seen_get(&s->seen, (uint32_t)(p - s->procs.procs), key);
        if (seen == FO_NONE || !set_stack_to(s, p, seen)) {
            if (!p->stack_known)
                p->depth = 0;
            fo_s_push_frame(s, p, key);
            guessed = 1;
        }
    }
    p->sampled = 1;
    p->stack_known = 1;
    p->slice_sampled = 1;
    /* seen in caller there: its next C code goes back to this stack, not
     * as a call from wherever the process is then (a BIF's caller may
     * never be sampled in its own code); not under the cut marker, which
     * is no place, and not where the caller was only guessed to be called
     * from: a guess taken for a sighting sends every later stop in the
     * caller there (a recursion's stops under the trace's root, before
     * its first sample, for good) */
    if (!guessed && p->depth > 0 && (s->cut_marker == 0 || p->stack_frames[0] != s->cut_marker))
        note_seen(s, p, p->depth);
    uint32_t here = fo_s_current_node(p);
    uint32_t frame = fo_s_intern(s, leaf);
    uint32_t node = frame == FO_NONE || p->overflow > 0 ? FO_NONE : fo_s_regular_child(s, here, frame);
    if (node == FO_NONE) {
        s->stats.node_limit_hits++;
        node = here;
    }
    fo_s_cpu_count(s, p, node);
}

void fo_session_cpu_orphan(fo_session *s, uint64_t pid, const fo_mfa *leaf)
{
    fo_proc *p = fo_s_proc_for(s, pid);
    if (p == NULL) {
        s->stats.dropped_events++;
        return;
    }
    s->stats.events++;
    s->stats.samples++;
    s->stats.cpu_orphans++;
    uint32_t frame = fo_s_intern(s, leaf);
    if (p->pending_count < FO_CPU_PENDING && frame != FO_NONE)
        p->pending[p->pending_count++] = frame;
    else
        place_orphan(s, p, frame, p->stack_known);
}

/* The node of frames (root first) under p's root, made within the usual
 * bounds; FO_NONE when the tree or the frame table is full. */
static uint32_t path_node(fo_session *s, fo_proc *p, const fo_mfa *frames, uint32_t count)
{
    uint32_t node = p->root;
    uint32_t depth = 0;
    for (uint32_t i = 0; i < count && node != FO_NONE; i++) {
        /* collapsing recursion, a run of one frame is one node (as pushed) */
        if (s->collapse_recursion && i > 0 && fo_mfa_equal(&frames[i], &frames[i - 1]))
            continue;
        if (depth >= s->limits.max_depth)
            return fo_s_regular_child(s, node, FO_FRAME_DEPTH_CAP);
        uint32_t frame = fo_s_intern(s, &frames[i]);
        node = frame == FO_NONE ? FO_NONE : fo_s_regular_child(s, node, frame);
        depth++;
    }
    return node;
}

/* Every frame of a stack read at a stop counts as seen there too: a later
 * stop in any of them finds this stack when the process's few contexts
 * have moved on (a callee's pipeline stops in more functions than they
 * hold), instead of taking its function for a call from wherever the
 * process was last known. Only a whole stack: one the read cut short
 * (deeper than the backtrace depth) starts at some inner frame, under the
 * root, and its frames are not there; a whole one starts where the
 * process's samples have seen it start. */
static void note_context_seen(fo_session *s, fo_proc *p, uint32_t node)
{
    const fo_tree_node *nodes = s->tree.nodes;
    uint32_t proc = (uint32_t)(p - s->procs.procs);
    uint32_t outermost = node;
    while (outermost != FO_NONE && nodes[outermost].parent != p->root)
        outermost = nodes[outermost].parent;
    if (outermost == FO_NONE || fo_seen_get(&s->seen, proc, nodes[outermost].frame) != outermost)
        return;
    for (uint32_t at = node; at != p->root; at = nodes[at].parent)
        fo_seen_put(&s->seen, proc, nodes[at].frame, at);
}

void fo_session_cpu_context(fo_session *s, uint64_t pid, const fo_mfa *key_mfa, const fo_mfa *frames,
                            uint32_t count)
{
    uint32_t index = fo_procs_find(&s->procs, pid);
    if (index == UINT32_MAX || count == 0)
        return;
    fo_proc *p = &s->procs.procs[index];
    uint32_t key = fo_s_intern(s, key_mfa);
    uint32_t node = p->root == FO_NONE || key == FO_NONE ? FO_NONE : path_node(s, p, frames, count);
    if (node == FO_NONE)
        return;
    s->stats.cpu_contexts++;
    remember(p, key, node, 1);
    note_context_seen(s, p, node);
    if (p->state != FO_PROC_OUT || p->out_key != key || fo_s_current_node(p) == node)
        return;
    /* it still waits where it was asked about: its wait moves there */
    uint32_t kind = s->tree.nodes[p->sleep_node].frame;
    if (kind != FO_FRAME_WAITING && kind != FO_FRAME_SLEEP)
        return;
    uint32_t leaf = fo_s_regular_child(s, node, kind);
    if (leaf == FO_NONE || !set_stack_to(s, p, node))
        return;
    p->stack_known = 1;
    if (kind == FO_FRAME_SLEEP)
        fo_s_move_time(s, p->sleep_node, leaf, p->wait_ns);
    p->sleep_node = leaf;
    if (kind == FO_FRAME_WAITING)
        fo_s_hold_call_wait_in(s, p, leaf);
}

/* Samples of node whose time the trace-wide share gives out (not those
 * of a stratum shared on its own). */
static uint64_t pooled_samples(const fo_tree_node *node)
{
    return node->samples - node->settled;
}

static int gc_leaf(const fo_tree_node *node)
{
    return node->frame == FO_FRAME_GC_MINOR || node->frame == FO_FRAME_GC_MAJOR;
}

/* What node weighs in placing its process's collections of no known
 * place: the time of a collection that had one (its GC leaf: *under is
 * its parent), else its samples (*under is itself). */
static uint64_t gc_weight(const fo_tree_node *node, uint32_t n, int by_leaves, uint32_t *under)
{
    if (by_leaves) {
        *under = node->parent;
        return gc_leaf(node) && node->parent != FO_NONE ? node->self_ns : 0;
    }
    *under = n;
    return fo_s_running_frame(node->frame) ? node->samples : 0;
}

/* The collections of no known place (fo_proc.gc_pool_ns) go where its
 * collections of a known place went, in proportion: a collection starts
 * where the code allocates, which is not where the process spends its CPU
 * time (a request's parse that allocates nothing took a third of its
 * render's collections when they went by samples: +12 pp in
 * bench/native.exs). Without any of a known place, they go by its
 * samples; without samples, under rest (where its unsampled time went;
 * FO_NONE: its root). What rounding leaves goes with the largest part. */
static void settle_gc(fo_session *s, const uint32_t *rest)
{
    uint32_t procs = s->procs.count;
    uint32_t count = s->tree.count; /* not the GC leaves made here */
    uint64_t *weights = calloc(2 * (size_t)procs, sizeof(uint64_t)); /* [leaves, samples] */
    uint64_t *given = calloc(2 * (size_t)procs, sizeof(uint64_t));
    uint32_t *largest = malloc(sizeof(uint32_t) * (procs > 0 ? procs : 1));
    uint64_t *largest_part = calloc(procs, sizeof(uint64_t));
    int ok = weights != NULL && given != NULL && largest != NULL && largest_part != NULL;
    for (uint32_t i = 0; ok && i < procs; i++)
        largest[i] = FO_NONE;
    for (uint32_t n = 0; ok && n < count; n++) {
        const fo_tree_node *node = &s->tree.nodes[n];
        uint32_t under;
        if (node->proc >= procs)
            continue;
        weights[2 * node->proc] += gc_weight(node, n, 1, &under);
        weights[2 * node->proc + 1] += gc_weight(node, n, 0, &under);
    }
    for (uint32_t n = 0; ok && n < count; n++) {
        uint32_t proc = s->tree.nodes[n].proc;
        if (proc >= procs)
            continue;
        const uint64_t *pool = s->procs.procs[proc].gc_pool_ns;
        int by_leaves = weights[2 * proc] > 0;
        uint64_t total = weights[2 * proc + !by_leaves];
        uint32_t at;
        uint64_t have = gc_weight(&s->tree.nodes[n], n, by_leaves, &at);
        if ((pool[0] == 0 && pool[1] == 0) || have == 0 || total == 0)
            continue;
        uint64_t part[2];
        for (int k = 0; k < 2; k++) {
            part[k] = (uint64_t)((unsigned __int128)pool[k] * have / total);
            given[2 * proc + k] += part[k];
        }
        uint64_t size = part[0] + part[1];
        if (largest[proc] == FO_NONE || size > largest_part[proc]) {
            largest[proc] = at;
            largest_part[proc] = size;
        }
        fo_s_gc_place(s, at, part);
    }
    for (uint32_t i = 0; i < procs; i++) {
        fo_proc *p = &s->procs.procs[i];
        if (p->root == FO_NONE)
            continue;
        uint64_t left[2] = {p->gc_pool_ns[0], p->gc_pool_ns[1]};
        uint32_t at = rest[i] != FO_NONE ? rest[i] : p->root;
        if (ok && largest[i] != FO_NONE) {
            left[0] -= given[2 * i];
            left[1] -= given[2 * i + 1];
            at = largest[i];
        }
        fo_s_gc_place(s, at, left);
        p->gc_pool_ns[0] = 0;
        p->gc_pool_ns[1] = 0;
    }
    free(weights);
    free(given);
    free(largest);
    free(largest_part);
}

void fo_session_cpu_settle(fo_session *s, int64_t end_ns)
{
    uint32_t procs = s->procs.count;
    if (!s->cpu_sampled || procs == 0)
        return;
    for (uint32_t i = 0; i < procs; i++) {
        fo_proc *p = &s->procs.procs[i];
        if (p->root != FO_NONE && p->state == FO_PROC_RUNNING && end_ns != 0)
            end_slice(s, p, end_ns);
        if (p->root != FO_NONE) {
            flush_pending(s, p, 1);
            fo_s_stratum_end(s, p);
        }
    }
    fo_s_rehome_cut_chains(s);
    /* per process: its samples, the node with the most of them, and the
     * time given so far (what rounding leaves goes to that node) */
    uint64_t *counts = calloc(procs, sizeof(uint64_t));
    uint64_t *given = calloc(procs, sizeof(uint64_t));
    uint32_t *busiest = malloc(sizeof(uint32_t) * procs);
    if (counts == NULL || given == NULL || busiest == NULL) {
        free(counts);
        free(given);
        free(busiest);
        return; /* the time stays unsettled: it is not charged at all */
    }
    for (uint32_t i = 0; i < procs; i++)
        busiest[i] = FO_NONE;
    fo_tree_node *nodes = s->tree.nodes;
    for (uint32_t n = 0; n < s->tree.count; n++) {
        uint32_t proc = nodes[n].proc;
        uint64_t pooled = pooled_samples(&nodes[n]);
        if (pooled == 0 || !fo_s_running_frame(nodes[n].frame) || proc >= procs)
            continue;
        counts[proc] += pooled;
        if (busiest[proc] == FO_NONE || pooled > pooled_samples(&nodes[busiest[proc]]))
            busiest[proc] = n;
    }
    for (uint32_t n = 0; n < s->tree.count; n++) {
        uint32_t proc = nodes[n].proc;
        uint64_t pooled = pooled_samples(&nodes[n]);
        if (pooled == 0 || !fo_s_running_frame(nodes[n].frame) || proc >= procs || counts[proc] == 0)
            continue;
        unsigned __int128 share = (unsigned __int128)s->procs.procs[proc].cpu_ns * pooled;
        uint64_t ns = (uint64_t)(share / counts[proc]);
        fo_tree_charge(&s->tree, n, ns);
        given[proc] += ns;
    }
    /* A process no sample landed on (a short trace: a request of 30 us
     * at 499 Hz) ran somewhere under its stacks' one outermost frame,
     * when they have one (the trace's root function): its time goes
     * there, not on the bare process. busiest[] is free for them. */
    for (uint32_t n = 0; n < s->tree.count; n++) {
        uint32_t proc = nodes[n].proc;
        if (proc >= procs || counts[proc] != 0 || nodes[n].frame < FO_FRAME_FIRST_REAL ||
            nodes[n].parent != s->procs.procs[proc].root)
            continue;
        busiest[proc] = busiest[proc] == FO_NONE ? n : s->procs.procs[proc].root;
    }
    for (uint32_t i = 0; i < procs; i++) {
        fo_proc *p = &s->procs.procs[i];
        if (p->root == FO_NONE || p->cpu_ns == 0)
            continue;
        if (counts[i] == 0) {
            fo_tree_charge(&s->tree, busiest[i] != FO_NONE ? busiest[i] : p->root, p->cpu_ns);
            s->stats.cpu_unsampled_ns += p->cpu_ns;
        } else if (p->cpu_ns > given[i]) {
            fo_tree_charge(&s->tree, busiest[i], p->cpu_ns - given[i]);
        }
        p->cpu_ns = 0;
        p->stratum_base = 0;
    }
    settle_gc(s, busiest);
    free(counts);
    free(given);
    free(busiest);
}
