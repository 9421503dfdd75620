/* The span graph of c_src/core/GRAPH.md: correlation and wake-up events
 * in, the exact spans (times in ns, waits split into attributed and
 * unattributed by cause), edges, notes and counters out. Then bounds
 * without growth, a seeded model of well-formed nested calls with noise,
 * and seeded garbage streams checked against the graph invariants.
 *
 * Scripts, one event or check per line (names are pids and tags; they get
 * large 64-bit keys from ts_name_key):
 *     "root P TS"                     fo_graph_root
 *     "send CALLER CALLEE TAG TS"     fo_graph_request_sent
 *     "recv CALLEE CALLER TAG TS"     fo_graph_request_received
 *     "reply SENDER TAG TS"           fo_graph_reply_sent
 *     "resume CALLER TAG TS"          fo_graph_reply_received
 *     "msgsent FROM TO TS"            fo_graph_message_sent (TO "-": an alias)
 *     "msg TO FROM TS"                fo_graph_message_received
 *     "spawn PARENT CHILD TS"         fo_graph_spawned
 *     "rmsgsent FROM TO WIRE TS"      fo_graph_remote_message_sent
 *     "rmsg TO FROM WIRE TS"          fo_graph_remote_message_received
 *     "rspawn PARENT CHILD WIRE TS"   fo_graph_remote_spawned
 *     "rspawnsent FROM WIRE TS"       fo_graph_remote_spawn_sent
 *     "rspawnreply SPAWNER CHILD WIRE TS"  fo_graph_remote_spawn_replied
 *     "rdown WAITER CHILD WIRE TS"    fo_graph_remote_down
 *     "rnamed WAITER NAME TS"         fo_graph_remote_name_answered
 *     "out P TS" / "in P TS"          fo_graph_out / fo_graph_in
 *     "rcv P TS WAKER"                fo_graph_received; WAKER a name, port,
 *                                     timer or ? (a process, not known which)
 *     "ran P TS"                      fo_graph_ran
 *     "gc P TS start|end"             fo_graph_gc
 *     "exit P TS REASON"              fo_graph_exit ("normal" is key 0)
 *     "late P"                        fo_graph_set_late
 *     "close TS"                      fo_graph_close
 *     "active P 0|1"                  assert fo_graph_active
 *     "following P 0|1"               assert fo_graph_following
 *     "outsider P"                    fo_graph_outsider
 *     "waiting P N CALLEE|-"          assert fo_graph_waiting_call
 *     "current P ID|-"                assert fo_graph_current_span
 *     "note KIND P TS [NS]"           assert the next note (joined, left,
 *                                     pause, resume, in, attribute,
 *                                     runnable)
 *     "notes 0"                       assert no note is left
 * Notes not asserted are dropped at the end of each line unless the case
 * asks for them (NOTES).
 *
 * Spans render one line each, in id order:
 *     "ID PID PARENT START..END self=S[ run=R][ gc=G] wait=W/ATTRIBUTED/UNATTRIBUTED[(CAUSES)]
 *      on=P|- STATUS KIND"
 * (run and gc only when not zero)
 * CAUSES lists the unattributed wait's non-zero causes (p process, o port,
 * t timer, x other); STATUS is open, ok, at_close or exit:REASON; KIND is
 * root, req, work or cont. Edges render as "WAITER->WAKER FROM..TO ns=N
 * wakes=W". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fo_graph.h"
#include "test_support.h"

#define LINES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define DEFAULTS {0, 0, 0, 0}

/* ------------------------------------------------------------------------
 * Names and scripts */

/* "@B" is process B of another node. */
static uint64_t key(const char *name)
{
    if (name[0] == '@')
        return ts_name_key(name + 1) | FO_GRAPH_REMOTE_BIT;
    return strcmp(name, "normal") == 0 ? 0 : ts_name_key(name);
}

static const char *name_of(uint64_t k, char *buf, size_t size)
{
    if (k & FO_GRAPH_REMOTE_BIT) {
        const char *local = ts_key_name(k & ~FO_GRAPH_REMOTE_BIT);
        snprintf(buf, size, "@%s", local != NULL ? local : "?");
        return buf;
    }
    const char *n = ts_key_name(k);
    if (k == 0)
        return "-";
    if (n != NULL)
        return n;
    snprintf(buf, size, "?%" PRIx64, k);
    return buf;
}

static int64_t num(const char *text, const char *line)
{
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end != '\0')
        fail_msg("bad number '%s' in script line '%s'", text, line);
    return (int64_t)v;
}

#define MAX_WORDS 6

static const char *const note_names[] = {"?",      "joined",    "left",    "pause",
                                         "resume", "in",        "attribute", "runnable"};

static void check_note(fo_graph *g, char *const *w, int n, const char *line)
{
    fo_graph_note got;
    if (!fo_graph_next_note(g, &got))
        fail_msg("'%s': no note left", line);
    if (got.kind >= sizeof note_names / sizeof note_names[0] || strcmp(note_names[got.kind], w[1]) != 0 ||
        got.pid != key(w[2]) || got.ts != num(w[3], line) || (n == 5 && (int64_t)got.ns != num(w[4], line))) {
        char name[32];
        fail_msg("'%s': got note %s %s %" PRId64 " %" PRIu64, line,
                 got.kind < sizeof note_names / sizeof note_names[0] ? note_names[got.kind] : "?",
                 name_of(got.pid, name, sizeof name), got.ts, got.ns);
    }
}

static fo_waker_kind waker_of(const char *word, uint64_t *sender)
{
    *sender = 0;
    if (strcmp(word, "port") == 0)
        return FO_WAKER_PORT;
    if (strcmp(word, "timer") == 0)
        return FO_WAKER_TIMER;
    if (strcmp(word, "none") == 0)
        return FO_WAKER_NONE;
    if (strcmp(word, "?") != 0)
        *sender = key(word);
    return FO_WAKER_PROCESS;
}

static void check_waiting(const fo_graph *g, char *const *w, const char *line)
{
    uint64_t callee = 0;
    uint32_t n = fo_graph_waiting_call(g, key(w[1]), &callee);
    if ((int64_t)n != num(w[2], line))
        fail_msg("'%s': waiting %" PRIu32, line, n);
    if (n > 0 && callee != (strcmp(w[3], "-") == 0 ? 0 : key(w[3])))
        fail_msg("'%s': waiting on another callee", line);
}

static void check_current(const fo_graph *g, char *const *w, const char *line)
{
    uint32_t s = fo_graph_current_span(g, key(w[1]));
    uint32_t want = strcmp(w[2], "-") == 0 ? FO_NONE : (uint32_t)num(w[2], line);
    if (s != want)
        fail_msg("'%s': current span is %" PRIu32, line, s);
}

static int run_event(fo_graph *g, char *const *w, int n, const char *line)
{
    uint64_t sender = 0;
    if (n == 3 && strcmp(w[0], "root") == 0)
        fo_graph_root(g, key(w[1]), num(w[2], line));
    else if (n == 5 && strcmp(w[0], "send") == 0)
        fo_graph_request_sent(g, key(w[1]), key(w[2]), key(w[3]), num(w[4], line));
    else if (n == 5 && strcmp(w[0], "recv") == 0)
        fo_graph_request_received(g, key(w[1]), key(w[2]), key(w[3]), num(w[4], line));
    else if (n == 6 && strcmp(w[0], "rsend") == 0)
        fo_graph_remote_request_sent(g, key(w[1]), key(w[2]), key(w[3]), (uint32_t)num(w[4], line),
                                     num(w[5], line));
    else if (n == 6 && strcmp(w[0], "rrecv") == 0)
        fo_graph_remote_request_received(g, key(w[1]), key(w[2]), key(w[3]), (uint32_t)num(w[4], line),
                                         num(w[5], line));
    else if (n == 4 && strcmp(w[0], "reply") == 0)
        fo_graph_reply_sent(g, key(w[1]), key(w[2]), num(w[3], line));
    else if (n == 4 && strcmp(w[0], "resume") == 0)
        fo_graph_reply_received(g, key(w[1]), key(w[2]), num(w[3], line));
    else if (n == 4 && strcmp(w[0], "msgsent") == 0)
        fo_graph_message_sent(g, key(w[1]), strcmp(w[2], "-") == 0 ? 0 : key(w[2]), num(w[3], line));
    else if (n == 4 && strcmp(w[0], "msg") == 0)
        fo_graph_message_received(g, key(w[1]), key(w[2]), num(w[3], line));
    else if (n == 5 && strcmp(w[0], "rmsgsent") == 0)
        fo_graph_remote_message_sent(g, key(w[1]), key(w[2]), (uint32_t)num(w[3], line), num(w[4], line));
    else if (n == 5 && strcmp(w[0], "rmsg") == 0)
        fo_graph_remote_message_received(g, key(w[1]), key(w[2]), (uint32_t)num(w[3], line), num(w[4], line));
    else if (n == 5 && strcmp(w[0], "rspawn") == 0)
        fo_graph_remote_spawned(g, key(w[1]), key(w[2]), (uint32_t)num(w[3], line), num(w[4], line));
    else if (n == 4 && strcmp(w[0], "rspawnsent") == 0)
        fo_graph_remote_spawn_sent(g, key(w[1]), (uint32_t)num(w[2], line), num(w[3], line));
    else if (n == 5 && strcmp(w[0], "rspawnreply") == 0)
        fo_graph_remote_spawn_replied(g, key(w[1]), key(w[2]), (uint32_t)num(w[3], line), num(w[4], line));
    else if (n == 5 && strcmp(w[0], "rdown") == 0)
        fo_graph_remote_down(g, key(w[1]), key(w[2]), (uint32_t)num(w[3], line), num(w[4], line));
    else if (n == 4 && strcmp(w[0], "rnamed") == 0)
        fo_graph_remote_name_answered(g, key(w[1]), key(w[2]), num(w[3], line));
    else if (n == 4 && strcmp(w[0], "spawn") == 0)
        fo_graph_spawned(g, key(w[1]), key(w[2]), num(w[3], line));
    else if (n == 3 && strcmp(w[0], "out") == 0)
        fo_graph_out(g, key(w[1]), num(w[2], line));
    else if (n == 3 && strcmp(w[0], "in") == 0)
        fo_graph_in(g, key(w[1]), num(w[2], line));
    else if (n == 4 && strcmp(w[0], "rcv") == 0) {
        fo_waker_kind kind = waker_of(w[3], &sender);
        fo_graph_received(g, key(w[1]), num(w[2], line), kind, sender);
    }
    else if (n == 3 && strcmp(w[0], "ran") == 0)
        fo_graph_ran(g, key(w[1]), num(w[2], line));
    else if (n == 4 && strcmp(w[0], "gc") == 0)
        fo_graph_gc(g, key(w[1]), num(w[2], line), strcmp(w[3], "start") == 0);
    else if (n == 4 && strcmp(w[0], "exit") == 0)
        fo_graph_exit(g, key(w[1]), num(w[2], line), key(w[3]));
    else if (n == 2 && strcmp(w[0], "late") == 0)
        fo_graph_set_late(g, key(w[1]));
    else if (n == 2 && strcmp(w[0], "close") == 0)
        fo_graph_close(g, num(w[1], line));
    else
        return 0;
    return 1;
}

/* Returns 1 when the line was an event (its notes are then pending). */
static int run_line(fo_graph *g, const char *line)
{
    char copy[160];
    char *w[MAX_WORDS] = {NULL};
    int n = 0;
    char *save = NULL;
    assert_true(strlen(line) < sizeof copy);
    strcpy(copy, line);
    for (char *tok = strtok_r(copy, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save)) {
        if (n == MAX_WORDS)
            fail_msg("too many words in script line '%s'", line);
        w[n++] = tok;
    }
    if (run_event(g, w, n, line))
        return 1;
    if (n == 3 && strcmp(w[0], "active") == 0) {
        if (fo_graph_active(g, key(w[1])) != num(w[2], line))
            fail_msg("'%s' does not hold", line);
    } else if (n == 2 && strcmp(w[0], "outsider") == 0) {
        assert_int_equal(fo_graph_outsider(g, key(w[1])), 1);
    } else if (n == 3 && strcmp(w[0], "following") == 0) {
        if (fo_graph_following(g, key(w[1])) != num(w[2], line))
            fail_msg("'%s' does not hold", line);
    } else if (n == 4 && strcmp(w[0], "waiting") == 0) {
        check_waiting(g, w, line);
    } else if (n == 3 && strcmp(w[0], "current") == 0) {
        check_current(g, w, line);
    } else if ((n == 4 || n == 5) && strcmp(w[0], "note") == 0) {
        check_note(g, w, n, line);
    } else if (n == 2 && strcmp(w[0], "notes") == 0) {
        fo_graph_note left;
        if (fo_graph_next_note(g, &left))
            fail_msg("'%s': a %s note is left", line, note_names[left.kind]);
    } else {
        fail_msg("bad script line '%s'", line);
    }
    return 0;
}

/* keep_notes: notes stay for "note" lines; else each event's are dropped. */
static void run_script(fo_graph *g, const char *const *lines, int keep_notes)
{
    fo_graph_note dropped;
    for (size_t i = 0; lines[i] != NULL; i++) {
        if (run_line(g, lines[i]) && !keep_notes)
            while (fo_graph_next_note(g, &dropped))
                ;
    }
}

