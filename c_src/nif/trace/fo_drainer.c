#include "fo_drainer.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "fo_atoms.h"
#include "fo_perf.h"
#include "fo_symbols.h"
#include "fo_tail.h"
#include "fo_tracer_slots.h"

/* While native traces run, the kernel's sample rings are copied out this
 * often (a ring holds a few hundred ms of samples at the most frequent
 * sampling), and the perf map read for modules loaded since. */
#define PERF_TICK_NS 20000000
/* the shortest tick: while a tail trace without flags may be slow, its
 * waits are read this often (fo_tail_poll_waits) */
#define WAIT_TICK_NS 2000000

/* A message the thread sends for a tracer callback: {flame_on_in, Pid}
 * (fo_drainer_send_in), or {flame_on_context, {label, Label}, Pid, {M, F,
 * A}} when has_mfa (fo_drainer_send_context). */
typedef struct fo_mail {
    struct fo_mail *next;
    ErlNifPid to;
    uint64_t pid;
    int has_mfa;
    fo_mfa mfa;
    uint64_t label;
} fo_mail;

/* pthread's, not enif's: the wait needs a timeout (PERF_TICK_NS) */
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wakeup;
static int made; /* wakeup and the environments exist */
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
        ErlNifPid about;
        about.pid = (ERL_NIF_TERM)m->pid;
        ERL_NIF_TERM pid = enif_make_pid(mail_env, &about);
        ERL_NIF_TERM msg;
        if (m->has_mfa) {
            ERL_NIF_TERM mfa = enif_make_tuple3(mail_env, (ERL_NIF_TERM)m->mfa.module, (ERL_NIF_TERM)m->mfa.function,
                                                enif_make_uint(mail_env, m->mfa.arity));
            ERL_NIF_TERM session = enif_make_tuple2(mail_env, fo_atom_label, enif_make_uint64(mail_env, m->label));
            msg = enif_make_tuple4(mail_env, fo_atom_flame_on_context, session, pid, mfa);
        } else {
            msg = enif_make_tuple2(mail_env, fo_atom_flame_on_in, pid);
        }
        enif_send(NULL, &m->to, mail_env, msg);
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

static int64_t now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* Waits for work (caller holds the mutex); while anyone samples, for
 * tick_ns at most. Returns 1 when it is time to pump the samples. */
static int wait_for_work(int64_t *last_pump, int64_t tick_ns)
{
    while (first == NULL && mail == NULL && !stopping) {
        if (!fo_perf_active()) {
            pthread_cond_wait(&wakeup, &mutex);
            continue;
        }
        int64_t due = *last_pump + tick_ns;
        if (now_ns() >= due)
            break;
        struct timespec at = {(time_t)(due / 1000000000), (long)(due % 1000000000)};
        pthread_cond_timedwait(&wakeup, &mutex, &at);
    }
    if (stopping || !fo_perf_active() || now_ns() < *last_pump + tick_ns)
        return 0;
    *last_pump = now_ns();
    return 1;
}

static void *drainer_main(void *arg)
{
    (void)arg;
    int64_t last_pump = 0;
    int64_t tick_ns = PERF_TICK_NS;
    pthread_mutex_lock(&mutex);
    for (;;) {
        if (wait_for_work(&last_pump, tick_ns)) {
            pthread_mutex_unlock(&mutex);
            fo_perf_pump();
            fo_symbols_refresh();
            /* sooner when a tail trace's read is due before the tick */
            int64_t due = fo_tail_poll_waits();
            int64_t wait = due != 0 ? due - now_ns() : PERF_TICK_NS;
            tick_ns = wait < WAIT_TICK_NS ? WAIT_TICK_NS : wait > PERF_TICK_NS ? PERF_TICK_NS : wait;
            pthread_mutex_lock(&mutex);
            continue;
        }
        if (stopping)
            break;
        if (mail != NULL) {
            fo_mail *m = take_mail();
            pthread_mutex_unlock(&mutex);
            deliver(m);
            pthread_mutex_lock(&mutex);
            continue;
        }
        fo_session_res *res = pop();
        pthread_mutex_unlock(&mutex);
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
        pthread_mutex_lock(&mutex);
    }
    pthread_mutex_unlock(&mutex);
    return NULL;
}

int fo_drainer_start(void)
{
    if (!made) {
        pthread_condattr_t attr;
        if (pthread_condattr_init(&attr) != 0)
            return 0;
        int ok = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&wakeup, &attr) == 0;
        pthread_condattr_destroy(&attr);
        if (!ok)
            return 0;
        fold_env = enif_alloc_env();
        mail_env = enif_alloc_env();
        made = 1;
        if (fold_env == NULL || mail_env == NULL)
            return 0;
    }
    pthread_mutex_lock(&mutex);
    int ok = running;
    if (!running) {
        stopping = 0;
        running = enif_thread_create("flame_on_drainer", &thread, drainer_main, NULL, NULL) == 0;
        ok = running;
    }
    pthread_mutex_unlock(&mutex);
    return ok;
}

void fo_drainer_kick(void)
{
    if (!made)
        return;
    pthread_mutex_lock(&mutex);
    pthread_cond_signal(&wakeup);
    pthread_mutex_unlock(&mutex);
}

void fo_drainer_stop(void)
{
    if (!made)
        return;
    pthread_mutex_lock(&mutex);
    int was_running = running;
    stopping = 1;
    running = 0;
    pthread_cond_signal(&wakeup);
    pthread_mutex_unlock(&mutex);
    if (was_running)
        enif_thread_join(thread, NULL);
    for (;;) {
        pthread_mutex_lock(&mutex);
        fo_session_res *res = pop();
        pthread_mutex_unlock(&mutex);
        if (res == NULL)
            break;
        give_back(res);
    }
    pthread_mutex_lock(&mutex);
    discard(take_mail());
    pthread_mutex_unlock(&mutex);
    /* the library is going away: nothing calls in any more */
    if (fold_env != NULL)
        enif_free_env(fold_env);
    if (mail_env != NULL)
        enif_free_env(mail_env);
    mail_env = NULL;
    fold_env = NULL;
    pthread_cond_destroy(&wakeup);
    made = 0;
}

static int post(const ErlNifPid *to, uint64_t pid, const fo_mfa *mfa, uint64_t label)
{
    if (!made)
        return 0;
    fo_mail *m = enif_alloc(sizeof(*m));
    if (m == NULL)
        return 0;
    m->to = *to;
    m->pid = pid;
    m->has_mfa = mfa != NULL;
    m->label = label;
    if (mfa != NULL)
        m->mfa = *mfa;
    pthread_mutex_lock(&mutex);
    int queued = running;
    if (queued) {
        m->next = mail;
        mail = m;
        pthread_cond_signal(&wakeup);
    }
    pthread_mutex_unlock(&mutex);
    if (!queued)
        enif_free(m);
    return queued;
}

int fo_drainer_send_in(const ErlNifPid *to, uint64_t pid)
{
    return post(to, pid, NULL, 0);
}

int fo_drainer_send_context(const ErlNifPid *to, uint64_t label, uint64_t pid, const fo_mfa *mfa)
{
    return post(to, pid, mfa, label);
}

int fo_drainer_request(fo_session_res *res)
{
    if (!made)
        return 0;
    pthread_mutex_lock(&mutex);
    int queued = running;
    if (queued) {
        enif_keep_resource(res);
        res->drain_next = NULL;
        if (last == NULL)
            first = res;
        else
            last->drain_next = res;
        last = res;
        pthread_cond_signal(&wakeup);
    }
    pthread_mutex_unlock(&mutex);
    return queued;
}
