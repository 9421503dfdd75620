#include "fo_identity.h"

#include <stdlib.h>

static int known_has(uint64_t word, const uint64_t *known, uint32_t n)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (known[mid] == word)
            return 1;
        if (known[mid] < word)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

uint64_t fo_identity_of(uint64_t reg, const uint64_t *stack, uint64_t words, const uint64_t *known, uint32_t n)
{
    if (n == 0)
        return 0;
    if (reg != 0 && known_has(reg, known, n))
        return reg;
    /* The innermost C function that needed r13 saved the value it had
     * from its caller; the first known word from the stack pointer up is
     * that one, or an argument copy of the same pointer. */
    for (uint64_t i = 0; stack != NULL && i < words; i++) {
        if (stack[i] != 0 && known_has(stack[i], known, n))
            return stack[i];
    }
    return 0;
}

static int ascending(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

uint32_t fo_identity_sort(uint64_t *known, uint32_t n)
{
    if (n < 2)
        return n;
    qsort(known, n, sizeof(uint64_t), ascending);
    uint32_t out = 1;
    for (uint32_t i = 1; i < n; i++) {
        if (known[i] != known[out - 1])
            known[out++] = known[i];
    }
    return out;
}

/* Whether the thread slept between two of its samples: its task clock
 * runs only while it runs. */
static int slept_between(const fo_identity_sample *a, const fo_identity_sample *b, int64_t period_ns)
{
    int64_t wall = b->ts_ns - a->ts_ns;
    if (a->cpu_ns == 0 || b->cpu_ns == 0)
        return wall > 2 * period_ns;
    return wall - (b->cpu_ns - a->cpu_ns) > period_ns / 2;
}

uint32_t fo_identity_runs(const fo_identity_sample *samples, uint32_t n, uint64_t proc, int64_t from_ns,
                          int64_t to_ns, int64_t period_ns, fo_identity_slice_fn each, void *ctx)
{
    uint32_t given = 0;
    int64_t floor_ns = from_ns; /* a slice starts at or after this */
    uint32_t i = 0;
    while (i < n) {
        const fo_identity_sample *s = &samples[i];
        if (s->ts_ns >= to_ns)
            break;
        if (s->ts_ns < from_ns) {
            i++;
            continue;
        }
        if (proc == 0 || s->proc != proc) {
            floor_ns = s->ts_ns + 1;
            i++;
            continue;
        }
        int64_t start = s->ts_ns - period_ns;
        if (start < floor_ns)
            start = floor_ns;
        uint32_t last = i;
        while (last + 1 < n && samples[last + 1].proc == proc && samples[last + 1].ts_ns < to_ns &&
               !slept_between(&samples[last], &samples[last + 1], period_ns))
            last++;
        int64_t end = samples[last].ts_ns + 1;
        each(ctx, start, end);
        given++;
        floor_ns = end;
        i = last + 1;
    }
    return given;
}
