/* Hash mixing shared by the core's open-addressing tables. */
#ifndef FO_HASH_H
#define FO_HASH_H

#include <stdint.h>

/* splitmix64 finalizer: cheap, and spreads the low-entropy keys we get
 * (atom terms, pids, small node ids) over all bits. */
static inline uint64_t fo_hash_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static inline uint64_t fo_hash_pair(uint64_t a, uint64_t b)
{
    return fo_hash_mix(a ^ fo_hash_mix(b + 0x9e3779b97f4a7c15ULL));
}

#endif
