/* The per-process state machine of c_src/core/README.md: an event stream
 * in, the exact folded stacks (every node with time, in ns) and the exact
 * counters out. Bounds are in test_bounds.c. */
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

// clang-format off
#define LINES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NO_LINES ((const char *const[]){NULL})
#define DEFAULT_LIMITS {0, 0, 0, 0, 0}

static const ts_case session_cases[] = {
    {"call_return_nesting_exact_times", DEFAULT_LIMITS,
     LINES("1 100 call m:a/0",
           "1 150 call m:b/1 from m:a/0", /* a: 50 */
           "1 400 call m:c/2 from m:b/1", /* a;b: 250 */
           "1 1000 ret m:b/1",            /* a;b;c: 600 */
           "1 1100 ret m:a/0",            /* a;b: 100 */
           "1 1300 ret undefined",        /* a: 200, stack now empty */
           "close 1500"),                 /* root: 200 */
     LINES("1 m:a/0 250", "1 m:a/0;m:b/1 350", "1 m:a/0;m:b/1;m:c/2 600", "1 (root) 200"),
     "events=6"},

    {"time_charged_before_event_applied", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0",
           "1 100 call m:b/0 from m:a/0", /* 100 to a, not to b */
           "1 130 ret m:a/0",             /* 30 to a;b, not to a */
           "1 1130 exit"),                /* 1000 to a */
     LINES("1 m:a/0 1100", "1 m:a/0;m:b/0 30"), "events=4"},

    {"arity_and_module_make_distinct_frames", DEFAULT_LIMITS,
     LINES("1 0 call m:f/1", "1 10 call m:f/2 from m:f/1", "1 20 call n:f/2 from m:f/2",
           "close 50"),
     LINES("1 m:f/1 10", "1 m:f/1;m:f/2 10", "1 m:f/1;m:f/2;n:f/2 30"), "events=3"},

    {"tail_call_caller_below_top_unwinds_then_pushes", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0",
           "1 10 call m:b/0 from m:a/0", /* a: 10 */
           "1 30 call m:c/0 from m:a/0", /* a;b: 20; b tail-called c: [a,c] */
           "1 60 ret m:a/0",             /* a;c: 30 */
           "close 100"),                 /* a: 40 */
     LINES("1 m:a/0 50", "1 m:a/0;m:b/0 20", "1 m:a/0;m:c/0 30"), "events=4 resyncs=1"},

    {"mutual_recursion_keeps_real_depth", DEFAULT_LIMITS,
     LINES("1 0 call m:even/1",
           "1 10 call m:odd/1 from m:even/1",  /* e: 10 */
           "1 30 call m:even/1 from m:odd/1",  /* e;o: 20 */
           "1 60 call m:odd/1 from m:even/1",  /* e;o;e: 30 */
           "1 100 ret m:even/1",               /* e;o;e;o: 40 */
           "1 150 ret m:odd/1",                /* e;o;e: 50 */
           "1 210 ret m:even/1",               /* e;o: 60 */
           "close 280"),                       /* e: 70 */
     LINES("1 m:even/1 80", "1 m:even/1;m:odd/1 80", "1 m:even/1;m:odd/1;m:even/1 80",
           "1 m:even/1;m:odd/1;m:even/1;m:odd/1 40"),
     "events=7"},

    {"return_to_found_below_top_unwinds", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "1 10 call m:b/0 from m:a/0", "1 20 call m:c/0 from m:b/0",
           "1 30 call m:d/0 from m:c/0",
           "1 40 ret m:a/0",              /* a;b;c;d: 10, back to [a] */
           "1 100 call m:e/0 from m:a/0", /* a: 60, caller on top: plain push */
           "close 150"),                  /* a;e: 50 */
     LINES("1 m:a/0 70", "1 m:a/0;m:b/0 10", "1 m:a/0;m:b/0;m:c/0 10",
           "1 m:a/0;m:b/0;m:c/0;m:d/0 10", "1 m:a/0;m:e/0 50"),
     /* README counts resyncs for a return_to only when r is not found */
     "events=6"},

    {"return_to_next_frame_is_a_plain_pop", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "1 10 call m:b/0 from m:a/0", "1 20 call m:c/0 from m:b/0",
           "1 40 ret m:b/0", "1 70 ret m:a/0", "close 100"),
     LINES("1 m:a/0 40", "1 m:a/0;m:b/0 40", "1 m:a/0;m:b/0;m:c/0 20"), "events=5"},

    {"return_to_picks_nearest_match_below_top", DEFAULT_LIMITS,
     LINES("1 0 call m:f/0", "1 10 call m:g/0 from m:f/0", "1 20 call m:f/0 from m:g/0",
           "1 30 call m:g/0 from m:f/0", "1 40 call m:h/0 from m:g/0",
           "1 60 ret m:f/0", /* f;g;f;g;h: 20; the nearest f is at depth 3 */
           "close 100"),     /* f;g;f: 40 */
     LINES("1 m:f/0 10", "1 m:f/0;m:g/0 10", "1 m:f/0;m:g/0;m:f/0 50",
           "1 m:f/0;m:g/0;m:f/0;m:g/0 10", "1 m:f/0;m:g/0;m:f/0;m:g/0;m:h/0 20"),
     "events=6"},

    {"call_caller_found_deeper_uses_nearest_match", DEFAULT_LIMITS,
     LINES("1 0 call m:f/0", "1 10 call m:g/0 from m:f/0", "1 20 call m:f/0 from m:g/0",
           "1 30 call m:g/0 from m:f/0", "1 40 call m:h/0 from m:g/0",
           "1 60 call m:x/0 from m:f/0", /* f;g;f;g;h: 20; unwind to depth 3, push x */
           "close 100"),                 /* f;g;f;x: 40 */
     LINES("1 m:f/0 10", "1 m:f/0;m:g/0 10", "1 m:f/0;m:g/0;m:f/0 10",
           "1 m:f/0;m:g/0;m:f/0;m:g/0 10", "1 m:f/0;m:g/0;m:f/0;m:g/0;m:h/0 20",
           "1 m:f/0;m:g/0;m:f/0;m:x/0 40"),
     "events=6 resyncs=1"},

    {"return_to_not_on_stack_rebases_to_r", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "1 10 call m:b/0 from m:a/0",
           "1 25 ret m:x/0",              /* a;b: 15; stack becomes [x] */
           "1 50 call m:y/0 from m:x/0",  /* x: 25 */
           "1 90 ret m:x/0",              /* x;y: 40 */
           "close 100"),                  /* x: 10 */
     LINES("1 m:a/0 10", "1 m:a/0;m:b/0 15", "1 m:x/0 35", "1 m:x/0;m:y/0 40"),
     "events=5 resyncs=1"},

    {"return_to_top_frame_only_is_not_found", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "1 10 call m:b/0 from m:a/0",
           "1 20 ret m:b/0", /* b is the top, not below it: stack becomes [b] */
           "close 50"),
     LINES("1 m:a/0 10", "1 m:a/0;m:b/0 10", "1 m:b/0 30"), "events=3 resyncs=1"},

    {"return_to_sole_frame_is_not_found_and_resyncs", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0",
           "1 10 ret m:a/0", /* a: 10; nothing below the top: "not found", [a] */
           "1 15 call m:b/0 from m:a/0", /* a: 5 */
           "close 30"),                  /* a;b: 15 */
     LINES("1 m:a/0 15", "1 m:a/0;m:b/0 15"), "events=3 resyncs=1"},

    {"return_to_undefined_pops_one", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "1 10 call m:b/0 from m:a/0", "1 20 call m:c/0 from m:b/0",
           "1 40 ret undefined",  /* a;b;c: 20 */
           "1 80 ret undefined",  /* a;b: 40 */
           "1 160 ret undefined", /* a: 80, stack empty */
           "close 200"),          /* root: 40 */
     LINES("1 m:a/0 90", "1 m:a/0;m:b/0 50", "1 m:a/0;m:b/0;m:c/0 20", "1 (root) 40"),
     "events=6"},

    {"call_caller_not_on_empty_stack_pushes_caller_then_callee", DEFAULT_LIMITS,
     LINES("1 100 call m:b/1 from m:a/0", /* first event: [a,b], no resync */
           "1 300 ret m:a/0",             /* a;b: 200 */
           "close 400"),                  /* a: 100 */
     LINES("1 m:a/0 100", "1 m:a/0;m:b/1 200"), "events=2"},

    {"call_caller_not_on_stack_pushes_both_and_resyncs", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0",
           "1 10 call m:b/0 from m:x/0", /* a: 10; [a,x,b] */
           "1 40 ret m:x/0",             /* a;x;b: 30 */
           "1 100 ret m:a/0",            /* a;x: 60 */
           "close 110"),                 /* a: 10 */
     LINES("1 m:a/0 20", "1 m:a/0;m:x/0 60", "1 m:a/0;m:x/0;m:b/0 30"), "events=4 resyncs=1"},

    {"call_without_caller_pushes", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "1 10 call m:b/0", "1 30 call m:c/0",
           "1 60 ret m:b/0", /* a;b;c: 30 */
           "close 100"),     /* a;b: 40 */
     LINES("1 m:a/0 10", "1 m:a/0;m:b/0 60", "1 m:a/0;m:b/0;m:c/0 30"), "events=4"},

    {"exception_resync_next_call_finds_caller_deeper", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "1 10 call m:b/0 from m:a/0", "1 20 call m:c/0 from m:b/0",
           "1 50 call m:d/0 from m:c/0",
           /* d raises, a catches: no return_to for d, c, b */
           "1 90 call m:e/0 from m:a/0", /* a;b;c;d: 40; unwind to a, push e */
           "1 95 ret m:a/0",             /* a;e: 5 */
           "close 100"),                 /* a: 5 */
     LINES("1 m:a/0 15", "1 m:a/0;m:b/0 10", "1 m:a/0;m:b/0;m:c/0 30",
           "1 m:a/0;m:b/0;m:c/0;m:d/0 40", "1 m:a/0;m:e/0 5"),
     "events=6 resyncs=1"},

    {"out_in_sleep_leaf_under_running_stack", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0",
           "1 100 call m:b/0 from m:a/0", /* a: 100 */
           "1 200 out",                   /* a;b: 100 */
           "1 700 in",                    /* a;b;SLEEP: 500 */
           "1 800 ret m:a/0",             /* a;b: 100 */
           "1 900 out",                   /* a: 100 */
           "1 1000 in",                   /* a;SLEEP: 100 */
           "close 1050"),                 /* a: 50 */
     LINES("1 m:a/0 250", "1 m:a/0;m:b/0 200", "1 m:a/0;m:b/0;SLEEP 500",
           "1 m:a/0;SLEEP 100"),
     "events=7"},

    {"sleep_with_empty_stack_hangs_off_root", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "1 10 ret undefined", /* a: 10 */
           "1 20 out",                               /* root: 10 */
           "1 60 in",                                /* SLEEP: 40 */
           "close 100"),                             /* root: 40 */
     LINES("1 m:a/0 10", "1 (root) 50", "1 SLEEP 40"), "events=4"},

    {"unknown_process_first_event_out", DEFAULT_LIMITS,
     LINES("1 100 out", "1 400 in", /* SLEEP: 300 */
           "1 450 call m:a/0",        /* root: 50 */
           "close 500"),              /* a: 50 */
     LINES("1 SLEEP 300", "1 (root) 50", "1 m:a/0 50"), "events=3"},

    {"unknown_process_first_event_return_to", DEFAULT_LIMITS,
     LINES("7 1000 ret m:r/0",            /* nothing charged; stack becomes [r] */
           "7 1200 call m:s/0 from m:r/0", /* r: 200 */
           "7 1300 ret m:r/0",             /* r;s: 100 */
           "close 1600"),                  /* r: 300 */
     LINES("7 m:r/0 500", "7 m:r/0;m:s/0 100"), "events=3 resyncs=1"},

    {"unknown_process_first_event_return_to_undefined", DEFAULT_LIMITS,
     LINES("7 1000 ret undefined", /* nothing on the stack to pop */
           "7 1200 call m:s/0",    /* root: 200 */
           "close 1300"),          /* s: 100 */
     LINES("7 (root) 200", "7 m:s/0 100"), "events=2"},

    {"unknown_process_first_event_in", DEFAULT_LIMITS,
     LINES("3 50 in", "3 80 call m:a/0", /* root: 30 */
           "3 100 ret undefined",          /* a: 20 */
           "close 150"),                   /* root: 50 */
     LINES("3 (root) 80", "3 m:a/0 20"), "events=3"},

    {"exit_mid_stack_keeps_time_and_restarts_afresh", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "1 10 call m:b/0 from m:a/0",
           "1 40 exit",                   /* a;b: 30; stack empties */
           "1 500 call m:c/0",            /* afresh: 40..500 charged nowhere */
           "1 530 call m:d/0 from m:c/0", /* c: 30 */
           "close 600"),                  /* c;d: 70 */
     LINES("1 m:a/0 10", "1 m:a/0;m:b/0 30", "1 m:c/0 30", "1 m:c/0;m:d/0 70"), "events=5"},

    {"exit_while_scheduled_out_charges_sleep", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "1 10 out", /* a: 10 */
           "1 100 exit",                   /* a;SLEEP: 90 */
           "1 200 in",                     /* afresh, nothing charged */
           "1 210 call m:b/0",             /* root: 10 */
           "close 220"),                   /* b: 10 */
     LINES("1 m:a/0 10", "1 m:a/0;SLEEP 90", "1 (root) 10", "1 m:b/0 10"), "events=5"},

    {"close_charges_running_and_sleeping_not_exited", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "2 0 call m:b/0", "3 0 call m:c/0",
           "1 100 exit",                   /* 1 a: 100 */
           "2 100 out",                    /* 2 b: 100 */
           "3 150 call m:d/0 from m:c/0",  /* 3 c: 150 */
           "close 1000"),                  /* 2 b;SLEEP 900, 3 c;d 850, 1 nothing */
     LINES("1 m:a/0 100", "2 m:b/0 100", "2 m:b/0;SLEEP 900", "3 m:c/0 150",
           "3 m:c/0;m:d/0 850"),
     "events=6"},

    {"interleaved_processes_have_independent_timelines", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "2 5 call m:a/0",
           "1 10 call m:b/0 from m:a/0", /* 1 a: 10 */
           "2 30 call m:c/0 from m:a/0", /* 2 a: 25 */
           "1 35 ret m:a/0",             /* 1 a;b: 25 */
           "2 70 ret m:a/0",             /* 2 a;c: 40 */
           "1 100 exit",                 /* 1 a: 65 */
           "2 200 exit"),                /* 2 a: 130 */
     LINES("1 m:a/0 75", "1 m:a/0;m:b/0 25", "2 m:a/0 155", "2 m:a/0;m:c/0 40"), "events=8"},

    {"clock_skew_charges_nothing_and_is_counted", DEFAULT_LIMITS,
     LINES("1 100 call m:a/0",
           "1 200 call m:b/0 from m:a/0", /* a: 100 */
           "2 10 call m:z/0",             /* another process: not a skew */
           "1 150 call m:c/0 from m:b/0", /* skew: 0 charged, c pushed, last_ts stays 200 */
           "1 260 ret m:b/0",             /* a;b;c: 60 (260 - 200) */
           "1 250 ret m:a/0",             /* skew: 0 charged, back to [a] */
           "2 20 exit",                   /* 2 z: 10 */
           "1 300 exit"),                 /* a: 40 (300 - 260) */
     LINES("1 m:a/0 140", "1 m:a/0;m:b/0;m:c/0 60", "2 m:z/0 10"), "events=8 clock_skews=2"},

    {"negative_monotonic_timestamps", DEFAULT_LIMITS,
     /* Erlang monotonic time is often negative */
     LINES("1 -1000 call m:a/0", "1 -400 call m:b/0 from m:a/0", "1 -100 ret m:a/0",
           "close 50"),
     LINES("1 m:a/0 750", "1 m:a/0;m:b/0 300"), "events=3"},

    {"extreme_timestamps_do_not_overflow", DEFAULT_LIMITS,
     /* the full int64 range is 2^64 - 1 ns: it fits a uint64 exactly */
     LINES("1 -9223372036854775808 call m:a/0", "1 9223372036854775807 exit",
           "2 -9223372036854775808 call m:a/0", "close 9223372036854775807"),
     LINES("1 m:a/0 18446744073709551615", "2 m:a/0 18446744073709551615"), "events=3"},

    {"equal_timestamps_are_not_skew", DEFAULT_LIMITS,
     LINES("1 100 call m:a/0", "1 100 call m:b/0 from m:a/0", "1 100 ret m:a/0",
           "close 130"),
     LINES("1 m:a/0 30"), "events=3"},

    {"a_collection_is_a_gc_leaf_under_the_stack_it_started_in", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "1 10 gc_start", /* a: 10 */
           "1 50 gc_end",                      /* a;GC_MINOR: 40 */
           "1 60 call m:b/0 from m:a/0",       /* a: 10 */
           "1 70 gc_major_start",              /* a;b: 10 */
           "1 75 gc_major_end",                /* a;b;GC_MAJOR: 5 */
           "close 100"),                       /* a;b: 25 */
     LINES("1 m:a/0 20", "1 m:a/0;GC_MINOR 40", "1 m:a/0;m:b/0 35", "1 m:a/0;m:b/0;GC_MAJOR 5"),
     "events=6 gc_minor=1 gc_major=1 gc_minor_ns=40 gc_major_ns=5"},

    {"a_collection_while_scheduled_out_is_gc_not_sleep", DEFAULT_LIMITS,
     /* the VM collects a waiting process too: GC, then the wait goes on */
     LINES("1 0 call m:a/0", "1 10 out", "1 20 gc_start", "1 26 gc_end", "1 30 in", "close 40"),
     LINES("1 m:a/0 20", "1 m:a/0;SLEEP 14", "1 m:a/0;GC_MINOR 6"),
     "events=5 gc_minor=1 gc_minor_ns=6"},

    {"a_collection_ends_with_its_process", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "1 10 gc_start", "1 20 exit", "1 30 call m:b/0", "close 40"),
     LINES("1 m:a/0 10", "1 m:a/0;GC_MINOR 10", "1 m:b/0 10"),
     "events=4 gc_minor=1 gc_minor_ns=10"},

    /* Allocation (fo_session_gc.c): a collection charges the words since
     * the previous one's end to the stack it starts in; the first only
     * sets the level. */
    {"a_collection_charges_the_words_since_the_last_to_its_stack", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "1 10 gc_start heap=500", /* first: the level only */
           "1 20 gc_end heap=100",                     /* 100 survived */
           "1 30 call m:b/0 from m:a/0", "1 40 gc_start heap=1100", /* b: 1000 */
           "1 50 gc_end heap=200", "1 60 ret m:a/0",
           "1 70 gc_major_start heap=250", /* a: 50 */
           "1 80 gc_major_end heap=20", "1 90 call m:b/0 from m:a/0",
           "1 95 gc_start heap=2020", /* b again: 2000 */
           "1 99 gc_end heap=0", "close 100"),
     LINES("1 m:a/0 40", "1 m:a/0;GC_MINOR 10", "1 m:a/0;m:b/0 26", "1 m:a/0;m:b/0;GC_MINOR 14",
           "1 m:a/0;GC_MAJOR 10", "1 m:a/0;m:b/0 alloc=3000 gcs=2", "1 m:a/0 alloc=50 gcs=1"),
     "events=12 gc_minor=3 gc_major=1 gc_minor_ns=24 gc_major_ns=10 alloc_words=3050 alloc_samples=3 "
     "alloc_unknown=1"},

    {"a_level_read_at_the_start_counts_the_first_collection", DEFAULT_LIMITS,
     LINES("heap_level 1 300", "heap_level 2 50", "1 0 call m:a/0", "1 10 gc_start heap=500",
           "1 20 gc_end heap=100", "close 30"),
     LINES("1 m:a/0 20", "1 m:a/0;GC_MINOR 10", "1 m:a/0 alloc=200 gcs=1"),
     "events=3 gc_minor=1 gc_minor_ns=10 alloc_words=200 alloc_samples=1"},

    {"a_nested_start_and_a_shrunk_heap_charge_nothing_more", DEFAULT_LIMITS,
     /* a start inside a collection is the same collection; a level below
      * the last end (fragments freed) is 0 words, still a sample */
     LINES("1 0 call m:a/0", "1 1 gc_start heap=10", "1 2 gc_end heap=100",
           "1 3 gc_start heap=300", "1 4 gc_major_start heap=900", "1 5 gc_major_end heap=50",
           "1 6 gc_start heap=40", "1 7 gc_end heap=40", "close 8"),
     LINES("1 m:a/0 4", "1 m:a/0;GC_MINOR 4", "1 m:a/0 alloc=200 gcs=2"),
     "events=8 gc_minor=3 gc_minor_ns=4 alloc_words=200 alloc_samples=2 alloc_unknown=1"},

    {"an_exit_forgets_the_heap_level", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "1 1 gc_start heap=10", "1 2 gc_end heap=5", "1 3 exit",
           "1 4 call m:b/0", "1 5 gc_start heap=700", "1 6 gc_end heap=0", "1 7 gc_start heap=70",
           "1 8 gc_end heap=0", "close 9"),
     LINES("1 m:a/0 2", "1 m:a/0;GC_MINOR 1", "1 m:b/0 3", "1 m:b/0;GC_MINOR 2", "1 m:b/0 alloc=70 gcs=1"),
     "events=9 gc_minor=3 gc_minor_ns=3 alloc_words=70 alloc_samples=1 alloc_unknown=2"},

    {"a_pause_keeps_the_heap_level", DEFAULT_LIMITS,
     /* a follower between two requests: its next collection counts from
      * the level its last one left */
     LINES("1 0 call m:a/0", "1 1 gc_start heap=10", "1 2 gc_end heap=5", "1 3 pause",
           "1 4 call m:b/0", "1 5 gc_start heap=705", "1 6 gc_end heap=0", "close 7"),
     LINES("1 m:a/0 2", "1 m:a/0;GC_MINOR 1", "1 m:b/0 2", "1 m:b/0;GC_MINOR 1", "1 m:b/0 alloc=700 gcs=1"),
     "events=7 gc_minor=2 gc_minor_ns=2 alloc_words=700 alloc_samples=1 alloc_unknown=1"},

    {"words_where_no_stack_is_known_wait_for_a_known_one", DEFAULT_LIMITS,
     LINES("heap_level 1 0", "1 0 gc_start heap=300", "1 1 gc_end heap=0", "1 2 call m:a/0",
           "1 3 gc_start heap=50", "1 4 gc_end heap=0", "close 5"),
     LINES("1 (root) 1", "1 GC_MINOR 1", "1 m:a/0 2", "1 m:a/0;GC_MINOR 1", "1 m:a/0 alloc=350 gcs=2"),
     "events=5 gc_minor=2 gc_minor_ns=2 alloc_words=350 alloc_samples=2"},

    {"the_words_since_the_last_collection_go_where_it_is_or_where_the_last_went", DEFAULT_LIMITS,
     /* pid 1 is in m:b/0 at the end; pid 2 paused after its request (no
      * stack known): its tail joins its last words; pid 3 never had its
      * level known: nothing */
     LINES("heap_level 1 0", "1 0 call m:a/0", "1 1 gc_start heap=100", "1 2 gc_end heap=10",
           "1 3 call m:b/0 from m:a/0", "alloc_tail 1 510", "alloc_tail 1 510", /* 500, then 0 */
           "heap_level 2 0", "2 0 call m:c/0", "2 1 gc_start heap=40", "2 2 gc_end heap=0", "2 3 pause",
           "alloc_tail 2 70", "3 0 call m:d/0", "alloc_tail 3 999", "close 10"),
     LINES("1 m:a/0 2", "1 m:a/0;GC_MINOR 1", "1 m:a/0;m:b/0 7", "1 m:a/0 alloc=100 gcs=1",
           "1 m:a/0;m:b/0 alloc=500 gcs=0", "2 m:c/0 2", "2 m:c/0;GC_MINOR 1", "2 m:c/0 alloc=110 gcs=1",
           "3 m:d/0 10"),
     "events=9 gc_minor=2 gc_minor_ns=2 alloc_words=710 alloc_samples=2"},

    {"held_words_go_to_the_first_sampled_stack", DEFAULT_LIMITS,
     LINES("heap_level 1 0", "1 0 gc_start heap=300", "1 1 gc_end heap=0", "1 2 sample m:a/0;m:b/0",
           "close 5"),
     /* (the burst's time moves there too: fo_session_unseen.c) */
     LINES("1 m:a/0;m:b/0 4", "1 m:a/0;m:b/0;GC_MINOR 1", "1 m:a/0;m:b/0 alloc=300 gcs=1",
           "1 m:a/0;m:b/0 samples=1 weight=0"),
     "events=3 samples=1 gc_minor=1 gc_minor_ns=1 alloc_words=300 alloc_samples=1"},

    {"held_words_go_to_the_root_when_the_trace_ends", DEFAULT_LIMITS,
     LINES("heap_level 1 0", "1 0 gc_start heap=300", "1 1 gc_end heap=0", "close 2"),
     LINES("1 (root) 1", "1 GC_MINOR 1", "1 (root) alloc=300 gcs=1"),
     "events=2 gc_minor=1 gc_minor_ns=1 alloc_words=300 alloc_samples=1"},

    {"a_level_read_late_counts_only_while_none_is_known", DEFAULT_LIMITS,
     /* pid 1: read before its first collection; pid 2: its collection came
      * first, the read is ignored */
     LINES("1 0 call m:a/0", "heap_level_unless_known 1 100", "1 1 gc_start heap=400",
           "1 2 gc_end heap=0", "2 0 call m:b/0", "2 1 gc_start heap=50", "2 2 gc_end heap=20",
           "heap_level_unless_known 2 0", "2 3 gc_start heap=80", "2 4 gc_end heap=0", "close 5"),
     LINES("1 m:a/0 4", "1 m:a/0;GC_MINOR 1", "1 m:a/0 alloc=300 gcs=1", "2 m:b/0 3", "2 m:b/0;GC_MINOR 2",
           "2 m:b/0 alloc=60 gcs=1"),
     "events=8 gc_minor=3 gc_minor_ns=3 alloc_words=360 alloc_samples=2 alloc_unknown=1"},

    {"the_tracers_own_words_per_event_are_taken_off", DEFAULT_LIMITS,
     /* 3 call/return_to events since the last end, 4 words each */
     LINES("alloc_event_words 4", "1 0 call m:a/0", "1 1 gc_start heap=0", "1 2 gc_end heap=0",
           "1 3 call m:b/0 from m:a/0", "1 4 ret m:a/0", "1 5 call m:b/0 from m:a/0",
           "1 6 gc_start heap=100", "1 7 gc_end heap=0", "1 8 gc_start heap=3", "1 9 gc_end heap=0",
           "close 10"),
     LINES("1 m:a/0 3", "1 m:a/0;GC_MINOR 1", "1 m:a/0;m:b/0 4", "1 m:a/0;m:b/0;GC_MINOR 2",
           "1 m:a/0;m:b/0 alloc=91 gcs=2"),
     "events=10 gc_minor=3 gc_minor_ns=3 alloc_words=91 alloc_samples=2 alloc_unknown=1"},

    {"malformed_count_is_added", DEFAULT_LIMITS,
     LINES("malformed 3", "1 0 call m:a/0", "malformed 2", "close 10"), LINES("1 m:a/0 10"),
     /* the header counts malformed events among the dropped ones */
     "events=1 malformed_events=5 dropped_events=5"},

    {"ignored_count_is_added", DEFAULT_LIMITS,
     LINES("ignored 4", "1 0 call m:a/0", "ignored 1", "close 10"), LINES("1 m:a/0 10"),
     "events=1 ignored_events=5"},

    {"close_with_no_events", DEFAULT_LIMITS, LINES("close 1000"), NO_LINES, ""},
};
// clang-format on

