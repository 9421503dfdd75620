/* The per-process state machine. The rules are written out in README.md
 * beside this file; tests in c_src/test hold it to them. */
#include "fo_session.h"

#include <stdlib.h>
#include <string.h>

#include "fo_session_parts.h"



/* Each process owns a root and a node-cap bucket outside max_nodes. */
#define RESERVED_NODES_PER_PROCESS 2u

fo_session *fo_session_new(const fo_limits *limits)
{
    if (!fo_limits_valid(limits))
        return NULL;
    uint64_t hard_cap =
        (uint64_t)limits->max_nodes + (uint64_t)limits->max_processes * RESERVED_NODES_PER_PROCESS;
    if (hard_cap >= UINT32_MAX)
        return NULL;
    fo_session *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->limits = *limits;
    s->last_index = UINT32_MAX;
    int ok = fo_frames_init(&s->frames, limits->max_frames, FO_FRAME_FIRST_REAL);
    ok = fo_tree_init(&s->tree, (uint32_t)hard_cap) && ok;
    ok = fo_procs_init(&s->procs, limits->max_processes) && ok;
    if (!ok) {
        fo_session_free(s);
        return NULL;
    }
    return s;
}

void fo_session_free(fo_session *s)
{
    if (s == NULL)
        return;
    fo_frames_destroy(&s->frames);
    fo_seen_destroy(&s->seen);
    fo_alloc_destroy(&s->alloc);
    fo_tree_destroy(&s->tree);
    fo_procs_destroy(&s->procs);
    free(s);
}

/* The process of pid, made on first sight. NULL when it cannot be
 * followed (process limit, or no memory for its reserved nodes). */
fo_proc *fo_s_proc_for(fo_session *s, uint64_t pid)
{
    if (s->last_index != UINT32_MAX && s->last_pid == pid) {
        fo_proc *hit = &s->procs.procs[s->last_index];
        return hit->root == FO_NONE ? NULL : hit;
    }
    uint32_t index = fo_procs_find(&s->procs, pid);
    if (index != UINT32_MAX) {
        s->last_pid = pid;
        s->last_index = index;
        fo_proc *known = &s->procs.procs[index];
        return known->root == FO_NONE ? NULL : known;
    }
    if (s->procs.count >= s->limits.max_processes) {
        s->stats.process_limit_hits++;
        return NULL;
    }
    index = fo_procs_add(&s->procs, pid);
    if (index == UINT32_MAX)
        return NULL;
    fo_proc *p = &s->procs.procs[index];
    p->root = fo_tree_add_root(&s->tree, FO_FRAME_PROCESS, index, 0);
    p->node_cap = p->root == FO_NONE ? FO_NONE : fo_tree_child(&s->tree, p->root, FO_FRAME_NODE_CAP, 1);
    if (p->node_cap == FO_NONE) {
        p->root = FO_NONE; /* out of memory: this pid stays unfollowed */
        return NULL;
    }
    p->sleep_node = p->root;
    p->call_wait_node = FO_NONE;
    p->gc_node = FO_NONE;
    p->prev_wait_node = FO_NONE;
    p->alloc_node = FO_NONE;
    p->state = FO_PROC_RUNNING;
    p->unseen = 1;
    fo_s_unseen_forget(p);
    return p;
}

uint32_t fo_s_current_node(const fo_proc *p)
{
    return p->depth == 0 ? p->root : p->stack_nodes[p->depth - 1];
}

uint32_t fo_s_top_frame(const fo_proc *p)
{
    return p->depth == 0 ? FO_NONE : p->stack_frames[p->depth - 1];
}

/* A regular node under parent, within max_nodes; FO_NONE when full. */
uint32_t fo_s_regular_child(fo_session *s, uint32_t parent, uint32_t frame)
{
    int may_create = s->regular_nodes < s->limits.max_nodes;
    uint32_t before = s->tree.count;
    uint32_t node = fo_tree_child(&s->tree, parent, frame, may_create);
    if (s->tree.count != before)
        s->regular_nodes++;
    return node;
}

void fo_session_set_collapse_recursion(fo_session *s, int on)
{
    s->collapse_recursion = on != 0;
}

