/* The floor of call tracing: a tracer module whose enabled/3 always says
 * `trace` and whose trace/5 only counts. Whatever a real tracer module
 * costs beyond this is its own work; this much is the VM's (breakpoint,
 * building the callback arguments, calling the NIF).
 *
 * Elixir module FlameOn.Bench.FloorTracer, defined in bench/overhead.exs.
 * Built by bench/Makefile into bench/build/floor_tracer.so. */
#include <stdatomic.h>

#include <erl_nif.h>

static atomic_ullong events;
static ERL_NIF_TERM atom_trace, atom_ok;

// enabled(Tag, State, Tracee) -> trace
static ERL_NIF_TERM nif_enabled(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env;
    (void)argc;
    (void)argv;
    return atom_trace;
}

// trace(Tag, State, Tracee, Term, Opts) -> ok
static ERL_NIF_TERM nif_trace(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env;
    (void)argc;
    (void)argv;
    atomic_fetch_add_explicit(&events, 1, memory_order_relaxed);
    return atom_ok;
}

// count() -> non_neg_integer()
static ERL_NIF_TERM nif_count(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    return enif_make_uint64(env, atomic_load(&events));
}

// reset() -> ok
static ERL_NIF_TERM nif_reset(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env;
    (void)argc;
    (void)argv;
    atomic_store(&events, 0);
    return atom_ok;
}

static int on_load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
    (void)priv;
    (void)info;
    atom_trace = enif_make_atom(env, "trace");
    atom_ok = enif_make_atom(env, "ok");
    return 0;
}

static ErlNifFunc nif_funcs[] = {
    {"enabled", 3, nif_enabled, 0},
    {"trace", 5, nif_trace, 0},
    {"count", 0, nif_count, 0},
    {"reset", 0, nif_reset, 0},
};

ERL_NIF_INIT(Elixir.FlameOn.Bench.FloorTracer, nif_funcs, on_load, NULL, NULL, NULL)
