/* Which stops of a native trace's processes to ask about. A process
 * stopping (an `out`) in a function it was never seen in leaves the core
 * without its stack there (fo_session_cpu_context); the tracer callback
 * then asks a helper (fo_cpu_helpers.h) to read it with process_info. Each
 * (process, function) is asked about at most every FO_CPU_ASK_RETRY_NS
 * until a stack read there is kept, then every FO_CPU_ASK_REFRESH_NS (it
 * may be reached another way); the trace at most FO_CPU_ASK_PER_SECOND times a
 * second: the rest are counted (limited), not asked.
 *
 * Written by the tracer callbacks of any scheduler without a lock: two
 * racing on one slot may both ask, which costs one process_info. */
#ifndef FO_CPU_ASK_H
#define FO_CPU_ASK_H

#include <erl_nif.h>
#include <stdatomic.h>
#include <stdint.h>

#include "fo_event.h"

#define FO_CPU_ASK_SLOTS 1024u
#define FO_CPU_ASK_RETRY_NS 10000000
#define FO_CPU_ASK_REFRESH_NS 1000000000
#define FO_CPU_ASK_PER_SECOND 1000u

typedef struct {
    _Atomic uint64_t key[FO_CPU_ASK_SLOTS];
    _Atomic int64_t at[FO_CPU_ASK_SLOTS];
    _Atomic int64_t second;     /* the rate limit's current second */
    atomic_uint in_second;      /* asks in it */
    atomic_ullong asked, limited;
} fo_cpu_asks;

/* Whether pid's stop in mfa at now_ns should be asked about (and if so it
 * counts as asked). */
int fo_cpu_asks_due(fo_cpu_asks *a, uint64_t pid, const fo_mfa *mfa, int64_t now_ns);

/* A stack read for pid's stop in mfa was kept (asked again only after
 * FO_CPU_ASK_REFRESH_NS). */
void fo_cpu_asks_answered(fo_cpu_asks *a, uint64_t pid, const fo_mfa *mfa, int64_t now_ns);

#endif
