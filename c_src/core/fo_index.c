#include "fo_index.h"

#include <stdlib.h>
#include <string.h>

int fo_index_init(fo_index *s, uint32_t size)
{
    memset(s, 0, sizeof(*s));
    s->slots = calloc(size, sizeof(uint32_t));
    if (s->slots == NULL)
        return 0;
    s->mask = size - 1;
    return 1;
}

void fo_index_destroy(fo_index *s)
{
    free(s->slots);
    memset(s, 0, sizeof(*s));
}

static void place(uint32_t *slots, uint32_t mask, uint64_t hash, uint32_t index)
{
    uint32_t i = (uint32_t)hash & mask;
    while (slots[i] != 0)
        i = (i + 1) & mask;
    slots[i] = index + 1;
}

static int grow(fo_index *s, fo_index_rehash rehash, const void *table)
{
    uint32_t old_size = s->mask + 1;
    if (old_size > UINT32_MAX / 2)
        return 0;
    uint32_t size = old_size * 2;
    uint32_t *slots = calloc(size, sizeof(uint32_t));
    if (slots == NULL)
        return 0;
    for (uint32_t i = 0; i < old_size; i++) {
        if (s->slots[i] != 0)
            place(slots, size - 1, rehash(table, s->slots[i] - 1), s->slots[i] - 1);
    }
    free(s->slots);
    s->slots = slots;
    s->mask = size - 1;
    return 1;
}

int fo_index_put(fo_index *s, uint64_t hash, uint32_t index, fo_index_rehash rehash, const void *table)
{
    if ((uint64_t)(s->used + 1) * 2 > (uint64_t)s->mask + 1 && !grow(s, rehash, table))
        return 0;
    place(s->slots, s->mask, hash, index);
    s->used++;
    return 1;
}
