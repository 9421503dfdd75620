/* Stack samples into a session: the sampling front end's NIFs. */
#ifndef FO_SAMPLE_H
#define FO_SAMPLE_H

#include <erl_nif.h>

// sample(Session, Pid, Stack, Weight) -> ok | stopped (the session took no more)
//   | idle (a cross-process trace's callee between requests of the trace)
// Stack is process_info(Pid, current_stacktrace)'s list, innermost first:
// {M, F, Arity | Args} or {M, F, Arity | Args, Location} tuples, or the atom
// `same`: the stack the process already has (it has not run since), or
// {same, N} (N in 1..2^32-1): that, counted as N samples, or {slept, N}:
// N ticks its sampler slept through while it waited (fo_wake.h), counted
// as samples on the wait leaf its last wait went to. Weight is
// a non-negative integer below 2^64 added to the stack the sample lands on
// (the sampler passes the reductions since its previous sample).
// sample(Session, Pid, Stack, Weight, How): How is `plain` (as sample/4),
// `waited` (the sampler saw the process waiting when it asked and it ran no
// code until it answered, so its whole current wait belongs to the stack)
// or `leading` (taken just before the process's traced work starts: the
// next sample takes the time since). See fo_session_sample_as.
ERL_NIF_TERM fo_sample_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// sample_sleep(Session, Pid, Sampler) -> ok | full | stopped
//   arm Pid's wake-up to Sampler (its next `in` event has Sampler sent
//   {flame_on_in, Pid}: fo_wake.h); full: no room, the sampler polls instead.
ERL_NIF_TERM fo_sample_sleep_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// sample_signal(Session, Pid) -> ok | stopped
//   the sampler is about to ask Pid, seen waiting, for its stack: the
//   slice that signal schedules it in for runs no code of its own
//   (fo_session_expect_signal; events so far are applied first).
ERL_NIF_TERM fo_sample_signal_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// sample_wake_cancel(Session, Pid) -> ok
ERL_NIF_TERM fo_sample_wake_cancel_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
