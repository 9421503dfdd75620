#include "fo_drainer.h"

#include "fo_slot.h"

static ErlNifMutex *mutex;
static ErlNifCond *wakeup;
static ErlNifTid thread;
static int running;  /* under mutex */
static int stopping; /* under mutex */
static fo_session_res *first, *last; /* the queue, linked by drain_next */
static ErlNifEnv *fold_env;          /* the thread's, for checking atoms */

static fo_session_res *pop(void)
{
    fo_session_res *res = first;
    if (res != NULL) {
        first = res->drain_next;
        if (first == NULL)
            last = NULL;
        res->drain_next = NULL;
    }
    return res;
}

static void give_back(fo_session_res *res)
{
    atomic_store(&res->ring.drain_queued, 0);
    enif_release_resource(res); /* may be the last reference: the destructor runs here */
}

static void *drainer_main(void *arg)
{
    (void)arg;
    enif_mutex_lock(mutex);
    for (;;) {
        while (first == NULL && !stopping)
            enif_cond_wait(wakeup, mutex);
        if (stopping)
            break;
        fo_session_res *res = pop();
        enif_mutex_unlock(mutex);
        /* A small ring is grown here, which takes its producers' slot too
         * (the ring moves): a few times per trace. */
        ERL_NIF_TERM key = atomic_load(&res->slot_term);
        fo_session_res *held = key != 0 && atomic_load(&res->ring.eager) ? fo_slot_acquire(key) : NULL;
        if (held != NULL && held != res)
            fo_slot_release(key); /* keys are never reused: cannot happen */
        int grow = held == res;
        fo_spin_lock(&res->lock);
        if (res->core != NULL) {
            fo_resource_fold(res, fold_env);
            if (grow)
                fo_ring_grow(&res->ring);
            fo_resource_account(res);
        }
        fo_spin_unlock(&res->lock);
        if (grow)
            fo_slot_release(key);
        give_back(res);
        enif_mutex_lock(mutex);
    }
    enif_mutex_unlock(mutex);
    return NULL;
}

int fo_drainer_start(void)
{
    if (mutex == NULL) {
        mutex = enif_mutex_create("flame_on_drainer");
        wakeup = enif_cond_create("flame_on_drainer");
        fold_env = enif_alloc_env();
        if (mutex == NULL || wakeup == NULL || fold_env == NULL)
            return 0;
    }
    enif_mutex_lock(mutex);
    int ok = running;
    if (!running) {
        stopping = 0;
        running = enif_thread_create("flame_on_drainer", &thread, drainer_main, NULL, NULL) == 0;
        ok = running;
    }
    enif_mutex_unlock(mutex);
    return ok;
}

void fo_drainer_stop(void)
{
    if (mutex == NULL)
        return;
    enif_mutex_lock(mutex);
    int was_running = running;
    stopping = 1;
    running = 0;
    enif_cond_signal(wakeup);
    enif_mutex_unlock(mutex);
    if (was_running)
        enif_thread_join(thread, NULL);
    for (;;) {
        enif_mutex_lock(mutex);
        fo_session_res *res = pop();
        enif_mutex_unlock(mutex);
        if (res == NULL)
            break;
        give_back(res);
    }
    /* the library is going away: nothing calls in any more */
    enif_free_env(fold_env);
    enif_cond_destroy(wakeup);
    enif_mutex_destroy(mutex);
    fold_env = NULL;
    wakeup = NULL;
    mutex = NULL;
}

int fo_drainer_request(fo_session_res *res)
{
    if (mutex == NULL)
        return 0;
    enif_mutex_lock(mutex);
    int queued = running;
    if (queued) {
        enif_keep_resource(res);
        res->drain_next = NULL;
        if (last == NULL)
            first = res;
        else
            last->drain_next = res;
        last = res;
        enif_cond_signal(wakeup);
    }
    enif_mutex_unlock(mutex);
    return queued;
}
