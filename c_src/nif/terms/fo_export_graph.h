/* The span graph to Erlang terms. */
#ifndef FO_EXPORT_GRAPH_H
#define FO_EXPORT_GRAPH_H

#include <erl_nif.h>

#include "fo_xproc.h"

/* #{spans => [#{span_id, parent_span_id, pid, started_ns, ...}], stats =>
 * #{...}, clock_offset_ns => N}; times on the tracer clock, and the offset
 * that turns them into Erlang monotonic nanoseconds. */
ERL_NIF_TERM fo_export_graph(ErlNifEnv *env, const fo_xproc *x);

#endif
