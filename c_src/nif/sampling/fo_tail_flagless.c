/* Tail traces without flags (fo_tail_entry.h): which process a request
 * is, as CPU samples name it, and what a kept one's samples and reads
 * make of its time. */
#include "fo_tail_entry.h"

#include <stdlib.h>
#include <string.h>

#include "fo_perf.h"
#include "fo_tracer.h"

static int env_layout_known;

void fo_tail_flagless_init(void)
{
    /* erts 12 (OTP 24) to 16 (OTP 28): the versions whose layout was read */
    unsigned major = fo_tracer_erts_major();
    env_layout_known = major >= 12 && major <= 16;
}

/* The calling process's own pointer, as CPU samples name it, or 0 where
 * it cannot be read safely. A NIF's environment holds the process that
 * called it (erl_nif.c's struct enif_environment_t: mod_nif, then proc,
 * on OTP 24 to 28), and a process's first word is its pid: checked on
 * every call, so a layout that moved reads as unavailable, never as
 * another process. */
uint64_t fo_tail_own_proc(ErlNifEnv *env, const ErlNifPid *self)
{
    if (!FO_PERF_IDENTITY || !env_layout_known)
        return 0;
    void *proc = ((void *const *)env)[1];
    if (proc == NULL || *(const ERL_NIF_TERM *)proc != enif_make_pid(env, self))
        return 0;
    return (uint64_t)(uintptr_t)proc;
}

/* The time and function of a read (a replay makes the slice before it
 * stop there), and the stack, once per function. */
int fo_tail_note_wait(tail_entry *e, int64_t now, const fo_mfa *key, const fo_mfa *frames, uint32_t count)
{
    if (e->reads >= TAIL_WAIT_READS)
        return 0;
    e->answers->read_ts[e->reads] = now;
    e->answers->read_key[e->reads] = *key;
    e->reads++;
    for (uint32_t i = 0; i < e->ctx_count; i++)
        if (fo_mfa_equal(&e->answers->ctx[i].key, key))
            return 1;
    if (e->ctx_count < TAIL_ASKS && e->frame_count + count <= TAIL_CONTEXT_FRAMES) {
        /* after 0: applied at the first slice, as every context */
        tail_context *c = &e->answers->ctx[e->ctx_count++];
        c->key = *key;
        c->after = 0;
        c->first = e->frame_count;
        c->count = count;
        memcpy(&e->answers->frames[e->frame_count], frames, sizeof(fo_mfa) * count);
        e->frame_count += count;
        return 2;
    }
    return 1;
}

static int by_start(const void *a, const void *b)
{
    const tail_slice *x = a, *y = b;
    return x->from_ns < y->from_ns ? -1 : x->from_ns > y->from_ns;
}

/* A request without flags ends: its samples are named no more. */
void fo_tail_forget_proc(tail_entry *e)
{
    atomic_store_explicit(&e->next_read_ns, 0, memory_order_relaxed);
    if (atomic_load_explicit(&e->proc, memory_order_relaxed) != 0)
        atomic_store_explicit(&e->proc, 0, memory_order_release);
}

/* A kept request without flags: its slices in time order, apart, and
 * where it waited between them from its reads before until_ns (its flags'
 * first slice, once promoted; caller holds ctx_lock). The slice before a
 * read (the last that ended before it) stops in the function of the
 * first read after it; where a later read of the same gap names another
 * function, the wait moves there at that read (a slice of no time, on no
 * thread, stopping in it). */
