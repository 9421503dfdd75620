/* Where a tracer-module event's time goes: a tracer module whose callbacks
 * do a chosen subset of the work FlameOn.Client.Core.Native's trace/5 does
 * (c_src/nif/trace/fo_tracer.c), so bench/anatomy.exs can price each step.
 *
 * Elixir module FlameOn.Bench.AnatomyTracer (defined in bench/anatomy.exs),
 * built by bench/Makefile into bench/build/anatomy_tracer.so with the C
 * core (c_src/core) linked in. The tracer state is a resource made by
 * new(Steps); Steps is a bit set of the STEP_* below. With Steps = 0 this is
 * the floor tracer (count only). */
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_TSC 1
#endif

#include <erl_nif.h>

#include "fo_session.h"

enum {
    STEP_RESOURCE = 1,  /* enabled/3 and trace/5 look the state resource up; enabled/3 checks the tag */
    STEP_CLOCK = 2,     /* enif_monotonic_time(ERL_NIF_NSEC) per event */
    STEP_DECODE = 4,    /* opts map lookup of the caller, {M,F,A} decoding, local pid */
    STEP_TS_LOOKUP = 8, /* opts map lookup of `timestamp` (replay support) */
    STEP_LOCK = 16,     /* the session mutex around the apply */
    STEP_CORE = 32,     /* fo_session_apply */
    STEP_RAW_CLOCK = 64, /* clock_gettime(CLOCK_MONOTONIC) directly, instead of STEP_CLOCK */
    STEP_SPIN = 128,     /* a test-and-set spinlock instead of STEP_LOCK's mutex */
    STEP_TSC = 256       /* the CPU's time-stamp counter (x86 rdtsc) instead of a clock call */
};

/* Built a second time with -DANATOMY_LEAN as FlameOn.Bench.AnatomyLeanTracer:
 * its enabled/3 only reads this global count of live sessions (no resource
 * lookup, no tag check). */
static atomic_int live_sessions;

typedef struct {
    int steps;
    atomic_int active;
    atomic_ullong events;
    atomic_flag spin;
    ErlNifMutex *lock;
    fo_session *core;
} anatomy;

static ErlNifResourceType *anatomy_type;
static ERL_NIF_TERM atom_trace, atom_ok, atom_discard, atom_remove, atom_call, atom_return_to, atom_in,
    atom_out, atom_exit, atom_in_exiting, atom_out_exiting, atom_trace_status, atom_match_spec_result,
    atom_extra, atom_timestamp, atom_undefined;

static void anatomy_dtor(ErlNifEnv *env, void *obj)
{
    (void)env;
    anatomy *a = obj;
    atomic_fetch_sub(&live_sessions, 1);
    fo_session_free(a->core);
    if (a->lock != NULL)
        enif_mutex_destroy(a->lock);
}

// new(Steps) -> State
static ERL_NIF_TERM nif_new(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    int steps;
    if (!enif_get_int(env, argv[0], &steps) || steps < 0 || steps > 511)
        return enif_make_badarg(env);
    anatomy *a = enif_alloc_resource(anatomy_type, sizeof(anatomy));
    if (a == NULL)
        return enif_make_badarg(env);
    memset(a, 0, sizeof(*a));
    atomic_flag_clear(&a->spin);
    a->steps = steps;
    a->lock = enif_mutex_create("bench_anatomy");
    fo_limits limits = fo_limits_default();
    a->core = fo_session_new(&limits);
    atomic_store(&a->active, 1);
    atomic_fetch_add(&live_sessions, 1);
    ERL_NIF_TERM term = enif_make_resource(env, a);
    enif_release_resource(a);
    if (a->lock == NULL || a->core == NULL)
        return enif_make_badarg(env);
    return term;
}

// events(State) -> {Counted, Applied}
static ERL_NIF_TERM nif_events(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    void *obj;
    if (!enif_get_resource(env, argv[0], anatomy_type, &obj))
        return enif_make_badarg(env);
    anatomy *a = obj;
    enif_mutex_lock(a->lock);
    uint64_t applied = fo_session_stats(a->core)->events;
    enif_mutex_unlock(a->lock);
    return enif_make_tuple2(env, enif_make_uint64(env, atomic_load(&a->events)), enif_make_uint64(env, applied));
}

#ifdef ANATOMY_LEAN
// enabled(Tag, State, Tracee) -> trace | remove
static ERL_NIF_TERM nif_enabled(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env;
    (void)argc;
    (void)argv;
    return atomic_load_explicit(&live_sessions, memory_order_relaxed) > 0 ? atom_trace : atom_remove;
}
#else
// enabled(Tag, State, Tracee) -> trace | discard | remove
static ERL_NIF_TERM nif_enabled(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    void *obj;
    if (!enif_get_resource(env, argv[1], anatomy_type, &obj))
        return atom_remove;
    anatomy *a = obj;
    if (!(a->steps & STEP_RESOURCE))
        return atom_trace;
    if (!atomic_load_explicit(&a->active, memory_order_relaxed))
        return atom_remove;
    ERL_NIF_TERM tag = argv[0];
    if (tag == atom_call || tag == atom_return_to || tag == atom_in || tag == atom_out || tag == atom_exit ||
        tag == atom_in_exiting || tag == atom_out_exiting || tag == atom_trace_status)
        return atom_trace;
    return atom_discard;
}
#endif

