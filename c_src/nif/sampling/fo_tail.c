#include "fo_tail.h"

#include <bsd/stdlib.h>
#include <pthread.h>
#include <stdint.h>
#include <stdatomic.h>
#include <string.h>

#include "fo_atoms.h"
#include "fo_clock.h"
#include "fo_cpu.h"
#include "fo_cpu_helpers.h"
#include "fo_decode.h"
#include "fo_handle.h"
#include "fo_perf.h"
#include "fo_resource.h"
#include "fo_spinlock.h"
#include "fo_tail_entry.h"
#include "fo_tail_kept.h"
#include "fo_tracer.h"

static pthread_mutex_t enable_mutex = PTHREAD_MUTEX_INITIALIZER;
static tail_entry *_Atomic entries; /* published once filled */
static uint32_t max_processes, max_slices;
static uint64_t max_bytes;
static atomic_ullong slice_bytes; /* slices allocated, all entries */
static atomic_uint hint;
static atomic_ullong kept, full, truncated, reclaimed, asks, answers, missed_outs, wait_reads;
/* Lingering (tail_linger/2): how long, how many at once, and counters. */
static _Atomic int64_t linger_ns;
/* lingering_now: entries holding a place (lingering, or tracing a request
 * of a process that lingered: it keeps its place, so a process's requests
 * one after another write no node-wide counter). */
static atomic_uint max_lingering, lingering_now;
static atomic_ullong linger_full, swept;
/* Set once a request is traced without flags: drains look for their
 * processes from then on. */
static atomic_int flagless_ever;
/* Who sets the flags of a request without flags that may be slow
 * (tail_promoter/1: the tail hold), and how many it was asked to. */
static pthread_mutex_t promoter_lock = PTHREAD_MUTEX_INITIALIZER;
static ErlNifPid promoter;
static int have_promoter; /* under promoter_lock */
static atomic_ullong promotions;

/* One more in a counter of the entry (its holder alone writes it). */
static void bump(atomic_ullong *counter)
{
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + 1, memory_order_relaxed);
}

/* The entry gives back its place among the lingering, if it has one (its
 * holder: the owner, or whoever claimed or took it back). */
static void unplace(tail_entry *e)
{
    e->linger_after = 0;
    if (e->placed) {
        e->placed = 0;
        atomic_fetch_sub(&lingering_now, 1);
    }
}

int fo_tail_is_state(ErlNifEnv *env, ERL_NIF_TERM state)
{
    int arity;
    const ERL_NIF_TERM *items;
    return enif_get_tuple(env, state, &arity, &items) && arity == 3 && items[0] == fo_atom_tail;
}

/* The entry a state names while it is that state's, in any state but
 * free (the entry's state is the caller's to check), else NULL. */
static tail_entry *entry_named(ErlNifEnv *env, ERL_NIF_TERM state)
{
    int arity;
    const ERL_NIF_TERM *items;
    unsigned index, gen;
    tail_entry *table = atomic_load_explicit(&entries, memory_order_acquire);
    if (table == NULL || !enif_get_tuple(env, state, &arity, &items) || arity != 3 || items[0] != fo_atom_tail ||
        !enif_get_uint(env, items[1], &index) || !enif_get_uint(env, items[2], &gen) || index >= max_processes)
        return NULL;
    tail_entry *e = &table[index];
    if (atomic_load_explicit(&e->in_use, memory_order_acquire) == TAIL_FREE ||
        atomic_load_explicit(&e->gen, memory_order_relaxed) != gen)
        return NULL;
    return e;
}

/* The entry a state names while it is that state's and traces a request
 * (not lingering between two), else NULL. */
static tail_entry *entry_of(ErlNifEnv *env, ERL_NIF_TERM state)
{
    tail_entry *e = entry_named(env, state);
    return e != NULL && atomic_load_explicit(&e->in_use, memory_order_acquire) == TAIL_ACTIVE ? e : NULL;
}

/* Room for one more slice: doubles the entry's array, within max_slices
 * and the node-wide byte budget. */
static int room(tail_entry *e)
{
    if (e->count < e->cap)
        return 1;
    uint32_t cap = e->cap == 0 ? TAIL_FIRST_SLICES : e->cap * 2;
    if (cap > max_slices)
        cap = max_slices;
    if (cap <= e->cap)
        return 0;
    uint64_t more = (uint64_t)(cap - e->cap) * sizeof(tail_slice);
    if (atomic_fetch_add(&slice_bytes, more) + more > max_bytes) {
        atomic_fetch_sub(&slice_bytes, more);
        return 0;
    }
    tail_slice *grown = reallocarray(e->slices, cap, sizeof(tail_slice));
    if (grown == NULL) {
        atomic_fetch_sub(&slice_bytes, more);
        return 0;
    }
    e->slices = grown;
    e->cap = cap;
    return 1;
}

void fo_tail_add_record(tail_entry *e, const tail_slice *record)
{
    if (e->dropped == 0 && room(e))
        e->slices[e->count++] = *record;
    else if (e->dropped++ == 0)
        atomic_fetch_add_explicit(&truncated, 1, memory_order_relaxed);
}

static void close_slice(tail_entry *e, int64_t now, const fo_mfa *stop)
{
    static const fo_mfa none = {0, 0, 0};
    if (e->thread == 0)
        return;
    uint32_t flags = e->slice_flags | (atomic_exchange(&e->message, 0) ? TAIL_AFTER_MESSAGE : 0);
    fo_tail_add_record(e, &(tail_slice){(uint32_t)e->thread, flags, e->from_ns, now, stop != NULL ? *stop : none});
    e->thread = 0;
}

