/* Bounds of one profiling session. Every table in the core is sized by
 * these and never by the input: reaching a bound drops or truncates and
 * bumps a counter in fo_stats. */
#ifndef FO_LIMITS_H
#define FO_LIMITS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t max_nodes;        /* calling-context tree nodes (distinct stacks) */
    uint32_t max_depth;        /* tree depth; deeper frames fold into one "…" node */
    uint32_t max_processes;    /* processes one session follows */
    uint32_t max_frames;       /* distinct {M,F,A} frames */
    uint32_t max_stack_frames; /* real stack kept per process to match returns */
} fo_limits;

#define FO_DEFAULT_MAX_NODES 200000u
#define FO_DEFAULT_MAX_DEPTH 512u
#define FO_DEFAULT_MAX_PROCESSES 10000u
#define FO_DEFAULT_MAX_FRAMES 100000u
#define FO_DEFAULT_MAX_STACK_FRAMES 100000u

/* Hard ceilings on the configuration itself, so a typo cannot ask for
 * gigabytes. */
#define FO_CEIL_MAX_NODES 50000000u
#define FO_CEIL_MAX_DEPTH 100000u
#define FO_CEIL_MAX_PROCESSES 1000000u
#define FO_CEIL_MAX_FRAMES 10000000u
#define FO_CEIL_MAX_STACK_FRAMES 10000000u

static inline fo_limits fo_limits_default(void)
{
    fo_limits l = {FO_DEFAULT_MAX_NODES, FO_DEFAULT_MAX_DEPTH, FO_DEFAULT_MAX_PROCESSES,
                   FO_DEFAULT_MAX_FRAMES, FO_DEFAULT_MAX_STACK_FRAMES};
    return l;
}

/* 1 when every field is within 1..ceiling. */
int fo_limits_valid(const fo_limits *limits);

#endif
