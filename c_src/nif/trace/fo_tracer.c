#include "fo_tracer.h"

#include <stdio.h>
#include <string.h>

#include "fo_atoms.h"
#include "fo_decode.h"
#include "fo_drainer.h"
#include "fo_graph_tracer.h"
#include "fo_handle.h"
#include "fo_next.h"
#include "fo_cpu_helpers.h"
#include "fo_perf.h"
#include "fo_resource.h"
#include "fo_tail.h"
#include "fo_tracer_slots.h"
#include "fo_wake_note.h"

static int is_our_tag(ERL_NIF_TERM tag)
{
    return tag == fo_atom_call || tag == fo_atom_return_to || tag == fo_atom_in || tag == fo_atom_out ||
           tag == fo_atom_exit || tag == fo_atom_in_exiting || tag == fo_atom_out_exiting ||
           fo_decode_is_collection_tag(tag) || tag == fo_atom_garbage_collection || tag == fo_atom_receive;
}

/* The key of a tracer state that is not a live key: a stale key (or any
 * non-negative integer), which reaches nothing, or a session handle
 * (accepted too: the session takes a slot on first use, and its key is
 * 0 once it no longer takes events). 0 when the state is neither. */
static int state_key(ErlNifEnv *env, ERL_NIF_TERM state, ERL_NIF_TERM *key)
{
    ErlNifUInt64 value;
    if (enif_get_uint64(env, state, &value)) {
        *key = state;
        return 1;
    }
    fo_session_res *res;
    if (!fo_handle_get(env, state, &res))
        return 0;
    if (atomic_load_explicit(&res->slot_term, memory_order_relaxed) == 0 && res->xproc == NULL)
        fo_tracer_slots_register(env, res); /* refused once stopped: the key stays 0 */
    *key = atomic_load_explicit(&res->slot_term, memory_order_relaxed);
    return 1;
}

static int take_at_once(ErlNifEnv *env, const ERL_NIF_TERM argv[]);

static int remove_is_safe;
static unsigned erts_major; /* 0: unknown */

void fo_tracer_init(void)
{
    ErlNifSysInfo info;
    unsigned major = 0, minor = 0;
    enif_system_info(&info, sizeof(info));
    int read = info.erts_version != NULL && sscanf(info.erts_version, "%u.%u", &major, &minor) == 2;
    erts_major = read ? major : 0;
    remove_is_safe = read && (major > 13 || (major == 13 && minor >= 2));
}

unsigned fo_tracer_erts_major(void)
{
    return erts_major;
}

ERL_NIF_TERM fo_tracer_gone(void)
{
    return remove_is_safe ? fo_atom_remove : fo_atom_discard;
}

/* enabled/3 runs before every event, maybe several times, on any scheduler
 * thread (dirty ones included). For event tags it only looks at the tag;
 * trace/5 checks the session anyway (a stopped one drops the event). The
 * VM's trace_status check gets the full answer, so a tracer whose session
 * is stopped or gone is removed from the process. */
ERL_NIF_TERM fo_tracer_enabled(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ERL_NIF_TERM tag = argv[0];
    if (argv[1] == fo_atom_graph)
        return fo_graph_tracer_enabled(env, tag);
    /* a live key, the common case: no other test */
    if (fo_tracer_slots_live(argv[1])) {
        if (take_at_once(env, argv))
            return fo_atom_discard;
        return tag == fo_atom_trace_status || is_our_tag(tag) ? fo_atom_trace : fo_atom_discard;
    }
    if (fo_tail_is_state(env, argv[1]))
        return fo_tail_enabled(env, argv);
    if (fo_next_is_state(env, argv[1]))
        return fo_next_enabled(env, argv);
    if (tag != fo_atom_trace_status)
        return is_our_tag(tag) ? fo_atom_trace : fo_atom_discard;
    ERL_NIF_TERM key;
    return state_key(env, argv[1], &key) && fo_tracer_slots_live(key) ? fo_atom_trace : fo_tracer_gone();
}

/* Real tracing passes the timestamp *kind* in Opts, so events are stamped
 * here, on the session's clock (a raw reading: the fold scales it). A
 * session made for replay takes the recorded integer timestamp
 * (nanoseconds) from Opts instead. */
static int64_t stamp(ErlNifEnv *env, const fo_session_res *res, ERL_NIF_TERM opts)
{
    ERL_NIF_TERM value;
    ErlNifSInt64 recorded;
    if (res->replay && enif_get_map_value(env, opts, fo_atom_timestamp, &value) &&
        enif_get_int64(env, value, &recorded))
        return recorded;
    return fo_clock_read(&res->clock);
}