/* ------------------------------------------------------------------------
 * Rendering and comparing */

static char *append(char *text, const char *line)
{
    size_t a = text != NULL ? strlen(text) : 0;
    size_t b = strlen(line);
    char *p = realloc(text, a + b + 2);
    assert_non_null(p);
    memcpy(p + a, line, b);
    p[a + b] = '\n';
    p[a + b + 1] = '\0';
    return p;
}

static const char *status_text(const fo_span_info *si, char *buf, size_t size)
{
    char name[32];
    switch (si->status) {
    case FO_SPAN_OPEN:
        return "open";
    case FO_SPAN_OK:
        return "ok";
    case FO_SPAN_OPEN_AT_CLOSE:
        return "at_close";
    case FO_SPAN_EXIT:
        snprintf(buf, size, "exit:%s",
                 si->reason_key == 0 ? "normal" : name_of(si->reason_key, name, sizeof name));
        return buf;
    default:
        return "?";
    }
}

static const char *kind_text(uint32_t kind)
{
    static const char *const kinds[] = {"root", "req", "work", "cont", "remote"};
    return kind < 5 ? kinds[kind] : "?";
}

static void causes_text(const fo_span_info *si, char *buf, size_t size)
{
    static const char letters[FO_CAUSE_COUNT] = {'p', 'o', 't', 'x'};
    size_t len = 0;
    buf[0] = '\0';
    for (uint32_t c = 0; c < FO_CAUSE_COUNT; c++) {
        if (si->unattributed_by[c] == 0)
            continue;
        int w = snprintf(buf + len, size - len, "%s%c%" PRIu64, len == 0 ? "(" : " ", letters[c],
                         si->unattributed_by[c]);
        assert_true(w > 0 && (size_t)w < size - len);
        len += (size_t)w;
    }
    if (len > 0) {
        assert_true(len + 1 < size);
        buf[len] = ')';
        buf[len + 1] = '\0';
    }
}

/* " run=R gc=G", each only when not zero */
static void classes_text(const fo_span_info *si, char *buf, size_t size)
{
    int w = snprintf(buf, size, "%s", "");
    if (si->runnable_ns > 0)
        w += snprintf(buf + w, size - (size_t)w, " run=%" PRIu64, si->runnable_ns);
    if (si->gc_ns > 0)
        w += snprintf(buf + w, size - (size_t)w, " gc=%" PRIu64, si->gc_ns);
    assert_true(w >= 0 && (size_t)w < size);
}

static char *render_spans(const fo_graph *g)
{
    char *text = NULL;
    uint32_t n = fo_graph_span_count(g);
    for (uint32_t id = 0; id < n; id++) {
        fo_span_info si;
        assert_int_equal(fo_graph_span(g, id, &si), 1);
        char pid[32], on[32], parent[16], status[48], causes[96], classes[64], line[384];
        if (si.parent_span_id == FO_NONE)
            strcpy(parent, "-");
        else
            snprintf(parent, sizeof parent, "%" PRIu32, si.parent_span_id);
        causes_text(&si, causes, sizeof causes);
        classes_text(&si, classes, sizeof classes);
        snprintf(line, sizeof line,
                 "%" PRIu32 " %s %s %" PRId64 "..%" PRId64 " self=%" PRIu64 "%s wait=%" PRIu64
                 "/%" PRIu64 "/%" PRIu64 "%s on=%s %s %s",
                 id, name_of(si.pid, pid, sizeof pid), parent, si.started_ns, si.ended_ns,
                 si.self_ns, classes, si.wait_ns, si.attributed_wait_ns, si.unattributed_wait_ns, causes,
                 name_of(si.waiting_on_pid, on, sizeof on), status_text(&si, status, sizeof status),
                 kind_text(si.kind));
        text = append(text, line);
    }
    return text != NULL ? text : append(NULL, "(no spans)");
}

static char *render_edges(const fo_graph *g)
{
    char *text = NULL;
    for (uint32_t id = 0; id < fo_graph_edge_count(g); id++) {
        fo_edge_info e;
        assert_int_equal(fo_graph_edge(g, id, &e), 1);
        char line[160];
        snprintf(line, sizeof line, "%" PRIu32 "->%" PRIu32 " %" PRId64 "..%" PRId64 " ns=%" PRIu64 " wakes=%" PRIu32,
                 e.waiter_span_id, e.waker_span_id, e.started_ns, e.ended_ns, e.attributed_ns, e.wakes);
        text = append(text, line);
    }
    return text != NULL ? text : append(NULL, "(no edges)");
}

static void assert_lines(char *actual, const char *const *expected, const char *empty, const char *what)
{
    char *want = NULL;
    for (size_t i = 0; expected != NULL && expected[i] != NULL; i++)
        want = append(want, expected[i]);
    if (want == NULL)
        want = append(NULL, empty);
    ts_assert_text(actual, want, what);
    free(actual);
    free(want);
}

static void assert_spans(const fo_graph *g, const char *const *expected)
{
    assert_lines(render_spans(g), expected, "(no spans)", "spans");
}

static void assert_edges(const fo_graph *g, const char *const *expected)
{
    assert_lines(render_edges(g), expected, "(no edges)", "edges");
}

#define GRAPH_STATS(X)                                                                             \
    X(spans)                                                                                       \
    X(processes)                                                                                   \
    X(calls)                                                                                       \
    X(dropped_spans)                                                                               \
    X(span_limit_hits)                                                                             \
    X(fanout_hits)                                                                                 \
    X(process_limit_hits)                                                                          \
    X(pending_limit_hits)                                                                          \
    X(orphan_requests)                                                                             \
    X(unmatched_requests)                                                                          \
    X(unmatched_replies)                                                                           \
    X(unmatched_reply_sends)                                                                       \
    X(late_replies)                                                                                \
    X(delegated_replies)                                                                           \
    X(unseen_replies)                                                                              \
    X(duplicate_events)                                                                            \
    X(events_after_close)                                                                          \
    X(clock_skews)                                                                                 \
    X(alloc_failures)                                                                              \
    X(wakes)                                                                                       \
    X(attributed_wakes)                                                                            \
    X(joins)                                                                                       \
    X(leaves)                                                                                      \
    X(continuations)                                                                               \
    X(dropped_continuations)                                                                       \
    X(edges)                                                                                       \
    X(edge_limit_hits)                                                                             \
    X(note_overflows)                                                                              \
    X(remote_calls)                                                                                \
    X(remote_requests)                                                                             \
    X(remote_sends)                                                                                \
    X(remote_joins)                                                                                \
    X(runnable_wakes)                                                                              \
    X(collections)

#define COUNT_STAT(f) +1
/* A counter added to fo_graph_stats must be added here too. */
_Static_assert(sizeof(fo_graph_stats) == (0 GRAPH_STATS(COUNT_STAT)) * sizeof(uint64_t),
               "GRAPH_STATS lists every fo_graph_stats counter");

static char *render_stats(const fo_graph_stats *st)
{
    char buf[1024] = "";
    size_t len = 0;
#define RENDER_STAT(f)                                                                             \
    if (st->f != 0) {                                                                              \
        int w_ = snprintf(buf + len, sizeof buf - len, "%s%s=%" PRIu64, len > 0 ? " " : "", #f,   \
                          st->f);                                                                  \
        assert_true(w_ > 0 && (size_t)w_ < sizeof buf - len);                                      \
        len += (size_t)w_;                                                                         \
    }
    GRAPH_STATS(RENDER_STAT)
#undef RENDER_STAT
    char *out = malloc(len + 1);
    assert_non_null(out);
    memcpy(out, buf, len + 1);
    return out;
}

/* spec lists the non-zero counters, in GRAPH_STATS order. */
static void assert_stats(const fo_graph *g, const char *spec)
{
    char *actual = render_stats(fo_graph_get_stats(g));
    ts_assert_text(actual, spec, "stats");
    free(actual);
}

/* ------------------------------------------------------------------------
 * Invariants (GRAPH.md), checked after every case and throughout the
 * random streams. */

static void check_span(const fo_graph *g, const fo_graph_limits *l, uint32_t id, int closed,
                       uint32_t *kids_seen)
{
    fo_span_info si;
    assert_int_equal(fo_graph_span(g, id, &si), 1);
    assert_int_equal(si.span_id, id);
    if (id == 0)
        assert_int_equal(si.parent_span_id, FO_NONE);
    else if (si.parent_span_id != FO_NONE && si.parent_span_id >= id)
        fail_msg("span %" PRIu32 " has parent %" PRIu32 " (must be smaller)", id,
                 si.parent_span_id);
    assert_true(si.attributed_wait_ns <= si.wait_ns);
    assert_true(si.attributed_wait_ns + si.unattributed_wait_ns == si.wait_ns);
    uint64_t causes = 0;
    for (uint32_t c = 0; c < FO_CAUSE_COUNT; c++)
        causes += si.unattributed_by[c];
    assert_true(causes == si.unattributed_wait_ns);
    if (si.wakes == 0) {
        assert_true(si.wait_ns == 0);
        assert_true(si.waiting_on_pid == 0);
    }
    assert_true(si.kind <= FO_SPAN_REMOTE);
    /* no parent: the root, or a request, message or spawn of a process on
     * another node */
    if (si.kind == FO_SPAN_ROOT)
        assert_true(si.parent_span_id == FO_NONE);
    else if (si.parent_span_id == FO_NONE)
        assert_true((si.kind == FO_SPAN_REQUEST || si.kind == FO_SPAN_WORK) &&
                    (si.opener_pid & FO_GRAPH_REMOTE_BIT) != 0);
    /* a REMOTE span is a process of another node */
    if (si.kind == FO_SPAN_REMOTE)
        assert_true((si.pid & FO_GRAPH_REMOTE_BIT) != 0);
    /* the span arithmetic: running, collecting, runnable and waiting make
     * up the span */
    assert_true(si.ended_ns >= si.started_ns);
    uint64_t duration = (uint64_t)si.ended_ns - (uint64_t)si.started_ns;
    assert_true(si.self_ns + si.gc_ns + si.runnable_ns + si.wait_ns == duration);
    if (si.status == FO_SPAN_OPEN) {
        assert_false(closed);
        assert_true(si.ended_ns == si.started_ns && si.self_ns == 0);
    }
    assert_true(si.status <= FO_SPAN_OPEN_AT_CLOSE);
    assert_true(si.child_count <= l->max_fanout);
    uint32_t seen = 0;
    uint32_t prev = id;
    uint32_t kids[8];
    uint32_t listed = fo_graph_children(g, id, kids, 8);
    assert_int_equal(listed, si.child_count);
    for (uint32_t c = si.first_child; c != FO_NONE; seen++) {
        fo_span_info ci;
        assert_true(seen < si.child_count);
        assert_int_equal(fo_graph_span(g, c, &ci), 1);
        assert_int_equal(ci.parent_span_id, id);
        assert_true(c > prev);
        if (seen < 8)
            assert_int_equal(kids[seen], c);
        kids_seen[c]++;
        prev = c;
        c = ci.next_sibling;
    }
    assert_int_equal(seen, si.child_count);
}

static void check_graph(const fo_graph *g, const fo_graph_limits *l, const uint64_t *pids,
                        size_t npids)
{
    uint32_t n = fo_graph_span_count(g);
    const fo_graph_stats *st = fo_graph_get_stats(g);
    int closed = fo_graph_closed(g);
    assert_true(n <= l->max_spans);
    /* dropped continuations are gone once closed */
    assert_true(st->spans == n + (closed ? st->dropped_continuations : 0));
    assert_true(st->processes <= l->max_processes);
    uint32_t *kids_seen = calloc(n + 1, sizeof *kids_seen);
    assert_non_null(kids_seen);
    for (uint32_t id = 0; id < n; id++)
        check_span(g, l, id, closed, kids_seen);
    /* in exactly its parent's list; before close, a dropped continuation
     * still has its id but left the list */
    uint64_t unlisted = 0;
    for (uint32_t id = 1; id < n; id++) {
        fo_span_info si;
        assert_int_equal(fo_graph_span(g, id, &si), 1);
        assert_true(kids_seen[id] <= 1);
        /* requests from other nodes have no parent here */
        unlisted += kids_seen[id] == 0 && si.parent_span_id != FO_NONE;
    }
    assert_true(unlisted <= (closed ? 0 : st->dropped_continuations));
    if (n > 0)
        assert_int_equal(kids_seen[0], 0);
    free(kids_seen);
    fo_span_info none;
    assert_int_equal(fo_graph_span(g, n, &none), 0);
    assert_int_equal(fo_graph_children(g, n, NULL, 0), 0);
    /* edges join two spans that exist; a span's edges explain at most its
     * attributed wait (all of it when no edge was refused) */
    uint32_t ne = fo_graph_edge_count(g);
    assert_true(ne <= l->max_spans);
    uint64_t *explained = calloc(n + 1, sizeof *explained);
    assert_non_null(explained);
    for (uint32_t e = 0; e < ne; e++) {
        fo_edge_info ei;
        assert_int_equal(fo_graph_edge(g, e, &ei), 1);
        assert_true(ei.waiter_span_id < n && ei.waker_span_id < n);
        assert_true(ei.waiter_span_id != ei.waker_span_id);
        assert_true(ei.ended_ns >= ei.started_ns && ei.wakes >= 1 && ei.attributed_ns > 0);
        explained[ei.waiter_span_id] += ei.attributed_ns;
    }
    fo_edge_info no_edge;
    assert_int_equal(fo_graph_edge(g, ne, &no_edge), 0);
    for (uint32_t id = 0; id < n && closed; id++) {
        fo_span_info si;
        assert_int_equal(fo_graph_span(g, id, &si), 1);
        if (st->edge_limit_hits == 0 && st->alloc_failures == 0 && st->clock_skews == 0)
            assert_true(explained[id] == si.attributed_wait_ns);
    }
    free(explained);
    for (size_t i = 0; i < npids; i++) {
        uint32_t cur = fo_graph_current_span(g, pids[i]);
        assert_int_equal(fo_graph_active(g, pids[i]), !closed && cur != FO_NONE);
        if (cur != FO_NONE) {
            fo_span_info si;
            assert_int_equal(fo_graph_span(g, cur, &si), 1);
            assert_true(si.pid == pids[i] && si.status == FO_SPAN_OPEN);
        }
        uint32_t waiting = fo_graph_waiting_call(g, pids[i], NULL);
        assert_true(waiting <= l->max_pending_calls);
        if (closed)
            assert_int_equal(waiting, 0);
    }
}

