/* Tracer callbacks of graph traces: decode, route to the session, and hand
 * the event to the core (fo_follow), which owns every rule. */
#include "fo_graph_tracer.h"

#include <string.h>

#include "fo_atoms.h"
#include "fo_decode.h"
#include "fo_cpu_helpers.h"
#include "fo_drainer.h"
#include "fo_follow.h"
#include "fo_perf.h"
#include "fo_router.h"
#include "fo_seq.h"
#include "fo_wake_note.h"
#include "fo_xproc.h"

ERL_NIF_TERM fo_graph_tracer_enabled(ErlNifEnv *env, ERL_NIF_TERM tag)
{
    (void)env;
    if (tag == fo_atom_trace_status)
        return fo_router_sessions() > 0 ? fo_atom_trace : fo_atom_remove;
    if (tag == fo_atom_call || tag == fo_atom_return_to || tag == fo_atom_in || tag == fo_atom_out ||
        tag == fo_atom_exit || tag == fo_atom_in_exiting || tag == fo_atom_out_exiting ||
        tag == fo_atom_seq_trace || tag == fo_atom_receive || tag == fo_atom_spawned ||
        fo_decode_is_collection_tag(tag))
        return fo_atom_trace;
    /* send events only exist so the send match spec runs; spawn, link... */
    return fo_atom_discard;
}

/* What the core said about processes joining or leaving, acted on once the
 * session's lock is released (messages are not sent under a spinlock). */
#define MAX_CHANGES 8

typedef struct {
    fo_session_res *res;
    uint32_t count;
    uint64_t pids[MAX_CHANGES];
    uint8_t left[MAX_CHANGES];
} changes;

/* Routing changes at once, under the session's lock: a process that just
 * joined may run its first events on another scheduler right away. */
static void on_change(void *arg, uint64_t pid, fo_follow_change change)
{
    changes *c = arg;
    if (change == FO_FOLLOW_JOINED)
        fo_router_map_pid(pid, c->res);
    else
        fo_router_unmap_pid(pid, c->res);
    if (c->count < MAX_CHANGES) {
        c->pids[c->count] = pid;
        c->left[c->count] = change == FO_FOLLOW_LEFT;
        c->count++;
    }
}

static void send_pid(ErlNifEnv *env, const ErlNifPid *to, ERL_NIF_TERM tag, uint64_t key)
{
    ErlNifEnv *msg_env = enif_alloc_env();
    if (msg_env == NULL)
        return;
    ErlNifPid pid;
    pid.pid = (ERL_NIF_TERM)key;
    enif_send(env, to, msg_env, enif_make_tuple2(msg_env, tag, enif_make_pid(msg_env, &pid)));
    enif_free_env(msg_env);
}

/* Sample traces have no call events for a follower: its owner samples it
 * instead, so it is told of each span a follower starts (one message per
 * span, not per event). Every trace's owner is told of followers that
 * left: it turns their trace flags off. */
static void tell(ErlNifEnv *env, const changes *c, int watch, ErlNifPid watcher, int has_owner,
                 ErlNifPid owner)
{
    for (uint32_t i = 0; i < c->count; i++) {
        if (c->left[i] && has_owner)
            send_pid(env, &owner, fo_atom_flame_on_left, c->pids[i]);
        else if (!c->left[i] && watch && c->pids[i] != fo_xproc_root(c->res->xproc))
            send_pid(env, &watcher, fo_atom_flame_on_callee, c->pids[i]);
    }
}

/* Runs fn on the session's core when it is live, then tells who must know. */
typedef void (*follow_fn)(const fo_follow *f, void *data);

static void with_follow(ErlNifEnv *env, fo_session_res *res, follow_fn fn, void *data)
{
    changes c;
    c.res = res;
    c.count = 0;
    fo_spin_lock(&res->lock);
    int live = res->core != NULL && atomic_load_explicit(&res->active, memory_order_relaxed);
    const fo_xproc *x = res->xproc;
    if (live) {
        fo_follow f = {res->core, x->graph, on_change, &c};
        fn(&f, data);
        fo_resource_account_sometimes(res);
    }
    int watch = x->watch_callees, has_owner = x->has_owner;
    ErlNifPid watcher = x->watcher, owner = x->owner;
    fo_spin_unlock(&res->lock);
    tell(env, &c, watch, watcher, has_owner, owner);
}

