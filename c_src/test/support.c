#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* ------------------------------------------------------------------------
 * Name table */

#define TS_MAX_NAMES 1024
#define TS_NAME_LEN 48

static char ts_names[TS_MAX_NAMES][TS_NAME_LEN];
static size_t ts_name_count;

/* An odd multiplier is a bijection on uint64: distinct, non-zero, large. */
static uint64_t ts_key_of_index(size_t i)
{
    /* spread over the bits, but a local process (no FO_GRAPH_REMOTE_BIT) */
    return ((uint64_t)(i + 1) * UINT64_C(0x9E3779B97F4A7C15)) >> 1;
}

uint64_t ts_name_key(const char *name)
{
    size_t len = strlen(name);
    assert_true(len > 0 && len < TS_NAME_LEN);
    for (size_t i = 0; i < ts_name_count; i++) {
        if (strcmp(ts_names[i], name) == 0)
            return ts_key_of_index(i);
    }
    assert_true(ts_name_count < TS_MAX_NAMES);
    memcpy(ts_names[ts_name_count], name, len + 1);
    ts_name_count++;
    return ts_key_of_index(ts_name_count - 1);
}

const char *ts_key_name(uint64_t key)
{
    for (size_t i = 0; i < ts_name_count; i++) {
        if (ts_key_of_index(i) == key)
            return ts_names[i];
    }
    return NULL;
}

fo_mfa ts_mfa(const char *spec)
{
    char module[TS_NAME_LEN];
    char function[TS_NAME_LEN];
    const char *colon = strchr(spec, ':');
    const char *slash = strrchr(spec, '/');
    if (colon == NULL || slash == NULL || slash < colon || colon == spec || slash == colon + 1 ||
        (size_t)(colon - spec) >= TS_NAME_LEN || (size_t)(slash - colon - 1) >= TS_NAME_LEN)
        fail_msg("bad MFA spec '%s' (want m:f/arity)", spec);
    memcpy(module, spec, (size_t)(colon - spec));
    module[colon - spec] = '\0';
    memcpy(function, colon + 1, (size_t)(slash - colon - 1));
    function[slash - colon - 1] = '\0';
    char *end = NULL;
    unsigned long arity = strtoul(slash + 1, &end, 10);
    if (end == slash + 1 || *end != '\0' || arity > 255)
        fail_msg("bad arity in MFA spec '%s'", spec);
    fo_mfa mfa;
    memset(&mfa, 0, sizeof mfa);
    mfa.module = ts_name_key(module);
    mfa.function = ts_name_key(function);
    mfa.arity = (uint32_t)arity;
    return mfa;
}

int ts_mfa_equal(fo_mfa a, fo_mfa b)
{
    return a.module == b.module && a.function == b.function && a.arity == b.arity;
}

void ts_mfa_format(fo_mfa mfa, char *buf, size_t size)
{
    const char *m = ts_key_name(mfa.module);
    const char *f = ts_key_name(mfa.function);
    int n;
    if (m != NULL && f != NULL)
        n = snprintf(buf, size, "%s:%s/%" PRIu32, m, f, mfa.arity);
    else
        n = snprintf(buf, size, "?%" PRIx64 ":?%" PRIx64 "/%" PRIu32, mfa.module, mfa.function,
                     mfa.arity);
    assert_true(n > 0 && (size_t)n < size);
}

/* ------------------------------------------------------------------------
 * Events */

static fo_event ts_blank_event(fo_event_kind kind, uint64_t pid, int64_t ts)
{
    fo_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = kind;
    ev.pid = pid;
    ev.ts_ns = ts;
    return ev;
}

fo_event ev_call_mfa(uint64_t pid, int64_t ts, fo_mfa mfa, const fo_mfa *caller)
{
    fo_event ev = ts_blank_event(FO_EV_CALL, pid, ts);
    ev.flags = FO_EVF_HAS_MFA;
    ev.mfa = mfa;
    if (caller != NULL) {
        ev.flags |= FO_EVF_HAS_CALLER;
        ev.caller = *caller;
    }
    return ev;
}

fo_event ev_ret_mfa(uint64_t pid, int64_t ts, const fo_mfa *mfa)
{
    fo_event ev = ts_blank_event(FO_EV_RETURN_TO, pid, ts);
    if (mfa != NULL) {
        ev.flags = FO_EVF_HAS_MFA;
        ev.mfa = *mfa;
    }
    return ev;
}

fo_event ev_call(uint64_t pid, int64_t ts, const char *mfa, const char *caller)
{
    fo_mfa c;
    if (caller != NULL)
        c = ts_mfa(caller);
    return ev_call_mfa(pid, ts, ts_mfa(mfa), caller != NULL ? &c : NULL);
}

fo_event ev_ret(uint64_t pid, int64_t ts, const char *mfa)
{
    fo_mfa r;
    if (mfa != NULL)
        r = ts_mfa(mfa);
    return ev_ret_mfa(pid, ts, mfa != NULL ? &r : NULL);
}

fo_event ev_kind(fo_event_kind kind, uint64_t pid, int64_t ts)
{
    return ts_blank_event(kind, pid, ts);
}

/* ------------------------------------------------------------------------
 * Sessions and scripts */

fo_limits ts_limits(uint32_t max_nodes, uint32_t max_depth, uint32_t max_processes,
                    uint32_t max_frames, uint32_t max_stack_frames)
{
    fo_limits l = fo_limits_default();
    if (max_nodes != 0)
        l.max_nodes = max_nodes;
    if (max_depth != 0)
        l.max_depth = max_depth;
    if (max_processes != 0)
        l.max_processes = max_processes;
    if (max_frames != 0)
        l.max_frames = max_frames;
    if (max_stack_frames != 0)
        l.max_stack_frames = max_stack_frames;
    return l;
}

