/* Processes on other nodes, as the span graph's pid keys: a remote pid or
 * a {Name, Node} a request was sent to gets a key with FO_GRAPH_REMOTE_BIT
 * set (local pid keys never have it), and the term is kept for export.
 * Bounded: past FO_REMOTE_MAX distinct terms a new one gets key 0 (the
 * graph then takes it as no process) and is counted. Not thread-safe: the
 * session's lock serializes. */
#ifndef FO_REMOTE_H
#define FO_REMOTE_H

#include <erl_nif.h>
#include <stdint.h>

#define FO_REMOTE_MAX 256u

typedef struct {
    ErlNifEnv *env; /* holds the copies */
    uint32_t count;
    uint64_t limit_hits;
    ERL_NIF_TERM terms[FO_REMOTE_MAX];
} fo_remote;

/* NULL when memory is short. */
fo_remote *fo_remote_new(void);
void fo_remote_free(fo_remote *r);

/* 1 when term names a process on another node: a pid that is not local,
 * or {Name, Node} (a send to a registered name on another node; local
 * sends name the pid). */
int fo_remote_is_remote(ErlNifEnv *env, ERL_NIF_TERM term);

/* The key of a remote term (made on first sight); 0 past the bound. */
uint64_t fo_remote_key(fo_remote *r, ErlNifEnv *env, ERL_NIF_TERM term);

/* The keys of the {Name, Node} terms met so far whose Node is node, into
 * keys (at most cap); how many. A node's processes answer as pids what
 * was sent to their names. */
uint32_t fo_remote_names_on(const fo_remote *r, ERL_NIF_TERM node, uint64_t *keys, uint32_t cap);

/* The term of a remote key, copied into env; nil when it is none of ours. */
ERL_NIF_TERM fo_remote_term(const fo_remote *r, ErlNifEnv *env, uint64_t key);

#endif
