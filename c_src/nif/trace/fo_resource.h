/* The session resource: a core session behind a lock, so any process
 * holding the reference and tracer callbacks on any scheduler can use it
 * safely. Erlang code holds it through a handle (fo_handle.h); the
 * session's destructor frees it once the last of the handle, the router
 * and the drainer (which keep references of their own while they use it)
 * is done. It knows nothing of the node-wide tables that reach it (tracer
 * slots, router): taking it out of them is fo_handle.h's. */
#ifndef FO_RESOURCE_H
#define FO_RESOURCE_H

#include <erl_nif.h>
#include <stdatomic.h>

#include "fo_clock.h"
#include "fo_cpu.h"
#include "fo_cpu_ask.h"
#include "fo_graph.h"
#include "fo_ring.h"
#include "fo_session.h"
#include "fo_spinlock.h"
#include "fo_wake.h"

/* Bytes of stack texts ("a;b;c") render/2 writes at most (new/1's
 * max_stack_bytes). */
#define FO_DEFAULT_MAX_STACK_BYTES (64ull << 20)
#define FO_CEIL_MAX_STACK_BYTES (16ull << 30)

typedef struct fo_session_res fo_session_res;
typedef struct fo_xproc fo_xproc; /* fo_xproc.h */

struct fo_session_res {
    fo_spinlock lock;
    atomic_int active;     /* 0 once finished: tracer callbacks read it unlocked */
    atomic_int open;       /* 1 until fo_resource_close: counted in open_sessions */
    fo_session *core;      /* NULL once finished */
    int64_t native_per_second;
    int replay;            /* trace/5 takes recorded timestamps from Opts */
    fo_clock clock;        /* the session's tracer clock (fo_clock.h) */
    int64_t stopped_ns;    /* its time when stop/1 ran; 0 before */
    fo_xproc *xproc;       /* graph traces' cross-process state; NULL for the
                              rest. Set by new/1, never changed after. */
    int cpu_sampled;       /* native mode (fo_resource_set_cpu_sampled); set by
                              new/1, never changed after */
    fo_cpu_scope cpu_scope;
    int alloc;             /* an fo_alloc_kind (fo_decode.h): gc events carry heap sizes
                              (allocation profiles); set by new/1, never changed after */
    fo_cpu_asks *asks;     /* native mode: which stops to ask the helper about */
    fo_stats final_stats;  /* kept after finish frees the core */
    uint32_t final_nodes, final_processes, final_frames;
    size_t accounted;      /* bytes of this session in the node-wide sum */
    uint32_t since_account; /* events since the last accounting */
    /* Tracer-module sessions (not graph ones): the tracer state is the
     * slot key (fo_tracer_slots.h), and the callbacks append to the ring. */
    _Atomic ERL_NIF_TERM slot_term; /* the tracer state (fo_tracer_slots.h); 0: no slot (yet, or any more) */
    uint32_t ring_request;     /* the most records the ring grows to */
    uint64_t max_text_bytes;   /* render/2's budget for the stack texts */
    fo_ring ring;
    fo_wakes wakes;            /* samplers asleep until their process's next `in` */
    fo_session_res *drain_next; /* the drainer's queue (its mutex) */
};

int fo_resource_open(ErlNifEnv *env);

/* A new, unlinked resource; NULL on failure. Release with enif_release_resource. */
fo_session_res *fo_resource_new(const fo_limits *limits, int64_t native_per_second, int replay);

/* Makes res a graph trace with this seq_trace label (res->xproc). 0 on
 * failure. */
int fo_resource_add_graph(fo_session_res *res, const fo_graph_limits *limits, uint64_t label);

/* Makes res a CPU-sampled (native) trace: its core takes its processes'
 * samples from fo_cpu, its clock is CLOCK_MONOTONIC (the samples' clock),
 * its tracer callbacks note the thread of each `in`, and ask its helper
 * about the stops it knows no stack for (fo_cpu_ask.h). Before any event.
 * 0 when memory is short. */
int fo_resource_set_cpu_sampled(fo_session_res *res, const fo_cpu_scope *scope);

/* Erlang monotonic time minus the tracer clock for a graph trace (trace
 * messages join its events on the tracer clock), 0 for the rest. */
int64_t fo_resource_ingest_offset(const fo_session_res *res);

/* The tracer callbacks take no more events from now on (stop/1; the
 * caller takes the session out of the tables that reach it): the first
 * call notes when, on the session's clock. */
void fo_resource_mark_stopped(fo_session_res *res);

/* Folds what the tracer callbacks appended to the ring (caller holds the
 * lock, core not NULL; env: any environment the caller may use): anything
 * that reads or feeds the core does this first, so the core sees every
 * event in order. */
static inline void fo_resource_fold(fo_session_res *res, ErlNifEnv *env)
{
    if (fo_ring_pending(&res->ring) > 0 || atomic_load_explicit(&res->ring.ignored, memory_order_relaxed) > 0 ||
        atomic_load_explicit(&res->ring.malformed, memory_order_relaxed) > 0)
        fo_ring_fold(&res->ring, res->core, &res->clock, env);
}

/* Brings this session's share of the node-wide memory sum up to date
 * (caller holds the lock); cheap enough per batch, done every
 * FO_ACCOUNT_EVERY events by the tracer callbacks. */
#define FO_ACCOUNT_EVERY 256u
void fo_resource_account(fo_session_res *res);
/* Takes the session out of the sum (its tables are being freed). */
void fo_resource_unaccount(fo_session_res *res);
/* Bytes held by the tables of all live sessions, node-wide. */
long fo_resource_session_bytes(void);

static inline void fo_resource_account_sometimes(fo_session_res *res)
{
    if (++res->since_account >= FO_ACCOUNT_EVERY) {
        res->since_account = 0;
        fo_resource_account(res);
    }
}

/* Session resources not yet destroyed, node-wide: open ones and those
 * closed but still referenced (a handle in a term not yet collected). */
long fo_resource_live_sessions(void);

/* The trace is over (stopped, finished, its handle gone or the resource
 * destroyed, whichever comes first; later calls do nothing): it no longer
 * counts in fo_resource_open_sessions. */
void fo_resource_close(fo_session_res *res);

/* Sessions whose trace is not over (not stopped, finished or dropped),
 * node-wide: the live traces, whenever the garbage collector runs. */
long fo_resource_open_sessions(void);

#endif
