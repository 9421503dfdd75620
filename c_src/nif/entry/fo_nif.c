/* The NIF entry points of FlameOn.Client.Native: argument checking and
 * locking around the core. Every function raises badarg on bad input. */
#include <string.h>

#include <erl_nif.h>

#include "fo_atoms.h"
#include "fo_decode.h"
#include "fo_drainer.h"
#include "fo_export.h"
#include "fo_export_graph.h"
#include "fo_follow.h"
#include "fo_graph_tracer.h"
#include "fo_handle.h"
#include "fo_next.h"
#include "fo_router.h"
#include "fo_resource.h"
#include "fo_root.h"
#include "fo_render_nif.h"
#include "fo_sample.h"
#include "fo_tracer_slots.h"
#include "fo_tracer.h"
#include "fo_xproc.h"

/* Messages applied per slice before yielding back to the scheduler; a
 * slice stays well under 1 ms. */
#define INGEST_CHUNK 2000

static int get_limit(ErlNifEnv *env, ERL_NIF_TERM map, ERL_NIF_TERM key, uint32_t *field)
{
    ERL_NIF_TERM value;
    if (!enif_get_map_value(env, map, key, &value))
        return 1; /* absent: keep the default */
    if (value == fo_atom_nil)
        return 1;
    unsigned int n;
    if (!enif_get_uint(env, value, &n))
        return 0;
    *field = n;
    return 1;
}

// new(Opts :: map()) -> Session
static ERL_NIF_TERM nif_new(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    if (!enif_is_map(env, argv[0]))
        return enif_make_badarg(env);
    fo_limits limits = fo_limits_default();
    if (!get_limit(env, argv[0], fo_atom_max_nodes, &limits.max_nodes) ||
        !get_limit(env, argv[0], fo_atom_max_depth, &limits.max_depth) ||
        !get_limit(env, argv[0], fo_atom_max_processes, &limits.max_processes) ||
        !get_limit(env, argv[0], fo_atom_max_frames, &limits.max_frames) ||
        !get_limit(env, argv[0], fo_atom_max_stack_frames, &limits.max_stack_frames) ||
        !fo_limits_valid(&limits))
        return enif_make_badarg(env);
    ErlNifSInt64 native_per_second = 1000000000;
    ERL_NIF_TERM value;
    if (enif_get_map_value(env, argv[0], fo_atom_native_per_second, &value) && value != fo_atom_nil &&
        (!enif_get_int64(env, value, &native_per_second) || native_per_second <= 0 ||
         native_per_second > 1000000000000LL))
        return enif_make_badarg(env);
    int replay = enif_get_map_value(env, argv[0], fo_atom_replay, &value) && value == fo_atom_true;
    uint32_t ring_records = FO_RING_DEFAULT_RECORDS;
    if (!get_limit(env, argv[0], fo_atom_buffer_events, &ring_records) || ring_records == 0 ||
        ring_records > FO_RING_MAX_RECORDS)
        return enif_make_badarg(env);
    ErlNifUInt64 max_text_bytes = FO_DEFAULT_MAX_STACK_BYTES;
    if (enif_get_map_value(env, argv[0], fo_atom_max_stack_bytes, &value) && value != fo_atom_nil &&
        (!enif_get_uint64(env, value, &max_text_bytes) || max_text_bytes == 0 ||
         max_text_bytes > FO_CEIL_MAX_STACK_BYTES))
        return enif_make_badarg(env);
    /* graph traces: a seq_trace label (a small positive integer) and the
     * span graph's bounds */
    ErlNifUInt64 label = 0;
    fo_graph_limits graph_limits = fo_graph_limits_default();
    int graph = enif_get_map_value(env, argv[0], fo_atom_label, &value) && value != fo_atom_nil;
    if (graph && (!enif_get_uint64(env, value, &label) || label == 0 ||
                  !get_limit(env, argv[0], fo_atom_max_spans, &graph_limits.max_spans) ||
                  !get_limit(env, argv[0], fo_atom_max_pending_calls, &graph_limits.max_pending_calls) ||
                  !get_limit(env, argv[0], fo_atom_max_processes, &graph_limits.max_processes) ||
                  !get_limit(env, argv[0], fo_atom_max_fanout, &graph_limits.max_fanout) ||
                  !fo_graph_limits_valid(&graph_limits)))
        return enif_make_badarg(env);
    fo_session_res *res = fo_resource_new(&limits, native_per_second, replay);
    if (res == NULL)
        return enif_raise_exception(env, enif_make_atom(env, "enomem"));
    if (graph && !fo_resource_add_graph(res, &graph_limits, label)) {
        enif_release_resource(res);
        return enif_raise_exception(env, enif_make_atom(env, "enomem"));
    }
    res->ring_request = ring_records;
    res->max_text_bytes = max_text_bytes;
    ERL_NIF_TERM term = fo_handle_make(env, res);
    enif_release_resource(res);
    return term;
}