void fo_s_push_frame(fo_session *s, fo_proc *p, uint32_t frame)
{
    /* Direct recursion: the frame on top calls itself. One entry stands
     * for the run; its node (and so the tree's depth) stays. An unknown
     * frame (FO_NONE) is no frame to compare. */
    if (s->collapse_recursion && p->overflow == 0 && frame != FO_NONE && p->depth > 0 &&
        p->stack_frames[p->depth - 1] == frame && p->stack_repeats[p->depth - 1] < UINT32_MAX) {
        p->stack_repeats[p->depth - 1]++;
        s->stats.collapsed_recursion++;
        return;
    }
    if (p->overflow > 0 || p->depth >= s->limits.max_stack_frames ||
        !fo_procs_reserve_stack(&s->procs, p, p->depth + 1, s->limits.max_stack_frames)) {
        p->overflow++;
        s->stats.stack_overflows++;
        return;
    }
    uint32_t parent = fo_s_current_node(p);
    uint32_t node;
    if (frame == FO_NONE) {
        s->stats.frame_limit_hits++;
        s->stats.truncated_stacks++;
        node = p->node_cap;
    } else if (p->depth >= s->limits.max_depth) {
        s->stats.depth_truncations++;
        s->stats.truncated_stacks++;
        /* Everything past max_depth shares one "…" node. */
        node = p->depth == s->limits.max_depth ? fo_s_regular_child(s, parent, FO_FRAME_DEPTH_CAP) : parent;
        if (node == FO_NONE) {
            s->stats.node_limit_hits++;
            node = p->node_cap;
        }
    } else {
        node = fo_s_regular_child(s, parent, frame);
        if (node == FO_NONE) {
            s->stats.node_limit_hits++;
            s->stats.truncated_stacks++;
            node = p->node_cap;
        }
    }
    p->stack_frames[p->depth] = frame;
    p->stack_nodes[p->depth] = node;
    p->stack_repeats[p->depth] = 0;
    p->depth++;
}

/* Pops one call: a repeat of a collapsed recursion first. */
static void pop_call(fo_proc *p)
{
    if (p->depth == 0)
        return;
    if (p->stack_repeats[p->depth - 1] > 0)
        p->stack_repeats[p->depth - 1]--;
    else
        p->depth--;
}

/* Index of frame on the stack, searching down from `from`; FO_NONE if absent. */
uint32_t fo_s_find_below(const fo_proc *p, uint32_t frame, uint32_t from)
{
    for (uint32_t i = from + 1; i-- > 0;) {
        if (p->stack_frames[i] == frame)
            return i;
    }
    return FO_NONE;
}

uint32_t fo_s_intern(fo_session *s, const fo_mfa *mfa)
{
    return fo_frames_intern(&s->frames, mfa);
}

uint32_t fo_s_stop_frame(fo_session *s, const fo_event *ev)
{
    uint32_t frame = (ev->flags & FO_EVF_HAS_MFA) ? fo_s_intern(s, &ev->mfa) : 0;
    return frame == FO_NONE ? 0 : frame;
}

static void on_call(fo_session *s, fo_proc *p, const fo_event *ev)
{
    uint32_t callee = fo_s_intern(s, &ev->mfa);
    if ((ev->flags & FO_EVF_HAS_CALLER) && p->overflow == 0) {
        /* the common case, a plain nested call, without hashing the caller */
        uint32_t top = fo_s_top_frame(p);
        fo_mfa top_mfa;
        if (top != FO_NONE && fo_frames_get(&s->frames, top, &top_mfa) &&
            top_mfa.module == ev->caller.module && top_mfa.function == ev->caller.function &&
            top_mfa.arity == ev->caller.arity) {
            fo_s_push_frame(s, p, callee);
            return;
        }
        uint32_t caller = fo_s_intern(s, &ev->caller);
        uint32_t at = (p->depth >= 2 && caller != FO_NONE) ? fo_s_find_below(p, caller, p->depth - 2) : FO_NONE;
        if (at != FO_NONE) {
            p->depth = at + 1; /* a tail call, or frames an exception unwound */
            s->stats.resyncs++;
        } else {
            if (p->depth > 0)
                s->stats.resyncs++;
            fo_s_push_frame(s, p, caller);
        }
    }
    fo_s_push_frame(s, p, callee);
}

