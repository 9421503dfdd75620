/* Core results to Erlang terms. */
#ifndef FO_EXPORT_H
#define FO_EXPORT_H

#include <erl_nif.h>

#include "fo_session.h"

/* #{pid => [Entry]}, one entry per node with time or samples: {FramesLeafFirst,
 * Ns}, or {FramesLeafFirst, Ns, Samples, Weight} for a node stack samples
 * landed on (Samples > 0; Ns may be 0). The badarg or enomem exception term
 * on failure. */
ERL_NIF_TERM fo_export_stacks(ErlNifEnv *env, const fo_session *s);

/* The counters as a map. nodes/processes/frames/memory are passed in so a
 * finished session (core freed) can still answer; producer_folds counts
 * the times a traced process found its tracer ring full and folded it. */
ERL_NIF_TERM fo_export_stats(ErlNifEnv *env, const fo_stats *stats, size_t memory, uint32_t nodes,
                             uint32_t processes, uint32_t frames, uint64_t producer_folds);

#endif