// tracer_state(Session) -> non_neg_integer(): what to pass as the state of
// {tracer, FlameOn.Client.Native, State}: the session's slot key, an
// immediate the callbacks turn into the session without a resource
// lookup. Raises system_limit when every slot is taken.
static ERL_NIF_TERM nif_tracer_state(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    if (!fo_handle_get(env, argv[0], &res) || res->xproc != NULL || res->core == NULL ||
        !atomic_load(&res->active))
        return enif_make_badarg(env);
    if (!fo_tracer_slots_register(env, res))
        return enif_raise_exception(env, enif_make_atom(env, "system_limit"));
    return atomic_load(&res->slot_term);
}

/* Apply up to INGEST_CHUNK messages of list; *rest gets what is left.
 * Returns 0 when list turned out improper. Caller holds the lock. */
static int ingest_chunk(ErlNifEnv *env, fo_session_res *res, ERL_NIF_TERM list, ERL_NIF_TERM *rest)
{
    ERL_NIF_TERM head;
    int n = 0;
    while (n < INGEST_CHUNK && enif_get_list_cell(env, list, &head, &list)) {
        fo_event ev;
        memset(&ev, 0, sizeof(ev));
        /* graph sessions take trace messages to the tracer clock; a
         * timestamp that overflows int64 on the way is malformed */
        if (res->xproc != NULL) {
            fo_graph_ingest(env, res, head); /* a graph trace's root, mode :process */
        } else {
            fo_decode_result decoded = fo_decode_trace_msg(env, head, res->native_per_second, 0, &ev);
            fo_decode_apply(res->core, decoded, &ev);
        }
        n++;
    }
    fo_resource_account(res);
    *rest = list;
    return n == INGEST_CHUNK || enif_is_empty_list(env, list);
}



// ingest(Session, [TraceMsg]) -> ok
static ERL_NIF_TERM nif_ingest(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    if (!fo_handle_get(env, argv[0], &res) || !enif_is_list(env, argv[1]))
        return enif_make_badarg(env);
    fo_spin_lock(&res->lock);
    if (res->core == NULL) {
        fo_spin_unlock(&res->lock);
        return enif_make_badarg(env);
    }
    ERL_NIF_TERM rest;
    fo_resource_fold(res, env);
    int proper = ingest_chunk(env, res, argv[1], &rest);
    fo_spin_unlock(&res->lock);
    if (!proper)
        return enif_make_badarg(env);
    if (enif_is_empty_list(env, rest))
        return fo_atom_ok;
    /* Long batches continue in a rescheduled call so no single call holds
     * the scheduler for long. */
    enif_consume_timeslice(env, 50);
    ERL_NIF_TERM next[2] = {argv[0], rest};
    return enif_schedule_nif(env, "ingest", 0, nif_ingest, 2, next);
}

