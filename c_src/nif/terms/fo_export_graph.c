#include "fo_export_graph.h"

#include "fo_atoms.h"
#include "fo_clock.h"

static ERL_NIF_TERM pid_term(ErlNifEnv *env, const fo_xproc *x, uint64_t key)
{
    if (key == 0)
        return fo_atom_nil;
    if (key & FO_GRAPH_REMOTE_BIT)
        return fo_remote_term(x->remote, env, key);
    ErlNifPid pid;
    pid.pid = (ERL_NIF_TERM)key;
    return enif_make_pid(env, &pid);
}

static ERL_NIF_TERM status_term(ErlNifEnv *env, const fo_xproc *x, const fo_span_info *span)
{
    switch (span->status) {
    case FO_SPAN_OK:
        return fo_atom_ok;
    case FO_SPAN_EXIT:
        return enif_make_tuple2(env, fo_atom_exit,
                                span->reason_key == 0 ? enif_make_atom(env, "normal")
                                                      : fo_xproc_reason_term(env, x, span->reason_key));
    case FO_SPAN_OPEN_AT_CLOSE:
        return fo_atom_open_at_close;
    default:
        return fo_atom_open;
    }
}

static ERL_NIF_TERM kind_term(const fo_span_info *span)
{
    switch (span->kind) {
    case FO_SPAN_REQUEST:
        return fo_atom_request;
    case FO_SPAN_WORK:
        return fo_atom_work;
    case FO_SPAN_CONTINUATION:
        return fo_atom_continuation;
    case FO_SPAN_REMOTE:
        return fo_atom_remote;
    default:
        return fo_atom_root;
    }
}

static ERL_NIF_TERM children_term(ErlNifEnv *env, const fo_graph *g, const fo_span_info *span)
{
    ERL_NIF_TERM list = enif_make_list(env, 0);
    /* siblings are linked first to last: collect, then build back to front */
    uint32_t ids[64];
    uint32_t n = fo_graph_children(g, span->span_id, ids, 64);
    if (n > 64) {
        uint32_t *all = enif_alloc(sizeof(uint32_t) * n);
        if (all == NULL)
            return list;
        fo_graph_children(g, span->span_id, all, n);
        for (uint32_t i = n; i-- > 0;)
            list = enif_make_list_cell(env, enif_make_uint(env, all[i]), list);
        enif_free(all);
        return list;
    }
    for (uint32_t i = n; i-- > 0;)
        list = enif_make_list_cell(env, enif_make_uint(env, ids[i]), list);
    return list;
}

static ERL_NIF_TERM causes_term(ErlNifEnv *env, const fo_span_info *s)
{
    ERL_NIF_TERM keys[] = {fo_atom_process, fo_atom_port, fo_atom_timer, fo_atom_other};
    ERL_NIF_TERM values[FO_CAUSE_COUNT];
    for (uint32_t c = 0; c < FO_CAUSE_COUNT; c++)
        values[c] = enif_make_uint64(env, s->unattributed_by[c]);
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, values, FO_CAUSE_COUNT, &map);
    return map;
}

static ERL_NIF_TERM span_term(ErlNifEnv *env, const fo_xproc *x, const fo_span_info *s)
{
    ERL_NIF_TERM keys[] = {fo_atom_span_id,        fo_atom_parent_span_id,     fo_atom_pid,
                           fo_atom_started_ns,     fo_atom_ended_ns,           fo_atom_self_ns,
                           fo_atom_wait_ns,        fo_atom_attributed_wait_ns, fo_atom_unattributed_wait_ns,
                           fo_atom_waiting_on_pid, fo_atom_children,           fo_atom_status,
                           fo_atom_kind,           fo_atom_opener_pid,         fo_atom_unattributed_by,
                           fo_atom_wakes,          fo_atom_wire,               fo_atom_gc_ns,
                           fo_atom_runnable_ns};
    ERL_NIF_TERM values[] = {
        enif_make_uint(env, s->span_id),
        s->parent_span_id == FO_NONE ? fo_atom_nil : enif_make_uint(env, s->parent_span_id),
        pid_term(env, x, s->pid),
        enif_make_int64(env, s->started_ns),
        enif_make_int64(env, s->ended_ns),
        enif_make_uint64(env, s->self_ns),
        enif_make_uint64(env, s->wait_ns),
        enif_make_uint64(env, s->attributed_wait_ns),
        enif_make_uint64(env, s->unattributed_wait_ns),
        pid_term(env, x, s->waiting_on_pid),
        children_term(env, x->graph, s),
        status_term(env, x, s),
        kind_term(s),
        pid_term(env, x, s->opener_pid),
        causes_term(env, s),
        enif_make_uint(env, s->wakes),
        enif_make_uint(env, s->wire),
        enif_make_uint64(env, s->gc_ns),
        enif_make_uint64(env, s->runnable_ns)};
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, values, sizeof(keys) / sizeof(keys[0]), &map);
    return map;
}

