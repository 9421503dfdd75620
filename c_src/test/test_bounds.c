/* Bounds of c_src/core/README.md: max_depth, max_stack_frames, max_nodes,
 * max_frames, max_processes. Exact folded stacks and exact counters. */
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

#define LINES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define CAP TS_DEPTH_CAP_NAME

/* fo_limits field order: max_nodes, max_depth, max_processes, max_frames,
 * max_stack_frames; 0 keeps the default. */
// clang-format off
static const ts_case bounds_cases[] = {
    {"max_depth_folds_into_one_cap_node_and_returns_pop", {0, 3, 0, 0, 0},
     LINES("1 0 call m:a/0",
           "1 10 call m:b/0 from m:a/0", /* a: 10 */
           "1 20 call m:c/0 from m:b/0", /* a;b: 10 */
           "1 30 call m:d/0 from m:c/0", /* a;b;c: 10; depth 4 -> "…" */
           "1 40 call m:e/0 from m:d/0", /* …: 10; depth 5 stays on "…" */
           "1 45 call m:e/0 from m:e/0", /* …: 5; depth 6 */
           "1 50 ret m:e/0",             /* …: 5; depth 5 */
           "1 60 ret m:d/0",             /* …: 10; depth 4 */
           "1 70 ret m:c/0",             /* …: 10; depth 3: c again */
           "1 100 ret m:b/0",            /* a;b;c: 30 */
           "1 150 ret m:a/0",            /* a;b: 50 */
           "close 200"),                 /* a: 50 */
     LINES("1 m:a/0 60", "1 m:a/0;m:b/0 60", "1 m:a/0;m:b/0;m:c/0 40",
           "1 m:a/0;m:b/0;m:c/0;" CAP " 40"),
     "events=11 depth_truncations=3 truncated_stacks=3"},

    {"max_depth_return_to_not_found_rebases_below_cap", {0, 2, 0, 0, 0},
     LINES("1 0 call m:a/0", "1 10 call m:b/0 from m:a/0",
           "1 20 call m:c/0 from m:b/0", /* a;b: 10; "…" */
           "1 30 call m:d/0 from m:c/0", /* …: 10 */
           "1 60 ret m:x/0",             /* …: 30; stack becomes [x] */
           "close 100"),                 /* x: 40 */
     LINES("1 m:a/0 10", "1 m:a/0;m:b/0 10", "1 m:a/0;m:b/0;" CAP " 40", "1 m:x/0 40"),
     "events=5 depth_truncations=2 truncated_stacks=2 resyncs=1"},

    {"max_depth_tail_call_below_cap_returns_to_real_node", {0, 2, 0, 0, 0},
     LINES("1 0 call m:a/0", "1 10 call m:b/0 from m:a/0",
           "1 20 call m:c/0 from m:b/0", /* a;b: 10; "…" */
           "1 30 call m:d/0 from m:c/0", /* …: 10 */
           "1 50 call m:e/0 from m:a/0", /* …: 20; caller a at depth 1: [a,e] */
           "close 100"),                 /* a;e: 50 */
     LINES("1 m:a/0 10", "1 m:a/0;m:b/0 10", "1 m:a/0;m:b/0;" CAP " 30", "1 m:a/0;m:e/0 50"),
     "events=5 depth_truncations=2 truncated_stacks=2 resyncs=1"},

    {"sleep_leaf_under_depth_cap_node", {0, 2, 0, 0, 0},
     LINES("1 0 call m:a/0", "1 10 call m:b/0 from m:a/0",
           "1 20 call m:c/0 from m:b/0", /* a;b: 10; "…" */
           "1 30 out",                   /* …: 10 */
           "1 80 in",                    /* …;SLEEP: 50 */
           "1 90 ret m:b/0",             /* …: 10 */
           "close 100"),                 /* a;b: 10 */
     LINES("1 m:a/0 10", "1 m:a/0;m:b/0 20", "1 m:a/0;m:b/0;" CAP " 20",
           "1 m:a/0;m:b/0;" CAP ";SLEEP 50"),
     "events=6 depth_truncations=1 truncated_stacks=1"},

    {"max_stack_frames_overflow_counted_and_paid_back", {0, 0, 0, 0, 3},
     LINES("1 0 call m:f/0",
           "1 10 call m:f/0 from m:f/0", /* f: 10; depth 2 */
           "1 20 call m:f/0 from m:f/0", /* f;f: 10; depth 3 */
           "1 30 call m:f/0 from m:f/0", /* f;f;f: 10; overflow 1, stays */
           "1 40 call m:f/0 from m:f/0", /* f;f;f: 10; overflow 2 */
           "1 50 ret m:f/0",             /* f;f;f: 10; pays back one */
           "1 60 ret undefined",         /* f;f;f: 10; pays back the other */
           "1 70 ret m:f/0",             /* f;f;f: 10; real pop to depth 2 */
           "1 80 ret m:f/0",             /* f;f: 10; depth 1 */
           "close 100"),                 /* f: 20 */
     LINES("1 m:f/0 30", "1 m:f/0;m:f/0 20", "1 m:f/0;m:f/0;m:f/0 50"),
     "events=9 stack_overflows=2"},

    {"max_nodes_overflow_goes_to_node_cap_and_pops_back", {3, 0, 0, 0, 0},
     LINES("1 0 call m:a/0",              /* node 1 of 3 */
           "1 10 call m:b/0 from m:a/0",  /* a: 10; node 2 */
           "1 20 call m:c/0 from m:b/0",  /* a;b: 10; node 3, tree full */
           "1 30 call m:d/0 from m:c/0",  /* a;b;c: 10; -> [node_cap] */
           "1 40 call m:e/0 from m:d/0",  /* [node_cap]: 10; still no room */
           "1 50 ret m:d/0",              /* [node_cap]: 10 (d's level) */
           "1 60 ret m:c/0",              /* [node_cap]: 10; back on c */
           "1 70 ret m:b/0",              /* a;b;c: 10 */
           "1 80 call m:c/0 from m:b/0",  /* a;b: 10; existing node: fine */
           "1 90 ret m:b/0",              /* a;b;c: 10 */
           "1 100 call m:x/0 from m:b/0", /* a;b: 10; -> [node_cap] */
           "1 120 ret m:b/0",             /* [node_cap]: 20 */
           "2 200 call m:a/0",            /* new process: root is reserved, a is not */
           "2 250 ret undefined",         /* 2 [node_cap]: 50 */
           "close 300"),                  /* 1 a;b: 180, 2 root: 50 */
     LINES("1 m:a/0 10", "1 m:a/0;m:b/0 210", "1 m:a/0;m:b/0;m:c/0 30", "1 [node_cap] 50",
           "2 [node_cap] 50", "2 (root) 50"),
     "events=14 node_limit_hits=4 truncated_stacks=4"},

    {"max_frames_uninterned_frame_goes_to_node_cap", {0, 0, 0, 2, 0},
     LINES("1 0 call m:a/0",              /* frame 1 of 2 */
           "1 10 call m:b/0 from m:a/0",  /* a: 10; frame 2 */
           "1 20 call m:c/0 from m:b/0",  /* a;b: 10; c cannot be interned */
           "1 50 ret m:b/0",              /* [node_cap]: 30 */
           "1 60 call m:c/0 from m:b/0",  /* a;b: 10; again */
           "1 65 ret m:b/0",              /* [node_cap]: 5 */
           "1 70 ret m:a/0",              /* a;b: 5 */
           "close 100"),                  /* a: 30 */
     LINES("1 m:a/0 40", "1 m:a/0;m:b/0 25", "1 [node_cap] 35"),
     /* a frame-limit push needs no node past max_nodes: node_limit_hits 0 */
     "events=7 frame_limit_hits=2 truncated_stacks=2"},

    {"max_processes_drops_events_of_new_processes", {0, 0, 2, 0, 0},
     LINES("1 0 call m:a/0", "2 0 call m:a/0",
           "3 0 call m:a/0",     /* dropped */
           "3 5 ret undefined",  /* dropped */
           "1 10 exit",          /* 1 a: 10 */
           "2 30 exit"),         /* 2 a: 30 */
     LINES("1 m:a/0 10", "2 m:a/0 30"), "events=4 dropped_events=2 process_limit_hits=2"},
};
// clang-format on

