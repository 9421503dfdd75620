/* Stack samples (fo_session_sample): a sampled stack holds until the
 * process's next event, in/out events split it into on- and off-CPU time
 * exactly, and the bounds apply as they do to calls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "test_support.h"

// clang-format off
#define LINES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define DEFAULT_LIMITS {0, 0, 0, 0, 0}
#define CAP TS_DEPTH_CAP_NAME

/* fo_limits field order: max_nodes, max_depth, max_processes, max_frames,
 * max_stack_frames. */
static const ts_case sample_cases[] = {
    {"a_sample_holds_until_the_next_event", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:b/0",
           "1 100 sample m:a/0;m:c/0", /* a;b: 100 */
           "1 250 sample m:a/0",       /* a;c: 150 */
           "close 300"),               /* a: 50 */
     LINES("1 m:a/0;m:b/0 100", "1 m:a/0;m:c/0 150", "1 m:a/0 50"), "events=3 samples=3"},

    {"in_and_out_split_a_sample_exactly", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:b/0",
           "1 40 out",           /* a;b: 40 */
           "1 100 in",           /* a;b;SLEEP: 60 */
           "1 130 sample m:a/0", /* a;b: 30 */
           "close 200"),         /* a: 70 */
     LINES("1 m:a/0;m:b/0 70", "1 m:a/0;m:b/0;SLEEP 60", "1 m:a/0 70"), "events=4 samples=2"},

    {"a_sample_while_off_cpu_moves_the_rest_of_the_wait_under_it", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:b/0",
           "1 10 out",                  /* a;b: 10 */
           "1 50 sample m:a/0;m:w/0",   /* a;b;SLEEP: 40 */
           "1 90 in",                   /* a;w;SLEEP: 40 */
           "close 100"),                /* a;w: 10 */
     LINES("1 m:a/0;m:b/0 10", "1 m:a/0;m:b/0;SLEEP 40", "1 m:a/0;m:w/0;SLEEP 40",
           "1 m:a/0;m:w/0 10"),
     "events=4 samples=2"},

    {"a_wait_in_a_call_stays_waiting_after_a_sample", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0",
           "1 10 out_call",           /* a: 10 */
           "1 30 sample m:a/0;m:r/0", /* a;WAITING: 20 */
           "1 60 in",                 /* a;r;WAITING: 30 */
           "close 60"),
     LINES("1 m:a/0 10", "1 m:a/0;WAITING 20", "1 m:a/0;m:r/0;WAITING 30"),
     "events=4 samples=2"},

    {"an_empty_stack_charges_the_process_root", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0", "1 10 sample -", "close 30"),
     LINES("1 m:a/0 10", "1 (root) 20"), "events=2 samples=2"},

    {"deep_samples_fold_past_max_depth_once", {0, 2, 0, 0, 0},
     LINES("1 0 sample m:a/0;m:b/0;m:c/0;m:d/0",
           "1 10 sample m:a/0;m:b/0;m:c/0;m:d/0", /* same stack: no new pushes */
           "1 20 sample m:a/0;m:b/0;m:e/0",
           "close 40"),
     LINES("1 m:a/0;m:b/0;" CAP " 40"),
     "events=3 samples=3 depth_truncations=3 truncated_stacks=3"},

    {"samples_of_processes_past_the_limit_are_dropped", {0, 0, 1, 0, 0},
     LINES("1 0 sample m:a/0", "2 5 sample m:b/0", "close 10"),
     LINES("1 m:a/0 10"), "events=1 samples=1 dropped_events=1 process_limit_hits=1"},

    {"samples_and_calls_mix", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:b/0",
           "1 10 call m:c/0 from m:b/0", /* a;b: 10 */
           "1 30 ret m:b/0",             /* a;b;c: 20 */
           "close 35"),                  /* a;b: 5 */
     LINES("1 m:a/0;m:b/0 15", "1 m:a/0;m:b/0;m:c/0 20"), "events=3 samples=1"},

    {"an_exited_process_sampled_again_starts_afresh", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0", "1 10 exit", "1 500 sample m:b/0", "close 520"),
     LINES("1 m:a/0 10", "1 m:b/0 20"), "events=3 samples=2"},
};
// clang-format on

/* A long run of samples over a few stacks makes no new nodes once each
 * stack was seen: memory grows with distinct stacks, not with samples. */
static void test_repeated_samples_do_not_grow_the_tree(void **state)
{
    (void)state;
    fo_session *s = ts_new_session(NULL);
    const char *stacks[] = {"m:a/0;m:b/0;m:c/0", "m:a/0;m:b/0", "m:a/0;m:d/1;m:c/0"};
    char line[128];
    for (int i = 0; i < 3; i++) {
        snprintf(line, sizeof line, "1 %d sample %s", i, stacks[i]);
        ts_run_line(s, line);
    }
    uint32_t nodes = fo_session_node_count(s);
    for (int i = 3; i < 3000; i++) {
        snprintf(line, sizeof line, "1 %d sample %s", i, stacks[i % 3]);
        ts_run_line(s, line);
    }
    assert_int_equal(fo_session_node_count(s), nodes);
    assert_int_equal(fo_session_stats(s)->samples, 3000);
    ts_check_tree(s);
    fo_session_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repeated_samples_do_not_grow_the_tree),
    };
    int failed = ts_run_cases("sample_cases", sample_cases, sizeof sample_cases / sizeof sample_cases[0]);
    failed += cmocka_run_group_tests(tests, NULL, NULL);
    return failed == 0 ? 0 : 1;
}
