#include "fo_graph_tracer.h"

#include <string.h>

#include "fo_atoms.h"
#include "fo_decode.h"
#include "fo_router.h"
#include "fo_seq.h"

ERL_NIF_TERM fo_graph_tracer_enabled(ErlNifEnv *env, ERL_NIF_TERM tag)
{
    (void)env;
    if (tag == fo_atom_trace_status)
        return fo_router_sessions() > 0 ? fo_atom_trace : fo_atom_remove;
    if (tag == fo_atom_call || tag == fo_atom_return_to || tag == fo_atom_in || tag == fo_atom_out ||
        tag == fo_atom_exit || tag == fo_atom_in_exiting || tag == fo_atom_out_exiting ||
        tag == fo_atom_seq_trace)
        return fo_atom_trace;
    /* send events only exist so the send match spec runs; spawn, link... */
    return fo_atom_discard;
}

/* A callee's part of the trace ended (its span replied): close its stack
 * timeline there, so work it does later under a stale label is not
 * charged. Its next span starts a fresh timeline. */
static void pause_timeline(fo_session_res *res, uint64_t pid, int64_t ts)
{
    if (pid == res->root_pid || fo_graph_active(res->graph, pid))
        return;
    fo_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.kind = FO_EV_EXIT;
    ev.pid = pid;
    ev.ts_ns = ts;
    fo_session_apply(res->core, &ev);
}

/* What the caller's current span has had explained so far. */
static uint64_t attributed_so_far(const fo_graph *g, uint64_t pid)
{
    fo_span_info span;
    uint32_t id = fo_graph_current_span(g, pid);
    return id != FO_NONE && fo_graph_span(g, id, &span) ? span.attributed_wait_ns : 0;
}

static void apply_seq(fo_session_res *res, const fo_seq_event *e, int64_t ts)
{
    fo_graph *g = res->graph;
    if (e->kind == FO_SEQ_REQUEST) {
        if (e->is_send) {
            fo_graph_request_sent(g, e->from, e->to, e->tag, ts);
            fo_session_call_started(res->core, e->from);
        } else
            fo_graph_request_received(g, e->to, e->from, e->tag, ts);
    } else if (e->is_send) {
        fo_graph_reply_sent(g, e->from, e->tag, ts);
        pause_timeline(res, e->from, ts);
    } else if (e->to != 0) {
        /* the part of this call's wait the callee explains leaves the
         * caller's WAITING leaf */
        uint64_t before = attributed_so_far(g, e->to);
        fo_graph_reply_received(g, e->to, e->tag, ts);
        uint64_t after = attributed_so_far(g, e->to);
        if (after > before)
            fo_session_attribute_wait(res->core, e->to, after - before);
    }
}

/* Sample traces have no call events for a callee: its owner samples it
 * instead, so it is told of each request a callee takes (one message per
 * request, not per event). */
static void tell_watcher(ErlNifEnv *env, fo_session_res *res, uint64_t callee)
{
    ErlNifEnv *msg_env = enif_alloc_env();
    if (msg_env == NULL)
        return;
    ErlNifPid pid;
    pid.pid = (ERL_NIF_TERM)callee;
    ERL_NIF_TERM msg = enif_make_tuple2(msg_env, fo_atom_flame_on_callee, enif_make_pid(msg_env, &pid));
    enif_send(env, &res->watcher, msg_env, msg);
    enif_free_env(msg_env);
}

// trace(seq_trace, graph, Label, Info, Opts)
static void on_seq_trace(ErlNifEnv *env, ERL_NIF_TERM label_term, ERL_NIF_TERM info)
{
    ErlNifUInt64 label;
    fo_seq_event e;
    if (!enif_get_uint64(env, label_term, &label) || !fo_seq_decode(env, info, &e))
        return;
    fo_session_res *res = fo_router_by_label(label);
    if (res == NULL)
        return; /* a stale label: its trace is over */
    int64_t ts = fo_tracer_clock_ns();
    /* A request received makes the receiver work for this trace: its call
     * events are routed here from now on (it got these flags from the send
     * match spec). */
    int taken = e.kind == FO_SEQ_REQUEST && !e.is_send;
    if (taken)
        fo_router_map_pid(e.to, res);
    fo_spin_lock(&res->lock);
    int live = res->core != NULL && atomic_load_explicit(&res->active, memory_order_relaxed);
    if (live)
        apply_seq(res, &e, ts);
    int tell = live && taken && res->watch_callees && e.to != res->root_pid;
    fo_spin_unlock(&res->lock);
    if (tell)
        tell_watcher(env, res, e.to);
    /* a root that served this request goes back to its own trace */
    if (e.kind == FO_SEQ_REPLY && e.is_send && e.from != res->root_pid)
        fo_router_restore_root(e.from);
    enif_release_resource(res);
}

// trace(Tag, graph, Pid, Term, Opts): a traced process's own event
static void on_process_event(ErlNifEnv *env, const ERL_NIF_TERM argv[])
{
    ErlNifPid pid;
    if (!enif_get_local_pid(env, argv[2], &pid))
        return;
    fo_session_res *res = fo_router_by_pid((uint64_t)pid.pid);
    if (res == NULL)
        return;
    int64_t ts = fo_tracer_clock_ns();
    fo_event ev;
    memset(&ev, 0, sizeof(ev));
    ERL_NIF_TERM caller;
    int has_caller = argv[0] == fo_atom_call && enif_is_map(env, argv[4]) &&
                     enif_get_map_value(env, argv[4], fo_atom_match_spec_result, &caller);
    fo_decode_result decoded = fo_decode_event(env, argv[0], argv[3], has_caller ? &caller : NULL, &ev);
    ev.pid = (uint64_t)pid.pid;
    ev.ts_ns = ts;
    int ours = decoded == FO_DECODED && ev.kind == FO_EV_CALL && ev.mfa.module == (uint64_t)fo_atom_native_module;
    fo_spin_lock(&res->lock);
    if (!ours && res->core != NULL && atomic_load_explicit(&res->active, memory_order_relaxed) &&
        fo_graph_active(res->graph, ev.pid)) {
        if (decoded == FO_DECODED && ev.kind == FO_EV_OUT && fo_graph_waiting_call(res->graph, ev.pid, NULL) > 0)
            ev.flags |= FO_EVF_IN_CALL;
        fo_decode_apply(res->core, decoded, &ev);
        fo_resource_account_sometimes(res);
        if (decoded == FO_DECODED && ev.kind == FO_EV_EXIT)
            fo_graph_exit(res->graph, ev.pid, ts, fo_resource_reason_key(env, res, argv[3]));
    }
    fo_spin_unlock(&res->lock);
    enif_release_resource(res);
}

ERL_NIF_TERM fo_graph_tracer_trace(ErlNifEnv *env, const ERL_NIF_TERM argv[])
{
    if (argv[0] == fo_atom_seq_trace)
        on_seq_trace(env, argv[2], argv[3]);
    else
        on_process_event(env, argv);
    return fo_atom_ok;
}