static ERL_NIF_TERM stats_term(ErlNifEnv *env, fo_session_res *res)
{
    if (res->core == NULL)
        return fo_export_stats(env, &res->final_stats, 0, res->final_nodes, res->final_processes,
                               res->final_frames, &res->ring);
    fo_resource_fold(res, env);
    return fo_export_stats(env, fo_session_stats(res->core), fo_session_memory(res->core),
                           fo_session_node_count(res->core), fo_session_process_count(res->core),
                           fo_session_frame_count(res->core), &res->ring);
}

// stats(Session) -> map()
static ERL_NIF_TERM nif_stats(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    if (!fo_handle_get(env, argv[0], &res))
        return enif_make_badarg(env);
    fo_spin_lock(&res->lock);
    ERL_NIF_TERM term = stats_term(env, res);
    fo_spin_unlock(&res->lock);
    return term;
}

// stop(Session) -> NativeMonotonicTime: the tracer callbacks take no more
// events (ingest/2 is the caller's own doing and still works); the result
// waits for finish/2. Returns when it stopped, in native time units.
static ERL_NIF_TERM nif_stop(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    if (!fo_handle_get(env, argv[0], &res))
        return enif_make_badarg(env);
    fo_handle_stop(res);
    return enif_make_int64(env, fo_ns_to_native(enif_monotonic_time(ERL_NIF_NSEC), res->native_per_second));
}

// graph_start(Session, RootPid) -> ok: registers the graph trace with the
// router (its label and its root process); graph_begin/1 starts the root
// span when tracing really starts.
static ERL_NIF_TERM nif_graph_start(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ErlNifPid pid;
    if (!fo_handle_get(env, argv[0], &res) || !enif_get_local_pid(env, argv[1], &pid) || res->xproc == NULL)
        return enif_make_badarg(env);
    if (!fo_root_register(res, (uint64_t)pid.pid))
        return enif_make_badarg(env);
    return fo_atom_ok;
}

// graph_watch_callees(Session, Pid) -> ok: from now on Pid gets
// {flame_on_callee, Callee} each time a callee receives a request of the
// trace (sample traces sample callees instead of call tracing them).
static ERL_NIF_TERM nif_graph_watch_callees(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ErlNifPid pid;
    if (!fo_handle_get(env, argv[0], &res) || !enif_get_local_pid(env, argv[1], &pid) || res->xproc == NULL)
        return enif_make_badarg(env);
    fo_spin_lock(&res->lock);
    res->xproc->watcher = pid;
    res->xproc->watch_callees = 1;
    fo_spin_unlock(&res->lock);
    return fo_atom_ok;
}

// graph_owner(Session, Pid, FollowMessages) -> ok: Pid gets {flame_on_left,
// P} for each process that leaves the trace (it turns P's trace flags off).
// FollowMessages false: the trace follows GenServer calls only, and its
// processes have no receive events.
static ERL_NIF_TERM nif_graph_owner(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ErlNifPid pid;
    if (!fo_handle_get(env, argv[0], &res) || !enif_get_local_pid(env, argv[1], &pid) || res->xproc == NULL ||
        (argv[2] != fo_atom_true && argv[2] != fo_atom_false))
        return enif_make_badarg(env);
    fo_spin_lock(&res->lock);
    res->xproc->owner = pid;
    res->xproc->has_owner = 1;
    fo_graph_follow_messages(res->xproc->graph, argv[2] == fo_atom_true);
    fo_spin_unlock(&res->lock);
    return fo_atom_ok;
}

// graph_role(Pid) -> root | follower | nil: Pid is the root of a running
// graph trace, or works for one (its trace flags must stay), or neither.
static ERL_NIF_TERM nif_graph_role(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifPid pid;
    if (!enif_get_local_pid(env, argv[0], &pid))
        return enif_make_badarg(env);
    switch (fo_router_role((uint64_t)pid.pid)) {
    case 2:
        return fo_atom_root;
    case 1:
        return fo_atom_follower;
    default:
        return fo_atom_nil;
    }
}

