#include "fo_drainer.h"

#include "fo_atoms.h"
#include "fo_tracer_slots.h"

/* A message the thread sends for a tracer callback (fo_drainer_send_in). */
typedef struct fo_mail {
    struct fo_mail *next;
    ErlNifPid to;
    uint64_t pid;
} fo_mail;

static ErlNifMutex *mutex;
static ErlNifCond *wakeup;
static ErlNifTid thread;
static int running;  /* under mutex */
static int stopping; /* under mutex */
static fo_session_res *first, *last; /* the queue, linked by drain_next */
static ErlNifEnv *fold_env;          /* the thread's, for checking atoms */
static fo_mail *mail;                /* messages to send, newest first (under mutex) */
static ErlNifEnv *mail_env;          /* the thread's, for building them */

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

/* The messages queued so far, oldest first (caller holds the mutex). */
static fo_mail *take_mail(void)
{
    fo_mail *oldest = NULL;
    while (mail != NULL) {
        fo_mail *m = mail;
        mail = m->next;
        m->next = oldest;
        oldest = m;
    }
    return oldest;
}

static void deliver(fo_mail *m)
{
    while (m != NULL) {
        fo_mail *next = m->next;
        ErlNifPid woken;
        woken.pid = (ERL_NIF_TERM)m->pid;
        enif_send(NULL, &m->to, mail_env,
                  enif_make_tuple2(mail_env, fo_atom_flame_on_in, enif_make_pid(mail_env, &woken)));
        enif_clear_env(mail_env);
        enif_free(m);
        m = next;
    }
}

static void discard(fo_mail *m)
{
    while (m != NULL) {
        fo_mail *next = m->next;
        enif_free(m);
        m = next;
    }
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
        while (first == NULL && mail == NULL && !stopping)
            enif_cond_wait(wakeup, mutex);
        if (stopping)
            break;
        if (mail != NULL) {
            fo_mail *m = take_mail();
            enif_mutex_unlock(mutex);
            deliver(m);
            enif_mutex_lock(mutex);
            continue;
        }
        fo_session_res *res = pop();
        enif_mutex_unlock(mutex);
        /* A small ring is grown here, which takes its producers' slot too
         * (the ring moves): a few times per trace. */
        ERL_NIF_TERM key = atomic_load(&res->slot_term);
        fo_session_res *held = key != 0 && atomic_load(&res->ring.eager) ? fo_tracer_slots_acquire(key) : NULL;
        if (held != NULL && held != res)
            fo_tracer_slots_release(key); /* keys are never reused: cannot happen */
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
            fo_tracer_slots_release(key);
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
        mail_env = enif_alloc_env();
        if (mutex == NULL || wakeup == NULL || fold_env == NULL || mail_env == NULL)
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
    enif_mutex_lock(mutex);
    discard(take_mail());
    enif_mutex_unlock(mutex);
    /* the library is going away: nothing calls in any more */
    enif_free_env(fold_env);
    enif_free_env(mail_env);
    mail_env = NULL;
    enif_cond_destroy(wakeup);
    enif_mutex_destroy(mutex);
    fold_env = NULL;
    wakeup = NULL;
    mutex = NULL;
}

int fo_drainer_send_in(const ErlNifPid *to, uint64_t pid)
{
    if (mutex == NULL)
        return 0;
    fo_mail *m = enif_alloc(sizeof(*m));
    if (m == NULL)
        return 0;
    m->to = *to;
    m->pid = pid;
    enif_mutex_lock(mutex);
    int queued = running;
    if (queued) {
        m->next = mail;
        mail = m;
        enif_cond_signal(wakeup);
    }
    enif_mutex_unlock(mutex);
    if (!queued)
        enif_free(m);
    return queued;
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
