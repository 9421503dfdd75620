/* The NIFs of a native (CPU-sampled) trace's session: where its processes
 * run and what its helper reads of their stacks. */
#ifndef FO_CPU_NIF_H
#define FO_CPU_NIF_H

#include <erl_nif.h>

// cpu_here(Session) -> ok: the calling process runs on the calling thread
// from now (a process that traces itself is running when its flags go on:
// no `in` tells its thread until it is next scheduled in).
ERL_NIF_TERM fo_cpu_here_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// cpu_helper_here() -> ok: the calling process is the helper of the thread
// it runs on (fo_cpu_helpers.h): it is sent {flame_on_context, Session,
// Pid, {M, F, A}} when a traced process stops on this thread in a
// function its stack there may not be known for (fo_cpu_ask.h).
ERL_NIF_TERM fo_cpu_helper_here_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// cpu_helper_gone(Pid) -> ok: Pid helps no more.
ERL_NIF_TERM fo_cpu_helper_gone_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// cpu_context(Session, Pid, {M, F, A}, Current, Stack) -> ok | moved | stale | stopped
//   Session: as the ask named it ({slot, Key} or {label, Label}).
//   Current and Stack: process_info(Pid, [current_function,
//   current_stacktrace]), read because Pid stopped in M:F/A. The answer
//   comes at Pid's next scheduling point: kept as the stack Pid stops in
//   at Current (ok, or moved when that is no longer M:F/A: it ran and
//   stopped elsewhere meanwhile); stale: no stack; stopped: the trace took
//   no more. A current function that is not the stack's innermost frame
//   (a BIF that traps) is added as its innermost frame.
ERL_NIF_TERM fo_cpu_context_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
