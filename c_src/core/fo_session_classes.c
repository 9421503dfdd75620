/* Classes of time (see fo_session.h): runnable time (a wait that, as it
 * turned out, was no wait: no message ended it, the process was
 * preempted or moved to a dirty scheduler to collect) moves from its wait
 * leaf to a RUNNABLE sibling, as the span graph decides it (graph traces)
 * or as the receive events say (exact modes); each process's collections
 * are counted. */
#include "fo_session_parts.h"

/* Moves up to ns of the wait leaf from (SLEEP or WAITING, not p's node
 * cap) to a RUNNABLE sibling; returns what moved. */
static uint64_t to_runnable(fo_session *s, const fo_proc *p, uint32_t from, uint64_t ns)
{
    if (from == FO_NONE || from == p->node_cap || ns == 0)
        return 0;
    uint32_t frame = s->tree.nodes[from].frame;
    if (frame != FO_FRAME_WAITING && frame != FO_FRAME_SLEEP)
        return 0;
    uint32_t to = fo_s_regular_child(s, s->tree.nodes[from].parent, FO_FRAME_RUNNABLE);
    if (to == FO_NONE)
        return 0; /* tree full: the time stays where it is, still counted */
    return fo_s_move_time(s, from, to, ns);
}

uint64_t fo_session_runnable_wait(fo_session *s, uint64_t pid, uint64_t ns)
{
    uint32_t index = fo_procs_find(&s->procs, pid);
    if (index == UINT32_MAX || ns == 0)
        return 0;
    fo_proc *p = &s->procs.procs[index];
    if (p->root == FO_NONE)
        return 0;
    /* Where the wait is held: a call's (graph traces) on its one WAITING
     * leaf, which holds it all; else the wait going on, or the last one,
     * on its SLEEP leaf. Those count their last piece only (an in/out pair
     * between pieces with no call: the stack did not change, so the pieces
     * are all on that leaf), so the leaf's time bounds the move. */
    uint32_t from;
    uint64_t *held;
    int whole = 0;
    if (p->call_wait_node != FO_NONE && p->call_wait_ns > 0) {
        from = p->call_wait_node;
        held = &p->call_wait_ns;
        whole = 1;
    } else if (p->state == FO_PROC_OUT) {
        from = p->sleep_node;
        held = &p->wait_ns;
    } else {
        from = p->prev_wait_node;
        held = &p->prev_wait_ns;
    }
    uint64_t moved = to_runnable(s, p, from, whole && *held < ns ? *held : ns);
    *held = *held > moved ? *held - moved : 0;
    return moved;
}

int fo_session_is_out(const fo_session *s, uint64_t pid)
{
    uint32_t index = fo_procs_find(&s->procs, pid);
    return index != UINT32_MAX && s->procs.procs[index].state == FO_PROC_OUT;
}

void fo_session_process_gcs(const fo_session *s, uint32_t proc, uint64_t *minor, uint64_t *major)
{
    int known = proc < s->procs.count;
    *minor = known ? s->procs.procs[proc].gcs[0] : 0;
    *major = known ? s->procs.procs[proc].gcs[1] : 0;
}

void fo_session_track_receives(fo_session *s, int on)
{
    s->track_receives = on != 0;
}

/* The off-CPU pieces since the wait began (in/out pairs with no message
 * between: a signal, a BIF that yields, a dirty collection) had no
 * message at their end: they were runnable. With no call or return
 * between them the stack did not change, so they are all on the SLEEP
 * leaf of the last one; they move to a RUNNABLE sibling. */
static void wait_was_runnable(fo_session *s, fo_proc *p)
{
    uint64_t moved = to_runnable(s, p, p->prev_wait_node, p->undecided_ns);
    p->prev_wait_ns = p->prev_wait_ns > moved ? p->prev_wait_ns - moved : 0;
}

void fo_s_receives_event(fo_session *s, fo_proc *p, const fo_event *ev)
{
    switch (ev->kind) {
    case FO_EV_RECEIVE:
        /* delivered while it was out (before its `in`), or taken as it
         * runs: whatever it waited since its wait began, it waited for a
         * message */
        if (p->state == FO_PROC_OUT)
            p->got_message = 1;
        p->undecided_ns = 0;
        return;
    case FO_EV_IN:
        if (p->state != FO_PROC_OUT)
            return;
        if (p->got_message)
            p->undecided_ns = 0;
        else
            p->undecided_ns += p->wait_ns; /* this piece, charged by now */
        p->got_message = 0;
        return;
    case FO_EV_CALL:
    case FO_EV_RETURN_TO:
    case FO_EV_EXIT:
        /* it runs its code (or ends) with no message taken */
        if (p->undecided_ns > 0 && p->state == FO_PROC_RUNNING)
            wait_was_runnable(s, p);
        p->undecided_ns = 0;
        p->got_message = 0;
        return;
    default:
        /* out again, or a collection: the same wait may go on (a signal
         * woke it, or the VM collects it before it takes its message) */
        return;
    }
}