/* ------------------------------------------------------------------------
 * Table-driven cases */

typedef struct {
    const char *name;
    fo_graph_limits limits; /* a zero field: that default */
    const char *const *script;
    const char *const *expect; /* span lines in id order */
    const char *stats;         /* the non-zero counters, in GRAPH_STATS order */
    const char *const *edges;  /* edge lines in order; NULL: none */
    int notes;                 /* the script asserts notes ("note" lines) */
    int calls_only;            /* fo_graph_follow_messages(g, 0) */
} graph_case;

static fo_graph_limits limits_of(fo_graph_limits l)
{
    fo_graph_limits d = fo_graph_limits_default();
    if (l.max_spans != 0)
        d.max_spans = l.max_spans;
    if (l.max_pending_calls != 0)
        d.max_pending_calls = l.max_pending_calls;
    if (l.max_processes != 0)
        d.max_processes = l.max_processes;
    if (l.max_fanout != 0)
        d.max_fanout = l.max_fanout;
    return d;
}

// clang-format off
static const graph_case graph_cases[] = {
    {"single_call_attributed_exactly", DEFAULTS,
     LINES("root A 0", "send A B t1 10", "recv B A t1 10", "reply B t1 40", "resume A t1 40",
           "close 100"),
     LINES("0 A - 0..100 self=100 wait=0/0/0 on=- ok root",
           "1 B 0 10..40 self=30 wait=0/0/0 on=- ok req"),
     "spans=2 processes=2 calls=1", NULL, 0, 0},

    {"queueing_delay_and_reply_transit_are_unattributed", DEFAULTS,
     LINES("root A 0",
           "send A B t1 10",
           "recv B A t1 25",   /* 15 queued in B's mailbox */
           "reply B t1 40",
           "resume A t1 45",   /* 5 in transit */
           "close 100"),
     LINES("0 A - 0..100 self=100 wait=0/0/0 on=- ok root",
           "1 B 0 25..40 self=15 wait=0/0/0 on=- ok req"),
     "spans=2 processes=2 calls=1", NULL, 0, 0},

    {"nested_a_b_c_attributes_at_each_level", DEFAULTS,
     LINES("root A 0",
           "send A B t1 10", "recv B A t1 12",
           "send B C t2 20", "recv C B t2 21",
           "active C 1", "waiting B 1 C", "waiting A 1 B", "current C 2",
           "reply C t2 31",
           "active C 0", "active B 1",
           "resume B t2 33",
           "reply B t1 50", "resume A t1 52",
           "close 60"),
     LINES("0 A - 0..60 self=60 wait=0/0/0 on=- ok root",   /* B's 38 includes its wait on C */
           "1 B 0 12..50 self=38 wait=0/0/0 on=- ok req",
           "2 C 1 21..31 self=10 wait=0/0/0 on=- ok req"),
     "spans=3 processes=3 calls=2", NULL, 0, 0},

    {"two_sequential_calls_to_the_same_server", DEFAULTS,
     LINES("root A 0",
           "send A B t1 10", "recv B A t1 11", "reply B t1 20", "resume A t1 21",
           "send A B t2 30", "recv B A t2 30", "reply B t2 50", "resume A t2 52",
           "close 60"),
     LINES("0 A - 0..60 self=60 wait=0/0/0 on=- ok root",
           "1 B 0 11..20 self=9 wait=0/0/0 on=- ok req",
           "2 B 0 30..50 self=20 wait=0/0/0 on=- ok req"),
     "spans=3 processes=2 calls=2", NULL, 0, 0},

    {"waiting_on_is_the_callee_of_the_longest_wait", DEFAULTS,
     LINES("root A 0",
           "send A B t1 10", "recv B A t1 10", "reply B t1 20", "resume A t1 20",
           "send A C t2 30", "recv C A t2 30", "reply C t2 60", "resume A t2 60",
           "send A B t3 70", "recv B A t3 70", "reply B t3 75", "resume A t3 75",
           "close 80"),
     LINES("0 A - 0..80 self=80 wait=0/0/0 on=- ok root",
           "1 B 0 10..20 self=10 wait=0/0/0 on=- ok req",
           "2 C 0 30..60 self=30 wait=0/0/0 on=- ok req",
           "3 B 0 70..75 self=5 wait=0/0/0 on=- ok req"),
     "spans=4 processes=3 calls=3", NULL, 0, 0},

    /* A has two requests out at once (send_request), so B and C call S
     * concurrently; S serves them one after the other. A's waits overlap:
     * they sum past its duration and its self time is 0. */
    {"two_callers_call_the_same_server_concurrently", DEFAULTS,
     LINES("root A 0",
           "send A B t1 10", "send A C t2 11",
           "waiting A 2 C",
           "recv B A t1 12", "recv C A t2 13",
           "send B S t3 20", "send C S t4 21",
           "recv S B t3 22", "reply S t3 30", "resume B t3 31",
           "recv S C t4 32",                   /* queued behind B's request */
           "reply S t4 40", "resume C t4 41",
           "reply B t1 45", "reply C t2 46",
           "resume A t1 47", "resume A t2 48",
           "close 50"),
     LINES("0 A - 0..50 self=50 wait=0/0/0 on=- ok root",
           "1 B 0 12..45 self=33 wait=0/0/0 on=- ok req",
           "2 C 0 13..46 self=33 wait=0/0/0 on=- ok req",
           "3 S 1 22..30 self=8 wait=0/0/0 on=- ok req",
           "4 S 2 32..40 self=8 wait=0/0/0 on=- ok req"),
     "spans=5 processes=4 calls=4", NULL, 0, 0},

    /* S defers the first reply (:noreply), takes the second request, then
     * replies to the first: a span below the top of S's stack ends. */
    {"deferred_reply_ends_a_span_below_the_top", DEFAULTS,
     LINES("root A 0",
           "send A S t1 10", "send A S t2 11",
           "recv S A t1 12", "current S 1",
           "recv S A t2 14", "current S 2",
           "reply S t1 20", "current S 2", "active S 1",
           "resume A t1 21",
           "reply S t2 30", "current S -", "active S 0",
           "resume A t2 31",
           "close 40"),
     LINES("0 A - 0..40 self=40 wait=0/0/0 on=- ok root",
           "1 S 0 12..20 self=8 wait=0/0/0 on=- ok req",
           "2 S 0 14..30 self=16 wait=0/0/0 on=- ok req"),
     "spans=3 processes=2 calls=2", NULL, 0, 0},

    {"callee_crash_explains_the_wait_up_to_its_exit", DEFAULTS,
     LINES("root A 0",
           "send A B t1 10", "recv B A t1 12",
           "exit B 30 crash",
           "active B 0", "waiting A 1 B",
           "close 50"),
     LINES("0 A - 0..50 self=50 wait=0/0/0 on=- ok root",
           "1 B 0 12..30 self=18 wait=0/0/0 on=- exit:crash req"),
     "spans=2 processes=2 calls=1", NULL, 0, 0},

    {"callee_crash_then_caller_resumes", DEFAULTS,
     LINES("root A 0",
           "send A B t1 10", "recv B A t1 12",
           "exit B 30 normal",
           "resume A t1 35",
           "close 50"),
     LINES("0 A - 0..50 self=50 wait=0/0/0 on=- ok root",
           "1 B 0 12..30 self=18 wait=0/0/0 on=- exit:normal req"),
     "spans=2 processes=2 calls=1", NULL, 0, 0},

    {"nested_crash_ends_only_the_crashed_span", DEFAULTS,
     LINES("root A 0",
           "send A B t1 10", "recv B A t1 11",
           "send B C t2 12", "recv C B t2 13",
           "exit C 20 boom",
           "resume B t2 22",
           "reply B t1 30", "resume A t1 31",
           "close 40"),
     LINES("0 A - 0..40 self=40 wait=0/0/0 on=- ok root",
           "1 B 0 11..30 self=19 wait=0/0/0 on=- ok req",
           "2 C 1 13..20 self=7 wait=0/0/0 on=- exit:boom req"),
     "spans=3 processes=3 calls=2", NULL, 0, 0},

    {"reply_never_arrives_is_unattributed_at_close", DEFAULTS,
     LINES("root A 0", "send A B t1 10", "recv B A t1 15", "close 100"),
     LINES("0 A - 0..100 self=100 wait=0/0/0 on=- ok root",
           "1 B 0 15..100 self=85 wait=0/0/0 on=- at_close req"),
     "spans=2 processes=2 calls=1", NULL, 0, 0},

    {"request_never_received_is_unattributed_at_close", DEFAULTS,
     LINES("root A 0", "send A B t1 10", "active B 0", "close 100"),
     LINES("0 A - 0..100 self=100 wait=0/0/0 on=- ok root"),
     "spans=1 processes=1 calls=1", NULL, 0, 0},

    {"late_reply_after_close_is_counted", DEFAULTS,
     LINES("root A 0", "send A B t1 10", "recv B A t1 15",
           "reply B t1 90",     /* sent, not received before close */
           "close 100",
           "active A 0", "waiting A 0 -",
           "resume A t1 105",   /* late */
           "reply B t2 110", "send A B t3 111", "exit B 120 crash", "root A 121",
           "close 130"),
     LINES("0 A - 0..100 self=100 wait=0/0/0 on=- ok root",
           "1 B 0 15..90 self=75 wait=0/0/0 on=- ok req"),
     "spans=2 processes=2 calls=1 late_replies=1 duplicate_events=1 events_after_close=4", NULL, 0, 0},

    {"unknown_tags_are_counted_and_ignored", DEFAULTS,
     LINES("root A 0",
           "resume A zz 5", "reply B zz 6", "recv B A zz 7",
           "close 10"),
     LINES("0 A - 0..10 self=10 wait=0/0/0 on=- ok root"),
     "spans=1 processes=1 unmatched_requests=1 unmatched_replies=1 unmatched_reply_sends=1", NULL, 0, 0},

    /* A request from a process that never held a span is an orphan. B
     * keeps its token after replying: its own later call goes on with the
     * trace's work (a continuation, from where its reply left it), and C
     * serves it. Following calls only, B's call is an orphan (next case). */
    {"request_from_a_process_without_open_span_is_ignored", DEFAULTS,
     LINES("send X B t0 1",    /* before any root */
           "root A 0",
           "send A B t1 10", "recv B A t1 11", "reply B t1 20", "resume A t1 21",
           "active B 0",
           "send B C t2 25", "active B 1",
           "recv C B t2 26", "reply C t2 30", "resume B t2 31",
           "active C 0", "waiting B 0 -",
           "close 40"),
     LINES("0 A - 0..40 self=40 wait=0/0/0 on=- ok root",
           "1 B 0 11..20 self=9 wait=0/0/0 on=- ok req",
           "2 B 1 20..40 self=20 wait=0/0/0 on=- at_close cont",
           "3 C 2 26..30 self=4 wait=0/0/0 on=- ok req"),
     "spans=4 processes=3 calls=2 orphan_requests=1 continuations=1", NULL, 0, 0},

    {"following_calls_only_a_dormant_servers_call_is_an_orphan", DEFAULTS,
     LINES("root A 0",
           "send A B t1 10", "recv B A t1 11", "reply B t1 20", "resume A t1 21",
           "send B C t2 25",
           "recv C B t2 26", "reply C t2 30", "resume B t2 31",
           "active B 0", "active C 0", "waiting B 0 -",
           "close 40"),
     LINES("0 A - 0..40 self=40 wait=0/0/0 on=- ok root",
           "1 B 0 11..20 self=9 wait=0/0/0 on=- ok req"),
     "spans=2 processes=2 calls=1 orphan_requests=1 unmatched_requests=1 unmatched_replies=1 "
     "unmatched_reply_sends=1", NULL, 0, 1},

    {"reply_delegated_to_another_process_ends_the_span", DEFAULTS,
     LINES("root A 0", "send A B t1 10", "recv B A t1 12",
           "reply W t1 30",
           "active B 0", "active W 0",
           "resume A t1 32", "close 40"),
     LINES("0 A - 0..40 self=40 wait=0/0/0 on=- ok root",
           "1 B 0 12..30 self=18 wait=0/0/0 on=- ok req"),
     "spans=2 processes=2 calls=1 delegated_replies=1", NULL, 0, 0},

    {"reply_send_unseen_ends_the_callee_at_resume", DEFAULTS,
     LINES("root A 0", "send A B t1 10", "recv B A t1 12", "resume A t1 30", "active B 0",
           "close 40"),
     LINES("0 A - 0..40 self=40 wait=0/0/0 on=- ok root",
           "1 B 0 12..30 self=18 wait=0/0/0 on=- ok req"),
     "spans=2 processes=2 calls=1 unseen_replies=1", NULL, 0, 0},

    /* The root dies while blocked: its wait ends with it; B's work goes on
     * and its reply still ends its span. */
    {"root_exit_settles_its_wait_and_callee_finishes", DEFAULTS,
     LINES("root A 0", "send A B t1 10", "recv B A t1 12",
           "exit A 20 crash",
           "active A 0", "waiting A 0 -", "active B 1",
           "reply B t1 30", "active B 0",
           "close 40"),
     LINES("0 A - 0..20 self=20 wait=0/0/0 on=- exit:crash root",
           "1 B 0 12..30 self=18 wait=0/0/0 on=- ok req"),
     "spans=2 processes=2 calls=1", NULL, 0, 0},

    /* A worker replies for B while B is blocked on C: B's span ends there
     * and so does its wait on C; C's later reply still ends C's span. */
    {"caller_span_ending_settles_its_pending_call", DEFAULTS,
     LINES("root A 0",
           "send A B t1 10", "recv B A t1 11",
           "send B C t2 12", "recv C B t2 13",
           "reply W t1 20",
           "waiting B 0 -",
           "resume A t1 21",
           "reply C t2 25",
           "resume B t2 26",   /* the call is forgotten: unmatched */
           "close 30"),
     LINES("0 A - 0..30 self=30 wait=0/0/0 on=- ok root",
           "1 B 0 11..20 self=9 wait=0/0/0 on=- ok req",
           "2 C 1 13..25 self=12 wait=0/0/0 on=- ok req"),
     "spans=3 processes=3 calls=2 unmatched_replies=1 delegated_replies=1", NULL, 0, 0},

    {"reply_for_a_settled_call_before_its_send_is_late", DEFAULTS,
     LINES("root A 0",
           "send A B t1 10", "recv B A t1 11",
           "send B C t2 12", "recv C B t2 13",
           "reply W t1 20", "resume A t1 21",
           "resume B t2 24",   /* late: B's span ended; C's reply unseen */
           "active C 0",
           "reply C t2 25",    /* the call is forgotten by now */
           "close 30"),
     LINES("0 A - 0..30 self=30 wait=0/0/0 on=- ok root",
           "1 B 0 11..20 self=9 wait=0/0/0 on=- ok req",
           "2 C 1 13..24 self=11 wait=0/0/0 on=- ok req"),
     "spans=3 processes=3 calls=2 unmatched_reply_sends=1 late_replies=1 delegated_replies=1 "
     "unseen_replies=1", NULL, 0, 0},

    /* The receive was never seen: nobody to compare the sender with, so no
     * delegation; a receive after the reply is a duplicate. */
    {"reply_before_any_receive_opens_no_span", DEFAULTS,
     LINES("root A 0", "send A B t1 10", "reply W t1 15", "recv B A t1 16", "active B 0",
           "resume A t1 20", "close 30"),
     LINES("0 A - 0..30 self=30 wait=0/0/0 on=- ok root"),
     "spans=1 processes=1 calls=1 duplicate_events=1", NULL, 0, 0},

    {"active_only_inside_spans", DEFAULTS,
     LINES("active A 0",
           "root A 0", "active A 1", "active B 0",
           "send A B t1 10", "active B 0", "waiting A 1 B",
           "recv B A t1 12", "active B 1", "current B 1", "waiting B 0 -",
           "reply B t1 20", "active B 0", "waiting A 1 B",
           "resume A t1 22", "waiting A 0 -", "active A 1",
           "close 30", "active A 0", "current A -"),
     LINES("0 A - 0..30 self=30 wait=0/0/0 on=- ok root",
           "1 B 0 12..20 self=8 wait=0/0/0 on=- ok req"),
     "spans=2 processes=2 calls=1", NULL, 0, 0},

    {"duplicates_are_counted_and_ignored", DEFAULTS,
     LINES("root A 0", "root B 1",
           "send A B t1 10", "send A C t1 11",
           "recv B A t1 12", "recv B A t1 13",
           "reply B t1 20", "reply B t1 21",
           "resume A t1 22", "resume A t1 23",
           "close 30", "close 31"),
     LINES("0 A - 0..30 self=30 wait=0/0/0 on=- ok root",
           "1 B 0 12..20 self=8 wait=0/0/0 on=- ok req"),
     "spans=2 processes=2 calls=1 unmatched_replies=1 duplicate_events=5", NULL, 0, 0},

    {"clock_skew_clamps_to_zero_length", DEFAULTS,
     LINES("root A 100",
           "send A B t1 90",    /* before A's span: clamped to 100 */
           "recv B A t1 120",
           "reply B t1 110",    /* before B's start: B lasts 0 */
           "resume A t1 95",    /* before the send */
           "close 50"),         /* before A's start: A lasts 0 */
     LINES("0 A - 100..100 self=0 wait=0/0/0 on=- ok root",
           "1 B 0 120..120 self=0 wait=0/0/0 on=- ok req"),
     "spans=2 processes=2 calls=1 clock_skews=3", NULL, 0, 0},

    /* --- processes on other nodes ------------------------------------- */

    /* The caller's side: a REMOTE span of the callee from the send to the
     * reply, no note for it; the caller's wait (the reply's sender is not
     * known here: "a process") is attributed to it. */
    {"call_to_another_node_is_a_remote_span_that_explains_the_wait", DEFAULTS,
     LINES("root A 0", "rsend A @B t1 7 10", "notes x", "out A 11", "in A 50", "rcv A 50 ?",
           "resume A t1 50", "following A 1", "close 60"),
     LINES("0 A - 0..60 self=21 wait=39/39/0 on=@B ok root",
           "1 @B 0 10..50 self=40 wait=0/0/0 on=- ok remote"),
     "spans=2 processes=2 calls=1 wakes=1 attributed_wakes=1 edges=1 remote_calls=1",
     LINES("0->1 11..50 ns=39 wakes=1"), 0, 0},

    /* The callee's side: a request span without a parent, opened by the
     * remote caller, ended by its reply; the callee's own call to a third
     * node nests under it. */
    {"request_from_another_node_has_no_parent_here", DEFAULTS,
     LINES("rrecv B @A t1 7 10", "active B 1",
           "rsend B @C t2 9 15", "out B 16", "in B 40", "rcv B 40 ?", "resume B t2 40",
           "reply B t1 45", "active B 0", "close 60"),
     LINES("0 B - 10..45 self=11 wait=24/24/0 on=@C ok req",
           "1 @C 0 15..40 self=25 wait=0/0/0 on=- ok remote"),
     "spans=2 processes=2 calls=1 wakes=1 attributed_wakes=1 edges=1 remote_calls=1 remote_requests=1",
     LINES("0->1 16..40 ns=24 wakes=1"), 0, 0},

    /* A plain message to another node: a REMOTE span of the receiver
     * until it answers the sender, which explains the sender's wait. */
    {"message_to_another_node_is_a_remote_span_until_its_answer", DEFAULTS,
     LINES("root A 0", "rmsgsent A @B 7 10", "notes x", "out A 11", "in A 50", "rcv A 50 ?",
           "rmsg A @B 9 50", "following A 1", "close 60"),
     LINES("0 A - 0..60 self=21 wait=39/39/0 on=@B ok root",
           "1 @B 0 10..50 self=40 wait=0/0/0 on=- ok remote"),
     "spans=2 processes=2 wakes=1 attributed_wakes=1 edges=1 remote_sends=1",
     LINES("0->1 11..50 ns=39 wakes=1"), 0, 0},

    /* The receiver's side: a work span without a parent, opened by the
     * remote sender (a second message is part of it), ended by its answer;
     * its own message to a third node is a REMOTE span under it. */
    {"message_from_another_node_is_work_without_a_parent_here", DEFAULTS,
     LINES("rmsg B @A 7 10", "active B 1", "rmsg B @A 8 12", "current B 0",
           "rmsgsent B @C 5 20", "out B 21", "in B 30", "rcv B 30 ?", "rmsg B @C 6 30",
           "rmsgsent B @A 9 40", "active B 0", "close 60"),
     LINES("0 B - 10..40 self=21 wait=9/9/0 on=@C ok work",
           "1 @C 0 20..30 self=10 wait=0/0/0 on=- ok remote"),
     "spans=2 processes=2 wakes=1 attributed_wakes=1 joins=1 edges=1 remote_sends=1 remote_joins=1",
     LINES("0->1 21..30 ns=9 wakes=1"), 0, 0},

    /* A child spawned from another node works for the trace until it
     * exits; a message from a callee does not end the call's REMOTE span
     * (its reply does). */
    {"spawn_from_another_node_and_messages_during_a_call", DEFAULTS,
     LINES("rspawn @A T 5 10", "active T 1", "exit T 30 normal",
           "root A 40", "rsend A @B t1 7 50", "rmsg A @B 9 60", "active @B 1",
           "resume A t1 80", "close 90"),
     LINES("0 T - 10..30 self=20 wait=0/0/0 on=- exit:normal work",
           "1 A - 40..90 self=50 wait=0/0/0 on=- ok root",
           "2 @B 1 50..80 self=30 wait=0/0/0 on=- ok remote"),
     "spans=3 processes=3 calls=1 joins=1 remote_calls=1 remote_joins=1", NULL, 0, 0},

    /* A message to a registered name there ({Name, Node}: @N): the answer
     * comes from a pid, but from N's node, so the name is the waker (a
     * name nobody messaged, @M, is not). */
    {"message_to_a_name_on_another_node_is_answered_by_its_node", DEFAULTS,
     LINES("root A 0", "rmsgsent A @N 7 10", "out A 11", "in A 50", "rnamed A @M 50", "rnamed A @N 50",
           "rcv A 50 @N", "rmsg A @B 9 51", "close 60"),
     LINES("0 A - 0..60 self=21 wait=39/39/0 on=@N ok root",
           "1 @N 0 10..50 self=40 wait=0/0/0 on=- ok remote"),
     "spans=2 processes=2 wakes=1 attributed_wakes=1 edges=1 remote_sends=1",
     LINES("0->1 11..50 ns=39 wakes=1"), 0, 0},

    /* :erpc.call: the spawn request goes to a node; the child is known
     * only by the DOWN that brings its result, which opens the REMOTE span
     * where the request was sent and ends it. A DOWN of another request,
     * or of a process the trace did not spawn, explains nothing. */
    {"spawn_on_another_node_known_by_its_down", DEFAULTS,
     LINES("root A 0", "rspawnsent A 5 10", "out A 12", "in A 50", "rdown A @X 6 50", "rdown A @C 5 50",
           "rcv A 50 @C", "rdown A @C 5 55", "close 60"),
     LINES("0 A - 0..60 self=22 wait=38/38/0 on=@C ok root",
           "1 @C 0 10..50 self=40 wait=0/0/0 on=- ok remote"),
     "spans=2 processes=2 wakes=1 attributed_wakes=1 edges=1 remote_sends=1",
     LINES("0->1 12..50 ns=38 wakes=1"), 0, 0},

    /* Node.spawn: the spawn_reply names the child (the wait for it is the
     * wait for the other node); the child's message ends the REMOTE span. */
    {"spawn_on_another_node_known_by_its_reply", DEFAULTS,
     LINES("root A 0", "rspawnsent A 5 10", "out A 11", "in A 20", "rcv A 20 ?", "rspawnreply A @C 5 20",
           "ran A 21", "out A 22", "in A 60", "rcv A 60 ?", "rmsg A @C 9 60", "close 70"),
     LINES("0 A - 0..70 self=23 wait=47/47/0 on=@C ok root",
           "1 @C 0 10..60 self=50 wait=0/0/0 on=- ok remote"),
     "spans=2 processes=2 wakes=2 attributed_wakes=2 edges=1 remote_sends=1",
     LINES("0->1 11..60 ns=47 wakes=2"), 0, 0},

    /* ... with no receive event for the reply: the reply still wakes it */
    {"spawn_reply_from_another_node_wakes_without_a_receive_event", DEFAULTS,
     LINES("root A 0", "rspawnsent A 5 10", "out A 11", "in A 20", "rspawnreply A @C 5 20",
           "ran A 21", "close 30"),
     LINES("0 A - 0..30 self=21 wait=9/9/0 on=@C ok root",
           "1 @C 0 10..30 self=20 wait=0/0/0 on=- at_close remote"),
     "spans=2 processes=2 wakes=1 attributed_wakes=1 edges=1 remote_sends=1",
     LINES("0->1 11..20 ns=9 wakes=1"), 0, 0},

    /* --- wake-ups: who ended each off-CPU interval -------------------- */

    {"sleep_is_unattributed_timer_wait", DEFAULTS,
     LINES("root A 0", "out A 10", "in A 40", "rcv A 40 timer", "ran A 41", "close 50"),
     LINES("0 A - 0..50 self=20 wait=30/0/30(t30) on=- ok root"),
     "spans=1 processes=1 wakes=1", NULL, 0, 0},

    /* Preempted (no message before it ran on): runnable, not waiting. A
     * signal (a stack sample) wakes it without a message and it goes out
     * again: the same wait goes on. */
    {"runnable_is_apart_and_signals_do_not_end_a_wait", DEFAULTS,
     LINES("root A 0",
           "out A 10", "in A 12", "ran A 12",
           "out A 20", "in A 25", "out A 26", "in A 30", "rcv A 30 port",
           "close 40"),
     LINES("0 A - 0..40 self=29 run=2 wait=9/0/9(o9) on=- ok root"),
     "spans=1 processes=1 wakes=2 runnable_wakes=1", NULL, 0, 0},

    {"task_wait_is_attributed_to_the_spawned_work", DEFAULTS,
     LINES("root A 0", "spawn A T 5", "active T 1",
           "out A 6",
           "msgsent T A 36",   /* the result: T answered its spawner */
           "active T 0", "following T 1",
           "in A 38", "rcv A 38 T",
           "exit T 39 normal", "following T 0",
           "close 50"),
     LINES("0 A - 0..50 self=18 wait=32/30/2(p2) on=T ok root",
           "1 T 0 5..36 self=31 wait=0/0/0 on=- ok work"),
     "spans=2 processes=2 wakes=1 attributed_wakes=1 joins=1 edges=1",
     LINES("0->1 6..36 ns=30 wakes=1"), 0, 0},

    /* The answer's send was not seen (an untokened one): the waiter's
     * receive event ends the work span; a spawner waiting on a child that
     * exited meanwhile is still explained by it. */
    {"answer_seen_only_at_the_receiver", DEFAULTS,
     LINES("root A 0", "spawn A T 5", "out A 6", "exit T 30 normal", "in A 32", "rcv A 32 T",
           "close 40"),
     LINES("0 A - 0..40 self=14 wait=26/24/2(p2) on=T ok root",
           "1 T 0 5..30 self=25 wait=0/0/0 on=- exit:normal work"),
     "spans=2 processes=2 wakes=1 attributed_wakes=1 joins=1 edges=1",
     LINES("0->1 6..30 ns=24 wakes=1"), 0, 0},

    /* mnesia_tm-like: a plain tokened request and a plain answer. */
    {"plain_message_request_and_answer_make_a_work_span", DEFAULTS,
     LINES("root A 0",
           "msgsent A S 10", "out A 11",
           "msg S A 12", "active S 1", "current S 1",
           "msgsent S A 20", "active S 0",
           "in A 22", "rcv A 22 S",
           "msgsent A S 24", "out A 25", "msg S A 26", "current S 2",
           "msgsent S A 30", "in A 31", "rcv A 31 S",
           "close 40"),
     LINES("0 A - 0..40 self=23 wait=17/12/5(p5) on=S ok root",
           "1 S 0 12..20 self=8 wait=0/0/0 on=- ok work",
           "2 S 0 26..30 self=4 wait=0/0/0 on=- ok work"),
     "spans=3 processes=2 wakes=2 attributed_wakes=2 joins=2 edges=2",
     LINES("0->1 12..20 ns=8 wakes=1", "0->2 26..30 ns=4 wakes=1"), 0, 0},

    /* capture_next: the captured root tells the capture's own process W of
     * its call (with the trace's token) and spawns a task T: T works for
     * the trace, W never does. */
    {"an_outsider_is_never_brought_in", DEFAULTS,
     LINES("outsider W", "root A 0",
           "msgsent A W 1", "msg W A 2", "following W 0",
           "spawn A T 3", "msgsent A T 4", "msg T A 5", "following T 1", "out A 6",
           "msgsent T A 20", "in A 21", "rcv A 21 T",
           "msgsent A W 30", "msg W A 31", "following W 0",
           "close 40"),
     LINES("0 A - 0..40 self=25 wait=15/14/1(p1) on=T ok root",
           "1 T 0 3..20 self=17 wait=0/0/0 on=- ok work"),
     "spans=2 processes=2 wakes=1 attributed_wakes=1 joins=1 edges=1",
     LINES("0->1 6..20 ns=14 wakes=1"), 0, 0},

    /* httpc-like: the handler replies to the manager's call, then goes on
     * with the HTTP exchange (a port wakes it) and sends the result. */
    {"continuation_after_the_reply_explains_the_wait_on_its_result", DEFAULTS,
     LINES("root A 0",
           "send A B t1 10", "out A 11", "recv B A t1 12", "reply B t1 15",
           "out B 16", "in A 16", "rcv A 16 B", "resume A t1 16",
           "out A 18",
           "in B 50", "rcv B 50 port", "active B 1", "current B 2",
           "msgsent B A 55", "out B 56",
           "in A 57", "rcv A 57 B",
           "close 60"),
     LINES("0 A - 0..60 self=16 wait=44/42/2(p2) on=B ok root",
           "1 B 0 12..15 self=3 wait=0/0/0 on=- ok req",
           "2 B 1 16..56 self=6 wait=34/0/34(o34) on=- ok cont"),
     "spans=3 processes=2 calls=1 wakes=3 attributed_wakes=2 continuations=1 edges=2",
     LINES("0->1 12..15 ns=3 wakes=1", "0->2 18..57 ns=39 wakes=1"), 0, 0},

    /* httpc-like, a fresh connection: S (the manager) spawns H (a new
     * handler), H acknowledges its start to S and, still holding the
     * token, asks G (the resolver) for an address, then sends A the
     * answer. H's continuation brings G in; A's wait is on the
     * continuation, the span H's answer came from. */
    {"dormant_follower_that_sends_goes_on_and_brings_its_receiver_in", DEFAULTS,
     LINES("root A 0",
           "send A S t1 5", "out A 6", "recv S A t1 7",
           "spawn S H 8", "msgsent H S 9", "active H 0",
           "reply S t1 10",
           "msgsent H G 12", "active H 1", "msg G H 13", "msgsent G H 20", "active G 0",
           "msgsent H A 30",
           "in A 31", "rcv A 31 H", "resume A t1 31",
           "close 40"),
     LINES("0 A - 0..40 self=15 wait=25/22/3(p3) on=H ok root",
           "1 S 0 7..10 self=3 wait=0/0/0 on=- ok req",
           "2 H 1 8..9 self=1 wait=0/0/0 on=- ok work",
           "3 H 2 9..40 self=31 wait=0/0/0 on=- at_close cont",
           "4 G 3 13..20 self=7 wait=0/0/0 on=- ok work"),
     "spans=5 processes=4 calls=1 wakes=1 attributed_wakes=1 joins=2 continuations=1 edges=1",
     LINES("0->3 9..31 ns=22 wakes=1"), 0, 0},

    /* A server's own timer after its reply, with nothing sent to the
     * trace: no span (its stacks were charged meanwhile). */
    {"continuation_that_never_tells_the_trace_is_dropped", DEFAULTS,
     LINES("root A 0",
           "send A B t1 10", "out A 11", "recv B A t1 12", "reply B t1 15",
           "in A 16", "rcv A 16 B", "resume A t1 16",
           "out B 16", "in B 30", "rcv B 30 timer", "active B 1", "out B 33",
           "msgsent A B 35", "msg B A 36",   /* a new job: the dropped span is no parent */
           "msgsent B A 38",
           "close 40"),
     LINES("0 A - 0..40 self=35 wait=5/3/2(p2) on=B ok root",
           "1 B 0 12..15 self=3 wait=0/0/0 on=- ok req",
           "2 B 0 36..38 self=2 wait=0/0/0 on=- ok work"),
     "spans=4 processes=2 calls=1 wakes=3 attributed_wakes=1 joins=1 dropped_continuations=1 edges=1",
     LINES("0->1 12..15 ns=3 wakes=1"), 0, 0},

    {"server_after_reply_leaves_when_woken_from_outside", DEFAULTS,
     LINES("root A 0",
           "send A B t1 10",
           "out A 11", "recv B A t1 12", "note joined B 12",
           "reply B t1 15", "note pause B 15",
           "in A 16", "rcv A 16 B", "note in A 16", "note attribute A 16 3",
           "resume A t1 16",
           "out B 20", "in B 30", "rcv B 30 X", "note left B 30", "following B 0",
           "out B 31", "in B 32", "rcv B 32 port",   /* gone: nothing more */
           "notes 0",
           "close 40"),
     LINES("0 A - 0..40 self=35 wait=5/3/2(p2) on=B ok root",
           "1 B 0 12..15 self=3 wait=0/0/0 on=- ok req"),
     "spans=2 processes=2 calls=1 wakes=2 attributed_wakes=1 leaves=1 edges=1",
     LINES("0->1 12..15 ns=3 wakes=1"), 1, 0},

    /* A process outside the trace messages a follower busy with a request
     * while it was scheduled out: it was runnable meanwhile. */
    {"foreign_message_mid_request_is_runnable", DEFAULTS,
     LINES("root A 0",
           "send A B t1 10", "out A 11", "recv B A t1 12",
           "out B 13", "in B 14", "rcv B 14 X", "following B 1",
           "out B 16", "in B 26", "rcv B 26 timer",
           "reply B t1 30", "in A 31", "rcv A 31 B", "resume A t1 31",
           "close 40"),
     LINES("0 A - 0..40 self=20 wait=20/18/2(p2) on=B ok root",
           "1 B 0 12..30 self=7 run=1 wait=10/0/10(t10) on=- ok req"),
     "spans=2 processes=2 calls=1 wakes=3 attributed_wakes=1 edges=1 runnable_wakes=1",
     LINES("0->1 12..30 ns=18 wakes=1"), 0, 0},

    /* Runnable time is noted after the scheduled-in, for the stacks to
     * move from their wait leaf. */
    {"runnable_is_noted_after_the_in", DEFAULTS,
     LINES("root A 0", "out A 10", "in A 14", "notes 0", "ran A 15",
           "note in A 14", "note runnable A 14 4", "notes 0", "close 20"),
     LINES("0 A - 0..20 self=16 run=4 wait=0/0/0 on=- ok root"),
     "spans=1 processes=1 wakes=1 runnable_wakes=1", NULL, 1, 0},

    /* Without receive events (GenServer calls only) nothing says no
     * message ended it: the wait stays a wait, of cause other. */
    {"calls_only_no_runnable", DEFAULTS,
     LINES("root A 0", "out A 10", "in A 14", "ran A 15", "close 20"),
     LINES("0 A - 0..20 self=16 wait=4/0/4(x4) on=- ok root"),
     "spans=1 processes=1 wakes=1", NULL, 0, 1},

    /* Collections: their time in the spans open meanwhile, cut to them; a
     * collection settles no wait (the timer's receive event does), one
     * that starts outside a span is not the trace's. */
    {"collections_are_gc_of_the_spans_open", DEFAULTS,
     LINES("root A 0", "gc B 1 start", "gc B 3 end",
           "gc A 4 start", "gc A 4 start", "gc A 6 end", "gc A 7 end",
           "send A B t1 10", "out A 10", "recv B A t1 12",
           "out B 13", "in B 20", "gc B 21 start", "gc B 23 end", "rcv B 24 timer",
           "gc B 26 start", "reply B t1 28", "gc B 29 end",
           "in A 30", "rcv A 30 B", "resume A t1 30",
           "close 40"),
     LINES("0 A - 0..40 self=18 gc=2 wait=20/16/4(p4) on=B ok root",
           "1 B 0 12..28 self=5 gc=4 wait=7/0/7(t7) on=- ok req"),
     "spans=2 processes=2 calls=1 wakes=2 attributed_wakes=1 edges=1 collections=3",
     LINES("0->1 12..28 ns=16 wakes=1"), 0, 0},

    /* A dirty collection: out, in on the dirty scheduler, the collection,
     * out, in back, no message: runnable and gc. */
    {"dirty_collection_is_gc_and_runnable", DEFAULTS,
     LINES("root A 0", "out A 10", "in A 12", "gc A 12 start", "gc A 16 end",
           "out A 16", "in A 19", "ran A 20", "close 30"),
     LINES("0 A - 0..30 self=21 run=5 gc=4 wait=0/0/0 on=- ok root"),
     "spans=1 processes=1 wakes=1 runnable_wakes=1 collections=1", NULL, 0, 0},

    /* A server's span ends mid-collection (its reply): the rest of that
     * collection is not the trace's, and the next one, in its next span,
     * counts from its start. */
    {"a_collection_across_spans", DEFAULTS,
     LINES("root A 0",
           "send A B t1 10", "out A 10", "recv B A t1 12", "gc B 14 start", "reply B t1 16",
           "in A 17", "rcv A 17 B", "resume A t1 17",
           "send A B t2 20", "out A 20", "recv B A t2 22", "gc B 23 end", "gc B 24 start", "gc B 25 end",
           "reply B t2 26", "in A 27", "rcv A 27 B", "resume A t2 27",
           "close 30"),
     LINES("0 A - 0..30 self=16 wait=14/8/6(p6) on=B ok root",
           "1 B 0 12..16 self=2 gc=2 wait=0/0/0 on=- ok req",
           "2 B 0 22..26 self=3 gc=1 wait=0/0/0 on=- ok req"),
     "spans=3 processes=2 calls=2 wakes=2 attributed_wakes=2 edges=2 collections=2",
     LINES("0->1 12..16 ns=4 wakes=1", "0->2 22..26 ns=4 wakes=1"), 0, 0},

    /* An exit mid-collection: the span takes the collection up to it. */
    {"exit_mid_collection", DEFAULTS,
     LINES("root A 0", "spawn A T 2", "gc T 5 start", "exit T 8 normal", "gc T 9 end", "close 10"),
     LINES("0 A - 0..10 self=10 wait=0/0/0 on=- ok root",
           "1 T 0 2..8 self=3 gc=3 wait=0/0/0 on=- exit:normal work"),
     "spans=2 processes=2 joins=1 collections=1", NULL, 0, 0},

    /* A forwards to F, F to G, G answers A: F's work ends where it went
     * idle for good, when a process outside the trace wakes it. */
    {"forwarder_leaves_on_a_foreign_wake_after_its_part", DEFAULTS,
     LINES("root A 0",
           "msgsent A F 5", "out A 5", "msg F A 6",
           "msgsent F G 8", "msg G F 9", "out F 10",
           "msgsent G A 20", "in A 21", "rcv A 21 G", "out G 21",
           "in F 25", "rcv F 25 X", "following F 0", "active F 0",
           "close 40"),
     LINES("0 A - 0..40 self=24 wait=16/12/4(p4) on=G ok root",
           "1 F 0 6..10 self=4 wait=0/0/0 on=- ok work",
           "2 G 1 9..21 self=12 wait=0/0/0 on=- ok work"),
     "spans=3 processes=3 wakes=2 attributed_wakes=1 joins=2 leaves=1 edges=1",
     LINES("0->2 9..21 ns=12 wakes=1"), 0, 0},

    /* B forwards to C and exits before C takes the message: the message
     * was sent from B's span, so C still joins under it. Following calls
     * only, plain messages bring nobody in (next case). */
    {"message_sent_from_a_span_that_ended_since_still_brings_in", DEFAULTS,
     LINES("root A 0", "msgsent A B 5", "msg B A 6",
           "msgsent B C 10", "exit B 11 normal", "following B 0",
           "msg C B 12", "active C 1",
           "close 20"),
     LINES("0 A - 0..20 self=20 wait=0/0/0 on=- ok root",
           "1 B 0 6..11 self=5 wait=0/0/0 on=- exit:normal work",
           "2 C 1 12..20 self=8 wait=0/0/0 on=- at_close work"),
     "spans=3 processes=3 joins=2", NULL, 0, 0},

    {"following_calls_only_plain_messages_and_spawns_bring_nobody_in", DEFAULTS,
     LINES("root A 0", "msgsent A B 5", "msg B A 6", "spawn A T 7", "active B 0", "active T 0",
           "close 20"),
     LINES("0 A - 0..20 self=20 wait=0/0/0 on=- ok root"),
     "spans=1 processes=1", NULL, 0, 1},

    /* A child of a process with no open span is not the trace's. */
    {"spawn_by_a_dormant_or_unknown_process_does_not_join", DEFAULTS,
     LINES("root A 0", "send A B t1 1", "recv B A t1 2", "reply B t1 3", "resume A t1 4",
           "spawn B T 5", "spawn X T 6", "active T 0", "close 10"),
     LINES("0 A - 0..10 self=10 wait=0/0/0 on=- ok root",
           "1 B 0 2..3 self=1 wait=0/0/0 on=- ok req"),
     "spans=2 processes=2 calls=1", NULL, 0, 0},

    {"exit_while_waiting_cuts_the_wait", DEFAULTS,
     LINES("root A 0", "spawn A T 1", "out T 5", "exit T 20 crash", "close 30"),
     LINES("0 A - 0..30 self=30 wait=0/0/0 on=- ok root",
           "1 T 0 1..20 self=4 wait=15/0/15(x15) on=- exit:crash work"),
     "spans=2 processes=2 wakes=1 joins=1", NULL, 0, 0},

    /* Followers idle at the end stop where their last idle began; one
     * still busy is open at close; the root's wait is cut at close. */
    {"close_ends_idle_work_at_its_last_idle", DEFAULTS,
     LINES("root A 0", "spawn A T 1", "spawn A U 2", "out T 5", "out A 6", "close 30"),
     LINES("0 A - 0..30 self=6 wait=24/0/24(x24) on=- ok root",
           "1 T 0 1..5 self=4 wait=0/0/0 on=- ok work",
           "2 U 0 2..30 self=28 wait=0/0/0 on=- at_close work"),
     "spans=3 processes=3 wakes=1 joins=2", NULL, 0, 0},

    /* follow: :calls: no receive events; a tokened reply says who woke
     * the caller, and a wake nothing tells of is other wait. */
    {"calls_only_wakes_settle_on_tokened_messages", DEFAULTS,
     LINES("root A 0",
           "send A B t1 5", "out A 6", "recv B A t1 7", "reply B t1 15",
           "in A 16", "resume A t1 16",
           "out A 20", "in A 50", "ran A 50",
           "close 60"),
     LINES("0 A - 0..60 self=20 wait=40/8/32(p2 x30) on=- ok root",
           "1 B 0 7..15 self=8 wait=0/0/0 on=- ok req"),
     "spans=2 processes=2 calls=1 wakes=2 attributed_wakes=1 edges=1",
     LINES("0->1 7..15 ns=8 wakes=1"), 0, 1},

    /* mode :process: the root's own events come after its correlation
     * events; its wake finds the sender in what it took meanwhile. Its
     * stacks take its events as they come: no in or attribute note. */
    {"late_root_settles_from_the_messages_it_took", DEFAULTS,
     LINES("root A 0", "late A",
           "send A B t1 5", "recv B A t1 7", "note joined B 7", "reply B t1 15", "note pause B 15",
           "resume A t1 16", "notes 0",
           "out A 6", "in A 16", "rcv A 16 ?", "ran A 17", "notes 0",
           "close 20"),
     LINES("0 A - 0..20 self=10 wait=10/8/2(p2) on=B ok root",
           "1 B 0 7..15 self=8 wait=0/0/0 on=- ok req"),
     "spans=2 processes=2 calls=1 wakes=1 attributed_wakes=1 edges=1",
     LINES("0->1 7..15 ns=8 wakes=1"), 1, 0},

    /* --- bounds --------------------------------------------------------- */

    {"max_spans_stops_following_new_callees", {2, 0, 0, 0},
     LINES("root A 0",
           "send A B t1 10", "recv B A t1 10", "reply B t1 20", "resume A t1 20",
           "send A C t2 30", "recv C A t2 31", "active C 0", "waiting A 1 C",
           "send C D t3 32",   /* not followed: an orphan */
           "reply C t2 40", "resume A t2 41",
           "close 50"),
     LINES("0 A - 0..50 self=50 wait=0/0/0 on=- ok root",
           "1 B 0 10..20 self=10 wait=0/0/0 on=- ok req"),
     "spans=2 processes=2 calls=2 dropped_spans=1 span_limit_hits=1 orphan_requests=1", NULL, 0, 0},

    {"max_fanout_limits_children_per_span", {0, 0, 0, 1},
     LINES("root A 0",
           "send A B t1 10", "recv B A t1 10",
           "send B C t2 12", "recv C B t2 12", "reply C t2 14", "resume B t2 14",
           "reply B t1 20", "resume A t1 20",
           "send A B t3 30", "recv B A t3 30", "active B 0", "reply B t3 40", "resume A t3 40",
           "close 50"),
     LINES("0 A - 0..50 self=50 wait=0/0/0 on=- ok root",
           "1 B 0 10..20 self=10 wait=0/0/0 on=- ok req",
           "2 C 1 12..14 self=2 wait=0/0/0 on=- ok req"),
     "spans=3 processes=3 calls=3 dropped_spans=1 fanout_hits=1", NULL, 0, 0},

    {"max_processes_limits_distinct_pids", {0, 0, 2, 0},
     LINES("root A 0",
           "send A B t1 10", "recv B A t1 10", "reply B t1 20", "resume A t1 20",
           "send A C t2 30", "recv C A t2 30", "active C 0", "reply C t2 40", "resume A t2 40",
           "send A B t3 50", "recv B A t3 50", "reply B t3 55", "resume A t3 55",
           "close 60"),
     LINES("0 A - 0..60 self=60 wait=0/0/0 on=- ok root",
           "1 B 0 10..20 self=10 wait=0/0/0 on=- ok req",
           "2 B 0 50..55 self=5 wait=0/0/0 on=- ok req"),
     "spans=3 processes=2 calls=3 dropped_spans=1 process_limit_hits=1", NULL, 0, 0},

    {"max_pending_calls_drops_requests_visibly", {0, 1, 0, 0},
     LINES("root A 0",
           "send A B t1 10",
           "send A C t2 11",   /* past the bound: not recorded */
           "waiting A 1 B",
           "recv B A t1 12", "recv C A t2 13",
           "reply B t1 20", "reply C t2 21",
           "resume A t1 22", "resume A t2 23",
           "send A C t3 30",   /* room again */
           "recv C A t3 31", "reply C t3 35", "resume A t3 36",
           "close 40"),
     LINES("0 A - 0..40 self=40 wait=0/0/0 on=- ok root",
           "1 B 0 12..20 self=8 wait=0/0/0 on=- ok req",
           "2 C 0 31..35 self=4 wait=0/0/0 on=- ok req"),
     "spans=3 processes=3 calls=2 pending_limit_hits=1 unmatched_requests=1 unmatched_replies=1 "
     "unmatched_reply_sends=1", NULL, 0, 0},
};
// clang-format on

