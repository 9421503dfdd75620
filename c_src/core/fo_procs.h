/* Per-process state: where each traced process is in the tree, its real
 * stack (to match returns), and its clock. */
#ifndef FO_PROCS_H
#define FO_PROCS_H

#include <stddef.h>
#include <stdint.h>

#include "fo_index.h"

typedef enum { FO_PROC_RUNNING = 0, FO_PROC_OUT, FO_PROC_EXITED } fo_proc_state;

/* CPU-sampled sessions: stacks a process was seen in, by the frame it was
 * seen at (see fo_session_cpu.c). */
#define FO_CPU_CONTEXTS 16u
#define FO_CPU_PENDING 16u
/* Distinct stacks one stratum's samples may land on before it is left to
 * the trace-wide share (fo_session_strata.c). */
#define FO_CPU_STRATUM_NODES 16u
typedef struct {
    uint32_t key;   /* the function it was in (0: a free entry) */
    uint32_t node;  /* the stack's innermost node */
    uint32_t stamp; /* when it was kept (the process's context clock) */
    uint8_t asked;  /* read by the helper (fo_session_cpu_context): kept longer */
} fo_cpu_context;

/* An off-CPU piece whose class is not known yet (fo_session_classes.c). */
#define FO_UNDECIDED_PIECES 8u
typedef struct {
    uint32_t leaf; /* the SLEEP leaf its time is on */
    uint64_t ns;
} fo_piece;

typedef struct {
    uint64_t pid;
    uint32_t root;       /* process root node */
    uint32_t node_cap;   /* bucket node for pushes the tree had no room for */
    uint32_t sleep_node; /* where scheduled-out time goes */
    uint32_t depth;      /* frames on the stack arrays */
    uint32_t stack_cap;
    uint32_t overflow;   /* pushes past max_stack_frames, only counted */
    uint32_t *stack_frames;
    uint32_t *stack_nodes;
    uint32_t *stack_repeats; /* collapsed recursion: more calls of the entry's
                                frame it stands for (0: one call) */
    uint64_t call_wait_ns; /* WAITING time of the current call (graph traces) */
    uint32_t call_wait_node; /* the one WAITING leaf that holds it (FO_NONE: none yet) */
    uint32_t call_wait_stop; /* the frame its last `out` in the call named (0: none) */
    uint32_t gc_node;        /* while it collects garbage: its GC leaf (FO_NONE: not) */
    /* CPU-sampled sessions: the collection now is one of no known place
     * (1 minor, 2 major; 0: not), and such collections' time [minor,
     * major], placed as the trace settles (fo_session_cpu_settle) */
    uint8_t gc_pooled;
    uint64_t gc_pool_ns[2];
    uint64_t gcs[2];         /* collections started: minor, major (fo_session_process_gcs) */
    uint64_t undecided_ns;   /* tracking receives: off-CPU since its wait began, no message seen yet */
    uint8_t got_message;     /* tracking receives: a message came while it was scheduled out */
    uint8_t left_wait;       /* sampled modes: a message (or a receive's timeout) ended its
                                wait before this slice or in it (receive events, or
                                FO_EVF_LEFT_WAIT on its `in`) */
    /* tracking receives without calls (FO_RECEIVES_CPU, _SAMPLED): the
     * off-CPU pieces no message ended yet, by the leaf that holds each,
     * and what the slice since its `in` showed */
    fo_piece pieces[FO_UNDECIDED_PIECES];
    uint8_t piece_count;
    uint8_t slice_ran;       /* a CPU sample of its own code landed in this slice */
    uint8_t signal_expected; /* the front end wakes it with a signal (fo_session_expect_signal) */
    uint64_t slice_run_ns;   /* on CPU, not collecting, since its last `in` */
    uint32_t slice_stop;     /* the frame its last `out` named (0: none) */
    uint64_t heap_after;     /* its heap level after its last collection (heap_known) */
    uint64_t alloc_events;   /* call and return_to events since then */
    uint8_t heap_known;
    /* words (and collections) counted where nothing of its stack was known
     * (its root: a follower that just joined or came back, before its
     * first call or sample), held for the next collection that starts at
     * a known stack (fo_session_gc.c) */
    uint64_t alloc_held_words;
    uint64_t alloc_held_samples;
    uint32_t alloc_node; /* the node its last counted words went to (FO_NONE: none) */
    int64_t last_ts;
    uint8_t state;       /* fo_proc_state */
    uint8_t has_ts;
    uint8_t sampled;     /* a sample came since the timeline began */
    uint64_t unsampled_ns; /* running time charged to the bare root before that */
    uint8_t unseen;      /* running since an `in` (or since it appeared) with no
                            call, return or sample since: its stack is unknown */
    /* What the bursts since its last sample charged to the stack it left
     * (fo_session_unseen.c): running time, and GC time [minor, major]. */
    uint32_t unseen_node;
    uint64_t unseen_ns;
    uint32_t unseen_gc_node[2];
    uint64_t unseen_gc_ns[2];
    /* The off-CPU interval now (since the last `out`) and the one before
     * the last in/out pair: a sampler's stack request wakes a waiting
     * process just to answer, and that pair must not hide where the wait
     * before it was spent. */
    uint64_t wait_ns;
    uint32_t prev_wait_node;
    uint64_t prev_wait_ns;
    uint8_t pair_clean;  /* the last in/out pair ran no call, return or sample */
    /* CPU-sampled sessions: on-CPU time not yet settled, and the time
     * slice it runs in now (the thread of its last `in`, 0: none known) */
    uint64_t cpu_ns;
    uint64_t thread;
    int64_t slice_from;
    fo_cpu_context contexts[FO_CPU_CONTEXTS];
    uint32_t context_clock; /* stamps the contexts kept */
    uint32_t out_key;      /* the frame its last `out` stopped in (0: unknown) */
    uint8_t stack_known;   /* its stack is where it is: from a sample of this slice,
                              or where its last `out` stopped */
    uint8_t slice_sampled; /* a sample with Erlang frames came in this slice */
    uint8_t pending_count; /* C-code samples since that sample, placed when */
    uint32_t pending[FO_CPU_PENDING]; /* the next one or the slice's end says where */
    /* Its stratum (fo_session_strata.c): the on-CPU time since its last
     * long enough wait, and the stacks that time's samples landed on */
    uint64_t stratum_base;  /* cpu_ns when the stratum began */
    int64_t out_ts;         /* its last `out` (0: none yet) */
    uint32_t stratum_nodes[FO_CPU_STRATUM_NODES];
    uint32_t stratum_counts[FO_CPU_STRATUM_NODES];
    uint8_t stratum_used;
    uint8_t stratum_spilled; /* more stacks than it keeps: shared trace-wide */
} fo_proc;

typedef struct {
    fo_proc *procs;
    uint32_t count;
    uint32_t cap;
    uint32_t limit;
    fo_index index; /* pid -> position in procs */
    size_t stack_bytes;
} fo_procs;

int fo_procs_init(fo_procs *t, uint32_t limit);
void fo_procs_destroy(fo_procs *t);

/* The index of pid, or UINT32_MAX. */
uint32_t fo_procs_find(const fo_procs *t, uint64_t pid);

/* Append a zeroed process for pid; UINT32_MAX at the limit or out of
 * memory. The caller fills in its nodes. */
uint32_t fo_procs_add(fo_procs *t, uint64_t pid);

/* Room for at least `need` stack entries, never more than `limit`.
 * 0 when that is impossible. */
int fo_procs_reserve_stack(fo_procs *t, fo_proc *p, uint32_t need, uint32_t limit);

size_t fo_procs_memory(const fo_procs *t);

#endif
