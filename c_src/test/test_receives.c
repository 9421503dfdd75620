/* Runnable time in exact modes: with receive events tracked, a process
 * scheduled in that runs its code with no receive event since its wait
 * began took no message, so that time was runnable (preempted, a BIF that
 * yields, a move to a dirty scheduler), a RUNNABLE leaf; a receive before
 * its `in` or after it says it waited (a SLEEP leaf); an `out` again (a
 * signal woke it) or a garbage collection says nothing yet. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_support.h"

// clang-format off
#define LINES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define DEFAULT_LIMITS {0, 0, 0, 0, 0}

static const ts_case receives_cases[] = {
    {"preempted_is_runnable", DEFAULT_LIMITS,
     LINES("track_receives", "1 0 call m:a/0", "1 10 out", "1 15 in", "1 16 call m:b/0", "close 20"),
     LINES("1 m:a/0 11", "1 m:a/0;RUNNABLE 5", "1 m:a/0;m:b/0 4"), "events=4"},

    {"untracked_every_wait_is_sleep", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "1 10 out", "1 15 in", "1 16 call m:b/0", "close 20"),
     LINES("1 m:a/0 11", "1 m:a/0;SLEEP 5", "1 m:a/0;m:b/0 4"), "events=4"},

    {"a_message_after_the_in_is_a_wait", DEFAULT_LIMITS,
     LINES("track_receives", "1 0 call m:a/0", "1 10 out", "1 30 in", "1 30 receive", "1 32 call m:b/0",
           "close 40"),
     LINES("1 m:a/0 12", "1 m:a/0;SLEEP 20", "1 m:a/0;m:b/0 8"), "events=5"},

    {"a_message_before_the_in_is_a_wait", DEFAULT_LIMITS,
     LINES("track_receives", "1 0 call m:a/0", "1 10 out", "1 20 receive", "1 30 in", "1 31 call m:b/0",
           "close 40"),
     LINES("1 m:a/0 11", "1 m:a/0;SLEEP 20", "1 m:a/0;m:b/0 9"), "events=5"},

    {"a_collection_before_the_receive_says_nothing", DEFAULT_LIMITS,
     LINES("track_receives", "1 0 call m:a/0", "1 10 out", "1 20 in", "1 21 gc_start", "1 23 gc_end",
           "1 24 receive", "1 25 call m:b/0", "close 30"),
     LINES("1 m:a/0 13", "1 m:a/0;SLEEP 10", "1 m:a/0;GC_MINOR 2", "1 m:a/0;m:b/0 5"),
     "events=7 gc_minor=1 gc_minor_ns=2"},

    /* binary_to_list/1 of a large binary: out and in again, no call */
    {"a_yielding_bif_is_runnable_between_its_runs", DEFAULT_LIMITS,
     LINES("track_receives", "1 0 call m:a/0", "1 10 out", "1 12 in", "1 15 out", "1 17 in",
           "1 18 call m:b/0", "close 20"),
     LINES("1 m:a/0 14", "1 m:a/0;RUNNABLE 4", "1 m:a/0;m:b/0 2"), "events=6"},

    /* a large heap collected on a dirty scheduler: out, in there, the
     * collection, out, in back */
    {"a_dirty_collection_is_gc_and_runnable", DEFAULT_LIMITS,
     LINES("track_receives", "1 0 call m:a/0", "1 10 out", "1 12 in", "1 12 gc_start", "1 16 gc_end",
           "1 16 out", "1 19 in", "1 20 call m:b/0", "close 30"),
     LINES("1 m:a/0 11", "1 m:a/0;RUNNABLE 5", "1 m:a/0;GC_MINOR 4", "1 m:a/0;m:b/0 10"),
     "events=8 gc_minor=1 gc_minor_ns=4"},

    /* a signal (a process_info, a monitor) wakes a waiting process: in
     * and out again with no message, and the wait goes on */
    {"a_signal_does_not_end_a_wait", DEFAULT_LIMITS,
     LINES("track_receives", "1 0 call m:a/0", "1 10 out", "1 20 in", "1 21 out", "1 30 in", "1 30 receive",
           "1 31 call m:b/0", "close 40"),
     LINES("1 m:a/0 12", "1 m:a/0;SLEEP 19", "1 m:a/0;m:b/0 9"), "events=7"},

    {"an_exit_after_the_in_was_runnable", DEFAULT_LIMITS,
     LINES("track_receives", "1 0 call m:a/0", "1 10 out", "1 15 in", "1 16 exit", "close 20"),
     LINES("1 m:a/0 11", "1 m:a/0;RUNNABLE 5"), "events=4"},

    /* each wait on its own: a sleep, then a preemption */
    {"waits_are_told_apart", DEFAULT_LIMITS,
     LINES("track_receives", "1 0 call m:a/0",
           "1 10 out", "1 20 in", "1 20 receive", "1 21 call m:b/0",
           "1 30 out", "1 33 in", "1 34 ret m:a/0", "close 40"),
     LINES("1 m:a/0 17", "1 m:a/0;SLEEP 10", "1 m:a/0;m:b/0 10", "1 m:a/0;m:b/0;RUNNABLE 3"), "events=8"},

    /* a process that never ran after its `in` (the trace ended) stays
     * where its wait went */
    {"an_in_at_the_end_decides_nothing", DEFAULT_LIMITS,
     LINES("track_receives", "1 0 call m:a/0", "1 10 out", "1 15 in", "close 20"),
     LINES("1 m:a/0 15", "1 m:a/0;SLEEP 5"), "events=3"},
};

