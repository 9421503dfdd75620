#include "fo_perf_nif.h"

#include <stdatomic.h>

#include "fo_atoms.h"
#include "fo_cpu.h"
#include "fo_drainer.h"
#include "fo_perf.h"
#include "fo_symbols.h"

/* One user of the sampler: released once, by perf_release/1 or by its
 * destructor (its owner died without releasing). */
typedef struct {
    atomic_int held;
} perf_user;

static ErlNifResourceType *user_type;

static void user_dtor(ErlNifEnv *env, void *obj)
{
    (void)env;
    perf_user *user = obj;
    if (atomic_exchange(&user->held, 0))
        fo_perf_release();
}

int fo_perf_nif_open(ErlNifEnv *env)
{
    user_type = enif_open_resource_type(env, NULL, "flame_on_perf_user", user_dtor,
                                        ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER, NULL);
    fo_perf_set_caller_finder(fo_cpu_find_caller);
    fo_perf_set_frame_finder(fo_cpu_skipped_frame);
    return user_type != NULL && fo_symbols_init();
}

void fo_perf_nif_unload(void)
{
    fo_perf_counters c;
    fo_perf_counters_read(&c);
    for (uint32_t i = 0; i < c.users; i++)
        fo_perf_release();
    fo_symbols_destroy();
}

static ERL_NIF_TERM error_term(ErlNifEnv *env, fo_perf_status status, int err)
{
    ERL_NIF_TERM reason;
    switch (status) {
    case FO_PERF_DENIED:
        reason = fo_atom_denied;
        break;
    case FO_PERF_NO_SUPPORT:
        reason = fo_atom_no_support;
        break;
    case FO_PERF_NO_MEMORY:
        reason = fo_atom_no_memory;
        break;
    default:
        reason = fo_atom_failed;
        break;
    }
    return enif_make_tuple3(env, fo_atom_error, reason, enif_make_int(env, err));
}

ERL_NIF_TERM fo_perf_probe_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    int err = 0;
    fo_perf_status status = fo_perf_probe(&err);
    return status == FO_PERF_OK ? fo_atom_ok : error_term(env, status, err);
}

ERL_NIF_TERM fo_perf_map_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env;
    (void)argc;
    (void)argv;
    return fo_symbols_map_exists() ? fo_atom_true : fo_atom_false;
}

ERL_NIF_TERM fo_perf_acquire_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    unsigned int freq;
    if (!enif_get_uint(env, argv[0], &freq) || freq == 0 || freq > 10000)
        return enif_make_badarg(env);
    perf_user *user = enif_alloc_resource(user_type, sizeof(perf_user));
    if (user == NULL)
        return enif_raise_exception(env, enif_make_atom(env, "enomem"));
    atomic_init(&user->held, 0);
    int err = 0;
    fo_perf_status status = fo_perf_acquire(freq, &err);
    if (status != FO_PERF_OK) {
        enif_release_resource(user);
        return error_term(env, status, err);
    }
    atomic_store(&user->held, 1);
    fo_symbols_refresh();
    fo_drainer_kick(); /* it ticks while anyone samples */
    ERL_NIF_TERM term = enif_make_resource(env, user);
    enif_release_resource(user);
    return enif_make_tuple2(env, fo_atom_ok, term);
}

ERL_NIF_TERM fo_perf_release_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    perf_user *user;
    if (!enif_get_resource(env, argv[0], user_type, (void **)&user))
        return enif_make_badarg(env);
    if (atomic_exchange(&user->held, 0))
        fo_perf_release();
    return fo_atom_ok;
}

static void put(ErlNifEnv *env, ERL_NIF_TERM *map, const char *key, uint64_t value)
{
    enif_make_map_put(env, *map, enif_make_atom(env, key), enif_make_uint64(env, value), map);
}

ERL_NIF_TERM fo_perf_stats_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    fo_perf_counters c;
    fo_perf_counters_read(&c);
    fo_symbols_counters sym;
    fo_symbols_counters_read(&sym);
    ERL_NIF_TERM map = enif_make_new_map(env);
    put(env, &map, "users", c.users);
    put(env, &map, "threads", c.threads);
    put(env, &map, "frequency", c.frequency);
    put(env, &map, "skipped_frames", c.skipped_frames);
    put(env, &map, "identified", c.identified);
    put(env, &map, "samples", c.samples);
    put(env, &map, "lost", c.lost);
    put(env, &map, "overwritten", c.overwritten);
    put(env, &map, "open_failures", c.open_failures);
    put(env, &map, "symbols", sym.entries);
    put(env, &map, "symbol_lines", sym.lines);
    put(env, &map, "unnamed_symbols", sym.unnamed);
    put(env, &map, "dropped_symbols", sym.dropped);
    return map;
}
