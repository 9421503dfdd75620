/* The NIFs of a session's life: new, the tracer state, trace messages in
 * (ingest), stats, stop and finish, and the node-wide counts. */
#include "fo_session_nif.h"

#include <stddef.h>
#include <string.h>

#include "fo_atoms.h"
#include "fo_decode.h"
#include "fo_export.h"
#include "fo_export_graph.h"
#include "fo_follow.h"
#include "fo_graph_tracer.h"
#include "fo_handle.h"
#include "fo_resource.h"
#include "fo_router.h"
#include "fo_symbols.h"
#include "fo_tracer_slots.h"
#include "fo_xproc.h"

/* A wait this long or longer ends a stratum (fo_session_set_cpu_strata):
 * longer than a preemption on a quiet node (the process is back within
 * microseconds), shorter than a call or a sleep. */
#define FO_STRATUM_GAP_NS 50000u
/* A stratum's shortest length above which none is taken (60 s). */
#define FO_MAX_STRATUM_NS 60000000000ull

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

/* {Module, Function, Arity} */
static int get_root(ErlNifEnv *env, ERL_NIF_TERM term, fo_mfa *mfa)
{
    int arity;
    const ERL_NIF_TERM *items;
    unsigned int n;
    if (!enif_get_tuple(env, term, &arity, &items) || arity != 3 || !enif_is_atom(env, items[0]) ||
        !enif_is_atom(env, items[1]) || !enif_get_uint(env, items[2], &n) || n > 255)
        return 0;
    mfa->module = (uint64_t)items[0];
    mfa->function = (uint64_t)items[1];
    mfa->arity = n;
    return 1;
}

// new(Opts)
ERL_NIF_TERM fo_new_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
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
    /* collapse_recursion: true | false (absent or nil: false) */
    int collapse = 0;
    if (enif_get_map_value(env, argv[0], fo_atom_collapse_recursion, &value) && value != fo_atom_nil) {
        if (value != fo_atom_true && value != fo_atom_false)
            return enif_make_badarg(env);
        collapse = value == fo_atom_true;
    }
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
    /* native mode: CPU samples, their frames kept from the innermost call
     * of the root function out */
    int cpu_sampled = enif_get_map_value(env, argv[0], fo_atom_cpu_sampled, &value) && value == fo_atom_true;
    fo_cpu_scope scope;
    memset(&scope, 0, sizeof scope);
    if (cpu_sampled && enif_get_map_value(env, argv[0], fo_atom_cpu_root, &value) && value != fo_atom_nil) {
        if (!get_root(env, value, &scope.root))
            return enif_make_badarg(env);
        scope.has_root = 1;
    }
    if (cpu_sampled && enif_get_map_value(env, argv[0], fo_atom_cpu_cut, &value) && value != fo_atom_nil) {
        if (!get_root(env, value, &scope.cut))
            return enif_make_badarg(env);
        scope.has_cut = 1;
    }
    /* strata (fo_session_set_cpu_strata): the shortest one shared on its
     * own, in ns (absent or nil: no strata) */
    ErlNifUInt64 stratum_ns = 0;
    if (cpu_sampled && enif_get_map_value(env, argv[0], fo_atom_cpu_stratum_ns, &value) && value != fo_atom_nil &&
        (!enif_get_uint64(env, value, &stratum_ns) || stratum_ns > FO_MAX_STRATUM_NS))
        return enif_make_badarg(env);
    fo_session_res *res = fo_resource_new(&limits, native_per_second, replay);
    if (res == NULL)
        return enif_raise_exception(env, enif_make_atom(env, "enomem"));
    if (graph && !fo_resource_add_graph(res, &graph_limits, label)) {
        enif_release_resource(res);
        return enif_raise_exception(env, enif_make_atom(env, "enomem"));
    }
    if (cpu_sampled && !fo_resource_set_cpu_sampled(res, &scope)) {
        enif_release_resource(res);
        return enif_raise_exception(env, enif_make_atom(env, "enomem"));
    }
    fo_session_set_collapse_recursion(res->core, collapse);
    if (cpu_sampled)
        fo_session_set_cpu_strata(res->core, stratum_ns, FO_STRATUM_GAP_NS);
    /* receive events tell runnable time from waits: true (exact modes: by
     * the calls after them), cpu (native: by the CPU samples and length of
     * the slice after them), sampled (mode :sample: by the slice after
     * them, its sampler's signals told apart). Graph traces: the graph
     * decides. */
    if (!graph && enif_get_map_value(env, argv[0], fo_atom_receives, &value)) {
        if (value == fo_atom_true)
            fo_session_track_receives(res->core, 1);
        else if (value == fo_atom_cpu)
            fo_session_track_receives_as(res->core, FO_RECEIVES_CPU);
        else if (value == fo_atom_sampled)
            fo_session_track_receives_as(res->core, FO_RECEIVES_SAMPLED);
    }
    res->ring_request = ring_records;
    res->max_text_bytes = max_text_bytes;
    /* allocation profiles: gc events are decoded with their heap sizes
     * (alloc: true), or their heap sizes but fragments (alloc: heap) */
    res->alloc = FO_ALLOC_OFF;
    if (enif_get_map_value(env, argv[0], fo_atom_alloc, &value))
        res->alloc = value == fo_atom_true ? FO_ALLOC_ALL : value == fo_atom_heap ? FO_ALLOC_HEAP_ONLY : FO_ALLOC_OFF;
    ErlNifUInt64 event_words = 0;
    if (enif_get_map_value(env, argv[0], fo_atom_alloc_event_words, &value) &&
        (!enif_get_uint64(env, value, &event_words) || event_words > 1024)) {
        enif_release_resource(res);
        return enif_make_badarg(env);
    }
    fo_session_set_alloc_event_words(res->core, event_words);
    /* heap_levels: [{Pid, Words}], the traced processes' heaps at the start */
    if (enif_get_map_value(env, argv[0], fo_atom_heap_levels, &value) && value != fo_atom_nil) {
        ERL_NIF_TERM head, list = value;
        while (enif_get_list_cell(env, list, &head, &list)) {
            int arity;
            const ERL_NIF_TERM *pair;
            ErlNifPid pid;
            ErlNifUInt64 words;
            if (!enif_get_tuple(env, head, &arity, &pair) || arity != 2 ||
                !enif_get_local_pid(env, pair[0], &pid) || !enif_get_uint64(env, pair[1], &words)) {
                enif_release_resource(res);
                return enif_make_badarg(env);
            }
            fo_session_heap_level(res->core, (uint64_t)pid.pid, words);
        }
        if (!enif_is_empty_list(env, list)) {
            enif_release_resource(res);
            return enif_make_badarg(env);
        }
    }
    ERL_NIF_TERM term = fo_handle_make(env, res);
    enif_release_resource(res);
    return term;
}

