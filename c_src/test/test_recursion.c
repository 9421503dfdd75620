/* Collapsing direct recursion (fo_session_set_collapse_recursion): a
 * frame calling itself is one frame whose callees merge, returns into it
 * count its calls down, max_depth counts frames after collapsing, and the
 * sample and CPU-sample paths collapse the stacks they are given the same
 * way. Off, recursion keeps its real depth (the old behaviour). Exact
 * folded stacks and exact counters. */
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
#define DEFAULT_LIMITS {0, 0, 0, 0, 0}

/* A body recursion like lists:map/2 three levels deep, each level calling
 * f first: f's calls from every level merge under the one map frame. */
#define MAP_SCRIPT(...)                                                                              \
    LINES(__VA_ARGS__ "1 0 call m:main/0", "1 10 call m:map/2 from m:main/0", /* main: 10 */      \
          "1 20 call m:f/1 from m:map/2",                                     /* map: 10 */       \
          "1 25 ret m:map/2",                                                 /* f: 5 */          \
          "1 30 call m:map/2 from m:map/2",                                   /* map: 5 */        \
          "1 40 call m:f/1 from m:map/2",                                     /* map: 10 */       \
          "1 45 ret m:map/2",                                                 /* f: 5 */          \
          "1 50 call m:map/2 from m:map/2",                                   /* map: 5 */        \
          "1 60 ret m:map/2",                                                 /* innermost: 10 */ \
          "1 70 ret m:map/2",                                                 /* middle: 10 */    \
          "1 80 ret m:main/0",                                                /* outer: 10 */     \
          "close 100")                                                        /* main: 20 */

