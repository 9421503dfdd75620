/* fo_render: the views of a finished tree. Hand-made trees with exact
 * texts, orders and sums; then random trees against a naive rendering
 * (every stack's text built in full, summed by text, sorted). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fo_render.h"
#include "test_support.h"

#define MAX_NODES 4096
#define MAX_FRAMES 64

/* A tree being written by hand: node 0 of each process is its root. */
typedef struct {
    fo_node_info nodes[MAX_NODES];
    uint32_t count;
    uint32_t processes;
    fo_render_name names[MAX_FRAMES];
    uint32_t frames;
} tree;

static uint32_t root(tree *t)
{
    uint32_t id = t->count++;
    t->nodes[id] = (fo_node_info){FO_NONE, FO_FRAME_PROCESS, t->processes++, 0, 0, 0, 0, 0, 0};
    return id;
}

static uint32_t child(tree *t, uint32_t parent, uint32_t frame, uint64_t ns)
{
    uint32_t id = t->count++;
    const fo_node_info *p = &t->nodes[parent];
    t->nodes[id] = (fo_node_info){parent, frame, p->proc, p->depth + 1, ns, 0, 0, 0, 0};
    return id;
}

/* Frame ids from FO_FRAME_FIRST_REAL, named by text (NULL: dropped). */
static uint32_t frame(tree *t, const char *text)
{
    if (t->frames < FO_FRAME_FIRST_REAL)
        t->frames = FO_FRAME_FIRST_REAL;
    uint32_t id = t->frames++;
    t->names[id] = (fo_render_name){text, text == NULL ? 0 : (uint32_t)strlen(text)};
    return id;
}

static fo_render *render(const tree *t, uint64_t max_text_bytes)
{
    fo_render *r = fo_render_new(t->nodes, t->count, t->processes, t->names, t->frames, max_text_bytes);
    assert_non_null(r);
    return r;
}

/* Every terminal's text, by node id. */
typedef struct {
    char *text[MAX_NODES * 2];
    uint32_t calls;
} texts;

static int keep_text(void *ctx, uint32_t terminal, const char *text, uint32_t len)
{
    texts *x = ctx;
    assert_true(terminal < MAX_NODES * 2);
    assert_null(x->text[terminal]);
    x->text[terminal] = malloc((size_t)len + 1);
    memcpy(x->text[terminal], text, len);
    x->text[terminal][len] = '\0';
    x->calls++;
    return 1;
}

static void free_texts(texts *x)
{
    for (uint32_t i = 0; i < MAX_NODES * 2; i++)
        free(x->text[i]);
}

/* "TEXT US" per stack of proc, or "TEXT US samples=N weight=W", one line
 * each in the order given; TEXT is the owner's text cut to the node's. */
static char *stack_lines(const fo_render *r, const texts *x, uint32_t proc)
{
    size_t size = 1 << 20;
    char *out = calloc(size, 1);
    size_t used = 0;
    uint32_t count;
    const uint32_t *ids = fo_render_stacks(r, proc, &count);
    for (uint32_t i = 0; i < count; i++) {
        const fo_render_node *n = fo_render_node_at(r, ids[i]);
        assert_true(n->owner != FO_NONE);
        const char *owner = x->text[n->owner];
        assert_non_null(owner);
        assert_true(strlen(owner) >= n->text_len);
        used += (size_t)snprintf(out + used, size - used, "%.*s %llu", (int)n->text_len, owner,
                                 (unsigned long long)n->self_us);
        if (n->samples > 0)
            used += (size_t)snprintf(out + used, size - used, " samples=%llu weight=%llu",
                                     (unsigned long long)n->samples, (unsigned long long)n->weight);
        if (n->alloc_words > 0 || n->alloc_samples > 0)
            used += (size_t)snprintf(out + used, size - used, " alloc=%llu gcs=%llu",
                                     (unsigned long long)n->alloc_words, (unsigned long long)n->alloc_samples);
        used += (size_t)snprintf(out + used, size - used, "\n");
    }
    return out;
}

static void assert_stacks(const fo_render *r, uint32_t proc, const char *expected)
{
    texts x;
    memset(&x, 0, sizeof(x));
    assert_true(fo_render_texts(r, keep_text, &x));
    assert_int_equal(x.calls, fo_render_terminal_count(r));
    char *actual = stack_lines(r, &x, proc);
    ts_assert_text(actual, expected, "stacks");
    free(actual);
    free_texts(&x);
}