fo_session *ts_new_session(const fo_limits *limits)
{
    fo_limits l = limits != NULL ? *limits : fo_limits_default();
    assert_true(fo_limits_valid(&l));
    fo_session *s = fo_session_new(&l);
    assert_non_null(s);
    return s;
}

/* "m:a/0;m:b/1": root first, as fo_session_sample takes them; "" or "-"
 * is an empty stack; "=" is the stack the process has
 * (fo_session_sample_same), "=N" that N times. waited:
 * fo_session_sample_waited. */
static void run_sample(fo_session *s, uint64_t pid, int64_t ts, const char *stack, uint64_t weight, unsigned how)
{
    if (stack[0] == '=') {
        char *end = NULL;
        unsigned long times = stack[1] == '\0' ? 1ul : strtoul(stack + 1, &end, 10);
        if (end != NULL && *end != '\0')
            fail_msg("bad same-sample count in '%s'", stack);
        fo_session_sample_same(s, pid, ts, weight, (uint32_t)times);
        return;
    }
    fo_mfa frames[64];
    uint32_t count = 0;
    char copy[512];
    snprintf(copy, sizeof copy, "%s", stack);
    char *save = NULL;
    for (char *part = strtok_r(copy, ";", &save); part != NULL; part = strtok_r(NULL, ";", &save)) {
        if (strcmp(part, "-") == 0)
            continue;
        assert_true(count < 64);
        frames[count++] = ts_mfa(part);
    }
    fo_session_sample_as(s, pid, ts, frames, count, weight, how);
}

/* CPU samples a script lays out ("at THREAD TS STACK"), which the
 * session's source hands over by thread and time like the NIF's: STACK is
 * root first, or "!M:F/A", a sample in the runtime naming only its leaf. */
#define TS_MAX_SCRIPTED 64
typedef struct {
    uint64_t thread;
    int64_t ts;
    char stack[512];
} scripted_sample;
static scripted_sample scripted[TS_MAX_SCRIPTED];
static size_t scripted_count;

static void scripted_source(void *ctx, fo_session *s, uint64_t pid, uint64_t thread, int64_t from_ns,
                            int64_t to_ns)
{
    (void)ctx;
    for (size_t i = 0; i < scripted_count; i++) {
        const scripted_sample *at = &scripted[i];
        if (at->thread != thread || at->ts < from_ns || at->ts >= to_ns)
            continue;
        if (at->stack[0] == '@') {
            char caller[256];
            snprintf(caller, sizeof caller, "%s", at->stack + 1);
            char *bang = strchr(caller, '!');
            assert_non_null(bang);
            *bang = '\0';
            fo_mfa from = ts_mfa(caller), leaf = ts_mfa(bang + 1);
            fo_session_cpu_sample_in(s, pid, &from, &leaf);
            continue;
        }
        if (at->stack[0] == '!') {
            fo_mfa leaf = ts_mfa(at->stack + 1);
            fo_session_cpu_orphan(s, pid, &leaf);
            continue;
        }
        int cut = at->stack[0] == '^';
        fo_mfa frames[64];
        uint32_t count = 0;
        uint32_t erlang = 0;
        char copy[512];
        snprintf(copy, sizeof copy, "%s", at->stack + cut);
        char *save = NULL;
        /* "m:a/0;m:b/0;!erts:c/0": Erlang frames, then a C leaf */
        for (char *part = strtok_r(copy, ";", &save); part != NULL; part = strtok_r(NULL, ";", &save)) {
            assert_true(count < 64);
            int c_leaf = part[0] == '!';
            frames[count++] = ts_mfa(part + c_leaf);
            if (!c_leaf)
                erlang = count;
        }
        fo_mfa marker = ts_mfa("m:cut/0");
        if (cut)
            fo_session_cpu_sample_cut(s, pid, frames, count, erlang, &marker);
        else
            fo_session_cpu_sample(s, pid, frames, count, erlang);
    }
}

/* The rest of a sample line: " STACK", then " w=N" and/or " waited" or
 * " leading". */
/* "m:a/0;m:b/0" into frames (64 at most; "-" stands for no frame). */
static uint32_t parse_frames(char *stack, fo_mfa *frames)
{
    uint32_t count = 0;
    char *save = NULL;
    for (char *part = strtok_r(stack, ";", &save); part != NULL; part = strtok_r(NULL, ";", &save)) {
        assert_true(count < 64);
        if (strcmp(part, "-") != 0)
            frames[count++] = ts_mfa(part);
    }
    return count;
}

static void run_sample_line(fo_session *s, uint64_t pid, int64_t ts, const char *rest, const char *line)
{
    char stack[512] = "";
    char opt1[32] = "";
    char opt2[32] = "";
    char extra[8] = "";
    int n = sscanf(rest, "%511s %31s %31s %7s", stack, opt1, opt2, extra);
    if (n < 1 || n > 3)
        fail_msg("bad script line '%s'", line);
    uint64_t weight = 0;
    unsigned how = 0;
    static const struct {
        const char *name;
        unsigned bit;
    } hows[] = {{"waited", FO_SAMPLE_WAITED},
                {"leading", FO_SAMPLE_LEADING},
                {"busy", FO_SAMPLE_BUSY},
                {"waiting", FO_SAMPLE_WAITING}};
    const char *opts[2] = {opt1, opt2};
    for (int i = 0; i + 1 < n; i++) {
        const char *opt = opts[i];
        unsigned bit = 0;
        for (size_t h = 0; h < sizeof hows / sizeof hows[0] && bit == 0; h++)
            if (strcmp(opt, hows[h].name) == 0)
                bit = hows[h].bit;
        if (bit != 0) {
            how |= bit;
            continue;
        }
        char *end = NULL;
        if (strncmp(opt, "w=", 2) != 0 || opt[2] == '\0' || opt[2] == '-')
            fail_msg("bad sample option in '%s' (want w=N, waited, leading, busy or waiting)", line);
        weight = strtoull(opt + 2, &end, 10);
        if (*end != '\0')
            fail_msg("bad sample weight in '%s' (want w=N)", line);
    }
    run_sample(s, pid, ts, stack, weight, how);
}

