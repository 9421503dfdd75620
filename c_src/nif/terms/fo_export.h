/* Core results to Erlang terms. */
#ifndef FO_EXPORT_H
#define FO_EXPORT_H

#include <erl_nif.h>

#include <stdint.h>

#include "fo_session.h"

/* The finished tree as the core holds it, in one piece whatever its depth:
 * {Frames, Pids, Nodes, MaxTextBytes}. Frames: a tuple indexed by frame id
 * (reserved ids are atoms: process, sleep, depth_cap, node_cap, waiting,
 * gc, attributed; real ones {M, F, Arity}). Pids: a tuple indexed by
 * process. Nodes: a binary of FO_EXPORT_NODE_BYTES per node, parents
 * first (see put_node). MaxTextBytes: the budget render/3 gives the stack
 * texts. The enomem exception term on failure.
 * A session that charged allocation (fo_session_gc.c) gives a fifth
 * element, Alloc: a binary of FO_EXPORT_ALLOC_BYTES per node charged
 * (see put_alloc), in no particular order. */
#define FO_EXPORT_NODE_BYTES 36u
#define FO_EXPORT_ALLOC_BYTES 20u
ERL_NIF_TERM fo_export_tree(ErlNifEnv *env, const fo_session *s, uint64_t max_text_bytes);

/* The counters as a map. nodes/processes/frames/memory are passed in so a
 * finished session (core freed) can still answer; memory is the core's
 * tables. From the event ring (fo_ring.h): producer_folds, the times a
 * traced process found it full and folded it, and buffer_bytes, the most
 * it held. */
ERL_NIF_TERM fo_export_stats(ErlNifEnv *env, const fo_stats *stats, size_t memory, uint32_t nodes,
                             uint32_t processes, uint32_t frames, uint64_t producer_folds, uint64_t buffer_bytes);

/* Counters a front end adds to that map: built with it in one go (a map
 * past 32 keys is a tree, and putting them one by one copied it each
 * time). At most FO_EXPORT_MORE_STATS. */
#define FO_EXPORT_MORE_STATS 32
typedef struct {
    ERL_NIF_TERM keys[FO_EXPORT_MORE_STATS];
    ERL_NIF_TERM values[FO_EXPORT_MORE_STATS];
    unsigned count;
} fo_export_more;

/* Adds key => value (an unsigned count) to more; ignored once it is full. */
void fo_export_more_count(ErlNifEnv *env, fo_export_more *more, ERL_NIF_TERM key, uint64_t value);

/* fo_export_stats with more's counters too (more may be NULL). */
ERL_NIF_TERM fo_export_stats_with(ErlNifEnv *env, const fo_stats *stats, size_t memory, uint32_t nodes,
                                  uint32_t processes, uint32_t frames, uint64_t producer_folds,
                                  uint64_t buffer_bytes, const fo_export_more *more);

#endif