/* The ring is full: the drainer fell behind (or there is none), so this
 * process folds it, and the ring doubles (up to its limit) so that the
 * drainer has longer to keep up next time. Under the slot lock, so the session is alive and its
 * core too (finish takes the slot first). */
static fo_rec *fold_here(fo_session_res *res, ErlNifEnv *env)
{
    fo_spin_lock(&res->lock);
    if (res->core != NULL) {
        fo_resource_fold(res, env);
        res->ring.producer_folds++;
        fo_ring_grow(&res->ring);
        fo_resource_account(res);
    }
    fo_spin_unlock(&res->lock);
    return fo_ring_next(&res->ring);
}

/* The record to fill next (the ring folded first when it is full); NULL
 * when even that left no room. Caller holds res's slot. */
static fo_rec *next_rec(fo_session_res *res, ErlNifEnv *env)
{
    fo_rec *rec = fo_ring_next(&res->ring);
    return rec != NULL ? rec : fold_here(res, env);
}

static void put_mfa(const fo_mfa *mfa, uint64_t *module, uint64_t *function, uint16_t *arity)
{
    *module = mfa->module;
    *function = mfa->function;
    *arity = (uint16_t)mfa->arity;
}

/* Native mode: the `in` callback runs on the thread that runs the process
 * next (the record keeps it); a stop where no stack may be known for it
 * is asked about (fo_cpu_ask.h). ts is CLOCK_MONOTONIC there. */
static void note_cpu(fo_session_res *res, fo_rec *rec, ErlNifEnv *env, const fo_event *ev, uint64_t pid, int64_t ts)
{
    if (ev->kind == FO_EV_IN) {
        fo_perf_note_thread();
        rec->flags |= FO_EVF_HAS_THREAD;
        rec->caller_module = fo_perf_thread_id();
        return;
    }
    if (ev->kind != FO_EV_OUT || !(ev->flags & FO_EVF_HAS_MFA))
        return;
    /* atoms only: they go into a message */
    fo_event checked = *ev;
    ErlNifPid helper;
    ERL_NIF_TERM key = atomic_load_explicit(&res->slot_term, memory_order_relaxed);
    if (key == 0 || fo_decode_check_atoms(env, &checked) != FO_DECODED ||
        !fo_cpu_asks_due(res->asks, pid, &ev->mfa, ts) || !fo_cpu_helpers_for(fo_perf_thread_id(), &helper))
        return;
    /* At once, from here, to this thread's helper: it runs before the
     * process is scheduled again and reads the stack it stopped in. (A
     * trace across processes asks through the drainer: a message from
     * here would carry the traced process's seq_trace token.) */
    ErlNifEnv *msg_env = enif_alloc_env();
    if (msg_env == NULL)
        return;
    ErlNifPid about;
    about.pid = (ERL_NIF_TERM)pid;
    ERL_NIF_TERM mfa = enif_make_tuple3(msg_env, (ERL_NIF_TERM)ev->mfa.module, (ERL_NIF_TERM)ev->mfa.function,
                                        enif_make_uint(msg_env, ev->mfa.arity));
    ERL_NIF_TERM session = enif_make_tuple2(msg_env, fo_atom_slot, key);
    enif_send(env, &helper, msg_env,
              enif_make_tuple4(msg_env, fo_atom_flame_on_context, session, enif_make_pid(msg_env, &about), mfa));
    enif_free_env(msg_env);
}

static void append(ErlNifEnv *env, fo_session_res *res, fo_rec *rec, const fo_event *decoded, uint64_t pid,
                   int64_t ts);

/* Caller holds res's slot: stamp, decode, append. 0 when opts is not a
 * map (a call made by hand: badarg). */
static int record(ErlNifEnv *env, fo_session_res *res, const ERL_NIF_TERM argv[], uint64_t pid)
{
    fo_ring *ring = &res->ring;
    fo_rec *rec = next_rec(res, env);
    if (rec == NULL)
        return 1;
    /* read first: the counter's latency overlaps the decoding below */
    int64_t ts = stamp(env, res, argv[4]);
    fo_event ev;
    ERL_NIF_TERM caller = 0;
    int has_caller = 0;
    if (argv[0] == fo_atom_call) {
        /* the {message, {caller}} match-spec result, when it is there */
        has_caller = enif_get_map_value(env, argv[4], fo_atom_match_spec_result, &caller) ||
                     enif_get_map_value(env, argv[4], fo_atom_extra, &caller);
        if (!has_caller && !enif_is_map(env, argv[4]))
            return 0;
    } else if (!enif_is_map(env, argv[4])) {
        return 0;
    }
    /* the atoms are checked by the fold, off this process */
    fo_decode_result decoded = fo_decode_event_deferred(env, argv[0], argv[3], has_caller ? &caller : NULL, &ev);
    if (decoded != FO_DECODED) {
        atomic_fetch_add_explicit(decoded == FO_DECODE_IGNORED ? &ring->ignored : &ring->malformed, 1,
                                  memory_order_relaxed);
        return 1;
    }
    if (ev.kind == FO_EV_CALL && ev.mfa.module == (uint64_t)fo_atom_native_module)
        return 1; /* our own NIFs (stop/1 ending the trace) */
    if (res->alloc && (ev.kind == FO_EV_GC_START || ev.kind == FO_EV_GC_END))
        fo_decode_gc_heap(env, argv[3], &ev, (fo_alloc_kind)res->alloc);
    append(env, res, rec, &ev, pid, ts);
    return 1;
}