/* --- non-table tests ------------------------------------------------------ */

/* fib(n) on top of the stack: pushes fib(n-1), then fib(n-2), real depth. */
static void gen_fib(fo_session *s, int n, uint32_t depth, int64_t *t, uint64_t *charge,
                    uint64_t *events)
{
    if (n < 2)
        return;
    for (int k = 1; k <= 2; k++) {
        *events += 2;
        charge[depth] += 10;
        *t += 10;
        fo_event ev = ev_call(1, *t, "m:fib/1", "m:fib/1");
        fo_session_apply(s, &ev);
        gen_fib(s, n - k, depth + 1, t, charge, events);
        charge[depth + 1] += 10;
        *t += 10;
        ev = ev_ret(1, *t, "m:fib/1");
        fo_session_apply(s, &ev);
    }
}

static char *fib_path(uint32_t depth)
{
    size_t len = depth * 8 + 1;
    char *p = calloc(len, 1);
    assert_non_null(p);
    for (uint32_t d = 0; d < depth; d++)
        memcpy(p + (d == 0 ? 0 : 7 + (d - 1) * 8), d == 0 ? "m:fib/1" : ";m:fib/1", d == 0 ? 7 : 8);
    return p;
}

static void test_direct_recursion_fib_keeps_real_depth(void **state)
{
    (void)state;
    fo_session *s = ts_new_session(NULL);
    uint64_t charge[32] = {0};
    uint64_t events = 2; /* the outer call and return */
    int64_t t = 1000;
    fo_event ev = ev_call(1, t, "m:fib/1", NULL);
    fo_session_apply(s, &ev);
    gen_fib(s, 20, 1, &t, charge, &events);
    charge[1] += 10;
    t += 10;
    ev = ev_ret(1, t, NULL);
    fo_session_apply(s, &ev);

    const char *expect[32];
    char *owned[32];
    size_t n = 0;
    for (uint32_t d = 1; d < 32; d++) {
        if (charge[d] == 0)
            continue;
        char *path = fib_path(d);
        size_t len = strlen(path) + 32;
        owned[n] = malloc(len);
        assert_non_null(owned[n]);
        snprintf(owned[n], len, "%s %" PRIu64, path, charge[d]);
        free(path);
        expect[n] = owned[n];
        n++;
    }
    expect[n] = NULL;
    assert_int_equal(n, 20); /* depths 1..20 */
    ts_check_tree(s);
    ts_assert_pid(s, 1, expect);
    assert_int_equal(ts_pid_max_depth(s, 1), 20);
    assert_int_equal(ts_pid_node_count(s, 1, 0), 21); /* root + 20 fib levels */
    assert_int_equal(ts_pid_total(s, 1), (uint64_t)(t - 1000));
    assert_int_equal(events, 2 + 2 * 21890); /* fib(20) makes 21890 inner calls */
    char spec[64];
    snprintf(spec, sizeof spec, "events=%" PRIu64, events);
    ts_assert_stats(s, spec);
    for (size_t i = 0; i < n; i++)
        free(owned[i]);
    fo_session_free(s);
}

