/* The open-addressing index shared by the core's hash tables: slots hold
 * an entry index + 1 (0 = empty) and the tables keep their entries in
 * arrays of their own. Each table does its own probing for lookups (its
 * key comparison differs); putting and growing are the same for all. */
#ifndef FO_INDEX_H
#define FO_INDEX_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t *slots;
    uint32_t mask; /* size - 1, size a power of two */
    uint32_t used;
} fo_index;

/* The hash of the entry with this index, to re-place entries on growth. */
typedef uint64_t (*fo_index_rehash)(const void *table, uint32_t index);

int fo_index_init(fo_index *s, uint32_t size);
void fo_index_destroy(fo_index *s);

/* First slot to probe for hash; continue with fo_index_next. */
static inline uint32_t fo_index_start(const fo_index *s, uint64_t hash)
{
    return (uint32_t)hash & s->mask;
}

static inline uint32_t fo_index_next(const fo_index *s, uint32_t i)
{
    return (i + 1) & s->mask;
}

/* Records index under hash, doubling the table first when it would pass
 * half full (so probes stay short). 0 when memory is short: nothing changed. */
int fo_index_put(fo_index *s, uint64_t hash, uint32_t index, fo_index_rehash rehash, const void *table);

static inline size_t fo_index_memory(const fo_index *s)
{
    return ((size_t)s->mask + 1) * sizeof(uint32_t);
}

#endif