/* --- seq_trace ------------------------------------------------------------ */

typedef struct {
    ErlNifEnv *env;
    ERL_NIF_TERM info;
    fo_remote *remote;
    int decoded;
    fo_corr corr;
    int64_t ts;
    uint64_t thread; /* CPU-sampled traces: the thread this runs on; else 0 */
} seq_data;

/* Decoded under the session's lock: remote processes get keys of this
 * trace's table. */
static void apply_seq(const fo_follow *f, void *data)
{
    seq_data *d = data;
    d->decoded = fo_seq_decode(d->env, d->info, &d->corr, d->remote);
    if (d->decoded)
        fo_follow_correlation(f, &d->corr, d->ts);
    /* the receiver takes the message running, on this thread: its `in`
     * may have come before it worked for the trace */
    if (d->decoded && d->thread != 0 && !d->corr.is_send && d->corr.to != 0)
        fo_follow_running(f, d->corr.to, d->ts, d->thread);
}

// trace(seq_trace, graph, Label, Info, Opts)
static void on_seq_trace(ErlNifEnv *env, ERL_NIF_TERM label_term, ERL_NIF_TERM info)
{
    ErlNifUInt64 label;
    seq_data d;
    if (!enif_get_uint64(env, label_term, &label))
        return;
    fo_session_res *res = fo_router_by_label(label);
    if (res == NULL)
        return; /* a stale label: its trace is over */
    d.env = env;
    d.info = info;
    d.remote = res->xproc->remote;
    d.decoded = 0;
    d.ts = fo_tracer_clock_ns();
    d.thread = res->cpu_sampled ? fo_perf_thread_id() : 0;
    with_follow(env, res, apply_seq, &d);
    /* a root that served this request goes back to its own trace */
    if (d.decoded && d.corr.kind == FO_CORR_REPLY && d.corr.is_send && d.corr.from != fo_xproc_root(res->xproc))
        fo_router_restore_root(d.corr.from);
    enif_release_resource(res);
}

/* --- a follower's own events ------------------------------------------------ */

/* Who ended a wait, from a receive event: the sender (the receive match
 * spec's result), a port (its messages carry it: {tcp, Port, Data},
 * {Port, {data, D}}, ...) or, with no sender, a timer (receive ... after
 * is a receive of `timeout`; send_after and start_timer have no sender). */
fo_waker_kind fo_graph_waker(ErlNifEnv *env, ERL_NIF_TERM msg, const ERL_NIF_TERM *sender, uint64_t *key)
{
    ErlNifPid pid;
    *key = 0;
    if (sender != NULL && enif_get_local_pid(env, *sender, &pid)) {
        *key = (uint64_t)pid.pid;
        return FO_WAKER_PROCESS;
    }
    /* a message from another node: the receive pattern gives its node */
    if (sender != NULL && enif_is_atom(env, *sender) && *sender != fo_atom_undefined)
        return FO_WAKER_PROCESS;
    int arity;
    const ERL_NIF_TERM *items;
    if (enif_get_tuple(env, msg, &arity, &items) && arity >= 2 &&
        (enif_is_port(env, items[0]) || enif_is_port(env, items[1])))
        return FO_WAKER_PORT;
    if (sender != NULL && *sender == fo_atom_undefined)
        return FO_WAKER_TIMER;
    if (msg == fo_atom_timeout)
        return FO_WAKER_TIMER;
    if (enif_get_tuple(env, msg, &arity, &items) && arity == 3 && items[0] == fo_atom_timeout &&
        enif_is_ref(env, items[1]))
        return FO_WAKER_TIMER;
    return FO_WAKER_PROCESS; /* a process, not known which (a remote one, or no match spec) */
}

typedef struct {
    fo_event ev;
    uint64_t reason;
    fo_waker_kind waker;
    uint64_t sender;
    int receive;
    /* a DOWN or 'EXIT' of a process of another node: the end of a spawn
     * there (no token, no sender: the message says which) */
    ErlNifEnv *env;
    fo_remote *remote;
    ERL_NIF_TERM gone;
    int has_gone;
    uint32_t wire;
    ERL_NIF_TERM node; /* the sender's node, for a message from another node; 0: none */
} own_data;

