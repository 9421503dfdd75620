/* The cross-process state of a graph trace: the span graph, the seq_trace
 * label, the root process, who is told of callees and of processes that
 * left, callee exit reasons and processes on other nodes. The session
 * resource points to it (fo_resource.h: xproc), made by new/1 for graph
 * traces only; every other trace has none and pays nothing for it. Freed
 * with the session. Guarded by the session's lock, but for what never
 * changes once made (the label, the ingest offset), the router's mark
 * (routed), which only the router reads and writes, under its own lock,
 * and the root, also read without the session's lock (atomic). */
#ifndef FO_XPROC_H
#define FO_XPROC_H

#include <erl_nif.h>
#include <stdatomic.h>
#include <stdint.h>

#include "fo_graph.h"
#include "fo_remote.h"

/* Callee exit reasons whose terms are kept for export; later distinct ones
 * keep only their key (and export as `unknown`). */
#define FO_XPROC_REASONS 16u

typedef struct fo_xproc fo_xproc;

struct fo_xproc {
    fo_graph *graph;          /* the span graph */
    uint64_t label;           /* the seq_trace label */
    _Atomic uint64_t root_pid; /* the process that started it; 0 before graph_start/2.
                                  Written under the session's lock, read also without
                                  it (the router, under its own lock; the tracer
                                  callbacks): fo_xproc_root, fo_xproc_set_root */
    int64_t ingest_offset_ns; /* Erlang monotonic - tracer clock, so trace messages
                                 (:process mode) join the tracer-clock events on one clock */
    int watch_callees;        /* tell watcher of each request a callee takes */
    ErlNifPid watcher;        /* (the trace's owner starts a sampler for the callee) */
    int has_owner;            /* tell owner of each process that left */
    ErlNifPid owner;          /* (it turns the process's trace flags off) */
    ErlNifEnv *reasons;       /* copies of callee exit reasons */
    ERL_NIF_TERM reason_terms[FO_XPROC_REASONS];
    uint64_t reason_keys[FO_XPROC_REASONS];
    uint32_t reason_count;
    fo_remote *remote;        /* processes on other nodes met */
    int routed;               /* the router holds it under its label (fo_router.c;
                                 the router's lock guards it, not the session's) */
};

/* The root process, read with or without the session's lock; set under
 * it (fo_root.c). Relaxed: nothing else is published through it. */
static inline uint64_t fo_xproc_root(const fo_xproc *x)
{
    return atomic_load_explicit(&x->root_pid, memory_order_relaxed);
}

static inline void fo_xproc_set_root(fo_xproc *x, uint64_t pid)
{
    atomic_store_explicit(&x->root_pid, pid, memory_order_relaxed);
}

/* The state of a new graph trace with this label; NULL when memory is
 * short. */
fo_xproc *fo_xproc_new(const fo_graph_limits *limits, uint64_t label);
void fo_xproc_free(fo_xproc *x);

/* A key for an exit reason, remembering the term for export (the first
 * FO_XPROC_REASONS distinct reasons). 0 = normal. */
uint64_t fo_xproc_reason_key(ErlNifEnv *env, fo_xproc *x, ERL_NIF_TERM reason);

/* The reason term of key, in env; `unknown` when it was not kept. */
ERL_NIF_TERM fo_xproc_reason_term(ErlNifEnv *env, const fo_xproc *x, uint64_t key);

#endif