static void apply_loop(fo_session *s, int64_t *t, int iterations)
{
    for (int i = 0; i < iterations; i++) {
        *t += 10;
        fo_event ev = ev_call(1, *t, "m:loop/1", "m:main/0");
        fo_session_apply(s, &ev);
    }
}

static void test_tail_calls_do_not_grow_the_stack(void **state)
{
    (void)state;
    fo_session *s = ts_new_session(NULL);
    int64_t t = 0;
    fo_event ev = ev_call(1, t, "m:main/0", NULL);
    fo_session_apply(s, &ev);
    t += 5;
    ev = ev_call(1, t, "m:loop/1", "m:main/0"); /* main: 5 */
    fo_session_apply(s, &ev);
    apply_loop(s, &t, 10); /* loop tail-calls itself: caller is main */
    size_t mem10 = fo_session_memory(s);
    uint32_t nodes10 = fo_session_node_count(s);
    apply_loop(s, &t, 990);
    assert_int_equal(fo_session_memory(s), mem10);
    assert_int_equal(fo_session_node_count(s), nodes10);
    t += 7;
    ev = ev_ret(1, t, "m:main/0"); /* main;loop: 10 * 1000 + 7 */
    fo_session_apply(s, &ev);
    fo_session_close(s, t + 100); /* main: 100 */

    ts_check_tree(s);
    ts_assert_pid(s, 1, LINES("m:main/0 105", "m:main/0;m:loop/1 10007"));
    assert_int_equal(ts_pid_max_depth(s, 1), 2);
    assert_int_equal(ts_pid_node_count(s, 1, 0), 3);
    ts_assert_stats(s, "events=1003 resyncs=1000");
    fo_session_free(s);
}

