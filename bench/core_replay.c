/* Micro-benchmark of the C core alone: replays a stream of trace events
 * through fo_session_apply and prints events per second and the session's
 * memory. No VM involved.
 *
 *   make -C bench core_replay
 *   bench/core_replay                 20M generated events, 5 runs
 *   bench/core_replay -n 50000000     another event count (>= 1)
 *   bench/core_replay -r 5            another number of runs (median printed)
 *   bench/core_replay FILE            replay a stream recorded by
 *                                     bench/record_stream.exs instead
 *
 * The generated stream is deterministic (fixed seed). It models a small
 * node: PROCS processes, each looping over "requests" drawn from its own
 * fixed set of SCRIPTS / PROCS call sequences over a synthetic program of MODULES x
 * FUNS_PER_MODULE functions. Inside a request the stack wanders between a
 * minimum (5..8) and a maximum (12..30) depth; some functions recurse on
 * themselves (the common `caller == top` case), about 5% of calls are tail
 * calls (the caller is below the top: the core unwinds), and a process is
 * scheduled out after a slice of 50..2000 events (out, then `in` of the
 * next process). Timestamps advance 20..400 ns per event.
 *
 * Events are generated into a buffer of CHUNK events outside the timed
 * region; only the fo_session_apply loop over each chunk is timed. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fo_session.h"

#define PROCS 6
#define MODULES 40
#define FUNS_PER_MODULE 8
#define NFUNS (MODULES * FUNS_PER_MODULE)
#define MAX_CALLEES 3
#define SCRIPTS 120
#define SCRIPTS_PER_PROC (SCRIPTS / PROCS) /* each process has its own kinds of requests */
#define SCRIPT_MAX_OPS 6000
#define STACK_MAX 64
#define BASE_DEPTH 2 /* proc_lib/gen_server-like frames under every request */
#define CHUNK 65536

/* ---- deterministic PRNG (xorshift64*) --------------------------------- */

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;

static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

/* uniform in [lo, hi] */
static uint32_t rng_between(uint32_t lo, uint32_t hi)
{
    return lo + (uint32_t)(rng() % (uint64_t)(hi - lo + 1));
}

/* ---- the synthetic program -------------------------------------------- */

typedef struct {
    fo_mfa mfa;
    uint8_t recursive;        /* calls itself sometimes */
    uint8_t ncallees;
    uint16_t callees[MAX_CALLEES];
} fun_def;

static fun_def funs[NFUNS];

/* Keys shaped like atom terms (index << 6 | 0xB): the core treats them as
 * opaque, but this keeps the hash inputs realistic. */
static uint64_t fake_atom(uint32_t index)
{
    return ((uint64_t)index << 6) | 0xBu;
}

static void build_program(void)
{
    for (uint32_t i = 0; i < NFUNS; i++) {
        fun_def *f = &funs[i];
        f->mfa.module = fake_atom(1000 + i / FUNS_PER_MODULE);
        f->mfa.function = fake_atom(5000 + i % FUNS_PER_MODULE * 7 + i / 97);
        f->mfa.arity = (uint32_t)rng_between(0, 4);
        f->recursive = rng_between(0, 9) == 0;
        f->ncallees = (uint8_t)rng_between(1, MAX_CALLEES);
        for (uint32_t c = 0; c < f->ncallees; c++) {
            /* mostly "deeper" functions, like layered code; some anywhere */
            uint32_t target = rng_between(0, 3) == 0 ? rng_between(0, NFUNS - 1)
                                                     : (i + rng_between(1, 40)) % NFUNS;
            f->callees[c] = (uint16_t)target;
        }
    }
}

/* ---- request scripts ---------------------------------------------------- */

typedef struct {
    uint8_t kind;    /* FO_EV_CALL or FO_EV_RETURN_TO */
    uint8_t flags;
    uint16_t fun;    /* callee / return target */
    uint16_t caller; /* call only */
} op;

typedef struct {
    op *ops;
    uint32_t len;
} script;

static script scripts[SCRIPTS];
static uint64_t script_ops_total;

#define FUN_LOOP 0   /* the process's outer loop frame */
#define FUN_HANDLE 1 /* the request dispatcher: every request starts here */

static uint32_t pick_callee(uint32_t f)
{
    const fun_def *d = &funs[f];
    if (d->recursive && rng_between(0, 9) < 6)
        return f;
    /* skewed: the first callee is the common path */
    uint32_t r = rng_between(0, 99);
    uint32_t k = r < 70 ? 0 : r < 90 ? 1 : 2;
    return d->callees[k % d->ncallees];
}