/* The process may be slow and stopped in `stop`: the helper of this
 * thread reads its stack before it runs again (as a native trace asks,
 * fo_cpu_ask.h), once per function per request. */
static void ask(ErlNifEnv *env, tail_entry *e, ERL_NIF_TERM state, const ErlNifPid *pid, const fo_mfa *stop)
{
    for (uint32_t i = 0; i < e->asked; i++)
        if (fo_mfa_equal(&e->asked_keys[i], stop))
            return;
    ErlNifPid helper;
    if (e->asked >= TAIL_ASKS || !fo_cpu_helpers_for(fo_perf_thread_id(), &helper))
        return;
    e->asked_keys[e->asked++] = *stop;
    atomic_fetch_add_explicit(&asks, 1, memory_order_relaxed);
    ErlNifEnv *msg_env = enif_alloc_env();
    if (msg_env == NULL)
        return;
    ERL_NIF_TERM mfa = enif_make_tuple3(msg_env, (ERL_NIF_TERM)stop->module, (ERL_NIF_TERM)stop->function,
                                        enif_make_uint(msg_env, stop->arity));
    ERL_NIF_TERM msg = enif_make_tuple4(msg_env, fo_atom_flame_on_context, enif_make_copy(msg_env, state),
                                        enif_make_pid(msg_env, pid), mfa);
    enif_send(env, &helper, msg_env, msg);
    enif_free_env(msg_env);
}

/* A promoted request's `in` or `out`: its callbacks say where it is from
 * now, no read is needed. */
static void promoted_event(tail_entry *e)
{
    if (e->promoted_ns != 0 && atomic_load_explicit(&e->next_read_ns, memory_order_relaxed) != 0)
        atomic_store_explicit(&e->next_read_ns, 0, memory_order_relaxed);
    e->promoted_open = 0;
}

/* An event of the process an entry traces: tag, the tracer state, the
 * tracee and the payload (read for an `out` only). */
static void note_event(ErlNifEnv *env, ERL_NIF_TERM tag, ERL_NIF_TERM state, ERL_NIF_TERM tracee,
                       ERL_NIF_TERM payload)
{
    ErlNifPid pid;
    tail_entry *e = entry_of(env, state);
    /* lingering (no request), or its request over (the flags stay on
     * while a kept one is replayed, or for good when it lingers) */
    if (e == NULL || e->end_ns != 0 || !enif_get_local_pid(env, tracee, &pid) || e->pid != (uint64_t)pid.pid)
        return;
    int64_t now = fo_tracer_clock_ns();
    if (tag == fo_atom_in) {
        /* Running still: an `out` went missing (it went out before its
         * flag was on, as erlang:trace/3 may make it, while the slice of
         * tail_begin was open). When is unknown, so the slice's samples
         * could be anyone's: it is dropped, its time left off-CPU. */
        if (e->thread != 0) {
            e->thread = 0;
            atomic_fetch_add_explicit(&missed_outs, 1, memory_order_relaxed);
        }
        fo_perf_note_thread();
        promoted_event(e);
        e->thread = fo_perf_thread_id();
        e->from_ns = now;
        e->slice_flags = atomic_exchange(&e->message, 0) ? TAIL_AFTER_MESSAGE : 0;
    } else if (tag == fo_atom_receive) {
        atomic_store(&e->message, 1);
    } else if (tag == fo_atom_gc_minor_start || tag == fo_atom_gc_major_start) {
        if (e->gc_from_ns == 0) {
            e->gc_from_ns = now;
            e->gc_major = tag == fo_atom_gc_major_start;
        }
    } else if (tag == fo_atom_gc_minor_end || tag == fo_atom_gc_major_end) {
        if (e->gc_from_ns != 0)
            fo_tail_add_record(e, &(tail_slice){0, 0, e->gc_from_ns, now, {0, 0, e->gc_major}});
        e->gc_from_ns = 0;
    } else if (tag == fo_atom_out) {
        /* where it stopped: {M, F, A} (atoms never move or die) */
        int arity;
        const ERL_NIF_TERM *mfa;
        unsigned a;
        fo_mfa stop = {0, 0, 0};
        if (enif_get_tuple(env, payload, &arity, &mfa) && arity == 3 && enif_is_atom(env, mfa[0]) &&
            enif_is_atom(env, mfa[1]) && enif_get_uint(env, mfa[2], &a))
            stop = (fo_mfa){(uint64_t)mfa[0], (uint64_t)mfa[1], a};
        /* running when it was promoted: its slice since then ends here */
        if (e->thread == 0 && e->promoted_open) {
            e->thread = fo_perf_thread_id();
            e->from_ns = e->promoted_ns;
        }
        promoted_event(e);
        close_slice(e, now, &stop);
        if (e->ask_after_ns != 0 && now >= e->ask_after_ns && stop.module != 0)
            ask(env, e, state, &pid, &stop);
    }
}

// trace(out, {tail, Index, Gen}, Pid, {M, F, A}, Opts): a slice ends (the
// `in`s and collections end in enabled/3, which says discard)
ERL_NIF_TERM fo_tail_trace(ErlNifEnv *env, const ERL_NIF_TERM argv[])
{
    note_event(env, argv[0], argv[1], argv[2], argv[3]);
    return fo_atom_ok;
}

ERL_NIF_TERM fo_tail_enabled(ErlNifEnv *env, const ERL_NIF_TERM argv[])
{
    ERL_NIF_TERM tag = argv[0];
    /* An `in`, a collection's start and end and a message are only their
     * time: taken here, and the VM builds nothing for trace/5 (see
     * fo_tracer.c) */
    if (tag == fo_atom_in || fo_decode_is_collection_tag(tag) || tag == fo_atom_receive) {
        note_event(env, tag, argv[1], argv[2], 0);
        return fo_atom_discard;
    }
    if (tag == fo_atom_out)
        return fo_atom_trace;
    if (tag != fo_atom_trace_status)
        return fo_atom_discard;
    /* a lingering process's flags are still ours (another tracer is
     * refused, as during a request) */
    tail_entry *e = entry_named(env, argv[1]);
    return e != NULL && atomic_load(&e->in_use) != TAIL_RECLAIM ? fo_atom_trace : fo_atom_remove;
}

