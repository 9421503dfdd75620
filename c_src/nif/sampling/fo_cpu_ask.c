#include "fo_cpu_ask.h"

#include "fo_hash.h"

static uint64_t key_of(uint64_t pid, const fo_mfa *mfa)
{
    uint64_t key = fo_hash_mix(pid ^ fo_hash_mix(mfa->module ^ fo_hash_mix(mfa->function + mfa->arity)));
    return key | 1; /* 0 marks a free slot */
}

static uint32_t slot_of(uint64_t key)
{
    return (uint32_t)(key >> 32) & (FO_CPU_ASK_SLOTS - 1);
}

void fo_cpu_asks_answered(fo_cpu_asks *a, uint64_t pid, const fo_mfa *mfa, int64_t now_ns)
{
    uint64_t key = key_of(pid, mfa);
    uint32_t slot = slot_of(key);
    /* "asked" that far ahead: due again FO_CPU_ASK_REFRESH_NS from now */
    atomic_store_explicit(&a->key[slot], key, memory_order_relaxed);
    atomic_store_explicit(&a->at[slot], now_ns + FO_CPU_ASK_REFRESH_NS - FO_CPU_ASK_RETRY_NS,
                          memory_order_relaxed);
}

int fo_cpu_asks_due(fo_cpu_asks *a, uint64_t pid, const fo_mfa *mfa, int64_t now_ns)
{
    uint64_t key = key_of(pid, mfa);
    uint32_t slot = slot_of(key);
    if (atomic_load_explicit(&a->key[slot], memory_order_relaxed) == key &&
        now_ns - atomic_load_explicit(&a->at[slot], memory_order_relaxed) < FO_CPU_ASK_RETRY_NS)
        return 0;
    int64_t second = now_ns / 1000000000;
    if (atomic_load_explicit(&a->second, memory_order_relaxed) != second) {
        atomic_store_explicit(&a->second, second, memory_order_relaxed);
        atomic_store_explicit(&a->in_second, 0, memory_order_relaxed);
    }
    if (atomic_fetch_add_explicit(&a->in_second, 1, memory_order_relaxed) >= FO_CPU_ASK_PER_SECOND) {
        atomic_fetch_add_explicit(&a->limited, 1, memory_order_relaxed);
        return 0;
    }
    atomic_store_explicit(&a->key[slot], key, memory_order_relaxed);
    atomic_store_explicit(&a->at[slot], now_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&a->asked, 1, memory_order_relaxed);
    return 1;
}
