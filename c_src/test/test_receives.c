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
// clang-format on

int main(void)
{
    int failed = ts_run_cases("receives_cases", receives_cases, sizeof receives_cases / sizeof receives_cases[0]);
    return failed == 0 ? 0 : 1;
}
