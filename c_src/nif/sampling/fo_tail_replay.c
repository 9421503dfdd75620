/* A kept tail request's copy (fo_tail_kept.h) replayed into a
 * CPU-sampled core session: its slices as `in` and `out` events in time
 * order, its collections, where the helper read it stopped, and the
 * samples of its slices from the copy. */
#include "fo_tail_replay.h"

#include <bsd/stdlib.h>
#include <stdlib.h>
#include <string.h>

#include "fo_atoms.h"
#include "fo_cpu.h"
#include "fo_handle.h"
#include "fo_resource.h"

/* The contexts read after `after` slices (every one: TAIL_ALL), into the
 * session (caller holds its lock). */
#define TAIL_ALL UINT32_MAX
static void apply_contexts(fo_session_res *res, const fo_tail_kept *k, uint32_t after)
{
    for (uint32_t i = 0; i < k->ctx_count; i++) {
        const tail_context *c = &k->ctx[i];
        if (after != TAIL_ALL && c->after != after)
            continue;
        const fo_mfa *frames = &k->ctx_frames[c->first];
        uint32_t from = fo_cpu_scope_start(&res->cpu_scope, frames, c->count);
        /* a stack cut by the node's backtrace_depth below the root says
         * not where the wait was: the core places it as without */
        if (!res->cpu_scope.has_root || !fo_mfa_equal(&frames[from], &res->cpu_scope.root))
            continue;
        if (c->count > from)
            fo_session_cpu_context(res->core, k->pid, &c->key, frames + from, c->count - from);
    }
}

static void apply(fo_session *core, uint8_t kind, uint64_t pid, int64_t ts, uint64_t thread, const fo_mfa *mfa,
                  uint32_t flags)
{
    fo_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = kind;
    ev.pid = pid;
    ev.ts_ns = ts;
    ev.flags = flags;
    if (thread != 0) {
        ev.flags |= FO_EVF_HAS_THREAD;
        ev.thread = thread;
    }
    if (mfa != NULL && mfa->module != 0) {
        ev.flags |= FO_EVF_HAS_MFA;
        ev.mfa = *mfa;
    }
    fo_session_apply(core, &ev);
}

/* The session's source of samples during a replay: the copy's. */
typedef struct {
    const fo_tail_kept *k;
    const fo_cpu_scope *scope;
} copied;

/* The copy's samples of thread in [from_ns, to_ns), as fo_perf_take
 * gives a slice's. */
static void copied_slice(void *ctx, fo_session *s, uint64_t pid, uint64_t thread, int64_t from_ns, int64_t to_ns)
{
    const copied *c = ctx;
    const fo_tail_kept *k = c->k;
    uint32_t lo = 0, hi = k->sample_count;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (k->samples[mid].ts_ns < from_ns)
            lo = mid + 1;
        else
            hi = mid;
    }
    fo_cpu_chain chain;
    for (uint32_t i = lo; i < k->sample_count && k->samples[i].ts_ns < to_ns; i++) {
        const kept_sample *sm = &k->samples[i];
        if (sm->thread != thread)
            continue;
        fo_tail_kept_chain(k, sm, &chain);
        fo_cpu_place(&chain, c->scope, s, pid);
    }
}

/* An event of a replay: a record's start or end; what: 0 in, 1 a
 * collection's start, 2 its end, 3 out (the order at equal times). */
typedef struct {
    int64_t ts;
    uint32_t what, record;
} replay_event;

static int by_time(const void *a, const void *b)
{
    const replay_event *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    if (x->what != y->what)
        return x->what < y->what ? -1 : 1;
    return x->record < y->record ? -1 : x->record > y->record;
}

/* The copy's records into res's core (caller holds its lock; the core is
 * active). */