// graph_begin(Session) -> ok: the root span starts now.
static ERL_NIF_TERM nif_graph_begin(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    if (!fo_handle_get(env, argv[0], &res) || res->xproc == NULL)
        return enif_make_badarg(env);
    return fo_root_begin(res, fo_tracer_clock_ns()) ? fo_atom_ok : enif_make_badarg(env);
}

/* finish/2's work, on whichever scheduler runs it (finish_nif picks). */
static ERL_NIF_TERM finish_now(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ErlNifSInt64 end_ts = 0;
    int at_stop = argv[1] == fo_atom_stop;
    int has_end = argv[1] != fo_atom_nil && !at_stop;
    if (!fo_handle_get(env, argv[0], &res) || (has_end && !enif_get_int64(env, argv[1], &end_ts)))
        return enif_make_badarg(env);
    /* Graph sessions keep every time on the tracer clock (see ingest). An
     * end whose nanoseconds do not fit in int64, on that clock too, is a bad
     * argument (see fo_native_to_ns). native_per_second and the offset
     * never change: no lock needed. */
    int64_t end_ns = 0;
    if (has_end && !fo_native_to_ns(end_ts, res->native_per_second, fo_resource_ingest_offset(res), &end_ns))
        return enif_make_badarg(env);
    /* No callback appends once the slot is gone, so the fold below sees
     * the last event. */
    fo_tracer_slots_unregister(res);
    fo_spin_lock(&res->lock);
    fo_session *core = res->core;
    if (core == NULL) {
        fo_spin_unlock(&res->lock);
        return enif_make_badarg(env);
    }
    fo_resource_fold(res, env);
    fo_ring_free(&res->ring);
    int64_t close_ns = 0;
    int close = 1;
    if (has_end)
        close_ns = end_ns;
    else if (at_stop && res->stopped_ns != 0)
        close_ns = res->stopped_ns;
    else
        close = 0;
    ERL_NIF_TERM graph = fo_atom_nil;
    if (res->xproc != NULL) {
        /* the graph first: it says where each follower's stacks stop */
        fo_follow f = {core, res->xproc->graph, NULL, NULL};
        fo_follow_close(&f, close ? close_ns : fo_tracer_clock_ns(), close);
        graph = fo_export_graph(env, res->xproc);
    } else if (close) {
        fo_session_close(core, close_ns);
    }
    ERL_NIF_TERM stacks = fo_export_tree(env, core, res->max_text_bytes);
    ERL_NIF_TERM stats = stats_term(env, res);
    res->final_stats = *fo_session_stats(core);
    fo_resource_unaccount(res);
    res->final_nodes = fo_session_node_count(core);
    res->final_processes = fo_session_process_count(core);
    res->final_frames = fo_session_frame_count(core);
    res->core = NULL;
    atomic_store(&res->active, 0);
    fo_spin_unlock(&res->lock);
    fo_session_free(core);
    if (res->xproc != NULL)
        fo_router_unregister(res); /* finished without stop/1 */
    ERL_NIF_TERM reason;
    if (enif_has_pending_exception(env, &reason))
        return stacks;
    if (res->xproc != NULL)
        return enif_make_tuple3(env, stacks, stats, graph);
    return enif_make_tuple2(env, stacks, stats);
}

/* Sessions up to this many nodes finish on the calling scheduler (well
 * under a millisecond, even with a full event ring to fold); bigger ones,
 * and graph sessions, on a dirty scheduler. Hopping to a dirty scheduler
 * and back costs tens of microseconds on a quiet machine and milliseconds
 * on a loaded one: most profiles are small. */
#define FINISH_INLINE_NODES 20000u