ERL_NIF_TERM fo_tail_enable_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    unsigned processes, slices;
    ErlNifUInt64 bytes;
    if (!enif_get_uint(env, argv[0], &processes) || !enif_get_uint(env, argv[1], &slices) ||
        !enif_get_uint64(env, argv[2], &bytes) || processes == 0 || slices == 0 || processes > FO_TAIL_MAX_PROCESSES ||
        slices > FO_TAIL_MAX_SLICES || bytes == 0 || bytes > FO_TAIL_MAX_BYTES)
        return enif_make_badarg(env);
    pthread_mutex_lock(&enable_mutex);
    /* the budget and the per-request room may change; the table's size not */
    max_slices = slices;
    max_bytes = bytes;
    if (atomic_load(&entries) == NULL) {
        tail_entry *table = reallocarray(NULL, processes, sizeof(tail_entry));
        if (table == NULL) {
            pthread_mutex_unlock(&enable_mutex);
            return enif_make_tuple2(env, fo_atom_error, fo_atom_memory);
        }
        memset(table, 0, (size_t)processes * sizeof(tail_entry));
        max_processes = processes;
        atomic_store_explicit(&entries, table, memory_order_release);
    }
    ERL_NIF_TERM answer =
        enif_make_tuple3(env, fo_atom_ok, enif_make_uint(env, max_processes), enif_make_uint(env, max_slices));
    pthread_mutex_unlock(&enable_mutex);
    return answer;
}

/* A request of the calling process begins in entry e (in_use already
 * 1): its first slice runs from now, on this thread. */
static void start_request(tail_entry *e, const ErlNifPid *self, int64_t ask_after_ns, uint64_t proc)
{
    e->pid = (uint64_t)self->pid;
    e->count = 0;
    e->dropped = 0;
    e->end_ns = 0;
    e->linger_after = 0;
    e->asked = 0;
    e->gc_from_ns = 0;
    atomic_store(&e->message, 0);
    e->slice_flags = 0;
    fo_spin_lock(&e->ctx_lock);
    e->ctx_count = 0;
    e->frame_count = 0;
    e->reads = 0;
    fo_spin_unlock(&e->ctx_lock);
    fo_perf_note_thread();
    e->from_ns = e->begun_ns = fo_tracer_clock_ns();
    if (proc != 0) {
        /* no callbacks: no open slice; from half its threshold on, its
         * stack is read where it waits (fo_tail_poll_waits) */
        e->thread = 0;
        e->begin_thread = fo_perf_thread_id();
        e->promoted_ns = 0;
        e->promoted_open = 0;
        atomic_store_explicit(&e->promotion, TAIL_PROMOTE_NONE, memory_order_relaxed);
        atomic_store_explicit(&e->polls, 0, memory_order_relaxed);
        e->ask_after_ns = 0;
        atomic_store_explicit(&e->next_read_ns, ask_after_ns > 0 ? e->from_ns + ask_after_ns : 0,
                              memory_order_relaxed);
        if (!atomic_load_explicit(&flagless_ever, memory_order_relaxed))
            atomic_store(&flagless_ever, 1);
        bump(&e->n_flagless);
        atomic_store_explicit(&e->proc, proc, memory_order_release);
    } else {
        e->thread = fo_perf_thread_id();
        e->ask_after_ns = ask_after_ns > 0 ? e->from_ns + ask_after_ns : 0;
    }
    bump(&e->n_begun);
}

static ERL_NIF_TERM state_term(ErlNifEnv *env, uint32_t index, unsigned gen)
{
    return enif_make_tuple3(env, fo_atom_tail, enif_make_uint(env, index), enif_make_uint(env, gen));
}

/* The entry's owner as read now, for a term: 0 when it has none (it was
 * released meanwhile, by its owner on another thread). */
static int owner_of(tail_entry *e, ErlNifPid *owner)
{
    uint64_t pid = atomic_load_explicit(&e->pid, memory_order_relaxed);
    owner->pid = (ERL_NIF_TERM)pid;
    return pid != 0;
}

/* An entry taken for the calling process (in_use already 1): a new
 * generation, so a late callback of its last owner's misses it. */
static ERL_NIF_TERM take(ErlNifEnv *env, tail_entry *table, uint32_t index, const ErlNifPid *self, int64_t ask_after_ns,
                         uint64_t proc)
{
    tail_entry *e = &table[index];
    unsigned gen = atomic_fetch_add_explicit(&e->gen, 1, memory_order_relaxed) + 1;
    start_request(e, self, ask_after_ns, proc);
    if (atomic_load_explicit(&hint, memory_order_relaxed) != index + 1)
        atomic_store_explicit(&hint, index + 1, memory_order_relaxed);
    return state_term(env, index, gen);
}

/* The entry a hint names, with its index and generation, if the calling
 * process is its owner; else NULL. */
static tail_entry *owned(ErlNifEnv *env, ERL_NIF_TERM state, const ErlNifPid *self, uint32_t *index, unsigned *gen)
{
    int arity;
    const ERL_NIF_TERM *items;
    tail_entry *e = entry_named(env, state);
    if (e == NULL || e->pid != (uint64_t)self->pid || !enif_get_tuple(env, state, &arity, &items) ||
        !enif_get_uint(env, items[1], index) || !enif_get_uint(env, items[2], gen))
        return NULL;
    return e;
}