static void test_repeated_stacks_do_not_grow_memory(void **state)
{
    (void)state;
    fo_session *s = ts_new_session(NULL);
    int64_t t = 0;
    size_t mem = 0;
    uint32_t nodes = 0;
    for (int i = 0; i < 5000; i++) {
        static const char *const script[] = {"m:a/0", "m:b/0", "m:c/0"};
        fo_event ev = ev_call(1, t++, script[0], NULL);
        fo_session_apply(s, &ev);
        ev = ev_call(1, t++, script[1], script[0]);
        fo_session_apply(s, &ev);
        ev = ev_call(1, t++, script[2], script[1]);
        fo_session_apply(s, &ev);
        ev = ev_kind(FO_EV_OUT, 1, t++);
        fo_session_apply(s, &ev);
        ev = ev_kind(FO_EV_IN, 1, t++);
        fo_session_apply(s, &ev);
        ev = ev_ret(1, t++, script[1]);
        fo_session_apply(s, &ev);
        ev = ev_ret(1, t++, script[0]);
        fo_session_apply(s, &ev);
        ev = ev_ret(1, t++, NULL);
        fo_session_apply(s, &ev);
        if (i == 10) {
            mem = fo_session_memory(s);
            nodes = fo_session_node_count(s);
        }
    }
    assert_true(mem > 0);
    assert_int_equal(fo_session_memory(s), mem);
    assert_int_equal(fo_session_node_count(s), nodes);
    ts_check_tree(s);
    ts_assert_pid(s, 1,
                  LINES("(root) 4999", "m:a/0 10000", "m:a/0;m:b/0 10000",
                        "m:a/0;m:b/0;m:c/0 10000", "m:a/0;m:b/0;m:c/0;SLEEP 5000"));
    ts_assert_stats(s, "events=40000");
    fo_session_free(s);
}