static void on_return_to(fo_session *s, fo_proc *p, const fo_event *ev)
{
    if (p->overflow > 0) {
        p->overflow--;
        return;
    }
    if (!(ev->flags & FO_EVF_HAS_MFA)) {
        pop_call(p);
        return;
    }
    uint32_t target = fo_s_intern(s, &ev->mfa);
    /* A collapsed recursion returns into itself: one call fewer. (The
     * entries below the top are then searched as the frames below its
     * run, which are no copies of it.) */
    if (target != FO_NONE && target == fo_s_top_frame(p) && p->stack_repeats[p->depth - 1] > 0) {
        p->stack_repeats[p->depth - 1]--;
        return;
    }
    uint32_t at = (p->depth >= 2 && target != FO_NONE) ? fo_s_find_below(p, target, p->depth - 2) : FO_NONE;
    if (at != FO_NONE) {
        p->depth = at + 1;
        return;
    }
    /* Returned into something we never saw called: start over from it. */
    s->stats.resyncs++;
    p->depth = 0;
    fo_s_push_frame(s, p, target);
}

static void charge(fo_session *s, fo_proc *p, int64_t ts)
{
    if (!p->has_ts) {
        p->has_ts = 1;
        p->last_ts = ts;
        return;
    }
    if (ts < p->last_ts) {
        s->stats.clock_skews++;
        return;
    }
    /* unsigned: far-apart timestamps must not overflow int64 */
    uint64_t delta = (uint64_t)ts - (uint64_t)p->last_ts;
    p->last_ts = ts;
    int unseen = p->unseen && p->state == FO_PROC_RUNNING && !s->cpu_sampled;
    if (fo_s_gc_charge(s, p, delta)) {
        if (unseen)
            fo_s_unseen_note(s, p, p->gc_node, delta);
        return;
    }
    if (p->state == FO_PROC_RUNNING) {
        p->slice_run_ns += delta;
        if (s->cpu_sampled) {
            p->cpu_ns += delta; /* shared among its samples' stacks later */
            return;
        }
        fo_tree_charge(&s->tree, fo_s_current_node(p), delta);
        if (unseen)
            fo_s_unseen_note(s, p, fo_s_current_node(p), delta);
        if (p->depth == 0 && !p->sampled)
            p->unsampled_ns += delta;
    }
    else if (p->state == FO_PROC_OUT) {
        fo_tree_charge(&s->tree, p->sleep_node, delta);
        p->wait_ns += delta;
        if (s->tree.nodes[p->sleep_node].frame == FO_FRAME_WAITING)
            p->call_wait_ns += delta;
    }
}

/* Moves up to ns of from's time to to (what from holds caps it); returns
 * what moved. */
uint64_t fo_s_move_time(fo_session *s, uint32_t from, uint32_t to, uint64_t ns)
{
    if (from == FO_NONE || from == to)
        return 0;
    if (ns > s->tree.nodes[from].self_ns)
        ns = s->tree.nodes[from].self_ns;
    s->tree.nodes[from].self_ns -= ns;
    fo_tree_charge(&s->tree, to, ns);
    return ns;
}

/* A call's wait is kept on one WAITING leaf, the newest: when the process
 * waits on under another stack (a sample showed where it really waits),
 * what the call waited so far moves there too. A process cannot change
 * its stack while it waits, so the newest stack is the best one for the
 * whole wait, and attribution later finds all of it in one place. */
void fo_s_hold_call_wait_in(fo_session *s, fo_proc *p, uint32_t leaf)
{
    fo_s_move_time(s, p->call_wait_node, leaf, p->call_wait_ns);
    p->call_wait_node = leaf;
}

