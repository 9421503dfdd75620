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
           "1 100 sample m:a/0;m:c/0 w=40", /* a;b: 100 */
           "1 250 sample m:a/0 w=7",        /* a;c: 150 */
           "close 300"),                    /* a: 50 */
     LINES("1 m:a/0;m:b/0 100", "1 m:a/0;m:c/0 150", "1 m:a/0 50",
           "1 m:a/0;m:b/0 samples=1 weight=0", "1 m:a/0;m:c/0 samples=1 weight=40",
           "1 m:a/0 samples=1 weight=7"),
     "events=3 samples=3"},

    {"in_and_out_split_a_sample_exactly", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:b/0",
           "1 40 out",           /* a;b: 40 */
           "1 100 in",           /* a;b;SLEEP: 60 */
           "1 130 sample m:a/0", /* a: 30, the burst since `in` goes to the new sample */
           "close 200"),         /* a: 70 */
     LINES("1 m:a/0;m:b/0 40", "1 m:a/0;m:b/0;SLEEP 60", "1 m:a/0 100",
           "1 m:a/0;m:b/0 samples=1 weight=0", "1 m:a/0 samples=1 weight=0"),
     "events=4 samples=2"},

    {"a_burst_after_in_goes_to_the_next_sample_then_samples_hold", DEFAULT_LIMITS,
     LINES("1 0 sample m:w/0",
           "1 10 out",               /* w: 10 */
           "1 50 in",                /* w;SLEEP: 40 */
           "1 80 sample m:a/0;m:b/0", /* a;b: 30 (the burst since in) */
           "1 90 sample m:a/0;m:c/0", /* a;b: 10 (holds) */
           "close 100"),             /* a;c: 10 */
     LINES("1 m:w/0 10", "1 m:w/0;SLEEP 40", "1 m:a/0;m:b/0 40", "1 m:a/0;m:c/0 10",
           "1 m:w/0 samples=1 weight=0", "1 m:a/0;m:b/0 samples=1 weight=0",
           "1 m:a/0;m:c/0 samples=1 weight=0"),
     "events=5 samples=3"},

    {"a_process_first_seen_by_events_gets_its_first_burst_on_its_first_sample", DEFAULT_LIMITS,
     LINES("1 0 in",                 /* a callee taken into a trace mid-wait */
           "1 20 sample m:h/0",      /* h: 20 */
           "close 50"),              /* h: 30 */
     LINES("1 m:h/0 50", "1 m:h/0 samples=1 weight=0"), "events=2 samples=1"},

    {"bursts_before_a_process_first_sample_move_to_that_sample", DEFAULT_LIMITS,
     LINES("1 0 in",
           "1 10 out",           /* root: 10, moved to h at the first sample */
           "1 20 in",            /* SLEEP (root): 10, stays off-CPU */
           "1 30 out",           /* root: 10, moved */
           "1 40 in",            /* SLEEP: 10 */
           "1 50 sample m:h/0",  /* h: 10 (the burst since in) + 20 moved */
           "close 60"),          /* h: 10 */
     LINES("1 SLEEP 20", "1 m:h/0 40", "1 m:h/0 samples=1 weight=0"), "events=6 samples=1"},

    {"a_call_after_in_shows_the_stack_so_samples_hold_again", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0",
           "1 10 out",                    /* a: 10 */
           "1 20 in",                     /* a;SLEEP: 10 */
           "1 30 call m:b/0 from m:a/0",  /* a: 10 */
           "1 60 sample m:a/0;m:c/0",     /* a;b: 30 */
           "close 70"),                   /* a;c: 10 */
     LINES("1 m:a/0 20", "1 m:a/0;SLEEP 10", "1 m:a/0;m:b/0 30", "1 m:a/0;m:c/0 10",
           "1 m:a/0 samples=1 weight=0", "1 m:a/0;m:c/0 samples=1 weight=0"),
     "events=5 samples=2"},

    {"a_sample_while_off_cpu_moves_the_rest_of_the_wait_under_it", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:b/0 w=3",
           "1 10 out",                     /* a;b: 10 */
           "1 50 sample m:a/0;m:w/0 w=2",  /* a;b;SLEEP: 40 */
           "1 90 in",                      /* a;w;SLEEP: 40 */
           "close 100"),                   /* a;w: 10 */
     LINES("1 m:a/0;m:b/0 10", "1 m:a/0;m:b/0;SLEEP 40", "1 m:a/0;m:w/0;SLEEP 40",
           "1 m:a/0;m:w/0 10",
           /* off-CPU: the sample counts on the leaf it waits in, not on a;w */
           "1 m:a/0;m:b/0 samples=1 weight=3", "1 m:a/0;m:w/0;SLEEP samples=1 weight=2"),
     "events=4 samples=2"},

    {"a_wait_in_a_call_stays_waiting_after_a_sample_and_moves_under_it", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0",
           "1 10 out_call",           /* a: 10 */
           "1 30 sample m:a/0;m:r/0", /* a;WAITING: 20, moved under a;r */
           "1 60 in",                 /* a;r;WAITING: 30 */
           "close 60"),
     LINES("1 m:a/0 10", "1 m:a/0;m:r/0;WAITING 50",
           "1 m:a/0 samples=1 weight=0", "1 m:a/0;m:r/0;WAITING samples=1 weight=0"),
     "events=4 samples=2"},

    {"a_same_sample_is_a_sample_of_the_stack_the_process_has", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:b/0 w=1",
           "1 10 out",                /* a;b: 10 */
           "1 30 sample = w=2",       /* a;b;SLEEP: 20, counted there */
           "1 40 sample = w=3",       /* a;b;SLEEP: 10 */
           "1 50 in",                 /* a;b;SLEEP: 10 */
           "1 60 sample = w=4",       /* the burst since in stays on a;b */
           "close 70"),               /* a;b: 10 */
     LINES("1 m:a/0;m:b/0 30", "1 m:a/0;m:b/0;SLEEP 40",
           "1 m:a/0;m:b/0 samples=2 weight=5", "1 m:a/0;m:b/0;SLEEP samples=2 weight=5"),
     "events=6 samples=4"},

    {"a_same_sample_of_a_wait_in_a_call_keeps_the_call_on_its_leaf", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:r/0",
           "1 10 out_call",           /* a;r: 10 */
           "1 30 sample =",           /* a;r;WAITING: 20 */
           "1 50 in",                 /* a;r;WAITING: 20 */
           "close 50"),
     LINES("1 m:a/0;m:r/0 10", "1 m:a/0;m:r/0;WAITING 40",
           "1 m:a/0;m:r/0 samples=1 weight=0", "1 m:a/0;m:r/0;WAITING samples=1 weight=0"),
     "events=4 samples=2"},

    {"a_same_sample_may_stand_for_several", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0 w=1", "1 10 out", "1 50 sample =4 w=2", "1 60 sample =0",
           "close 70"),
     LINES("1 m:a/0 10", "1 m:a/0;SLEEP 60", "1 m:a/0 samples=1 weight=1",
           "1 m:a/0;SLEEP samples=4 weight=2"),
     "events=3 samples=5 dropped_events=1"},

    {"ticks_a_sampler_slept_through_count_on_the_wait_leaf_and_change_nothing_else", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:b/0 w=1",
           "1 10 out",                /* a;b: 10 */
           "1 20 sample =",           /* a;b;SLEEP: 10; the sampler sleeps */
           "1 80 in",                 /* a;b;SLEEP: 60 */
           "1 80 slept 5",            /* woken: 5 ticks were slept through */
           "1 85 slept 0",            /* nothing: dropped */
           "9 85 slept 2",            /* a process never seen: dropped */
           "close 90"),               /* a;b: 10 */
     LINES("1 m:a/0;m:b/0 20", "1 m:a/0;m:b/0;SLEEP 70", "1 m:a/0;m:b/0 samples=1 weight=1",
           "1 m:a/0;m:b/0;SLEEP samples=6 weight=0"),
     "events=4 samples=7 dropped_events=2"},

    {"a_same_sample_of_a_process_never_sampled_lands_on_its_root", DEFAULT_LIMITS,
     LINES("2 0 sample = w=9", "2 10 sample =", "close 20"),
     LINES("2 (root) 20", "2 (root) samples=2 weight=9"), "events=2 samples=2"},

    {"a_waited_sample_takes_the_whole_wait_it_found_under_its_stack", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:b/0",
           "1 10 out",                        /* a;b: 10 */
           "1 50 sample m:a/0;m:w/0 waited",  /* the 40 of this wait move under a;w */
           "1 90 in",                         /* a;w;SLEEP: 40 */
           "close 100"),                      /* a;w: 10 */
     LINES("1 m:a/0;m:b/0 10", "1 m:a/0;m:w/0;SLEEP 80", "1 m:a/0;m:w/0 10",
           "1 m:a/0;m:b/0 samples=1 weight=0", "1 m:a/0;m:w/0;SLEEP samples=1 weight=0"),
     "events=4 samples=2"},

    {"the_in_out_pair_that_answered_does_not_split_a_waited_wait", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:b/0",
           "1 10 out",                        /* a;b: 10 */
           "1 50 in",                         /* a;b;SLEEP: 40 (then asked for its stack) */
           "1 52 out",                        /* 2, answering, unseen */
           "1 55 sample m:a/0;m:w/0 waited",  /* a;b;SLEEP: 3; 40 + 3 move under a;w,
                                                 the 2 under a: b and w share it */
           "1 90 in",                         /* a;w;SLEEP: 35 */
           "close 100"),                      /* a;w: 10 */
     LINES("1 m:a/0;m:b/0 10", "1 m:a/0 2", "1 m:a/0;m:w/0;SLEEP 78", "1 m:a/0;m:w/0 10",
           "1 m:a/0;m:b/0 samples=1 weight=0", "1 m:a/0;m:w/0;SLEEP samples=1 weight=0"),
     "events=6 samples=2"},

    {"a_waited_sample_that_comes_before_the_answering_out_takes_the_wait_before_it", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:b/0",
           "1 10 out",                        /* a;b: 10 */
           "1 50 in",                         /* a;b;SLEEP: 40, moved under a;w */
           "1 52 sample m:a/0;m:w/0 waited",  /* a: 2 (the answering burst, which b
                                                 and w share) */
           "1 53 out",                        /* a;w: 1 */
           "1 90 in",                         /* a;w;SLEEP: 37 */
           "close 100"),                      /* a;w: 10 */
     LINES("1 m:a/0;m:b/0 10", "1 m:a/0 2", "1 m:a/0;m:w/0;SLEEP 77", "1 m:a/0;m:w/0 11",
           "1 m:a/0;m:b/0 samples=1 weight=0", "1 m:a/0;m:w/0 samples=1 weight=0"),
     "events=6 samples=2"},

    {"an_unwaited_sample_in_a_burst_keeps_the_wait_before_it", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:b/0",
           "1 10 out", "1 50 in",
           "1 52 sample m:a/0;m:w/0",         /* may be a real wake-up: the wait stays */
           "1 53 out", "1 90 in", "close 100"),
     LINES("1 m:a/0;m:b/0 10", "1 m:a/0;m:b/0;SLEEP 40", "1 m:a/0;m:w/0;SLEEP 37",
           "1 m:a/0;m:w/0 13", "1 m:a/0;m:b/0 samples=1 weight=0", "1 m:a/0;m:w/0 samples=1 weight=0"),
     "events=6 samples=2"},

    {"a_pair_that_ran_code_keeps_the_wait_before_it", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0",
           "1 10 out",                        /* a: 10 */
           "1 50 in",                         /* a;SLEEP: 40 */
           "1 51 call m:c/0 from m:a/0",      /* a: 1, it ran: the wait before was elsewhere */
           "1 52 out",                        /* a;c: 1 */
           "1 55 sample m:a/0;m:w/0 waited",  /* a;c;SLEEP: 3, moved */
           "1 90 in",                         /* a;w;SLEEP: 35 */
           "close 100"),                      /* a;w: 10 */
     LINES("1 m:a/0 11", "1 m:a/0;SLEEP 40", "1 m:a/0;m:c/0 1", "1 m:a/0;m:w/0;SLEEP 38",
           "1 m:a/0;m:w/0 10", "1 m:a/0;m:w/0;SLEEP samples=1 weight=0"),
     "events=7 samples=1"},

    {"an_unwaited_sample_moves_only_the_rest_of_the_wait", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:b/0",
           "1 10 out",
           "1 50 in", "1 52 out",
           "1 55 sample m:a/0;m:w/0",         /* may have run meanwhile: only the rest
                                                 moves; the unseen burst's 2 go to a */
           "1 90 in",
           "close 100"),
     LINES("1 m:a/0;m:b/0 10", "1 m:a/0 2", "1 m:a/0;m:b/0;SLEEP 43", "1 m:a/0;m:w/0;SLEEP 35",
           "1 m:a/0;m:w/0 10", "1 m:a/0;m:b/0 samples=1 weight=0",
           "1 m:a/0;m:w/0;SLEEP samples=1 weight=0"),
     "events=6 samples=2"},

    {"a_leading_sample_gives_the_time_after_it_to_the_next_sample", DEFAULT_LIMITS,
     LINES("1 0 sample m:p/0 leading",  /* taken before the work started */
           "1 50 sample m:p/0;m:w/0",   /* p;w: 50, where the work went */
           "1 80 sample m:p/0",         /* p;w: 30 (a plain sample holds) */
           "close 100"),                /* p: 20 */
     LINES("1 m:p/0;m:w/0 80", "1 m:p/0 20", "1 m:p/0 samples=2 weight=0",
           "1 m:p/0;m:w/0 samples=1 weight=0"),
     "events=3 samples=3"},

    /* the first burst's collections and the running between them (their
     * events charge the stack the burst left) go where its sample shows */
    {"an_unseen_bursts_collections_go_under_its_first_sample", DEFAULT_LIMITS,
     LINES("1 0 sample m:p/0 leading",
           "1 10 gc_start", "1 14 gc_end",                /* 10 run, GC 4 */
           "1 20 gc_major_start", "1 30 gc_major_end",    /* 6 run, GC 10 */
           "1 40 sample m:p/0;m:w/0",                     /* 10 run: all of it under w */
           "1 50 gc_start", "1 52 gc_end",                /* seen: under w */
           "close 60"),
     LINES("1 m:p/0;m:w/0 44", "1 m:p/0;m:w/0;GC_MINOR 6", "1 m:p/0;m:w/0;GC_MAJOR 10",
           "1 m:p/0 samples=1 weight=0", "1 m:p/0;m:w/0 samples=1 weight=0"),
     "events=8 samples=2 gc_minor=2 gc_major=1 gc_minor_ns=6 gc_major_ns=10"},

    /* ... but the allocation its collections charged stays at the stack
     * last known (fo_session_gc.c) */
    {"an_unseen_bursts_allocation_stays_at_the_last_known_stack", DEFAULT_LIMITS,
     LINES("1 0 sample m:p/0 leading",
           "1 5 gc_start heap=10", "1 6 gc_end heap=0",       /* the level */
           "1 10 gc_start heap=400", "1 14 gc_end heap=0",    /* unseen: 400 */
           "1 20 gc_major_start heap=60", "1 30 gc_major_end heap=0", /* unseen: 60 */
           "1 40 sample m:p/0;m:w/0",                          /* 460 stay at p */
           "1 50 gc_start heap=7", "1 52 gc_end heap=0",      /* seen: 7 to w */
           "close 60"),
     LINES("1 m:p/0;m:w/0 43", "1 m:p/0;m:w/0;GC_MINOR 7", "1 m:p/0;m:w/0;GC_MAJOR 10",
           "1 m:p/0 samples=1 weight=0", "1 m:p/0;m:w/0 samples=1 weight=0",
           "1 m:p/0 alloc=460 gcs=2", "1 m:p/0;m:w/0 alloc=7 gcs=1"),
     "events=10 samples=2 gc_minor=3 gc_major=1 gc_minor_ns=7 gc_major_ns=10 alloc_words=467 "
     "alloc_samples=3 alloc_unknown=1"},

    /* before the first sample: the burst was the traced code's, one frame
     * into the stack its wait is sampled in (f), not the trace's root (p)
     * and not the function it waits in (sleep) */
    {"a_first_burst_that_ended_unseen_goes_under_the_traced_code", DEFAULT_LIMITS,
     LINES("1 0 sample m:p/0 leading",
           "1 10 out",                                    /* a burst of 10 */
           "1 15 sample m:p/0;m:f/0;m:sleep/0 waited",     /* the wait, found in sleep */
           "1 40 in",
           "close 50"),
     LINES("1 m:p/0;m:f/0 10", "1 m:p/0;m:f/0;m:sleep/0;SLEEP 30", "1 m:p/0;m:f/0;m:sleep/0 10",
           "1 m:p/0 samples=1 weight=0", "1 m:p/0;m:f/0;m:sleep/0;SLEEP samples=1 weight=0"),
     "events=4 samples=2"},

    /* a waited stack answered as the process was scheduled in is from
     * before the burst it then runs: the burst goes where the next sample
     * shows, not to the sleep it woke from */
    {"a_stack_answered_at_the_wake_does_not_hold_the_burst_after_it", DEFAULT_LIMITS,
     LINES("1 0 sample m:p/0;m:f/0",
           "1 5 out", "1 20 in",
           "1 21 sample m:p/0;m:f/0;m:sleep/0 waited",
           "1 40 sample m:p/0;m:f/0;m:spin/0",
           "close 50"),
     LINES("1 m:p/0;m:f/0 6", "1 m:p/0;m:f/0;m:sleep/0;SLEEP 15",
           "1 m:p/0;m:f/0;m:spin/0 29", "1 m:p/0;m:f/0 samples=1 weight=0",
           "1 m:p/0;m:f/0;m:sleep/0 samples=1 weight=0", "1 m:p/0;m:f/0;m:spin/0 samples=1 weight=0"),
     "events=5 samples=3"},

    /* preempted (scheduled out, runnable) and sampled so: the bursts before
     * ran where the sample shows, not in the sleep they woke from */
    {"bursts_before_a_busy_sample_of_a_preempted_process_go_where_it_shows", DEFAULT_LIMITS,
     LINES("1 0 sample m:p/0;m:f/0;m:sleep/0", "1 1 out",   /* 1 seen in sleep */
           "1 5 in", "1 15 out", "1 16 in", "1 26 out",   /* woke, preempted twice */
           "1 30 sample m:p/0;m:spin/0 busy",
           "1 31 in", "close 40"),
     /* found runnable at 30, it has been since its `out` at 26, under the
      * stack it runs in, until its `in`; the preemption no sample saw
      * (15-16) stays a SLEEP where it was charged */
     LINES("1 m:p/0;m:f/0;m:sleep/0 1", "1 m:p/0;m:f/0;m:sleep/0;SLEEP 5", "1 m:p/0;m:spin/0 29",
           "1 m:p/0;m:spin/0;RUNNABLE 5", "1 m:p/0;m:f/0;m:sleep/0 samples=1 weight=0",
           "1 m:p/0;m:spin/0;RUNNABLE samples=1 weight=0"),
     "events=8 samples=2"},

    /* seen waiting before its `out` came: the stack is where it waits, and
     * the burst before it goes where an `out` would have sent it */
    {"a_waiting_sample_before_its_out_places_the_burst_as_after_it", DEFAULT_LIMITS,
     LINES("1 0 sample m:p/0 leading",
           "1 10 sample m:p/0;m:f/0;m:sleep/0 waiting",
           "1 11 out", "close 20"),
     LINES("1 m:p/0;m:f/0 10", "1 m:p/0;m:f/0;m:sleep/0 1", "1 m:p/0;m:f/0;m:sleep/0;SLEEP 9",
           "1 m:p/0 samples=1 weight=0", "1 m:p/0;m:f/0;m:sleep/0 samples=1 weight=0"),
     "events=3 samples=2"},

    /* answered waiting (it ran since the tick looked: not waited), it has
     * waited in that stack since its last `out`; the wait before, not */
    {"a_waiting_sample_takes_the_wait_since_the_last_out", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:b/0", "1 10 out", "1 20 in", "1 22 out",
           "1 30 sample m:a/0;m:w/0 waiting", "1 40 in", "close 50"),
     LINES("1 m:a/0;m:b/0 10", "1 m:a/0;m:b/0;SLEEP 10", "1 m:a/0 2", "1 m:a/0;m:w/0;SLEEP 18",
           "1 m:a/0;m:w/0 10", "1 m:a/0;m:b/0 samples=1 weight=0",
           "1 m:a/0;m:w/0;SLEEP samples=1 weight=0"),
     "events=6 samples=2"},

    /* a burst placed by one sample is not placed again by the next */
    {"a_backfilled_burst_stays_where_its_sample_put_it", DEFAULT_LIMITS,
     LINES("1 0 sample m:f/0;m:g/0", "1 2 out", "1 12 in", "1 14 sample m:f/0", "1 16 out", "1 21 in",
           "1 21 sample m:f/0;m:g/0", "1 23 out", "1 33 in", "1 35 sample m:f/0", "1 37 out", "1 42 in",
           "close 42"),
     LINES("1 m:f/0 8", "1 m:f/0;SLEEP 10", "1 m:f/0;m:g/0 4", "1 m:f/0;m:g/0;SLEEP 20",
           "1 m:f/0 samples=2 weight=0", "1 m:f/0;m:g/0 samples=2 weight=0"),
     "events=12 samples=4"},

    /* a burst that ends unseen ran in what the stack it woke in (a
     * Process.sleep it returned from) shares with the one a sample of its
     * next wait shows: p */
    {"an_unseen_burst_goes_where_its_wait_is_sampled", DEFAULT_LIMITS,
     LINES("1 0 sample m:p/0;m:s/0",
           "1 10 out", "1 50 in",                         /* s: 10, s;SLEEP 40 */
           "1 53 gc_start", "1 55 gc_end", "1 60 out",    /* unseen: 3 + 5 run, GC 2 */
           "1 70 sample m:p/0;m:r/0",                     /* waiting in r (the wait
                                                             before it stays) */
           "close 80"),
     LINES("1 m:p/0;m:s/0 10", "1 m:p/0;m:s/0;SLEEP 50", "1 m:p/0 8",
           "1 m:p/0;GC_MINOR 2", "1 m:p/0;m:r/0;SLEEP 10",
           "1 m:p/0;m:s/0 samples=1 weight=0", "1 m:p/0;m:r/0;SLEEP samples=1 weight=0"),
     "events=7 samples=2 gc_minor=1 gc_minor_ns=2"},

    {"a_leading_sample_then_a_wait_keeps_the_wait_under_it", DEFAULT_LIMITS,
     /* the bursts before the first sample (0-10, 40-60) were the traced
      * work: under the stack that sample shows, never the bare root */
     LINES("1 0 sample m:p/0 leading", "1 10 out", "1 40 in", "1 60 sample m:p/0;m:w/0",
           "close 70"),
     LINES("1 m:p/0;SLEEP 30", "1 m:p/0;m:w/0 40", "1 m:p/0 samples=1 weight=0",
           "1 m:p/0;m:w/0 samples=1 weight=0"),
     "events=4 samples=2"},

    {"an_empty_stack_charges_the_process_root", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0", "1 10 sample -", "close 30"),
     LINES("1 m:a/0 10", "1 (root) 20", "1 m:a/0 samples=1 weight=0",
           "1 (root) samples=1 weight=0"),
     "events=2 samples=2"},

    {"deep_samples_fold_past_max_depth_once", {0, 2, 0, 0, 0},
     LINES("1 0 sample m:a/0;m:b/0;m:c/0;m:d/0",
           "1 10 sample m:a/0;m:b/0;m:c/0;m:d/0", /* same stack: no new pushes */
           "1 20 sample m:a/0;m:b/0;m:e/0",
           "close 40"),
     LINES("1 m:a/0;m:b/0;" CAP " 40", "1 m:a/0;m:b/0;" CAP " samples=3 weight=0"),
     "events=3 samples=3 depth_truncations=3 truncated_stacks=3"},

    {"samples_of_processes_past_the_limit_are_dropped", {0, 0, 1, 0, 0},
     LINES("1 0 sample m:a/0 w=1", "2 5 sample m:b/0 w=9", "close 10"),
     LINES("1 m:a/0 10", "1 m:a/0 samples=1 weight=1"),
     "events=1 samples=1 dropped_events=1 process_limit_hits=1"},

    {"samples_and_calls_mix", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:b/0",
           "1 10 call m:c/0 from m:b/0", /* a;b: 10 */
           "1 30 ret m:b/0",             /* a;b;c: 20 */
           "close 35"),                  /* a;b: 5 */
     LINES("1 m:a/0;m:b/0 15", "1 m:a/0;m:b/0;m:c/0 20", "1 m:a/0;m:b/0 samples=1 weight=0"),
     "events=3 samples=1"},

    {"an_exited_process_sampled_again_starts_afresh", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0", "1 10 exit", "1 500 sample m:b/0 w=4", "close 520"),
     LINES("1 m:a/0 10", "1 m:b/0 20", "1 m:a/0 samples=1 weight=0",
           "1 m:b/0 samples=1 weight=4"),
     "events=3 samples=2"},

    /* --- per-stack sample counts and weights ------------------------------ */
    {"samples_and_weights_add_up_on_the_stack_they_land_on", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:b/0 w=10",
           "1 10 sample m:a/0;m:b/0 w=20",
           "1 20 sample m:a/0 w=5",
           "1 30 sample m:a/0;m:b/0 w=30",
           "2 30 sample m:a/0;m:b/0 w=100", /* another process: its own nodes */
           "close 40"),
     LINES("1 m:a/0;m:b/0 30", "1 m:a/0 10", "2 m:a/0;m:b/0 10",
           "1 m:a/0;m:b/0 samples=3 weight=60", "1 m:a/0 samples=1 weight=5",
           "2 m:a/0;m:b/0 samples=1 weight=100"),
     "events=5 samples=5"},

    {"a_sample_with_no_time_after_it_is_still_counted", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0 w=1",
           "1 10 sample m:a/0;m:b/0 w=2", /* a: 10 */
           "1 10 sample m:a/0 w=3",       /* a;b: 0, but it was seen */
           "close 15"),                   /* a: 5 */
     LINES("1 m:a/0 15", "1 m:a/0 samples=2 weight=4", "1 m:a/0;m:b/0 samples=1 weight=2"),
     "events=3 samples=3"},

    {"the_outer_frames_of_a_sample_do_not_count_it", DEFAULT_LIMITS,
     /* only the stack a sample lands on counts it: its callers show the
      * sample in their inclusive totals, computed by the views */
     LINES("1 0 sample m:a/0;m:b/0;m:c/0 w=8", "close 10"),
     LINES("1 m:a/0;m:b/0;m:c/0 10", "1 m:a/0;m:b/0;m:c/0 samples=1 weight=8"),
     "events=1 samples=1"},

    {"a_sample_past_max_nodes_counts_on_the_node_cap_bucket", {1, 0, 0, 0, 0},
     LINES("1 0 sample m:a/0;m:b/0 w=5", "close 10"),
     LINES("1 [node_cap] 10", "1 [node_cap] samples=1 weight=5"),
     "events=1 samples=1 node_limit_hits=1 truncated_stacks=1"},

    {"a_sample_past_max_stack_frames_counts_on_the_deepest_kept_frame", {0, 0, 0, 0, 2},
     LINES("1 0 sample m:a/0;m:b/0;m:c/0 w=6", "close 10"),
     LINES("1 m:a/0;m:b/0 10", "1 m:a/0;m:b/0 samples=1 weight=6"),
     "events=1 samples=1 stack_overflows=1"},

    {"an_off_cpu_sample_in_a_call_counts_on_the_waiting_leaf", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0 w=1",
           "1 10 out_call",             /* a: 10 */
           "1 20 sample m:a/0 w=2",     /* a;WAITING: 10; same stack, same leaf */
           "1 30 sample m:a/0;m:r/0 w=3", /* a;WAITING: 10; the call's 20 move under a;r */
           "1 40 in",                   /* a;r;WAITING: 10 */
           "1 50 sample m:a/0;m:r/0 w=4", /* a;r: 10 */
           "close 50"),
     LINES("1 m:a/0 10", "1 m:a/0;m:r/0;WAITING 30", "1 m:a/0;m:r/0 10",
           "1 m:a/0 samples=1 weight=1", "1 m:a/0;WAITING samples=1 weight=2",
           "1 m:a/0;m:r/0;WAITING samples=1 weight=3", "1 m:a/0;m:r/0 samples=1 weight=4"),
     "events=6 samples=4"},

    {"weights_saturate_instead_of_wrapping", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0 w=18446744073709551615", "1 10 sample m:a/0 w=5", "close 10"),
     LINES("1 m:a/0 10", "1 m:a/0 samples=2 weight=18446744073709551615"),
     "events=2 samples=2"},
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