typedef struct {
    const graph_case *c;
    fo_graph_limits limits;
    fo_graph *g;
} case_run;

/* The graph is made in setup and freed in teardown, which cmocka runs even
 * when the test fails: a failing case leaks nothing under valgrind. */
static int case_setup(void **state)
{
    case_run *run = calloc(1, sizeof *run);
    if (run == NULL)
        return -1;
    run->c = *state;
    run->limits = limits_of(run->c->limits);
    run->g = fo_graph_new(&run->limits, 7);
    if (run->g == NULL) {
        free(run);
        return -1;
    }
    *state = run;
    return 0;
}

static int case_teardown(void **state)
{
    case_run *run = *state;
    fo_graph_free(run->g);
    free(run);
    return 0;
}

static void case_test(void **state)
{
    const case_run *run = *state;
    static const char *const names[] = {"A", "B", "C", "D", "S", "T", "W", "X"};
    uint64_t pids[sizeof names / sizeof names[0]];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        pids[i] = key(names[i]);
    if (run->c->calls_only)
        fo_graph_follow_messages(run->g, 0);
    run_script(run->g, run->c->script, run->c->notes);
    check_graph(run->g, &run->limits, pids, sizeof pids / sizeof pids[0]);
    assert_spans(run->g, run->c->expect);
    assert_edges(run->g, run->c->edges);
    assert_stats(run->g, run->c->stats);
    assert_int_equal(fo_graph_trace_id(run->g), 7);
}