// clang-format off
static const ts_case recursion_cases[] = {
    {"direct_recursion_collapses_and_callees_merge", DEFAULT_LIMITS,
     MAP_SCRIPT("collapse_recursion", ),
     LINES("1 m:main/0 30", "1 m:main/0;m:map/2 60", "1 m:main/0;m:map/2;m:f/1 10"),
     "events=11 collapsed_recursion=2"},

    {"off_recursion_keeps_its_real_depth", DEFAULT_LIMITS,
     MAP_SCRIPT(),
     LINES("1 m:main/0 30", "1 m:main/0;m:map/2 25", "1 m:main/0;m:map/2;m:f/1 5",
           "1 m:main/0;m:map/2;m:map/2 25", "1 m:main/0;m:map/2;m:map/2;m:f/1 5",
           "1 m:main/0;m:map/2;m:map/2;m:map/2 10"),
     "events=11"},

    {"return_to_counts_the_run_down_before_popping", DEFAULT_LIMITS,
     LINES("collapse_recursion",
           "1 0 call m:main/0",
           "1 10 call m:r/1 from m:main/0",
           "1 20 call m:r/1 from m:r/1",
           "1 30 call m:r/1 from m:r/1",  /* [main, r x3] */
           "1 40 ret m:r/1",              /* [main, r x2] */
           "1 50 ret m:r/1",              /* [main, r]: r is still on top */
           "1 60 call m:g/0 from m:r/1",  /* so g goes under r, no resync */
           "1 70 ret m:r/1",              /* [main, r] */
           "1 80 ret m:main/0",           /* [main] */
           "1 90 call m:h/0 from m:main/0",
           "close 100"),
     LINES("1 m:main/0 20", "1 m:main/0;m:r/1 60", "1 m:main/0;m:r/1;m:g/0 10",
           "1 m:main/0;m:h/0 10"),
     "events=10 collapsed_recursion=2"},

    {"return_to_undefined_pops_a_repeat_first", DEFAULT_LIMITS,
     LINES("collapse_recursion",
           "1 0 call m:main/0",
           "1 10 call m:r/1 from m:main/0",
           "1 20 call m:r/1 from m:r/1",  /* [main, r x2] */
           "1 30 ret undefined",          /* [main, r] */
           "1 40 ret undefined",          /* [main] */
           "1 50 call m:h/0 from m:main/0",
           "close 60"),
     LINES("1 m:main/0 20", "1 m:main/0;m:r/1 30", "1 m:main/0;m:h/0 10"),
     "events=6 collapsed_recursion=1"},

    {"a_return_that_skips_the_run_unwinds_all_of_it", DEFAULT_LIMITS,
     /* an exception out of the recursion, caught in main */
     LINES("collapse_recursion",
           "1 0 call m:main/0",
           "1 10 call m:r/1 from m:main/0",
           "1 20 call m:r/1 from m:r/1",
           "1 30 call m:r/1 from m:r/1",
           "1 40 call m:g/0 from m:r/1",  /* [main, r x3, g] */
           "1 50 ret m:main/0",           /* [main] */
           "1 60 call m:h/0 from m:main/0",
           "close 70"),
     LINES("1 m:main/0 20", "1 m:main/0;m:r/1 30", "1 m:main/0;m:r/1;m:g/0 10",
           "1 m:main/0;m:h/0 10"),
     "events=7 collapsed_recursion=2"},

    {"a_tail_call_from_below_the_run_keeps_the_caller", DEFAULT_LIMITS,
     /* the caller found below the top: unwound to the top of its run */
     LINES("collapse_recursion",
           "1 0 call m:main/0",
           "1 10 call m:r/1 from m:main/0",
           "1 20 call m:r/1 from m:r/1",
           "1 30 call m:g/0 from m:r/1",
           "1 40 call m:k/0 from m:g/0",  /* [main, r x2, g, k] */
           "1 50 call m:t/0 from m:r/1",  /* k tail-called out of g: [main, r x2, t] */
           "1 60 ret m:r/1",              /* [main, r x2] */
           "1 70 ret m:r/1",              /* [main, r] */
           "1 80 ret m:main/0",           /* [main] */
           "close 90"),
     LINES("1 m:main/0 20", "1 m:main/0;m:r/1 40", "1 m:main/0;m:r/1;m:g/0 10",
           "1 m:main/0;m:r/1;m:g/0;m:k/0 10", "1 m:main/0;m:r/1;m:t/0 10"),
     "events=9 collapsed_recursion=1 resyncs=1"},

    {"mutual_recursion_is_not_direct", DEFAULT_LIMITS,
     LINES("collapse_recursion",
           "1 0 call m:a/0",
           "1 10 call m:b/0 from m:a/0",
           "1 20 call m:a/0 from m:b/0",
           "1 30 call m:b/0 from m:a/0",
           "1 40 ret m:a/0",
           "1 50 ret m:b/0",
           "1 60 ret m:a/0",
           "close 70"),
     LINES("1 m:a/0 20", "1 m:a/0;m:b/0 20", "1 m:a/0;m:b/0;m:a/0 20", "1 m:a/0;m:b/0;m:a/0;m:b/0 10"),
     "events=7"},

    {"a_recursion_between_other_frames_collapses_each_run", DEFAULT_LIMITS,
     /* r r g r r: two runs of r, apart */
     LINES("collapse_recursion",
           "1 0 call m:r/0",
           "1 10 call m:r/0 from m:r/0",
           "1 20 call m:g/0 from m:r/0",
           "1 30 call m:r/0 from m:g/0",
           "1 40 call m:r/0 from m:r/0",
           "1 50 ret m:r/0",
           "1 60 ret m:g/0",
           "1 70 ret m:r/0",
           "1 80 ret m:r/0",
           "close 90"),
     LINES("1 m:r/0 40", "1 m:r/0;m:g/0 20", "1 m:r/0;m:g/0;m:r/0 30"),
     "events=9 collapsed_recursion=2"},

    {"recursion_with_an_unseen_caller_collapses", DEFAULT_LIMITS,
     /* the trace starts inside r: its caller r is pushed, then r on it */
     LINES("collapse_recursion",
           "1 0 call m:r/0 from m:r/0",
           "1 10 ret m:r/0",
           "1 20 ret m:x/0",
           "close 30"),
     LINES("1 m:r/0 20", "1 m:x/0 10"),
     "events=3 collapsed_recursion=1 resyncs=1"},

    {"max_depth_applies_after_collapsing", {0, 3, 0, 0, 0},
     /* main, r x100 and f fit in 3 frames; f's callee is the fourth */
     LINES("collapse_recursion",
           "1 0 call m:main/0",
           "1 10 call m:r/1 from m:main/0",
           "1 11 call m:r/1 from m:r/1",
           "1 12 call m:r/1 from m:r/1",
           "1 13 call m:r/1 from m:r/1",
           "1 20 call m:f/0 from m:r/1",
           "1 30 call m:g/0 from m:f/0",
           "1 40 ret m:f/0",
           "1 50 ret m:r/1",
           "1 60 ret m:r/1",
           "1 70 ret m:r/1",
           "1 80 ret m:r/1",
           "1 90 ret m:main/0",
           "close 100"),
     LINES("1 m:main/0 20", "1 m:main/0;m:r/1 50", "1 m:main/0;m:r/1;m:f/0 20",
           "1 m:main/0;m:r/1;m:f/0;" CAP " 10"),
     "events=13 collapsed_recursion=3 depth_truncations=1 truncated_stacks=1"},

    {"a_collapsed_run_needs_one_stack_entry", {0, 0, 0, 0, 2},
     /* max_stack_frames 2 holds main and the whole run of r */
     LINES("collapse_recursion",
           "1 0 call m:main/0",
           "1 10 call m:r/1 from m:main/0",
           "1 20 call m:r/1 from m:r/1",
           "1 30 call m:r/1 from m:r/1",
           "1 40 ret m:r/1",
           "1 50 ret m:r/1",
           "1 60 ret m:main/0",
           "close 70"),
     LINES("1 m:main/0 20", "1 m:main/0;m:r/1 50"),
     "events=7 collapsed_recursion=2"},

    {"a_sampled_stack_collapses_and_returns_count_it_down", DEFAULT_LIMITS,
     LINES("collapse_recursion",
           "1 0 sample m:main/0;m:map/2;m:map/2;m:map/2;m:f/1",
           "1 100 sample m:main/0;m:map/2;m:map/2;m:g/0", /* map kept, its run now 2 (1 folded) */
           "1 110 ret m:map/2",                            /* [main, map x2] */
           "1 120 ret m:map/2",                            /* [main, map] */
           "1 130 ret m:main/0",                           /* [main] */
           "close 150"),
     LINES("1 m:main/0 20", "1 m:main/0;m:map/2 20", "1 m:main/0;m:map/2;m:f/1 100",
           "1 m:main/0;m:map/2;m:g/0 10",
           "1 m:main/0;m:map/2;m:f/1 samples=1 weight=0", "1 m:main/0;m:map/2;m:g/0 samples=1 weight=0"),
     "events=5 samples=2 collapsed_recursion=3"},

    {"off_a_sampled_stack_keeps_its_real_depth", DEFAULT_LIMITS,
     LINES("1 0 sample m:main/0;m:map/2;m:map/2;m:f/1",
           "close 10"),
     LINES("1 m:main/0;m:map/2;m:map/2;m:f/1 10", "1 m:main/0;m:map/2;m:map/2;m:f/1 samples=1 weight=0"),
     "events=1 samples=1"},

    {"a_sampled_stack_counts_max_depth_after_collapsing", {0, 2, 0, 0, 0},
     LINES("collapse_recursion",
           "1 0 sample m:main/0;m:r/0;m:r/0;m:r/0;m:r/0",
           "1 10 sample m:main/0;m:r/0;m:r/0;m:g/0",
           "close 20"),
     LINES("1 m:main/0;m:r/0 10", "1 m:main/0;m:r/0;" CAP " 10",
           "1 m:main/0;m:r/0 samples=1 weight=0", "1 m:main/0;m:r/0;" CAP " samples=1 weight=0"),
     /* each sampled stack counts the frames it folds: 3, then 1 */
     "events=2 samples=2 collapsed_recursion=4 depth_truncations=1 truncated_stacks=1"},

    {"cpu_samples_collapse", DEFAULT_LIMITS,
     LINES("collapse_recursion",
           "cpu_sampled",
           "1 0 in",
           "1 cpu m:main/0;m:map/2;m:map/2;m:map/2;m:f/1",
           "1 cpu m:main/0;m:map/2;m:map/2;m:g/0",
           "1 100 out",
           "close 100",
           "settle"),
     LINES("1 m:main/0;m:map/2;m:f/1 50", "1 m:main/0;m:map/2;m:g/0 50",
           "1 m:main/0;m:map/2;m:f/1 samples=1 weight=0", "1 m:main/0;m:map/2;m:g/0 samples=1 weight=0"),
     "events=4 samples=2 collapsed_recursion=3"},

    {"a_cut_cpu_chain_of_a_recursion_lands_on_its_collapsed_frame", DEFAULT_LIMITS,
     /* r seen under a;b; a cut chain of r frames only goes under a;b, on
      * the one r frame */
     LINES("collapse_recursion",
           "cpu_sampled",
           "at 1 5 m:a/0;m:b/0;m:r/0;m:r/0",
           "at 1 15 ^m:r/0;m:r/0;m:r/0;m:f/0",
           "1 0 in@1",
           "1 30 out",
           "close 30",
           "settle"),
     LINES("1 m:a/0;m:b/0;m:r/0 15", "1 m:a/0;m:b/0;m:r/0;m:f/0 15",
           "1 m:a/0;m:b/0;m:r/0 samples=1 weight=0", "1 m:a/0;m:b/0;m:r/0;m:f/0 samples=1 weight=0"),
     "events=4 samples=2 cpu_cut_samples=1 collapsed_recursion=3"},

    {"a_cpu_context_path_collapses", DEFAULT_LIMITS,
     /* the wait in m:w/0, seen under a;r;r;w: under the one r frame */
     LINES("collapse_recursion",
           "cpu_sampled",
           "at 1 5 m:a/0;m:r/0;m:p/0",
           "1 0 in@1",
           "context 1 m:w/0 m:a/0;m:r/0;m:r/0;m:w/0",
           "1 10 out@m:w/0",
           "close 30",
           "settle"),
     LINES("1 m:a/0;m:r/0;m:p/0 10", "1 m:a/0;m:r/0;m:w/0;SLEEP 20",
           "1 m:a/0;m:r/0;m:p/0 samples=1 weight=0"),
     "events=3 samples=1 cpu_contexts=1"},
};
// clang-format on