/* Counting samples allocates nothing: once every stack and wait leaf was
 * seen, a long run of samples leaves the session's memory as it was, and
 * every applied sample is counted on exactly one node. */
static void test_sample_counts_cost_no_memory_and_add_up(void **state)
{
    (void)state;
    fo_session *s = ts_new_session(NULL);
    const char *stacks[] = {"m:a/0;m:b/0;m:c/0", "m:a/0;m:b/0", "m:a/0;m:d/1;m:c/0"};
    char line[128];
    size_t memory = 0;
    uint32_t nodes = 0;
    uint64_t weight = 0;
    for (int i = 0; i < 3000; i++) {
        if (i == 6) {
            memory = fo_session_memory(s);
            nodes = fo_session_node_count(s);
        }
        /* every third sample finds the process off-CPU, on a SLEEP leaf */
        snprintf(line, sizeof line, "1 %d %s", 2 * i, i % 3 == 0 ? "out" : "in");
        ts_run_line(s, line);
        snprintf(line, sizeof line, "1 %d sample %s w=%d", 2 * i + 1, stacks[i % 3], i);
        ts_run_line(s, line);
        weight += (uint64_t)i;
    }
    assert_int_equal(fo_session_node_count(s), nodes);
    assert_true(fo_session_memory(s) == memory);
    uint64_t samples = 0;
    uint64_t weights = 0;
    uint64_t on_sleep = 0;
    for (uint32_t id = 0; id < fo_session_node_count(s); id++) {
        fo_node_info ni;
        fo_session_node(s, id, &ni);
        samples += ni.samples;
        weights += ni.weight;
        if (ni.frame == FO_FRAME_SLEEP)
            on_sleep += ni.samples;
    }
    assert_int_equal(samples, 3000);
    assert_int_equal(samples, fo_session_stats(s)->samples);
    assert_int_equal(weights, weight);
    assert_int_equal(on_sleep, 1000);
    ts_assert_stats(s, "events=6000 samples=3000");
    ts_check_tree(s);
    fo_session_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repeated_samples_do_not_grow_the_tree),
        cmocka_unit_test(test_sample_counts_cost_no_memory_and_add_up),
    };
    int failed = ts_run_cases("sample_cases", sample_cases, sizeof sample_cases / sizeof sample_cases[0]);
    failed += cmocka_run_group_tests(tests, NULL, NULL);
    return failed == 0 ? 0 : 1;
}
