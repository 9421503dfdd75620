/* The span graph of one logical request trace: which process worked for
 * whom, and how much of each caller's blocked time a callee explains.
 * Inputs are decoded seq_trace correlation events of GenServer.call-style
 * request/reply traffic; pids and tags are opaque uint64 keys chosen by the
 * front end (pid key 0 is reserved: it means "none" in waiting_on_pid).
 * The rules are written out in GRAPH.md beside this file. Every table is
 * bounded by fo_graph_limits; what does not fit is counted in
 * fo_graph_stats, never a crash. Not thread-safe: callers serialize. */
#ifndef FO_GRAPH_H
#define FO_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#ifndef FO_NONE
#define FO_NONE UINT32_MAX
#endif

typedef struct {
    uint32_t max_spans;         /* spans of the trace, the root included */
    uint32_t max_pending_calls; /* requests sent and not yet resumed, at once */
    uint32_t max_processes;     /* distinct pids that ever hold a span */
    uint32_t max_fanout;        /* child spans of one span */
} fo_graph_limits;

#define FO_GRAPH_DEFAULT_MAX_SPANS 10000u
#define FO_GRAPH_DEFAULT_MAX_PENDING_CALLS 4096u
#define FO_GRAPH_DEFAULT_MAX_PROCESSES 1000u
#define FO_GRAPH_DEFAULT_MAX_FANOUT 1000u

/* Hard ceilings on the configuration, so a typo cannot ask for gigabytes. */
#define FO_GRAPH_CEIL_MAX_SPANS 10000000u
#define FO_GRAPH_CEIL_MAX_PENDING_CALLS 1000000u
#define FO_GRAPH_CEIL_MAX_PROCESSES 1000000u
#define FO_GRAPH_CEIL_MAX_FANOUT 10000000u

static inline fo_graph_limits fo_graph_limits_default(void)
{
    fo_graph_limits l = {FO_GRAPH_DEFAULT_MAX_SPANS, FO_GRAPH_DEFAULT_MAX_PENDING_CALLS,
                         FO_GRAPH_DEFAULT_MAX_PROCESSES, FO_GRAPH_DEFAULT_MAX_FANOUT};
    return l;
}

/* 1 when every field is within 1..ceiling. */
int fo_graph_limits_valid(const fo_graph_limits *limits);

typedef enum {
    FO_SPAN_OPEN = 0,          /* still running (only seen before close) */
    FO_SPAN_OK = 1,            /* ended by its reply (or the root's close) */
    FO_SPAN_EXIT = 2,          /* its process exited; reason_key says why */
    FO_SPAN_OPEN_AT_CLOSE = 3  /* the trace closed before it replied */
} fo_span_status;

typedef struct {
    uint64_t spans;                 /* spans created, the root included */
    uint64_t processes;             /* distinct pids that held a span */
    uint64_t calls;                 /* requests recorded as pending */
    uint64_t dropped_spans;         /* requests received whose span was not created */
    uint64_t span_limit_hits;       /* ... because of max_spans */
    uint64_t fanout_hits;           /* ... because of max_fanout */
    uint64_t process_limit_hits;    /* ... because of max_processes */
    uint64_t pending_limit_hits;    /* requests not recorded: max_pending_calls */
    uint64_t orphan_requests;       /* request_sent by a pid without an open span */
    uint64_t unmatched_requests;    /* request_received for a tag not pending */
    uint64_t unmatched_replies;     /* reply_received for a tag not pending */
    uint64_t unmatched_reply_sends; /* reply_sent for a tag not pending */
    uint64_t late_replies;          /* reply_received after close */
    uint64_t delegated_replies;     /* reply_sent by another pid than the callee span's */
    uint64_t unseen_replies;        /* caller resumed while the callee span was open */
    uint64_t duplicate_events;      /* second root or close, request or reply seen twice */
    uint64_t events_after_close;    /* anything but reply_received after close */
    uint64_t clock_skews;           /* an end before its start: clamped to zero length */
    uint64_t alloc_failures;        /* out of memory: treated like the bound it hit */
} fo_graph_stats;