/* ------------------------------------------------------------------------
 * Limits */

static void test_limits_validation(void **state)
{
    (void)state;
    fo_graph_limits d = fo_graph_limits_default();
    assert_int_equal(fo_graph_limits_valid(&d), 1);
    assert_int_equal(fo_graph_limits_valid(NULL), 0);
    fo_graph_limits ones = {1, 1, 1, 1};
    assert_int_equal(fo_graph_limits_valid(&ones), 1);
    fo_graph_limits ceil = {FO_GRAPH_CEIL_MAX_SPANS, FO_GRAPH_CEIL_MAX_PENDING_CALLS,
                            FO_GRAPH_CEIL_MAX_PROCESSES, FO_GRAPH_CEIL_MAX_FANOUT};
    assert_int_equal(fo_graph_limits_valid(&ceil), 1);
    for (int i = 0; i < 4; i++) {
        fo_graph_limits zero = d, over = ceil;
        uint32_t *z = i == 0 ? &zero.max_spans
                      : i == 1 ? &zero.max_pending_calls
                      : i == 2 ? &zero.max_processes
                               : &zero.max_fanout;
        uint32_t *o = i == 0 ? &over.max_spans
                      : i == 1 ? &over.max_pending_calls
                      : i == 2 ? &over.max_processes
                               : &over.max_fanout;
        *z = 0;
        *o += 1;
        assert_int_equal(fo_graph_limits_valid(&zero), 0);
        assert_int_equal(fo_graph_limits_valid(&over), 0);
        assert_null(fo_graph_new(&zero, 1));
        assert_null(fo_graph_new(&over, 1));
    }
    fo_graph_free(NULL);
}