void ts_run_line(fo_session *s, const char *line)
{
    uint64_t pid = 0;
    int64_t ts = 0;
    char kind[16] = "";
    char a1[64] = "";
    char a2[16] = "";
    char a3[64] = "";
    char extra[8] = "";

    if (sscanf(line, "close %" SCNd64 " %7s", &ts, extra) == 1) {
        fo_session_close(s, ts);
        return;
    }
    if (sscanf(line, "malformed %" SCNu64 " %7s", &pid, extra) == 1) {
        fo_session_count_malformed(s, pid);
        return;
    }
    if (sscanf(line, "ignored %" SCNu64 " %7s", &pid, extra) == 1) {
        fo_session_count_ignored(s, pid);
        return;
    }
    if (strcmp(line, "collapse_recursion") == 0) {
        fo_session_set_collapse_recursion(s, 1);
        return;
    }
    if (strcmp(line, "cpu_sampled") == 0) {
        scripted_count = 0;
        fo_session_set_cpu_sampled(s, scripted_source, NULL);
        return;
    }
    uint64_t stratum_ns = 0, gap_ns = 0;
    if (sscanf(line, "cpu_strata %" SCNu64 " %" SCNu64 " %7s", &stratum_ns, &gap_ns, extra) == 2) {
        fo_session_set_cpu_strata(s, stratum_ns, gap_ns);
        return;
    }
    if (strcmp(line, "settle") == 0) {
        fo_session_cpu_settle(s, 0);
        return;
    }
    if (sscanf(line, "settle %" SCNd64 " %7s", &ts, extra) == 1) {
        fo_session_cpu_settle(s, ts);
        return;
    }
    char stack[512] = "";
    uint64_t thread = 0;
    char key[64] = "";
    if (sscanf(line, "context %" SCNu64 " %63s %511s %7s", &pid, key, stack, extra) == 3) {
        fo_mfa frames[64];
        uint32_t count = parse_frames(stack, frames);
        fo_mfa key_mfa = ts_mfa(key);
        fo_session_cpu_context(s, pid, &key_mfa, frames, count);
        return;
    }
    if (sscanf(line, "%" SCNu64 " inside %511s %7s", &pid, stack, extra) == 2) {
        fo_mfa frames[64];
        uint32_t count = parse_frames(stack, frames);
        fo_session_cpu_inside(s, pid, frames, count);
        return;
    }
    if (sscanf(line, "at %" SCNu64 " %" SCNd64 " %511s %7s", &thread, &ts, stack, extra) == 3) {
        assert_true(scripted_count < TS_MAX_SCRIPTED);
        scripted_sample *at = &scripted[scripted_count++];
        at->thread = thread;
        at->ts = ts;
        snprintf(at->stack, sizeof at->stack, "%s", stack);
        return;
    }
    if (sscanf(line, "%" SCNu64 " cpu %511s %7s", &pid, stack, extra) == 2) {
        fo_mfa frames[64];
        uint32_t count = parse_frames(stack, frames);
        fo_session_cpu_sample(s, pid, frames, count, count);
        return;
    }
    if (strcmp(line, "track_receives") == 0) {
        fo_session_track_receives(s, 1);
        return;
    }
    if (strcmp(line, "track_receives_cpu") == 0) {
        fo_session_track_receives_as(s, FO_RECEIVES_CPU);
        return;
    }
    if (strcmp(line, "track_receives_sampled") == 0) {
        fo_session_track_receives_as(s, FO_RECEIVES_SAMPLED);
        return;
    }
    if (sscanf(line, "expect_signal %" SCNu64 " %7s", &pid, extra) == 1) {
        fo_session_expect_signal(s, pid);
        return;
    }
    if (sscanf(line, "call_started %" SCNu64 " %7s", &pid, extra) == 1) {
        fo_session_call_started(s, pid);
        return;
    }
    int after_kind = 0;
    /* %n only counts when the literal "sample" matched */
    if (sscanf(line, "%" SCNu64 " %" SCNd64 " sample%n", &pid, &ts, &after_kind) == 2 && after_kind > 0) {
        run_sample_line(s, pid, ts, line + after_kind, line);
        return;
    }
    unsigned times = 0;
    if (sscanf(line, "%" SCNu64 " %" SCNd64 " slept %u %7s", &pid, &ts, &times, extra) == 3) {
        fo_session_count_slept(s, pid, times);
        return;
    }
    uint64_t ns = 0;
    if (sscanf(line, "heap_level %" SCNu64 " %" SCNu64 " %7s", &pid, &ns, extra) == 2) {
        fo_session_heap_level(s, pid, ns);
        return;
    }
    if (sscanf(line, "alloc_tail %" SCNu64 " %" SCNu64 " %7s", &pid, &ns, extra) == 2) {
        fo_session_alloc_tail(s, pid, ns);
        return;
    }
    if (sscanf(line, "heap_level_unless_known %" SCNu64 " %" SCNu64 " %7s", &pid, &ns, extra) == 2) {
        fo_session_heap_level_unless_known(s, pid, ns);
        return;
    }
    if (sscanf(line, "alloc_event_words %" SCNu64 " %7s", &ns, extra) == 1) {
        fo_session_set_alloc_event_words(s, ns);
        return;
    }
    if (sscanf(line, "attribute %" SCNu64 " %" SCNu64 " %7s", &pid, &ns, extra) == 2) {
        fo_session_attribute_wait(s, pid, ns);
        return;
    }
    if (sscanf(line, "runnable %" SCNu64 " %" SCNu64 " %7s", &pid, &ns, extra) == 2) {
        fo_session_runnable_wait(s, pid, ns);
        return;
    }
    int n = sscanf(line, "%" SCNu64 " %" SCNd64 " %15s %63s %15s %63s %7s", &pid, &ts, kind, a1, a2,
                   a3, extra);
    fo_event ev;
    if (n == 3 && strcmp(kind, "out") == 0) {
        ev = ev_kind(FO_EV_OUT, pid, ts);
    } else if (n == 3 && strcmp(kind, "out_call") == 0) {
        ev = ev_kind(FO_EV_OUT, pid, ts);
        ev.flags |= FO_EVF_IN_CALL;
    }
    else if (n == 3 && strcmp(kind, "in") == 0)
        ev = ev_kind(FO_EV_IN, pid, ts);
    else if (n == 3 && strcmp(kind, "in_after_msg") == 0) {
        /* a message ended its wait (a session without receive events) */
        ev = ev_kind(FO_EV_IN, pid, ts);
        ev.flags |= FO_EVF_LEFT_WAIT;
    }
    else if (n == 3 && strncmp(kind, "out@", 4) == 0) {
        ev = ev_kind(FO_EV_OUT, pid, ts);
        ev.flags |= FO_EVF_HAS_MFA;
        ev.mfa = ts_mfa(kind + 4);
    } else if (n == 3 && strncmp(kind, "out_call@", 9) == 0) {
        ev = ev_kind(FO_EV_OUT, pid, ts);
        ev.flags |= FO_EVF_HAS_MFA | FO_EVF_IN_CALL;
        ev.mfa = ts_mfa(kind + 9);
    } else if (n == 3 && strncmp(kind, "in@", 3) == 0) {
        ev = ev_kind(FO_EV_IN, pid, ts);
        ev.flags |= FO_EVF_HAS_THREAD;
        ev.thread = strtoull(kind + 3, NULL, 10);
    }
    else if (n == 3 && strcmp(kind, "exit") == 0)
        ev = ev_kind(FO_EV_EXIT, pid, ts);
    else if (n == 3 && strcmp(kind, "pause") == 0) {
        /* a follower leaving its trace for now (fo_follow.c) */
        ev = ev_kind(FO_EV_EXIT, pid, ts);
        ev.flags |= FO_EVF_PAUSED;
    }
    else if (n == 3 && strcmp(kind, "receive") == 0)
        ev = ev_kind(FO_EV_RECEIVE, pid, ts);
    else if (n == 3 && strcmp(kind, "gc_start") == 0)
        ev = ev_kind(FO_EV_GC_START, pid, ts);
    else if (n == 3 && strcmp(kind, "gc_end") == 0)
        ev = ev_kind(FO_EV_GC_END, pid, ts);
    else if (n == 3 && strcmp(kind, "gc_major_start") == 0) {
        ev = ev_kind(FO_EV_GC_START, pid, ts);
        ev.flags |= FO_EVF_MAJOR_GC;
    } else if (n == 3 && strcmp(kind, "gc_major_end") == 0) {
        ev = ev_kind(FO_EV_GC_END, pid, ts);
        ev.flags |= FO_EVF_MAJOR_GC;
    }
    else if (n == 4 && strcmp(kind, "call") == 0)
        ev = ev_call(pid, ts, a1, NULL);
    else if (n == 6 && strcmp(kind, "call") == 0 && strcmp(a2, "from") == 0)
        ev = ev_call(pid, ts, a1, a3);
    else if (n == 4 && strcmp(kind, "ret") == 0)
        ev = ev_ret(pid, ts, strcmp(a1, "undefined") == 0 ? NULL : a1);
    else if (n == 4 && strncmp(kind, "gc_", 3) == 0 && strncmp(a1, "heap=", 5) == 0) {
        /* "PID TS gc_start heap=W" (any gc kind): with the heap in use */
        ev = ev_kind(FO_EV_GC_START, pid, ts);
        ev.flags = 0;
        if (strstr(kind, "end") != NULL)
            ev.kind = FO_EV_GC_END;
        if (strstr(kind, "major") != NULL)
            ev.flags |= FO_EVF_MAJOR_GC;
        ev.flags |= FO_EVF_HAS_HEAP;
        ev.heap_words = strtoull(a1 + 5, NULL, 10);
    }
    else
        fail_msg("bad script line '%s'", line);
    fo_session_apply(s, &ev);
}