static void on_out(fo_session *s, fo_proc *p, const fo_event *ev)
{
    if (p->state == FO_PROC_OUT)
        return;
    p->state = FO_PROC_OUT;
    p->wait_ns = 0;
    uint32_t leaf = (ev->flags & FO_EVF_IN_CALL) ? FO_FRAME_WAITING : FO_FRAME_SLEEP;
    if (leaf == FO_FRAME_WAITING)
        fo_s_call_wait_stop(s, p, ev);
    uint32_t node = fo_s_regular_child(s, fo_s_current_node(p), leaf);
    if (node == FO_NONE) {
        s->stats.node_limit_hits++;
        node = p->node_cap;
    }
    p->sleep_node = node;
    if (leaf == FO_FRAME_WAITING && node != p->node_cap)
        fo_s_hold_call_wait_in(s, p, node);
}

void fo_session_apply(fo_session *s, const fo_event *ev)
{
    fo_proc *p = fo_s_proc_for(s, ev->pid);
    if (p == NULL) {
        s->stats.dropped_events++;
        return;
    }
    s->stats.events++;
    if (p->state == FO_PROC_EXITED) {
        /* a pid seen again after its exit starts a fresh timeline */
        p->state = FO_PROC_RUNNING;
        p->has_ts = 0;
    }
    charge(s, p, ev->ts_ns);
    if (s->track_receives)
        fo_s_receives_event(s, p, ev);
    if (s->cpu_sampled)
        fo_s_cpu_event(s, p, ev);
    if (s->track_receives >= FO_RECEIVES_CPU)
        fo_s_slice_event(s, p, ev);
    switch (ev->kind) {
    case FO_EV_CALL:
        p->alloc_events++;
        on_call(s, p, ev);
        p->unseen = 0;
        fo_s_unseen_forget(p);
        p->pair_clean = 0;
        break;
    case FO_EV_RETURN_TO:
        p->alloc_events++;
        on_return_to(s, p, ev);
        p->unseen = 0;
        fo_s_unseen_forget(p);
        p->pair_clean = 0;
        break;
    case FO_EV_OUT:
        on_out(s, p, ev);
        break;
    case FO_EV_IN:
        if (p->state == FO_PROC_OUT) {
            p->prev_wait_node = p->sleep_node;
            p->prev_wait_ns = p->wait_ns;
            p->pair_clean = 1;
        }
        p->state = FO_PROC_RUNNING;
        p->unseen = 1;
        /* the notes stay: every burst since the last sample is unseen
         * (preempted, or woken), and they all go where the next one says */
        break;
    case FO_EV_EXIT:
        p->state = FO_PROC_EXITED;
        p->depth = 0;
        p->overflow = 0;
        p->sampled = 0;
        p->unsampled_ns = 0;
        p->call_wait_ns = 0;
        p->call_wait_node = FO_NONE;
        p->gc_node = FO_NONE;
        p->gc_pooled = 0;
        p->prev_wait_node = FO_NONE;
        p->prev_wait_ns = 0;
        p->wait_ns = 0;
        /* a follower that pauses keeps its heap level: its next
         * collection in the trace counts from there (fo_session_gc.c) */
        if (!(ev->flags & FO_EVF_PAUSED))
            fo_s_gc_forget(s, p);
        break;
    case FO_EV_GC_START:
    case FO_EV_GC_END:
        fo_s_gc_event(s, p, ev);
        break;
    case FO_EV_RECEIVE:
        break; /* fo_s_receives_event, when tracked */
    default:
        s->stats.events--;
        s->stats.ignored_events++;
        break;
    }
}

/* The stack becomes the sampled one: the frames both share from the root
 * stay, the rest is unwound and the sampled frames pushed with the usual
 * bounds. */