static void test_frames_are_interned_once_with_their_mfa(void **state)
{
    (void)state;
    fo_session *s = ts_new_session(NULL);
    ts_run_script(s,
                  LINES("1 0 call m:a/0", "1 1 call m:b/2 from m:a/0", "2 2 call m:b/2 from m:a/0",
                        "2 3 call m:a/0 from m:b/2", "3 4 ret n:c/1"));
    fo_mfa want[3] = {ts_mfa("m:a/0"), ts_mfa("m:b/2"), ts_mfa("n:c/1")};
    int seen[3] = {0, 0, 0};
    uint32_t nframes = fo_session_frame_count(s);
    fo_mfa mfa;
    for (uint32_t f = 0; f < FO_FRAME_FIRST_REAL; f++)
        assert_int_equal(fo_session_frame_mfa(s, f, &mfa), 0);
    /* fo_session_frame_count counts real frames; their ids follow the
     * reserved ones: FO_FRAME_FIRST_REAL .. FO_FRAME_FIRST_REAL + count - 1 */
    assert_int_equal(nframes, 3);
    uint32_t real = 0;
    for (uint32_t f = FO_FRAME_FIRST_REAL; f < FO_FRAME_FIRST_REAL + nframes; f++) {
        memset(&mfa, 0, sizeof mfa);
        assert_int_equal(fo_session_frame_mfa(s, f, &mfa), 1);
        real++;
        int matched = 0;
        for (int i = 0; i < 3; i++) {
            if (ts_mfa_equal(mfa, want[i])) {
                seen[i]++;
                matched = 1;
            }
        }
        assert_true(matched);
    }
    assert_int_equal(real, 3);
    assert_int_equal(fo_session_frame_mfa(s, FO_FRAME_FIRST_REAL + 3, &mfa), 0);
    assert_int_equal(seen[0], 1);
    assert_int_equal(seen[1], 1);
    assert_int_equal(seen[2], 1);
    fo_session_free(s);
}