void ts_run_script(fo_session *s, const char *const *lines)
{
    for (size_t i = 0; lines[i] != NULL; i++)
        ts_run_line(s, lines[i]);
}

/* ------------------------------------------------------------------------
 * Growable text and line lists */

typedef struct {
    char *buf;
    size_t len;
    size_t cap;
} ts_buf;

static void ts_buf_add(ts_buf *b, const char *text)
{
    size_t n = strlen(text);
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap == 0 ? 256 : b->cap;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->buf, cap);
        assert_non_null(p);
        b->buf = p;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, text, n + 1);
    b->len += n;
}

static char *ts_buf_take(ts_buf *b)
{
    if (b->buf == NULL)
        ts_buf_add(b, "");
    char *out = b->buf;
    b->buf = NULL;
    b->len = b->cap = 0;
    return out;
}

typedef struct {
    char **items;
    size_t n;
    size_t cap;
} ts_lines;

static void ts_lines_push(ts_lines *l, char *line)
{
    if (l->n == l->cap) {
        size_t cap = l->cap == 0 ? 64 : l->cap * 2;
        char **p = realloc(l->items, cap * sizeof *p);
        assert_non_null(p);
        l->items = p;
        l->cap = cap;
    }
    l->items[l->n++] = line;
}

static int ts_cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorts, joins with '\n' after each line, frees the list. */
static char *ts_lines_finish(ts_lines *l)
{
    ts_buf b = {NULL, 0, 0};
    if (l->n > 0)
        qsort(l->items, l->n, sizeof *l->items, ts_cmp_str);
    for (size_t i = 0; i < l->n; i++) {
        ts_buf_add(&b, l->items[i]);
        ts_buf_add(&b, "\n");
        free(l->items[i]);
    }
    free(l->items);
    l->items = NULL;
    l->n = l->cap = 0;
    return ts_buf_take(&b);
}

