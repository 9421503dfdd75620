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

/* The slice before a read (the last that ended before it) stops in the
 * function of the first read after it; where a later read of the same
 * gap names another function, the wait moves there at that read (a
 * slice of no time, on no thread, stopping in it). */
void fo_tail_place_reads(tail_entry *e, int64_t until_ns)
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
            fo_tail_add_record(e, &(tail_slice){0, TAIL_MOVE, ts, ts, *key});
        }
        last_key = *key;
    }
}

void fo_tail_add_run(void *ctx, uint64_t thread, int64_t from_ns, int64_t to_ns)
{
    fo_tail_add_record(ctx, &(tail_slice){(uint32_t)thread, 0, from_ns, to_ns, {0, 0, 0}});
}
