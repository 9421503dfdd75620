/* A kept tail request's records (fo_tail_entry.h) replayed into a
 * CPU-sampled core session: its slices as `in` and `out` events in time
 * order, its collections, and where the helper read it stopped. */
#include "fo_tail_replay.h"

#include <bsd/stdlib.h>
#include <stdlib.h>
#include <string.h>

#include "fo_cpu.h"
#include "fo_handle.h"
#include "fo_resource.h"

/* The contexts read after `after` slices (every one: TAIL_ALL), into the
 * session (caller holds its lock and e's ctx_lock). */
#define TAIL_ALL UINT32_MAX
static void apply_contexts(fo_session_res *res, const tail_entry *e, uint32_t after)
{
    for (uint32_t i = 0; e->answers != NULL && i < e->ctx_count; i++) {
        const tail_context *c = &e->answers->ctx[i];
        if (after != TAIL_ALL && c->after != after)
            continue;
        const fo_mfa *frames = &e->answers->frames[c->first];
        uint32_t from = fo_cpu_scope_start(&res->cpu_scope, frames, c->count);
        /* a stack cut by the node's backtrace_depth below the root says
         * not where the wait was: the core places it as without */
        if (!res->cpu_scope.has_root || !fo_mfa_equal(&frames[from], &res->cpu_scope.root))
            continue;
        if (c->count > from)
            fo_session_cpu_context(res->core, e->pid, &c->key, frames + from, c->count - from);
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

int fo_tail_replay_into(fo_session_res *res, ErlNifEnv *env, tail_entry *e)
{
    int64_t end_ns = e->dropped > 0 && e->count > 0 ? e->slices[e->count - 1].to_ns : e->end_ns;
    /* the records' events in time order (a collection's record comes
     * before its slice's, which ends later) */
    replay_event *events = e->count > 0 ? reallocarray(NULL, (size_t)e->count * 2, sizeof(replay_event)) : NULL;
    if (e->count > 0 && events == NULL)
        return 1;
    for (uint32_t i = 0; i < e->count; i++) {
        int gc = e->slices[i].thread == 0 && !(e->slices[i].flags & TAIL_MOVE);
        events[2 * i] = (replay_event){e->slices[i].from_ns, gc ? 1 : 0, i};
        events[2 * i + 1] = (replay_event){e->slices[i].to_ns, gc ? 2 : 3, i};
    }
    if (e->count > 0)
        qsort(events, (size_t)e->count * 2, sizeof(replay_event), by_time);
    fo_spin_lock(&res->lock);
    fo_spin_lock(&e->ctx_lock);
    if (res->core != NULL && atomic_load(&res->active)) {
        fo_resource_fold(res, env);
        int first = 1;
        for (uint32_t k = 0; k < e->count * 2; k++) {
            const replay_event *ev = &events[k];
            const tail_slice *s = &e->slices[ev->record];
            switch (ev->what) {
            case 0:
                apply(res->core, FO_EV_IN, e->pid, s->from_ns, s->thread, NULL,
                      (s->flags & TAIL_AFTER_MESSAGE) ? FO_EVF_LEFT_WAIT : 0);
                /* it runs inside its root function: what comes before its
                 * first sample goes under it */
                if (first && res->cpu_scope.has_root)
                    fo_session_cpu_inside(res->core, e->pid, &res->cpu_scope.root, 1);
                /* Its stops are asked about only from half its threshold
                 * on: a stop before, in a function read later, is where
                 * that read says (a request repeats its calls), not a call
                 * from wherever its last sample was (a wait in a
                 * GenServer.call pushed onto its render: parse read 39%
                 * against 31%). Each is applied again at its time, where
                 * it moves the wait it was read in. */
                if (first)
                    apply_contexts(res, e, TAIL_ALL);
                first = 0;
                break;
            case 1:
            case 2:
                apply(res->core, ev->what == 1 ? FO_EV_GC_START : FO_EV_GC_END, e->pid, ev->ts, 0, NULL,
                      s->stop.arity ? FO_EVF_MAJOR_GC : 0);
                break;
            default:
                apply(res->core, FO_EV_OUT, e->pid, s->to_ns, 0, &s->stop, 0);
                break;
            }
            /* where it stopped, as the helper read it before it ran again */
            if (ev->what >= 2)
                apply_contexts(res, e, ev->record + 1);
        }
        res->stopped_ns = end_ns;
    }
    fo_spin_unlock(&e->ctx_lock);
    fo_spin_unlock(&res->lock);
    free(events);
    fo_handle_stop(res);
    return 0;
}