// finish(Session, End :: integer() | nil | stop) -> {Tree, Stats} (graph
// sessions: {Tree, Stats, Graph}); Tree as fo_export_tree makes it.
// End: native monotonic time (trace messages), nil (no closing charge) or
// `stop` (when stop/1 ran, on the tracer clock: tracer-module sessions).
// Small sessions finish here; the rest go to a dirty scheduler.
static ERL_NIF_TERM finish_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    fo_session_res *res;
    if (!fo_handle_get(env, argv[0], &res))
        return enif_make_badarg(env);
    fo_spin_lock(&res->lock);
    int small = res->core != NULL && res->xproc == NULL &&
                fo_session_node_count(res->core) <= FINISH_INLINE_NODES;
    fo_spin_unlock(&res->lock);
    if (!small)
        return enif_schedule_nif(env, "finish", ERL_NIF_DIRTY_JOB_CPU_BOUND, finish_now, argc, argv);
    ERL_NIF_TERM result = finish_now(env, argc, argv);
    enif_consume_timeslice(env, 10);
    return result;
}

// session_bytes() -> integer(): bytes held by all live sessions' tables.
static ERL_NIF_TERM nif_session_bytes(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    return enif_make_long(env, fo_resource_session_bytes());
}

// live_sessions() -> non_neg_integer(): session resources not yet freed.
static ERL_NIF_TERM nif_live_sessions(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    return enif_make_long(env, fo_resource_live_sessions());
}

static ErlNifFunc nif_funcs[] = {
    {"live_sessions", 0, nif_live_sessions, 0},
    {"session_bytes", 0, nif_session_bytes, 0},
    {"new", 1, nif_new, 0},
    {"tracer_state", 1, nif_tracer_state, 0},
    {"ingest", 2, nif_ingest, 0},
    {"stats", 1, nif_stats, 0},
    {"stop", 1, nif_stop, 0},
    {"graph_start", 2, nif_graph_start, 0},
    {"graph_begin", 1, nif_graph_begin, 0},
    {"graph_watch_callees", 2, nif_graph_watch_callees, 0},
    {"graph_owner", 3, nif_graph_owner, 0},
    {"graph_role", 1, nif_graph_role, 0},
    {"finish", 2, finish_nif, 0},
    {"render", 2, fo_render_nif, 0},
    {"sample", 4, fo_sample_nif, 0},
    {"sample", 5, fo_sample_nif, 0},
    {"sample_sleep", 3, fo_sample_sleep_nif, 0},
    {"sample_wake_cancel", 2, fo_sample_wake_cancel_nif, 0},
    {"next_new", 3, fo_next_new_nif, 0},
    {"next_cancel", 1, fo_next_cancel_nif, 0},
    {"next_state", 1, fo_next_state_nif, 0},
    {"enabled", 3, fo_tracer_enabled, 0},
    {"trace", 5, fo_tracer_trace, 0},
};

/* Loaded instances of this library (an upgrade loads a second one into
 * the same statics until the old code is purged): the drainer thread runs
 * while any is loaded, and must be gone before the code is unmapped. */
static int instances;

static int on_load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
    (void)priv;
    (void)info;
    fo_atoms_init(env);
    if (!fo_resource_open(env) || !fo_handle_open(env) || !fo_next_open(env) || !fo_router_init() || !fo_tracer_slots_init())
        return 1;
    fo_clock_init();
    /* without the thread, producers fold their own rings when full */
    fo_drainer_start();
    instances++;
    return 0;
}

static int on_upgrade(ErlNifEnv *env, void **priv, void **old_priv, ERL_NIF_TERM info)
{
    (void)old_priv;
    return on_load(env, priv, info);
}

static void on_unload(ErlNifEnv *env, void *priv)
{
    (void)env;
    (void)priv;
    if (--instances == 0)
        fo_drainer_stop();
}

ERL_NIF_INIT(Elixir.FlameOn.Client.Native, nif_funcs, on_load, NULL, on_upgrade, on_unload)