// tracer_state(Session)
ERL_NIF_TERM fo_tracer_state_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
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
            if (res->alloc && decoded == FO_DECODED)
                fo_decode_trace_msg_heap(env, head, &ev, (fo_alloc_kind)res->alloc);
            fo_decode_apply(res->core, decoded, &ev);
        }
        n++;
    }
    fo_resource_account(res);
    *rest = list;
    return n == INGEST_CHUNK || enif_is_empty_list(env, list);
}

// ingest(Session, [TraceMsg])
ERL_NIF_TERM fo_ingest_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
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
    return enif_schedule_nif(env, "ingest", 0, fo_ingest_nif, 2, next);
}

/* A counter of fo_stats (all uint64_t) and the key it goes under. */
typedef struct {
    const ERL_NIF_TERM *key;
    size_t offset;
} stat_field;

#define STAT_FIELD(name) {&fo_atom_##name, offsetof(fo_stats, name)}

static const stat_field every_mode[] = {STAT_FIELD(collapsed_recursion), STAT_FIELD(gc_minor), STAT_FIELD(gc_major),
                                        STAT_FIELD(gc_minor_ns), STAT_FIELD(gc_major_ns)};
static const stat_field alloc_fields[] = {STAT_FIELD(alloc_words), STAT_FIELD(alloc_samples),
                                          STAT_FIELD(alloc_unknown)};
static const stat_field native_fields[] = {
    STAT_FIELD(cpu_unsampled_ns),  STAT_FIELD(cpu_orphans),        STAT_FIELD(cpu_rootless),
    STAT_FIELD(cpu_contexts),      STAT_FIELD(cpu_unknown_stops),  STAT_FIELD(cpu_cut_samples),
    STAT_FIELD(cpu_rehomed_cuts),  STAT_FIELD(cpu_called_samples), STAT_FIELD(cpu_seen_stops),
    STAT_FIELD(cpu_entered_stops), STAT_FIELD(cpu_broken_chains),  STAT_FIELD(cpu_foreign_chains),
    STAT_FIELD(cpu_strata)};

static void add_fields(ErlNifEnv *env, fo_export_more *more, const fo_stats *st, const stat_field *fields,
                       size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t value;
        memcpy(&value, (const char *)st + fields[i].offset, sizeof value);
        fo_export_more_count(env, more, *fields[i].key, value);
    }
}

