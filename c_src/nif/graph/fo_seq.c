#include "fo_seq.h"

#include "fo_atoms.h"

/* Tags are terms (refs, [alias | Ref]): hash them; the request and its
 * reply carry equal terms, so equal keys. */
static uint64_t tag_key(ERL_NIF_TERM tag)
{
    return enif_hash(ERL_NIF_INTERNAL_HASH, tag, 0x666c616d65ULL) | 1u;
}

static int is_call_tag(ErlNifEnv *env, ERL_NIF_TERM tag)
{
    ERL_NIF_TERM head, tail;
    if (enif_is_ref(env, tag))
        return 1;
    return enif_get_list_cell(env, tag, &head, &tail) && head == fo_atom_alias && enif_is_ref(env, tail);
}

static uint64_t pid_key(ErlNifEnv *env, ERL_NIF_TERM term, fo_remote *remote)
{
    ErlNifPid pid;
    if (enif_get_local_pid(env, term, &pid))
        return (uint64_t)pid.pid;
    if (remote != NULL && fo_remote_is_remote(env, term))
        return fo_remote_key(remote, env, term);
    return 0;
}

/* The same on every node (phash2 is portable): a request's two halves,
 * seen on two nodes, are joined by it. Never 0. */
uint32_t fo_seq_wire(ErlNifEnv *env, ERL_NIF_TERM term)
{
    (void)env;
    return (uint32_t)enif_hash(ERL_NIF_PHASH2, term, 0) | 1u;
}


int fo_seq_decode(ErlNifEnv *env, ERL_NIF_TERM info, fo_corr *out, fo_remote *remote)
{
    int arity;
    const ERL_NIF_TERM *items;
    if (!enif_get_tuple(env, info, &arity, &items) || arity != 5)
        return 0;
    if (items[0] == fo_atom_send)
        out->is_send = 1;
    else if (items[0] == fo_atom_receive)
        out->is_send = 0;
    else
        return 0;
    out->from = pid_key(env, items[2], remote);
    out->to = pid_key(env, items[3], remote);
    out->wire = 0;
    if (out->from == 0)
        return 0;
    out->kind = FO_CORR_MESSAGE;
    out->tag = 0;
    /* a message across nodes: its serial and sender are the same terms on
     * both nodes (the token travels with it) */
    if ((out->from | out->to) & FO_GRAPH_REMOTE_BIT)
        out->wire = fo_seq_wire(env, enif_make_tuple2(env, items[1], items[2]));
    const ERL_NIF_TERM *msg;
    int msg_arity;
    if (!enif_get_tuple(env, items[4], &msg_arity, &msg))
        return 1;
    if (msg_arity == 3 && msg[0] == fo_atom_gen_call) {
        const ERL_NIF_TERM *from;
        int from_arity;
        if (out->to != 0 && enif_get_tuple(env, msg[1], &from_arity, &from) && from_arity == 2) {
            out->kind = FO_CORR_REQUEST;
            out->tag = tag_key(from[1]);
            if ((out->from | out->to) & FO_GRAPH_REMOTE_BIT)
                out->wire = fo_seq_wire(env, from[1]);
        }
        return 1;
    }
    if (msg_arity >= 4 && (msg[0] == fo_atom_spawn_request || msg[0] == fo_atom_spawn_reply)) {
        /* spawn_reply: the child answering its spawner, not its work */
        out->kind = FO_CORR_SPAWN;
        if (msg[0] == fo_atom_spawn_reply && !out->is_send && (out->from & FO_GRAPH_REMOTE_BIT)) {
            out->kind = FO_CORR_REMOTE_SPAWNED; /* the pid of a child on another node */
            out->wire = fo_seq_wire(env, msg[1]);
        } else if (msg[0] == fo_atom_spawn_reply) {
            out->to = 0;
        } else if (out->from & FO_GRAPH_REMOTE_BIT) {
            out->wire = fo_seq_wire(env, msg[1]); /* the request's reference, on both nodes */
        } else if (out->is_send && enif_is_atom(env, items[3])) {
            /* sent to a node: a spawn there (a local one goes to its child) */
            out->kind = FO_CORR_REMOTE_SPAWN;
            out->to = 0;
            out->wire = fo_seq_wire(env, msg[1]);
        }
        return 1;
    }
    if (msg_arity == 2 && is_call_tag(env, msg[0])) {
        out->kind = FO_CORR_REPLY;
        out->tag = tag_key(msg[0]);
    }
    return 1;
}
