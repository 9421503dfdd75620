#include "fo_wake.h"

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
static int take_locked(fo_wakes *w, uint64_t pid, ErlNifPid *to)
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
    take_locked(w, pid, NULL);
    fo_spin_unlock(&w->lock);
}

int fo_wakes_take(fo_wakes *w, uint64_t pid, ErlNifPid *to)
{
    /* Looked up without the lock: while any sampler sleeps, every `in` of
     * the session's processes passes here, and most are nobody's. */
    unsigned i = 0;
    while (i < FO_WAKE_SLOTS && atomic_load_explicit(&w->slots[i].pid, memory_order_acquire) != pid)
        i++;
    if (i == FO_WAKE_SLOTS)
        return 0;
    fo_spin_lock(&w->lock);
    int found = take_locked(w, pid, to);
    fo_spin_unlock(&w->lock);
    return found;
}