/* {'DOWN', Ref, process, Pid, _} (Ref a spawn_request's, as :erpc's) or
 * {'EXIT', Pid, _} with Pid on another node: its term, and the wire of
 * Ref (0 for an 'EXIT'). */
static int remote_end(ErlNifEnv *env, ERL_NIF_TERM msg, ERL_NIF_TERM *pid, uint32_t *wire)
{
    int arity;
    const ERL_NIF_TERM *items;
    ErlNifPid local;
    if (!enif_get_tuple(env, msg, &arity, &items))
        return 0;
    if (arity == 5 && items[0] == fo_atom_DOWN && items[2] == fo_atom_process && enif_is_ref(env, items[1])) {
        *pid = items[3];
        *wire = fo_seq_wire(env, items[1]);
    } else if (arity == 3 && items[0] == fo_atom_EXIT) {
        *pid = items[1];
        *wire = 0;
    } else {
        return 0;
    }
    return enif_is_pid(env, *pid) && !enif_get_local_pid(env, *pid, &local);
}

/* A receive event of Msg (extra: the receive pattern's result, if any):
 * its waker, a remote end, a remote sender's node. */
static void read_receive(ErlNifEnv *env, fo_remote *remote, ERL_NIF_TERM msg, const ERL_NIF_TERM *extra,
                         own_data *d)
{
    d->receive = 1;
    d->waker = fo_graph_waker(env, msg, extra, &d->sender);
    d->has_gone = remote_end(env, msg, &d->gone, &d->wire);
    d->env = env;
    d->remote = remote;
    /* the receive pattern gives a remote sender's node */
    if (extra != NULL && d->sender == 0 && enif_is_atom(env, *extra) && *extra != fo_atom_undefined)
        d->node = *extra;
}

static void apply_own(const fo_follow *f, void *data)
{
    own_data *d = data;
    if (d->receive && d->has_gone) {
        uint64_t child = d->remote != NULL ? fo_remote_key(d->remote, d->env, d->gone) : 0;
        if (child != 0 && fo_graph_remote_down(f->graph, d->ev.pid, child, d->wire, d->ev.ts_ns))
            d->sender = child;
    } else if (d->receive && d->node != 0) {
        /* an answer to a message sent to a registered name there */
        uint64_t names[8];
        uint32_t n = fo_remote_names_on(d->remote, d->node, names, 8);
        for (uint32_t i = 0; i < n; i++) {
            if (fo_graph_remote_name_answered(f->graph, d->ev.pid, names[i], d->ev.ts_ns)) {
                d->sender = names[i];
                break;
            }
        }
    }
    if (d->receive)
        fo_follow_received(f, d->ev.pid, d->ev.ts_ns, d->waker, d->sender);
    else if (d->ev.kind == FO_EV_EXIT)
        fo_follow_exit(f, d->ev.pid, d->ev.ts_ns, d->reason);
    else
        fo_follow_event(f, &d->ev);
}

typedef struct {
    uint64_t parent;
    uint64_t child;
    int64_t ts;
} spawn_data;

static void apply_spawned(const fo_follow *f, void *data)
{
    const spawn_data *d = data;
    fo_follow_spawned(f, d->parent, d->child, d->ts);
}