/* ------------------------------------------------------------------------
 * Bounds: memory stops growing once the limits are reached. */

static void call_once(fo_graph *g, uint64_t caller, uint64_t callee, uint64_t tag, int64_t *t)
{
    fo_graph_request_sent(g, caller, callee, tag, *t);
    fo_graph_request_received(g, callee, caller, tag, *t + 1);
    fo_graph_reply_sent(g, callee, tag, *t + 2);
    fo_graph_reply_received(g, caller, tag, *t + 3);
    *t += 4;
}

static void test_bounds_hold_memory_flat(void **state)
{
    (void)state;
    fo_graph_limits l = {4, 3, 3, 2}; /* A has two calls out while its callee makes a third */
    fo_graph *g = fo_graph_new(&l, 1);
    assert_non_null(g);
    uint64_t pids[6];
    for (int i = 0; i < 6; i++)
        pids[i] = UINT64_C(0x100000000) * (uint64_t)(i + 1);
    int64_t t = 0;
    fo_graph_root(g, pids[0], t);
    size_t warm = 0;
    for (uint64_t i = 0; i < 20000; i++) {
        uint64_t callee = pids[1 + i % 5];
        fo_graph_request_sent(g, pids[0], callee, 3 * i, t);
        /* a second request out at once, half the time past the bound */
        fo_graph_request_sent(g, pids[0], pids[1 + (i + 1) % 5], 3 * i + 1, t);
        fo_graph_request_received(g, callee, pids[0], 3 * i, t + 1);
        call_once(g, callee, pids[1 + (i + 2) % 5], 3 * i + 2, &t);
        fo_graph_reply_sent(g, callee, 3 * i, t + 1);
        fo_graph_reply_received(g, pids[0], 3 * i, t + 2);
        fo_graph_reply_received(g, pids[0], 3 * i + 1, t + 3);
        t += 4;
        if (i == 100)
            warm = fo_graph_memory(g);
    }
    assert_int_equal(fo_graph_memory(g), warm);
    const fo_graph_stats *st = fo_graph_get_stats(g);
    assert_int_equal(fo_graph_span_count(g), 4);
    assert_true(st->span_limit_hits > 0 && st->fanout_hits > 0 && st->process_limit_hits > 0);
    assert_true(st->dropped_spans ==
                st->span_limit_hits + st->fanout_hits + st->process_limit_hits);
    assert_int_equal(st->pending_limit_hits, 0); /* three out at once fit exactly */
    assert_true(st->processes <= 3);
    fo_graph_close(g, t);
    check_graph(g, &l, pids, 6);
    fo_graph_free(g);
}