/* "DEPTH NAME SELF TOTAL" per tree node, preorder. */
static void assert_tree(const fo_render *r, const tree *t, uint32_t proc, const char *expected)
{
    char out[8192];
    size_t used = 0;
    uint32_t count;
    const uint32_t *ids = fo_render_tree(r, proc, &count);
    for (uint32_t i = 0; i < count; i++) {
        const fo_render_node *n = fo_render_node_at(r, ids[i]);
        const char *name = "(root)";
        if (n->name != FO_NONE) {
            uint32_t f = fo_render_name_frame(r, n->name);
            name = fo_render_name_dropped(r, n->name) ? "(dropped)" : t->names[f].text;
        }
        used += (size_t)snprintf(out + used, sizeof(out) - used, "%u %s %llu %llu\n", n->depth, name,
                                 (unsigned long long)n->self_us, (unsigned long long)n->total_us);
    }
    out[used] = '\0';
    ts_assert_text(out, expected, "tree");
}

static void test_a_chain_has_one_text_shared_by_every_stack(void **state)
{
    (void)state;
    static tree t;
    memset(&t, 0, sizeof(t));
    uint32_t a = frame(&t, "a"), b = frame(&t, "bb"), c = frame(&t, "c");
    uint32_t r0 = root(&t);
    uint32_t n1 = child(&t, r0, a, 1000);
    uint32_t n2 = child(&t, n1, b, 2000);
    child(&t, n2, c, 3000);
    fo_render *r = render(&t, UINT64_MAX);
    assert_int_equal(fo_render_terminal_count(r), 1);
    assert_int_equal(fo_render_text_bytes(r), strlen("a;bb;c"));
    assert_stacks(r, 0, "a 1\na;bb 2\na;bb;c 3\n");
    assert_tree(r, &t, 0, "0 (root) 0 6\n1 a 1 6\n2 bb 2 5\n3 c 3 3\n");
    fo_render_free(r);
}

static void test_stacks_follow_the_byte_order_of_their_texts(void **state)
{
    (void)state;
    static tree t;
    memset(&t, 0, sizeof(t));
    /* "f/10" sorts between "f/1" and "f/1;...": the subtrees interleave */
    uint32_t f1 = frame(&t, "f/1"), f10 = frame(&t, "f/10"), g = frame(&t, "g"), z = frame(&t, "z");
    uint32_t r0 = root(&t);
    t.nodes[r0].self_ns = 4000;
    uint32_t n1 = child(&t, r0, z, 1000);
    child(&t, n1, g, 1000);
    uint32_t n3 = child(&t, r0, f1, 1000);
    child(&t, n3, g, 2000);
    child(&t, r0, f10, 3000);
    fo_render *r = render(&t, UINT64_MAX);
    assert_stacks(r, 0, " 4\nf/1 1\nf/10 3\nf/1;g 2\nz 1\nz;g 1\n");
    /* the tree orders children by name alone */
    assert_tree(r, &t, 0, "0 (root) 4 12\n1 f/1 1 3\n2 g 2 2\n1 f/10 3 3\n1 z 1 2\n2 g 1 1\n");
    fo_render_free(r);
}

static void test_frames_that_read_the_same_merge(void **state)
{
    (void)state;
    static tree t;
    memset(&t, 0, sizeof(t));
    uint32_t a1 = frame(&t, "a"), a2 = frame(&t, "a"), b = frame(&t, "b");
    uint32_t r0 = root(&t);
    uint32_t x = child(&t, r0, a1, 300);
    uint32_t y = child(&t, r0, a2, 300);
    child(&t, x, b, 1000);
    uint32_t yb = child(&t, y, b, 1000);
    t.nodes[yb].samples = 2;
    t.nodes[yb].weight = 7;
    fo_render *r = render(&t, UINT64_MAX);
    /* 300 + 300 ns round to 1 µs together, though not apart */
    assert_stacks(r, 0, "a 1\na;b 2 samples=2 weight=7\n");
    assert_int_equal(fo_render_name_count(r), 2);
    assert_int_equal(fo_render_node_count(r), 3);
    fo_render_free(r);
}

static void test_a_frame_without_a_name_drops_its_own_time(void **state)
{
    (void)state;
    static tree t;
    memset(&t, 0, sizeof(t));
    uint32_t a = frame(&t, "a"), gone = frame(&t, NULL), b = frame(&t, "b");
    uint32_t r0 = root(&t);
    uint32_t n1 = child(&t, r0, a, 1000);
    child(&t, n1, gone, 5000);
    uint32_t d = child(&t, r0, gone, 5000);
    child(&t, d, b, 2000);
    fo_render *r = render(&t, UINT64_MAX);
    /* what is below a dropped frame reads it as empty */
    assert_stacks(r, 0, ";b 2\na 1\n");
    assert_tree(r, &t, 0, "0 (root) 0 3\n1 (dropped) 0 2\n2 b 2 2\n1 a 1 1\n");
    fo_render_free(r);
}