/* A deep recursion stays one frame deep whatever its depth, and returns
 * bring the process back to where it started. */
static void test_deep_recursion_is_one_frame(void **state)
{
    (void)state;
    fo_limits l = ts_limits(0, 0, 0, 0, 0); /* max_depth 512 */
    fo_session *s = ts_new_session(&l);
    fo_session_set_collapse_recursion(s, 1);
    const uint32_t depth = 30000;
    fo_mfa main_mfa = ts_mfa("m:main/0"), map = ts_mfa("m:map/2"), f = ts_mfa("m:f/1");
    int64_t ts = 0;
    fo_event ev = ev_call_mfa(1, ts, main_mfa, NULL);
    fo_session_apply(s, &ev);
    ev = ev_call_mfa(1, ts += 10, map, &main_mfa);
    fo_session_apply(s, &ev);
    for (uint32_t i = 0; i < depth; i++) {
        ev = ev_call_mfa(1, ts += 1, f, &map);
        fo_session_apply(s, &ev);
        ev = ev_ret_mfa(1, ts += 2, &map);
        fo_session_apply(s, &ev);
        ev = ev_call_mfa(1, ts += 1, map, &map);
        fo_session_apply(s, &ev);
    }
    for (uint32_t i = 0; i < depth; i++) {
        ev = ev_ret_mfa(1, ts += 1, &map);
        fo_session_apply(s, &ev);
    }
    ev = ev_ret_mfa(1, ts += 1, &main_mfa);
    fo_session_apply(s, &ev);
    ev = ev_call_mfa(1, ts += 5, f, &main_mfa);
    fo_session_apply(s, &ev);
    fo_session_close(s, ts += 5);
    ts_check_tree(s);
    assert_int_equal(ts_pid_max_depth(s, 1), 3);
    assert_int_equal(ts_pid_total(s, 1), (uint64_t)ts);
    const fo_stats *st = fo_session_stats(s);
    assert_int_equal(st->collapsed_recursion, depth);
    assert_int_equal(st->truncated_stacks, 0);
    assert_int_equal(st->resyncs, 0);
    /* main: 10 before map and 5 after it; map: 2 per level on the way
     * in, 1 per return and 1 before its own; f: 2 per call from map (and
     * the 5 up to the close from main) */
    char *got = ts_render_pid(s, 1, 0);
    char want[256];
    snprintf(want, sizeof want,
             "m:main/0 15\nm:main/0;m:f/1 5\nm:main/0;m:map/2 %" PRIu32 "\nm:main/0;m:map/2;m:f/1 %" PRIu32 "\n",
             3u * depth + 1u, 2u * depth);
    ts_assert_text(got, want, "deep recursion");
    free(got);
    fo_session_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deep_recursion_is_one_frame),
    };
    int failed = ts_run_cases("recursion_cases", recursion_cases,
                              sizeof recursion_cases / sizeof recursion_cases[0]);
    failed += cmocka_run_group_tests(tests, NULL, NULL);
    return failed == 0 ? 0 : 1;
}
