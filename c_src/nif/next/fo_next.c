#include "fo_next.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "fo_atoms.h"
#include "fo_decode.h"
#include "fo_handle.h"
#include "fo_resource.h"
#include "fo_root.h"

/* claim: no winner yet, the winner's pid, or cancelled. A local pid term
 * never has all bits set (that is a small integer's tag), nor is it 0. */
#define CLAIM_FREE 0u
#define CLAIM_CANCELLED UINT64_MAX

enum { PHASE_ARMED = 0, PHASE_FIRED, PHASE_DONE };

typedef struct {
    _Atomic uint64_t claim;
    atomic_int phase;
    ErlNifPid owner;
    uint64_t excluded[FO_NEXT_MAX_EXCLUDED];
    unsigned excluded_count;
    fo_session_res *session; /* kept: the winner's events go there */
} fo_next_gate;

static ErlNifResourceType *gate_type;

static void gate_dtor(ErlNifEnv *env, void *obj)
{
    (void)env;
    fo_next_gate *gate = obj;
    if (gate->session != NULL)
        enif_release_resource(gate->session);
}

int fo_next_open(ErlNifEnv *env)
{
    ErlNifResourceFlags tried;
    gate_type = enif_open_resource_type(env, NULL, "flame_on_next_gate", gate_dtor,
                                        ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER, &tried);
    return gate_type != NULL;
}

static fo_next_gate *get_gate(ErlNifEnv *env, ERL_NIF_TERM term)
{
    void *obj;
    return enif_get_resource(env, term, gate_type, &obj) ? obj : NULL;
}

// next_new(Session, Owner, Excluded)
ERL_NIF_TERM fo_next_new_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ErlNifPid owner;
    unsigned n;
    if (!fo_handle_get(env, argv[0], &res) || !enif_get_local_pid(env, argv[1], &owner) ||
        !enif_get_list_length(env, argv[2], &n) || n > FO_NEXT_MAX_EXCLUDED)
        return enif_make_badarg(env);
    uint64_t excluded[FO_NEXT_MAX_EXCLUDED];
    ERL_NIF_TERM list = argv[2], head;
    for (unsigned i = 0; i < n && enif_get_list_cell(env, list, &head, &list); i++) {
        ErlNifPid pid;
        if (!enif_get_local_pid(env, head, &pid))
            return enif_make_badarg(env);
        excluded[i] = (uint64_t)pid.pid;
    }
    fo_next_gate *gate = enif_alloc_resource(gate_type, sizeof(fo_next_gate));
    if (gate == NULL)
        return enif_raise_exception(env, enif_make_atom(env, "enomem"));
    memset(gate, 0, sizeof(*gate));
    atomic_init(&gate->claim, CLAIM_FREE);
    atomic_init(&gate->phase, PHASE_ARMED);
    gate->owner = owner;
    memcpy(gate->excluded, excluded, n * sizeof(excluded[0]));
    gate->excluded_count = n;
    enif_keep_resource(res);
    gate->session = res;
    ERL_NIF_TERM term = enif_make_resource(env, gate);
    enif_release_resource(gate);
    return term;
}

// next_cancel(Gate)
ERL_NIF_TERM fo_next_cancel_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_next_gate *gate = get_gate(env, argv[0]);
    if (gate == NULL)
        return enif_make_badarg(env);
    uint64_t expected = CLAIM_FREE;
    if (atomic_compare_exchange_strong(&gate->claim, &expected, CLAIM_CANCELLED)) {
        atomic_store(&gate->phase, PHASE_DONE);
        return fo_atom_cancelled;
    }
    return expected == CLAIM_CANCELLED ? fo_atom_cancelled : fo_atom_fired;
}

// next_state(Gate)
ERL_NIF_TERM fo_next_state_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_next_gate *gate = get_gate(env, argv[0]);
    if (gate == NULL)
        return enif_make_badarg(env);
    uint64_t winner = atomic_load(&gate->claim);
    if (winner == CLAIM_FREE)
        return fo_atom_armed;
    if (winner == CLAIM_CANCELLED)
        return fo_atom_cancelled;
    ErlNifPid pid;
    pid.pid = (ERL_NIF_TERM)winner;
    ERL_NIF_TERM phase = atomic_load(&gate->phase) == PHASE_DONE ? fo_atom_done : fo_atom_fired;
    return enif_make_tuple2(env, phase, enif_make_pid(env, &pid));
}

int fo_next_is_state(ErlNifEnv *env, ERL_NIF_TERM state)
{
    return enif_is_tuple(env, state);
}

/* The gate of a {next, Gate} tracer state; NULL for anything else. */
static fo_next_gate *gate_of_state(ErlNifEnv *env, ERL_NIF_TERM state)
{
    int arity;
    const ERL_NIF_TERM *items;
    if (!enif_get_tuple(env, state, &arity, &items) || arity != 2 || items[0] != fo_atom_next)
        return NULL;
    return get_gate(env, items[1]);
}

/* The first caller wins; asked again for the same event (the VM may ask
 * enabled/3 more than once), the winner is still the winner. */
static int claim(fo_next_gate *gate, uint64_t pid)
{
    for (unsigned i = 0; i < gate->excluded_count; i++) {
        if (gate->excluded[i] == pid)
            return 0;
    }
    uint64_t expected = CLAIM_FREE;
    if (atomic_compare_exchange_strong(&gate->claim, &expected, pid))
        return 1;
    return expected == pid;
}