static void test_time_under_half_a_microsecond_is_no_stack(void **state)
{
    (void)state;
    static tree t;
    memset(&t, 0, sizeof(t));
    uint32_t a = frame(&t, "a"), b = frame(&t, "b"), c = frame(&t, "c");
    uint32_t r0 = root(&t);
    child(&t, r0, a, 499);
    child(&t, r0, b, 500);
    uint32_t nc = child(&t, r0, c, 0);
    t.nodes[nc].samples = 1; /* samples alone make a stack */
    fo_render *r = render(&t, UINT64_MAX);
    assert_stacks(r, 0, "b 1\nc 0 samples=1 weight=0\n");
    /* a has neither time nor samples: not in the tree either */
    assert_tree(r, &t, 0, "0 (root) 0 1\n1 b 1 1\n1 c 0 0\n");
    fo_render_free(r);
}

static void test_the_text_budget_leaves_stacks_out_and_counts_them(void **state)
{
    (void)state;
    static tree t;
    memset(&t, 0, sizeof(t));
    uint32_t a = frame(&t, "aaaa"), b = frame(&t, "bbbb"), c = frame(&t, "c");
    uint32_t r0 = root(&t);
    uint32_t na = child(&t, r0, a, 1000);
    child(&t, na, c, 1000);
    uint32_t nb = child(&t, r0, b, 1000);
    child(&t, nb, c, 1000);
    /* room for "aaaa;c" (6 bytes), not for "bbbb;c" too */
    fo_render *r = render(&t, 11);
    assert_int_equal(fo_render_terminal_count(r), 1);
    assert_int_equal(fo_render_stacks_without_text(r), 2);
    assert_stacks(r, 0, "aaaa 1\naaaa;c 1\n");
    /* the tree keeps everything */
    uint32_t count;
    fo_render_tree(r, 0, &count);
    assert_int_equal(count, 5);
    fo_render_free(r);
}

static void test_processes_apart_and_a_root_with_time_only(void **state)
{
    (void)state;
    static tree t;
    memset(&t, 0, sizeof(t));
    uint32_t a = frame(&t, "a");
    uint32_t r0 = root(&t);
    child(&t, r0, a, 1000);
    uint32_t r1 = root(&t);
    t.nodes[r1].self_ns = 2000;
    root(&t); /* a process with nothing */
    fo_render *r = render(&t, UINT64_MAX);
    assert_stacks(r, 0, "a 1\n");
    assert_stacks(r, 1, " 2\n");
    uint32_t count;
    fo_render_stacks(r, 2, &count);
    assert_int_equal(count, 0);
    fo_render_tree(r, 2, &count);
    assert_int_equal(count, 0);
    fo_render_free(r);
}

static void test_a_chain_deeper_than_any_c_stack(void **state)
{
    (void)state;
    enum { DEPTH = 200000 };
    fo_node_info *nodes = calloc(DEPTH + 1, sizeof(fo_node_info));
    fo_render_name names[FO_FRAME_FIRST_REAL + 1];
    memset(names, 0, sizeof(names));
    names[FO_FRAME_FIRST_REAL] = (fo_render_name){"f", 1};
    nodes[0] = (fo_node_info){FO_NONE, FO_FRAME_PROCESS, 0, 0, 0, 0, 0, 0, 0};
    for (uint32_t i = 1; i <= DEPTH; i++)
        nodes[i] = (fo_node_info){i - 1, FO_FRAME_FIRST_REAL, 0, i, 1000, 0, 0, 0, 0};
    fo_render *r = fo_render_new(nodes, DEPTH + 1, 1, names, FO_FRAME_FIRST_REAL + 1, UINT64_MAX);
    assert_non_null(r);
    assert_int_equal(fo_render_terminal_count(r), 1);
    assert_int_equal(fo_render_text_bytes(r), 2 * DEPTH - 1);
    uint32_t count;
    const uint32_t *ids = fo_render_stacks(r, 0, &count);
    assert_int_equal(count, DEPTH);
    for (uint32_t i = 0; i < count; i++)
        assert_int_equal(fo_render_node_at(r, ids[i])->depth, i + 1);
    assert_int_equal(fo_render_node_at(r, 0)->total_us, DEPTH);
    fo_render_free(r);
    free(nodes);
}

/* Allocation merges with the names like time, makes a stack of a node
 * with no time, keeps its ancestors in the tree (with no time), and adds
 * up below. */
