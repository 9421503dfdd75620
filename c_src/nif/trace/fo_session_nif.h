/* The NIFs of a session's life, from new/1 to finish/2, and the node-wide
 * counts. Each raises badarg on bad input. */
#ifndef FO_SESSION_NIF_H
#define FO_SESSION_NIF_H

#include <erl_nif.h>

// new(Opts :: map()) -> Session
ERL_NIF_TERM fo_new_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// tracer_state(Session) -> non_neg_integer(): what to pass as the state of
// {tracer, FlameOn.Client.Core.Native, State}: the session's slot key, an
// immediate the callbacks turn into the session without a resource
// lookup. Raises system_limit when every slot is taken.
ERL_NIF_TERM fo_tracer_state_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// ingest(Session, [TraceMsg]) -> ok
ERL_NIF_TERM fo_ingest_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// stats(Session) -> map()
ERL_NIF_TERM fo_stats_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// stop(Session) -> NativeMonotonicTime: the tracer callbacks take no more
// events (ingest/2 is the caller's own doing and still works); the result
// waits for finish/2. Returns when it stopped, in native time units.
ERL_NIF_TERM fo_stop_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// finish(Session, End :: integer() | nil | stop) -> {Tree, Stats} (graph
// sessions: {Tree, Stats, Graph}); Tree as fo_export_tree makes it.
// End: native monotonic time (trace messages), nil (no closing charge) or
// `stop` (when stop/1 ran, on the tracer clock: tracer-module sessions).
// Small sessions finish on the calling scheduler, the rest on a dirty one.
ERL_NIF_TERM fo_finish_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// session_bytes() -> integer(): bytes held by all live sessions' tables.
ERL_NIF_TERM fo_session_bytes_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// live_sessions() -> non_neg_integer(): session resources not yet freed.
ERL_NIF_TERM fo_live_sessions_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// open_sessions() -> non_neg_integer(): sessions whose trace is not over
// (not stopped, finished or dropped): live traces, however late the GC.
ERL_NIF_TERM fo_open_sessions_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