/* --- generated and non-table tests ---------------------------------------- */

static void test_max_depth_deep_recursion_keeps_real_depth(void **state)
{
    (void)state;
    const uint32_t max_depth = 5;
    const uint32_t levels = 20;
    fo_limits l = ts_limits(0, max_depth, 0, 0, 0);
    fo_session *s = ts_new_session(&l);
    uint64_t charge[8] = {0}; /* index: node depth, capped at max_depth + 1 */
    int64_t t = 0;
    uint32_t depth = 1;
    fo_event ev = ev_call(1, t, "m:f/0", NULL);
    fo_session_apply(s, &ev);
    for (uint32_t i = 1; i < levels; i++) {
        t += 10;
        charge[depth > max_depth ? max_depth + 1 : depth] += 10;
        ev = ev_call(1, t, "m:f/0", "m:f/0");
        fo_session_apply(s, &ev);
        depth++;
    }
    for (uint32_t i = 1; i < levels; i++) {
        t += 7;
        charge[depth > max_depth ? max_depth + 1 : depth] += 7;
        ev = ev_ret(1, t, "m:f/0");
        fo_session_apply(s, &ev);
        depth--;
    }
    assert_int_equal(depth, 1);
    t += 3;
    charge[1] += 3;
    ev = ev_ret(1, t, NULL);
    fo_session_apply(s, &ev);
    fo_session_close(s, t + 1000); /* root: 1000 */

    ts_check_tree(s);
    char want[8][128];
    const char *expect[9];
    for (uint32_t d = 1; d <= max_depth + 1; d++) {
        char path[96] = "";
        size_t len = 0;
        for (uint32_t k = 1; k <= d && k <= max_depth; k++) {
            int w = snprintf(path + len, sizeof path - len, "%sm:f/0", k > 1 ? ";" : "");
            assert_true(w > 0 && (size_t)w < sizeof path - len);
            len += (size_t)w;
        }
        snprintf(want[d - 1], sizeof want[d - 1], "%s%s %" PRIu64, path,
                 d > max_depth ? ";" CAP : "", charge[d]);
        expect[d - 1] = want[d - 1];
    }
    expect[max_depth + 1] = "(root) 1000";
    expect[max_depth + 2] = NULL;
    ts_assert_pid(s, 1, expect);
    assert_int_equal(ts_pid_max_depth(s, 1), max_depth + 1);
    assert_int_equal(ts_pid_node_count(s, 1, 0), max_depth + 2);
    ts_assert_stats(s, "events=40 depth_truncations=15 truncated_stacks=15");
    fo_session_free(s);
}

