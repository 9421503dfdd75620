#include "fo_export.h"

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
    case FO_FRAME_GC:
        return fo_atom_gc;
    case FO_FRAME_ATTRIBUTED:
        return fo_atom_attributed;
    default:
        break;
    }
    fo_mfa mfa;
    if (!fo_session_frame_mfa(s, frame, &mfa))
        return fo_atom_undefined;
    return enif_make_tuple3(env, (ERL_NIF_TERM)mfa.module, (ERL_NIF_TERM)mfa.function,
                            enif_make_uint(env, mfa.arity));
}

ERL_NIF_TERM fo_export_stacks(ErlNifEnv *env, const fo_session *s)
{
    uint32_t node_count = fo_session_node_count(s);
    uint32_t proc_count = fo_session_process_count(s);
    uint32_t frame_slots = FO_FRAME_FIRST_REAL + fo_session_frame_count(s);
    ERL_NIF_TERM *paths = enif_alloc(sizeof(ERL_NIF_TERM) * ((size_t)node_count + 1));
    ERL_NIF_TERM *lists = enif_alloc(sizeof(ERL_NIF_TERM) * ((size_t)proc_count + 1));
    ERL_NIF_TERM *frames = enif_alloc(sizeof(ERL_NIF_TERM) * (size_t)frame_slots);
    ERL_NIF_TERM result = enif_make_new_map(env);
    if (paths == NULL || lists == NULL || frames == NULL) {
        enif_free(paths);
        enif_free(lists);
        enif_free(frames);
        return enif_raise_exception(env, enif_make_atom(env, "enomem"));
    }
    for (uint32_t f = 0; f < frame_slots; f++)
        frames[f] = frame_term(env, s, f);
    for (uint32_t p = 0; p < proc_count; p++)
        lists[p] = enif_make_list(env, 0);
    /* Parents come before children, so each path is one cons onto its
     * parent's: every distinct stack shares its tail. */
    for (uint32_t id = 0; id < node_count; id++) {
        fo_node_info n;
        fo_session_node(s, id, &n);
        if (n.parent == FO_NONE)
            paths[id] = enif_make_list(env, 0);
        else
            paths[id] = enif_make_list_cell(env, n.frame < frame_slots ? frames[n.frame] : fo_atom_undefined,
                                            paths[n.parent]);
        if (n.self_ns > 0 || n.samples > 0) {
            ERL_NIF_TERM ns = enif_make_uint64(env, n.self_ns);
            /* Only sampled stacks carry the counts, so every other session
             * exports the same 2-tuples as before. */
            ERL_NIF_TERM entry = n.samples == 0
                                     ? enif_make_tuple2(env, paths[id], ns)
                                     : enif_make_tuple4(env, paths[id], ns, enif_make_uint64(env, n.samples),
                                                        enif_make_uint64(env, n.weight));
            lists[n.proc] = enif_make_list_cell(env, entry, lists[n.proc]);
        }
    }
    /* paths has room for the pid keys now that the walk is done */
    for (uint32_t p = 0; p < proc_count; p++) {
        ErlNifPid pid;
        pid.pid = (ERL_NIF_TERM)fo_session_process_pid(s, p);
        paths[p] = enif_make_pid(env, &pid);
    }
    if (proc_count > node_count + 1 || !enif_make_map_from_arrays(env, paths, lists, proc_count, &result))
        result = enif_raise_exception(env, fo_atom_error);
    enif_free(paths);
    enif_free(lists);
    enif_free(frames);
    return result;
}

ERL_NIF_TERM fo_export_stats(ErlNifEnv *env, const fo_stats *st, size_t memory, uint32_t nodes,
                             uint32_t processes, uint32_t frames, uint64_t producer_folds)
{
    ERL_NIF_TERM keys[] = {fo_atom_events,           fo_atom_dropped_events,     fo_atom_malformed_events,
                           fo_atom_ignored_events,   fo_atom_truncated_stacks,   fo_atom_depth_truncations,
                           fo_atom_node_limit_hits,  fo_atom_frame_limit_hits,   fo_atom_process_limit_hits,
                           fo_atom_stack_overflows,  fo_atom_clock_skews,        fo_atom_resyncs,
                           fo_atom_memory_bytes,     fo_atom_nodes,              fo_atom_processes,
                           fo_atom_frames,           fo_atom_samples,            fo_atom_producer_folds};
    ERL_NIF_TERM values[] = {
        enif_make_uint64(env, st->events),           enif_make_uint64(env, st->dropped_events),
        enif_make_uint64(env, st->malformed_events), enif_make_uint64(env, st->ignored_events),
        enif_make_uint64(env, st->truncated_stacks), enif_make_uint64(env, st->depth_truncations),
        enif_make_uint64(env, st->node_limit_hits),  enif_make_uint64(env, st->frame_limit_hits),
        enif_make_uint64(env, st->process_limit_hits), enif_make_uint64(env, st->stack_overflows),
        enif_make_uint64(env, st->clock_skews),      enif_make_uint64(env, st->resyncs),
        enif_make_uint64(env, memory),               enif_make_uint(env, nodes),
        enif_make_uint(env, processes),              enif_make_uint(env, frames),
        enif_make_uint64(env, st->samples),          enif_make_uint64(env, producer_folds)};
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, values, sizeof(keys) / sizeof(keys[0]), &map);
    return map;
}