/* The processes requests without flags trace now, for fo_perf's drains
 * (fo_perf_known_fn). */
static uint32_t known_procs(uint64_t *out, uint32_t max)
{
    tail_entry *table = atomic_load_explicit(&entries, memory_order_acquire);
    uint32_t n = 0;
    if (table == NULL || !atomic_load_explicit(&flagless_ever, memory_order_relaxed))
        return 0;
    for (uint32_t i = 0; i < max_processes && n < max; i++) {
        uint64_t proc = atomic_load_explicit(&table[i].proc, memory_order_acquire);
        if (proc != 0)
            out[n++] = proc;
    }
    return n;
}

void fo_tail_init(void)
{
    fo_tail_flagless_init();
    fo_perf_set_known_fn(known_procs);
}

ERL_NIF_TERM fo_tail_flagless_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    ErlNifPid self;
    return enif_self(env, &self) != NULL && fo_tail_own_proc(env, &self) != 0 ? fo_atom_true : fo_atom_false;
}

ERL_NIF_TERM fo_tail_begin_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifPid self;
    ErlNifSInt64 ask_after;
    if (!enif_get_int64(env, argv[0], &ask_after) || ask_after < 0 || enif_self(env, &self) == NULL ||
        (argv[2] != fo_atom_true && argv[2] != fo_atom_false))
        return enif_make_badarg(env);
    tail_entry *table = atomic_load_explicit(&entries, memory_order_acquire);
    if (table == NULL)
        return fo_atom_disabled;
    uint64_t proc = 0;
    if (argv[2] == fo_atom_true) {
        if ((proc = fo_tail_own_proc(env, &self)) == 0)
            return fo_atom_unavailable;
        /* the entry of its last request, free again: taken with no scan
         * and no node-wide write */
        int arity;
        const ERL_NIF_TERM *items;
        unsigned last;
        int expected = TAIL_FREE;
        if (argv[1] != fo_atom_nil && enif_get_tuple(env, argv[1], &arity, &items) && arity == 3 &&
            items[0] == fo_atom_tail && enif_get_uint(env, items[1], &last) && last < max_processes &&
            atomic_compare_exchange_strong(&table[last].in_use, &expected, TAIL_ACTIVE))
            return take(env, table, last, &self, ask_after, proc);
    }
    /* the process's lingering entry (its flags still on with it): the
     * same state again, so no erlang:trace/3 call */
    uint32_t at;
    unsigned gen;
    tail_entry *mine = argv[1] == fo_atom_nil ? NULL : owned(env, argv[1], &self, &at, &gen);
    if (mine != NULL) {
        int expected = TAIL_LINGERING;
        if (atomic_compare_exchange_strong(&mine->in_use, &expected, TAIL_ACTIVE)) {
            bump(&mine->n_resumed);
            start_request(mine, &self, ask_after, proc);
            return state_term(env, at, gen);
        }
        /* being swept (its flags going off): once that is done */
        if (expected == TAIL_CLAIMED)
            return fo_atom_busy;
        if (expected == TAIL_ACTIVE)
            return fo_atom_active;
    }
    uint32_t start = atomic_load_explicit(&hint, memory_order_relaxed);
    for (uint32_t i = 0; i < max_processes; i++) {
        uint32_t index = (start + i) % max_processes;
        int expected = 0;
        if (atomic_compare_exchange_strong(&table[index].in_use, &expected, 1))
            return take(env, table, index, &self, ask_after, proc);
    }
    /* full: take back an entry whose process died with it */
    for (uint32_t index = 0; index < max_processes; index++) {
        tail_entry *e = &table[index];
        ErlNifPid owner;
        int expected = atomic_load(&e->in_use);
        if ((expected != TAIL_ACTIVE && expected != TAIL_LINGERING) || !owner_of(e, &owner) ||
            enif_is_process_alive(env, &owner) ||
            !atomic_compare_exchange_strong(&e->in_use, &expected, TAIL_RECLAIM))
            continue;
        unplace(e);
        atomic_fetch_add_explicit(&reclaimed, 1, memory_order_relaxed);
        atomic_store(&e->in_use, 1);
        return take(env, table, index, &self, ask_after, proc);
    }
    atomic_fetch_add_explicit(&full, 1, memory_order_relaxed);
    return fo_atom_full;
}

/* The calling process's entry named by state, else NULL. */
static tail_entry *own_entry(ErlNifEnv *env, ERL_NIF_TERM state)
{
    ErlNifPid self;
    tail_entry *e = entry_of(env, state);
    if (e == NULL || enif_self(env, &self) == NULL || e->pid != (uint64_t)self.pid)
        return NULL;
    return e;
}

/* What a request held beyond its entry: a long request's array (the next
 * one grows its own) and its answers. owner: the entry's pid from now. */
static void trim(tail_entry *e, uint64_t owner)
{
    if (e->cap > TAIL_KEPT_SLICES) {
        atomic_fetch_sub(&slice_bytes, (uint64_t)e->cap * sizeof(tail_slice));
        free(e->slices);
        e->slices = NULL;
        e->cap = 0;
    }
    fo_spin_lock(&e->ctx_lock);
    free(e->answers);
    e->answers = NULL;
    e->ctx_count = 0;
    e->frame_count = 0;
    e->pid = owner;
    fo_spin_unlock(&e->ctx_lock);
}

static void release(tail_entry *e)
{
    fo_tail_forget_proc(e);
    unplace(e);
    trim(e, 0);
    atomic_store_explicit(&e->in_use, TAIL_FREE, memory_order_release);
}

