/* A profiling session: the frame table, one calling-context tree, the
 * per-process state machines and the counters. This is the core's whole
 * contract with its front ends. Not thread-safe: callers serialize. */
#ifndef FO_SESSION_H
#define FO_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "fo_event.h"
#include "fo_limits.h"

/* Reserved frame ids; real frames start at FO_FRAME_FIRST_REAL. */
enum {
    FO_FRAME_PROCESS = 0,   /* the root node of each process */
    FO_FRAME_SLEEP = 1,     /* scheduled-out time, a leaf under the running stack */
    FO_FRAME_DEPTH_CAP = 2, /* frames past max_depth, folded into one "…" node */
    FO_FRAME_NODE_CAP = 3,  /* tree full: time of stacks that could not be stored */
    FO_FRAME_WAITING = 4,   /* scheduled out while blocked in a call (graph traces) */
    FO_FRAME_GC_MINOR = 5,  /* minor garbage collection, when gc events are given */
    FO_FRAME_ATTRIBUTED = 6, /* call wait a traced callee explains (graph traces) */
    FO_FRAME_GC_MAJOR = 7,  /* major (fullsweep) garbage collection */
    FO_FRAME_RUNNABLE = 8,  /* scheduled out while it could run (preempted), a leaf */
    FO_FRAME_FIRST_REAL = 9
};

#define FO_NONE UINT32_MAX

typedef struct {
    uint64_t events;             /* events applied */
    uint64_t dropped_events;     /* events not applied (process limit, malformed, ...) */
    uint64_t malformed_events;   /* front end could not decode (counted by the front end) */
    uint64_t ignored_events;     /* well-formed events of kinds the core does not use */
    uint64_t truncated_stacks;   /* pushes folded by max_depth or lost to max_nodes/max_frames */
    uint64_t depth_truncations;  /* pushes past max_depth */
    uint64_t node_limit_hits;    /* pushes that needed a node past max_nodes */
    uint64_t frame_limit_hits;   /* frames not interned because of max_frames */
    uint64_t process_limit_hits; /* events of new processes past max_processes */
    uint64_t stack_overflows;    /* pushes past max_stack_frames (depth kept as a count) */
    uint64_t clock_skews;        /* events older than their process's previous one */
    uint64_t resyncs;            /* call/return_to that had to unwind or rebase the stack */
    uint64_t collapsed_recursion; /* calls folded into the same frame on top of the stack,
                                     and repeated frames of sampled stacks
                                     (fo_session_set_collapse_recursion) */
    uint64_t samples;            /* stack samples applied (counted in events too) */
    uint64_t cpu_unsampled_ns;   /* CPU-sampled sessions: on-CPU time of processes no
                                    CPU sample landed on (left on their roots) */
    uint64_t cpu_orphans;        /* CPU samples with no frame of their process's code */
    uint64_t cpu_rootless;       /* ... of those, the ones left under its bare root */
    uint64_t cpu_contexts;       /* stacks from fo_session_cpu_context kept */
    uint64_t cpu_unknown_stops;  /* `out`s in a function with no stack known for it */
    uint64_t cpu_cut_samples;    /* CPU samples whose call chain the kernel cut */
    uint64_t cpu_rehomed_cuts;   /* ... chains of those moved from the cut marker as the session settled */
    uint64_t cpu_called_samples; /* CPU samples in C code, their caller found on its stack */
    uint64_t cpu_seen_stops;     /* `out`s placed where a sample saw it in that function */
    uint64_t cpu_entered_stops;  /* `out`s taken as a call from this slice's last sample */
    uint64_t cpu_broken_chains;  /* C-code samples whose chain missed the process's root frame */
    uint64_t cpu_foreign_chains; /* ... of those, the ones whose frames were not the process's */
    uint64_t cpu_strata;         /* strata whose on-CPU time was shared among their own samples */
    uint64_t gc_minor;           /* minor garbage collections started */
    uint64_t gc_major;           /* major (fullsweep) ones */
    uint64_t gc_minor_ns;        /* time on GC_MINOR leaves */
    uint64_t gc_major_ns;        /* time on GC_MAJOR leaves */
    uint64_t alloc_words;        /* words allocated, charged at gc starts (heap sizes given) */
    uint64_t alloc_samples;      /* gc starts that charged them */
    uint64_t alloc_unknown;      /* gc starts of processes with no heap level known yet */
} fo_stats;

