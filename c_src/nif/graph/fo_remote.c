#include "fo_remote.h"

#include "fo_atoms.h"
#include "fo_graph.h"

fo_remote *fo_remote_new(void)
{
    fo_remote *r = enif_alloc(sizeof(fo_remote));
    if (r == NULL)
        return NULL;
    r->env = enif_alloc_env();
    if (r->env == NULL) {
        enif_free(r);
        return NULL;
    }
    r->count = 0;
    r->limit_hits = 0;
    return r;
}

void fo_remote_free(fo_remote *r)
{
    if (r == NULL)
        return;
    enif_free_env(r->env);
    enif_free(r);
}

int fo_remote_is_remote(ErlNifEnv *env, ERL_NIF_TERM term)
{
    ErlNifPid pid;
    if (enif_is_pid(env, term))
        return !enif_get_local_pid(env, term, &pid);
    int arity;
    const ERL_NIF_TERM *items;
    return enif_get_tuple(env, term, &arity, &items) && arity == 2 && enif_is_atom(env, items[0]) &&
           enif_is_atom(env, items[1]);
}

/* A trace meets a few remote processes: a scan is cheaper than a table. */
uint64_t fo_remote_key(fo_remote *r, ErlNifEnv *env, ERL_NIF_TERM term)
{
    (void)env;
    for (uint32_t i = 0; i < r->count; i++) {
        if (enif_is_identical(r->terms[i], term))
            return FO_GRAPH_REMOTE_BIT | (uint64_t)(i + 1);
    }
    if (r->count >= FO_REMOTE_MAX) {
        r->limit_hits++;
        return 0;
    }
    r->terms[r->count++] = enif_make_copy(r->env, term);
    return FO_GRAPH_REMOTE_BIT | (uint64_t)r->count;
}

ERL_NIF_TERM fo_remote_term(const fo_remote *r, ErlNifEnv *env, uint64_t key)
{
    uint64_t i = key & ~FO_GRAPH_REMOTE_BIT;
    if (r == NULL || (key & FO_GRAPH_REMOTE_BIT) == 0 || i == 0 || i > r->count)
        return fo_atom_nil;
    return enif_make_copy(env, r->terms[i - 1]);
}

uint32_t fo_remote_names_on(const fo_remote *r, ERL_NIF_TERM node, uint64_t *keys, uint32_t cap)
{
    uint32_t n = 0;
    for (uint32_t i = 0; r != NULL && i < r->count && n < cap; i++) {
        int arity;
        const ERL_NIF_TERM *items;
        if (enif_get_tuple(r->env, r->terms[i], &arity, &items) && arity == 2 && items[1] == node)
            keys[n++] = FO_GRAPH_REMOTE_BIT | (uint64_t)(i + 1);
    }
    return n;
}
