#include "fo_resource.h"

#include <string.h>

#include "fo_xproc.h"

static ErlNifResourceType *session_type;

/* Sessions alive in this VM, for leak checks (`Native.live_sessions/0`),
 * and those of them whose trace is not over (`Native.open_sessions/0`). */
static atomic_long live_sessions;
static atomic_long open_sessions;
static atomic_long session_bytes;

static void session_dtor(ErlNifEnv *env, void *obj)
{
    (void)env;
    fo_session_res *res = obj;
    fo_resource_close(res);
    atomic_fetch_sub(&live_sessions, 1);
    fo_resource_unaccount(res);
    fo_session_free(res->core);
    res->core = NULL;
    fo_xproc_free(res->xproc);
    res->xproc = NULL;
    fo_ring_free(&res->ring);
    enif_free(res->asks);
    res->asks = NULL;
}

int fo_resource_open(ErlNifEnv *env)
{
    ErlNifResourceFlags tried;
    session_type = enif_open_resource_type(env, NULL, "flame_on_session", session_dtor,
                                           ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER, &tried);
    return session_type != NULL;
}

fo_session_res *fo_resource_new(const fo_limits *limits, int64_t native_per_second, int replay)
{
    fo_session_res *res = enif_alloc_resource(session_type, sizeof(fo_session_res));
    if (res == NULL)
        return NULL;
    memset(res, 0, sizeof(*res));
    atomic_fetch_add(&live_sessions, 1);
    atomic_fetch_add(&open_sessions, 1);
    atomic_store(&res->open, 1);
    res->native_per_second = native_per_second;
    res->ring_request = FO_RING_DEFAULT_RECORDS;
    res->max_text_bytes = FO_DEFAULT_MAX_STACK_BYTES;
    fo_clock_start(&res->clock, !replay);
    res->replay = replay;
    fo_spin_init(&res->lock);
    fo_wakes_init(&res->wakes);
    res->core = fo_session_new(limits);
    if (res->core == NULL) {
        enif_release_resource(res); /* the destructor frees what was made */
        return NULL;
    }
    atomic_store(&res->active, 1);
    return res;
}

int fo_resource_add_graph(fo_session_res *res, const fo_graph_limits *limits, uint64_t label)
{
    fo_clock_start(&res->clock, 0); /* the router's clock: CLOCK_MONOTONIC */
    res->xproc = fo_xproc_new(limits, label);
    return res->xproc != NULL;
}

int fo_resource_set_cpu_sampled(fo_session_res *res, const fo_cpu_scope *scope)
{
    res->asks = enif_alloc(sizeof(fo_cpu_asks));
    if (res->asks == NULL)
        return 0;
    memset(res->asks, 0, sizeof(fo_cpu_asks));
    if (res->xproc == NULL)
        fo_clock_start(&res->clock, 0);
    res->cpu_scope = *scope;
    res->cpu_sampled = 1;
    fo_session_set_cpu_sampled(res->core, fo_cpu_slice, &res->cpu_scope);
    return 1;
}

int64_t fo_resource_ingest_offset(const fo_session_res *res)
{
    return res->xproc != NULL ? res->xproc->ingest_offset_ns : 0;
}

void fo_resource_mark_stopped(fo_session_res *res)
{
    fo_spin_lock(&res->lock);
    if (res->stopped_ns == 0)
        res->stopped_ns = fo_clock_now(&res->clock);
    fo_spin_unlock(&res->lock);
    atomic_store(&res->active, 0);
    fo_resource_close(res);
}

long fo_resource_live_sessions(void)
{
    return atomic_load(&live_sessions);
}

void fo_resource_close(fo_session_res *res)
{
    if (atomic_exchange(&res->open, 0) != 0)
        atomic_fetch_sub(&open_sessions, 1);
}

long fo_resource_open_sessions(void)
{
    return atomic_load(&open_sessions);
}

void fo_resource_account(fo_session_res *res)
{
    if (res->core == NULL)
        return;
    size_t now = fo_session_memory(res->core) + (res->xproc != NULL ? fo_graph_memory(res->xproc->graph) : 0) +
                 fo_ring_memory(&res->ring);
    if (now != res->accounted) {
        atomic_fetch_add(&session_bytes, (long)now - (long)res->accounted);
        res->accounted = now;
    }
}

void fo_resource_unaccount(fo_session_res *res)
{
    atomic_fetch_sub(&session_bytes, (long)res->accounted);
    res->accounted = 0;
}

long fo_resource_session_bytes(void)
{
    return atomic_load(&session_bytes);
}