static void test_max_stack_frames_bounds_memory(void **state)
{
    (void)state;
    /* max_depth above max_stack_frames, so only the stack bound is hit */
    fo_limits l = ts_limits(0, 2000, 0, 0, 1000);
    fo_session *s = ts_new_session(&l);
    fo_event ev = ev_call(1, 0, "m:f/0", NULL);
    fo_session_apply(s, &ev);
    int64_t t = 0;
    size_t mem = 0;
    const uint32_t pushes = 100000;
    for (uint32_t i = 1; i <= pushes; i++) {
        ev = ev_call(1, ++t, "m:f/0", "m:f/0");
        fo_session_apply(s, &ev);
        if (i == 2000)
            mem = fo_session_memory(s);
    }
    assert_int_equal(fo_session_memory(s), mem);
    /* 1 + 100000 pushes, 1000 kept */
    char spec[128];
    snprintf(spec, sizeof spec, "events=%" PRIu32 " stack_overflows=%" PRIu32, pushes + 1,
             pushes + 1 - 1000);
    ts_assert_stats(s, spec);
    /* the position stayed on the 1000th frame: pay back every counted push
     * with return_to, then one more return pops to depth 999 */
    for (uint32_t i = 0; i < pushes + 1 - 1000; i++) {
        ev = ev_ret(1, ++t, "m:f/0");
        fo_session_apply(s, &ev);
    }
    ev = ev_ret(1, ++t, "m:f/0");
    fo_session_apply(s, &ev);
    assert_int_equal(ts_pid_max_depth(s, 1), 1000);
    fo_session_close(s, t + 5);
    ts_check_tree(s);
    uint32_t n = fo_session_node_count(s);
    uint64_t deepest = 0;
    uint64_t next = 0;
    for (uint32_t id = 0; id < n; id++) {
        fo_node_info ni;
        fo_session_node(s, id, &ni);
        if (ni.depth == 1000)
            deepest = ni.self_ns;
        else if (ni.depth == 999)
            next = ni.self_ns;
    }
    /* depth 1000 was current from the push at t=999 to the last return */
    assert_int_equal(deepest, (uint64_t)(t - 999));
    assert_int_equal(next, 1 + 5);
    assert_int_equal(ts_pid_total(s, 1), (uint64_t)(t + 5));
    fo_session_free(s);
}

