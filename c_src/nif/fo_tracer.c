#include "fo_tracer.h"

#include <string.h>

#include "fo_atoms.h"
#include "fo_decode.h"
#include "fo_resource.h"

/* enabled/3 may run several times per event and on any scheduler thread
 * (dirty ones included): it only reads the resource's atomic flag. */
ERL_NIF_TERM fo_tracer_enabled(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ERL_NIF_TERM tag = argv[0];
    if (!fo_resource_get(env, argv[1], &res))
        return fo_atom_remove;
    /* stopped or finished: drop events; the trace_status check takes the
     * tracer off processes that still name this session */
    if (!atomic_load_explicit(&res->active, memory_order_relaxed))
        return tag == fo_atom_trace_status ? fo_atom_remove : fo_atom_discard;
    if (tag == fo_atom_call || tag == fo_atom_return_to || tag == fo_atom_in || tag == fo_atom_out ||
        tag == fo_atom_exit || tag == fo_atom_in_exiting || tag == fo_atom_out_exiting ||
        tag == fo_atom_trace_status)
        return fo_atom_trace;
    return fo_atom_discard;
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
    if (!fo_resource_get(env, argv[1], &res) || !enif_is_map(env, argv[4]))
        return enif_make_badarg(env);
    if (!enif_get_local_pid(env, argv[2], &pid))
        return fo_atom_ok; /* ports and seq_trace labels are not ours here */
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
    enif_mutex_lock(res->lock);
    if (res->core != NULL && atomic_load_explicit(&res->active, memory_order_relaxed)) {
        if (decoded == FO_DECODED)
            fo_session_apply(res->core, &ev);
        else if (decoded == FO_DECODE_IGNORED)
            fo_session_count_ignored(res->core, 1);
        else
            fo_session_count_malformed(res->core, 1);
    }
    enif_mutex_unlock(res->lock);
    return fo_atom_ok;
}
