/* Carries the span graph's notes out on the stacks (see fo_follow.h and
 * the "Stacks" part of GRAPH.md). */
#include "fo_follow.h"

#include <string.h>

static void apply(fo_session *s, fo_event_kind kind, uint64_t pid, int64_t ts, uint32_t flags)
{
    fo_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.kind = kind;
    ev.pid = pid;
    ev.ts_ns = ts;
    ev.flags = flags;
    fo_session_apply(s, &ev);
}

/* A follower's wait starts: in a graph trace every wait may be explained
 * by whoever ends it, so each one is held like a call's wait (one WAITING
 * leaf, from which the explained part moves to ATTRIBUTED). */
static void wait_starts(fo_session *s, uint64_t pid, int64_t ts)
{
    fo_session_call_started(s, pid);
    apply(s, FO_EV_OUT, pid, ts, FO_EVF_IN_CALL);
}

static void drain(const fo_follow *f)
{
    fo_graph_note n;
    while (fo_graph_next_note(f->graph, &n)) {
        switch (n.kind) {
        case FO_NOTE_JOINED:
        case FO_NOTE_LEFT:
            if (f->changed != NULL)
                f->changed(f->arg, n.pid, n.kind == FO_NOTE_JOINED ? FO_FOLLOW_JOINED : FO_FOLLOW_LEFT);
            break;
        case FO_NOTE_PAUSE:
            apply(f->session, FO_EV_EXIT, n.pid, n.ts, FO_EVF_PAUSED);
            break;
        case FO_NOTE_RESUME:
            wait_starts(f->session, n.pid, n.ts);
            break;
        case FO_NOTE_APPLY_IN:
            apply(f->session, FO_EV_IN, n.pid, n.ts, 0);
            break;
        case FO_NOTE_ATTRIBUTE:
            fo_session_attribute_wait(f->session, n.pid, n.ns);
            break;
        case FO_NOTE_RUNNABLE:
            fo_session_runnable_wait(f->session, n.pid, n.ns);
            break;
        default:
            break;
        }
    }
}

/* A plain message; across nodes (wire) the remote rules apply. */
static void message(fo_graph *g, const fo_corr *c, int64_t ts)
{
    if (c->is_send && c->wire != 0)
        fo_graph_remote_message_sent(g, c->from, c->to, c->wire, ts);
    else if (c->is_send)
        fo_graph_message_sent(g, c->from, c->to, ts);
    else if (c->wire != 0)
        fo_graph_remote_message_received(g, c->to, c->from, c->wire, ts);
    else
        fo_graph_message_received(g, c->to, c->from, ts);
}

void fo_follow_correlation(const fo_follow *f, const fo_corr *c, int64_t ts)
{
    fo_graph *g = f->graph;
    switch (c->kind) {
    case FO_CORR_REQUEST:
        if (c->is_send)
            fo_graph_remote_request_sent(g, c->from, c->to, c->tag, c->wire, ts);
        else
            fo_graph_remote_request_received(g, c->to, c->from, c->tag, c->wire, ts);
        break;
    case FO_CORR_REPLY:
        /* {Ref, Result} is also what a Task sends: a plain message when
         * no call of the trace has that tag (after close a reply is late) */
        if (!fo_graph_closed(g) && !fo_graph_call_pending(g, c->tag)) {
            message(g, c, ts);
        } else if (c->is_send) {
            fo_graph_reply_sent(g, c->from, c->tag, ts);
        } else {
            fo_graph_reply_received(g, c->to, c->tag, ts);
        }
        break;
    case FO_CORR_SPAWN:
        /* the spawn protocol's own messages are no work of the trace: the
         * request brings the child in, when it starts */
        if (c->is_send)
            fo_graph_invite(g, c->from, c->to, ts);
        else if (c->to != 0)
            fo_graph_remote_spawned(g, c->from, c->to, c->wire, ts);
        break;
    case FO_CORR_MESSAGE:
        message(g, c, ts);
        break;
    case FO_CORR_REMOTE_SPAWN:
        fo_graph_remote_spawn_sent(g, c->from, c->wire, ts);
        break;
    case FO_CORR_REMOTE_SPAWNED:
        fo_graph_remote_spawn_replied(g, c->to, c->from, c->wire, ts);
        break;
    default:
        break;
    }
    drain(f);
}