static void place_reads(tail_entry *e, int64_t until_ns)
{
    if (e->count > 1)
        qsort(e->slices, e->count, sizeof(tail_slice), by_start);
    /* A slice starts a period before its first sample, which may reach
     * into the one before it on another thread (the process moved): it
     * starts just after that one ends (a replay orders an `in` before an
     * `out` of the same time, so none may share a time). One that would
     * start after its own first sample (samples of both threads
     * interleaved, as no process runs) is not kept. */
    uint32_t kept_slices = 0;
    for (uint32_t i = 0; i < e->count; i++) {
        tail_slice s = e->slices[i];
        if (kept_slices > 0 && s.from_ns <= e->slices[kept_slices - 1].to_ns)
            s.from_ns = e->slices[kept_slices - 1].to_ns + 1;
        if (s.from_ns < s.to_ns)
            e->slices[kept_slices++] = s;
    }
    e->count = kept_slices;
    uint32_t slices = e->count;
    uint32_t gap = UINT32_MAX; /* the slice whose gap the last read was in */
    fo_mfa last_key = {0, 0, 0};
    for (uint32_t r = 0; e->answers != NULL && r < e->reads; r++) {
        int64_t ts = e->answers->read_ts[r];
        const fo_mfa *key = &e->answers->read_key[r];
        if (ts >= until_ns)
            continue; /* once its flags' callbacks came: their stops say */
        uint32_t lo = 0, hi = slices; /* the first slice ending after ts */
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (e->slices[mid].to_ns <= ts)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == 0 || (lo < slices && e->slices[lo].from_ns <= ts))
            continue; /* before its first slice, or inside one */
        if (ts <= e->slices[lo - 1].to_ns)
            ts = e->slices[lo - 1].to_ns + 1;
        if (lo < slices && ts >= e->slices[lo].from_ns)
            continue;
        if (lo - 1 != gap) {
            gap = lo - 1;
            e->slices[gap].stop = *key;
        } else if (!fo_mfa_equal(&last_key, key)) {
            fo_tail_add_record(e, &(tail_slice){0, TAIL_MOVE | TAIL_SAMPLED, ts, ts, *key});
        }
        last_key = *key;
    }
}

/* A slice of a request without flags (fo_perf_slice_fn; ctx: the entry). */
static void add_run(void *ctx, uint64_t thread, int64_t from_ns, int64_t to_ns)
{
    fo_tail_add_record(ctx, &(tail_slice){(uint32_t)thread, TAIL_SAMPLED, from_ns, to_ns, {0, 0, 0}});
}

/* A kept request without flags: its slices from its samples, up to the
 * first one its flags' callbacks made if it was promoted (those follow,
 * the contexts read with them counted after the samples' slices).
 * Returns nonzero when memory is short. */
int fo_tail_flagless_slices(tail_entry *e, uint64_t proc, int *overwritten)
{
    uint32_t recorded = e->count, recorded_dropped = e->dropped;
    tail_slice *saved = NULL;
    int64_t cut = e->end_ns;
    if (recorded > 0) {
        saved = reallocarray(NULL, recorded, sizeof(tail_slice));
        if (saved == NULL)
            return 1;
        memcpy(saved, e->slices, (size_t)recorded * sizeof(tail_slice));
        for (uint32_t i = 0; i < recorded; i++)
            if (saved[i].from_ns < cut)
                cut = saved[i].from_ns;
    }
    e->count = 0;
    e->dropped = 0;
    /* it ran at its first and last nanosecond (tail_begin, tail_end): so
     * it has a slice even where no sample caught it, and the time between
     * its slices is its waits */
    add_run(e, e->begin_thread, e->begun_ns, e->begun_ns + 1);
    fo_perf_runs(proc, e->begun_ns + 1, cut - 1, add_run, e, overwritten);
    if (recorded == 0)
        add_run(e, e->end_thread, e->end_ns - 1, e->end_ns);
    fo_tail_forget_proc(e);
    fo_spin_lock(&e->ctx_lock);
    place_reads(e, cut);
    uint32_t before = e->count;
    /* Running when it was promoted (its first slice with flags starts
     * then): its last slice from samples ran up to that moment, not just
     * past its last sample. */
    if (before > 0 && recorded > 0 && cut == e->promoted_ns && e->slices[before - 1].thread != 0) {
        tail_slice *last = &e->slices[before - 1];
        if (last->to_ns < cut - 1 && cut - last->to_ns <= fo_perf_period_ns())
            last->to_ns = cut - 1;
    }
    for (uint32_t i = 0; e->answers != NULL && i < e->ctx_count; i++)
        if (e->answers->ctx[i].after > 0)
            e->answers->ctx[i].after += before;
    fo_spin_unlock(&e->ctx_lock);
    for (uint32_t i = 0; i < recorded; i++)
        fo_tail_add_record(e, &saved[i]);
    e->dropped += recorded_dropped;
    free(saved);
    return 0;
}
