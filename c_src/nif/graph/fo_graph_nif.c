/* The NIFs of a graph trace: its root, who is told of callees and of
 * processes that left, and a process's role. */
#include "fo_graph_nif.h"

#include "fo_atoms.h"
#include "fo_clock.h"
#include "fo_handle.h"
#include "fo_root.h"
#include "fo_router.h"
#include "fo_xproc.h"

// graph_start(Session, RootPid)
ERL_NIF_TERM fo_graph_start_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ErlNifPid pid;
    if (!fo_handle_get(env, argv[0], &res) || !enif_get_local_pid(env, argv[1], &pid) || res->xproc == NULL)
        return enif_make_badarg(env);
    if (!fo_root_register(res, (uint64_t)pid.pid))
        return enif_make_badarg(env);
    return fo_atom_ok;
}

// graph_begin(Session)
ERL_NIF_TERM fo_graph_begin_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    if (!fo_handle_get(env, argv[0], &res) || res->xproc == NULL)
        return enif_make_badarg(env);
    return fo_root_begin(res, fo_tracer_clock_ns()) ? fo_atom_ok : enif_make_badarg(env);
}

/* argv[0] a cross-process session's handle, argv[1] a local pid */
static int graph_and_pid(ErlNifEnv *env, const ERL_NIF_TERM argv[], fo_session_res **res, ErlNifPid *pid)
{
    return fo_handle_get(env, argv[0], res) && enif_get_local_pid(env, argv[1], pid) && (*res)->xproc != NULL;
}

// graph_watch_callees(Session, Pid)
ERL_NIF_TERM fo_graph_watch_callees_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ErlNifPid pid;
    if (!graph_and_pid(env, argv, &res, &pid))
        return enif_make_badarg(env);
    fo_spin_lock(&res->lock);
    res->xproc->watcher = pid;
    res->xproc->watch_callees = 1;
    fo_spin_unlock(&res->lock);
    return fo_atom_ok;
}

// graph_owner(Session, Pid, FollowMessages)
ERL_NIF_TERM fo_graph_owner_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ErlNifPid pid;
    if (!graph_and_pid(env, argv, &res, &pid) || (argv[2] != fo_atom_true && argv[2] != fo_atom_false))
        return enif_make_badarg(env);
    fo_spin_lock(&res->lock);
    res->xproc->owner = pid;
    res->xproc->has_owner = 1;
    fo_graph_follow_messages(res->xproc->graph, argv[2] == fo_atom_true);
    fo_spin_unlock(&res->lock);
    return fo_atom_ok;
}

// graph_outsider(Session, Pid)
ERL_NIF_TERM fo_graph_outsider_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ErlNifPid pid;
    if (!graph_and_pid(env, argv, &res, &pid))
        return enif_make_badarg(env);
    fo_spin_lock(&res->lock);
    int noted = fo_graph_outsider(res->xproc->graph, (uint64_t)pid.pid);
    fo_spin_unlock(&res->lock);
    return noted ? fo_atom_ok : fo_atom_error;
}

/* (Session, Pid, Words): a heap size read for an alloc: true trace's
 * process, handed to the core under the session's lock. */
static ERL_NIF_TERM heap_words(ErlNifEnv *env, const ERL_NIF_TERM argv[],
                               void (*apply)(fo_session *, uint64_t, uint64_t))
{
    fo_session_res *res;
    ErlNifPid pid;
    ErlNifUInt64 words;
    if (!graph_and_pid(env, argv, &res, &pid) || !enif_get_uint64(env, argv[2], &words))
        return enif_make_badarg(env);
    fo_spin_lock(&res->lock);
    if (res->core != NULL && res->alloc)
        apply(res->core, (uint64_t)pid.pid, words);
    fo_spin_unlock(&res->lock);
    return fo_atom_ok;
}

// graph_heap_level(Session, Pid, Words)
ERL_NIF_TERM fo_graph_heap_level_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return heap_words(env, argv, fo_session_heap_level_unless_known);
}

// graph_alloc_followers(Session)
ERL_NIF_TERM fo_graph_alloc_followers_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    if (!fo_handle_get(env, argv[0], &res) || res->xproc == NULL)
        return enif_make_badarg(env);
    ERL_NIF_TERM list = enif_make_list(env, 0);
    fo_spin_lock(&res->lock);
    if (res->core != NULL && res->alloc) {
        uint64_t root = fo_xproc_root(res->xproc);
        uint32_t count = fo_session_process_count(res->core);
        for (uint32_t i = 0; i < count; i++) {
            uint64_t key = fo_session_process_pid(res->core, i);
            if (key == root || !fo_session_heap_known(res->core, i) || !fo_graph_following(res->xproc->graph, key))
                continue;
            ErlNifPid pid;
            pid.pid = (ERL_NIF_TERM)key;
            list = enif_make_list_cell(env, enif_make_pid(env, &pid), list);
        }
    }
    fo_spin_unlock(&res->lock);
    return list;
}

// graph_heap_tail(Session, Pid, Words)
ERL_NIF_TERM fo_graph_heap_tail_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return heap_words(env, argv, fo_session_alloc_tail);
}

// graph_role(Pid)
ERL_NIF_TERM fo_graph_role_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifPid pid;
    if (!enif_get_local_pid(env, argv[0], &pid))
        return enif_make_badarg(env);
    switch (fo_router_role((uint64_t)pid.pid)) {
    case 2:
        return fo_atom_root;
    case 1:
        return fo_atom_follower;
    default:
        return fo_atom_nil;
    }
}