static char *ts_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    assert_non_null(p);
    memcpy(p, s, n);
    return p;
}

static char *ts_format(const char *prefix, const char *path, uint64_t value)
{
    size_t n = strlen(prefix) + strlen(path) + 32;
    char *p = malloc(n);
    assert_non_null(p);
    int w = snprintf(p, n, "%s%s %" PRIu64, prefix, path, value);
    assert_true(w > 0 && (size_t)w < n);
    return p;
}

/* ------------------------------------------------------------------------
 * Rendering */

static void ts_frame_name(const fo_session *s, uint32_t frame, char *buf, size_t size)
{
    const char *name = NULL;
    switch (frame) {
    case FO_FRAME_PROCESS:
        name = "(root)";
        break;
    case FO_FRAME_SLEEP:
        name = "SLEEP";
        break;
    case FO_FRAME_DEPTH_CAP:
        name = TS_DEPTH_CAP_NAME;
        break;
    case FO_FRAME_NODE_CAP:
        name = "[node_cap]";
        break;
    case FO_FRAME_WAITING:
        name = "WAITING";
        break;
    case FO_FRAME_GC_MINOR:
        name = "GC_MINOR";
        break;
    case FO_FRAME_GC_MAJOR:
        name = "GC_MAJOR";
        break;
    case FO_FRAME_ATTRIBUTED:
        name = "ATTRIBUTED";
        break;
    case FO_FRAME_RUNNABLE:
        name = "RUNNABLE";
        break;
    default:
        break;
    }
    if (name != NULL) {
        int n = snprintf(buf, size, "%s", name);
        assert_true(n > 0 && (size_t)n < size);
        return;
    }
    fo_mfa mfa;
    memset(&mfa, 0, sizeof mfa);
    if (frame >= FO_FRAME_FIRST_REAL && fo_session_frame_mfa(s, frame, &mfa) == 1) {
        ts_mfa_format(mfa, buf, size);
    } else {
        int n = snprintf(buf, size, "?frame%" PRIu32, frame);
        assert_true(n > 0 && (size_t)n < size);
    }
}

static void ts_free_paths(char **paths, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
}

/* paths[id]: frames from the outermost to the node, root excluded ("" for
 * a root). Checks parent < id on the way, since one pass needs it. */
static char **ts_build_paths(const fo_session *s, uint32_t *count)
{
    uint32_t n = fo_session_node_count(s);
    char **paths = calloc(n == 0 ? 1 : n, sizeof *paths);
    assert_non_null(paths);
    for (uint32_t id = 0; id < n; id++) {
        fo_node_info ni;
        memset(&ni, 0, sizeof ni);
        fo_session_node(s, id, &ni);
        if (ni.parent == FO_NONE) {
            paths[id] = ts_strdup("");
            continue;
        }
        if (ni.parent >= id) {
            ts_free_paths(paths, id);
            fail_msg("node %" PRIu32 " has parent %" PRIu32 " (parent id must be smaller)", id,
                     ni.parent);
        }
        char name[160];
        ts_frame_name(s, ni.frame, name, sizeof name);
        const char *pp = paths[ni.parent];
        size_t plen = strlen(pp);
        size_t nlen = strlen(name);
        char *p = malloc(plen + nlen + 2);
        assert_non_null(p);
        if (plen > 0) {
            memcpy(p, pp, plen);
            p[plen] = ';';
            memcpy(p + plen + 1, name, nlen + 1);
        } else {
            memcpy(p, name, nlen + 1);
        }
        paths[id] = p;
    }
    *count = n;
    return paths;
}

/* "PREFIXPATH alloc=W gcs=N" */
static char *ts_format_alloc(const char *prefix, const char *path, const fo_node_info *ni)
{
    size_t n = strlen(prefix) + strlen(path) + 64;
    char *p = malloc(n);
    assert_non_null(p);
    int w = snprintf(p, n, "%s%s alloc=%" PRIu64 " gcs=%" PRIu64, prefix, path, ni->alloc_words,
                     ni->alloc_samples);
    assert_true(w > 0 && (size_t)w < n);
    return p;
}

/* "PREFIXPATH samples=N weight=W" */
static char *ts_format_samples(const char *prefix, const char *path, const fo_node_info *ni)
{
    size_t n = strlen(prefix) + strlen(path) + 64;
    char *p = malloc(n);
    assert_non_null(p);
    int w = snprintf(p, n, "%s%s samples=%" PRIu64 " weight=%" PRIu64, prefix, path, ni->samples,
                     ni->weight);
    assert_true(w > 0 && (size_t)w < n);
    return p;
}

