/* Tracer callbacks for graph traces: the tracer state is the atom `graph`
 * and the router finds each event's session. */
#ifndef FO_GRAPH_TRACER_H
#define FO_GRAPH_TRACER_H

#include <erl_nif.h>

#include "fo_graph.h"
#include "fo_resource.h"

ERL_NIF_TERM fo_graph_tracer_enabled(ErlNifEnv *env, ERL_NIF_TERM tag);
ERL_NIF_TERM fo_graph_tracer_trace(ErlNifEnv *env, const ERL_NIF_TERM argv[]);

/* Who ended a wait, from a receive event's message and sender (the
 * receive match spec's result; NULL when there is none). */
fo_waker_kind fo_graph_waker(ErlNifEnv *env, ERL_NIF_TERM msg, const ERL_NIF_TERM *sender, uint64_t *key);

/* One trace message of a graph session's root (mode :process), applied
 * through the graph's rules. Caller holds the session's lock. */
void fo_graph_ingest(ErlNifEnv *env, fo_session_res *res, ERL_NIF_TERM msg);

#endif
