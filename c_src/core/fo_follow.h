/* A followed (cross-process) trace: the stacks of its followers (an
 * fo_session) and its span graph (an fo_graph), fed together. The graph
 * decides which of a follower's events count and when (a wake-up counts
 * once it is known who ended the wait; a server's stacks stop at its reply
 * and may start again for work it goes on with); this module carries those
 * decisions out on the stacks, and tells the front end which processes
 * joined or left the trace. The front end only decodes and routes. Not
 * thread-safe: callers serialize. */
#ifndef FO_FOLLOW_H
#define FO_FOLLOW_H

#include <stdint.h>

#include "fo_event.h"
#include "fo_graph.h"
#include "fo_session.h"

typedef enum {
    FO_FOLLOW_JOINED = 1, /* pid works for the trace (again): route its events to it */
    FO_FOLLOW_LEFT = 2    /* pid left the trace: its trace flags should go */
} fo_follow_change;

typedef struct {
    fo_session *session;
    fo_graph *graph;
    /* may be NULL; called once per change, in order */
    void (*changed)(void *arg, uint64_t pid, fo_follow_change change);
    void *arg;
} fo_follow;

/* A correlation (seq_trace) event of the trace, decoded. */
typedef enum {
    FO_CORR_REQUEST = 1, /* {'$gen_call', {From, Tag}, _} */
    FO_CORR_REPLY = 2,   /* {Tag, _}: a reply if Tag is a pending call's, else a message */
    FO_CORR_MESSAGE = 3, /* anything else */
    FO_CORR_SPAWN = 4,   /* {spawn_request, ...}: from spawns to; {spawn_reply, ...} is ignored */
    /* a spawn on another node: the request's send (to a node: to 0), and
     * the spawn_reply's receive (from the remote child, to the spawner) */
    FO_CORR_REMOTE_SPAWN = 5,
    FO_CORR_REMOTE_SPAWNED = 6
} fo_corr_kind;

typedef struct {
    fo_corr_kind kind;
    int is_send;   /* the send event, else the receive */
    uint64_t from; /* sender pid key */
    uint64_t to;   /* receiver pid key; 0 for an alias */
    uint64_t tag;  /* requests and replies */
    uint32_t wire; /* across nodes: a hash of the request, message or spawn both nodes compute alike; 0 otherwise */
} fo_corr;

void fo_follow_correlation(const fo_follow *f, const fo_corr *c, int64_t ts);

/* A follower's own event: call, return_to, in, out, gc (an exit goes to
 * fo_follow_exit). Events of processes the trace does not follow only
 * keep the graph's view of them current. */
void fo_follow_event(const fo_follow *f, const fo_event *ev);
void fo_follow_exit(const fo_follow *f, uint64_t pid, int64_t ts, uint64_t reason_key);
/* A late process's own event (the root traced by trace messages, mode
 * :process), after the caller applied it to the session as it is: the
 * graph's view of it is brought up to date (its stacks keep their waits
 * whole; other followers' stacks still follow what the graph decides). */
void fo_follow_late_event(const fo_follow *f, const fo_event *ev, uint64_t reason_key);
/* Its receive event: a message delivered, from sender (0: not known). */
void fo_follow_received(const fo_follow *f, uint64_t pid, int64_t ts, fo_waker_kind kind, uint64_t sender);
void fo_follow_spawned(const fo_follow *f, uint64_t parent, uint64_t child, int64_t ts);

/* Before a stack sample of pid is applied to the session: a scheduled-in
 * still held back is applied first. 1 when pid's samples count now. */
/* A CPU-sampled trace: pid, taking a message of the trace, runs on thread
 * at ts (fo_session_cpu_running), if it works for the trace now. */
void fo_follow_running(const fo_follow *f, uint64_t pid, int64_t ts, uint64_t thread);

int fo_follow_before_sample(const fo_follow *f, uint64_t pid);

/* The trace ends: the graph closes at end_ts and the stacks stop where the
 * graph says (idle followers at the start of their last idle); then, if
 * close_session, every live timeline is charged up to end_ts. */
void fo_follow_close(const fo_follow *f, int64_t end_ts, int close_session);

#endif