static void test_process_pids_and_node_structure(void **state)
{
    (void)state;
    fo_session *s = ts_new_session(NULL);
    const uint64_t big = UINT64_C(0xFEDCBA9876543210);
    fo_event ev = ev_call(big, 10, "m:a/0", NULL);
    fo_session_apply(s, &ev);
    ev = ev_call(42, 11, "m:a/0", NULL);
    fo_session_apply(s, &ev);
    ev = ev_call(big, 12, "m:b/0", "m:a/0");
    fo_session_apply(s, &ev);
    ev = ev_kind(FO_EV_OUT, big, 13);
    fo_session_apply(s, &ev);

    assert_int_equal(fo_session_process_count(s), 2);
    int found_big = 0;
    int found_42 = 0;
    for (uint32_t p = 0; p < 2; p++) {
        uint64_t pid = fo_session_process_pid(s, p);
        found_big += pid == big;
        found_42 += pid == 42;
    }
    assert_int_equal(found_big, 1);
    assert_int_equal(found_42, 1);
    ts_check_tree(s);
    /* Every node, with or without time: the whole tree is exactly this
     * (node-cap nodes made eagerly are ignored). */
    char *all = ts_render_session(s, TS_RENDER_ZERO);
    char *want =
        ts_join_sorted(LINES("42 (root) 0", "42 m:a/0 0", "18364758544493064720 (root) 0",
                             "18364758544493064720 m:a/0 2", "18364758544493064720 m:a/0;m:b/0 1",
                             "18364758544493064720 m:a/0;m:b/0;SLEEP 0"));
    char *filtered = calloc(strlen(all) + 1, 1);
    assert_non_null(filtered);
    size_t len = 0;
    for (const char *line = all; *line != '\0';) {
        const char *end = strchr(line, '\n');
        assert_non_null(end);
        size_t n = (size_t)(end - line) + 1;
        static const char cap[] = " [node_cap] 0\n";
        if (n < sizeof cap - 1 || memcmp(end + 1 - (sizeof cap - 1), cap, sizeof cap - 1) != 0) {
            memcpy(filtered + len, line, n);
            len += n;
        }
        line = end + 1;
    }
    ts_assert_text(filtered, want, "all nodes");
    free(filtered);
    free(all);
    free(want);
    fo_session_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_direct_recursion_fib_keeps_real_depth),
        cmocka_unit_test(test_tail_calls_do_not_grow_the_stack),
        cmocka_unit_test(test_repeated_stacks_do_not_grow_memory),
        cmocka_unit_test(test_frames_are_interned_once_with_their_mfa),
        cmocka_unit_test(test_process_pids_and_node_structure),
    };
    int failed = ts_run_cases("session_cases", session_cases,
                              sizeof session_cases / sizeof session_cases[0]);
    failed += cmocka_run_group_tests(tests, NULL, NULL);
    return failed == 0 ? 0 : 1;
}