/* Fills rec with ev (decoded) and publishes it. Caller holds res's slot. */
static void append(ErlNifEnv *env, fo_session_res *res, fo_rec *rec, const fo_event *decoded, uint64_t pid,
                   int64_t ts)
{
    fo_ring *ring = &res->ring;
    fo_event ev = *decoded;
    rec->ts = ts;
    rec->pid = pid;
    rec->kind = (uint8_t)ev.kind;
    rec->flags = (uint8_t)ev.flags;
    if (ev.flags & FO_EVF_HAS_MFA)
        put_mfa(&ev.mfa, &rec->module, &rec->function, &rec->arity);
    if (ev.flags & FO_EVF_HAS_CALLER)
        put_mfa(&ev.caller, &rec->caller_module, &rec->caller_function, &rec->caller_arity);
    if (res->alloc && (ev.kind == FO_EV_GC_START || ev.kind == FO_EV_GC_END))
        rec->caller_module = ev.heap_words; /* a gc event has no caller: its heap words go there */
    if (res->cpu_sampled)
        note_cpu(res, rec, env, &ev, pid, ts);
    if (fo_ring_publish(ring) >= ring->capacity / 2 &&
        !atomic_load_explicit(&ring->drain_queued, memory_order_relaxed) &&
        !atomic_exchange(&ring->drain_queued, 1) && !fo_drainer_request(res))
        atomic_store(&ring->drain_queued, 0);
    fo_wake_note(&res->wakes, ev.kind, pid);
}

/* A CPU-sampled session's `in` or collection event, taken in enabled/3,
 * which then says discard: the tag and the time (read here) are all the
 * session keeps of them, and the VM then builds nothing for trace/5: no
 * heap info list for a collection (two walks of the process's heap
 * data, a temporary allocation), no {M, F, A} on the process's heap and
 * no function lookup for an `in`, and no second callback. 0 when the
 * event goes the usual way: another kind of session, a replay, or one
 * that reads heap sizes (alloc). */
static int take_at_once(ErlNifEnv *env, const ERL_NIF_TERM argv[])
{
    fo_event ev;
    if (!fo_decode_tag_only(argv[0], &ev))
        return 0;
    ERL_NIF_TERM key = argv[1];
    fo_session_res *res = fo_tracer_slots_acquire(key);
    if (res == NULL)
        return 0;
    ErlNifPid pid;
    int taken = res->cpu_sampled && !res->replay && !res->alloc && enif_get_local_pid(env, argv[2], &pid);
    if (taken) {
        fo_rec *rec = next_rec(res, env);
        if (rec != NULL)
            append(env, res, rec, &ev, (uint64_t)pid.pid, fo_clock_read(&res->clock));
    }
    fo_tracer_slots_release(key);
    return taken;
}

ERL_NIF_TERM fo_tracer_trace(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    if (argv[1] == fo_atom_graph)
        return fo_graph_tracer_trace(env, argv);
    ErlNifPid pid;
    ERL_NIF_TERM key = argv[1];
    /* The common case, a live key, is looked up without decoding it. A
     * stopped or finished session left its slot: the event is dropped. */
    fo_session_res *res = fo_tracer_slots_acquire(key);
    if (res == NULL) {
        if (fo_tail_is_state(env, argv[1]))
            return fo_tail_trace(env, argv);
        if (fo_next_is_state(env, argv[1]))
            return fo_next_trace(env, argv);
        if (!state_key(env, argv[1], &key))
            return enif_make_badarg(env);
        res = fo_tracer_slots_acquire(key);
    }
    if (res == NULL || !enif_get_local_pid(env, argv[2], &pid)) {
        /* ports and seq_trace labels are not ours here */
        if (res != NULL)
            fo_tracer_slots_release(key);
        return enif_is_map(env, argv[4]) ? fo_atom_ok : enif_make_badarg(env);
    }
    int ok = record(env, res, argv, (uint64_t)pid.pid);
    fo_tracer_slots_release(key);
    return ok ? fo_atom_ok : enif_make_badarg(env);
}