static void replay_records(fo_session_res *res, const fo_tail_kept *k, const replay_event *events)
{
    int first = 1;
    for (uint32_t n = 0; n < k->count * 2; n++) {
        const replay_event *ev = &events[n];
        const tail_slice *s = &k->slices[ev->record];
        switch (ev->what) {
        case 0:
            /* The session tells a wait from time it could run by the
             * receive events (mode :native's rule): a message or a
             * receive's timeout before the slice, or in it, made the time
             * off CPU before it a wait. The flags' `receive` callbacks
             * say so; a slice cut from samples cannot tell, and its gap
             * stays a wait, as before there were receives. */
            if (s->flags & (TAIL_AFTER_MESSAGE | TAIL_SAMPLED))
                apply(res->core, FO_EV_RECEIVE, k->pid, s->from_ns, 0, NULL, 0);
            apply(res->core, FO_EV_IN, k->pid, s->from_ns, s->thread, NULL,
                  (s->flags & TAIL_AFTER_MESSAGE) ? FO_EVF_LEFT_WAIT : 0);
            /* it runs inside its root function: what comes before its
             * first sample goes under it */
            if (first && res->cpu_scope.has_root)
                fo_session_cpu_inside(res->core, k->pid, &res->cpu_scope.root, 1);
            /* Its stops are asked about only from half its threshold
             * on: a stop before, in a function read later, is where
             * that read says (a request repeats its calls), not a call
             * from wherever its last sample was (a wait in a
             * GenServer.call pushed onto its render: parse read 39%
             * against 31%). Each is applied again at its time, where
             * it moves the wait it was read in. */
            if (first)
                apply_contexts(res, k, TAIL_ALL);
            first = 0;
            break;
        case 1:
        case 2:
            apply(res->core, ev->what == 1 ? FO_EV_GC_START : FO_EV_GC_END, k->pid, ev->ts, 0, NULL,
                  s->stop.arity ? FO_EVF_MAJOR_GC : 0);
            break;
        default:
            apply(res->core, FO_EV_OUT, k->pid, s->to_ns, 0, &s->stop, 0);
            break;
        }
        /* where it stopped, as the helper read it before it ran again */
        if (ev->what >= 2)
            apply_contexts(res, k, ev->record + 1);
    }
}

int fo_tail_replay_into(fo_session_res *res, ErlNifEnv *env, const fo_tail_kept *k)
{
    int64_t end_ns = k->dropped > 0 && k->count > 0 ? k->slices[k->count - 1].to_ns : k->end_ns;
    /* the records' events in time order (a collection's record comes
     * before its slice's, which ends later) */
    replay_event *events = k->count > 0 ? reallocarray(NULL, (size_t)k->count * 2, sizeof(replay_event)) : NULL;
    if (k->count > 0 && events == NULL)
        return 1;
    for (uint32_t i = 0; i < k->count; i++) {
        int gc = k->slices[i].thread == 0 && !(k->slices[i].flags & TAIL_MOVE);
        events[2 * i] = (replay_event){k->slices[i].from_ns, gc ? 1 : 0, i};
        events[2 * i + 1] = (replay_event){k->slices[i].to_ns, gc ? 2 : 3, i};
    }
    if (k->count > 0)
        qsort(events, (size_t)k->count * 2, sizeof(replay_event), by_time);
    copied source = {k, &res->cpu_scope};
    fo_spin_lock(&res->lock);
    if (res->core != NULL && atomic_load(&res->active)) {
        fo_resource_fold(res, env);
        /* its samples from the copy, and none once it is over (the copy
         * may go before the session) */
        fo_session_swap_cpu_source(res->core, copied_slice, &source);
        replay_records(res, k, events);
        fo_session_swap_cpu_source(res->core, NULL, NULL);
        res->stopped_ns = end_ns;
    }
    fo_spin_unlock(&res->lock);
    free(events);
    fo_handle_stop(res);
    return 0;
}

static ERL_NIF_TERM replay_now(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    fo_session_res *res;
    const fo_tail_kept *k = fo_tail_kept_get(env, argv[1]);
    if (!fo_handle_get(env, argv[0], &res) || !res->cpu_sampled || k == NULL)
        return enif_make_badarg(env);
    if (fo_tail_replay_into(res, env, k) != 0)
        return enif_raise_exception(env, fo_atom_memory);
    return fo_atom_ok;
}

/* A copy of more records than this (or samples) is replayed on a dirty
 * scheduler: a NIF on a normal one must return within about a
 * millisecond. */
#define REPLAY_INLINE_RECORDS 2048u

ERL_NIF_TERM fo_tail_replay_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    const fo_tail_kept *k = fo_tail_kept_get(env, argv[1]);
    if (k != NULL && k->count + k->sample_count > REPLAY_INLINE_RECORDS)
        return enif_schedule_nif(env, "tail_replay", ERL_NIF_DIRTY_JOB_CPU_BOUND, replay_now, argc, argv);
    return replay_now(env, argc, argv);
}