static int decode_mfa(ErlNifEnv *env, ERL_NIF_TERM term, fo_mfa *out)
{
    int arity;
    const ERL_NIF_TERM *items;
    if (!enif_get_tuple(env, term, &arity, &items) || arity != 3)
        return 0;
    if (!enif_is_atom(env, items[0]) || !enif_is_atom(env, items[1]))
        return 0;
    unsigned int n;
    if (!enif_get_uint(env, items[2], &n))
        return 0;
    out->module = (uint64_t)items[0];
    out->function = (uint64_t)items[1];
    out->arity = n;
    return 1;
}

// trace(Tag, State, Tracee, Term, Opts) -> ok
static ERL_NIF_TERM nif_trace(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    void *obj;
    if (!enif_get_resource(env, argv[1], anatomy_type, &obj))
        return atom_ok;
    anatomy *a = obj;
    int steps = a->steps;
    atomic_fetch_add_explicit(&a->events, 1, memory_order_relaxed);
    if (!(steps & ~STEP_RESOURCE))
        return atom_ok;

    fo_event ev;
    memset(&ev, 0, sizeof(ev));
    if (steps & STEP_TS_LOOKUP) {
        ERL_NIF_TERM value;
        ErlNifSInt64 recorded;
        if (enif_get_map_value(env, argv[4], atom_timestamp, &value) && enif_get_int64(env, value, &recorded))
            ev.ts_ns = recorded;
    }
    if ((steps & STEP_CLOCK) && ev.ts_ns == 0)
        ev.ts_ns = (int64_t)enif_monotonic_time(ERL_NIF_NSEC);
#ifdef HAVE_TSC
    if ((steps & STEP_TSC) && ev.ts_ns == 0)
        ev.ts_ns = (int64_t)__rdtsc(); /* ticks, not ns: a real tracer would calibrate */
#endif
    if ((steps & STEP_RAW_CLOCK) && ev.ts_ns == 0) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        ev.ts_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    }
    if (steps & STEP_DECODE) {
        ErlNifPid pid;
        if (!enif_is_map(env, argv[4]) || !enif_get_local_pid(env, argv[2], &pid))
            return atom_ok;
        ev.pid = (uint64_t)pid.pid;
        ERL_NIF_TERM tag = argv[0];
        if (tag == atom_call) {
            if (!decode_mfa(env, argv[3], &ev.mfa))
                return atom_ok;
            ev.kind = FO_EV_CALL;
            ev.flags = FO_EVF_HAS_MFA;
            ERL_NIF_TERM caller;
            if ((enif_get_map_value(env, argv[4], atom_match_spec_result, &caller) ||
                 enif_get_map_value(env, argv[4], atom_extra, &caller)) &&
                decode_mfa(env, caller, &ev.caller))
                ev.flags |= FO_EVF_HAS_CALLER;
        } else if (tag == atom_return_to) {
            ev.kind = FO_EV_RETURN_TO;
            if (decode_mfa(env, argv[3], &ev.mfa))
                ev.flags = FO_EVF_HAS_MFA;
        } else if (tag == atom_in || tag == atom_in_exiting) {
            ev.kind = FO_EV_IN;
        } else if (tag == atom_out || tag == atom_out_exiting) {
            ev.kind = FO_EV_OUT;
        } else if (tag == atom_exit) {
            ev.kind = FO_EV_EXIT;
        } else {
            return atom_ok;
        }
    } else {
        /* without decoding, a plain event of one fake process */
        ev.kind = FO_EV_IN;
        ev.pid = 1;
    }
    if (steps & STEP_LOCK)
        enif_mutex_lock(a->lock);
    if (steps & STEP_SPIN) {
        while (atomic_flag_test_and_set_explicit(&a->spin, memory_order_acquire))
            ;
    }
    if (steps & STEP_CORE)
        fo_session_apply(a->core, &ev);
    if (steps & STEP_SPIN)
        atomic_flag_clear_explicit(&a->spin, memory_order_release);
    if (steps & STEP_LOCK)
        enif_mutex_unlock(a->lock);
    return atom_ok;
}

static int on_load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
    (void)priv;
    (void)info;
    atom_trace = enif_make_atom(env, "trace");
    atom_ok = enif_make_atom(env, "ok");
    atom_discard = enif_make_atom(env, "discard");
    atom_remove = enif_make_atom(env, "remove");
    atom_call = enif_make_atom(env, "call");
    atom_return_to = enif_make_atom(env, "return_to");
    atom_in = enif_make_atom(env, "in");
    atom_out = enif_make_atom(env, "out");
    atom_exit = enif_make_atom(env, "exit");
    atom_in_exiting = enif_make_atom(env, "in_exiting");
    atom_out_exiting = enif_make_atom(env, "out_exiting");
    atom_trace_status = enif_make_atom(env, "trace_status");
    atom_match_spec_result = enif_make_atom(env, "match_spec_result");
    atom_extra = enif_make_atom(env, "extra");
    atom_timestamp = enif_make_atom(env, "timestamp");
    atom_undefined = enif_make_atom(env, "undefined");
    anatomy_type = enif_open_resource_type(env, NULL, "bench_anatomy", anatomy_dtor, ERL_NIF_RT_CREATE, NULL);
    return anatomy_type == NULL;
}

static ErlNifFunc nif_funcs[] = {
    {"new", 1, nif_new, 0},
    {"events", 1, nif_events, 0},
    {"enabled", 3, nif_enabled, 0},
    {"trace", 5, nif_trace, 0},
};

#ifdef ANATOMY_LEAN
ERL_NIF_INIT(Elixir.FlameOn.Bench.AnatomyLeanTracer, nif_funcs, on_load, NULL, NULL, NULL)
#else
ERL_NIF_INIT(Elixir.FlameOn.Bench.AnatomyTracer, nif_funcs, on_load, NULL, NULL, NULL)
#endif
