/* fo_follow: a followed trace's events drive its span graph and its stacks
 * together. The stacks of a follower count inside its spans only; a
 * wake-up counts once it is known who ended the wait; the part of a wait a
 * span explains moves from WAITING to ATTRIBUTED; a continuation's stacks
 * start with the wait that a port or timer ended; a follower that leaves
 * keeps its idle out of the stacks; close stops idle followers where their
 * last idle began. A wait that no message ended was runnable: RUNNABLE in
 * the stacks, runnable_ns in the spans; a garbage collection is a GC leaf
 * and the spans' gc_ns, and it settles no wait. The front end hears of
 * joins and leaves.
 *
 * Scripts (pids are numbers, frames "m:f/0"):
 *     "root P TS"                   fo_graph_root
 *     "P TS call M:F/A" / "P TS ret M:F/A" / "P TS out" / "P TS in" /
 *     "P TS gcstart" / "P TS gcend" fo_follow_event (" heap=W": with heap sizes)
 *     "P TS rcv WAKER"              fo_follow_received; WAKER a pid, port,
 *                                   timer
 *     "P TS exit"                   fo_follow_exit
 *     "P TS sample M:F/A"           fo_follow_before_sample, then a sample
 *     "spawn PARENT CHILD TS"       fo_follow_spawned
 *     "req FROM TO TAG TS" / "took FROM TO TAG TS"     a request's send / receive
 *     "answer FROM TO TAG TS" / "got FROM TO TAG TS"   a {Tag, _} message's send / receive
 *     "msg FROM TO TS" / "tookmsg FROM TO TS"          a plain message's send / receive
 *     "close TS"                    fo_follow_close */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fo_follow.h"
#include "test_support.h"

#define LINES(...) ((const char *const[]){__VA_ARGS__, NULL})

typedef struct {
    char log[512];
} changes;

static void on_change(void *arg, uint64_t pid, fo_follow_change change)
{
    changes *c = arg;
    size_t len = strlen(c->log);
    snprintf(c->log + len, sizeof c->log - len, "%s%s %" PRIu64, len > 0 ? ", " : "",
             change == FO_FOLLOW_JOINED ? "joined" : "left", pid);
}

typedef struct {
    fo_session *s;
    fo_graph *g;
    changes c;
    fo_follow f;
} trace;

static int setup(void **state)
{
    trace *t = calloc(1, sizeof *t);
    fo_graph_limits l = fo_graph_limits_default();
    if (t == NULL)
        return -1;
    t->s = ts_new_session(NULL);
    t->g = fo_graph_new(&l, 1);
    t->f.session = t->s;
    t->f.graph = t->g;
    t->f.changed = on_change;
    t->f.arg = &t->c;
    *state = t;
    return t->g == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    trace *t = *state;
    fo_session_free(t->s);
    fo_graph_free(t->g);
    free(t);
    return 0;
}

static void corr(trace *t, fo_corr_kind kind, int is_send, uint64_t from, uint64_t to, uint64_t tag, int64_t ts)
{
    fo_corr c = {kind, is_send, from, to, tag, 0};
    fo_follow_correlation(&t->f, &c, ts);
}

static fo_waker_kind waker(const char *word, uint64_t *sender)
{
    *sender = 0;
    if (strcmp(word, "port") == 0)
        return FO_WAKER_PORT;
    if (strcmp(word, "timer") == 0)
        return FO_WAKER_TIMER;
    *sender = strtoull(word, NULL, 10);
    return FO_WAKER_PROCESS;
}

