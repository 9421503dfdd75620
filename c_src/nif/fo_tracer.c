#include "fo_tracer.h"

#include <string.h>

#include "fo_atoms.h"
#include "fo_decode.h"
#include "fo_graph_tracer.h"
#include "fo_next.h"
#include "fo_resource.h"

static int is_our_tag(ERL_NIF_TERM tag)
{
    return tag == fo_atom_call || tag == fo_atom_return_to || tag == fo_atom_in || tag == fo_atom_out ||
           tag == fo_atom_exit || tag == fo_atom_in_exiting || tag == fo_atom_out_exiting;
}

/* enabled/3 runs before every event, maybe several times, on any scheduler
 * thread (dirty ones included). For event tags it only looks at the tag:
 * the resource lookup costs as much as the rest of our per-event work, and
 * trace/5 checks the session anyway (a stopped one drops the event). The
 * VM's trace_status check gets the full answer, so a tracer whose session
 * is stopped or gone is removed from the process. */
ERL_NIF_TERM fo_tracer_enabled(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ERL_NIF_TERM tag = argv[0];
    if (argv[1] == fo_atom_graph)
        return fo_graph_tracer_enabled(env, tag);
    if (fo_next_is_state(env, argv[1]))
        return fo_next_enabled(env, argv);
    if (tag != fo_atom_trace_status)
        return is_our_tag(tag) ? fo_atom_trace : fo_atom_discard;
    fo_session_res *res;
    if (!fo_resource_get(env, argv[1], &res) || !atomic_load_explicit(&res->active, memory_order_relaxed))
        return fo_atom_remove;
    return fo_atom_trace;
}

/* The call's caller, from the {message, {caller}} match-spec result. */
static const ERL_NIF_TERM *caller_of(ErlNifEnv *env, ERL_NIF_TERM opts, ERL_NIF_TERM *slot)
{
    if (enif_get_map_value(env, opts, fo_atom_match_spec_result, slot) ||
        enif_get_map_value(env, opts, fo_atom_extra, slot))
        return slot;
    return NULL;
}

/* Real tracing passes the timestamp *kind* in Opts, so events are stamped
 * here, on the tracer clock. A session made for replay takes the recorded
 * integer timestamp (nanoseconds) from Opts instead. */
static int64_t stamp(ErlNifEnv *env, const fo_session_res *res, ERL_NIF_TERM opts)
{
    ERL_NIF_TERM value;
    ErlNifSInt64 recorded;
    if (res->replay && enif_get_map_value(env, opts, fo_atom_timestamp, &value) &&
        enif_get_int64(env, value, &recorded))
        return recorded;
    return fo_tracer_clock_ns();
}

ERL_NIF_TERM fo_tracer_trace(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ErlNifPid pid;
    if (argv[1] == fo_atom_graph)
        return fo_graph_tracer_trace(env, argv);
    if (fo_next_is_state(env, argv[1]))
        return fo_next_trace(env, argv);
    if (!fo_resource_get(env, argv[1], &res) || !enif_is_map(env, argv[4]))
        return enif_make_badarg(env);
    if (!enif_get_local_pid(env, argv[2], &pid))
        return fo_atom_ok; /* ports and seq_trace labels are not ours here */
    if (!atomic_load_explicit(&res->active, memory_order_relaxed))
        return fo_atom_ok; /* stopped: finish/2 may hold the lock for long */
    int64_t ts = stamp(env, res, argv[4]);
    fo_event ev;
    memset(&ev, 0, sizeof(ev));
    ERL_NIF_TERM slot;
    fo_decode_result decoded =
        fo_decode_event(env, argv[0], argv[3], argv[0] == fo_atom_call ? caller_of(env, argv[4], &slot) : NULL, &ev);
    if (decoded == FO_DECODED && ev.kind == FO_EV_CALL && ev.mfa.module == (uint64_t)fo_atom_native_module)
        return fo_atom_ok; /* our own NIFs (stop/1 ending the trace) */
    ev.pid = (uint64_t)pid.pid;
    ev.ts_ns = ts;
    fo_spin_lock(&res->lock);
    if (res->core != NULL && atomic_load_explicit(&res->active, memory_order_relaxed)) {
        fo_decode_apply(res->core, decoded, &ev);
        fo_resource_account_sometimes(res);
    }
    fo_spin_unlock(&res->lock);
    return fo_atom_ok;
}
