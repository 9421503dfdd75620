/* Classes of time (see fo_session.h): runnable time (a wait that, as it
 * turned out, was no wait: no message ended it, the process was
 * preempted or moved to a dirty scheduler to collect) moves from its wait
 * leaf to a RUNNABLE sibling, as the span graph decides it (graph traces)
 * or as the receive events say (exact modes: the calls after them; sampled
 * modes: the time slices after them); each process's collections are
 * counted. */
#include <string.h>

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
    s->track_receives = on != 0 ? FO_RECEIVES_CALLS : FO_RECEIVES_OFF;
}

void fo_session_track_receives_as(fo_session *s, int how)
{
    s->track_receives = how >= FO_RECEIVES_OFF && how <= FO_RECEIVES_SAMPLED ? how : FO_RECEIVES_OFF;
}

void fo_session_expect_signal(fo_session *s, uint64_t pid)
{
    uint32_t index = fo_procs_find(&s->procs, pid);
    if (index != UINT32_MAX)
        s->procs.procs[index].signal_expected = 1;
}

/* An off-CPU piece no message ended: undecided, on its leaf. A piece on a
 * RUNNABLE leaf (a sample saw it so) is decided already. */
static void add_piece(fo_session *s, fo_proc *p, uint32_t leaf, uint64_t ns)
{
    if (ns == 0 || leaf == FO_NONE || leaf == p->node_cap)
        return;
    uint32_t frame = s->tree.nodes[leaf].frame;
    if (frame != FO_FRAME_SLEEP && frame != FO_FRAME_WAITING)
        return;
    if (p->piece_count > 0 && p->pieces[p->piece_count - 1].leaf == leaf) {
        p->pieces[p->piece_count - 1].ns += ns;
        return;
    }
    if (p->piece_count == FO_UNDECIDED_PIECES) {
        /* bounded: the oldest piece's time joins the next one's leaf,
         * still undecided (under a newer stack of the same wait, if it
         * was one) */
        fo_piece *next = &p->pieces[1];
        next->ns += fo_s_move_time(s, p->pieces[0].leaf, next->leaf, p->pieces[0].ns);
        memmove(p->pieces, p->pieces + 1, sizeof(fo_piece) * (FO_UNDECIDED_PIECES - 1));
        p->piece_count--;
    }
    p->pieces[p->piece_count].leaf = leaf;
    p->pieces[p->piece_count].ns = ns;
    p->piece_count++;
}

/* The process ran its code after its undecided pieces with no message
 * between: they were runnable. */
static void pieces_were_runnable(fo_session *s, fo_proc *p)
{
    for (uint32_t i = 0; i < p->piece_count; i++) {
        uint64_t moved = to_runnable(s, p, p->pieces[i].leaf, p->pieces[i].ns);
        /* a sample must not move it again as the last wait's, nor the
         * span graph as its call's wait */
        if (p->pieces[i].leaf == p->prev_wait_node)
            p->prev_wait_ns = p->prev_wait_ns > moved ? p->prev_wait_ns - moved : 0;
        if (p->pieces[i].leaf == p->call_wait_node)
            p->call_wait_ns = p->call_wait_ns > moved ? p->call_wait_ns - moved : 0;
    }
    p->piece_count = 0;
}

/* The span graph holds a call's wait open from the follower's first `out`
 * until a message ends it: the in/out pairs between with no message look
 * like one wait going on (a signal, a collection). Its stacks learn
 * otherwise when it stops in another function: it ran its code between,
 * preempted as it worked for the call, so each gap was runnable where it
 * was, not held for the stack of its last stop (a callee preempted a
 * hundred times in a recursion and then in a sort had all of the
 * recursion's gaps under the sort). The span graph's own decision later
 * (runnable, or a wait some process explains) takes what is held then. */
