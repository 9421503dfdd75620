/* fo_limits_valid and fo_session_new on valid and invalid limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "test_support.h"

#define NFIELDS 5

static uint32_t *field(fo_limits *l, int i)
{
    switch (i) {
    case 0:
        return &l->max_nodes;
    case 1:
        return &l->max_depth;
    case 2:
        return &l->max_processes;
    case 3:
        return &l->max_frames;
    default:
        return &l->max_stack_frames;
    }
}

static const uint32_t ceilings[NFIELDS] = {FO_CEIL_MAX_NODES, FO_CEIL_MAX_DEPTH,
                                           FO_CEIL_MAX_PROCESSES, FO_CEIL_MAX_FRAMES,
                                           FO_CEIL_MAX_STACK_FRAMES};

static void test_default_limits_are_valid(void **state)
{
    (void)state;
    fo_limits l = fo_limits_default();
    assert_int_equal(l.max_nodes, FO_DEFAULT_MAX_NODES);
    assert_int_equal(l.max_depth, FO_DEFAULT_MAX_DEPTH);
    assert_int_equal(l.max_processes, FO_DEFAULT_MAX_PROCESSES);
    assert_int_equal(l.max_frames, FO_DEFAULT_MAX_FRAMES);
    assert_int_equal(l.max_stack_frames, FO_DEFAULT_MAX_STACK_FRAMES);
    assert_int_equal(fo_limits_valid(&l), 1);
    fo_limits ones = {1, 1, 1, 1, 1};
    assert_int_equal(fo_limits_valid(&ones), 1);
}

static void test_each_zero_field_is_invalid(void **state)
{
    (void)state;
    for (int i = 0; i < NFIELDS; i++) {
        fo_limits l = fo_limits_default();
        *field(&l, i) = 0;
        assert_int_equal(fo_limits_valid(&l), 0);
        assert_null(fo_session_new(&l));
    }
    fo_limits zero;
    memset(&zero, 0, sizeof zero);
    assert_int_equal(fo_limits_valid(&zero), 0);
    assert_null(fo_session_new(&zero));
}

static void test_each_field_over_its_ceiling_is_invalid(void **state)
{
    (void)state;
    for (int i = 0; i < NFIELDS; i++) {
        fo_limits l = fo_limits_default();
        *field(&l, i) = ceilings[i] + 1;
        assert_int_equal(fo_limits_valid(&l), 0);
        assert_null(fo_session_new(&l));
        *field(&l, i) = UINT32_MAX;
        assert_int_equal(fo_limits_valid(&l), 0);
        assert_null(fo_session_new(&l));
    }
}

static void test_each_field_at_its_ceiling_is_valid(void **state)
{
    (void)state;
    for (int i = 0; i < NFIELDS; i++) {
        fo_limits l = fo_limits_default();
        *field(&l, i) = ceilings[i];
        assert_int_equal(fo_limits_valid(&l), 1);
    }
}

static void test_session_new_with_null_limits_returns_null(void **state)
{
    (void)state;
    assert_null(fo_session_new(NULL));
}

static void test_new_session_is_empty(void **state)
{
    (void)state;
    fo_limits l = fo_limits_default();
    fo_session *s = fo_session_new(&l);
    assert_non_null(s);
    assert_int_equal(fo_session_process_count(s), 0);
    assert_int_equal(fo_session_node_count(s), 0);
    assert_true(fo_session_memory(s) > 0);
    ts_assert_stats(s, "");
    fo_mfa mfa;
    for (uint32_t f = 0; f < FO_FRAME_FIRST_REAL; f++)
        assert_int_equal(fo_session_frame_mfa(s, f, &mfa), 0);
    fo_session_close(s, 100);
    assert_int_equal(fo_session_node_count(s), 0);
    fo_session_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_limits_are_valid),
        cmocka_unit_test(test_each_zero_field_is_invalid),
        cmocka_unit_test(test_each_field_over_its_ceiling_is_invalid),
        cmocka_unit_test(test_each_field_at_its_ceiling_is_valid),
        cmocka_unit_test(test_session_new_with_null_limits_returns_null),
        cmocka_unit_test(test_new_session_is_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) == 0 ? 0 : 1;
}