/* A request: starts and ends with the stack at [LOOP, HANDLE]. */
static void build_script(script *sc)
{
    sc->ops = calloc(SCRIPT_MAX_OPS, sizeof(op));
    if (sc->ops == NULL) {
        perror("calloc");
        exit(1);
    }
    uint16_t stack[STACK_MAX];
    uint32_t depth = BASE_DEPTH;
    stack[0] = FUN_LOOP;
    stack[1] = FUN_HANDLE;
    uint32_t dmin = rng_between(5, 8), dmax = rng_between(12, 30);
    uint32_t steps = rng_between(200, SCRIPT_MAX_OPS / 2 - STACK_MAX);
    uint32_t n = 0;
    /* an entry point per request kind */
    uint32_t entry = rng_between(2, NFUNS - 1);
    sc->ops[n++] = (op){FO_EV_CALL, FO_EVF_HAS_MFA | FO_EVF_HAS_CALLER, (uint16_t)entry, FUN_HANDLE};
    stack[depth++] = (uint16_t)entry;
    for (uint32_t step = 0; step < steps; step++) {
        int call = depth < dmin ? 1 : depth >= dmax ? 0 : rng_between(0, 99) < 50;
        if (depth <= BASE_DEPTH + 1)
            call = 1;
        if (call) {
            uint32_t top = stack[depth - 1];
            uint32_t callee = pick_callee(top);
            if (depth > BASE_DEPTH + 2 && rng_between(0, 99) < 5) {
                /* tail call: the top frame is replaced, the caller reported
                 * is the frame below it */
                sc->ops[n++] = (op){FO_EV_CALL, FO_EVF_HAS_MFA | FO_EVF_HAS_CALLER, (uint16_t)callee,
                                    stack[depth - 2]};
                stack[depth - 1] = (uint16_t)callee;
            } else {
                sc->ops[n++] =
                    (op){FO_EV_CALL, FO_EVF_HAS_MFA | FO_EVF_HAS_CALLER, (uint16_t)callee, (uint16_t)top};
                stack[depth++] = (uint16_t)callee;
            }
        } else {
            depth--;
            sc->ops[n++] = (op){FO_EV_RETURN_TO, FO_EVF_HAS_MFA, stack[depth - 1], 0};
        }
    }
    while (depth > BASE_DEPTH) {
        depth--;
        sc->ops[n++] = (op){FO_EV_RETURN_TO, FO_EVF_HAS_MFA, stack[depth - 1], 0};
    }
    sc->len = n;
    script_ops_total += n;
}

/* ---- the stream: processes running scripts in scheduler slices -------- */

typedef struct {
    uint64_t pid;
    uint32_t script;
    uint32_t pos;
    int started; /* LOOP and HANDLE pushed */
} proc_cursor;

typedef struct {
    proc_cursor procs[PROCS];
    uint32_t running;
    uint32_t slice_left;
    int64_t now;
    int pending_in; /* the next event is `in` of procs[running] */
} stream;

static void stream_init(stream *st)
{
    memset(st, 0, sizeof(*st));
    for (uint32_t i = 0; i < PROCS; i++) {
        /* shaped like local pid terms */
        st->procs[i].pid = ((uint64_t)(80 + i * 13) << 4) | 0x3u;
        st->procs[i].script = i * SCRIPTS_PER_PROC + rng_between(0, SCRIPTS_PER_PROC - 1);
    }
    st->now = 1000000;
    st->slice_left = rng_between(50, 2000);
}

static void set_mfa_event(fo_event *ev, fo_event_kind kind, uint32_t flags, uint64_t pid, int64_t ts,
                          uint32_t fun, uint32_t caller)
{
    ev->kind = kind;
    ev->flags = flags;
    ev->pid = pid;
    ev->ts_ns = ts;
    ev->mfa = funs[fun].mfa;
    if (flags & FO_EVF_HAS_CALLER)
        ev->caller = funs[caller].mfa;
}