/* Whether the request of entry e that ends may leave its flags on
 * (lingering on, and the entry holds a place among the lingering, or
 * takes one of max_lingering). Else counted: its flags go at once. */
static int may_linger(tail_entry *e)
{
    /* without flags there is nothing to keep on */
    if (atomic_load_explicit(&e->proc, memory_order_relaxed) != 0 ||
        atomic_load_explicit(&linger_ns, memory_order_relaxed) <= 0) {
        unplace(e);
        return 0;
    }
    if (e->placed)
        return 1;
    if (atomic_fetch_add(&lingering_now, 1) < atomic_load(&max_lingering)) {
        e->placed = 1;
        return 1;
    }
    atomic_fetch_sub(&lingering_now, 1);
    atomic_fetch_add_explicit(&linger_full, 1, memory_order_relaxed);
    return 0;
}

/* The request is over; its process keeps the entry (and its place) and
 * its flags. */
static void linger(tail_entry *e)
{
    e->linger_after = 0;
    trim(e, e->pid);
    e->idle_ns = fo_tracer_clock_ns();
    bump(&e->n_lingered);
    atomic_store_explicit(&e->in_use, TAIL_LINGERING, memory_order_release);
}

/* The request of entry e is over at now: its running slice closes there,
 * and its callbacks note nothing more. */
static void end_request(tail_entry *e, int64_t now)
{
    e->end_ns = now;
    e->end_thread = fo_perf_thread_id();
    close_slice(e, now, NULL);
}

/* What the flags of a request that ended do (ok: they go now; linger;
 * untrace: a request without flags that got them, promoted, whose owner
 * takes them off, the promoter too if it sets them after this); sets
 * e->linger_after for let_go. */
static ERL_NIF_TERM flags_after(tail_entry *e)
{
    int promoted = atomic_exchange(&e->promotion, TAIL_PROMOTE_NONE) == TAIL_PROMOTE_ON;
    e->linger_after = may_linger(e);
    return promoted ? fo_atom_untrace : e->linger_after ? fo_atom_linger : fo_atom_ok;
}

/* The entry of a request that ended lingers, or goes (flags_after said). */
static void let_go(tail_entry *e)
{
    if (e->linger_after)
        linger(e);
    else
        release(e);
}

ERL_NIF_TERM fo_tail_end_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifSInt64 threshold_ns = -1;
    tail_entry *e = own_entry(env, argv[0]);
    if (e == NULL ||
        (argv[1] != fo_atom_false && (!enif_get_int64(env, argv[1], &threshold_ns) || threshold_ns < 0)))
        return enif_make_badarg(env);
    /* a threshold: the request's time decides here, so a fast one reads
     * no clock of its own. A slow one ends here too (its callbacks note
     * nothing more: what its process does before the second call, which
     * keeps it or not, is not its time) */
    if (threshold_ns >= 0 && e->end_ns == 0) {
        int64_t now = fo_tracer_clock_ns();
        if (now - e->begun_ns >= threshold_ns) {
            end_request(e, now);
            return enif_make_tuple2(env, fo_atom_slow, enif_make_int64(env, now - e->begun_ns));
        }
        if (now - e->begun_ns >= threshold_ns / 2)
            bump(&e->n_near);
    }
    ERL_NIF_TERM flags = flags_after(e);
    let_go(e);
    return flags;
}

/* Sends {Tag, State, Pid} (or {Tag, State, Pid, Last} where last is not
 * 0) about entry e at index to `to`, from any thread. */
static int send_about(const ErlNifPid *to, tail_entry *e, uint32_t index, ERL_NIF_TERM tag, ERL_NIF_TERM last)
{
    ErlNifPid owner;
    ErlNifEnv *msg_env;
    if (!owner_of(e, &owner) || (msg_env = enif_alloc_env()) == NULL)
        return 0;
    ERL_NIF_TERM state = state_term(msg_env, index, atomic_load(&e->gen));
    ERL_NIF_TERM pid = enif_make_pid(msg_env, &owner);
    ERL_NIF_TERM msg = last != 0 ? enif_make_tuple4(msg_env, tag, state, pid, last) : enif_make_tuple3(msg_env, tag, state, pid);
    int sent = enif_send(NULL, to, msg_env, msg);
    enif_free_env(msg_env);
    return sent;
}

/* A request without flags that may be slow: the promoter is asked, once,
 * to set its flags (fo_tail_promote_nif). */
static void ask_promoter(tail_entry *e, uint32_t index)
{
    int expected = TAIL_PROMOTE_NONE;
    pthread_mutex_lock(&promoter_lock);
    ErlNifPid to = promoter;
    int have = have_promoter;
    pthread_mutex_unlock(&promoter_lock);
    if (!have || !atomic_compare_exchange_strong(&e->promotion, &expected, TAIL_PROMOTE_ASKED))
        return;
    if (send_about(&to, e, index, fo_atom_flame_on_promote, 0))
        atomic_fetch_add_explicit(&promotions, 1, memory_order_relaxed);
}