typedef struct fo_session fo_session;

/* NULL when limits are invalid or memory is short. */
fo_session *fo_session_new(const fo_limits *limits);
void fo_session_free(fo_session *s);

/* Direct recursion (a frame calling itself, the same MFA directly on top
 * of itself) collapses into one frame: the call counts a repeat on the
 * stack entry instead of pushing, and a return_to into that same frame
 * counts one down instead of popping. Time, samples and the frames below
 * are as without it (the collapsed frame holds what its copies held; its
 * callees from every level merge); only the depth changes, and max_depth
 * counts frames after collapsing. Counted in stats.collapsed_recursion.
 * Off by default (stacks keep their real depth). Set once, before any
 * event. */
void fo_session_set_collapse_recursion(fo_session *s, int on);

/* Apply one event. Never fails: what cannot be stored is counted. */
void fo_session_apply(fo_session *s, const fo_event *ev);

/* A stack sample of pid taken at ts_ns: frames[0] is the outermost
 * (root) frame, frames[count-1] the function it was in. Time since the
 * process's previous event is charged first (as any event), then its stack
 * becomes the sampled one, so time up to its next event or sample is
 * charged there; in/out events keep splitting it into on- and off-CPU.
 * The sample itself is counted on the node it lands on (the new current
 * node, or the SLEEP/WAITING leaf it waits in when scheduled out): one
 * sample plus weight (the front end's choice; the NIF passes the
 * reductions the process did since its previous sample). */
void fo_session_sample(fo_session *s, uint64_t pid, int64_t ts_ns, const fo_mfa *frames, uint32_t count,
                       uint64_t weight);

/* What the front end knows about a sample (fo_session_sample_as):
 * - WAITED: it saw the process waiting when it asked for the stack, and the
 *   process ran no code until it answered: the stack is where it has waited
 *   since its last real `out`, so that whole wait (also what came before
 *   the in/out pair in which it answered) moves to the sampled stack's wait
 *   leaf, not only the rest of it. Waits in a call always move whole (see
 *   fo_session_call_started).
 * - LEADING: the stack was taken just before the process's traced work
 *   starts (a process sampling itself as its trace begins): it only holds
 *   until the next sample shows where the work went, which takes the time
 *   since, as a sample after an `in` does.
 * - BUSY: the process was running or runnable (preempted) when asked: the
 *   stack is where it works, scheduled out or not, not where it waits.
 * - WAITING: it was waiting when asked, and ran since (not WAITED): the
 *   stack is where it waits now, even if its `out` is not applied yet. */
enum { FO_SAMPLE_WAITED = 1u, FO_SAMPLE_LEADING = 2u, FO_SAMPLE_BUSY = 4u, FO_SAMPLE_WAITING = 8u };

/* fo_session_sample with what the front end knows (FO_SAMPLE_* bits). */
void fo_session_sample_as(fo_session *s, uint64_t pid, int64_t ts_ns, const fo_mfa *frames, uint32_t count,
                          uint64_t weight, unsigned how);

/* `times` samples of pid that found it where the previous one left it (the
 * front end knows it has not run since: it waits, and its reductions did
 * not move; while it waits the front end may look less often, so one call
 * stands for several of its intervals): as fo_session_sample with the
 * stack the process already has, without decoding it again, counted
 * `times` times (0 is dropped). A process never sampled or seen has no
 * stack to repeat: it lands on its root. */