static void test_allocation_merges_and_makes_stacks(void **state)
{
    (void)state;
    tree t;
    memset(&t, 0, sizeof(t));
    uint32_t a = frame(&t, "a"), b1 = frame(&t, "b"), b2 = frame(&t, "b"), c = frame(&t, "c");
    uint32_t top_id = root(&t);
    uint32_t na = child(&t, top_id, a, 3000);
    uint32_t nb1 = child(&t, na, b1, 0);
    uint32_t nb2 = child(&t, na, b2, 0);
    uint32_t nc = child(&t, top_id, c, 0);
    t.nodes[nb1].alloc_words = 100;
    t.nodes[nb1].alloc_samples = 1;
    t.nodes[nb2].alloc_words = 20;
    t.nodes[nb2].alloc_samples = 2;
    t.nodes[nc].alloc_samples = 1; /* a collection that found nothing new */
    fo_render *r = render(&t, 1 << 20);
    assert_stacks(r, 0, "a 3\na;b 0 alloc=120 gcs=3\nc 0 alloc=0 gcs=1\n");
    assert_tree(r, &t, 0, "0 (root) 0 3\n1 a 3 3\n2 b 0 0\n1 c 0 0\n");
    uint32_t count;
    const uint32_t *ids = fo_render_tree(r, 0, &count);
    const fo_render_node *top = fo_render_node_at(r, ids[0]);
    assert_int_equal(top->alloc_below, 120);
    assert_int_equal(top->alloc_samples_below, 4);
    assert_true(fo_render_timed(top));
    assert_false(fo_render_timed(fo_render_node_at(r, ids[2])));
    fo_render_free(r);
}

static void test_inconsistent_input_is_refused(void **state)
{
    (void)state;
    fo_node_info nodes[2] = {{FO_NONE, 0, 0, 0, 0, 0, 0, 0, 0}, {5, 8, 0, 1, 0, 0, 0, 0, 0}};
    assert_null(fo_render_new(nodes, 2, 1, NULL, 0, 10)); /* parent after child */
    nodes[1].parent = 0;
    nodes[1].proc = 3;
    assert_null(fo_render_new(nodes, 2, 1, NULL, 0, 10)); /* process out of range */
    nodes[1] = (fo_node_info){FO_NONE, 0, 0, 0, 0, 0, 0, 0, 0};
    assert_null(fo_render_new(nodes, 2, 1, NULL, 0, 10)); /* two roots for one process */
}

/* --- random trees against a naive rendering ----------------------------- */

typedef struct {
    char text[4096];
    uint64_t ns, samples, weight;
    uint32_t proc;
} naive_entry;

static int by_proc_then_text(const void *a, const void *b)
{
    const naive_entry *x = a, *y = b;
    if (x->proc != y->proc)
        return x->proc < y->proc ? -1 : 1;
    size_t lx = strlen(x->text), ly = strlen(y->text);
    int c = memcmp(x->text, y->text, lx < ly ? lx : ly);
    return c != 0 ? c : (lx < ly ? -1 : lx > ly);
}

static void full_text(const tree *t, uint32_t id, char *out, size_t size)
{
    uint32_t chain[512] = {0}, n = 0;
    for (uint32_t at = id; t->nodes[at].parent != FO_NONE; at = t->nodes[at].parent)
        chain[n++] = at;
    out[0] = '\0';
    for (uint32_t i = n; i-- > 0;) {
        const fo_render_name *name = &t->names[t->nodes[chain[i]].frame];
        if (i != n - 1)
            strncat(out, ";", size - strlen(out) - 1);
        if (name->text != NULL)
            strncat(out, name->text, size - strlen(out) - 1);
    }
}

