/* The tracer-module callbacks (erl_tracer behaviour): the VM calls these
 * in the traced process's context, so events reach the core with no
 * message, copy or mailbox. */
#ifndef FO_TRACER_H
#define FO_TRACER_H

#include <erl_nif.h>

/* At load: whether this VM may be told to remove a tracer (fo_tracer_gone). */
void fo_tracer_init(void);

/* What enabled/3 answers a process whose session is gone: `remove` (the
 * VM takes the flags off), or `discard` on a VM before erts 13.2 (OTP
 * 25.3), which could then receive-trace that process's next message with
 * no tracer and crash (erlang/otp#6448; seen here under load, 6 runs in
 * 25 of a whole-node trace on OTP 25.2.3). There the flags stay, idle,
 * until whoever set them takes them off (the capture's owner, the sweep).
 * Only the sessions' tracer answers so: with the graph tracer's and the
 * tail entries' answers too, the ASan suite crashed in trace_send, in 2
 * runs of 11 (0 of 8 without), so those still answer `remove`. */
ERL_NIF_TERM fo_tracer_gone(void);

/* The runtime's major version (erts 13: OTP 25), read by fo_tracer_init;
 * 0 when it could not be read. */
unsigned fo_tracer_erts_major(void);

// enabled(TraceTag, TracerState, Tracee) -> trace | discard | remove
ERL_NIF_TERM fo_tracer_enabled(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// trace(TraceTag, TracerState, Tracee, TraceTerm, Opts) -> ok
ERL_NIF_TERM fo_tracer_trace(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