void fo_session_sample_same(fo_session *s, uint64_t pid, int64_t ts_ns, uint64_t weight, uint32_t times);

/* `times` ticks of pid's sampler that it slept through: the process waited
 * (scheduled out, where its last wait went) and the sampler, told so,
 * waited for its next `in` instead of looking (fo_wakes). Counted as
 * samples of weight 0 on the wait leaf that wait was charged to; nothing
 * else changes (time comes from the events). Unknown pids are dropped. */
void fo_session_count_slept(fo_session *s, uint64_t pid, uint32_t times);

/* CPU-sampled (native) sessions. Stacks come from samples of the CPU a
 * process ran on, taken at a fixed rate while it runs; in/out events still
 * give its exact on- and off-CPU intervals. On-CPU time is not charged to
 * the stack of the moment: each process's on-CPU time is summed, and
 * fo_session_cpu_settle shares it among the stacks its samples landed on,
 * in proportion to their counts (an unbiased estimate whatever the
 * bursts' phase against the sampling; holding the last sampled stack
 * instead would charge a burst no sample saw to the stack before it).
 * Off-CPU time goes, as in the other modes, to a wait leaf under the stack
 * the process was last sampled in.
 *
 * The samples come from the source: an `in` event flagged
 * FO_EVF_HAS_THREAD opens a time slice of the process on that thread, and
 * the next `in`, `out` or `exit` of the process (or the settle) ends it
 * with one call, source(ctx, s, pid, thread, from_ns, to_ns), before the
 * event itself applies; the source hands over the slice's samples with
 * fo_session_cpu_sample / fo_session_cpu_orphan. Set once, before any
 * event; source may be NULL (samples come by other means). */
typedef void (*fo_cpu_source)(void *ctx, fo_session *s, uint64_t pid, uint64_t thread, int64_t from_ns,
                              int64_t to_ns);
void fo_session_set_cpu_sampled(fo_session *s, fo_cpu_source source, void *ctx);
/* A CPU-sampled session's source from here on (a replay's samples from a
 * copy, then none once it is over: NULL), its state otherwise as it is. */
void fo_session_swap_cpu_source(fo_session *s, fo_cpu_source source, void *ctx);

/* Strata (CPU-sampled sessions): a process's on-CPU time between two of
 * its waits that lasted gap_ns or more (an `out` to the next `in`) is a
 * stratum. One of min_ns or more whose samples landed on at most
 * FO_CPU_STRATUM_NODES stacks has its own time shared among its own
 * samples; the others' time is shared trace-wide, as without strata. Why:
 * the trace-wide share puts a slow request's phases (parse, a call, then
 * render) in proportion to their sample counts, a few dozen, and the
 * samples miss the kernel's time (page faults: exclude_kernel), which one
 * phase may have much more of; a phase between waits gets its own time
 * exactly. Which strata are shared on their own depends on their length
 * only, never on how many samples they got, so the estimate stays
 * unbiased. min_ns 0 (the default): no strata. Set before any event. */
void fo_session_set_cpu_strata(fo_session *s, uint64_t min_ns, uint64_t gap_ns);

/* A CPU sample of pid, root frame first: its stack becomes the sampled
 * one and the sample is counted on it. No time moves. The first
 * erlang_frames frames are its own code (the rest, a frame of the
 * runtime's C code it was in): the process is known to have been in that
 * stack at its innermost Erlang frame (a context, see
 * fo_session_cpu_context). */
void fo_session_cpu_sample(fo_session *s, uint64_t pid, const fo_mfa *frames, uint32_t count,
                           uint32_t erlang_frames);

/* A CPU sample whose call chain the kernel cut (a recursion deeper than
 * it walks): frames are the innermost ones. They go under the stack the
 * process was seen in at their outermost frame, up to that frame's first
 * call there (so a recursion is not counted twice), else under `marker`
 * (the front end's "…" frame; NULL: none) at its root. Otherwise as
 * fo_session_cpu_sample. */