int64_t fo_tail_poll_waits(void)
{
    tail_entry *table = atomic_load_explicit(&entries, memory_order_acquire);
    if (table == NULL || !atomic_load_explicit(&flagless_ever, memory_order_relaxed))
        return 0;
    int64_t next = 0;
    int64_t now = fo_tracer_clock_ns();
    ErlNifPid helper;
    int have_helper = -1;
    for (uint32_t i = 0; i < max_processes; i++) {
        tail_entry *e = &table[i];
        int64_t due = atomic_load_explicit(&e->next_read_ns, memory_order_relaxed);
        if (due == 0 || atomic_load_explicit(&e->in_use, memory_order_acquire) != TAIL_ACTIVE)
            continue;
        if (now < due) {
            if (next == 0 || due < next)
                next = due;
            continue;
        }
        /* every 2 ms at first, further apart as reads go unanswered or
         * pile up (a process that died with its entry, a request of many
         * seconds), and none past TAIL_WAIT_READS asks */
        uint32_t asked = atomic_fetch_add_explicit(&e->polls, 1, memory_order_relaxed);
        int64_t every = TAIL_READ_EVERY_NS * (1 + asked / 64);
        int64_t again = asked + 1 < TAIL_WAIT_READS * 4 ? now + every : 0;
        atomic_store_explicit(&e->next_read_ns, again, memory_order_relaxed);
        if (again != 0 && (next == 0 || again < next))
            next = again;
        ask_promoter(e, i);
        if (have_helper < 0)
            have_helper = fo_cpu_helpers_for(0, &helper);
        if (!have_helper)
            continue;
        if (send_about(&helper, e, i, fo_atom_flame_on_context, fo_atom_flagless))
            atomic_fetch_add_explicit(&asks, 1, memory_order_relaxed);
    }
    return next;
}

ERL_NIF_TERM fo_tail_context(ErlNifEnv *env, const ERL_NIF_TERM argv[])
{
    ErlNifPid pid;
    fo_mfa key;
    unsigned length;
    tail_entry *e = entry_of(env, argv[0]);
    if (!enif_get_local_pid(env, argv[1], &pid) || !enif_get_list_length(env, argv[4], &length))
        return enif_make_badarg(env);
    if (e == NULL || e->pid != (uint64_t)pid.pid)
        return fo_atom_stopped;
    if (!fo_decode_mfa(env, argv[3], &key))
        return fo_atom_stale;
    fo_mfa frames[TAIL_CONTEXT_FRAMES];
    uint32_t count = (uint32_t)length;
    if (count > TAIL_CONTEXT_FRAMES - 1)
        count = TAIL_CONTEXT_FRAMES - 1; /* the innermost ones */
    ERL_NIF_TERM list = argv[4], head;
    for (uint32_t i = 0; i < count; i++) {
        if (!enif_get_list_cell(env, list, &head, &list) || !fo_decode_frame(env, head, &frames[count - 1 - i]))
            return enif_make_badarg(env);
    }
    /* a BIF that traps is its current function, not a frame */
    if (count == 0 || !fo_mfa_equal(&frames[count - 1], &key))
        frames[count++] = key;
    ERL_NIF_TERM result = fo_atom_full;
    int64_t now = fo_tracer_clock_ns();
    fo_spin_lock(&e->ctx_lock);
    /* still that request's entry (it may have ended meanwhile, and the
     * same process begun another) */
    if (entry_of(env, argv[0]) != e || e->pid != (uint64_t)pid.pid) {
        result = fo_atom_stopped;
    } else if (e->answers == NULL && (e->answers = malloc(sizeof(tail_answers))) == NULL) {
        result = fo_atom_full;
    } else if (argv[2] == fo_atom_flagless) {
        /* a read of a request without flags where it waits (asked by the
         * drainer: fo_tail_poll_waits) */
        int noted = fo_tail_note_wait(e, now, &key, frames, count);
        if (noted > 0)
            atomic_fetch_add_explicit(&wait_reads, 1, memory_order_relaxed);
        if (noted > 1)
            atomic_fetch_add_explicit(&answers, 1, memory_order_relaxed);
        result = noted > 0 ? fo_atom_ok : fo_atom_full;
    } else if (e->ctx_count < TAIL_ASKS && e->frame_count + count <= TAIL_CONTEXT_FRAMES) {
        tail_context *c = &e->answers->ctx[e->ctx_count++];
        c->key = key;
        c->after = __atomic_load_n(&e->count, __ATOMIC_RELAXED);
        c->first = e->frame_count;
        c->count = count;
        memcpy(&e->answers->frames[e->frame_count], frames, sizeof(fo_mfa) * count);
        e->frame_count += count;
        atomic_fetch_add_explicit(&answers, 1, memory_order_relaxed);
        result = fo_atom_ok;
    }
    fo_spin_unlock(&e->ctx_lock);
    return result;
}

/* A kept request with more slices than this (a CPU-bound one has one
 * every few µs), or without flags and longer than KEEP_INLINE_NS (its
 * slices cut from its samples now), is copied on a dirty scheduler: its
 * samples are read slice by slice, and a NIF on a normal scheduler must
 * return within about a millisecond. The hop costs tens of µs: most
 * kept requests are short. */
#define KEEP_INLINE_SLICES 2048u
#define KEEP_INLINE_NS 20000000

static ERL_NIF_TERM keep_now(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

/* tail_keep(State, MaxSamples, MaxFrames): a kept request copied with
 * its samples (fo_tail_kept.c), then its entry lingers or goes. */
ERL_NIF_TERM fo_tail_keep_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    tail_entry *e = own_entry(env, argv[0]);
    if (e != NULL && e->end_ns != 0 &&
        (e->count > KEEP_INLINE_SLICES ||
         (atomic_load(&e->proc) != 0 && e->end_ns - e->begun_ns > KEEP_INLINE_NS)))
        return enif_schedule_nif(env, "tail_keep", ERL_NIF_DIRTY_JOB_CPU_BOUND, keep_now, argc, argv);
    return keep_now(env, argc, argv);
}