/* Tags come and go: the pending index must reuse its slots (no tombstones),
 * and a full pending table must refuse without growing. */
static void test_pending_churn_does_not_grow(void **state)
{
    (void)state;
    fo_graph_limits l = {2, 500, 4, 4};
    fo_graph *g = fo_graph_new(&l, 1);
    assert_non_null(g);
    const uint64_t a = 11, b = 12;
    int64_t t = 0;
    fo_graph_root(g, a, t);
    size_t warm = 0;
    for (uint64_t round = 0; round < 60; round++) {
        for (uint64_t i = 0; i < 600; i++)
            fo_graph_request_sent(g, a, b, round * 1000 + i, t++);
        assert_int_equal(fo_graph_waiting_call(g, a, NULL), 500);
        for (uint64_t i = 0; i < 600; i++)
            fo_graph_reply_received(g, a, round * 1000 + i, t++);
        assert_int_equal(fo_graph_waiting_call(g, a, NULL), 0);
        if (round == 1)
            warm = fo_graph_memory(g);
    }
    assert_int_equal(fo_graph_memory(g), warm);
    const fo_graph_stats *st = fo_graph_get_stats(g);
    assert_int_equal(st->calls, 60 * 500);
    assert_int_equal(st->pending_limit_hits, 60 * 100);
    assert_int_equal(st->unmatched_replies, 60 * 100);
    fo_graph_free(g);
}

/* ------------------------------------------------------------------------
 * A seeded model: well-formed nested calls made one at a time (a process
 * on the current chain never serves another call), with exact expected
 * spans, interleaved with noise that must change nothing but counters. */

#define MODEL_PIDS 8
#define MODEL_MAX_SPANS 128
#define MODEL_MAX_DEPTH 4
#define HELPER_PID UINT64_C(0xDEAD00000000)

typedef struct {
    uint64_t pid;
    uint32_t parent;
    int64_t started;
    int64_t ended;
    uint64_t wait;
    uint64_t runnable;
    uint64_t attributed;
    uint64_t longest;
    uint64_t on;
    uint32_t calls;
    uint32_t wakes;
} mspan;

typedef struct {
    fo_graph *g;
    ts_rng rng;
    uint64_t pids[MODEL_PIDS];
    int busy[MODEL_PIDS];
    int used[MODEL_PIDS];
    mspan spans[MODEL_MAX_SPANS];
    uint32_t n;
    uint64_t next_tag;
    uint64_t next_noise_tag;
    fo_graph_stats want;
} model;

static uint32_t idle_pid(model *m)
{
    uint32_t start = ts_rng_below(&m->rng, MODEL_PIDS);
    for (uint32_t k = 0; k < MODEL_PIDS; k++) {
        uint32_t i = (start + k) % MODEL_PIDS;
        if (!m->busy[i])
            return i;
    }
    fail_msg("model: no idle pid");
    return 0;
}

/* The front end drains the notes after every event; the model after each
 * call (fewer than FO_GRAPH_NOTES come of one). */
static void drain_notes(fo_graph *g)
{
    fo_graph_note n;
    while (fo_graph_next_note(g, &n))
        ;
}

static void model_noise(model *m, int64_t t)
{
    uint64_t tag = m->next_noise_tag++;
    uint64_t any = m->pids[ts_rng_below(&m->rng, MODEL_PIDS)];
    switch (ts_rng_below(&m->rng, 8)) {
    case 0:
        /* from a process that holds no span and never did (a follower
         * without a span would go on with the trace's work) */
        fo_graph_request_sent(m->g, HELPER_PID, any, tag, t);
        m->want.orphan_requests++;
        break;
    case 1:
        fo_graph_request_received(m->g, any, m->pids[idle_pid(m)], tag, t);
        m->want.unmatched_requests++;
        break;
    case 2:
        fo_graph_reply_received(m->g, any, tag, t);
        m->want.unmatched_replies++;
        break;
    case 3:
        fo_graph_reply_sent(m->g, any, tag, t);
        m->want.unmatched_reply_sends++;
        break;
    case 4:
        fo_graph_exit(m->g, m->pids[idle_pid(m)], t, 99);
        break;
    default:
        break;
    }
}

static int64_t model_span(model *m, uint32_t s, uint32_t pi, int64_t t, int depth)
{
    uint32_t k = depth < MODEL_MAX_DEPTH ? ts_rng_below(&m->rng, 4) : 0;
    for (uint32_t i = 0; i < k; i++) {
        t += 1 + ts_rng_below(&m->rng, 20);
        model_noise(m, t);
        uint32_t ci = idle_pid(m);
        uint64_t tag = m->next_tag++;
        int64_t sent = t;
        fo_graph_request_sent(m->g, m->pids[pi], m->pids[ci], tag, sent);
        fo_graph_out(m->g, m->pids[pi], sent);
        uint64_t callee = 0;
        assert_int_equal(fo_graph_waiting_call(m->g, m->pids[pi], &callee), 1);
        assert_true(callee == m->pids[ci]);
        int64_t recv = sent + ts_rng_below(&m->rng, 6);
        fo_graph_request_received(m->g, m->pids[ci], m->pids[pi], tag, recv);
        assert_int_equal(fo_graph_active(m->g, m->pids[ci]), 1);
        assert_true(m->n < MODEL_MAX_SPANS);
        uint32_t child = m->n++;
        mspan *c = &m->spans[child];
        memset(c, 0, sizeof *c);
        c->pid = m->pids[ci];
        c->parent = s;
        c->started = recv;
        m->busy[ci] = 1;
        if (!m->used[ci])
            m->want.processes++;
        m->used[ci] = 1;
        int64_t end = model_span(m, child, ci, recv, depth + 1);
        m->busy[ci] = 0;
        uint64_t sender = m->pids[ci];
        if (ts_rng_below(&m->rng, 8) == 0) {
            sender = HELPER_PID;
            m->want.delegated_replies++;
        }
        fo_graph_reply_sent(m->g, sender, tag, end);
        assert_int_equal(fo_graph_active(m->g, m->pids[ci]), 0);
        m->spans[child].ended = end;
        /* the caller was out from its send to its wake by the reply */
        int64_t resume = end + ts_rng_below(&m->rng, 6);
        fo_graph_in(m->g, m->pids[pi], resume);
        fo_graph_received(m->g, m->pids[pi], resume, FO_WAKER_PROCESS, sender);
        fo_graph_reply_received(m->g, m->pids[pi], tag, resume);
        mspan *me = &m->spans[s];
        uint64_t wait = (uint64_t)(resume - sent);
        m->want.wakes++;
        m->want.calls++;
        me->calls++;
        t = resume;
        drain_notes(m->g);
        if (wait == 0)
            continue;
        if (sender == HELPER_PID && s != 0) {
            /* woken from outside mid-request: taken as runnable */
            me->runnable += wait;
            m->want.runnable_wakes++;
            continue;
        }
        me->wait += wait;
        me->wakes++;
        if (sender != HELPER_PID) {
            me->attributed += (uint64_t)(end - recv);
            if (end > recv) {
                m->want.attributed_wakes++;
                m->want.edges++;
            }
        }
        if (me->wakes == 1 || wait > me->longest) {
            me->longest = wait;
            me->on = sender;
        }
    }
    return t + ts_rng_below(&m->rng, 20);
}

static void model_compare(const model *m)
{
    assert_int_equal(fo_graph_span_count(m->g), m->n);
    for (uint32_t id = 0; id < m->n; id++) {
        const mspan *e = &m->spans[id];
        fo_span_info si;
        assert_int_equal(fo_graph_span(m->g, id, &si), 1);
        uint64_t duration = (uint64_t)(e->ended - e->started);
        if (si.pid != e->pid || si.parent_span_id != e->parent || si.started_ns != e->started ||
            si.ended_ns != e->ended || si.wait_ns != e->wait ||
            si.attributed_wait_ns != e->attributed || si.waiting_on_pid != e->on ||
            si.calls != e->calls || si.wakes != e->wakes || si.status != FO_SPAN_OK ||
            si.runnable_ns != e->runnable || si.self_ns != duration - e->wait - e->runnable)
            fail_msg("model span %" PRIu32 " differs:\n"
                     "  got  pid %" PRIx64 " parent %" PRIu32 " %" PRId64 "..%" PRId64
                     " wait %" PRIu64 "/%" PRIu64 " on %" PRIx64 " calls %" PRIu32 " wakes %" PRIu32
                     " status %" PRIu32 " self %" PRIu64 "\n"
                     "  want pid %" PRIx64 " parent %" PRIu32 " %" PRId64 "..%" PRId64
                     " wait %" PRIu64 "/%" PRIu64 " on %" PRIx64 " calls %" PRIu32 " wakes %" PRIu32
                     " status 1 self %" PRIu64 " (runnable %" PRIu64 ")",
                     id, si.pid, si.parent_span_id, si.started_ns, si.ended_ns, si.wait_ns,
                     si.attributed_wait_ns, si.waiting_on_pid, si.calls, si.wakes, si.status, si.self_ns,
                     e->pid, e->parent, e->started, e->ended, e->wait, e->attributed, e->on,
                     e->calls, e->wakes, duration - e->wait - e->runnable, e->runnable);
    }
    const fo_graph_stats *st = fo_graph_get_stats(m->g);
    assert_memory_equal(st, &m->want, sizeof *st);
}

static void test_model_nested_calls_exact(void **state)
{
    (void)state;
    fo_graph_limits l = fo_graph_limits_default();
    for (uint64_t seed = 1; seed <= 300; seed++) {
        model *m = calloc(1, sizeof *m);
        assert_non_null(m);
        m->rng.state = seed;
        m->g = fo_graph_new(&l, seed);
        assert_non_null(m->g);
        for (int i = 0; i < MODEL_PIDS; i++)
            m->pids[i] = UINT64_C(0x0123456789) * (uint64_t)(i + 1) << 16;
        m->next_tag = UINT64_C(1) << 40;
        m->next_noise_tag = UINT64_C(1) << 50;
        int64_t start = (int64_t)ts_rng_below(&m->rng, 1000);
        assert_int_equal(fo_graph_root(m->g, m->pids[0], start), 0);
        m->busy[0] = m->used[0] = 1;
        m->want.processes = 1;
        m->spans[0].pid = m->pids[0];
        m->spans[0].parent = FO_NONE;
        m->spans[0].started = start;
        m->n = 1;
        int64_t end = model_span(m, 0, 0, start, 0) + ts_rng_below(&m->rng, 10);
        fo_graph_close(m->g, end);
        m->spans[0].ended = end;
        m->want.spans = m->n;
        check_graph(m->g, &l, m->pids, MODEL_PIDS);
        model_compare(m);
        fo_graph_free(m->g);
        free(m);
    }
}