static void run(trace *t, const char *line)
{
    uint64_t pid = 0, other = 0, tag = 0;
    int64_t ts = 0;
    char word[64] = "", arg[64] = "";
    if (sscanf(line, "root %" SCNu64 " %" SCNd64, &pid, &ts) == 2 && strncmp(line, "root", 4) == 0) {
        fo_graph_root(t->g, pid, ts);
    } else if (sscanf(line, "close %" SCNd64, &ts) == 1 && strncmp(line, "close", 5) == 0) {
        fo_follow_close(&t->f, ts, 1);
    } else if (sscanf(line, "spawn %" SCNu64 " %" SCNu64 " %" SCNd64, &pid, &other, &ts) == 3) {
        fo_follow_spawned(&t->f, pid, other, ts);
    } else if (sscanf(line, "%63s %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNd64, word, &pid, &other, &tag, &ts) == 5 &&
               strspn(word, "abcdefghijklmnopqrstuvwxyz") == strlen(word)) {
        fo_corr_kind kind = strcmp(word, "req") == 0 || strcmp(word, "took") == 0 ? FO_CORR_REQUEST : FO_CORR_REPLY;
        int send = strcmp(word, "req") == 0 || strcmp(word, "answer") == 0;
        corr(t, kind, send, pid, other, tag, ts);
    } else if (sscanf(line, "%63s %" SCNu64 " %" SCNu64 " %" SCNd64, word, &pid, &other, &ts) == 4 &&
               (strcmp(word, "msg") == 0 || strcmp(word, "tookmsg") == 0)) {
        corr(t, FO_CORR_MESSAGE, strcmp(word, "msg") == 0, pid, other, 0, ts);
    } else if (sscanf(line, "%" SCNu64 " %" SCNd64 " rcv %63s", &pid, &ts, arg) == 3) {
        uint64_t sender;
        fo_waker_kind kind = waker(arg, &sender);
        fo_follow_received(&t->f, pid, ts, kind, sender);
    } else if (sscanf(line, "%" SCNu64 " %" SCNd64 " %63s %63s", &pid, &ts, word, arg) >= 3) {
        fo_event ev;
        if (strcmp(word, "call") == 0)
            ev = ev_call(pid, ts, arg, NULL);
        else if (strcmp(word, "ret") == 0)
            ev = ev_ret(pid, ts, arg);
        else if (strcmp(word, "out") == 0)
            ev = ev_kind(FO_EV_OUT, pid, ts);
        else if (strcmp(word, "in") == 0)
            ev = ev_kind(FO_EV_IN, pid, ts);
        else if (strcmp(word, "gcstart") == 0 || strcmp(word, "gcend") == 0) {
            ev = ev_kind(strcmp(word, "gcstart") == 0 ? FO_EV_GC_START : FO_EV_GC_END, pid, ts);
            /* "P TS gcstart heap=W": with the heap in use */
            if (strncmp(arg, "heap=", 5) == 0) {
                ev.flags |= FO_EVF_HAS_HEAP;
                ev.heap_words = strtoull(arg + 5, NULL, 10);
            }
        }
        else if (strcmp(word, "exit") == 0) {
            fo_follow_exit(&t->f, pid, ts, 0);
            return;
        } else if (strcmp(word, "sample") == 0) {
            fo_mfa frame = ts_mfa(arg);
            if (fo_follow_before_sample(&t->f, pid))
                fo_session_sample(t->s, pid, ts, &frame, 1, 0);
            return;
        } else {
            fail_msg("bad script line '%s'", line);
            return;
        }
        fo_follow_event(&t->f, &ev);
    } else {
        fail_msg("bad script line '%s'", line);
    }
}

static void script(trace *t, const char *const *lines)
{
    for (size_t i = 0; lines[i] != NULL; i++)
        run(t, lines[i]);
}

static fo_span_info span(const trace *t, uint32_t id)
{
    fo_span_info si;
    assert_int_equal(fo_graph_span(t->g, id, &si), 1);
    return si;
}

/* Process.sleep(30): the wait stays a WAITING leaf and a timer's. */
static void test_sleep_is_waiting_in_the_stacks(void **state)
{
    trace *t = *state;
    script(t, LINES("root 1 0", "1 0 call app:run/0", "1 10 out", "1 40 in", "1 40 rcv timer",
                    "1 42 ret app:run/0", "close 50"));
    ts_assert_pid(t->s, 1, LINES("app:run/0 20", "app:run/0;WAITING 30"));
    fo_span_info root = span(t, 0);
    assert_int_equal(root.unattributed_by[FO_CAUSE_TIMER], 30);
    assert_int_equal(root.self_ns, 20);
}

/* Task.async + await: the spawned child joins, its answer ends its work
 * span, and the root's wait on it leaves the root's stacks. */
static void test_task_wait_moves_to_attributed(void **state)
{
    trace *t = *state;
    script(t, LINES("root 1 0", "1 0 call app:run/0",
                    "spawn 1 2 5", "2 5 call task:run/0",
                    "1 6 out",
                    "answer 2 1 77 36", "2 37 exit",
                    "1 38 in", "1 38 rcv 2",
                    "1 40 ret app:run/0", "close 50"));
    assert_string_equal(t->c.log, "joined 2");
    ts_assert_pid(t->s, 1, LINES("app:run/0 18", "app:run/0;WAITING 2", "app:run/0;ATTRIBUTED 30"));
    ts_assert_pid(t->s, 2, LINES("task:run/0 31")); /* up to its answer */
    assert_int_equal(fo_graph_get_stats(t->g)->unmatched_reply_sends, 0); /* a message, not a reply */
    assert_int_equal(span(t, 0).attributed_wait_ns, 30);
}

/* A server's stacks stop at its reply; a port message later (its socket)
 * resumes them with the wait it ended, in a continuation span. */
static void test_continuation_resumes_the_stacks_with_its_wait(void **state)
{
    trace *t = *state;
    script(t, LINES("root 1 0", "1 0 call app:run/0",
                    "req 1 2 9 10", "1 11 out",
                    "took 1 2 9 12", "2 12 call srv:handle/0",
                    "answer 2 1 9 15",          /* the reply: B pauses */
                    "2 16 ret srv:loop/0", "2 16 out",  /* not charged: dormant */
                    "1 16 in", "1 16 rcv 2", "got 2 1 9 16", "1 17 out",
                    "2 50 in", "2 50 rcv port",  /* its socket: a continuation */
                    "2 51 call srv:parse/0",
                    "msg 2 1 55", "2 56 out",
                    "1 57 in", "1 57 rcv 2", "1 58 ret app:run/0",
                    "close 60"));
    assert_string_equal(t->c.log, "joined 2, joined 2");
    ts_assert_pid(t->s, 2, LINES("srv:handle/0 3", "WAITING 34", "(root) 1", "srv:parse/0 5"));
    fo_span_info cont = span(t, 2);
    assert_int_equal(cont.kind, FO_SPAN_CONTINUATION);
    assert_int_equal(cont.started_ns, 16);
    assert_int_equal(cont.ended_ns, 56);
    assert_int_equal(cont.unattributed_by[FO_CAUSE_PORT], 34);
    /* the root's two waits: 3 of 5 on the request, all 40 on the continuation */
    assert_int_equal(span(t, 0).attributed_wait_ns, 43);
}

/* A worker done with the trace's job, woken by a process outside: it
 * leaves; its idle is not in its stacks, nor what it does next. */
static void test_leaving_keeps_the_idle_out(void **state)
{
    trace *t = *state;
    script(t, LINES("root 1 0", "1 0 call app:run/0",
                    "msg 1 3 5", "tookmsg 1 3 6", "3 6 call w:job/0",
                    "msg 3 9 8",                 /* its part: a message on */
                    "3 10 out", "3 40 in", "3 40 rcv 99", "3 41 call w:other/0", "3 50 out",
                    "close 60"));
    assert_string_equal(t->c.log, "joined 3, left 3");
    ts_assert_pid(t->s, 3, LINES("w:job/0 4"));
    fo_span_info work = span(t, 1);
    assert_int_equal(work.ended_ns, 10);
    assert_int_equal(work.status, FO_SPAN_OK);
}

/* A stack sample between a follower's scheduled-in and its receive event
 * applies the held-back in first: the sample lands on a running process. */
static void test_a_sample_takes_the_held_back_in_first(void **state)
{
    trace *t = *state;
    script(t, LINES("root 1 0", "1 0 sample app:run/0", "1 10 out", "1 20 in", "1 21 sample app:run/0",
                    "1 21 rcv timer", "close 30"));
    ts_assert_pid(t->s, 1, LINES("app:run/0 20", "app:run/0;WAITING 10", "app:run/0 samples=2 weight=0"));
}

/* Close: a follower idle since its last work stops there. */
static void test_close_stops_idle_followers_at_their_idle(void **state)
{
    trace *t = *state;
    script(t, LINES("root 1 0", "1 0 call app:run/0", "spawn 1 2 1", "2 1 call t:run/0", "2 5 out",
                    "close 30"));
    ts_assert_pid(t->s, 2, LINES("t:run/0 4"));
    assert_int_equal(span(t, 1).ended_ns, 5);
}

/* Preempted: scheduled out and in again with no message, it runs on. The
 * wait it seemed is RUNNABLE in its stacks and runnable in its span. */
static void test_preempted_is_runnable_in_stacks_and_spans(void **state)
{
    trace *t = *state;
    script(t, LINES("root 1 0", "1 0 call app:run/0", "1 10 out", "1 14 in", "1 15 call app:f/0", "close 30"));
    ts_assert_pid(t->s, 1, LINES("app:run/0 11", "app:run/0;RUNNABLE 4", "app:run/0;app:f/0 15"));
    fo_span_info root = span(t, 0);
    assert_int_equal(root.runnable_ns, 4);
    assert_int_equal(root.wait_ns, 0);
    assert_int_equal(root.self_ns, 26);
}

/* A BIF that yields (binary_to_list/1 of a large binary): out and in
 * again with no call between. The runs between are on a CPU, the pieces
 * off it runnable. */
static void test_a_yielding_bif_runs_between_its_runnable_pieces(void **state)
{
    trace *t = *state;
    script(t, LINES("root 1 0", "1 0 call app:run/0", "1 10 out", "1 12 in", "1 15 out", "1 17 in", "1 20 out",
                    "1 21 in", "1 22 call app:f/0", "close 30"));
    ts_assert_pid(t->s, 1, LINES("app:run/0 17", "app:run/0;RUNNABLE 5", "app:run/0;app:f/0 8"));
    fo_span_info root = span(t, 0);
    assert_int_equal(root.runnable_ns, 5);
    assert_int_equal(root.self_ns, 25);
}

/* ... but a worker that may leave (its part sent) keeps its wake held
 * back through a signal: woken by a process outside, it leaves, and
 * nothing of the wait is in its stacks. */
static void test_a_signal_keeps_a_leaving_workers_idle_out(void **state)
{
    trace *t = *state;
    script(t, LINES("root 1 0", "1 0 call app:run/0", "msg 1 3 5", "tookmsg 1 3 6", "3 6 call w:job/0",
                    "msg 3 9 8", "3 10 out", "3 20 in", "3 20 gcstart", "3 21 gcend", "3 21 out", "3 40 in",
                    "3 40 rcv 99", "close 60"));
    assert_string_equal(t->c.log, "joined 3, left 3");
    ts_assert_pid(t->s, 3, LINES("w:job/0 4"));
    assert_int_equal(fo_session_stats(t->s)->clock_skews, 0);
    assert_int_equal(span(t, 1).gc_ns, 0);
}

/* A large heap is collected on a dirty scheduler: out, in there, the
 * collection, out, in back. Nothing woke it: both off-CPU pieces are
 * runnable, the collection its own class, in the stacks and the span. */
static void test_dirty_collection_is_gc_and_runnable(void **state)
{
    trace *t = *state;
    script(t, LINES("root 1 0", "1 0 call app:run/0", "1 10 out", "1 12 in", "1 12 gcstart", "1 16 gcend",
                    "1 16 out", "1 19 in", "1 20 call app:f/0", "close 30"));
    ts_assert_pid(t->s, 1,
                  LINES("app:run/0 11", "app:run/0;GC_MINOR 4", "app:run/0;RUNNABLE 5", "app:run/0;app:f/0 10"));
    fo_span_info root = span(t, 0);
    assert_int_equal(root.gc_ns, 4);
    assert_int_equal(root.runnable_ns, 5);
    assert_int_equal(root.wait_ns, 0);
    assert_int_equal(root.self_ns, 21);
    assert_int_equal(fo_session_stats(t->s)->gc_minor_ns, 4);
}

/* The VM may collect a process it just scheduled in, before its receive
 * event: the collection runs (the held-back in applies first) but does not
 * say what woke it; the timer does. */
static void test_a_collection_before_the_receive_event_settles_nothing(void **state)
{
    trace *t = *state;
    script(t, LINES("root 1 0", "1 0 call app:run/0", "1 10 out", "1 20 in", "1 21 gcstart", "1 23 gcend",
                    "1 24 rcv timer", "close 30"));
    ts_assert_pid(t->s, 1, LINES("app:run/0 18", "app:run/0;GC_MINOR 2", "app:run/0;WAITING 10"));
    fo_span_info root = span(t, 0);
    assert_int_equal(root.unattributed_by[FO_CAUSE_TIMER], 10);
    assert_int_equal(root.gc_ns, 2);
    assert_int_equal(root.runnable_ns, 0);
    assert_int_equal(root.self_ns, 18);
}

/* A server's collection counts inside its request span only: one before
 * the request (not yet a follower) and the part after its reply do not. */
static void test_collections_count_inside_spans(void **state)
{
    trace *t = *state;
    script(t, LINES("root 1 0", "1 0 call app:run/0", "2 1 gcstart", "2 3 gcend",
                    "req 1 2 9 10", "1 11 out",
                    "took 1 2 9 12", "2 12 call srv:handle/0", "2 13 gcstart",
                    "2 15 gcend", "2 18 gcstart",
                    "answer 2 1 9 20", "2 22 gcend",
                    "1 23 in", "1 23 rcv 2", "got 2 1 9 23", "close 30"));
    ts_assert_pid(t->s, 2, LINES("srv:handle/0 4", "srv:handle/0;GC_MINOR 4"));
    fo_span_info req = span(t, 1);
    assert_int_equal(req.kind, FO_SPAN_REQUEST);
    assert_int_equal(req.gc_ns, 4);
    assert_int_equal(req.self_ns, 4);
    assert_int_equal(fo_graph_get_stats(t->g)->collections, 2);
}

/* Allocation across requests: a server's collections count inside its
 * spans only; between two requests its level stays (the pause) and its
 * collections there set it, so the next request counts from what the
 * last one left, and nothing allocated outside is counted. */
static void test_a_servers_heap_level_carries_over_between_requests(void **state)
{
    trace *t = *state;
    script(t, LINES("root 1 0", "1 0 call app:run/0",
                    "req 1 2 9 10", "1 11 out", "took 1 2 9 12", "2 12 call srv:handle/0",
                    "2 13 gcstart heap=100", "2 14 gcend heap=10", /* the first: its level */
                    "2 15 gcstart heap=510", "2 16 gcend heap=0",  /* 500 */
                    "answer 2 1 9 20", "1 21 in", "1 21 rcv 2", "got 2 1 9 21",
                    "2 25 gcstart heap=7000", "2 26 gcend heap=40", /* outside: the level only */
                    "req 1 2 8 30", "1 31 out", "took 1 2 8 32", "2 32 call srv:handle/0",
                    "2 33 gcstart heap=340", "2 34 gcend heap=0", /* 300 */
                    "answer 2 1 8 40", "1 41 in", "1 41 rcv 2", "got 2 1 8 41",
                    /* no collection between: the pause kept the level */
                    "req 1 2 7 50", "1 51 out", "took 1 2 7 52", "2 52 call srv:handle/0",
                    "2 53 gcstart heap=200", "2 54 gcend heap=0", /* 200 */
                    "answer 2 1 7 60", "1 61 in", "1 61 rcv 2", "got 2 1 7 61", "close 70"));
    const fo_stats *st = fo_session_stats(t->s);
    assert_int_equal(st->alloc_words, 1000);
    assert_int_equal(st->alloc_samples, 3);
    assert_int_equal(st->alloc_unknown, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sleep_is_waiting_in_the_stacks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_task_wait_moves_to_attributed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_continuation_resumes_the_stacks_with_its_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leaving_keeps_the_idle_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_sample_takes_the_held_back_in_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_stops_idle_followers_at_their_idle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preempted_is_runnable_in_stacks_and_spans, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dirty_collection_is_gc_and_runnable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_yielding_bif_runs_between_its_runnable_pieces, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_signal_keeps_a_leaving_workers_idle_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_collection_before_the_receive_event_settles_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_collections_count_inside_spans, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_servers_heap_level_carries_over_between_requests, setup,
                                        teardown),
    };
    return cmocka_run_group_tests_name("follow", tests, NULL, NULL);
}