void fo_session_cpu_sample_cut(fo_session *s, uint64_t pid, const fo_mfa *frames, uint32_t count,
                               uint32_t erlang_frames, const fo_mfa *marker);

/* pid is running on thread (non-zero) at ts_ns: a process of a trace
 * across processes takes a message of the trace, which it does running,
 * and its `in` may have come before it joined. Opens its time slice there
 * unless one is open on that thread. */
void fo_session_cpu_running(fo_session *s, uint64_t pid, int64_t ts_ns, uint64_t thread);

/* pid was seen in the stack frames (root first) while stopped in key's
 * function (its tracer's helper read it with process_info when an `out`
 * named key): an `out` in key's function from now on puts the process in
 * the stack it was seen in there that shares the most frames with its
 * stack of the moment (an `out` in a function on its stack unwinds to
 * it; stats.cpu_unknown_stops counts the `out`s in functions it was never
 * seen in, which leave its stack as it is). A process waiting in key's
 * function now moves there, with its wait so far. Unknown pids are
 * ignored. */
void fo_session_cpu_context(fo_session *s, uint64_t pid, const fo_mfa *key, const fo_mfa *frames,
                            uint32_t count);

/* pid is now inside frames (root first: its outer frames; the ones it
 * has called since are not known), as a trace that starts in the
 * process's own root function knows: its stack becomes them, known, so a
 * stop or a sample of the runtime's C code before its first CPU sample
 * goes under them rather than under its bare root. No sample is counted,
 * no time moves. Unknown pids are ignored. */
void fo_session_cpu_inside(fo_session *s, uint64_t pid, const fo_mfa *frames, uint32_t count);

/* A CPU sample of pid in the runtime's C code (leaf) that a function of
 * its code called (caller: a BIF's caller, found on the C stack): its
 * stack becomes the one it was known to be in at caller (on its stack of
 * the moment, else where it was seen in it, else a call from its stack of
 * the moment if that is known, else caller alone at its root), and the
 * sample is counted on leaf under it. */
void fo_session_cpu_sample_in(fo_session *s, uint64_t pid, const fo_mfa *caller, const fo_mfa *leaf);

/* A CPU sample of pid that names no frame of its code, only where it was
 * in the runtime's (leaf): counted on leaf under the stack the process is
 * in (from a sample of this slice, or where its last `out` stopped), which
 * stays; when that is not known (its last `out` stopped in a function it
 * was never seen in), under its root and that function
 * (stats.cpu_orphans; cpu_rootless counts those and the ones under a
 * bare root). */
void fo_session_cpu_orphan(fo_session *s, uint64_t pid, const fo_mfa *leaf);

/* Ends the slices still open at end_ns (0: leaves them), then shares each
 * process's summed on-CPU time among its sampled stacks (see
 * fo_session_set_cpu_sampled); a process with no sample keeps it on its
 * root (stats.cpu_unsampled_ns). Call after fo_session_close; again later
 * only settles what came since. */
void fo_session_cpu_settle(fo_session *s, int64_t end_ns);

/* Allocation profiles: call tracing makes the VM build terms of its own
 * on the traced process's heap (the arguments and caller a match spec
 * sees, the MFA of a return): words per call or return_to event (0, the
 * default: none) that each collection takes off the words it counts for
 * the events since the previous one, down to 0 (fo_session_gc.c). */
void fo_session_set_alloc_event_words(fo_session *s, uint64_t words);

/* pid's young heap in use now, in words (as a gc event's heap_words
 * would say it), read as its trace starts: its first collection counts
 * from this level instead of only setting it. Unfollowable pids are
 * ignored. */
void fo_session_heap_level(fo_session *s, uint64_t pid, uint64_t words);

/* fo_session_heap_level unless pid's level is known already (one of its
 * collections came first): a level read after the process joined a
 * followed trace, which may cross its collections' events without
 * counting anything twice (a collection that started before it only set
 * the level, stats.alloc_unknown; its end sets the level anyway). */
