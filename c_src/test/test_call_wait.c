/* Call wait in graph traces: scheduled-out time inside a call goes to a
 * WAITING leaf, and the part a traced callee explains moves to an
 * ATTRIBUTED leaf beside it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_support.h"

// clang-format off
#define LINES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define DEFAULT_LIMITS {0, 0, 0, 0, 0}

static const ts_case call_wait_cases[] = {
    {"out_in_a_call_is_waiting_and_attribution_moves_part_of_it", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0",
           "call_started 1",
           "1 100 out_call",  /* a: 100 */
           "1 1100 in",       /* a;WAITING: 1000 */
           "attribute 1 600", /* 600 of it explained */
           "close 1200"),     /* a: 100 */
     LINES("1 m:a/0 200", "1 m:a/0;WAITING 400", "1 m:a/0;ATTRIBUTED 600"), "events=3"},

    {"attribution_is_capped_by_the_calls_wait", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "call_started 1", "1 100 out_call", "1 1100 in",
           "attribute 1 5000", "close 1100"),
     LINES("1 m:a/0 100", "1 m:a/0;ATTRIBUTED 1000"), "events=3"},

    {"a new call starts its own wait", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0",
           "call_started 1", "1 100 out_call", "1 200 in",  /* first call waits 100 */
           "call_started 1", "1 300 out_call", "1 350 in",  /* second waits 50 */
           "attribute 1 1000",                             /* only the second's 50 */
           "close 350"),
     LINES("1 m:a/0 200", "1 m:a/0;WAITING 100", "1 m:a/0;ATTRIBUTED 50"), "events=5"},

    {"waits over several outs of one call add up", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "call_started 1",
           "1 10 out_call", "1 40 in", "1 45 out_call", "1 65 in", /* 30 + 20 waiting */
           "attribute 1 45", "close 70"),
     LINES("1 m:a/0 20", "1 m:a/0;WAITING 5", "1 m:a/0;ATTRIBUTED 45"), "events=5"},

    {"a call's wait split by a sample is attributed in full", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0;m:s/0",     /* a stale stack: the burst before the call */
           "call_started 1",
           "1 100 out_call",              /* a;s: 100 */
           "1 600 in",                    /* a;s;WAITING: 500 (a signal wakes it) */
           "1 610 out_call",              /* a burst of 10, unseen */
           "1 650 sample m:a/0;m:r/0",    /* a;s;WAITING: 40; the 540 move under a;r,
                                             and the burst to a, which s and r share */
           "1 1100 in",                   /* a;r;WAITING: 450 */
           "attribute 1 900",             /* 900 of 990 explained */
           "close 1100"),
     LINES("1 m:a/0;m:s/0 100", "1 m:a/0 10", "1 m:a/0;m:r/0;WAITING 90",
           "1 m:a/0;m:r/0;ATTRIBUTED 900",
           "1 m:a/0;m:s/0 samples=1 weight=0", "1 m:a/0;m:r/0;WAITING samples=1 weight=0"),
     "events=6 samples=2"},

    {"a new call does not take the previous call's wait along", DEFAULT_LIMITS,
     LINES("1 0 sample m:a/0",
           "call_started 1", "1 10 out_call", "1 30 in",   /* a;WAITING: 20, first call */
           "call_started 1", "1 40 out_call",              /* an unseen burst of 10 */
           "1 50 sample m:a/0;m:r/0",                      /* a;WAITING: 10, moved;
                                                              the burst stays in a */
           "1 70 in",                                      /* a;r;WAITING: 20 */
           "attribute 1 1000", "close 70"),
     LINES("1 m:a/0 20", "1 m:a/0;WAITING 20", "1 m:a/0;m:r/0;ATTRIBUTED 30",
           "1 m:a/0 samples=1 weight=0", "1 m:a/0;m:r/0;WAITING samples=1 weight=0"),
     "events=6 samples=2"},

    {"a stop in another function says the wait held so far was runnable", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "call_started 1",
           "1 10 out_call@m:a/0", "1 12 in",   /* preempted in a: 2 */
           "1 20 out_call@m:a/0", "1 23 in",   /* again in a: 3 more, still held */
           "1 25 call m:b/0",
           "1 30 out_call@m:b/0",              /* it ran code since: a's 5 were runnable */
           "1 130 in",                         /* a;b;WAITING: 100 */
           "attribute 1 60", "close 140"),
     LINES("1 m:a/0 20", "1 m:a/0;RUNNABLE 5", "1 m:a/0;m:b/0 15", "1 m:a/0;m:b/0;WAITING 40",
           "1 m:a/0;m:b/0;ATTRIBUTED 60"),
     "events=8"},

    {"stops in one function keep the whole wait held", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "call_started 1",
           "1 10 out_call@m:a/0", "1 40 in", "1 45 out_call@m:a/0", "1 65 in", /* 30 + 20 */
           "attribute 1 45", "close 70"),
     LINES("1 m:a/0 20", "1 m:a/0;WAITING 5", "1 m:a/0;ATTRIBUTED 45"), "events=5"},

    {"the graph's runnable time takes what is still held", DEFAULT_LIMITS,
     /* a callee preempted in a recursion, then in a sort, then done: the
      * span graph says the whole 3 + 4 was runnable as the call ends */
     LINES("1 0 call m:h/0", "1 1 call m:r/0", "call_started 1",
           "1 10 out_call@m:r/0", "1 13 in",
           "1 20 ret m:h/0", "1 21 call m:s/0",
           "1 30 out_call@m:s/0", "1 34 in",
           "runnable 1 7", "close 40"),
     LINES("1 m:h/0 2", "1 m:h/0;m:r/0 16", "1 m:h/0;m:r/0;RUNNABLE 3", "1 m:h/0;m:s/0 15",
           "1 m:h/0;m:s/0;RUNNABLE 4"),
     "events=8"},

    {"plain out stays SLEEP and is never attributed", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "call_started 1", "1 10 out", "1 20 in", "attribute 1 5", "close 20"),
     LINES("1 m:a/0 10", "1 m:a/0;SLEEP 10"), "events=3"},

    {"attribution for an unknown pid changes nothing", DEFAULT_LIMITS,
     LINES("1 0 call m:a/0", "call_started 9", "attribute 9 100", "close 10"),
     LINES("1 m:a/0 10"), "events=1"},
};
// clang-format on

int main(void)
{
    int failed = ts_run_cases("call_wait_cases", call_wait_cases,
                              sizeof call_wait_cases / sizeof call_wait_cases[0]);
    return failed == 0 ? 0 : 1;
}