static void test_random_trees_match_a_naive_rendering(void **state)
{
    (void)state;
    /* names with prefixes of each other and bytes either side of ';' */
    static const char *pool[] = {"f/1", "f/10", "f/1-x", "f/2", "g", "g.h", "a:b/0", "z", "f/1", NULL};
    static tree t;
    static naive_entry naive[MAX_NODES];
    ts_rng rng = {42};
    for (int round = 0; round < 200; round++) {
        memset(&t, 0, sizeof(t));
        for (size_t i = 0; i < sizeof(pool) / sizeof(pool[0]); i++)
            frame(&t, pool[i]);
        uint32_t procs = 1 + ts_rng_below(&rng, 3);
        uint32_t size = 2 + ts_rng_below(&rng, 300);
        for (uint32_t p = 0; p < procs; p++)
            root(&t);
        while (t.count < size) {
            uint32_t parent = ts_rng_below(&rng, t.count);
            if (t.nodes[parent].depth >= 40)
                continue;
            uint32_t f = FO_FRAME_FIRST_REAL + ts_rng_below(&rng, sizeof(pool) / sizeof(pool[0]));
            int taken = 0; /* a session's siblings have distinct frames */
            for (uint32_t other = 0; other < t.count && !taken; other++)
                taken = t.nodes[other].parent == parent && t.nodes[other].frame == f;
            if (taken)
                continue;
            uint32_t id = child(&t, parent, f, ts_rng_below(&rng, 4) == 0 ? 0 : ts_rng_below(&rng, 3000));
            if (ts_rng_below(&rng, 8) == 0) {
                t.nodes[id].samples = 1 + ts_rng_below(&rng, 5);
                t.nodes[id].weight = ts_rng_below(&rng, 100);
            }
        }
        for (uint32_t p = 0; p < procs; p++)
            t.nodes[p].self_ns = ts_rng_below(&rng, 2000);
        /* naive: every node's full text, its own time summed by text */
        uint32_t entries = 0;
        for (uint32_t id = 0; id < t.count; id++) {
            const fo_node_info *n = &t.nodes[id];
            if (n->parent != FO_NONE && t.names[n->frame].text == NULL)
                continue; /* a dropped frame's own time */
            char text[4096];
            full_text(&t, id, text, sizeof(text));
            uint32_t e = 0;
            while (e < entries && !(naive[e].proc == n->proc && strcmp(naive[e].text, text) == 0))
                e++;
            if (e == entries) {
                memset(&naive[e], 0, sizeof(naive[e]));
                snprintf(naive[e].text, sizeof(naive[e].text), "%s", text);
                naive[e].proc = n->proc;
                entries++;
            }
            naive[e].ns += n->self_ns;
            naive[e].samples += n->samples;
            naive[e].weight += n->weight;
        }
        qsort(naive, entries, sizeof(naive[0]), by_proc_then_text);
        fo_render *r = render(&t, UINT64_MAX);
        for (uint32_t p = 0; p < procs; p++) {
            char *expected = calloc(1 << 20, 1);
            size_t used = 0;
            for (uint32_t e = 0; e < entries; e++) {
                uint64_t us = naive[e].ns / 1000 + (naive[e].ns % 1000 >= 500);
                if (naive[e].proc != p || (us == 0 && naive[e].samples == 0))
                    continue;
                used += (size_t)snprintf(expected + used, (1 << 20) - used, "%s %llu", naive[e].text,
                                         (unsigned long long)us);
                if (naive[e].samples > 0)
                    used += (size_t)snprintf(expected + used, (1 << 20) - used, " samples=%llu weight=%llu",
                                             (unsigned long long)naive[e].samples,
                                             (unsigned long long)naive[e].weight);
                used += (size_t)snprintf(expected + used, (1 << 20) - used, "\n");
            }
            assert_stacks(r, p, expected);
            free(expected);
            /* the tree: preorder, children by name, totals add up */
            uint32_t count;
            const uint32_t *ids = fo_render_tree(r, p, &count);
            for (uint32_t i = 0; i < count; i++) {
                const fo_render_node *n = fo_render_node_at(r, ids[i]);
                uint64_t sum = n->self_us;
                uint32_t j = i + 1;
                for (; j < count && fo_render_node_at(r, ids[j])->depth > n->depth; j++)
                    if (fo_render_node_at(r, ids[j])->parent == ids[i])
                        sum += fo_render_node_at(r, ids[j])->total_us;
                assert_int_equal(sum, n->total_us);
                assert_true(n->total_us > 0 || n->samples_below > 0);
            }
        }
        fo_render_free(r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_chain_has_one_text_shared_by_every_stack),
        cmocka_unit_test(test_stacks_follow_the_byte_order_of_their_texts),
        cmocka_unit_test(test_frames_that_read_the_same_merge),
        cmocka_unit_test(test_a_frame_without_a_name_drops_its_own_time),
        cmocka_unit_test(test_time_under_half_a_microsecond_is_no_stack),
        cmocka_unit_test(test_the_text_budget_leaves_stacks_out_and_counts_them),
        cmocka_unit_test(test_processes_apart_and_a_root_with_time_only),
        cmocka_unit_test(test_a_chain_deeper_than_any_c_stack),
        cmocka_unit_test(test_inconsistent_input_is_refused),
        cmocka_unit_test(test_allocation_merges_and_makes_stacks),
        cmocka_unit_test(test_random_trees_match_a_naive_rendering),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) == 0 ? 0 : 1;
}
