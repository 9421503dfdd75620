#include "fo_cpu_nif.h"

#include <string.h>

#include "fo_atoms.h"
#include "fo_decode.h"
#include "fo_handle.h"
#include "fo_perf.h"
#include "fo_cpu_helpers.h"
#include "fo_resource.h"
#include "fo_router.h"
#include "fo_tail.h"
#include "fo_tracer_slots.h"

/* Frames of a stack read with process_info kept at most (the VM's
 * backtrace_depth caps it long before this). */
#define MAX_CONTEXT_FRAMES 512u

ERL_NIF_TERM fo_cpu_here_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ErlNifPid self;
    if (!fo_handle_get(env, argv[0], &res) || !res->cpu_sampled || enif_self(env, &self) == NULL)
        return enif_make_badarg(env);
    fo_perf_note_thread();
    fo_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = FO_EV_IN;
    ev.flags = FO_EVF_HAS_THREAD;
    ev.pid = (uint64_t)self.pid;
    ev.thread = fo_perf_thread_id();
    fo_spin_lock(&res->lock);
    if (res->core != NULL && atomic_load(&res->active)) {
        fo_resource_fold(res, env); /* its events so far come first */
        ev.ts_ns = fo_clock_now(&res->clock);
        fo_session_apply(res->core, &ev);
        /* it runs inside its root function: what comes before its first
         * sample goes under it */
        if (res->cpu_scope.has_root)
            fo_session_cpu_inside(res->core, ev.pid, &res->cpu_scope.root, 1);
    }
    fo_spin_unlock(&res->lock);
    return fo_atom_ok;
}

ERL_NIF_TERM fo_cpu_helper_here_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    ErlNifPid self;
    if (enif_self(env, &self) == NULL)
        return enif_make_badarg(env);
    fo_cpu_helpers_register(fo_perf_thread_id(), &self);
    return fo_atom_ok;
}

ERL_NIF_TERM fo_cpu_helper_gone_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifPid helper;
    if (!enif_get_local_pid(env, argv[0], &helper))
        return enif_make_badarg(env);
    fo_cpu_helpers_unregister(&helper);
    return fo_atom_ok;
}

/* The session an ask names: {slot, Key} (a tracer slot's key: its slot is
 * held, *slot_key set, until release_session) or {label, Label} (a
 * cross-process trace: a reference is held). NULL when it is gone. */
static fo_session_res *session_of(ErlNifEnv *env, ERL_NIF_TERM term, ERL_NIF_TERM *slot_key, int *bad)
{
    int arity;
    const ERL_NIF_TERM *items;
    ErlNifUInt64 value;
    *slot_key = 0;
    *bad = !enif_get_tuple(env, term, &arity, &items) || arity != 2 || !enif_get_uint64(env, items[1], &value) ||
           (items[0] != fo_atom_slot && items[0] != fo_atom_label);
    if (*bad)
        return NULL;
    if (items[0] == fo_atom_label)
        return fo_router_by_label((uint64_t)value);
    fo_session_res *res = fo_tracer_slots_acquire(items[1]);
    if (res != NULL)
        *slot_key = items[1];
    return res;
}

static void release_session(fo_session_res *res, ERL_NIF_TERM slot_key)
{
    if (slot_key != 0)
        fo_tracer_slots_release(slot_key);
    else
        enif_release_resource(res);
}

/* The first count frames of list (innermost first) into frames, root
 * first. 0 when one is not a frame. */
static int decode_stack(ErlNifEnv *env, ERL_NIF_TERM list, fo_mfa *frames, uint32_t count)
{
    ERL_NIF_TERM head;
    for (uint32_t i = 0; i < count; i++) {
        if (!enif_get_list_cell(env, list, &head, &list) || !fo_decode_frame(env, head, &frames[count - 1 - i]))
            return 0;
    }
    return 1;
}

/* cpu_context/5's work, with the session held. */
static ERL_NIF_TERM context(ErlNifEnv *env, fo_session_res *res, const ErlNifPid *about, const fo_mfa *asked_mfa,
                            ERL_NIF_TERM current, ERL_NIF_TERM stack, unsigned length)
{
    ErlNifPid pid = *about;
    fo_mfa key, asked = *asked_mfa;
    if (!res->cpu_sampled)
        return enif_make_badarg(env);
    /* The answer waits for the process's next scheduling point: it may
     * have run and stopped elsewhere since it was asked about. Either way
     * it is a stack it stopped in, at its current function. */
    if (!fo_decode_mfa(env, current, &key))
        return fo_atom_stale;
    uint32_t count = length < MAX_CONTEXT_FRAMES ? length : MAX_CONTEXT_FRAMES;
    fo_mfa *frames = enif_alloc(sizeof(fo_mfa) * ((size_t)count + 1));
    if (frames == NULL)
        return enif_raise_exception(env, fo_atom_error);
    if (!decode_stack(env, stack, frames, count)) {
        enif_free(frames);
        return enif_make_badarg(env);
    }
    uint32_t from = fo_cpu_scope_start(&res->cpu_scope, frames, count);
    count -= from;
    /* a BIF that traps is its current function, not a frame */
    if (count > 0 && !fo_mfa_equal(&frames[from + count - 1], &key))
        frames[from + count++] = key;
    ERL_NIF_TERM result = fo_atom_stale;
    if (count > 0) {
        result = fo_atom_stopped;
        fo_spin_lock(&res->lock);
        if (res->core != NULL && atomic_load(&res->active)) {
            fo_resource_fold(res, env); /* its `out` comes first */
            fo_session_cpu_context(res->core, (uint64_t)pid.pid, &key, frames + from, count);
            fo_cpu_asks_answered(res->asks, (uint64_t)pid.pid, &key, fo_clock_now(&res->clock));
            result = fo_mfa_equal(&key, &asked) ? fo_atom_ok : fo_atom_moved;
        }
        fo_spin_unlock(&res->lock);
    }
    enif_free(frames);
    return result;
}

ERL_NIF_TERM fo_cpu_context_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifPid pid;
    fo_mfa asked;
    unsigned length;
    if (fo_tail_is_state(env, argv[0]))
        return fo_tail_context(env, argv);
    if (!enif_get_local_pid(env, argv[1], &pid) || !fo_decode_mfa(env, argv[2], &asked) ||
        !enif_get_list_length(env, argv[4], &length))
        return enif_make_badarg(env);
    ERL_NIF_TERM slot_key;
    int bad;
    fo_session_res *res = session_of(env, argv[0], &slot_key, &bad);
    if (bad)
        return enif_make_badarg(env);
    if (res == NULL)
        return fo_atom_stopped;
    ERL_NIF_TERM result = context(env, res, &pid, &asked, argv[3], argv[4], length);
    release_session(res, slot_key);
    return result;
}
