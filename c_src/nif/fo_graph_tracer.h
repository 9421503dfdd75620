/* Tracer callbacks for graph traces: the tracer state is the atom `graph`
 * and the router finds each event's session. */
#ifndef FO_GRAPH_TRACER_H
#define FO_GRAPH_TRACER_H

#include <erl_nif.h>

ERL_NIF_TERM fo_graph_tracer_enabled(ErlNifEnv *env, ERL_NIF_TERM tag);
ERL_NIF_TERM fo_graph_tracer_trace(ErlNifEnv *env, const ERL_NIF_TERM argv[]);

#endif
