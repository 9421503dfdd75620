#include "fo_wake.h"

#include "fo_atoms.h"
#include "fo_drainer.h"
#include "fo_resource.h"

void fo_wakes_init(fo_wakes *w)
{
    atomic_store(&w->armed, 0);
    fo_spin_init(&w->lock);
    for (unsigned i = 0; i < FO_WAKE_SLOTS; i++)
        atomic_store(&w->slots[i].pid, 0);
}

int fo_wakes_arm(fo_wakes *w, uint64_t pid, const ErlNifPid *to)
{
    int armed = 0;
    fo_wake_slot *free_slot = NULL;
    fo_spin_lock(&w->lock);
    for (unsigned i = 0; i < FO_WAKE_SLOTS && !armed; i++) {
        uint64_t held = atomic_load_explicit(&w->slots[i].pid, memory_order_relaxed);
        if (held == pid) {
            w->slots[i].to = *to;
            armed = 1;
        } else if (held == 0 && free_slot == NULL) {
            free_slot = &w->slots[i];
        }
    }
    if (!armed && free_slot != NULL) {
        free_slot->to = *to;
        atomic_store_explicit(&free_slot->pid, pid, memory_order_release);
        atomic_fetch_add(&w->armed, 1);
        armed = 1;
    }
    fo_spin_unlock(&w->lock);
    return armed;
}

/* Caller holds the lock. */
static int take(fo_wakes *w, uint64_t pid, ErlNifPid *to)
{
    for (unsigned i = 0; i < FO_WAKE_SLOTS; i++) {
        if (atomic_load_explicit(&w->slots[i].pid, memory_order_relaxed) == pid) {
            if (to != NULL)
                *to = w->slots[i].to;
            atomic_store_explicit(&w->slots[i].pid, 0, memory_order_relaxed);
            atomic_fetch_sub(&w->armed, 1);
            return 1;
        }
    }
    return 0;
}

void fo_wakes_cancel(fo_wakes *w, uint64_t pid)
{
    fo_spin_lock(&w->lock);
    take(w, pid, NULL);
    fo_spin_unlock(&w->lock);
}

void fo_wakes_fire(fo_wakes *w, uint64_t pid)
{
    /* Looked up without the lock: while any sampler sleeps, every `in` of
     * the session's processes passes here, and most are nobody's. */
    unsigned i = 0;
    while (i < FO_WAKE_SLOTS && atomic_load_explicit(&w->slots[i].pid, memory_order_acquire) != pid)
        i++;
    if (i == FO_WAKE_SLOTS)
        return;
    ErlNifPid to;
    fo_spin_lock(&w->lock);
    int found = take(w, pid, &to);
    fo_spin_unlock(&w->lock);
    /* not sent from here (fo_drainer_send_in says why); without a drainer
     * the sampler's own timeout wakes it */
    if (found)
        fo_drainer_send_in(&to, pid);
}

ERL_NIF_TERM fo_wake_sleep_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ErlNifPid pid, to;
    if (!fo_resource_get(env, argv[0], &res) || !enif_get_local_pid(env, argv[1], &pid) ||
        !enif_get_local_pid(env, argv[2], &to))
        return enif_make_badarg(env);
    if (!atomic_load_explicit(&res->active, memory_order_relaxed))
        return fo_atom_stopped;
    return fo_wakes_arm(&res->wakes, (uint64_t)pid.pid, &to) ? fo_atom_ok : fo_atom_full;
}

ERL_NIF_TERM fo_wake_cancel_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    ErlNifPid pid;
    if (!fo_resource_get(env, argv[0], &res) || !enif_get_local_pid(env, argv[1], &pid))
        return enif_make_badarg(env);
    fo_wakes_cancel(&res->wakes, (uint64_t)pid.pid);
    return fo_atom_ok;
}