static void stream_next(stream *st, fo_event *ev)
{
    memset(ev, 0, sizeof(*ev));
    st->now += rng_between(20, 400);
    proc_cursor *p = &st->procs[st->running];
    if (st->pending_in) {
        st->pending_in = 0;
        ev->kind = FO_EV_IN;
        ev->pid = p->pid;
        ev->ts_ns = st->now;
        return;
    }
    if (st->slice_left == 0) {
        ev->kind = FO_EV_OUT;
        ev->pid = p->pid;
        ev->ts_ns = st->now;
        st->running = (st->running + rng_between(1, PROCS - 1)) % PROCS;
        st->slice_left = rng_between(50, 2000);
        st->pending_in = 1;
        return;
    }
    st->slice_left--;
    if (p->started < 2) {
        uint32_t fun = p->started == 0 ? FUN_LOOP : FUN_HANDLE;
        set_mfa_event(ev, FO_EV_CALL, FO_EVF_HAS_MFA | (p->started ? FO_EVF_HAS_CALLER : 0), p->pid,
                      st->now, fun, FUN_LOOP);
        p->started++;
        return;
    }
    const script *sc = &scripts[p->script];
    const op *o = &sc->ops[p->pos];
    set_mfa_event(ev, (fo_event_kind)o->kind, o->flags, p->pid, st->now, o->fun, o->caller);
    if (++p->pos == sc->len) {
        p->pos = 0;
        p->script = (uint32_t)(p - st->procs) * SCRIPTS_PER_PROC + rng_between(0, SCRIPTS_PER_PROC - 1);
    }
}

/* ---- recorded streams (bench/record_stream.exs) ------------------------ */

/* File: "FOTRACE1", then 32-byte little-endian records:
 *   u8 kind (fo_event_kind), u8 flags (FO_EVF_*), u8 arity, u8 caller_arity,
 *   u32 pid, u32 module, u32 function, u32 caller_module, u32 caller_function,
 *   i64 ts_ns
 * module/function ids are small integers chosen by the recorder. */
#define REC_SIZE 32

static uint32_t le32(const unsigned char *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static fo_event *load_recording(const char *path, size_t *count)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    char magic[8];
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "FOTRACE1", 8) != 0) {
        fprintf(stderr, "%s: not a FOTRACE1 file\n", path);
        exit(1);
    }
    size_t cap = 1 << 20, n = 0;
    fo_event *evs = malloc(cap * sizeof(fo_event));
    unsigned char rec[REC_SIZE];
    while (evs != NULL && fread(rec, 1, REC_SIZE, f) == REC_SIZE) {
        if (n == cap) {
            cap *= 2;
            fo_event *bigger = realloc(evs, cap * sizeof(fo_event));
            if (bigger == NULL) {
                free(evs);
                evs = NULL;
                break;
            }
            evs = bigger;
        }
        fo_event *ev = &evs[n++];
        memset(ev, 0, sizeof(*ev));
        ev->kind = (fo_event_kind)rec[0];
        ev->flags = rec[1];
        ev->mfa.arity = rec[2];
        ev->caller.arity = rec[3];
        ev->pid = le32(rec + 4);
        ev->mfa.module = fake_atom(le32(rec + 8));
        ev->mfa.function = fake_atom(le32(rec + 12));
        ev->caller.module = fake_atom(le32(rec + 16));
        ev->caller.function = fake_atom(le32(rec + 20));
        ev->ts_ns = (int64_t)((uint64_t)le32(rec + 24) | (uint64_t)le32(rec + 28) << 32);
    }
    fclose(f);
    if (evs == NULL) {
        fprintf(stderr, "out of memory reading %s\n", path);
        exit(1);
    }
    *count = n;
    return evs;
}

/* ---- timing ------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct {
    double seconds;
    size_t memory;
    size_t peak_memory;
    fo_stats stats;
    uint32_t nodes, frames, processes;
} run_result;

static void finish_run(fo_session *s, run_result *r, int64_t end_ns)
{
    fo_session_close(s, end_ns);
    r->memory = fo_session_memory(s);
    if (r->memory > r->peak_memory)
        r->peak_memory = r->memory;
    r->stats = *fo_session_stats(s);
    r->nodes = fo_session_node_count(s);
    r->frames = fo_session_frame_count(s);
    r->processes = fo_session_process_count(s);
    fo_session_free(s);
}

static fo_session *new_session(void)
{
    fo_limits limits = fo_limits_default();
    fo_session *s = fo_session_new(&limits);
    if (s == NULL) {
        fprintf(stderr, "fo_session_new failed\n");
        exit(1);
    }
    return s;
}

static run_result run_generated(uint64_t total, fo_event *buf)
{
    run_result r;
    memset(&r, 0, sizeof(r));
    rng_state = 0x9E3779B97F4A7C15ULL; /* same stream every run */
    stream st;
    stream_init(&st);
    fo_session *s = new_session();
    for (uint64_t done = 0; done < total;) {
        uint64_t n = total - done < CHUNK ? total - done : CHUNK;
        for (uint64_t i = 0; i < n; i++)
            stream_next(&st, &buf[i]);
        double t0 = now_s();
        for (uint64_t i = 0; i < n; i++)
            fo_session_apply(s, &buf[i]);
        r.seconds += now_s() - t0;
        size_t m = fo_session_memory(s);
        if (m > r.peak_memory)
            r.peak_memory = m;
        done += n;
    }
    finish_run(s, &r, st.now + 1000);
    return r;
}

