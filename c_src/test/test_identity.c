/* fo_identity: which traced process a sample names, and a process's
 * slices cut from one thread's samples. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "fo_identity.h"

static void test_the_register_names_a_known_process(void **state)
{
    (void)state;
    uint64_t known[] = {0x1000, 0x2000, 0x3000};
    uint64_t stack[] = {0x3000};
    assert_int_equal(fo_identity_of(0x2000, stack, 1, known, 3), 0x2000);
}

static void test_the_stack_names_it_when_the_register_does_not(void **state)
{
    (void)state;
    uint64_t known[] = {0x1000, 0x2000, 0x3000};
    /* the register holds something else (C code reused it); the first
     * known word from the stack pointer up wins */
    uint64_t stack[] = {7, 0x2008, 0x3000, 0x1000};
    assert_int_equal(fo_identity_of(0x55, stack, 4, known, 3), 0x3000);
}

static void test_nothing_known_names_no_process(void **state)
{
    (void)state;
    uint64_t known[] = {0x1000};
    uint64_t stack[] = {0x2000, 0, 0x1001};
    assert_int_equal(fo_identity_of(0x2000, stack, 3, known, 1), 0);
    assert_int_equal(fo_identity_of(0x1000, stack, 3, known, 0), 0);
    assert_int_equal(fo_identity_of(0x2000, NULL, 0, known, 1), 0);
}

static void test_sort_orders_and_drops_repeats(void **state)
{
    (void)state;
    uint64_t known[] = {0x3000, 0x1000, 0x3000, 0x2000, 0x1000};
    assert_int_equal(fo_identity_sort(known, 5), 3);
    assert_int_equal(known[0], 0x1000);
    assert_int_equal(known[1], 0x2000);
    assert_int_equal(known[2], 0x3000);
    assert_int_equal(fo_identity_sort(known, 0), 0);
}

typedef struct {
    int64_t from[8], to[8];
    uint32_t n;
} slices;

static void collect(void *ctx, int64_t from_ns, int64_t to_ns)
{
    slices *s = ctx;
    s->from[s->n] = from_ns;
    s->to[s->n] = to_ns;
    s->n++;
}

/* Slice i of s is [from, to). */
static void expect_slice(const slices *s, uint32_t i, int64_t from, int64_t to)
{
    assert_true(i < s->n);
    assert_int_equal(s->from[i], from);
    assert_int_equal(s->to[i], to);
}

static void test_runs_of_one_process_become_slices(void **state)
{
    (void)state;
    /* P = 0xA at 1 kHz (period 1000): two runs, split by another's sample */
    const fo_identity_sample samples[] = {
        {5000, 0, 0xA}, {6000, 0, 0xA}, {7000, 0, 0xA}, {8000, 0, 0xB}, {8400, 0, 0xA}, {9400, 0, 0xA},
    };
    slices got = {0};
    assert_int_equal(fo_identity_runs(samples, 6, 0xA, 0, 100000, 1000, collect, &got), 2);
    expect_slice(&got, 0, 4000, 7001);
    /* not before the other process's sample */
    expect_slice(&got, 1, 8001, 9401);
}

static void test_samples_far_apart_are_two_slices(void **state)
{
    (void)state;
    /* the thread idled between 2000 and 40000: its clock stood still */
    const fo_identity_sample samples[] = {{1000, 0, 0xA}, {2000, 0, 0xA}, {40000, 0, 0xA}, {41000, 0, 0xA}};
    slices got = {0};
    assert_int_equal(fo_identity_runs(samples, 4, 0xA, 0, 100000, 1000, collect, &got), 2);
    expect_slice(&got, 0, 0, 2001);
    expect_slice(&got, 1, 39000, 41001);
}

static void test_cpu_times_tell_a_sleep_from_time_in_the_kernel(void **state)
{
    (void)state;
    /* 1000 to 5000: 4000 ns of wall time, 3900 of CPU (the samples in
     * the kernel were not taken): one slice; 5000 to 9000: 1000 of CPU,
     * the thread slept */
    const fo_identity_sample samples[] = {{1000, 100000, 0xA}, {5000, 103900, 0xA}, {9000, 104900, 0xA}};
    slices got = {0};
    assert_int_equal(fo_identity_runs(samples, 3, 0xA, 0, 100000, 1000, collect, &got), 2);
    expect_slice(&got, 0, 0, 5001);
    expect_slice(&got, 1, 8000, 9001);
}

static void test_runs_stay_inside_the_window(void **state)
{
    (void)state;
    const fo_identity_sample samples[] = {{1000, 0, 0xA}, {2000, 0, 0xA}, {2500, 0, 0}, {3000, 0, 0xA}, {9000, 0, 0xA}};
    slices got = {0};
    /* the first sample is before the window; the last after it */
    assert_int_equal(fo_identity_runs(samples, 5, 0xA, 1500, 5000, 1000, collect, &got), 2);
    expect_slice(&got, 0, 1500, 2001);
    expect_slice(&got, 1, 2501, 3001);
}

static void test_no_process_no_slices(void **state)
{
    (void)state;
    const fo_identity_sample samples[] = {{1000, 0, 0}, {2000, 0, 0xB}};
    slices got = {0};
    assert_int_equal(fo_identity_runs(samples, 2, 0xA, 0, 5000, 1000, collect, &got), 0);
    assert_int_equal(fo_identity_runs(samples, 2, 0, 0, 5000, 1000, collect, &got), 0);
    assert_int_equal(fo_identity_runs(NULL, 0, 0xA, 0, 5000, 1000, collect, &got), 0);
    assert_int_equal(got.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_register_names_a_known_process),
        cmocka_unit_test(test_the_stack_names_it_when_the_register_does_not),
        cmocka_unit_test(test_nothing_known_names_no_process),
        cmocka_unit_test(test_sort_orders_and_drops_repeats),
        cmocka_unit_test(test_runs_of_one_process_become_slices),
        cmocka_unit_test(test_samples_far_apart_are_two_slices),
        cmocka_unit_test(test_cpu_times_tell_a_sleep_from_time_in_the_kernel),
        cmocka_unit_test(test_runs_stay_inside_the_window),
        cmocka_unit_test(test_no_process_no_slices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) == 0 ? 0 : 1;
}
