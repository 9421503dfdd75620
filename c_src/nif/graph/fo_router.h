/* The router of cross-process (graph) traces. Every process a graph trace
 * touches has the same tracer, {FlameOn.Client.Core.Native, graph}, and the
 * seq_trace system tracer is the same too: one tracer state for all graph
 * sessions, so concurrent traces reaching the same server never fight
 * over its tracer. The router sends each event to its session: seq_trace
 * events by label, process events by pid. Global to the node, behind one
 * read/write lock. Lock order: a session's lock, then the router's (the
 * tracer callbacks map and unmap followers under their session's lock);
 * the router never takes a session's lock while it holds its own. */
#ifndef FO_ROUTER_H
#define FO_ROUTER_H

#include <erl_nif.h>
#include <stdint.h>

#include "fo_resource.h"

/* Concurrent graph sessions and processes mapped to them, node-wide. */
#define FO_ROUTER_MAX_SESSIONS 1024u
#define FO_ROUTER_MAX_PIDS 65536u

int fo_router_init(void);
void fo_router_destroy(void);

/* Registers res under label with root as its first process (keeps a
 * reference). 0 when the label is taken or the router is full. */
int fo_router_register(fo_session_res *res, uint64_t label, uint64_t root);

/* Forgets res, its label and its processes (drops the reference). */
void fo_router_unregister(fo_session_res *res);

/* The session of label / of pid, with a reference the caller must give
 * back with enif_release_resource; NULL when none. */
fo_session_res *fo_router_by_label(uint64_t label);
fo_session_res *fo_router_by_pid(uint64_t pid);

/* pid works for res from now on (a server takes the session of each
 * request it receives). 0 when the router is full, or does not hold res
 * (never registered, or unregistered already): a pid entry is only made
 * for a registered session, in one critical section with that check, so
 * unregister's cleanup never misses one and no entry outlives the
 * router's reference on its session. */
int fo_router_map_pid(uint64_t pid, fo_session_res *res);

/* pid, if it is the root of a graph session, works for that session
 * again (after it served a request of another trace). */
void fo_router_restore_root(uint64_t pid);

/* pid left res's trace: its events go nowhere unless it is a session's
 * root (then back to that session) or already works for another one. */
void fo_router_unmap_pid(uint64_t pid, const fo_session_res *res);

/* 2 when pid is a registered session's root, 1 when it works for one or
 * one's graph still follows it (its trace flags must stay), 0 otherwise.
 * Takes each session's lock in turn: not for tracer callbacks. */
int fo_router_role(uint64_t pid);

/* Sessions registered now. */
uint32_t fo_router_sessions(void);

#endif
