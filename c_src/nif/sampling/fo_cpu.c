#include "fo_cpu.h"

#include <string.h>

#include "fo_perf.h"
#include "fo_symbols.h"

uint32_t fo_cpu_scope_start(const fo_cpu_scope *scope, const fo_mfa *frames, uint32_t count)
{
    if (scope == NULL || !scope->has_root)
        return 0;
    for (uint32_t i = count; i-- > 0;) {
        if (fo_mfa_equal(&frames[i], &scope->root))
            return i;
    }
    return 0;
}

void fo_cpu_resolve(const uint64_t *ips, uint32_t n, uint64_t caller, fo_cpu_chain *out)
{
    out->count = 0;
    out->has_c_leaf = 0;
    out->has_caller = 0;
    for (uint32_t i = 0; i < n && i < FO_PERF_MAX_FRAMES; i++) {
        /* a return address may be the first byte after its call's function */
        uint64_t ip = i == 0 ? ips[0] : ips[i] - 1;
        fo_mfa mfa;
        fo_sym_kind kind = fo_symbols_jit(ip, &mfa);
        if (kind == FO_SYM_ERLANG) {
            out->leafward[out->count++] = mfa;
            continue;
        }
        if (kind == FO_SYM_GLUE || kind == FO_SYM_FRAGMENT)
            continue;
        /* C code: the leaf is named; C frames past it come from frame
         * pointers C code does not keep, and past an Erlang frame they are
         * not the process's */
        if (out->count > 0)
            break;
        if (i == 0) {
            fo_symbols_native(ip, &out->c_leaf);
            out->has_c_leaf = 1;
        }
    }
    /* the kernel walks FO_PERF_MAX_FRAMES at most: a chain that long may
     * have lost its outer frames */
    out->long_chain = n >= FO_PERF_MAX_FRAMES;
    if (out->count == 0 && caller != 0 && fo_symbols_jit(caller, &out->caller) == FO_SYM_ERLANG)
        out->has_caller = 1;
}

/* The chain's frames as a scope sees them, root first, into frames (room
 * for FO_PERF_MAX_FRAMES + 1): the count, *erlang and *cut as
 * fo_cpu_frames says. */
static uint32_t scoped(const fo_cpu_chain *c, const fo_cpu_scope *scope, fo_mfa *frames, uint32_t *erlang,
                       int *cut)
{
    uint32_t keep = c->count;
    int rooted = 0;
    if (scope != NULL && scope->has_root) {
        for (uint32_t i = 0; i < c->count && !rooted; i++) {
            if (fo_mfa_equal(&c->leafward[i], &scope->root)) {
                keep = i + 1;
                rooted = 1;
            }
        }
    }
    *cut = !rooted && c->long_chain;
    uint32_t out = 0;
    for (uint32_t i = keep; i > 0; i--)
        frames[out++] = c->leafward[i - 1];
    if (c->has_c_leaf)
        frames[out++] = c->c_leaf;
    *erlang = keep;
    return out;
}

uint32_t fo_cpu_frames(const uint64_t *ips, uint32_t n, const fo_cpu_scope *scope, fo_mfa *frames,
                       uint32_t *erlang, int *cut)
{
    fo_cpu_chain chain;
    fo_cpu_resolve(ips, n, 0, &chain);
    return scoped(&chain, scope, frames, erlang, cut);
}

void fo_cpu_place(const fo_cpu_chain *c, const fo_cpu_scope *scope, fo_session *s, uint64_t pid)
{
    fo_mfa frames[FO_PERF_MAX_FRAMES + 1];
    uint32_t erlang = 0;
    int cut = 0;
    uint32_t count = scoped(c, scope, frames, &erlang, &cut);
    if (count == 0)
        return;
    if (erlang > 0 && cut)
        fo_session_cpu_sample_cut(s, pid, frames, count, erlang, scope != NULL && scope->has_cut ? &scope->cut : NULL);
    else if (erlang > 0)
        fo_session_cpu_sample(s, pid, frames, count, erlang);
    else if (c->has_caller)
        fo_session_cpu_sample_in(s, pid, &c->caller, &frames[0]);
    else
        fo_session_cpu_orphan(s, pid, &frames[0]);
}

typedef struct {
    fo_session *s;
    uint64_t pid;
    const fo_cpu_scope *scope;
} slice;

/* Words of the C stack above a fragment's return address where the JIT
 * keeps the Erlang caller's address. */
#define CALLER_WINDOW 8u

uint64_t fo_cpu_find_caller(uint64_t first_ip, const uint64_t *words, uint64_t n)
{
    fo_mfa mfa;
    if (fo_symbols_jit(first_ip, &mfa) != FO_SYM_NONE)
        return 0; /* in JIT code: its call chain names its frames */
    /* The C code was called from a shared fragment (its return address on
     * the C stack); just above it the fragment keeps the address in the
     * Erlang code that called it. Words below it are the C code's own,
     * and may hold stale addresses. */
    for (uint64_t i = 0; i < n; i++) {
        if (words[i] < 4096 || fo_symbols_jit(words[i] - 1, &mfa) != FO_SYM_FRAGMENT)
            continue;
        /* the scheduler's code: above it lie registers the last process
         * left, often the address of whatever ran before on this thread */
        if (mfa.arity == FO_FRAGMENT_SCHEDULER)
            return 0;
        for (uint64_t j = i + 1; j < n && j <= i + CALLER_WINDOW; j++) {
            if (words[j] > 4096 && fo_symbols_jit(words[j] - 1, &mfa) == FO_SYM_ERLANG)
                return words[j] - 1;
        }
        return 0;
    }
    return 0;
}

uint64_t fo_cpu_skipped_frame(uint64_t first_ip, uint64_t next_ip, const uint64_t *words, uint64_t n)
{
    fo_mfa mfa;
    if (n == 0 || words[0] < 4096 || words[0] == next_ip || fo_symbols_jit(first_ip, &mfa) != FO_SYM_ERLANG ||
        fo_symbols_jit(words[0] - 1, &mfa) != FO_SYM_ERLANG)
        return 0;
    return words[0];
}

static void each(void *ctx, int64_t ts_ns, const uint64_t *ips, uint32_t n, uint64_t caller)
{
    (void)ts_ns;
    slice *sl = ctx;
    fo_cpu_chain chain;
    fo_cpu_resolve(ips, n, caller, &chain);
    fo_cpu_place(&chain, sl->scope, sl->s, sl->pid);
}

void fo_cpu_slice(void *ctx, fo_session *s, uint64_t pid, uint64_t thread, int64_t from_ns, int64_t to_ns)
{
    slice sl = {s, pid, ctx};
    fo_perf_take(thread, from_ns, to_ns, each, &sl);
}
