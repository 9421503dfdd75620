#include "fo_xproc.h"

#include <string.h>

#include "fo_clock.h"

fo_xproc *fo_xproc_new(const fo_graph_limits *limits, uint64_t label)
{
    fo_xproc *x = enif_alloc(sizeof(fo_xproc));
    if (x == NULL)
        return NULL;
    memset(x, 0, sizeof(*x));
    x->graph = fo_graph_new(limits, label);
    x->reasons = enif_alloc_env();
    x->remote = fo_remote_new();
    x->label = label;
    x->ingest_offset_ns = (int64_t)enif_monotonic_time(ERL_NIF_NSEC) - fo_tracer_clock_ns();
    if (x->graph == NULL || x->reasons == NULL || x->remote == NULL) {
        fo_xproc_free(x);
        return NULL;
    }
    return x;
}

void fo_xproc_free(fo_xproc *x)
{
    if (x == NULL)
        return;
    fo_graph_free(x->graph);
    if (x->reasons != NULL)
        enif_free_env(x->reasons);
    fo_remote_free(x->remote);
    enif_free(x);
}

uint64_t fo_xproc_reason_key(ErlNifEnv *env, fo_xproc *x, ERL_NIF_TERM reason)
{
    char name[8];
    if (enif_get_atom(env, reason, name, sizeof(name), ERL_NIF_LATIN1) && strcmp(name, "normal") == 0)
        return 0;
    uint64_t key = enif_hash(ERL_NIF_INTERNAL_HASH, reason, 0) | 1u;
    uint32_t n = x->reason_count;
    for (uint32_t i = 0; i < n; i++) {
        if (x->reason_keys[i] == key)
            return key;
    }
    if (n < FO_XPROC_REASONS) {
        x->reason_keys[n] = key;
        x->reason_terms[n] = enif_make_copy(x->reasons, reason);
        x->reason_count = n + 1;
    }
    return key;
}

ERL_NIF_TERM fo_xproc_reason_term(ErlNifEnv *env, const fo_xproc *x, uint64_t key)
{
    for (uint32_t i = 0; i < x->reason_count; i++) {
        if (x->reason_keys[i] == key)
            return enif_make_copy(env, x->reason_terms[i]);
    }
    return enif_make_atom(env, "unknown");
}
