#include "fo_sample.h"

#include <string.h>

#include "fo_atoms.h"
#include "fo_decode.h"
#include "fo_follow.h"
#include "fo_handle.h"
#include "fo_resource.h"
#include "fo_wake.h"
#include "fo_xproc.h"

/* Deeper stacks are cut at their root end (the VM's backtrace_depth caps
 * them long before this); the cut shows as a truncated stack. */
#define FO_SAMPLE_MAX_FRAMES 4096u

/* {slept, N}: ticks a sampler slept through (fo_wake.h), not a stack. */
#define FO_SAMPLE_SLEPT 0x100u

/* frames == NULL: the stack the process already has, `times` times. */
static ERL_NIF_TERM apply(ErlNifEnv *env, fo_session_res *res, uint64_t pid, int64_t ts, const fo_mfa *frames,
                          uint32_t count, uint64_t weight, unsigned how, uint32_t times)
{
    ERL_NIF_TERM result = fo_atom_stopped;
    fo_spin_lock(&res->lock);
    /* Ticks slept through still count once the trace stopped (until it is
     * finished): a sampler asleep when it stopped counts them then. */
    int taking = atomic_load_explicit(&res->active, memory_order_relaxed) || how == FO_SAMPLE_SLEPT;
    if (res->core != NULL && taking) {
        fo_resource_fold(res, env); /* the in/out events before this sample */
        /* A cross-process trace counts a follower only inside its spans,
         * as its events are (fo_follow.h). Ticks slept through are counts
         * only, and do not ask the graph: the sampler is woken at the
         * process's `in`, before the receive event that says what woke it,
         * and a sample in between would settle that wake as no message's. */
        fo_follow f = {res->core, res->xproc != NULL ? res->xproc->graph : NULL, NULL, NULL};
        if (how == FO_SAMPLE_SLEPT) {
            fo_session_count_slept(res->core, pid, times);
            result = fo_atom_ok;
        } else if (res->xproc != NULL && !fo_follow_before_sample(&f, pid)) {
            result = fo_atom_idle;
        } else {
            if (frames == NULL)
                fo_session_sample_same(res->core, pid, ts, weight, times);
            else
                fo_session_sample_as(res->core, pid, ts, frames, count, weight, how);
            fo_resource_account_sometimes(res);
            result = fo_atom_ok;
        }
    }
    fo_spin_unlock(&res->lock);
    return result;
}

ERL_NIF_TERM fo_sample_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    fo_session_res *res;
    ErlNifPid pid;
    ErlNifUInt64 weight;
    unsigned how = 0;
    if (argc == 5) {
        if (argv[4] == fo_atom_waited)
            how = FO_SAMPLE_WAITED;
        else if (argv[4] == fo_atom_leading)
            how = FO_SAMPLE_LEADING;
        else if (argv[4] == fo_atom_busy)
            how = FO_SAMPLE_BUSY;
        else if (argv[4] == fo_atom_waiting)
            how = FO_SAMPLE_WAITING;
        else if (argv[4] != fo_atom_plain)
            return enif_make_badarg(env);
    }
    if (!fo_handle_get(env, argv[0], &res) || !enif_get_local_pid(env, argv[1], &pid) ||
        !enif_get_uint64(env, argv[3], &weight))
        return enif_make_badarg(env);
    /* Stamped before decoding: the stack was taken just before this call. */
    int64_t ts = fo_clock_now(&res->clock);
    unsigned int times = 1;
    int arity;
    const ERL_NIF_TERM *same;
    if (enif_get_tuple(env, argv[2], &arity, &same) && arity == 2 &&
        (same[0] == fo_atom_same || same[0] == fo_atom_slept)) {
        if (!enif_get_uint(env, same[1], &times) || times == 0)
            return enif_make_badarg(env);
        unsigned what = same[0] == fo_atom_slept ? FO_SAMPLE_SLEPT : 0u;
        return apply(env, res, (uint64_t)pid.pid, ts, NULL, 0, (uint64_t)weight, what, times);
    }
    if (argv[2] == fo_atom_same)
        return apply(env, res, (uint64_t)pid.pid, ts, NULL, 0, (uint64_t)weight, 0, 1);
    uint32_t count = 0;
    ERL_NIF_TERM list = argv[2], head;
    while (count < FO_SAMPLE_MAX_FRAMES && enif_get_list_cell(env, list, &head, &list))
        count++;
    if (count < FO_SAMPLE_MAX_FRAMES && !enif_is_empty_list(env, list))
        return enif_make_badarg(env); /* an improper list */
    /* one spare slot: an empty stack still gets a buffer */
    fo_mfa *frames = enif_alloc(sizeof(fo_mfa) * ((size_t)count + 1));
    if (frames == NULL)
        return enif_raise_exception(env, fo_atom_error);
    /* The list is innermost first; the core wants the root first. */
    list = argv[2];
    for (uint32_t i = 0; i < count; i++) {
        if (!enif_get_list_cell(env, list, &head, &list) || !fo_decode_frame(env, head, &frames[count - 1 - i])) {
            enif_free(frames);
            return enif_make_badarg(env);
        }
    }
    ERL_NIF_TERM result = apply(env, res, (uint64_t)pid.pid, ts, frames, count, (uint64_t)weight, how, 1);
    enif_free(frames);
    return result;
}

ERL_NIF_TERM fo_sample_sleep_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ErlNifPid pid, to;
    if (!fo_handle_get(env, argv[0], &res) || !enif_get_local_pid(env, argv[1], &pid) ||
        !enif_get_local_pid(env, argv[2], &to))
        return enif_make_badarg(env);
    if (!atomic_load_explicit(&res->active, memory_order_relaxed))
        return fo_atom_stopped;
    return fo_wakes_arm(&res->wakes, (uint64_t)pid.pid, &to) ? fo_atom_ok : fo_atom_full;
}

ERL_NIF_TERM fo_sample_wake_cancel_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ErlNifPid pid;
    if (!fo_handle_get(env, argv[0], &res) || !enif_get_local_pid(env, argv[1], &pid))
        return enif_make_badarg(env);
    fo_wakes_cancel(&res->wakes, (uint64_t)pid.pid);
    return fo_atom_ok;
}

ERL_NIF_TERM fo_sample_signal_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ErlNifPid pid;
    if (!fo_handle_get(env, argv[0], &res) || !enif_get_local_pid(env, argv[1], &pid))
        return enif_make_badarg(env);
    ERL_NIF_TERM result = fo_atom_stopped;
    fo_spin_lock(&res->lock);
    if (res->core != NULL && atomic_load_explicit(&res->active, memory_order_relaxed)) {
        /* the events before the signal apply first: the note is for the
         * slice it causes */
        fo_resource_fold(res, env);
        fo_session_expect_signal(res->core, (uint64_t)pid.pid);
        result = fo_atom_ok;
    }
    fo_spin_unlock(&res->lock);
    return result;
}