ERL_NIF_TERM fo_next_enabled(ErlNifEnv *env, const ERL_NIF_TERM argv[])
{
    fo_next_gate *gate = gate_of_state(env, argv[1]);
    ErlNifPid pid;
    if (gate == NULL || !enif_get_local_pid(env, argv[2], &pid) ||
        atomic_load_explicit(&gate->phase, memory_order_acquire) != PHASE_ARMED)
        return fo_atom_discard;
    /* asked first, for every call of the function while armed: a gate
     * whose owner died lets nobody in (its pattern is being cleared) */
    if (argv[0] == fo_atom_trace_status)
        return enif_is_process_alive(env, &gate->owner) ? fo_atom_trace : fo_atom_discard;
    if (argv[0] == fo_atom_call && claim(gate, (uint64_t)pid.pid))
        return fo_atom_trace;
    return fo_atom_discard;
}

static void tell_owner(ErlNifEnv *env, fo_next_gate *gate, ErlNifEnv *msg_env, ERL_NIF_TERM what,
                       ERL_NIF_TERM a, ERL_NIF_TERM b, ERL_NIF_TERM c)
{
    ERL_NIF_TERM msg =
        enif_make_tuple6(msg_env, fo_atom_flame_on_next, enif_make_resource(msg_env, gate), what, a, b, c);
    enif_send(env, &gate->owner, msg_env, msg);
}

/* Erlang monotonic time in native units: the profile's start and end.
 * Read right beside the tracer clock reading that starts or stops the
 * session, so the profile's duration and its stacks' time agree. */
static int64_t native_now(const fo_session_res *res)
{
    return fo_ns_to_native(enif_monotonic_time(ERL_NIF_NSEC), res->native_per_second);
}

/* The winner entered the function: the match spec has turned its tracing
 * on, and nothing of it ran yet. The session starts with this call, from
 * its caller, as a traced call would read; a graph trace gets its root
 * (registered with the owner standing in for it until now). */
static void fire(ErlNifEnv *env, fo_next_gate *gate, ErlNifPid pid, ERL_NIF_TERM mfa, ERL_NIF_TERM opts)
{
    fo_session_res *res = gate->session;
    int64_t ts = fo_clock_now(&res->clock);
    int64_t started = native_now(res);
    ERL_NIF_TERM caller = fo_atom_undefined;
    if (enif_is_map(env, opts))
        enif_get_map_value(env, opts, fo_atom_match_spec_result, &caller);
    if (res->xproc != NULL && fo_root_move(res, (uint64_t)pid.pid))
        fo_root_begin(res, ts);
    fo_event ev;
    memset(&ev, 0, sizeof(ev));
    fo_decode_result decoded = fo_decode_event(env, fo_atom_call, mfa, &caller, &ev);
    ev.pid = (uint64_t)pid.pid;
    ev.ts_ns = ts;
    fo_spin_lock(&res->lock);
    if (res->core != NULL && atomic_load_explicit(&res->active, memory_order_relaxed)) {
        fo_resource_fold(res, env); /* in order with the tracer callbacks' events */
        fo_decode_apply(res->core, decoded, &ev);
    }
    fo_spin_unlock(&res->lock);
    ErlNifEnv *msg_env = enif_alloc_env();
    if (msg_env == NULL)
        return;
    tell_owner(env, gate, msg_env, fo_atom_fired, enif_make_pid(msg_env, &pid), enif_make_copy(msg_env, caller),
               enif_make_int64(msg_env, started));
    enif_free_env(msg_env);
}

/* The captured call returned or raised: nothing after it is the trace's.
 * Stopped here, in the winner, before it runs on in its caller. */
static void end_call(ErlNifEnv *env, fo_next_gate *gate, ERL_NIF_TERM tag, ERL_NIF_TERM opts)
{
    fo_session_res *res = gate->session;
    int64_t ended = native_now(res);
    fo_handle_stop(res);
    ErlNifEnv *msg_env = enif_alloc_env();
    if (msg_env == NULL)
        return;
    ERL_NIF_TERM outcome = fo_atom_ok, extra;
    if (tag == fo_atom_exception_from && enif_is_map(env, opts) && enif_get_map_value(env, opts, fo_atom_extra, &extra))
        outcome = enif_make_copy(msg_env, extra); /* {Class, Reason} */
    tell_owner(env, gate, msg_env, tag == fo_atom_exception_from ? fo_atom_raised : fo_atom_returned,
               enif_make_int64(msg_env, ended), outcome, fo_atom_nil);
    enif_free_env(msg_env);
}

ERL_NIF_TERM fo_next_trace(ErlNifEnv *env, const ERL_NIF_TERM argv[])
{
    fo_next_gate *gate = gate_of_state(env, argv[1]);
    ErlNifPid pid;
    if (gate == NULL || !enif_get_local_pid(env, argv[2], &pid) || atomic_load(&gate->claim) != (uint64_t)pid.pid)
        return fo_atom_ok;
    int phase = PHASE_ARMED;
    if (argv[0] == fo_atom_call) {
        if (atomic_compare_exchange_strong(&gate->phase, &phase, PHASE_FIRED))
            fire(env, gate, pid, argv[3], argv[4]);
    } else if (argv[0] == fo_atom_return_from || argv[0] == fo_atom_exception_from) {
        phase = PHASE_FIRED;
        if (atomic_compare_exchange_strong(&gate->phase, &phase, PHASE_DONE))
            end_call(env, gate, argv[0], argv[4]);
    }
    return fo_atom_ok;
}