void fo_s_replace_stack(fo_session *s, fo_proc *p, const fo_mfa *frames, uint32_t count)
{
    uint32_t keep = 0; /* entries kept */
    uint32_t i = 0;    /* frames they stand for */
    uint32_t differing = FO_NONE;
    if (p->overflow == 0) {
        while (keep < p->depth && i < count) {
            uint32_t id = fo_s_intern(s, &frames[i]);
            if (id == FO_NONE || id != p->stack_frames[keep]) {
                differing = id;
                break;
            }
            /* collapsing, a kept entry stands for its frame's run in the
             * sample (as pushing the run would make it), and the frames
             * folded into it count as pushed ones do */
            uint32_t repeats = 0;
            for (i++; s->collapse_recursion && i < count && fo_mfa_equal(&frames[i], &frames[i - 1]); i++)
                repeats += repeats < UINT32_MAX;
            p->stack_repeats[keep] = repeats;
            s->stats.collapsed_recursion += repeats;
            keep++;
        }
    }
    p->overflow = 0;
    p->depth = keep;
    for (uint32_t first = i; i < count; i++)
        fo_s_push_frame(s, p, i == first && differing != FO_NONE ? differing : fo_s_intern(s, &frames[i]));
    /* the first stack known since collections held their words */
    fo_s_alloc_place_held(s, p);
}

/* A sample replaces the stack: the frames both stacks share from the root
 * stay (so a run of samples in one function creates no nodes), the rest is
 * unwound and the sampled frames pushed with the usual bounds. Time up to
 * the sample was charged to where the previous event left the process.
 * frames == NULL keeps the stack the process has. */
static void apply_sample(fo_session *s, fo_proc *p, int64_t ts_ns, const fo_mfa *frames, uint32_t count,
                         uint64_t weight, unsigned how, uint32_t times)
{
    int waited = (how & FO_SAMPLE_WAITED) != 0;
    s->stats.events++;
    s->stats.samples += times;
    if (p->state == FO_PROC_EXITED) {
        p->state = FO_PROC_RUNNING;
        p->has_ts = 0;
    }
    /* Running since it was scheduled in (or appeared) with no sample: the
     * stack it waited in is stale as soon as it runs, and this sample is
     * the first look at where the burst went, so the burst is charged to
     * the sampled stack. Otherwise a sample's stack holds until the next
     * event, and time up to this sample belongs to the previous one. */
    int fresh = p->unseen && p->state == FO_PROC_RUNNING;
    /* A stack it waits in (its `out` not applied yet) is not where the
     * burst ran: the burst is charged as an `out` would charge it, and
     * placed as one of a burst that ended (below). */
    int waits = (how & (FO_SAMPLE_WAITED | FO_SAMPLE_WAITING)) != 0;
    int backfill = fresh && !waits;
    if (!backfill)
        charge(s, p, ts_ns);
    /* Waited, and running since an `in` with nothing seen: it is still
     * answering this very request (its `out` comes after), so the wait
     * before that `in` was spent in the sampled stack too. */
    int answering = waited && fresh && p->pair_clean;
    if (p->state == FO_PROC_RUNNING)
        p->pair_clean = 0;
    if (frames != NULL)
        fo_s_replace_stack(s, p, frames, count);
    if (fresh || p->state == FO_PROC_OUT) {
        /* the burst's time charged at its events goes where it ran (the
         * first sample's move below must not take it twice) */
        uint64_t from_root = p->unseen_node == p->root ? p->unseen_ns : 0;
        fo_s_unseen_place(s, p, waits || (p->state == FO_PROC_OUT && (how & FO_SAMPLE_BUSY) == 0));
        p->unsampled_ns -= from_root < p->unsampled_ns ? from_root : p->unsampled_ns;
    }
    if (p->state == FO_PROC_OUT) {
        /* Sampled while off-CPU: the stack it waits in is exact now, so the
         * rest of the wait goes under it, in a leaf of the same kind. */
        uint32_t kind = s->tree.nodes[p->sleep_node].frame;
        if (kind != FO_FRAME_WAITING)
            kind = FO_FRAME_SLEEP;
        /* found runnable (preempted, not waiting): so it has been since its
         * `out`, and stays until its `in`. Receive events, when tracked,
         * tell it better (a process a message was just sent to reads
         * running too, before it takes it). */
        int preempted = (how & FO_SAMPLE_BUSY) != 0 && kind == FO_FRAME_SLEEP &&
                        s->track_receives == FO_RECEIVES_OFF;
        if (preempted)
            kind = FO_FRAME_RUNNABLE;
        uint32_t node = fo_s_regular_child(s, fo_s_current_node(p), kind);
        if (node == FO_NONE) {
            s->stats.node_limit_hits++;
            node = p->node_cap;
        }
        /* answered waiting, it waits where it did since its last `out` */
        if ((waited || (how & FO_SAMPLE_WAITING) || preempted) && kind != FO_FRAME_WAITING &&
            node != p->node_cap) {
            fo_s_move_time(s, p->sleep_node, node, p->wait_ns);
            if (waited && p->pair_clean) {
                fo_s_piece_was_wait(p, p->prev_wait_node);
                fo_s_move_time(s, p->prev_wait_node, node, p->prev_wait_ns);
            }
            p->prev_wait_ns = 0;
        }
        p->sleep_node = node;
        if (kind == FO_FRAME_WAITING && node != p->node_cap)
            fo_s_hold_call_wait_in(s, p, node);
    } else if (answering && p->prev_wait_node != FO_NONE &&
               s->tree.nodes[p->prev_wait_node].frame == FO_FRAME_SLEEP) {
        uint32_t node = fo_s_regular_child(s, fo_s_current_node(p), FO_FRAME_SLEEP);
        fo_s_piece_was_wait(p, p->prev_wait_node);
        if (node != FO_NONE)
            fo_s_move_time(s, p->prev_wait_node, node, p->prev_wait_ns);
        p->prev_wait_ns = 0;
    }
    if (backfill)
        charge(s, p, ts_ns);
    fo_s_unseen_forget(p); /* all placed now, the backfill above included */
    /* A leading stack is from before the work; so is a waited one taken as
     * the process was scheduled in (it answered before running any code):
     * the burst it runs now is not in it. */
    int before_burst = waited && p->state == FO_PROC_RUNNING;
    p->unseen = (how & FO_SAMPLE_LEADING) != 0 || before_burst;
    if (!p->sampled && (how & FO_SAMPLE_LEADING) == 0) {
        /* Its first sample: what it ran before, with no stack known, was
         * this work too (a sampler starts a little after its process). */
        uint32_t here = fo_s_current_node(p);
        uint64_t moved = p->unsampled_ns;
        if (moved > s->tree.nodes[p->root].self_ns)
            moved = s->tree.nodes[p->root].self_ns;
        if (here != p->root && moved > 0) {
            s->tree.nodes[p->root].self_ns -= moved;
            fo_tree_charge(&s->tree, here, moved);
        }
        p->sampled = 1;
        p->unsampled_ns = 0;
    }
    fo_tree_count_samples(&s->tree, p->state == FO_PROC_OUT ? p->sleep_node : fo_s_current_node(p), times, weight);
}