void fo_s_call_wait_stop(fo_session *s, fo_proc *p, const fo_event *ev)
{
    uint32_t stop = fo_s_stop_frame(s, ev);
    if (stop == 0)
        return;
    if (p->call_wait_stop != 0 && stop != p->call_wait_stop && p->call_wait_ns > 0) {
        uint64_t moved = to_runnable(s, p, p->call_wait_node, p->call_wait_ns);
        p->call_wait_ns = p->call_wait_ns > moved ? p->call_wait_ns - moved : 0;
    }
    p->call_wait_stop = stop;
}

void fo_s_piece_was_wait(fo_proc *p, uint32_t leaf)
{
    if (p->piece_count > 0 && p->pieces[p->piece_count - 1].leaf == leaf)
        p->piece_count--;
}

/* What the slice since the process's last `in` showed: it ran its code.
 * An `out` in another function than the one before also says so: a
 * waiting process woken by a signal, collected, or running a BIF that
 * yields stops where it stopped. (A preempted recursion's slices are a few
 * µs, far too short for a CPU sample to land in one; a follower working
 * for a call is preempted hundreds of times, and without this every gap
 * stayed undecided, held on the WAITING leaf of its last stop.) */
static int slice_ran_code(const fo_session *s, const fo_proc *p, uint32_t stop)
{
    if (p->slice_run_ns >= FO_RUNS_CODE_NS || p->slice_ran)
        return 1;
    if (stop != 0 && p->slice_stop != 0 && stop != p->slice_stop)
        return 1;
    return s->track_receives == FO_RECEIVES_SAMPLED && !p->signal_expected;
}

static void new_slice(fo_proc *p)
{
    p->slice_run_ns = 0;
    p->slice_ran = 0;
    p->signal_expected = 0;
}

/* Sampled modes, before the event applies (and before a CPU-sampled
 * session's step, which hands over the slice's samples). */
static void sliced_event(fo_session *s, fo_proc *p, const fo_event *ev)
{
    switch (ev->kind) {
    case FO_EV_RECEIVE:
        /* a message (or a receive's timeout): every piece since the last
         * one was part of a wait it ends. The VM may trace it after the
         * `in` (as the process takes its signals): it left its wait all
         * the same. */
        if (p->state == FO_PROC_OUT)
            p->got_message = 1;
        else
            p->left_wait = 1;
        p->piece_count = 0;
        return;
    case FO_EV_IN:
        p->left_wait = p->state == FO_PROC_OUT && p->got_message;
        if (p->state != FO_PROC_OUT)
            return;
        if (!p->got_message)
            add_piece(s, p, p->sleep_node, p->wait_ns);
        p->got_message = 0;
        return;
    default:
        return;
    }
}

void fo_s_slice_event(fo_session *s, fo_proc *p, const fo_event *ev)
{
    switch (ev->kind) {
    case FO_EV_IN:
        if (p->state == FO_PROC_OUT) {
            /* the note of a signal may come before the `in` it causes */
            int expected = p->signal_expected;
            new_slice(p);
            p->signal_expected = (uint8_t)expected;
        }
        return;
    case FO_EV_OUT: {
        if (p->state != FO_PROC_RUNNING)
            return;
        uint32_t stop = fo_s_stop_frame(s, ev);
        if (p->piece_count > 0 && slice_ran_code(s, p, stop))
            pieces_were_runnable(s, p);
        if (stop != 0)
            p->slice_stop = stop;
        new_slice(p);
        return;
    }
    case FO_EV_EXIT:
        /* it ran its code to its end (or was killed as it ran) */
        if (p->state == FO_PROC_RUNNING)
            pieces_were_runnable(s, p);
        p->piece_count = 0;
        p->got_message = 0;
        p->left_wait = 0;
        p->slice_stop = 0;
        new_slice(p);
        return;
    default:
        return;
    }
}

void fo_s_receives_close(fo_session *s, fo_proc *p)
{
    /* the trace ends as it runs: its own stop, code */
    if (s->track_receives >= FO_RECEIVES_CPU && p->state == FO_PROC_RUNNING && !p->signal_expected)
        pieces_were_runnable(s, p);
    p->piece_count = 0;
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
    if (s->track_receives != FO_RECEIVES_CALLS) {
        sliced_event(s, p, ev);
        return;
    }
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
