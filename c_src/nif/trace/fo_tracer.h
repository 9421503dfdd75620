/* The tracer-module callbacks (erl_tracer behaviour): the VM calls these
 * in the traced process's context, so events reach the core with no
 * message, copy or mailbox. */
#ifndef FO_TRACER_H
#define FO_TRACER_H

#include <erl_nif.h>

// enabled(TraceTag, TracerState, Tracee) -> trace | discard | remove
ERL_NIF_TERM fo_tracer_enabled(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// trace(TraceTag, TracerState, Tracee, TraceTerm, Opts) -> ok
ERL_NIF_TERM fo_tracer_trace(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