void fo_session_heap_level_unless_known(fo_session *s, uint64_t pid, uint64_t words);

/* Allocation profiles, as a trace ends: pid's young heap in use now
 * (heap_size + mbuf_size), read once its events stopped. What it
 * allocated since its last collection (the tracer's own words taken off)
 * goes to the stack it is in, or, where none is known (a follower
 * between requests), to the stack its last words went to, counted as no
 * collection. Processes without a known level are ignored. */
void fo_session_alloc_tail(fo_session *s, uint64_t pid, uint64_t words_now);

/* 1 when process index proc has a known heap level (alloc_tail). */
int fo_session_heap_known(const fo_session *s, uint32_t proc);

/* A collection the trace does not count (a follower between two of its
 * requests, fo_follow.c): its end, with heap sizes, sets the level its
 * next collection in the trace counts from; what was allocated before it
 * is not the trace's. Processes the session does not have are ignored. */
void fo_session_gc_outside(fo_session *s, const fo_event *ev);

/* Charge every live process's time from its last event up to end_ns to
 * where it is now (running stack or sleep leaf). Call once, at the end. */
void fo_session_close(fo_session *s, int64_t end_ns);

/* The front end counts what it could not decode, and the well-formed
 * events it does not pass on (spawn, link, ...). */
void fo_session_count_malformed(fo_session *s, uint64_t n);
void fo_session_count_ignored(fo_session *s, uint64_t n);

/* Graph traces. pid sent a request: its wait on this call starts now
 * (out events flagged FO_EVF_IN_CALL go to a WAITING leaf and are summed
 * per call). */
void fo_session_call_started(fo_session *s, uint64_t pid);

/* pid resumed from the call and a callee explained ns of its wait: move
 * up to ns of the call's WAITING time to an ATTRIBUTED sibling leaf, so
 * views can show attributed and unexplained wait apart. Returns the ns
 * moved. */
uint64_t fo_session_attribute_wait(fo_session *s, uint64_t pid, uint64_t ns);

/* ns of pid's last wait were no wait: nothing ended it, the process was
 * runnable (preempted; graph traces learn it when it runs on with no
 * message taken). Moves up to ns from the leaf that holds that wait (the
 * call's WAITING leaf, else its SLEEP leaf) to a RUNNABLE sibling.
 * Returns the ns moved (fo_session_runnable.c). */
uint64_t fo_session_runnable_wait(fo_session *s, uint64_t pid, uint64_t ns);

/* Receive events (FO_EV_RECEIVE) come for every process, so each wait
 * can be told by what ended it (exact modes; set once, before any event):
 * a process scheduled in that runs its code (a call, a return) or exits
 * with no receive event since its wait began took no message, so it was
 * runnable (preempted, a BIF that yields, a dirty collection), not
 * waiting: that time moves from its SLEEP leaf to a RUNNABLE sibling. A
 * receive (before its `in`, as the VM may deliver it, or after) says it
 * waited. An `out` again or a garbage collection says nothing: the same
 * wait goes on (a signal woke it, or the VM collects it before it takes
 * its message), as in the span graph. Without this, every wait stays a
 * SLEEP leaf. */
void fo_session_track_receives(fo_session *s, int on);