/* Native mode's own counters (fo_session.h, fo_cpu_ask.h), and the
 * garbage collections and collapsed recursion of every mode. */
static void cpu_stats(ErlNifEnv *env, const fo_session_res *res, const fo_stats *st, fo_export_more *more)
{
    more->count = 0;
    add_fields(env, more, st, every_mode, sizeof every_mode / sizeof every_mode[0]);
    if (res->alloc)
        add_fields(env, more, st, alloc_fields, sizeof alloc_fields / sizeof alloc_fields[0]);
    if (!res->cpu_sampled)
        return;
    add_fields(env, more, st, native_fields, sizeof native_fields / sizeof native_fields[0]);
    fo_export_more_count(env, more, fo_atom_cpu_asked, atomic_load(&res->asks->asked));
    fo_export_more_count(env, more, fo_atom_cpu_asks_limited, atomic_load(&res->asks->limited));
}

/* At finish: the collections of each process that had any, pid =>
 * {Minor, Major} under the stats' process_gcs (FlameOn.Client.Profile
 * takes it out for its time_classes). */
static ERL_NIF_TERM with_process_gcs(ErlNifEnv *env, const fo_session *core, ERL_NIF_TERM stats)
{
    ERL_NIF_TERM map = enif_make_new_map(env);
    for (uint32_t p = 0; p < fo_session_process_count(core); p++) {
        uint64_t minor, major;
        fo_session_process_gcs(core, p, &minor, &major);
        if (minor == 0 && major == 0)
            continue;
        ErlNifPid pid;
        pid.pid = (ERL_NIF_TERM)fo_session_process_pid(core, p);
        enif_make_map_put(env, map, enif_make_pid(env, &pid),
                          enif_make_tuple2(env, enif_make_uint64(env, minor), enif_make_uint64(env, major)), &map);
    }
    enif_make_map_put(env, stats, fo_atom_process_gcs, map, &stats);
    return stats;
}

static ERL_NIF_TERM stats_term(ErlNifEnv *env, fo_session_res *res)
{
    fo_export_more more;
    if (res->core == NULL) {
        cpu_stats(env, res, &res->final_stats, &more);
        return fo_export_stats_with(env, &res->final_stats, 0, res->final_nodes, res->final_processes,
                                    res->final_frames, res->ring.producer_folds, fo_ring_largest_bytes(&res->ring),
                                    &more);
    }
    fo_resource_fold(res, env);
    const fo_stats *st = fo_session_stats(res->core);
    cpu_stats(env, res, st, &more);
    return fo_export_stats_with(env, st, fo_session_memory(res->core), fo_session_node_count(res->core),
                                fo_session_process_count(res->core), fo_session_frame_count(res->core),
                                res->ring.producer_folds, fo_ring_largest_bytes(&res->ring), &more);
}

// stats(Session)
ERL_NIF_TERM fo_stats_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
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

// stop(Session)
ERL_NIF_TERM fo_stop_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    if (!fo_handle_get(env, argv[0], &res))
        return enif_make_badarg(env);
    fo_handle_stop(res);
    return enif_make_int64(env, fo_ns_to_native(enif_monotonic_time(ERL_NIF_NSEC), res->native_per_second));
}

/* finish/2's work, on whichever scheduler runs it (fo_finish_nif picks). */
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
    if (res->cpu_sampled)
        fo_symbols_refresh(); /* names for the last samples' modules */
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
    if (res->cpu_sampled)
        fo_session_cpu_settle(core, close ? close_ns : fo_tracer_clock_ns());
    ERL_NIF_TERM stacks = fo_export_tree(env, core, res->max_text_bytes);
    ERL_NIF_TERM stats = with_process_gcs(env, core, stats_term(env, res));
    res->final_stats = *fo_session_stats(core);
    fo_resource_unaccount(res);
    res->final_nodes = fo_session_node_count(core);
    res->final_processes = fo_session_process_count(core);
    res->final_frames = fo_session_frame_count(core);
    res->core = NULL;
    atomic_store(&res->active, 0);
    fo_spin_unlock(&res->lock);
    fo_resource_close(res);
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

// finish(Session, End): small sessions finish here, the rest on a dirty scheduler
ERL_NIF_TERM fo_finish_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
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

// session_bytes()
ERL_NIF_TERM fo_session_bytes_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    return enif_make_long(env, fo_resource_session_bytes());
}

// live_sessions()
ERL_NIF_TERM fo_live_sessions_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    return enif_make_long(env, fo_resource_live_sessions());
}

// open_sessions()
ERL_NIF_TERM fo_open_sessions_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    return enif_make_long(env, fo_resource_open_sessions());
}
