/* The session as Erlang code holds it: a handle (a second, tiny resource)
 * keeping the session resource, and the steps that take the session out
 * of the node-wide tables reaching it (tracer slots, router): when the last
 * handle reference goes, even if its owner died, the session leaves its
 * tracer slot before the handle lets it go; stop/1 takes it out of both.
 * These sit here, above the resource and the two tables, which know
 * nothing of each other, nor the resource of them. */
#ifndef FO_HANDLE_H
#define FO_HANDLE_H

#include <erl_nif.h>

#include "fo_resource.h"

int fo_handle_open(ErlNifEnv *env);

/* The term Erlang code holds: a handle keeping res (res itself is left
 * to the caller to release). */
ERL_NIF_TERM fo_handle_make(ErlNifEnv *env, fo_session_res *res);

/* 1 and *out when term is one of our session handles. */
int fo_handle_get(ErlNifEnv *env, ERL_NIF_TERM term, fo_session_res **out);

/* The tracer callbacks take no more events (stop/1): the first call notes
 * when, on the session's clock; the session leaves its tracer slot and, a
 * graph trace, the router. */
void fo_handle_stop(fo_session_res *res);

#endif
