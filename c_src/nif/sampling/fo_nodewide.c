#include "fo_nodewide.h"

#include <string.h>

#include "fo_atoms.h"
#include "fo_clock.h"
#include "fo_cpu.h"
#include "fo_perf.h"
#include "fo_symbols.h"

typedef struct {
    ErlNifEnv *env;
    ERL_NIF_TERM list;
    uint32_t kept, max;
    uint64_t thinned, dropped;
    uint32_t keep_hz;
    uint64_t rng;
    /* the frequencies the samples were taken at (fo_perf_frequencies) */
    int64_t since[FO_PERF_FREQ_HISTORY];
    uint32_t freq[FO_PERF_FREQ_HISTORY];
    uint32_t freqs;
} take_ctx;

/* Whether a sample taken at ts is kept: with probability keep_hz / the
 * frequency then (always when that is not above keep_hz). */
static int keep(take_ctx *c, int64_t ts);

static uint64_t next_random(take_ctx *c)
{
    /* xorshift64*: cheap, and enough to thin samples without a pattern */
    c->rng ^= c->rng >> 12;
    c->rng ^= c->rng << 25;
    c->rng ^= c->rng >> 27;
    return c->rng * 2685821657736338717ull;
}

static ERL_NIF_TERM frame_term(ErlNifEnv *env, const fo_mfa *mfa)
{
    return enif_make_tuple3(env, (ERL_NIF_TERM)mfa->module, (ERL_NIF_TERM)mfa->function,
                            enif_make_uint(env, mfa->arity));
}

static int keep(take_ctx *c, int64_t ts)
{
    uint32_t freq = c->freqs > 0 ? c->freq[0] : 0;
    for (uint32_t i = c->freqs; i-- > 0;) {
        if (c->since[i] <= ts) {
            freq = c->freq[i];
            break;
        }
    }
    if (freq <= c->keep_hz)
        return 1;
    /* the top 53 bits as a fraction of one */
    return (double)(next_random(c) >> 11) * 0x1.0p-53 * (double)freq < (double)c->keep_hz;
}

static void each(void *ctx, int64_t ts_ns, const uint64_t *ips, uint32_t n, uint64_t caller)
{
    take_ctx *c = ctx;
    if (!keep(c, ts_ns)) {
        c->thinned++;
        return;
    }
    if (c->kept >= c->max) {
        c->dropped++;
        return;
    }
    fo_mfa frames[FO_PERF_MAX_FRAMES + 2];
    uint32_t erlang = 0;
    int cut = 0;
    uint32_t count = fo_cpu_frames(ips, n, NULL, frames, &erlang, &cut);
    if (count == 0) {
        c->dropped++;
        return;
    }
    fo_mfa called_from;
    if (erlang == 0 && caller != 0 && fo_symbols_jit(caller, &called_from) == FO_SYM_ERLANG) {
        /* a C leaf (count 1): under the Erlang function that called it */
        frames[1] = frames[0];
        frames[0] = called_from;
        count = 2;
    }
    /* root first in frames: the list is built innermost first */
    ERL_NIF_TERM list = enif_make_list(c->env, 0);
    for (uint32_t i = 0; i < count; i++)
        list = enif_make_list_cell(c->env, frame_term(c->env, &frames[i]), list);
    ERL_NIF_TERM sample = enif_make_tuple2(c->env, cut ? fo_atom_true : fo_atom_false, list);
    c->list = enif_make_list_cell(c->env, sample, c->list);
    c->kept++;
}

ERL_NIF_TERM fo_nodewide_take_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifSInt64 from_ns;
    unsigned keep_hz, max;
    if (!enif_get_int64(env, argv[0], &from_ns) || !enif_get_uint(env, argv[1], &keep_hz) || keep_hz == 0 ||
        !enif_get_uint(env, argv[2], &max) || max == 0 || max > FO_NODEWIDE_MAX_SAMPLES)
        return enif_make_badarg(env);
    fo_symbols_refresh(); /* modules loaded since */
    fo_perf_pump();       /* the samples up to now */
    int64_t to_ns = fo_tracer_clock_ns();
    fo_perf_counters counters;
    fo_perf_counters_read(&counters);
    take_ctx c;
    memset(&c, 0, sizeof c);
    c.env = env;
    c.list = enif_make_list(env, 0);
    c.max = max;
    c.keep_hz = keep_hz;
    c.rng = (uint64_t)to_ns | 1;
    c.freqs = fo_perf_frequencies(c.since, c.freq, FO_PERF_FREQ_HISTORY);
    uint64_t tids[FO_PERF_MAX_THREADS];
    uint32_t threads = counters.frequency > 0 ? fo_perf_threads(tids, FO_PERF_MAX_THREADS) : 0;
    for (uint32_t i = 0; i < threads; i++)
        fo_perf_take(tids[i], (int64_t)from_ns, to_ns, each, &c);
    return enif_make_tuple5(env, enif_make_int64(env, to_ns), enif_make_uint(env, counters.frequency), c.list,
                            enif_make_uint64(env, c.thinned), enif_make_uint64(env, c.dropped));
}

ERL_NIF_TERM fo_perf_frequency_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    unsigned freq;
    if (!enif_get_uint(env, argv[0], &freq) || freq == 0 || freq > 10000)
        return enif_make_badarg(env);
    fo_perf_set_frequency(freq);
    return fo_atom_ok;
}
