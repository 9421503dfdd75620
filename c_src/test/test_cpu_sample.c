/* CPU-sampled sessions (native mode): in/out events give each process's
 * exact on- and off-CPU time; CPU samples say where the on-CPU time went,
 * in proportion to their counts once settled; a wait hangs under the
 * stack the process was last sampled in. */
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

static const ts_case cpu_cases[] = {
    {"on_cpu_time_is_shared_by_sample_counts", DEFAULT_LIMITS,
     LINES("cpu_sampled",
           "1 0 in",
           "1 cpu m:a/0;m:b/0",
           "1 cpu m:a/0;m:b/0",
           "1 cpu m:a/0;m:c/0",
           "1 90 out",          /* 90 on CPU: b 2 samples, c 1 */
           "1 100 in",          /* a;c;SLEEP: 10 */
           "1 cpu m:a/0;m:b/0",
           "1 130 out",         /* 30 more on CPU: 120 in all, b 3 of 4 samples */
           "close 130",
           "settle"),
     LINES("1 m:a/0;m:b/0 90", "1 m:a/0;m:c/0 30", "1 m:a/0;m:c/0;SLEEP 10",
           "1 m:a/0;m:b/0 samples=3 weight=0", "1 m:a/0;m:c/0 samples=1 weight=0"),
     "events=8 samples=4"},

    {"a_burst_no_sample_saw_is_not_charged_to_the_stack_before_it", DEFAULT_LIMITS,
     /* parse ran 30 unseen, render was sampled: render gets all 100, which
      * is the estimate (nothing says otherwise); with holding, the 30 of
      * parse would have gone to the wait's stack */
     LINES("cpu_sampled",
           "1 0 in",
           "1 cpu m:r/0;m:render/0",
           "1 70 out",
           "1 80 in",
           "1 110 out",
           "close 120",
           "settle"),
     LINES("1 m:r/0;m:render/0 100", "1 m:r/0;m:render/0;SLEEP 20",
           "1 m:r/0;m:render/0 samples=1 weight=0"),
     "events=5 samples=1"},

    {"a_process_no_sample_landed_on_keeps_its_time_on_its_root", DEFAULT_LIMITS,
     LINES("cpu_sampled",
           "1 0 in",
           "1 50 out",
           "1 60 in",
           "close 70",
           "settle"),
     LINES("1 (root) 60", "1 SLEEP 10"),
     "events=3 cpu_unsampled_ns=60"},

    {"rounding_leaves_nothing_out", DEFAULT_LIMITS,
     /* 100 over three equal counts: 33 + 33 + 33, and 1 to the first busiest */
     LINES("cpu_sampled",
           "1 0 in",
           "1 cpu m:a/0",
           "1 cpu m:b/0",
           "1 cpu m:c/0",
           "close 100",
           "settle"),
     LINES("1 m:a/0 34", "1 m:b/0 33", "1 m:c/0 33",
           "1 m:a/0 samples=1 weight=0", "1 m:b/0 samples=1 weight=0", "1 m:c/0 samples=1 weight=0"),
     "events=4 samples=3"},

    {"processes_are_settled_apart", DEFAULT_LIMITS,
     LINES("cpu_sampled",
           "1 0 in",
           "2 0 in",
           "1 cpu m:a/0",
           "2 cpu m:x/0",
           "2 cpu m:y/0",
           "1 40 out",
           "2 80 out",
           "close 80",
           "settle"),
     LINES("1 m:a/0 40", "1 m:a/0;SLEEP 40", "2 m:x/0 40", "2 m:y/0 40",
           "1 m:a/0 samples=1 weight=0", "2 m:x/0 samples=1 weight=0", "2 m:y/0 samples=1 weight=0"),
     "events=7 samples=3"},

    {"settling_twice_adds_only_what_came_since", DEFAULT_LIMITS,
     LINES("cpu_sampled",
           "1 0 in",
           "1 cpu m:a/0",
           "1 50 out",
           "settle",
           "1 60 in",
           "1 cpu m:b/0",
           "close 100",
           "settle"),     /* 40 more: a 1 and b 1 sample: 20 each */
     LINES("1 m:a/0 70", "1 m:a/0;SLEEP 10", "1 m:b/0 20",
           "1 m:a/0 samples=1 weight=0", "1 m:b/0 samples=1 weight=0"),
     "events=5 samples=2"},

    {"the_source_gives_each_slice_its_own_threads_samples", DEFAULT_LIMITS,
     /* pid 1 runs on thread 7 then 8; pid 2 on 7 between: each slice takes
      * only the samples of its thread and time */
     LINES("cpu_sampled",
           "at 7 5 m:a/0;m:b/0",
           "at 7 15 m:x/0",
           "at 8 25 m:a/0;m:c/0",
           "at 7 25 m:y/0",       /* thread 7 ran pid 2 then: not pid 1's */
           "1 0 in@7",
           "1 10 out",
           "2 12 in@7",
           "2 20 out",
           "1 20 in@8",
           "1 30 out",
           "close 30",
           "settle"),
     LINES("1 m:a/0;m:b/0 10", "1 m:a/0;m:b/0;SLEEP 10", "1 m:a/0;m:c/0 10",
           "2 m:x/0 8", "2 m:x/0;SLEEP 10",
           "1 m:a/0;m:b/0 samples=1 weight=0", "1 m:a/0;m:c/0 samples=1 weight=0",
           "2 m:x/0 samples=1 weight=0"),
     "events=9 samples=3"},

    {"a_slice_still_open_is_ended_by_the_settle", DEFAULT_LIMITS,
     LINES("cpu_sampled",
           "at 3 40 m:a/0",
           "1 0 in@3",
           "close 50",
           "settle 50"),
     LINES("1 m:a/0 50", "1 m:a/0 samples=1 weight=0"),
     "events=2 samples=1"},

    {"an_orphan_hangs_its_leaf_under_the_last_sampled_stack", DEFAULT_LIMITS,
     LINES("cpu_sampled",
           "at 1 5 m:a/0;m:b/0",
           "at 1 6 !erlang:term_to_binary/1",
           "at 1 30 !erlang:term_to_binary/1",
           "1 0 in@1",
           "1 10 out",
           "1 20 in@1",
           "1 40 out",
           "close 40",
           "settle"),
     /* 30 on CPU over 3 samples */
     LINES("1 m:a/0;m:b/0 10", "1 m:a/0;m:b/0;erlang:term_to_binary/1 20", "1 m:a/0;m:b/0;SLEEP 10",
           "1 m:a/0;m:b/0 samples=1 weight=0", "1 m:a/0;m:b/0;erlang:term_to_binary/1 samples=2 weight=0"),
     "events=7 samples=3 cpu_orphans=2"},

    {"an_orphan_before_any_sample_is_rootless", DEFAULT_LIMITS,
     LINES("cpu_sampled",
           "at 1 5 !erlang:term_to_binary/1",
           "1 0 in@1",
           "1 10 out",
           "close 10",
           "settle"),
     LINES("1 erlang:term_to_binary/1 10", "1 erlang:term_to_binary/1 samples=1 weight=0"),
     "events=3 samples=1 cpu_orphans=1 cpu_rootless=1"},

    {"an_in_without_its_out_ends_the_slice_before", DEFAULT_LIMITS,
     LINES("cpu_sampled",
           "at 1 5 m:a/0",
           "at 2 15 m:b/0",
           "1 0 in@1",
           "1 10 in@2",
           "1 20 out",
           "close 20",
           "settle"),
     LINES("1 m:a/0 10", "1 m:b/0 10",
           "1 m:a/0 samples=1 weight=0", "1 m:b/0 samples=1 weight=0"),
     "events=5 samples=2"},

    {"an_out_in_a_caller_unwinds_to_it", DEFAULT_LIMITS,
     LINES("cpu_sampled",
           "at 1 5 m:a/0;m:b/0;m:c/0",
           "1 0 in@1",
           "1 10 out@m:b/0",
           "close 30",
           "settle"),
     LINES("1 m:a/0;m:b/0;m:c/0 10", "1 m:a/0;m:b/0;SLEEP 20",
           "1 m:a/0;m:b/0;m:c/0 samples=1 weight=0"),
     "events=3 samples=1"},

    {"an_out_where_it_was_seen_takes_that_stack", DEFAULT_LIMITS,
     /* the wait is in m:w/0, reached from a;w: not under p, the last sample */
     LINES("cpu_sampled",
           "at 1 5 m:a/0;m:p/0",
           "1 0 in@1",
           "context 1 m:w/0 m:a/0;m:w/0",
           "1 10 out@m:w/0",
           "close 30",
           "settle"),
     LINES("1 m:a/0;m:p/0 10", "1 m:a/0;m:w/0;SLEEP 20", "1 m:a/0;m:p/0 samples=1 weight=0"),
     "events=3 samples=1 cpu_contexts=1"},

    {"a_context_for_the_wait_of_the_moment_moves_it", DEFAULT_LIMITS,
     LINES("cpu_sampled",
           "at 1 5 m:a/0;m:p/0",
           "1 0 in@1",
           "1 10 out@m:w/0",    /* never seen there: taken as a call from p */
           "context 1 m:w/0 m:a/0;m:w/0",
           "close 30",
           "settle"),
     LINES("1 m:a/0;m:p/0 10", "1 m:a/0;m:w/0;SLEEP 20", "1 m:a/0;m:p/0 samples=1 weight=0"),
     "events=3 samples=1 cpu_contexts=1 cpu_entered_stops=1"},

    {"of_two_stacks_seen_at_a_function_the_closer_wins", DEFAULT_LIMITS,
     LINES("cpu_sampled",
           "at 1 5 m:a/0;m:b/0;m:c/0",
           "1 0 in@1",
           "context 1 m:w/0 m:x/0;m:y/0;m:w/0",
           "context 1 m:w/0 m:a/0;m:b/0;m:w/0",
           "1 10 out@m:w/0",
           "close 30",
           "settle"),
     LINES("1 m:a/0;m:b/0;m:c/0 10", "1 m:a/0;m:b/0;m:w/0;SLEEP 20",
           "1 m:a/0;m:b/0;m:c/0 samples=1 weight=0"),
     "events=3 samples=1 cpu_contexts=2"},

    {"a_sample_is_a_context_for_its_innermost_function", DEFAULT_LIMITS,
     /* preempted in f after the last sample showed g: back to where f was seen */
     LINES("cpu_sampled",
           "at 1 2 m:a/0;m:f/0",
           "at 1 4 m:a/0;m:g/0",
           "1 0 in@1",
           "1 10 out@m:f/0",
           "close 20",
           "settle"),
     LINES("1 m:a/0;m:f/0 5", "1 m:a/0;m:g/0 5", "1 m:a/0;m:f/0;SLEEP 10",
           "1 m:a/0;m:f/0 samples=1 weight=0", "1 m:a/0;m:g/0 samples=1 weight=0"),
     "events=4 samples=2"},

    {"a_stop_where_a_sample_saw_the_function_deeper_takes_that_stack", DEFAULT_LIMITS,
     /* b was seen under a (not as the innermost frame): a stop in b while
      * the stack is x goes back to a;b */
     LINES("cpu_sampled",
           "at 1 5 m:a/0;m:b/0;m:c/0",
           "at 1 25 m:x/0",
           "1 0 in@1",
           "1 10 out",
           "1 20 in@1",
           "1 30 out@m:b/0",
           "close 40",
           "settle"),
     LINES("1 m:a/0;m:b/0;m:c/0 10", "1 m:a/0;m:b/0;m:c/0;SLEEP 10", "1 m:x/0 10", "1 m:a/0;m:b/0;SLEEP 10",
           "1 m:a/0;m:b/0;m:c/0 samples=1 weight=0", "1 m:x/0 samples=1 weight=0"),
     "events=6 samples=2 cpu_seen_stops=1"},

    {"a_stop_with_its_stack_unknown_leaves_the_c_code_under_the_stop", DEFAULT_LIMITS,
     /* never sampled: a stop in g says only g; the C code of the slice
      * that ends there goes under g at the root, not under a stack it was
      * never seen in */
     LINES("cpu_sampled",
           "at 1 15 !erts:gc/0",
           "1 0 in@1",
           "1 10 out@m:f/0",
           "1 12 in@1",
           "1 20 out@m:g/0",
           "close 20",
           "settle"),
     LINES("1 SLEEP 2", "1 m:g/0;erts:gc/0 18", "1 m:g/0;erts:gc/0 samples=1 weight=0"),
     "events=5 samples=1 cpu_orphans=1 cpu_rootless=1 cpu_unknown_stops=2"},

    {"c_code_of_a_slice_goes_under_where_it_stops", DEFAULT_LIMITS,
     /* a slice that starts in f (its stop) runs C code, then stops in a
      * BIF that traps, read at b;t: the C code was the BIF's */
     LINES("cpu_sampled",
           "at 1 5 m:a/0;m:f/0",
           "at 1 25 !erts:t2b/0",
           "1 0 in@1",
           "1 10 out@m:f/0",
           "1 20 in@1",
           "context 1 m:t/0 m:a/0;m:b/0;m:t/0",
           "1 30 out@m:t/0",
           "close 30",
           "settle"),
     LINES("1 m:a/0;m:f/0 10", "1 m:a/0;m:f/0;SLEEP 10", "1 m:a/0;m:b/0;m:t/0;erts:t2b/0 10",
           "1 m:a/0;m:f/0 samples=1 weight=0", "1 m:a/0;m:b/0;m:t/0;erts:t2b/0 samples=1 weight=0"),
     "events=6 samples=2 cpu_orphans=1 cpu_contexts=1"},

    {"a_cut_chain_goes_under_where_its_outer_frame_was_seen_first", DEFAULT_LIMITS,
     /* r recursed under a;b; a chain of r frames only (the kernel cut it)
      * goes under a;b, its recursion counted once */
     LINES("cpu_sampled",
           "at 1 5 m:a/0;m:b/0;m:r/0;m:r/0",
           "at 1 15 ^m:r/0;m:r/0;m:r/0",
           "at 1 25 ^m:x/0",     /* never seen: under the marker at the root */
           "1 0 in@1",
           "1 30 out",
           "close 30",
           "settle"),
     LINES("1 m:a/0;m:b/0;m:r/0;m:r/0 10", "1 m:a/0;m:b/0;m:r/0;m:r/0;m:r/0 10", "1 m:cut/0;m:x/0 10",
           "1 m:a/0;m:b/0;m:r/0;m:r/0 samples=1 weight=0", "1 m:a/0;m:b/0;m:r/0;m:r/0;m:r/0 samples=1 weight=0",
           "1 m:cut/0;m:x/0 samples=1 weight=0"),
     "events=5 samples=3 cpu_cut_samples=2"},
    {"c_code_goes_under_the_caller_its_stack_names", DEFAULT_LIMITS,
     /* b on the stack: there; g seen under a;h: there; n never seen: a
      * call from the stack of the moment */
     LINES("cpu_sampled",
           "at 1 2 m:a/0;m:h/0;m:g/0",
           "at 1 4 m:a/0;m:b/0;m:c/0",
           "at 1 6 @m:b/0!erts:bif/0",
           "at 1 8 @m:g/0!erts:bif/0",
           "at 1 10 @m:n/0!erts:bif/0",
           "1 0 in@1",
           "1 12 out",
           "close 12",
           "settle"),
     /* 12 over 5 samples: 2 each, the 2 left to the first busiest */
     LINES("1 m:a/0;m:h/0;m:g/0 4", "1 m:a/0;m:b/0;m:c/0 2", "1 m:a/0;m:b/0;erts:bif/0 2",
           "1 m:a/0;m:h/0;m:g/0;erts:bif/0 2", "1 m:a/0;m:h/0;m:g/0;m:n/0;erts:bif/0 2",
           "1 m:a/0;m:h/0;m:g/0 samples=1 weight=0", "1 m:a/0;m:b/0;m:c/0 samples=1 weight=0",
           "1 m:a/0;m:b/0;erts:bif/0 samples=1 weight=0", "1 m:a/0;m:h/0;m:g/0;erts:bif/0 samples=1 weight=0",
           "1 m:a/0;m:h/0;m:g/0;m:n/0;erts:bif/0 samples=1 weight=0"),
     "events=7 samples=5 cpu_called_samples=3"},
    {"a_process_inside_its_root_keeps_what_comes_before_its_first_sample_under_it", DEFAULT_LIMITS,
     /* the trace started in r: a stop in f before any sample is a call
      * from r, and the C code of that slice goes there, not to the root */
     LINES("cpu_sampled",
           "at 1 5 !erts:clock/0",
           "1 0 in@1",
           "1 inside m:r/0",
           "1 10 out@m:f/0",
           "1 12 in@1",
           "close 20",
           "settle"),
     LINES("1 m:r/0;m:f/0;SLEEP 2", "1 m:r/0;m:f/0;erts:clock/0 18",
           "1 m:r/0;m:f/0;erts:clock/0 samples=1 weight=0"),
     "events=4 samples=1 cpu_orphans=1 cpu_entered_stops=1"},
    {"a_caller_before_the_first_sample_is_called_from_the_root", DEFAULT_LIMITS,
     LINES("cpu_sampled",
           "at 1 5 @m:t/0!erts:clock/0",
           "at 1 7 m:r/0;m:a/0",
           "1 0 in@1",
           "1 inside m:r/0",
           "1 10 out",
           "close 10",
           "settle"),
     LINES("1 m:r/0;m:t/0;erts:clock/0 5", "1 m:r/0;m:a/0 5",
           "1 m:r/0;m:t/0;erts:clock/0 samples=1 weight=0", "1 m:r/0;m:a/0 samples=1 weight=0"),
     "events=4 samples=2 cpu_called_samples=1"},
    {"a_collection_pauses_the_slice_its_samples_are_not_taken", DEFAULT_LIMITS,
     /* 10 of GC, exact; the sample in the collector is not one of a's or
      * b's, and the running time left (20) is shared by the other two */
     LINES("cpu_sampled",
           "at 1 5 m:a/0",
           "at 1 15 !erts:gc/0",
           "at 1 25 m:a/0;m:b/0",
           "1 0 in@1",
           "1 10 gc_start",
           "1 20 gc_end",
           "1 30 out",
           "close 30",
           "settle"),
     LINES("1 m:a/0 10", "1 m:a/0;GC_MINOR 10", "1 m:a/0;m:b/0 10",
           "1 m:a/0 samples=1 weight=0", "1 m:a/0;m:b/0 samples=1 weight=0"),
     "events=6 samples=2 gc_minor=1 gc_minor_ns=10"},
    {"a_c_chain_that_misses_the_root_is_a_call_from_its_erlang_frame", DEFAULT_LIMITS,
     /* the kernel's walk out of the C code stopped at t: t was seen under
      * r;a, so the C code goes there; a chain from the root is kept */
     LINES("cpu_sampled",
           "at 1 2 m:r/0;m:a/0;m:t/0",
           "at 1 4 m:t/0;!erts:clock/0",
           "at 1 5 m:r/0;m:a/0;m:t/0;!erts:clock/0",
           "1 0 in@1",
           "1 inside m:r/0",
           "1 6 out",
           "close 6",
           "settle"),
     LINES("1 m:r/0;m:a/0;m:t/0 2", "1 m:r/0;m:a/0;m:t/0;erts:clock/0 4",
           "1 m:r/0;m:a/0;m:t/0 samples=1 weight=0", "1 m:r/0;m:a/0;m:t/0;erts:clock/0 samples=2 weight=0"),
     "events=5 samples=3 cpu_called_samples=1 cpu_broken_chains=1"},
};
// clang-format on

int main(void)
{
    return ts_run_cases("cpu_sample", cpu_cases, sizeof cpu_cases / sizeof cpu_cases[0]);
}