static void test_max_nodes_bounds_tree_and_memory(void **state)
{
    (void)state;
    const uint32_t max_nodes = 50;
    fo_limits l = ts_limits(max_nodes, 0, 0, 0, 0);
    fo_session *s = ts_new_session(&l);
    fo_mfa frames[20];
    for (int i = 0; i < 20; i++) {
        char spec[32];
        snprintf(spec, sizeof spec, "b:f%d/%d", i % 7, i / 7);
        frames[i] = ts_mfa(spec);
    }
    ts_rng rng = {12345};
    fo_mfa stack[2][8];
    uint32_t depth[2] = {0, 0};
    int64_t t = 0;
    size_t mem = 0;
    const uint32_t total = 200000;
    for (uint32_t i = 0; i < total; i++) {
        uint32_t p = ts_rng_below(&rng, 2);
        uint64_t pid = 100 + p;
        uint32_t d = depth[p];
        fo_event ev;
        t += 1 + (int64_t)ts_rng_below(&rng, 9);
        uint32_t r = ts_rng_below(&rng, 10);
        if (d == 0 || (d < 8 && r < 5)) {
            fo_mfa f = frames[ts_rng_below(&rng, 20)];
            ev = ev_call_mfa(pid, t, f, d > 0 ? &stack[p][d - 1] : NULL);
            stack[p][depth[p]++] = f;
        } else if (r < 9) {
            ev = ev_ret_mfa(pid, t, d >= 2 ? &stack[p][d - 2] : NULL);
            depth[p]--;
        } else {
            ev = ev_kind(FO_EV_GC_START, pid, t);
        }
        fo_session_apply(s, &ev);
        if (i == 20000)
            mem = fo_session_memory(s);
    }
    assert_true(fo_session_node_count(s) <= max_nodes + 2 * 2);
    assert_int_equal(fo_session_memory(s), mem);
    ts_check_tree(s);
    const fo_stats *st = fo_session_stats(s);
    assert_int_equal(st->events, total);
    assert_true(st->node_limit_hits > 0);
    assert_int_equal(st->truncated_stacks, st->node_limit_hits);
    assert_int_equal(st->dropped_events, 0);
    assert_int_equal(st->depth_truncations, 0);
    assert_int_equal(st->clock_skews, 0);
    fo_session_free(s);
}

static void test_max_processes_counts_only_followed_processes(void **state)
{
    (void)state;
    fo_limits l = ts_limits(0, 0, 3, 0, 0);
    fo_session *s = ts_new_session(&l);
    for (uint64_t pid = 1; pid <= 10; pid++) {
        for (int k = 0; k < 4; k++) {
            fo_event ev = ev_call(pid, (int64_t)(pid * 100 + (uint64_t)k), "m:a/0", NULL);
            fo_session_apply(s, &ev);
        }
    }
    fo_session_close(s, 2000);
    assert_int_equal(fo_session_process_count(s), 3);
    for (uint32_t p = 0; p < 3; p++)
        assert_int_equal(fo_session_process_pid(s, p) <= 3, 1);
    ts_check_tree(s);
    /* each followed pid: [a,a,a,a] from pid*100 to 2000 */
    ts_assert_session(s, LINES("1 m:a/0 1", "1 m:a/0;m:a/0 1", "1 m:a/0;m:a/0;m:a/0 1",
                               "1 m:a/0;m:a/0;m:a/0;m:a/0 1897", "2 m:a/0 1", "2 m:a/0;m:a/0 1",
                               "2 m:a/0;m:a/0;m:a/0 1", "2 m:a/0;m:a/0;m:a/0;m:a/0 1797",
                               "3 m:a/0 1", "3 m:a/0;m:a/0 1", "3 m:a/0;m:a/0;m:a/0 1",
                               "3 m:a/0;m:a/0;m:a/0;m:a/0 1697"));
    ts_assert_stats(s, "events=12 dropped_events=28 process_limit_hits=28");
    fo_session_free(s);
}

static void test_all_limits_one_no_crash_and_conserves(void **state)
{
    (void)state;
    fo_limits l = {1, 1, 1, 1, 1};
    fo_session *s = ts_new_session(&l);
    ts_run_script(s, (const char *const[]){"1 0 call m:a/0", "1 10 call m:b/0 from m:a/0",
                                           "1 20 call m:c/0 from m:x/0", "1 30 out", "1 40 in",
                                           "1 50 ret m:x/0", "1 60 ret undefined", "1 70 ret m:a/0",
                                           "1 80 call m:a/0", "2 85 call m:a/0", "1 90 out",
                                           "close 100", NULL});
    ts_check_tree(s);
    assert_int_equal(ts_pid_total(s, 1), 100);
    assert_int_equal(fo_session_process_count(s), 1);
    assert_true(fo_session_node_count(s) <= 1 + 2);
    const fo_stats *st = fo_session_stats(s);
    assert_int_equal(st->events, 10);
    assert_int_equal(st->dropped_events, 1);
    assert_int_equal(st->process_limit_hits, 1);
    fo_session_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_depth_deep_recursion_keeps_real_depth),
        cmocka_unit_test(test_max_stack_frames_bounds_memory),
        cmocka_unit_test(test_max_nodes_bounds_tree_and_memory),
        cmocka_unit_test(test_max_processes_counts_only_followed_processes),
        cmocka_unit_test(test_all_limits_one_no_crash_and_conserves),
    };
    int failed =
        ts_run_cases("bounds_cases", bounds_cases, sizeof bounds_cases / sizeof bounds_cases[0]);
    failed += cmocka_run_group_tests(tests, NULL, NULL);
    return failed == 0 ? 0 : 1;
}
