#include "fo_export.h"

#include <string.h>

#include "fo_atoms.h"

static ERL_NIF_TERM frame_term(ErlNifEnv *env, const fo_session *s, uint32_t frame)
{
    switch (frame) {
    case FO_FRAME_PROCESS:
        return fo_atom_process;
    case FO_FRAME_SLEEP:
        return fo_atom_sleep;
    case FO_FRAME_DEPTH_CAP:
        return fo_atom_depth_cap;
    case FO_FRAME_NODE_CAP:
        return fo_atom_node_cap;
    case FO_FRAME_WAITING:
        return fo_atom_waiting;
    case FO_FRAME_GC_MINOR:
        return fo_atom_gc_minor;
    case FO_FRAME_GC_MAJOR:
        return fo_atom_gc_major;
    case FO_FRAME_ATTRIBUTED:
        return fo_atom_attributed;
    case FO_FRAME_RUNNABLE:
        return fo_atom_runnable;
    default:
        break;
    }
    fo_mfa mfa;
    if (!fo_session_frame_mfa(s, frame, &mfa))
        return fo_atom_undefined;
    return enif_make_tuple3(env, (ERL_NIF_TERM)mfa.module, (ERL_NIF_TERM)mfa.function,
                            enif_make_uint(env, mfa.arity));
}

/* One node: parent, frame, process (u32 each), self_ns, samples, weight
 * (u64 each), native byte order, packed. */
static void put_node(unsigned char *at, const fo_node_info *n)
{
    memcpy(at, &n->parent, 4);
    memcpy(at + 4, &n->frame, 4);
    memcpy(at + 8, &n->proc, 4);
    memcpy(at + 12, &n->self_ns, 8);
    memcpy(at + 20, &n->samples, 8);
    memcpy(at + 28, &n->weight, 8);
}

/* One allocation entry: node (u32), words, samples (u64 each), native
 * byte order, packed. */
static void put_alloc(unsigned char *at, uint32_t node, uint64_t words, uint64_t samples)
{
    memcpy(at, &node, 4);
    memcpy(at + 4, &words, 8);
    memcpy(at + 12, &samples, 8);
}

static ERL_NIF_TERM alloc_binary(ErlNifEnv *env, const fo_session *s)
{
    uint32_t count = fo_session_alloc_count(s);
    ERL_NIF_TERM term;
    unsigned char *bytes = enif_make_new_binary(env, (size_t)count * FO_EXPORT_ALLOC_BYTES, &term);
    if (bytes == NULL)
        return 0;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t node;
        uint64_t words, samples;
        fo_session_alloc_entry(s, i, &node, &words, &samples);
        put_alloc(bytes + (size_t)i * FO_EXPORT_ALLOC_BYTES, node, words, samples);
    }
    return term;
}

ERL_NIF_TERM fo_export_tree(ErlNifEnv *env, const fo_session *s, uint64_t max_text_bytes)
{
    uint32_t node_count = fo_session_node_count(s);
    uint32_t proc_count = fo_session_process_count(s);
    uint32_t frame_slots = FO_FRAME_FIRST_REAL + fo_session_frame_count(s);
    size_t terms = (size_t)(frame_slots > proc_count ? frame_slots : proc_count) + 1;
    ERL_NIF_TERM *items = enif_alloc(sizeof(ERL_NIF_TERM) * terms);
    ERL_NIF_TERM nodes;
    unsigned char *bytes = enif_make_new_binary(env, (size_t)node_count * FO_EXPORT_NODE_BYTES, &nodes);
    if (items == NULL || bytes == NULL) {
        enif_free(items);
        return enif_raise_exception(env, enif_make_atom(env, "enomem"));
    }
    for (uint32_t id = 0; id < node_count; id++) {
        fo_node_info n;
        fo_session_node(s, id, &n);
        put_node(bytes + (size_t)id * FO_EXPORT_NODE_BYTES, &n);
    }
    for (uint32_t f = 0; f < frame_slots; f++)
        items[f] = frame_term(env, s, f);
    ERL_NIF_TERM frames = enif_make_tuple_from_array(env, items, frame_slots);
    for (uint32_t p = 0; p < proc_count; p++) {
        ErlNifPid pid;
        pid.pid = (ERL_NIF_TERM)fo_session_process_pid(s, p);
        items[p] = enif_make_pid(env, &pid);
    }
    ERL_NIF_TERM pids = enif_make_tuple_from_array(env, items, proc_count);
    enif_free(items);
    if (fo_session_alloc_count(s) > 0) {
        ERL_NIF_TERM alloc = alloc_binary(env, s);
        if (alloc == 0)
            return enif_raise_exception(env, enif_make_atom(env, "enomem"));
        return enif_make_tuple5(env, frames, pids, nodes, enif_make_uint64(env, max_text_bytes), alloc);
    }
    return enif_make_tuple4(env, frames, pids, nodes, enif_make_uint64(env, max_text_bytes));
}