static ERL_NIF_TERM keep_now(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    unsigned max_samples, max_frames;
    tail_entry *e = own_entry(env, argv[0]);
    if (e == NULL || e->end_ns == 0 || !enif_get_uint(env, argv[1], &max_samples) ||
        !enif_get_uint(env, argv[2], &max_frames))
        return enif_make_badarg(env);
    atomic_fetch_add_explicit(&kept, 1, memory_order_relaxed);
    /* while a request without flags is one still (it lingers not) */
    ERL_NIF_TERM flags = flags_after(e);
    /* (each read of the samples drains its threads' rings first: what
     * was sampled up to now) */
    uint64_t proc = atomic_load(&e->proc);
    if (proc != 0) {
        int overwritten = 0;
        if (fo_tail_flagless_slices(e, proc, &overwritten) != 0)
            return enif_raise_exception(env, fo_atom_memory);
        if (overwritten && e->dropped++ == 0)
            atomic_fetch_add_explicit(&truncated, 1, memory_order_relaxed);
    }
    /* a long request's array goes with it (its entry would free it):
     * counted in the trace store's bytes from here, not the table's */
    tail_slice *long_slices = NULL;
    if (e->cap > TAIL_KEPT_SLICES) {
        long_slices = e->slices;
        atomic_fetch_sub(&slice_bytes, (uint64_t)e->cap * sizeof(tail_slice));
        e->slices = NULL;
        e->cap = 0;
    }
    fo_tail_kept *k = fo_tail_kept_make(e, long_slices, max_samples, max_frames);
    if (k == NULL) {
        e->count = 0; /* its slices may have gone with the copy */
        return enif_raise_exception(env, fo_atom_memory);
    }
    ERL_NIF_TERM answer[] = {flags,
                             enif_make_resource(env, k),
                             enif_make_uint(env, k->count),
                             enif_make_uint(env, k->dropped),
                             enif_make_uint(env, k->samples_dropped),
                             enif_make_uint64(env, k->bytes)};
    enif_release_resource(k);
    let_go(e);
    return enif_make_tuple_from_array(env, answer, 6);
}

ERL_NIF_TERM fo_tail_promoter_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifPid pid;
    int have = argv[0] != fo_atom_nil;
    if (have && !enif_get_local_pid(env, argv[0], &pid))
        return enif_make_badarg(env);
    pthread_mutex_lock(&promoter_lock);
    if (have)
        promoter = pid;
    have_promoter = have;
    pthread_mutex_unlock(&promoter_lock);
    return fo_atom_ok;
}

ERL_NIF_TERM fo_tail_promote_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tail_entry *e = entry_of(env, argv[0]);
    if (argv[1] == fo_atom_check)
        return e != NULL && e->end_ns == 0 && atomic_load(&e->promotion) == TAIL_PROMOTE_ON ? fo_atom_ok
                                                                                            : fo_atom_gone;
    if (argv[1] != fo_atom_begin)
        return enif_make_badarg(env);
    int expected = TAIL_PROMOTE_ASKED;
    if (e == NULL || e->end_ns != 0 || atomic_load(&e->proc) == 0)
        return fo_atom_gone;
    /* from now its callbacks make its slices; it is not running as far
     * as they know (its first `out`, if it runs, is not a slice: the
     * samples say that part) */
    e->promoted_ns = fo_tracer_clock_ns();
    e->thread = 0;
    e->promoted_open = 1;
    e->ask_after_ns = e->promoted_ns;
    if (!atomic_compare_exchange_strong(&e->promotion, &expected, TAIL_PROMOTE_ON))
        return fo_atom_gone;
    /* its reads go on until its first callback: erlang:trace/3 waits for
     * a running process to stop, and where it stopped is read so */
    return fo_atom_ok;
}

ERL_NIF_TERM fo_tail_linger_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    unsigned ms, most;
    if (!enif_get_uint(env, argv[0], &ms) || !enif_get_uint(env, argv[1], &most) || ms > FO_TAIL_MAX_LINGER_MS ||
        most > FO_TAIL_MAX_PROCESSES)
        return enif_make_badarg(env);
    atomic_store(&max_lingering, most);
    atomic_store(&linger_ns, (int64_t)ms * 1000000);
    return fo_atom_ok;
}

ERL_NIF_TERM fo_tail_state_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tail_entry *e = entry_named(env, argv[0]);
    switch (e != NULL ? atomic_load(&e->in_use) : TAIL_FREE) {
    case TAIL_ACTIVE:
        return fo_atom_active;
    case TAIL_LINGERING:
        return fo_atom_lingering;
    case TAIL_CLAIMED:
        return fo_atom_claimed;
    default:
        return fo_atom_gone;
    }
}

/* Lingering -> claimed: its flags are the claimer's to remove. */
static int claim(tail_entry *e)
{
    int expected = TAIL_LINGERING;
    if (!atomic_compare_exchange_strong(&e->in_use, &expected, TAIL_CLAIMED))
        return expected;
    unplace(e);
    return TAIL_LINGERING;
}

ERL_NIF_TERM fo_tail_claim_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tail_entry *e = entry_named(env, argv[0]);
    switch (e != NULL ? claim(e) : TAIL_FREE) {
    case TAIL_LINGERING:
        return fo_atom_ok;
    case TAIL_CLAIMED:
        return fo_atom_busy;
    case TAIL_ACTIVE:
        return fo_atom_active;
    default:
        return fo_atom_gone;
    }
}

ERL_NIF_TERM fo_tail_release_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tail_entry *e = entry_named(env, argv[0]);
    if (e == NULL || atomic_load(&e->in_use) != TAIL_CLAIMED)
        return fo_atom_gone;
    release(e);
    return fo_atom_ok;
}