static char *ts_render(const fo_session *s, int one_pid, uint64_t pid, unsigned flags)
{
    uint32_t n = 0;
    char **paths = ts_build_paths(s, &n);
    uint32_t procs = fo_session_process_count(s);
    ts_lines lines = {NULL, 0, 0};
    for (uint32_t id = 0; id < n; id++) {
        fo_node_info ni;
        memset(&ni, 0, sizeof ni);
        fo_session_node(s, id, &ni);
        assert_true(ni.proc < procs);
        uint64_t npid = fo_session_process_pid(s, ni.proc);
        if (one_pid && npid != pid)
            continue;
        int timed = ni.self_ns > 0 || (flags & TS_RENDER_ZERO) != 0;
        int sampled = ni.samples > 0 || ni.weight > 0;
        int allocated = ni.alloc_words > 0 || ni.alloc_samples > 0;
        if (!timed && !sampled && !allocated)
            continue;
        char prefix[32] = "";
        if (!one_pid) {
            int w = snprintf(prefix, sizeof prefix, "%" PRIu64 " ", npid);
            assert_true(w > 0 && (size_t)w < sizeof prefix);
        }
        const char *path = paths[id][0] != '\0' ? paths[id] : "(root)";
        if (timed)
            ts_lines_push(&lines, ts_format(prefix, path, ni.self_ns));
        if (sampled)
            ts_lines_push(&lines, ts_format_samples(prefix, path, &ni));
        if (allocated)
            ts_lines_push(&lines, ts_format_alloc(prefix, path, &ni));
    }
    ts_free_paths(paths, n);
    return ts_lines_finish(&lines);
}

char *ts_render_session(const fo_session *s, unsigned flags)
{
    return ts_render(s, 0, 0, flags);
}

char *ts_render_pid(const fo_session *s, uint64_t pid, unsigned flags)
{
    return ts_render(s, 1, pid, flags);
}

char *ts_join_sorted(const char *const *lines)
{
    ts_lines l = {NULL, 0, 0};
    for (size_t i = 0; lines != NULL && lines[i] != NULL; i++)
        ts_lines_push(&l, ts_strdup(lines[i]));
    return ts_lines_finish(&l);
}

/* ------------------------------------------------------------------------
 * Assertions */

static void ts_first_difference(const char *a, const char *b)
{
    size_t line = 1;
    const char *la = a;
    const char *lb = b;
    while (*a != '\0' && *a == *b) {
        if (*a == '\n') {
            line++;
            la = a + 1;
            lb = b + 1;
        }
        a++;
        b++;
    }
    const char *ea = strchr(la, '\n');
    const char *eb = strchr(lb, '\n');
    int wa = ea != NULL ? (int)(ea - la) : (int)strlen(la);
    int wb = eb != NULL ? (int)(eb - lb) : (int)strlen(lb);
    print_error("first difference at line %zu:\n  actual:   '%.*s'\n  expected: '%.*s'\n", line, wa,
                la, wb, lb);
}

static const char *ts_ends_line(const char *text)
{
    size_t n = strlen(text);
    return n > 0 && text[n - 1] == '\n' ? "" : "\n";
}

/* 1 (and both sides printed) when the texts differ. */
static int ts_text_differs(const char *actual, const char *expected, const char *what)
{
    if (strcmp(actual, expected) == 0)
        return 0;
    if (strlen(actual) + strlen(expected) < 6000)
        print_error("%s differs.\n--- actual:\n%s%s--- expected:\n%s%s---\n", what, actual,
                    ts_ends_line(actual), expected, ts_ends_line(expected));
    else
        print_error("%s differs (%zu vs %zu bytes).\n", what, strlen(actual), strlen(expected));
    ts_first_difference(actual, expected);
    return 1;
}

void ts_assert_text(const char *actual, const char *expected, const char *what)
{
    if (ts_text_differs(actual, expected, what))
        fail_msg("%s: output differs from expected", what);
}

void ts_assert_session(const fo_session *s, const char *const *expected)
{
    char *actual = ts_render_session(s, 0);
    char *want = ts_join_sorted(expected);
    int bad = ts_text_differs(actual, want, "folded stacks");
    free(actual);
    free(want);
    if (bad)
        fail_msg("folded stacks differ from expected");
}

void ts_assert_pid(const fo_session *s, uint64_t pid, const char *const *expected)
{
    char *actual = ts_render_pid(s, pid, 0);
    char *want = ts_join_sorted(expected);
    int bad = ts_text_differs(actual, want, "folded stacks of one pid");
    free(actual);
    free(want);
    if (bad)
        fail_msg("folded stacks of pid %" PRIu64 " differ from expected", pid);
}

#define TS_STATS(X)                                                                                \
    X(events)                                                                                      \
    X(dropped_events)                                                                              \
    X(malformed_events)                                                                            \
    X(ignored_events)                                                                              \
    X(truncated_stacks)                                                                            \
    X(depth_truncations)                                                                           \
    X(node_limit_hits)                                                                             \
    X(frame_limit_hits)                                                                            \
    X(process_limit_hits)                                                                          \
    X(stack_overflows)                                                                             \
    X(clock_skews)                                                                                 \
    X(resyncs)                                                                                     \
    X(collapsed_recursion)                                                                         \
    X(samples)                                                                                     \
    X(cpu_unsampled_ns)                                                                            \
    X(cpu_orphans)                                                                                 \
    X(cpu_rootless)                                                                                \
    X(cpu_contexts)                                                                                \
    X(cpu_unknown_stops)                                                                           \
    X(cpu_cut_samples)                                                                             \
    X(cpu_rehomed_cuts)                                                                            \
    X(cpu_called_samples)                                                                          \
    X(cpu_seen_stops)                                                                              \
    X(cpu_entered_stops)                                                                           \
    X(cpu_broken_chains)                                                                           \
    X(cpu_foreign_chains)                                                                          \
    X(cpu_strata)                                                                                  \
    X(gc_minor)                                                                                    \
    X(gc_major)                                                                                    \
    X(gc_minor_ns)                                                                                 \
    X(gc_major_ns)                                                                                 \
    X(alloc_words)                                                                                 \
    X(alloc_samples)                                                                               \
    X(alloc_unknown)