void fo_session_sample_as(fo_session *s, uint64_t pid, int64_t ts_ns, const fo_mfa *frames, uint32_t count,
                          uint64_t weight, unsigned how)
{
    fo_proc *p = fo_s_proc_for(s, pid);
    if (p == NULL) {
        s->stats.dropped_events++;
        return;
    }
    /* a NULL frames pointer is how apply_sample keeps the stack: an empty
     * sample must still replace it */
    static const fo_mfa no_frames[1];
    apply_sample(s, p, ts_ns, count == 0 ? no_frames : frames, count, weight, how, 1);
}

void fo_session_sample(fo_session *s, uint64_t pid, int64_t ts_ns, const fo_mfa *frames, uint32_t count,
                       uint64_t weight)
{
    fo_session_sample_as(s, pid, ts_ns, frames, count, weight, 0);
}

void fo_session_sample_same(fo_session *s, uint64_t pid, int64_t ts_ns, uint64_t weight, uint32_t times)
{
    fo_proc *p = fo_s_proc_for(s, pid);
    if (p == NULL || times == 0) {
        s->stats.dropped_events++;
        return;
    }
    apply_sample(s, p, ts_ns, NULL, 0, weight, 0, times);
}

void fo_session_count_slept(fo_session *s, uint64_t pid, uint32_t times)
{
    uint32_t index = fo_procs_find(&s->procs, pid);
    if (index == UINT32_MAX || times == 0 || s->procs.procs[index].root == FO_NONE) {
        s->stats.dropped_events++;
        return;
    }
    s->stats.samples += times;
    fo_tree_count_samples(&s->tree, s->procs.procs[index].sleep_node, times, 0);
}