ERL_NIF_TERM fo_export_stats(ErlNifEnv *env, const fo_stats *st, size_t memory, uint32_t nodes,
                             uint32_t processes, uint32_t frames, uint64_t producer_folds, uint64_t buffer_bytes)
{
    return fo_export_stats_with(env, st, memory, nodes, processes, frames, producer_folds, buffer_bytes, NULL);
}

void fo_export_more_count(ErlNifEnv *env, fo_export_more *more, ERL_NIF_TERM key, uint64_t value)
{
    if (more->count >= FO_EXPORT_MORE_STATS)
        return;
    more->keys[more->count] = key;
    more->values[more->count] = enif_make_uint64(env, value);
    more->count++;
}

#define BASE_STATS 19u

ERL_NIF_TERM fo_export_stats_with(ErlNifEnv *env, const fo_stats *st, size_t memory, uint32_t nodes,
                                  uint32_t processes, uint32_t frames, uint64_t producer_folds,
                                  uint64_t buffer_bytes, const fo_export_more *more)
{
    ERL_NIF_TERM keys[BASE_STATS + FO_EXPORT_MORE_STATS] = {
        fo_atom_events,           fo_atom_dropped_events,    fo_atom_malformed_events,
        fo_atom_ignored_events,   fo_atom_truncated_stacks,  fo_atom_depth_truncations,
        fo_atom_node_limit_hits,  fo_atom_frame_limit_hits,  fo_atom_process_limit_hits,
        fo_atom_stack_overflows,  fo_atom_clock_skews,       fo_atom_resyncs,
        fo_atom_memory_bytes,     fo_atom_nodes,             fo_atom_processes,
        fo_atom_frames,           fo_atom_samples,           fo_atom_producer_folds,
        fo_atom_buffer_bytes};
    ERL_NIF_TERM values[BASE_STATS + FO_EXPORT_MORE_STATS] = {
        enif_make_uint64(env, st->events),           enif_make_uint64(env, st->dropped_events),
        enif_make_uint64(env, st->malformed_events), enif_make_uint64(env, st->ignored_events),
        enif_make_uint64(env, st->truncated_stacks), enif_make_uint64(env, st->depth_truncations),
        enif_make_uint64(env, st->node_limit_hits),  enif_make_uint64(env, st->frame_limit_hits),
        enif_make_uint64(env, st->process_limit_hits), enif_make_uint64(env, st->stack_overflows),
        enif_make_uint64(env, st->clock_skews),      enif_make_uint64(env, st->resyncs),
        enif_make_uint64(env, memory),               enif_make_uint(env, nodes),
        enif_make_uint(env, processes),              enif_make_uint(env, frames),
        enif_make_uint64(env, st->samples),          enif_make_uint64(env, producer_folds),
        enif_make_uint64(env, buffer_bytes)};
    size_t count = BASE_STATS;
    for (unsigned i = 0; more != NULL && i < more->count; i++, count++) {
        keys[count] = more->keys[i];
        values[count] = more->values[i];
    }
    ERL_NIF_TERM map;
    if (!enif_make_map_from_arrays(env, keys, values, count, &map))
        map = enif_make_new_map(env); /* a key twice: cannot happen with these atoms */
    return map;
}
