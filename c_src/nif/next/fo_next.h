/* The gate of capture_next: the meta tracer of the one function waiting
 * for its next call. The VM asks the meta tracer enabled/3 before it runs
 * the pattern's match spec, so the gate decides which caller the match
 * spec runs for (the one that turns tracing on in it): the first caller
 * claims the gate with one compare-and-swap, every other caller is told
 * `discard` and nothing of the trace touches it. The winner's own events
 * go to the session through the ordinary tracer callbacks; the gate adds
 * the call itself (the entry of the captured function, with its caller),
 * stops the session at its return or exception, in the winner's context,
 * and tells the owner both. */
#ifndef FO_NEXT_H
#define FO_NEXT_H

#include <erl_nif.h>

/* Processes the gate never lets win (the owner and the profiler's own). */
#define FO_NEXT_MAX_EXCLUDED 8u

int fo_next_open(ErlNifEnv *env);

// next_new(Session, Owner, Excluded :: [pid()]) -> Gate
// The meta tracer state is {next, Gate}.
ERL_NIF_TERM fo_next_new_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// next_cancel(Gate) -> cancelled | fired
// cancelled: no call can claim the gate any more. fired: a caller claimed
// it first (its fired message is on the way, or came).
ERL_NIF_TERM fo_next_cancel_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// next_state(Gate) -> armed | cancelled | {fired, Pid} | {done, Pid}
ERL_NIF_TERM fo_next_state_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

/* Whether a tracer state is a gate's ({next, Gate}): a tuple, which no
 * other state of ours is, so the check costs the other callbacks nothing
 * but a tag test. */
int fo_next_is_state(ErlNifEnv *env, ERL_NIF_TERM state);

// enabled(TraceTag, {next, Gate}, Tracee) -> trace | discard
ERL_NIF_TERM fo_next_enabled(ErlNifEnv *env, const ERL_NIF_TERM argv[]);

// trace(TraceTag, {next, Gate}, Tracee, TraceTerm, Opts) -> ok
ERL_NIF_TERM fo_next_trace(ErlNifEnv *env, const ERL_NIF_TERM argv[]);

#endif