// trace(spawned, graph, Child, Parent, Opts): the parent's trace, if any
static void on_spawned(ErlNifEnv *env, const ERL_NIF_TERM argv[])
{
    ErlNifPid child, parent;
    if (!enif_get_local_pid(env, argv[2], &child) || !enif_get_local_pid(env, argv[3], &parent))
        return;
    fo_session_res *res = fo_router_by_pid((uint64_t)parent.pid);
    if (res == NULL)
        return;
    spawn_data d = {(uint64_t)parent.pid, (uint64_t)child.pid, fo_tracer_clock_ns()};
    with_follow(env, res, apply_spawned, &d);
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
    own_data d;
    memset(&d, 0, sizeof(d));
    int64_t ts = fo_tracer_clock_ns();
    ERL_NIF_TERM extra;
    int has_extra = enif_is_map(env, argv[4]) && enif_get_map_value(env, argv[4], fo_atom_match_spec_result, &extra);
    if (argv[0] == fo_atom_receive) {
        read_receive(env, res->xproc->remote, argv[3], has_extra ? &extra : NULL, &d);
    } else {
        fo_decode_result decoded =
            fo_decode_event(env, argv[0], argv[3], argv[0] == fo_atom_call && has_extra ? &extra : NULL, &d.ev);
        /* our own NIF calls (stopping the trace) are not the trace's work */
        if (decoded != FO_DECODED || (d.ev.kind == FO_EV_CALL && d.ev.mfa.module == (uint64_t)fo_atom_native_module)) {
            enif_release_resource(res);
            return;
        }
        /* allocation profiles: a collection's heap sizes, as a
         * single-process trace reads them (fo_tracer.c) */
        if (res->alloc && (d.ev.kind == FO_EV_GC_START || d.ev.kind == FO_EV_GC_END))
            fo_decode_gc_heap(env, argv[3], &d.ev, (fo_alloc_kind)res->alloc);
        if (d.ev.kind == FO_EV_EXIT) {
            fo_spin_lock(&res->lock);
            d.reason = fo_xproc_reason_key(env, res->xproc, argv[3]);
            fo_spin_unlock(&res->lock);
        }
    }
    d.ev.pid = (uint64_t)pid.pid;
    d.ev.ts_ns = ts;
    ErlNifPid helper;
    if (res->cpu_sampled && d.ev.kind == FO_EV_IN) {
        /* native mode: this thread runs the process next */
        fo_perf_note_thread();
        d.ev.flags |= FO_EVF_HAS_THREAD;
        d.ev.thread = fo_perf_thread_id();
    } else if (res->cpu_sampled && d.ev.kind == FO_EV_OUT && (d.ev.flags & FO_EVF_HAS_MFA) &&
               fo_cpu_asks_due(res->asks, d.ev.pid, &d.ev.mfa, ts) &&
               fo_cpu_helpers_for(fo_perf_thread_id(), &helper)) {
        fo_drainer_send_context(&helper, res->xproc->label, d.ev.pid, &d.ev.mfa);
    }
    with_follow(env, res, apply_own, &d);
    fo_wake_note(&res->wakes, d.ev.kind, d.ev.pid);
    enif_release_resource(res);
}

ERL_NIF_TERM fo_graph_tracer_trace(ErlNifEnv *env, const ERL_NIF_TERM argv[])
{
    if (argv[0] == fo_atom_seq_trace)
        on_seq_trace(env, argv[2], argv[3]);
    else if (argv[0] == fo_atom_spawned)
        on_spawned(env, argv);
    else
        on_process_event(env, argv);
    return fo_atom_ok;
}

/* --- mode :process: the root's trace messages ------------------------------ */

void fo_graph_ingest(ErlNifEnv *env, fo_session_res *res, ERL_NIF_TERM msg)
{
    fo_xproc *x = res->xproc;
    fo_follow f = {res->core, x->graph, NULL, NULL};
    fo_event ev;
    memset(&ev, 0, sizeof(ev));
    fo_decode_result decoded = fo_decode_trace_msg(env, msg, res->native_per_second, x->ingest_offset_ns, &ev);
    if (res->alloc && decoded == FO_DECODED)
        fo_decode_trace_msg_heap(env, msg, &ev, (fo_alloc_kind)res->alloc);
    int arity;
    const ERL_NIF_TERM *items;
    if (decoded != FO_DECODE_MALFORMED && enif_get_tuple(env, msg, &arity, &items) && (arity == 5 || arity == 6) &&
        items[2] == fo_atom_receive) {
        /* {trace_ts, Pid, receive, Msg, Sender, Ts} with the receive
         * pattern; without it no sender (the core then asks the tokened
         * messages the root took). Settled as a follower's own receive
         * event is: a remote end or a remote name's answer included. */
        own_data d;
        memset(&d, 0, sizeof(d));
        read_receive(env, x->remote, items[3], arity == 6 ? &items[4] : NULL, &d);
        d.ev.pid = ev.pid;
        d.ev.ts_ns = ev.ts_ns;
        fo_session_count_ignored(res->core, 1);
        apply_own(&f, &d);
        return;
    }
    /* The stacks take the messages as they are, as a single-process
     * session does; the graph then catches up with the process. */
    fo_decode_apply(res->core, decoded, &ev);
    if (decoded == FO_DECODED && fo_graph_following(x->graph, ev.pid))
        fo_follow_late_event(&f, &ev, 0);
}