void fo_session_close(fo_session *s, int64_t end_ns)
{
    for (uint32_t i = 0; i < s->procs.count; i++) {
        fo_proc *p = &s->procs.procs[i];
        if (p->root != FO_NONE && p->has_ts && p->state != FO_PROC_EXITED && end_ns > p->last_ts)
            charge(s, p, end_ns);
        if (p->root != FO_NONE && p->piece_count > 0)
            fo_s_receives_close(s, p);
        if (p->root != FO_NONE)
            fo_s_alloc_release(s, p);
    }
}

void fo_session_count_malformed(fo_session *s, uint64_t n)
{
    s->stats.malformed_events += n;
    s->stats.dropped_events += n;
}

void fo_session_call_started(fo_session *s, uint64_t pid)
{
    uint32_t index = fo_procs_find(&s->procs, pid);
    if (index != UINT32_MAX) {
        s->procs.procs[index].call_wait_ns = 0;
        s->procs.procs[index].call_wait_node = FO_NONE;
        s->procs.procs[index].call_wait_stop = 0;
    }
}

uint64_t fo_session_attribute_wait(fo_session *s, uint64_t pid, uint64_t ns)
{
    uint32_t index = fo_procs_find(&s->procs, pid);
    if (index == UINT32_MAX)
        return 0;
    fo_proc *p = &s->procs.procs[index];
    uint32_t waiting = p->call_wait_node;
    if (p->root == FO_NONE || waiting == FO_NONE || s->tree.nodes[waiting].frame != FO_FRAME_WAITING)
        return 0;
    uint64_t wanted = ns < p->call_wait_ns ? ns : p->call_wait_ns;
    if (wanted == 0 || s->tree.nodes[waiting].self_ns == 0)
        return 0;
    uint32_t attributed = fo_s_regular_child(s, s->tree.nodes[waiting].parent, FO_FRAME_ATTRIBUTED);
    if (attributed == FO_NONE)
        return 0; /* tree full: the wait stays WAITING, still counted in time */
    uint64_t moved = fo_s_move_time(s, waiting, attributed, wanted);
    p->call_wait_ns -= moved;
    return moved;
}

void fo_session_count_ignored(fo_session *s, uint64_t n)
{
    s->stats.ignored_events += n;
}

const fo_stats *fo_session_stats(const fo_session *s)
{
    return &s->stats;
}

size_t fo_session_memory(const fo_session *s)
{
    return sizeof(*s) + fo_frames_memory(&s->frames) + fo_tree_memory(&s->tree) +
           fo_procs_memory(&s->procs) + fo_seen_memory(&s->seen) + fo_alloc_memory(&s->alloc);
}

uint32_t fo_session_node_count(const fo_session *s)
{
    return s->tree.count;
}

void fo_session_node(const fo_session *s, uint32_t id, fo_node_info *out)
{
    const fo_tree_node *n = &s->tree.nodes[id];
    out->parent = n->parent;
    out->frame = n->frame;
    out->proc = n->proc;
    out->depth = n->depth;
    out->self_ns = n->self_ns;
    out->samples = n->samples;
    out->weight = n->weight;
    fo_alloc_get(&s->alloc, id, &out->alloc_words, &out->alloc_samples);
}

uint32_t fo_session_alloc_count(const fo_session *s)
{
    return s->alloc.count;
}

void fo_session_alloc_entry(const fo_session *s, uint32_t i, uint32_t *node, uint64_t *words, uint64_t *samples)
{
    const fo_alloc_entry *e = &s->alloc.entries[i];
    *node = e->node;
    *words = e->words;
    *samples = e->samples;
}

uint32_t fo_session_process_count(const fo_session *s)
{
    return s->procs.count;
}

uint64_t fo_session_process_pid(const fo_session *s, uint32_t proc)
{
    return s->procs.procs[proc].pid;
}

uint32_t fo_session_frame_count(const fo_session *s)
{
    return s->frames.count;
}

int fo_session_frame_mfa(const fo_session *s, uint32_t frame, fo_mfa *out)
{
    return fo_frames_get(&s->frames, frame, out);
}
