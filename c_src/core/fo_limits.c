#include "fo_limits.h"

static int within(uint32_t value, uint32_t ceiling)
{
    return value >= 1 && value <= ceiling;
}

int fo_limits_valid(const fo_limits *limits)
{
    return limits != NULL && within(limits->max_nodes, FO_CEIL_MAX_NODES) &&
           within(limits->max_depth, FO_CEIL_MAX_DEPTH) &&
           within(limits->max_processes, FO_CEIL_MAX_PROCESSES) &&
           within(limits->max_frames, FO_CEIL_MAX_FRAMES) &&
           within(limits->max_stack_frames, FO_CEIL_MAX_STACK_FRAMES);
}