void fo_follow_event(const fo_follow *f, const fo_event *ev)
{
    fo_graph *g = f->graph;
    switch (ev->kind) {
    case FO_EV_IN: {
        /* held back until it is known who ended the wait; an `in` that
         * says which thread runs it (CPU-sampled traces) is taken at once,
         * as a sampler takes it (its samples need the time slice it opens) */
        int held = fo_graph_in(g, ev->pid, ev->ts_ns);
        int64_t ts;
        if (!held && fo_graph_active(g, ev->pid)) {
            fo_session_apply(f->session, ev);
        } else if (held && (ev->flags & FO_EVF_HAS_THREAD) && fo_graph_active(g, ev->pid) &&
                   fo_graph_take_in(g, ev->pid, &ts)) {
            fo_event in = *ev;
            in.ts_ns = ts;
            fo_session_apply(f->session, &in);
        }
        drain(f);
        return;
    }
    case FO_EV_OUT: {
        int fresh = fo_graph_out(g, ev->pid, ev->ts_ns);
        drain(f);
        /* out again, its scheduled-in still held back: the stacks have it
         * out already (the wait may yet turn out not to be the trace's) */
        if (!fo_graph_active(g, ev->pid) || (!fresh && fo_session_is_out(f->session, ev->pid)))
            return;
        if (fresh)
            fo_session_call_started(f->session, ev->pid);
        fo_event out = *ev;
        out.flags |= FO_EVF_IN_CALL;
        fo_session_apply(f->session, &out);
        return;
    }
    case FO_EV_GC_START:
    case FO_EV_GC_END: {
        /* A collection says nothing of what woke the process (the VM may
         * collect it as it is scheduled in, before it takes its message),
         * but it runs: a scheduled-in still held back counts first (the
         * graph notes it). */
        int counts = fo_graph_gc(g, ev->pid, ev->ts_ns, ev->kind == FO_EV_GC_START);
        drain(f);
        if (counts)
            fo_session_apply(f->session, ev);
        else
            fo_session_gc_outside(f->session, ev);
        return;
    }
    default:
        fo_graph_ran(g, ev->pid, ev->ts_ns);
        drain(f);
        if (fo_graph_active(g, ev->pid))
            fo_session_apply(f->session, ev);
        return;
    }
}

void fo_follow_exit(const fo_follow *f, uint64_t pid, int64_t ts, uint64_t reason_key)
{
    int counted = fo_graph_active(f->graph, pid);
    fo_graph_exit(f->graph, pid, ts, reason_key);
    drain(f);
    if (counted)
        apply(f->session, FO_EV_EXIT, pid, ts, 0);
}

void fo_follow_late_event(const fo_follow *f, const fo_event *ev, uint64_t reason_key)
{
    fo_graph *g = f->graph;
    fo_graph_set_late(g, ev->pid);
    switch (ev->kind) {
    case FO_EV_IN:
        fo_graph_in(g, ev->pid, ev->ts_ns);
        break;
    case FO_EV_OUT:
        fo_graph_out(g, ev->pid, ev->ts_ns);
        break;
    case FO_EV_EXIT:
        fo_graph_exit(g, ev->pid, ev->ts_ns, reason_key);
        break;
    case FO_EV_GC_START:
    case FO_EV_GC_END:
        fo_graph_gc(g, ev->pid, ev->ts_ns, ev->kind == FO_EV_GC_START);
        break;
    default:
        fo_graph_ran(g, ev->pid, ev->ts_ns);
        break;
    }
    drain(f);
}

void fo_follow_received(const fo_follow *f, uint64_t pid, int64_t ts, fo_waker_kind kind, uint64_t sender)
{
    fo_graph_received(f->graph, pid, ts, kind, sender);
    drain(f);
}

void fo_follow_spawned(const fo_follow *f, uint64_t parent, uint64_t child, int64_t ts)
{
    fo_graph_spawned(f->graph, parent, child, ts);
    drain(f);
}

void fo_follow_running(const fo_follow *f, uint64_t pid, int64_t ts, uint64_t thread)
{
    if (fo_graph_active(f->graph, pid))
        fo_session_cpu_running(f->session, pid, ts, thread);
}

int fo_follow_before_sample(const fo_follow *f, uint64_t pid)
{
    int64_t ts;
    int active = fo_graph_active(f->graph, pid);
    if (active && fo_graph_take_in(f->graph, pid, &ts))
        apply(f->session, FO_EV_IN, pid, ts, 0);
    return active;
}

void fo_follow_close(const fo_follow *f, int64_t end_ts, int close_session)
{
    fo_graph_close(f->graph, end_ts);
    drain(f);
    if (close_session)
        fo_session_close(f->session, end_ts);
}