/* Sampled modes: no calls, so the time slice after an `in` that no
 * message came with tells: it ran code (RUNNABLE before it) or answered a
 * signal (the wait goes on). Mode :sample: every slice runs code but one
 * its sampler's signal woke; native: one a CPU sample of its code landed
 * in, or FO_RUNS_CODE_NS (100 µs) long. */
static const ts_case sliced_cases[] = {
    {"sampled_a_preempted_slice_is_code_however_short", DEFAULT_LIMITS,
     LINES("track_receives_sampled", "1 0 call m:a/0", "1 10 out", "1 15 in", "1 16 out", "1 20 in",
           "close 30"),
     /* the second piece: decided at the close, which it runs through */
     LINES("1 m:a/0 21", "1 m:a/0;RUNNABLE 9"), "events=5"},

    {"sampled_the_samplers_signal_does_not_end_a_wait", DEFAULT_LIMITS,
     LINES("track_receives_sampled", "1 0 call m:a/0", "1 10 out", "expect_signal 1", "1 20 in", "1 21 out",
           "1 30 in", "1 30 receive", "1 35 out", "close 40"),
     LINES("1 m:a/0 16", "1 m:a/0;SLEEP 24"), "events=7"},

    {"sampled_a_signal_then_a_preemption", DEFAULT_LIMITS,
     /* the slice after the signal's ran code: the wait was none */
     LINES("track_receives_sampled", "1 0 call m:a/0", "1 10 out", "expect_signal 1", "1 20 in", "1 21 out",
           "1 30 in", "1 32 out", "close 40"),
     LINES("1 m:a/0 13", "1 m:a/0;RUNNABLE 19", "1 m:a/0;SLEEP 8"), "events=6"},

    {"sampled_a_message_after_the_in_is_a_wait", DEFAULT_LIMITS,
     LINES("track_receives_sampled", "1 0 call m:a/0", "1 10 out", "1 20 in", "1 20 receive", "1 25 out",
           "close 30"),
     LINES("1 m:a/0 15", "1 m:a/0;SLEEP 15"), "events=5"},

    {"sampled_a_long_signal_slice_ran_code", DEFAULT_LIMITS,
     LINES("track_receives_sampled", "1 0 call m:a/0", "1 10 out", "expect_signal 1", "1 20 in",
           "1 100020 out", "1 100030 in", "1 100030 receive", "close 100040"),
     LINES("1 m:a/0 100020", "1 m:a/0;RUNNABLE 10", "1 m:a/0;SLEEP 10"), "events=6"},

    {"sampled_a_waited_sample_says_the_piece_was_a_wait", DEFAULT_LIMITS,
     /* the sampler saw it waiting and it answered first: the wait it
      * answered in was one (the stack moves where the sample says) */
     LINES("track_receives_sampled", "1 0 sample m:a/0", "1 10 out", "expect_signal 1", "1 20 in",
           "1 21 out", "1 22 sample m:a/0;m:w/0 waited", "1 40 in", "1 40 receive", "1 41 out", "close 50"),
     LINES("1 m:a/0 11", "1 m:a/0 samples=1 weight=0", "1 m:a/0;m:w/0 1", "1 m:a/0;m:w/0;SLEEP 38",
           "1 m:a/0;m:w/0;SLEEP samples=1 weight=0"),
     "events=8 samples=2"},

    {"cpu_a_short_slice_with_no_sample_decides_nothing", DEFAULT_LIMITS,
     LINES("track_receives_cpu", "1 0 call m:a/0", "1 10 out", "1 15 in", "1 16 out", "1 20 in",
           "1 20 receive", "1 25 out", "close 30"),
     LINES("1 m:a/0 16", "1 m:a/0;SLEEP 14"), "events=7"},

    {"cpu_a_long_slice_ran_code", DEFAULT_LIMITS,
     LINES("track_receives_cpu", "1 0 call m:a/0", "1 10 out", "1 15 in", "1 16 out", "1 20 in",
           "1 100020 out", "1 100030 in", "1 100030 receive", "close 100040"),
     /* both pieces before the long slice, not the one after it */
     LINES("1 m:a/0 100021", "1 m:a/0;RUNNABLE 9", "1 m:a/0;SLEEP 10"), "events=8"},

    {"cpu_a_stop_in_another_function_ran_code", DEFAULT_LIMITS,
     /* slices far too short for a sample: the `out` in b says it ran */
     LINES("track_receives_cpu", "1 0 call m:a/0", "1 10 out@m:a/0", "1 15 in", "1 16 out@m:a/0", "1 20 in",
           "1 21 call m:b/0", "1 25 out@m:b/0", "1 30 in", "1 30 receive", "close 40"),
     LINES("1 m:a/0 12", "1 m:a/0;RUNNABLE 9", "1 m:a/0;m:b/0 14", "1 m:a/0;m:b/0;SLEEP 5"), "events=9"},

    {"cpu_a_collection_is_no_code", DEFAULT_LIMITS,
     LINES("track_receives_cpu", "1 0 call m:a/0", "1 10 out", "1 15 in", "1 15 gc_start", "1 100015 gc_end",
           "1 100016 out", "1 100020 in", "1 100020 receive", "close 100030"),
     LINES("1 m:a/0 21", "1 m:a/0;GC_MINOR 100000", "1 m:a/0;SLEEP 9"), "events=8 gc_minor=1 gc_minor_ns=100000"},

    {"cpu_a_sample_of_its_code_in_the_slice", DEFAULT_LIMITS,
     LINES("track_receives_cpu", "cpu_sampled", "at 3 5 m:a/0;m:b/0", "at 3 17 m:a/0;m:b/0", "1 0 in@3",
           "1 10 out", "1 15 in@3", "1 20 out", "1 30 in@3", "1 31 out", "1 40 in@3", "1 40 receive",
           "close 50", "settle"),
     /* the piece before the sampled slice, not the ones after it */
     LINES("1 m:a/0;m:b/0 26", "1 m:a/0;m:b/0 samples=2 weight=0", "1 m:a/0;m:b/0;RUNNABLE 5",
           "1 m:a/0;m:b/0;SLEEP 19"),
     "events=10 samples=2"},

    {"cpu_a_sample_of_c_code_is_no_code", DEFAULT_LIMITS,
     LINES("track_receives_cpu", "cpu_sampled", "at 3 5 m:a/0", "at 3 17 !erts:signal/0", "1 0 in@3",
           "1 10 out", "1 15 in@3", "1 20 out", "1 30 in@3", "1 30 receive", "close 40", "settle"),
     LINES("1 m:a/0 13", "1 m:a/0;erts:signal/0 12", "1 m:a/0;SLEEP 15", "1 m:a/0 samples=1 weight=0",
           "1 m:a/0;erts:signal/0 samples=1 weight=0"),
     "events=8 samples=2 cpu_orphans=1"},

    {"cpu_an_exit_ran_code", DEFAULT_LIMITS,
     LINES("track_receives_cpu", "1 0 call m:a/0", "1 10 out", "1 15 in", "1 16 exit", "close 20"),
     LINES("1 m:a/0 11", "1 m:a/0;RUNNABLE 5"), "events=4"},

    {"cpu_a_close_while_it_runs_ran_code", DEFAULT_LIMITS,
     LINES("track_receives_cpu", "1 0 call m:a/0", "1 10 out", "1 15 in", "close 20"),
     LINES("1 m:a/0 15", "1 m:a/0;RUNNABLE 5"), "events=3"},

    {"cpu_pieces_on_more_leaves_than_kept_merge", DEFAULT_LIMITS,
     /* ten pieces on four leaves: the oldest joins the next, twice (a's
      * first one goes to b, b's two then to a) */
     LINES("track_receives_cpu", "1 0 call m:a/0", "1 1 out", "1 2 in", "1 2 call m:b/0", "1 3 out", "1 4 in",
           "1 4 ret m:a/0", "1 5 out", "1 6 in", "1 6 call m:c/0", "1 7 out", "1 8 in", "1 8 ret m:a/0",
           "1 9 out", "1 10 in", "1 10 call m:b/0", "1 11 out", "1 12 in", "1 12 ret m:a/0", "1 13 out",
           "1 14 in", "1 14 call m:c/0", "1 15 out", "1 16 in", "1 16 ret m:a/0", "1 17 out", "1 18 in",
           "1 18 call m:d/0", "1 19 out", "1 20 in", "1 20 exit"),
     LINES("1 m:a/0 5", "1 m:a/0;RUNNABLE 6", "1 m:a/0;m:b/0 2", "1 m:a/0;m:b/0;RUNNABLE 1",
           "1 m:a/0;m:c/0 2", "1 m:a/0;m:c/0;RUNNABLE 2", "1 m:a/0;m:d/0 1", "1 m:a/0;m:d/0;RUNNABLE 1"),
     "events=31"},
};
// clang-format on

int main(void)
{
    int failed = ts_run_cases("receives_cases", receives_cases, sizeof receives_cases / sizeof receives_cases[0]);
    failed += ts_run_cases("sliced_cases", sliced_cases, sizeof sliced_cases / sizeof sliced_cases[0]);
    return failed == 0 ? 0 : 1;
}