typedef struct {
    uint32_t span_id;
    uint32_t parent_span_id; /* FO_NONE for the root */
    uint64_t pid;
    int64_t started_ns;
    int64_t ended_ns;        /* == started_ns while FO_SPAN_OPEN */
    /* The caller's view of the request that made this span: sent by the
     * caller at request_sent_ns, reply received at resumed_ns (valid only
     * when has_resumed). For the root: started_ns, and not resumed. */
    int64_t request_sent_ns;
    int64_t resumed_ns;
    uint64_t self_ns;        /* (ended - started) - wait_ns, never below 0 */
    uint64_t wait_ns;        /* time blocked in calls made from this span */
    uint64_t attributed_wait_ns;
    uint64_t unattributed_wait_ns;
    uint64_t waiting_on_pid; /* callee of the longest wait; 0 if no call ended */
    uint64_t reason_key;     /* FO_SPAN_EXIT only; 0 = normal */
    uint32_t status;         /* fo_span_status */
    uint32_t calls;          /* calls of this span whose wait was accounted */
    uint32_t child_count;
    uint32_t first_child;    /* FO_NONE when none; children in creation order */
    uint32_t next_sibling;   /* FO_NONE after the last child of the parent */
    uint8_t has_resumed;
} fo_span_info;

typedef struct fo_graph fo_graph;

/* NULL when limits are invalid or memory is short. */
fo_graph *fo_graph_new(const fo_graph_limits *limits, uint64_t trace_id);
void fo_graph_free(fo_graph *g);
uint64_t fo_graph_trace_id(const fo_graph *g);

/* The root process's span (id 0); FO_NONE if a root exists already or the
 * graph is closed. */
uint32_t fo_graph_root(fo_graph *g, uint64_t pid, int64_t ts);

/* Correlation events, in the order the front end sees them. They never
 * fail: what does not fit the state or the bounds is counted. */
void fo_graph_request_sent(fo_graph *g, uint64_t caller, uint64_t callee, uint64_t tag, int64_t ts);
void fo_graph_request_received(fo_graph *g, uint64_t callee, uint64_t caller, uint64_t tag,
                               int64_t ts);
void fo_graph_reply_sent(fo_graph *g, uint64_t sender, uint64_t tag, int64_t ts);
void fo_graph_reply_received(fo_graph *g, uint64_t caller, uint64_t tag, int64_t ts);
void fo_graph_exit(fo_graph *g, uint64_t pid, int64_t ts, uint64_t reason_key);

/* The root finished: settle every pending call and end every open span at
 * end_ts. Later events are only counted. */
void fo_graph_close(fo_graph *g, int64_t end_ts);
int fo_graph_closed(const fo_graph *g);

/* 1 while pid holds an open span of this trace: the stack timeline charges
 * a process's events to the trace only then. */
int fo_graph_active(const fo_graph *g, uint64_t pid);

/* Calls pid has sent and not yet resumed from (0: not blocked in a call),
 * so the timeline can charge its off-CPU time as wait, not SLEEP. When
 * non-zero and callee is not NULL, *callee is the callee of the latest. */
uint32_t fo_graph_waiting_call(const fo_graph *g, uint64_t pid, uint64_t *callee);

/* The span pid is working in now (its newest open span), or FO_NONE. */
uint32_t fo_graph_current_span(const fo_graph *g, uint64_t pid);

const fo_graph_stats *fo_graph_get_stats(const fo_graph *g);

/* Bytes held by the graph's tables. */
size_t fo_graph_memory(const fo_graph *g);

/* --- Reading the result -------------------------------------------------
 * Spans are numbered 0..span_count-1 in creation order; a parent's id is
 * always smaller than its children's. */
uint32_t fo_graph_span_count(const fo_graph *g);
/* 0 for an id out of range (out untouched), 1 and *out filled otherwise. */
int fo_graph_span(const fo_graph *g, uint32_t id, fo_span_info *out);
/* The child count of span id (0 when out of range); up to cap child ids
 * are written to out, in creation order. */
uint32_t fo_graph_children(const fo_graph *g, uint32_t id, uint32_t *out, uint32_t cap);

#endif