/* ------------------------------------------------------------------------
 * Seeded garbage: events from a few pids and tags, mostly following each
 * tag's request/reply life cycle (so spans do get made and nested) but
 * with the wrong process, a skipped or repeated step, or plain noise often
 * enough; clocks that jump around (and to the ends of int64); random small
 * bounds. Nothing may crash, leak or break an invariant. */

#define FUZZ_PIDS 6
#define FUZZ_TAGS 12

typedef struct {
    ts_rng r;
    uint64_t pids[FUZZ_PIDS];
    uint64_t tags[FUZZ_TAGS];
    uint64_t caller[FUZZ_TAGS];
    uint64_t callee[FUZZ_TAGS];
    int stage[FUZZ_TAGS]; /* next step: 0 send, 1 recv, 2 reply, 3 resume */
    int64_t t;
} fuzz;

static void fuzz_time(fuzz *f)
{
    switch (ts_rng_below(&f->r, 200)) {
    case 0:
        f->t = INT64_MAX - (int64_t)ts_rng_below(&f->r, 100);
        return;
    case 1:
        f->t = INT64_MIN + (int64_t)ts_rng_below(&f->r, 100);
        return;
    case 2:
        f->t = 0;
        return;
    default: {
        int64_t step = (int64_t)ts_rng_below(&f->r, 60) - 8;
        if ((step > 0 && f->t > INT64_MAX - step) || (step < 0 && f->t < INT64_MIN - step))
            f->t = 0;
        else
            f->t += step;
    }
    }
}

static uint64_t fuzz_pid(fuzz *f)
{
    return f->pids[ts_rng_below(&f->r, FUZZ_PIDS)];
}

/* Usually who the life cycle says; sometimes anyone. */
static uint64_t fuzz_who(fuzz *f, uint64_t expected)
{
    return ts_rng_below(&f->r, 8) == 0 ? fuzz_pid(f) : expected;
}

/* A caller that can send: an active pid when there is one, often. */
static uint64_t fuzz_caller(fuzz *f, const fo_graph *g)
{
    uint32_t start = ts_rng_below(&f->r, FUZZ_PIDS);
    for (uint32_t k = 0; k < FUZZ_PIDS && ts_rng_below(&f->r, 5) != 0; k++) {
        uint64_t p = f->pids[(start + k) % FUZZ_PIDS];
        if (fo_graph_active(g, p))
            return p;
    }
    return fuzz_pid(f);
}

static void fuzz_step(fuzz *f, fo_graph *g, uint32_t i)
{
    uint64_t tag = f->tags[i];
    switch (f->stage[i]) {
    case 0:
        f->caller[i] = fuzz_caller(f, g);
        f->callee[i] = fuzz_pid(f);
        fo_graph_request_sent(g, f->caller[i], f->callee[i], tag, f->t);
        break;
    case 1:
        fo_graph_request_received(g, fuzz_who(f, f->callee[i]), f->caller[i], tag, f->t);
        break;
    case 2:
        fo_graph_reply_sent(g, fuzz_who(f, f->callee[i]), tag, f->t);
        break;
    default:
        fo_graph_reply_received(g, fuzz_who(f, f->caller[i]), tag, f->t);
        if (ts_rng_below(&f->r, 3) == 0)
            f->tags[i] += FUZZ_TAGS; /* a fresh tag next time */
        break;
    }
    /* mostly the next step; sometimes a step is repeated or skipped */
    uint32_t roll = ts_rng_below(&f->r, 16);
    f->stage[i] = (f->stage[i] + (roll == 0 ? 0 : roll == 1 ? 2 : 1)) % 4;
}

/* A follower's own events and plain messages, in no particular order. */
static uint64_t fuzz_caller(fuzz *f, const fo_graph *g);

static void fuzz_wake(fuzz *f, fo_graph *g, uint32_t roll)
{
    static const fo_waker_kind kinds[] = {FO_WAKER_NONE, FO_WAKER_PROCESS, FO_WAKER_PORT, FO_WAKER_TIMER};
    int64_t ts;
    switch (roll % 12) {
    case 10:
        /* a message across nodes, either way */
        if (ts_rng_below(&f->r, 2) == 0)
            fo_graph_remote_message_sent(g, fuzz_pid(f), fuzz_pid(f) | FO_GRAPH_REMOTE_BIT,
                                         ts_rng_below(&f->r, 8), f->t);
        else
            fo_graph_remote_message_received(g, fuzz_pid(f), fuzz_pid(f) | FO_GRAPH_REMOTE_BIT,
                                             ts_rng_below(&f->r, 8), f->t);
        break;
    case 11:
        /* a spawn across nodes, either way, and its end */
        switch (ts_rng_below(&f->r, 5)) {
        case 0:
            fo_graph_remote_spawn_sent(g, fuzz_pid(f), ts_rng_below(&f->r, 4), f->t);
            break;
        case 1:
            fo_graph_remote_spawn_replied(g, fuzz_pid(f), fuzz_pid(f) | FO_GRAPH_REMOTE_BIT,
                                          ts_rng_below(&f->r, 4), f->t);
            break;
        case 2:
            (void)fo_graph_remote_down(g, fuzz_pid(f), fuzz_pid(f) | FO_GRAPH_REMOTE_BIT,
                                       ts_rng_below(&f->r, 4), f->t);
            break;
        case 3:
            (void)fo_graph_remote_name_answered(g, fuzz_pid(f), fuzz_pid(f) | FO_GRAPH_REMOTE_BIT, f->t);
            break;
        default:
            fo_graph_remote_spawned(g, fuzz_pid(f) | FO_GRAPH_REMOTE_BIT, fuzz_pid(f), ts_rng_below(&f->r, 4),
                                    f->t);
            break;
        }
        break;
    case 0:
    case 1:
        fo_graph_out(g, fuzz_pid(f), f->t);
        break;
    case 2:
    case 3:
        fo_graph_in(g, fuzz_pid(f), f->t);
        break;
    case 4:
        /* often a wake by a follower working right now */
        fo_graph_received(g, fuzz_pid(f), f->t, kinds[ts_rng_below(&f->r, 4)],
                          ts_rng_below(&f->r, 4) == 0 ? 0 : fuzz_caller(f, g));
        break;
    case 5:
        /* or a collection's start or end, paired or not */
        if (ts_rng_below(&f->r, 3) == 0)
            fo_graph_gc(g, fuzz_pid(f), f->t, (int)ts_rng_below(&f->r, 2));
        else
            fo_graph_ran(g, fuzz_pid(f), f->t);
        break;
    case 6:
        fo_graph_message_sent(g, fuzz_pid(f), ts_rng_below(&f->r, 5) == 0 ? 0 : fuzz_pid(f), f->t);
        break;
    case 7:
        fo_graph_message_received(g, fuzz_pid(f), fuzz_pid(f), f->t);
        break;
    case 8:
        fo_graph_spawned(g, fuzz_pid(f), fuzz_pid(f), f->t);
        break;
    default:
        if (ts_rng_below(&f->r, 2) == 0) {
            /* a whole wait of a follower, woken by another one */
            uint64_t p = fuzz_caller(f, g);
            int64_t t = f->t > INT64_MAX - 30 ? INT64_MAX - 30 : f->t;
            fo_graph_out(g, p, t);
            fo_graph_in(g, p, t + (int64_t)ts_rng_below(&f->r, 30));
            fo_graph_received(g, p, t + 30, FO_WAKER_PROCESS, fuzz_caller(f, g));
        } else if (ts_rng_below(&f->r, 20) == 0)
            fo_graph_set_late(g, fuzz_pid(f));
        else
            (void)fo_graph_take_in(g, fuzz_pid(f), &ts);
        (void)fo_graph_following(g, fuzz_pid(f));
        break;
    }
}

static void fuzz_event(fuzz *f, fo_graph *g, int late)
{
    uint32_t roll = ts_rng_below(&f->r, 1000);
    uint64_t tag = f->tags[ts_rng_below(&f->r, FUZZ_TAGS)];
    if (roll < 3)
        fo_graph_exit(g, fuzz_pid(f), f->t, tag);
    else if (roll < 5)
        fo_graph_root(g, fuzz_pid(f), f->t);
    else if (roll < 6 && late)
        fo_graph_close(g, f->t);
    else if (roll < 150) {
        switch (roll % 4) {
        case 0:
            fo_graph_request_sent(g, fuzz_pid(f), fuzz_pid(f), tag, f->t);
            break;
        case 1:
            fo_graph_request_received(g, fuzz_pid(f), fuzz_pid(f), tag, f->t);
            break;
        case 2:
            fo_graph_reply_sent(g, fuzz_pid(f), tag, f->t);
            break;
        default:
            fo_graph_reply_received(g, fuzz_pid(f), tag, f->t);
            break;
        }
    } else if (roll < 450)
        fuzz_wake(f, g, roll);
    else
        fuzz_step(f, g, ts_rng_below(&f->r, FUZZ_TAGS));
    /* the front end drains the notes; now and then it lags */
    fo_graph_note n;
    while (ts_rng_below(&f->r, 50) != 0 && fo_graph_next_note(g, &n)) {
        assert_true(n.kind >= FO_NOTE_JOINED && n.kind <= FO_NOTE_RUNNABLE);
        int known = 0;
        for (uint32_t i = 0; i < FUZZ_PIDS; i++)
            known |= f->pids[i] == n.pid;
        assert_true(known);
    }
}

static uint32_t fuzz_bound(ts_rng *r)
{
    return ts_rng_below(r, 3) == 0 ? 64 : 1 + ts_rng_below(r, 6);
}

static void test_random_streams_keep_invariants(void **state)
{
    (void)state;
    uint64_t spans = 0, nested = 0, calls = 0, wakes = 0, edges = 0, joins = 0;
    for (uint64_t seed = 1; seed <= 60; seed++) {
        fuzz f;
        memset(&f, 0, sizeof f);
        f.r.state = seed * 7919;
        const uint64_t pids[FUZZ_PIDS] = {0, 1, UINT64_MAX, UINT64_C(0xABCDEF) << 20, 77, 78};
        memcpy(f.pids, pids, sizeof pids);
        for (uint32_t i = 0; i < FUZZ_TAGS; i++)
            f.tags[i] = i == 0 ? 0 : i == 1 ? UINT64_MAX : UINT64_C(0x9E3779B97F4A7C15) * i;
        fo_graph_limits l = {fuzz_bound(&f.r), fuzz_bound(&f.r), fuzz_bound(&f.r),
                             fuzz_bound(&f.r)};
        fo_graph *g = fo_graph_new(&l, seed);
        assert_non_null(g);
        fo_graph_follow_messages(g, seed % 3 != 0);
        f.t = (int64_t)ts_rng_below(&f.r, 1000);
        fo_graph_root(g, fuzz_pid(&f), f.t);
        for (int i = 0; i < 4000; i++) {
            fuzz_time(&f);
            fuzz_event(&f, g, i > 3000);
            if (i % 97 == 0)
                check_graph(g, &l, f.pids, FUZZ_PIDS);
        }
        fuzz_time(&f);
        fo_graph_close(g, f.t);
        check_graph(g, &l, f.pids, FUZZ_PIDS);
        uint32_t n = fo_graph_span_count(g);
        spans += n;
        calls += fo_graph_get_stats(g)->calls;
        wakes += fo_graph_get_stats(g)->wakes;
        edges += fo_graph_get_stats(g)->edges;
        joins += fo_graph_get_stats(g)->joins;
        for (uint32_t id = 0; id < n; id++) {
            fo_span_info si;
            assert_int_equal(fo_graph_span(g, id, &si), 1);
            nested += si.parent_span_id != FO_NONE && si.parent_span_id != 0;
        }
        fo_graph_free(g);
    }
    /* the streams did make calls, spans past the root, nested spans, and
     * wakes some of which a span explained */
    assert_true(calls > 1000 && spans > 300 && nested > 50);
    if (!(wakes > 1000 && edges > 20 && joins > 50))
        fail_msg("wakes %" PRIu64 " edges %" PRIu64 " joins %" PRIu64, wakes, edges, joins);
}

int main(void)
{
    size_t n = sizeof graph_cases / sizeof graph_cases[0];
    struct CMUnitTest *cases = calloc(n, sizeof *cases);
    assert_non_null(cases);
    for (size_t i = 0; i < n; i++) {
        cases[i].name = graph_cases[i].name;
        cases[i].test_func = case_test;
        cases[i].setup_func = case_setup;
        cases[i].teardown_func = case_teardown;
        cases[i].initial_state = (void *)(uintptr_t)&graph_cases[i];
    }
    int failed = _cmocka_run_group_tests("graph_cases", cases, n, NULL, NULL);
    free(cases);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits_validation),
        cmocka_unit_test(test_bounds_hold_memory_flat),
        cmocka_unit_test(test_pending_churn_does_not_grow),
        cmocka_unit_test(test_model_nested_calls_exact),
        cmocka_unit_test(test_random_streams_keep_invariants),
    };
    failed += cmocka_run_group_tests_name("graph", tests, NULL, NULL);
    return failed;
}
