/* The NIFs of graph traces. Each raises badarg on bad input (and on a
 * session that is no graph trace). */
#ifndef FO_GRAPH_NIF_H
#define FO_GRAPH_NIF_H

#include <erl_nif.h>

// graph_start(Session, RootPid) -> ok: registers the graph trace with the
// router (its label and its root process); graph_begin/1 starts the root
// span when tracing really starts.
ERL_NIF_TERM fo_graph_start_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// graph_begin(Session) -> ok: the root span starts now.
ERL_NIF_TERM fo_graph_begin_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// graph_watch_callees(Session, Pid) -> ok: from now on Pid gets
// {flame_on_callee, Callee} each time a callee receives a request of the
// trace (sample traces sample callees instead of call tracing them).
ERL_NIF_TERM fo_graph_watch_callees_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// graph_owner(Session, Pid, FollowMessages) -> ok: Pid gets {flame_on_left,
// P} for each process that leaves the trace (it turns P's trace flags off).
// FollowMessages false: the trace follows GenServer calls only, and its
// processes have no receive events.
ERL_NIF_TERM fo_graph_owner_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
// graph_heap_level(Session, Pid, Words) -> ok: allocation profiles, the
// young heap in use of a process that joined, read as it joined: its
// first collection in the trace counts from there, unless one of its
// collections came first (fo_session_heap_level_unless_known).
ERL_NIF_TERM fo_graph_heap_level_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// graph_alloc_followers(Session) -> [Pid]: allocation profiles, the
// processes that follow the trace now (not its root) and have a known
// heap level: those whose words since their last collection
// graph_heap_tail/3 can count as the trace ends.
ERL_NIF_TERM fo_graph_alloc_followers_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
// graph_heap_tail(Session, Pid, Words) -> ok: Pid's young heap in use now,
// read once the trace's events stopped (fo_session_alloc_tail).
ERL_NIF_TERM fo_graph_heap_tail_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// graph_outsider(Session, Pid) -> ok | error: no message or spawn of the
// trace brings Pid in (a process of ours the trace's messages reach);
// error when FO_GRAPH_OUTSIDERS are noted already.
ERL_NIF_TERM fo_graph_outsider_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// graph_role(Pid) -> root | follower | nil: Pid is the root of a running
// graph trace, or works for one (its trace flags must stay), or neither.
ERL_NIF_TERM fo_graph_role_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
