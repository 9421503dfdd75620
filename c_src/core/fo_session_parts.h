/* The session's state and the helpers its files share: fo_session.c (the
 * state machine of the event-driven modes) and fo_session_cpu.c
 * (CPU-sampled sessions). Not a contract: fo_session.h is. */
#ifndef FO_SESSION_PARTS_H
#define FO_SESSION_PARTS_H

#include "fo_alloc.h"
#include "fo_frames.h"
#include "fo_procs.h"
#include "fo_seen.h"
#include "fo_session.h"
#include "fo_tree.h"

struct fo_session {
    fo_limits limits;
    fo_frames frames;
    fo_tree tree;
    fo_procs procs;
    uint32_t regular_nodes; /* nodes counted against max_nodes */
    uint64_t last_pid;      /* one-entry cache of fo_s_proc_for: events come in runs per process */
    uint32_t last_index;    /* UINT32_MAX: empty */
    int cpu_sampled;        /* fo_session_set_cpu_sampled */
    int collapse_recursion; /* fo_session_set_collapse_recursion */
    fo_cpu_source cpu_source;
    uint64_t cpu_stratum_ns;     /* fo_session_set_cpu_strata (0: no strata) */
    uint64_t cpu_stratum_gap_ns;
    uint32_t cut_marker;         /* the frame cut chains of unknown place go under (0: none yet) */
    void *cpu_ctx;
    fo_seen seen;           /* CPU-sampled: where each process was seen in each function */
    int track_receives;     /* FO_RECEIVES_*: fo_session_track_receives(_as) */
    fo_alloc alloc;         /* words allocated per node (gc events with heap sizes) */
    uint64_t alloc_event_words; /* fo_session_set_alloc_event_words */
    fo_stats stats;
};

/* The process of pid, made on first sight. NULL when it cannot be
 * followed (process limit, or no memory for its reserved nodes). */
fo_proc *fo_s_proc_for(fo_session *s, uint64_t pid);

/* The node on top of p's stack (its root when the stack is empty). */
uint32_t fo_s_current_node(const fo_proc *p);
/* The frame on top of p's stack, FO_NONE when empty. */
uint32_t fo_s_top_frame(const fo_proc *p);
/* Index of frame on p's stack, searching down from `from`; FO_NONE if absent. */
uint32_t fo_s_find_below(const fo_proc *p, uint32_t frame, uint32_t from);

/* A regular node under parent, within max_nodes; FO_NONE when full. */
uint32_t fo_s_regular_child(fo_session *s, uint32_t parent, uint32_t frame);
uint32_t fo_s_intern(fo_session *s, const fo_mfa *mfa);
/* The frame an `out` names (where the process stopped): 0 when it names
 * none, or the frame table is full. */
uint32_t fo_s_stop_frame(fo_session *s, const fo_event *ev);
/* Pushes frame (or, collapsing recursion, counts a repeat of the frame
 * on top). */
void fo_s_push_frame(fo_session *s, fo_proc *p, uint32_t frame);

/* p's stack becomes frames (root first): the frames both share from the
 * root stay, the rest is unwound and the new ones pushed with the usual
 * bounds. */
void fo_s_replace_stack(fo_session *s, fo_proc *p, const fo_mfa *frames, uint32_t count);

/* Moves up to ns of from's time to to; returns what moved. */
uint64_t fo_s_move_time(fo_session *s, uint32_t from, uint32_t to, uint64_t ns);
/* The current call's wait is held in leaf from now (see fo_session.c). */
void fo_s_hold_call_wait_in(fo_session *s, fo_proc *p, uint32_t leaf);

/* Garbage collection (fo_session_gc.c): a gc start or end event of p, and
 * the time since its last event, which goes to its GC leaf while it
 * collects (1: charged there). */
void fo_s_gc_event(fo_session *s, fo_proc *p, const fo_event *ev);
/* p exited (or starts afresh): its heap level is no longer known, and
 * the words it held go to its root. */
void fo_s_gc_forget(fo_session *s, fo_proc *p);
/* The words p held (see fo_proc) charged to its root: its trace ends. */
void fo_s_alloc_release(fo_session *s, fo_proc *p);
/* The words p held charged to the stack it is in now, when one is known
 * (a sample just told it). */
void fo_s_alloc_place_held(fo_session *s, fo_proc *p);
int fo_s_gc_charge(fo_session *s, fo_proc *p, uint64_t delta);

/* Collection time ns [minor, major] under node's GC leaves (made within
 * the usual bounds). */
void fo_s_gc_place(fo_session *s, uint32_t node, const uint64_t ns[2]);

/* An unseen burst's time (fo_session_unseen.c): forget what was noted,
 * note delta charged to node while unseen, and move what was noted under
 * p's current stack (a sample just replaced it; ended: the sample found
 * the burst over, p waiting). */
void fo_s_unseen_forget(fo_proc *p);
void fo_s_unseen_note(fo_session *s, fo_proc *p, uint32_t node, uint64_t delta);
void fo_s_unseen_place(fo_session *s, fo_proc *p, int ended);

/* fo_session_apply's step for sessions that track receives, before the
 * event itself applies (fo_session_classes.c). */
void fo_s_receives_event(fo_session *s, fo_proc *p, const fo_event *ev);
/* ... and its step after the CPU-sampled one (the slice's samples are in):
 * an `out` or exit decides the undecided pieces by what the slice showed
 * (FO_RECEIVES_CPU, _SAMPLED). */
void fo_s_slice_event(fo_session *s, fo_proc *p, const fo_event *ev);
/* p stops (an `out`) while its call's wait is held (graph traces, before
 * the stop's WAITING leaf is placed): an `out` in another function than
 * its last one says it ran code since, so what its call held so far was
 * runnable (fo_session_classes.c). */
void fo_s_call_wait_stop(fo_session *s, fo_proc *p, const fo_event *ev);
/* The session closes: p's undecided pieces are decided. */
void fo_s_receives_close(fo_session *s, fo_proc *p);
/* A sample says p's last piece, on leaf, was a wait (it answered waiting):
 * no longer undecided. */
void fo_s_piece_was_wait(fo_proc *p, uint32_t leaf);

/* fo_session_apply's step for CPU-sampled sessions, before the event
 * itself applies (fo_session_cpu.c). */
void fo_s_cpu_event(fo_session *s, fo_proc *p, const fo_event *ev);

/* Strata (fo_session_strata.c): a CPU sample of p counted on node; p's
 * `out` and `in` (an `in` after a long enough wait ends its stratum); its
 * stratum ends (exit, settle); and whether node's kind of frame takes
 * on-CPU time (not a wait or GC leaf). */
void fo_s_cpu_count(fo_session *s, fo_proc *p, uint32_t node);
void fo_s_stratum_event(fo_session *s, fo_proc *p, const fo_event *ev);
void fo_s_stratum_end(fo_session *s, fo_proc *p);
int fo_s_running_frame(uint32_t frame);

/* Cut chains (fo_session_cut.c): where a cut chain whose outermost frame
 * is `frame` goes (FO_NONE: not known); and, as the session settles, the
 * chains that went under the cut marker for want of that, moved where
 * their outermost frame was seen since. */
uint32_t fo_s_cut_prefix(fo_session *s, fo_proc *p, uint32_t frame);
void fo_s_rehome_cut_chains(fo_session *s);

#endif