ERL_NIF_TERM fo_tail_idle_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifSInt64 idle_ns;
    if (!enif_get_int64(env, argv[0], &idle_ns) || idle_ns < 0)
        return enif_make_badarg(env);
    tail_entry *table = atomic_load_explicit(&entries, memory_order_acquire);
    ERL_NIF_TERM list = enif_make_list(env, 0);
    int64_t now = fo_tracer_clock_ns();
    for (uint32_t i = 0; table != NULL && i < max_processes; i++) {
        tail_entry *e = &table[i];
        if (atomic_load_explicit(&e->in_use, memory_order_acquire) != TAIL_LINGERING)
            continue;
        ErlNifPid owner;
        if (!owner_of(e, &owner))
            continue;
        /* a process that died took its flags with it: its place goes
         * now, however short it lingered */
        int alive = enif_is_process_alive(env, &owner);
        if ((alive && now - e->idle_ns < idle_ns) || claim(e) != TAIL_LINGERING)
            continue;
        atomic_fetch_add_explicit(&swept, 1, memory_order_relaxed);
        if (!alive) {
            release(e);
            continue;
        }
        ERL_NIF_TERM state = state_term(env, i, atomic_load(&e->gen));
        list = enif_make_list_cell(env, enif_make_tuple2(env, enif_make_pid(env, &owner), state), list);
    }
    return list;
}

ERL_NIF_TERM fo_tail_owners_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    tail_entry *table = atomic_load_explicit(&entries, memory_order_acquire);
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (uint32_t i = 0; table != NULL && i < max_processes; i++) {
        tail_entry *e = &table[i];
        if (atomic_load_explicit(&e->in_use, memory_order_acquire) != 1)
            continue;
        ErlNifPid owner;
        int taken = 1;
        if (!owner_of(e, &owner))
            continue;
        if (!enif_is_process_alive(env, &owner)) {
            if (atomic_compare_exchange_strong(&e->in_use, &taken, TAIL_RECLAIM)) {
                atomic_fetch_add_explicit(&reclaimed, 1, memory_order_relaxed);
                release(e);
            }
            continue;
        }
        ERL_NIF_TERM state =
            enif_make_tuple3(env, fo_atom_tail, enif_make_uint(env, i), enif_make_uint(env, atomic_load(&e->gen)));
        list = enif_make_list_cell(env, enif_make_tuple2(env, enif_make_pid(env, &owner), state), list);
    }
    return list;
}

static void put(ErlNifEnv *env, ERL_NIF_TERM *map, const char *key, unsigned long long value)
{
    enif_make_map_put(env, *map, enif_make_atom(env, key), enif_make_uint64(env, value), map);
}

ERL_NIF_TERM fo_tail_stats_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    tail_entry *table = atomic_load_explicit(&entries, memory_order_acquire);
    unsigned long long in_use = 0, lingering = 0, begun = 0, resumed = 0, lingered = 0, flagless = 0,
                       flagless_begun = 0, near = 0;
    for (uint32_t i = 0; table != NULL && i < max_processes; i++) {
        int state = atomic_load_explicit(&table[i].in_use, memory_order_relaxed);
        in_use += state == TAIL_ACTIVE || state == TAIL_RECLAIM;
        lingering += state == TAIL_LINGERING || state == TAIL_CLAIMED;
        begun += atomic_load_explicit(&table[i].n_begun, memory_order_relaxed);
        resumed += atomic_load_explicit(&table[i].n_resumed, memory_order_relaxed);
        lingered += atomic_load_explicit(&table[i].n_lingered, memory_order_relaxed);
        flagless_begun += atomic_load_explicit(&table[i].n_flagless, memory_order_relaxed);
        near += atomic_load_explicit(&table[i].n_near, memory_order_relaxed);
        flagless += atomic_load_explicit(&table[i].proc, memory_order_relaxed) != 0;
    }
    ERL_NIF_TERM map = enif_make_new_map(env);
    put(env, &map, "processes", table != NULL ? max_processes : 0);
    put(env, &map, "slices", table != NULL ? max_slices : 0);
    put(env, &map, "max_bytes", table != NULL ? max_bytes : 0);
    put(env, &map, "bytes",
        table != NULL ? (unsigned long long)max_processes * sizeof(tail_entry) + atomic_load(&slice_bytes) : 0);
    put(env, &map, "in_use", in_use);
    put(env, &map, "begun", begun);
    put(env, &map, "kept", atomic_load(&kept));
    put(env, &map, "full", atomic_load(&full));
    put(env, &map, "truncated", atomic_load(&truncated));
    put(env, &map, "reclaimed", atomic_load(&reclaimed));
    put(env, &map, "asks", atomic_load(&asks));
    put(env, &map, "answers", atomic_load(&answers));
    put(env, &map, "missed_outs", atomic_load(&missed_outs));
    put(env, &map, "lingering", lingering);
    put(env, &map, "linger_ms", (unsigned long long)(atomic_load(&linger_ns) / 1000000));
    put(env, &map, "max_lingering", atomic_load(&max_lingering));
    put(env, &map, "lingered", lingered);
    put(env, &map, "resumed", resumed);
    put(env, &map, "linger_full", atomic_load(&linger_full));
    put(env, &map, "swept", atomic_load(&swept));
    put(env, &map, "flagless", flagless);
    put(env, &map, "wait_reads", atomic_load(&wait_reads));
    put(env, &map, "promotions", atomic_load(&promotions));
    put(env, &map, "near", near);
    put(env, &map, "flagless_begun", flagless_begun);
    return map;
}

void fo_tail_unload(void)
{
    fo_perf_set_known_fn(NULL); /* no drain reads the table from here */
    pthread_mutex_lock(&enable_mutex);
    tail_entry *table = atomic_exchange(&entries, NULL);
    for (uint32_t i = 0; table != NULL && i < max_processes; i++) {
        free(table[i].slices);
        free(table[i].answers);
    }
    free(table);
    atomic_store(&slice_bytes, 0);
    atomic_store(&lingering_now, 0);
    pthread_mutex_unlock(&enable_mutex);
}