char *ts_render_stats(const fo_stats *st)
{
    ts_buf b = {NULL, 0, 0};
    char item[96];
#define TS_RENDER_STAT(f)                                                                          \
    do {                                                                                           \
        int w_ = snprintf(item, sizeof item, "%s%s=%" PRIu64, b.len > 0 ? " " : "", #f, st->f);    \
        assert_true(w_ > 0 && (size_t)w_ < sizeof item);                                           \
        ts_buf_add(&b, item);                                                                      \
    } while (0);
    TS_STATS(TS_RENDER_STAT)
#undef TS_RENDER_STAT
    return ts_buf_take(&b);
}

void ts_assert_stats(const fo_session *s, const char *spec)
{
    const fo_stats *actual = fo_session_stats(s);
    assert_non_null(actual);
    fo_stats want;
    memset(&want, 0, sizeof want);
    char *copy = ts_strdup(spec != NULL ? spec : "");
    char *save = NULL;
    for (char *tok = strtok_r(copy, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        if (eq == NULL)
            fail_msg("bad stats spec token '%s'", tok);
        *eq = '\0';
        const char *value = eq + 1;
        int wild = strcmp(value, "?") == 0;
        char *end = NULL;
        uint64_t v = wild ? 0 : strtoull(value, &end, 10);
        if (!wild && (end == value || *end != '\0'))
            fail_msg("bad stats value '%s'", value);
        int known = 0;
#define TS_SET_STAT(f)                                                                             \
    if (strcmp(tok, #f) == 0) {                                                                    \
        want.f = wild ? actual->f : v;                                                             \
        known = 1;                                                                                 \
    }
        TS_STATS(TS_SET_STAT)
#undef TS_SET_STAT
        if (!known)
            fail_msg("unknown stats counter '%s'", tok);
    }
    free(copy);
    char *a = ts_render_stats(actual);
    char *w = ts_render_stats(&want);
    int bad = ts_text_differs(a, w, "stats");
    free(a);
    free(w);
    if (bad)
        fail_msg("stats differ from expected");
}

/* ------------------------------------------------------------------------
 * Tree invariants */

typedef struct {
    uint32_t parent;
    uint32_t frame;
    uint32_t id;
} ts_edge;

static int ts_cmp_edge(const void *a, const void *b)
{
    const ts_edge *x = a;
    const ts_edge *y = b;
    if (x->parent != y->parent)
        return x->parent < y->parent ? -1 : 1;
    if (x->frame != y->frame)
        return x->frame < y->frame ? -1 : 1;
    return 0;
}

void ts_check_tree(const fo_session *s)
{
    uint32_t n = fo_session_node_count(s);
    uint32_t procs = fo_session_process_count(s);
    fo_node_info *nodes = calloc(n == 0 ? 1 : n, sizeof *nodes);
    uint32_t *roots = calloc(procs == 0 ? 1 : procs, sizeof *roots);
    uint32_t *caps = calloc(procs == 0 ? 1 : procs, sizeof *caps);
    ts_edge *edges = calloc(n == 0 ? 1 : n, sizeof *edges);
    assert_non_null(nodes);
    assert_non_null(roots);
    assert_non_null(caps);
    assert_non_null(edges);
    size_t ne = 0;
    char err[256] = "";
#define TREE_FAIL(...)                                                                             \
    do {                                                                                           \
        snprintf(err, sizeof err, __VA_ARGS__);                                                    \
        goto done;                                                                                 \
    } while (0)
    for (uint32_t id = 0; id < n; id++) {
        fo_node_info *ni = &nodes[id];
        fo_session_node(s, id, ni);
        if (ni->proc >= procs)
            TREE_FAIL("node %" PRIu32 ": proc %" PRIu32 " >= process_count %" PRIu32, id, ni->proc,
                      procs);
        if (ni->parent == FO_NONE) {
            if (ni->frame != FO_FRAME_PROCESS || ni->depth != 0)
                TREE_FAIL("root node %" PRIu32 ": frame %" PRIu32 " depth %" PRIu32, id, ni->frame,
                          ni->depth);
            roots[ni->proc]++;
            continue;
        }
        if (ni->parent >= id)
            TREE_FAIL("node %" PRIu32 " has parent %" PRIu32 " (must be smaller)", id, ni->parent);
        const fo_node_info *p = &nodes[ni->parent];
        if (ni->frame == FO_FRAME_PROCESS)
            TREE_FAIL("node %" PRIu32 ": PROCESS frame below a root", id);
        if (ni->depth != p->depth + 1)
            TREE_FAIL("node %" PRIu32 ": depth %" PRIu32 ", parent depth %" PRIu32, id, ni->depth,
                      p->depth);
        if (ni->proc != p->proc)
            TREE_FAIL("node %" PRIu32 ": proc %" PRIu32 ", parent proc %" PRIu32, id, ni->proc,
                      p->proc);
        if (p->frame == FO_FRAME_SLEEP || p->frame == FO_FRAME_RUNNABLE)
            TREE_FAIL("node %" PRIu32 ": child of a SLEEP or RUNNABLE leaf", id);
        if (p->frame == FO_FRAME_DEPTH_CAP && ni->frame != FO_FRAME_SLEEP && ni->frame != FO_FRAME_GC_MINOR &&
            ni->frame != FO_FRAME_GC_MAJOR && ni->frame != FO_FRAME_RUNNABLE)
            TREE_FAIL("node %" PRIu32 ": frame %" PRIu32 " below the depth-cap node", id,
                      ni->frame);
        if (ni->frame == FO_FRAME_NODE_CAP) {
            caps[ni->proc]++;
            if (p->parent != FO_NONE)
                TREE_FAIL("[node_cap] node %" PRIu32 " does not hang off its process root", id);
        }
        if (ni->frame >= FO_FRAME_FIRST_REAL) {
            fo_mfa mfa;
            if (fo_session_frame_mfa(s, ni->frame, &mfa) != 1)
                TREE_FAIL("node %" PRIu32 ": real frame %" PRIu32 " has no MFA", id, ni->frame);
        }
        edges[ne].parent = ni->parent;
        edges[ne].frame = ni->frame;
        edges[ne].id = id;
        ne++;
    }
    for (uint32_t p = 0; p < procs; p++) {
        if (roots[p] != 1)
            TREE_FAIL("process %" PRIu32 " has %" PRIu32 " root nodes", p, roots[p]);
        if (caps[p] > 1)
            TREE_FAIL("process %" PRIu32 " has %" PRIu32 " [node_cap] nodes", p, caps[p]);
    }
    if (ne > 1)
        qsort(edges, ne, sizeof *edges, ts_cmp_edge);
    for (size_t i = 1; i < ne; i++) {
        if (ts_cmp_edge(&edges[i - 1], &edges[i]) == 0)
            TREE_FAIL("nodes %" PRIu32 " and %" PRIu32 ": same parent and frame", edges[i - 1].id,
                      edges[i].id);
    }
done:
#undef TREE_FAIL
    free(nodes);
    free(roots);
    free(caps);
    free(edges);
    if (err[0] != '\0')
        fail_msg("tree invariant: %s", err);
}

uint64_t ts_pid_total(const fo_session *s, uint64_t pid)
{
    uint64_t total = 0;
    uint32_t n = fo_session_node_count(s);
    for (uint32_t id = 0; id < n; id++) {
        fo_node_info ni;
        fo_session_node(s, id, &ni);
        if (fo_session_process_pid(s, ni.proc) == pid)
            total += ni.self_ns;
    }
    return total;
}

uint32_t ts_pid_max_depth(const fo_session *s, uint64_t pid)
{
    uint32_t depth = 0;
    uint32_t n = fo_session_node_count(s);
    for (uint32_t id = 0; id < n; id++) {
        fo_node_info ni;
        fo_session_node(s, id, &ni);
        if (fo_session_process_pid(s, ni.proc) == pid && ni.depth > depth)
            depth = ni.depth;
    }
    return depth;
}

uint32_t ts_pid_node_count(const fo_session *s, uint64_t pid, int count_node_cap)
{
    uint32_t count = 0;
    uint32_t n = fo_session_node_count(s);
    for (uint32_t id = 0; id < n; id++) {
        fo_node_info ni;
        fo_session_node(s, id, &ni);
        if (fo_session_process_pid(s, ni.proc) != pid)
            continue;
        if (ni.frame == FO_FRAME_NODE_CAP && !count_node_cap)
            continue;
        count++;
    }
    return count;
}

/* ------------------------------------------------------------------------
 * Table-driven cases */

/* The session is made in setup and freed in teardown, which cmocka runs
 * even when the test fails: a failing case leaks nothing under valgrind. */
typedef struct {
    const ts_case *c;
    fo_session *s;
} ts_case_run;

static int ts_case_setup(void **state)
{
    ts_case_run *run = calloc(1, sizeof *run);
    if (run == NULL)
        return -1;
    run->c = *state;
    const ts_case *c = run->c;
    fo_limits l = ts_limits(c->limits.max_nodes, c->limits.max_depth, c->limits.max_processes,
                            c->limits.max_frames, c->limits.max_stack_frames);
    run->s = fo_session_new(&l);
    if (run->s == NULL) {
        free(run);
        return -1;
    }
    *state = run;
    return 0;
}

static int ts_case_teardown(void **state)
{
    ts_case_run *run = *state;
    fo_session_free(run->s);
    free(run);
    return 0;
}

static void ts_case_test(void **state)
{
    const ts_case_run *run = *state;
    ts_run_script(run->s, run->c->script);
    ts_check_tree(run->s);
    ts_assert_session(run->s, run->c->expect);
    ts_assert_stats(run->s, run->c->stats);
}

int ts_run_cases(const char *group, const ts_case *cases, size_t n)
{
    struct CMUnitTest *tests = calloc(n == 0 ? 1 : n, sizeof *tests);
    assert_non_null(tests);
    for (size_t i = 0; i < n; i++) {
        tests[i].name = cases[i].name;
        tests[i].test_func = ts_case_test;
        tests[i].setup_func = ts_case_setup;
        tests[i].teardown_func = ts_case_teardown;
        tests[i].initial_state = (void *)(uintptr_t)&cases[i];
    }
    int failed = _cmocka_run_group_tests(group, tests, n, NULL, NULL);
    free(tests);
    return failed;
}

/* ------------------------------------------------------------------------
 * splitmix64 */

uint64_t ts_rng_next(ts_rng *r)
{
    uint64_t z = (r->state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

uint32_t ts_rng_below(ts_rng *r, uint32_t n)
{
    return (uint32_t)(ts_rng_next(r) % n);
}