static run_result run_recorded(const fo_event *evs, size_t count)
{
    run_result r;
    memset(&r, 0, sizeof(r));
    fo_session *s = new_session();
    double t0 = now_s();
    for (size_t i = 0; i < count; i++)
        fo_session_apply(s, &evs[i]);
    r.seconds = now_s() - t0;
    finish_run(s, &r, count > 0 ? evs[count - 1].ts_ns + 1 : 0);
    return r;
}

static int by_seconds(const void *a, const void *b)
{
    double x = ((const run_result *)a)->seconds, y = ((const run_result *)b)->seconds;
    return (x > y) - (x < y);
}

static void usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [-n EVENTS] [-r RUNS] [RECORDED_FILE]\n", argv0);
    exit(2);
}

#define TARGET_EVENTS_PER_S 20e6
#define MAX_RUNS 50

int main(int argc, char **argv)
{
    uint64_t total = 20000000;
    int runs = 5;
    const char *file = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
            total = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (argv[i][0] != '-' && file == NULL)
            file = argv[i];
        else
            usage(argv[0]);
    }
    if (total == 0 || runs < 1 || runs > MAX_RUNS)
        usage(argv[0]);

    run_result results[MAX_RUNS];
    uint64_t events;
    if (file != NULL) {
        size_t count;
        fo_event *evs = load_recording(file, &count);
        events = count;
        printf("core_replay: %zu recorded events from %s, %d runs\n", count, file, runs);
        for (int i = 0; i < runs; i++)
            results[i] = run_recorded(evs, count);
        free(evs);
    } else {
        rng_state = 0x2545F4914F6CDD1DULL;
        build_program();
        for (uint32_t i = 0; i < SCRIPTS; i++)
            build_script(&scripts[i]);
        events = total;
        printf("core_replay: %" PRIu64 " generated events (%d processes, %d functions, %d request "
               "scripts of %.0f events on average), %d runs\n",
               total, PROCS, NFUNS, SCRIPTS, (double)script_ops_total / SCRIPTS, runs);
        fo_event *buf = malloc(CHUNK * sizeof(fo_event));
        if (buf == NULL)
            return 1;
        for (int i = 0; i < runs; i++)
            results[i] = run_generated(total, buf);
        free(buf);
        for (uint32_t i = 0; i < SCRIPTS; i++)
            free(scripts[i].ops);
    }

    for (int i = 0; i < runs; i++)
        printf("  run %d: %.3f s, %.1f M events/s\n", i + 1, results[i].seconds,
               (double)events / results[i].seconds / 1e6);
    qsort(results, (size_t)runs, sizeof(run_result), by_seconds);
    const run_result *med = &results[runs / 2];
    double rate = (double)events / med->seconds;
    printf("median: %.1f M events/s, %.1f ns/event (target >= %.0f M/s: %s)\n", rate / 1e6,
           med->seconds * 1e9 / (double)events, TARGET_EVENTS_PER_S / 1e6,
           rate >= TARGET_EVENTS_PER_S ? "PASS" : "MISS");
    printf("session memory: %.2f MiB at the end, %.2f MiB peak\n", (double)med->memory / 1048576.0,
           (double)med->peak_memory / 1048576.0);
    printf("session: %" PRIu32 " nodes, %" PRIu32 " frames, %" PRIu32 " processes\n", med->nodes,
           med->frames, med->processes);
    printf("stats: events=%" PRIu64 " dropped=%" PRIu64 " resyncs=%" PRIu64 " truncated_stacks=%" PRIu64
           " node_limit_hits=%" PRIu64 " clock_skews=%" PRIu64 "\n",
           med->stats.events, med->stats.dropped_events, med->stats.resyncs, med->stats.truncated_stacks,
           med->stats.node_limit_hits, med->stats.clock_skews);
    return 0;
}