static ERL_NIF_TERM edge_term(ErlNifEnv *env, const fo_edge_info *e)
{
    ERL_NIF_TERM keys[] = {fo_atom_waiter_span_id, fo_atom_waker_span_id, fo_atom_started_ns,
                           fo_atom_ended_ns,       fo_atom_attributed_ns, fo_atom_wakes};
    ERL_NIF_TERM values[] = {enif_make_uint(env, e->waiter_span_id), enif_make_uint(env, e->waker_span_id),
                             enif_make_int64(env, e->started_ns),    enif_make_int64(env, e->ended_ns),
                             enif_make_uint64(env, e->attributed_ns), enif_make_uint(env, e->wakes)};
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, values, sizeof(keys) / sizeof(keys[0]), &map);
    return map;
}

static ERL_NIF_TERM stats_term(ErlNifEnv *env, const fo_graph_stats *st, uint64_t remote_limit_hits)
{
    ERL_NIF_TERM keys[] = {fo_atom_spans,           fo_atom_dropped_spans,        fo_atom_orphan_requests,
                           fo_atom_unmatched_replies, fo_atom_late_replies,       fo_atom_delegated_replies,
                           fo_atom_processes,       fo_atom_wakes,                fo_atom_attributed_wakes,
                           fo_atom_joins,           fo_atom_leaves,               fo_atom_continuations,
                           fo_atom_dropped_continuations, fo_atom_edges,          fo_atom_edge_limit_hits,
                           fo_atom_note_overflows,  fo_atom_remote_calls,         fo_atom_remote_requests,
                           fo_atom_remote_limit_hits, fo_atom_remote_sends,       fo_atom_remote_joins,
                           fo_atom_runnable_wakes,  fo_atom_collections};
    ERL_NIF_TERM values[] = {enif_make_uint64(env, st->spans),           enif_make_uint64(env, st->dropped_spans),
                             enif_make_uint64(env, st->orphan_requests), enif_make_uint64(env, st->unmatched_replies),
                             enif_make_uint64(env, st->late_replies),    enif_make_uint64(env, st->delegated_replies),
                             enif_make_uint64(env, st->processes),       enif_make_uint64(env, st->wakes),
                             enif_make_uint64(env, st->attributed_wakes), enif_make_uint64(env, st->joins),
                             enif_make_uint64(env, st->leaves),          enif_make_uint64(env, st->continuations),
                             enif_make_uint64(env, st->dropped_continuations), enif_make_uint64(env, st->edges),
                             enif_make_uint64(env, st->edge_limit_hits), enif_make_uint64(env, st->note_overflows),
                             enif_make_uint64(env, st->remote_calls), enif_make_uint64(env, st->remote_requests),
                             enif_make_uint64(env, remote_limit_hits), enif_make_uint64(env, st->remote_sends),
                             enif_make_uint64(env, st->remote_joins), enif_make_uint64(env, st->runnable_wakes),
                             enif_make_uint64(env, st->collections)};
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, values, sizeof(keys) / sizeof(keys[0]), &map);
    return map;
}

static ERL_NIF_TERM followers_term(ErlNifEnv *env, const fo_xproc *x, const fo_graph *g)
{
    ERL_NIF_TERM list = enif_make_list(env, 0);
    uint32_t n = fo_graph_followers(g, NULL, 0);
    uint64_t *pids = n > 0 ? enif_alloc(sizeof(uint64_t) * n) : NULL;
    if (pids == NULL)
        return list;
    fo_graph_followers(g, pids, n);
    for (uint32_t i = n; i-- > 0;)
        list = enif_make_list_cell(env, pid_term(env, x, pids[i]), list);
    enif_free(pids);
    return list;
}

ERL_NIF_TERM fo_export_graph(ErlNifEnv *env, const fo_xproc *x)
{
    const fo_graph *g = x->graph;
    ERL_NIF_TERM spans = enif_make_list(env, 0);
    for (uint32_t id = fo_graph_span_count(g); id-- > 0;) {
        fo_span_info info;
        if (fo_graph_span(g, id, &info))
            spans = enif_make_list_cell(env, span_term(env, x, &info), spans);
    }
    ERL_NIF_TERM edges = enif_make_list(env, 0);
    for (uint32_t id = fo_graph_edge_count(g); id-- > 0;) {
        fo_edge_info info;
        if (fo_graph_edge(g, id, &info))
            edges = enif_make_list_cell(env, edge_term(env, &info), edges);
    }
    int64_t offset = (int64_t)enif_monotonic_time(ERL_NIF_NSEC) - fo_tracer_clock_ns();
    ERL_NIF_TERM keys[] = {fo_atom_spans, fo_atom_stats, fo_atom_clock_offset_ns, fo_atom_edges, fo_atom_followers};
    ERL_NIF_TERM values[] = {spans, stats_term(env, fo_graph_get_stats(g), x->remote->limit_hits),
                             enif_make_int64(env, offset), edges, followers_term(env, x, g)};
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, values, sizeof(keys) / sizeof(keys[0]), &map);
    return map;
}