/* The same for sessions with no call events (sampled modes), `how` one of
 * FO_RECEIVES_*: FO_RECEIVES_CALLS is the rule above. The others keep each
 * off-CPU piece that no message ended (its `in` came with no receive
 * event) undecided, on its SLEEP leaf, and decide it when the time slice
 * after it ends (its next `out`, or its exit): RUNNABLE when that slice
 * shows the process ran its code, as every undecided piece before it (a
 * waiting process runs no code until a message comes); a receive first
 * leaves them all waits. A slice shows it ran code when it ran at least
 * FO_RUNS_CODE_NS on CPU (collections not counted: a signal that wakes a
 * waiting process, a process_info, a monitor, runs it for a few µs), when
 * its `out` names another function than the `out` before it (a waiting
 * process woken by a signal stops where it stopped), when it exits, when
 * the session closes while it runs, and:
 * - FO_RECEIVES_CPU (native): a CPU sample of its own code (an Erlang
 *   frame innermost) landed in it;
 * - FO_RECEIVES_SAMPLED (sample mode): always, unless the front end said
 *   it would wake the process with a signal (fo_session_expect_signal):
 *   its sampler's stack requests are the signals a waiting traced process
 *   gets, and a preempted process's slice may be as short as one (5 µs
 *   of a tight recursion).
 * Undecided pieces are kept on at most FO_UNDECIDED_PIECES leaves (the
 * oldest ones merge into the next when more come). */
enum { FO_RECEIVES_OFF = 0, FO_RECEIVES_CALLS = 1, FO_RECEIVES_CPU = 2, FO_RECEIVES_SAMPLED = 3 };
#define FO_RUNS_CODE_NS 100000u
void fo_session_track_receives_as(fo_session *s, int how);

/* The front end is about to wake pid with a signal (a sampler's stack
 * request to a process seen waiting): the time slice it then runs, up to
 * its next `out`, does not show it ran code (FO_RECEIVES_SAMPLED). Events
 * before this must be applied first. Unknown pids are ignored. */
void fo_session_expect_signal(fo_session *s, uint64_t pid);

/* 1 when pid is scheduled out as far as its stacks know. */
int fo_session_is_out(const fo_session *s, uint64_t pid);

/* The garbage collections process proc (0..process_count-1) started,
 * minor and major (as stats.gc_minor and gc_major count them, per
 * process); 0 for one out of range. */
void fo_session_process_gcs(const fo_session *s, uint32_t proc, uint64_t *minor, uint64_t *major);

const fo_stats *fo_session_stats(const fo_session *s);

/* Bytes held by the session's tables (for memory bounds and reporting). */
size_t fo_session_memory(const fo_session *s);

/* --- Reading the result -------------------------------------------------
 * Nodes are numbered 0..node_count-1 and a parent's id is always smaller
 * than its children's, so one pass in id order can build paths. */
typedef struct {
    uint32_t parent;  /* FO_NONE for a process root */
    uint32_t frame;   /* frame id (reserved or real) */
    uint32_t proc;    /* owning process index, 0..process_count-1 */
    uint32_t depth;   /* 0 for a process root */
    uint64_t self_ns; /* time charged to exactly this stack */
    uint64_t samples; /* stack samples that landed on exactly this stack */
    uint64_t weight;  /* sum of those samples' weights (saturating) */
    uint64_t alloc_words;   /* words allocated in exactly this stack (see fo_session_gc.c) */
    uint64_t alloc_samples; /* garbage collections that charged them */
} fo_node_info;

uint32_t fo_session_node_count(const fo_session *s);
void fo_session_node(const fo_session *s, uint32_t id, fo_node_info *out);

/* The nodes allocation was charged to (fo_node_info's alloc fields), in
 * no particular order: entry i of fo_session_alloc_count. */
uint32_t fo_session_alloc_count(const fo_session *s);
void fo_session_alloc_entry(const fo_session *s, uint32_t i, uint32_t *node, uint64_t *words, uint64_t *samples);

uint32_t fo_session_process_count(const fo_session *s);
uint64_t fo_session_process_pid(const fo_session *s, uint32_t proc);

/* Real frames only: their ids run from FO_FRAME_FIRST_REAL to
 * FO_FRAME_FIRST_REAL + count - 1. */
uint32_t fo_session_frame_count(const fo_session *s);
/* 0 for reserved ids (no MFA), 1 and *out filled for real frames. */
int fo_session_frame_mfa(const fo_session *s, uint32_t frame, fo_mfa *out);

#endif
