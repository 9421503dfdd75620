/* The NIF library FlameOn.Client.Core.Native: its function table and
 * load/upgrade/unload. Each NIF lives in the folder of its job
 * (c_src/nif/README.md) and is named fo_<its Erlang name>_nif, but for the
 * tracer-module callbacks (fo_tracer.h). */
#include <erl_nif.h>

#include "fo_atoms.h"
#include "fo_clock.h"
#include "fo_cpu_nif.h"
#include "fo_drainer.h"
#include "fo_graph_nif.h"
#include "fo_handle.h"
#include "fo_next.h"
#include "fo_nodewide.h"
#include "fo_perf_nif.h"
#include "fo_render_nif.h"
#include "fo_resource.h"
#include "fo_router.h"
#include "fo_sample.h"
#include "fo_session_nif.h"
#include "fo_tail.h"
#include "fo_tail_kept.h"
#include "fo_tail_replay.h"
#include "fo_tracer.h"
#include "fo_tracer_slots.h"

static ErlNifFunc nif_funcs[] = {
    {"live_sessions", 0, fo_live_sessions_nif, 0},
    {"open_sessions", 0, fo_open_sessions_nif, 0},
    {"session_bytes", 0, fo_session_bytes_nif, 0},
    {"new", 1, fo_new_nif, 0},
    {"tracer_state", 1, fo_tracer_state_nif, 0},
    {"ingest", 2, fo_ingest_nif, 0},
    {"stats", 1, fo_stats_nif, 0},
    {"stop", 1, fo_stop_nif, 0},
    {"cpu_here", 1, fo_cpu_here_nif, 0},
    {"cpu_helper_here", 0, fo_cpu_helper_here_nif, 0},
    {"cpu_helper_gone", 1, fo_cpu_helper_gone_nif, 0},
    {"cpu_context", 5, fo_cpu_context_nif, 0},
    {"graph_start", 2, fo_graph_start_nif, 0},
    {"graph_begin", 1, fo_graph_begin_nif, 0},
    {"graph_watch_callees", 2, fo_graph_watch_callees_nif, 0},
    {"graph_owner", 3, fo_graph_owner_nif, 0},
    {"graph_outsider", 2, fo_graph_outsider_nif, 0},
    {"graph_heap_level", 3, fo_graph_heap_level_nif, 0},
    {"graph_alloc_followers", 1, fo_graph_alloc_followers_nif, 0},
    {"graph_heap_tail", 3, fo_graph_heap_tail_nif, 0},
    {"graph_role", 1, fo_graph_role_nif, 0},
    {"finish", 2, fo_finish_nif, 0},
    {"render", 2, fo_render_nif, 0},
    {"sample", 4, fo_sample_nif, 0},
    {"sample", 5, fo_sample_nif, 0},
    {"sample_sleep", 3, fo_sample_sleep_nif, 0},
    {"sample_wake_cancel", 2, fo_sample_wake_cancel_nif, 0},
    {"sample_signal", 2, fo_sample_signal_nif, 0},
    {"perf_probe", 0, fo_perf_probe_nif, 0},
    {"perf_map", 0, fo_perf_map_nif, 0},
    {"perf_acquire", 1, fo_perf_acquire_nif, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"perf_release", 1, fo_perf_release_nif, 0},
    {"perf_stats", 0, fo_perf_stats_nif, 0},
    {"perf_frequency", 1, fo_perf_frequency_nif, 0},
    {"nodewide_take", 3, fo_nodewide_take_nif, 0},
    {"tail_enable", 3, fo_tail_enable_nif, 0},
    {"tail_begin", 3, fo_tail_begin_nif, 0},
    {"tail_flagless", 0, fo_tail_flagless_nif, 0},
    {"tail_linger", 2, fo_tail_linger_nif, 0},
    {"tail_promoter", 1, fo_tail_promoter_nif, 0},
    {"tail_promote", 2, fo_tail_promote_nif, 0},
    {"tail_state", 1, fo_tail_state_nif, 0},
    {"tail_claim", 1, fo_tail_claim_nif, 0},
    {"tail_release", 1, fo_tail_release_nif, 0},
    {"tail_idle", 1, fo_tail_idle_nif, 0},
    {"tail_end", 2, fo_tail_end_nif, 0},
    {"tail_keep", 3, fo_tail_keep_nif, 0},
    {"tail_replay", 2, fo_tail_replay_nif, 0},
    {"tail_stats", 0, fo_tail_stats_nif, 0},
    {"tail_owners", 0, fo_tail_owners_nif, 0},
    {"next_new", 3, fo_next_new_nif, 0},
    {"next_cancel", 1, fo_next_cancel_nif, 0},
    {"next_state", 1, fo_next_state_nif, 0},
    {"enabled", 3, fo_tracer_enabled, 0},
    {"trace", 5, fo_tracer_trace, 0},
};

/* Loaded instances of this library (an upgrade loads a second one into
 * the same statics until the old code is purged): the drainer thread runs
 * while any is loaded, and must be gone before the code is unmapped. */
static int instances;

static int on_load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
    (void)priv;
    (void)info;
    fo_atoms_init(env);
    if (!fo_resource_open(env) || !fo_handle_open(env) || !fo_next_open(env) || !fo_perf_nif_open(env) ||
        !fo_tail_kept_open(env) || !fo_router_init() || !fo_tracer_slots_init())
        return 1;
    fo_clock_init();
    fo_tracer_init();
    fo_tail_init();
    /* without the thread, producers fold their own rings when full */
    fo_drainer_start();
    instances++;
    return 0;
}

static int on_upgrade(ErlNifEnv *env, void **priv, void **old_priv, ERL_NIF_TERM info)
{
    (void)old_priv;
    return on_load(env, priv, info);
}

static void on_unload(ErlNifEnv *env, void *priv)
{
    (void)env;
    (void)priv;
    if (--instances == 0) {
        fo_drainer_stop();
        fo_perf_nif_unload();
        fo_tail_unload();
    }
}

ERL_NIF_INIT(Elixir.FlameOn.Client.Core.Native, nif_funcs, on_load, NULL, on_upgrade, on_unload)
