/* The span graph of one logical request trace: which process worked for
 * whom, how each span's time splits into on-CPU time and off-CPU wait, and
 * which follower's work ended each wait (wake-up attribution). Inputs are
 * decoded seq_trace correlation events and the followers' own scheduling
 * and receive events; pids and tags are opaque uint64 keys chosen by the
 * front end (pid key 0 is reserved: it means "none"). The rules are written
 * out in GRAPH.md beside this file. Every table is bounded by
 * fo_graph_limits; what does not fit is counted in fo_graph_stats, never a
 * crash. Not thread-safe: callers serialize. */
#ifndef FO_GRAPH_H
#define FO_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#ifndef FO_NONE
#define FO_NONE UINT32_MAX
#endif

typedef struct {
    uint32_t max_spans;         /* spans of the trace, the root included; edges too */
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
    FO_SPAN_OK = 1,            /* ended by its reply, its last idle, or the root's close */
    FO_SPAN_EXIT = 2,          /* its process exited; reason_key says why */
    FO_SPAN_OPEN_AT_CLOSE = 3  /* the trace closed while it was still working */
} fo_span_status;

typedef enum {
    FO_SPAN_ROOT = 0,         /* the traced function's process, the whole trace */
    FO_SPAN_REQUEST = 1,      /* a $gen_call request served, until the reply */
    FO_SPAN_WORK = 2,         /* other work: a message taken from a follower, or a spawn */
    FO_SPAN_CONTINUATION = 3, /* a server's work for the trace after its reply */
    FO_SPAN_REMOTE = 4        /* a call to a process on another node, from its send to its reply */
} fo_span_kind;

/* Pid keys with this bit set are processes on other nodes (named by the
 * front end). They never run here: they get no notes, are nobody's
 * follower to route, and a request to one is a REMOTE span on this node
 * (its process's work is in that node's part of the trace). */
#define FO_GRAPH_REMOTE_BIT (UINT64_C(1) << 63)

/* What ended an off-CPU interval: the first message the process took
 * delivery of after it was scheduled in, as its receive event says. */
typedef enum {
    FO_WAKER_NONE = 0,    /* no message: it was runnable, or took a signal that is no message */
    FO_WAKER_PROCESS = 1, /* a process's message (sender 0: the front end does not know which) */
    FO_WAKER_PORT = 2,    /* a port's message: socket data, a driver's reply */
    FO_WAKER_TIMER = 3    /* a timer: receive ... after, send_after, start_timer */
} fo_waker_kind;

/* Why wait stayed unattributed: indexes of unattributed_by[]. */
enum {
    FO_CAUSE_PROCESS = 0, /* a process outside the trace, or a follower outside its spans */
    FO_CAUSE_PORT = 1,
    FO_CAUSE_TIMER = 2,
    FO_CAUSE_OTHER = 3,   /* no message: runnable (preempted) or a signal; or not known */
    FO_CAUSE_COUNT = 4
};

typedef struct {
    uint64_t spans;                 /* spans created, the root included (dropped ones too) */
    uint64_t processes;             /* distinct pids that held a span */
    uint64_t calls;                 /* requests recorded as pending */
    uint64_t dropped_spans;         /* spans a bound did not let open */
    uint64_t span_limit_hits;       /* ... because of max_spans */
    uint64_t fanout_hits;           /* ... because of max_fanout */
    uint64_t process_limit_hits;    /* ... because of max_processes */
    uint64_t pending_limit_hits;    /* requests not recorded: max_pending_calls */
    uint64_t orphan_requests;       /* request_sent by a pid without an open span */
    uint64_t unmatched_requests;    /* request_received for a tag not pending */
    uint64_t unmatched_replies;     /* reply_received for a tag not pending */
    uint64_t unmatched_reply_sends; /* reply_sent for a tag not pending */
    uint64_t late_replies;          /* reply_received after close, or after its caller span ended */
    uint64_t delegated_replies;     /* reply_sent by another pid than the callee span's */
    uint64_t unseen_replies;        /* caller resumed while the callee span was open */
    uint64_t duplicate_events;      /* second root or close, request or reply seen twice */
    uint64_t events_after_close;    /* any event after close but reply_received */
    uint64_t clock_skews;           /* an end before its start: clamped to zero length */
    uint64_t alloc_failures;        /* out of memory: treated like the bound it hit */
    uint64_t wakes;                 /* off-CPU intervals settled (a follower woke up) */
    uint64_t attributed_wakes;      /* ... of which a follower's span explained some */
    uint64_t joins;                 /* processes that joined by a message or a spawn */
    uint64_t leaves;                /* followers that left: woken by a process outside */
    uint64_t continuations;         /* servers that worked on for the trace after a reply */
    uint64_t dropped_continuations; /* ... that never sent the trace anything: not shown */
    uint64_t edges;                 /* wait edges recorded (merged ones count once) */
    uint64_t edge_limit_hits;       /* attributed waits past max_spans edges: no edge */
    uint64_t note_overflows;        /* notes the front end did not drain in time */
    uint64_t remote_calls;          /* requests sent to another node (REMOTE spans) */
    uint64_t remote_requests;       /* requests taken from another node's process */
    uint64_t remote_sends;          /* messages and spawns to another node (REMOTE spans) */
    uint64_t remote_joins;          /* work spans opened by a message or spawn from another node */
    uint64_t runnable_wakes;        /* off-CPU intervals no message ended: runnable (preempted) */
    uint64_t collections;           /* garbage collections of followers inside their spans */
} fo_graph_stats;

typedef struct {
    uint32_t span_id;
    uint32_t parent_span_id; /* FO_NONE for the root */
    uint64_t pid;
    uint64_t opener_pid;     /* who made it: the caller, sender or spawner; 0 for root/continuation */
    int64_t started_ns;
    int64_t ended_ns;        /* == started_ns while FO_SPAN_OPEN */
    /* Request spans: the caller's view of the request, sent at
     * request_sent_ns, reply received at resumed_ns (valid only when
     * has_resumed). Others: started_ns, and not resumed. */
    int64_t request_sent_ns;
    int64_t resumed_ns;
    /* The span's time in four classes: self + gc + runnable + wait =
     * ended - started exactly (each cut to what the ones before leave). */
    uint64_t self_ns;        /* on-CPU, running its code */
    uint64_t wait_ns;        /* off-CPU time inside the span, waiting for a message */
    uint64_t attributed_wait_ns;
    uint64_t unattributed_wait_ns;
    uint64_t unattributed_by[FO_CAUSE_COUNT];
    uint64_t waiting_on_pid; /* the process that ended the longest wait; 0 if none */
    uint64_t reason_key;     /* FO_SPAN_EXIT only; 0 = normal */
    uint32_t status;         /* fo_span_status */
    uint32_t kind;           /* fo_span_kind */
    uint32_t calls;          /* requests sent from this span */
    uint32_t wakes;          /* off-CPU intervals inside it */
    uint32_t child_count;
    uint32_t first_child;    /* FO_NONE when none; children in creation order */
    uint32_t next_sibling;   /* FO_NONE after the last child of the parent */
    uint32_t wire;           /* a call across nodes: the tag's hash both nodes see (0: none) */
    uint8_t has_resumed;
    uint64_t gc_ns;          /* garbage collecting (fo_graph_gc) */
    uint64_t runnable_ns;    /* off-CPU, but no message ended it: runnable (preempted) */
} fo_span_info;

/* One attributed wait: the waiter span was off-CPU and the waker span's
 * work ended it. Consecutive waits of one waiter on one waker merge. */
typedef struct {
    uint32_t waiter_span_id;
    uint32_t waker_span_id;
    int64_t started_ns;      /* the explained part: from the first ... */
    int64_t ended_ns;        /* ... to the last of the merged waits */
    uint64_t attributed_ns;  /* explained time, at most ended - started */
    uint32_t wakes;          /* waits merged into it */
} fo_edge_info;

/* What the front end must do after an event (fo_graph_next_note). */
typedef enum {
    FO_NOTE_JOINED = 1,  /* pid follows the trace now: route its events here */
    FO_NOTE_LEFT = 2,    /* pid left the trace: turn its trace flags off */
    FO_NOTE_PAUSE = 3,   /* pid has no open span from ts: close its stack timeline */
    FO_NOTE_RESUME = 4,  /* pid works for the trace again: its timeline restarts with a wait from ts */
    FO_NOTE_APPLY_IN = 5, /* pid's deferred scheduled-in at ts now counts in its stacks */
    FO_NOTE_ATTRIBUTE = 6, /* ns of pid's last wait were explained: move them off its stacks */
    FO_NOTE_RUNNABLE = 7   /* ns of pid's last wait were runnable, not waiting: move them to RUNNABLE */
} fo_note_kind;

typedef struct {
    uint32_t kind; /* fo_note_kind */
    uint64_t pid;
    int64_t ts;
    uint64_t ns;   /* FO_NOTE_ATTRIBUTE */
} fo_graph_note;

typedef struct fo_graph fo_graph;

/* NULL when limits are invalid or memory is short. */
fo_graph *fo_graph_new(const fo_graph_limits *limits, uint64_t trace_id);
void fo_graph_free(fo_graph *g);
uint64_t fo_graph_trace_id(const fo_graph *g);

/* What the trace follows. 1 (the default): any message of the trace (and
 * a spawn) brings its receiver in, and followers' receive events reach the
 * graph, so a wake-up without one is a wake without a message. 0: only
 * GenServer calls bring processes in, and there are no receive events: a
 * wake is settled by the follower's next event or by a tokened message it
 * takes, whichever comes first. */
void fo_graph_follow_messages(fo_graph *g, int on);

/* A process of the profiler's own that the trace's messages reach but
 * that never works for it (capture_next's waiting process: the captured
 * process tells it of the call with the trace's token). No message or
 * spawn brings it in. 0 when FO_GRAPH_OUTSIDERS are noted already. */
#define FO_GRAPH_OUTSIDERS 4
int fo_graph_outsider(fo_graph *g, uint64_t pid);

/* The root process's span (id 0); FO_NONE if a root exists already or the
 * graph is closed. */
uint32_t fo_graph_root(fo_graph *g, uint64_t pid, int64_t ts);

/* --- Correlation (seq_trace) events, in the order the front end sees them.
 * They never fail: what does not fit the state or the bounds is counted. */
void fo_graph_request_sent(fo_graph *g, uint64_t caller, uint64_t callee, uint64_t tag, int64_t ts);
void fo_graph_request_received(fo_graph *g, uint64_t callee, uint64_t caller, uint64_t tag,
                               int64_t ts);
/* Requests across nodes: wire is a hash of the call's tag that both
 * nodes compute alike (their parts are joined by it). A request sent to a
 * remote callee opens a REMOTE span of it, child of the caller's span,
 * until the reply comes back; a request taken from a remote caller opens a
 * REQUEST span without a parent (opener: the caller). Local pids go the
 * usual way. */
void fo_graph_remote_request_sent(fo_graph *g, uint64_t caller, uint64_t callee, uint64_t tag, uint32_t wire,
                                  int64_t ts);
void fo_graph_remote_request_received(fo_graph *g, uint64_t callee, uint64_t caller, uint64_t tag,
                                      uint32_t wire, int64_t ts);
/* Plain messages and spawns across nodes (follow_messages): wire is a
 * hash of the message (its seq_trace serial and sender) or of the spawn
 * request (its reference) that both nodes compute alike. A follower's
 * message (spawn) to a remote process with no span here opens a REMOTE span
 * of it, child of the sender's span, until the remote process answers the
 * sender; a message (spawn) from a remote process makes its receiver (the
 * child) a WORK span without a parent (opener: the remote process), unless
 * it is working for the trace already. Local pids go the usual way. */
void fo_graph_remote_message_sent(fo_graph *g, uint64_t from, uint64_t to, uint32_t wire, int64_t ts);
void fo_graph_remote_message_received(fo_graph *g, uint64_t to, uint64_t from, uint32_t wire, int64_t ts);
void fo_graph_remote_spawned(fo_graph *g, uint64_t parent, uint64_t child, uint32_t wire, int64_t ts);
/* The spawner's side of a spawn on another node: the request goes to a
 * node (no pid yet), so its send is remembered (wire: the request's
 * reference) until the child is known, by its spawn_reply or by the DOWN
 * of the monitor the request set up (:erpc's result); then a REMOTE span
 * of the child opens where the request was sent. remote_down ends the
 * REMOTE span waiter's message or spawn opened for child (wire 0: an
 * 'EXIT' signal, no request to find); 1 when it did: the child is then the
 * waker of waiter's wait, else 0. */
void fo_graph_remote_spawn_sent(fo_graph *g, uint64_t from, uint32_t wire, int64_t ts);
/* A message from a process of another node woke waiter, and name is a
 * {Name, Node} of that node: if waiter's message to name opened a REMOTE
 * span still open, the process answered as its pid (not known here), so
 * the span ends at ts and 1 says name is the waker; else 0. */
int fo_graph_remote_name_answered(fo_graph *g, uint64_t waiter, uint64_t name, int64_t ts);
void fo_graph_remote_spawn_replied(fo_graph *g, uint64_t spawner, uint64_t child, uint32_t wire, int64_t ts);
int fo_graph_remote_down(fo_graph *g, uint64_t waiter, uint64_t child, uint32_t wire, int64_t ts);
/* 1 when tag was a pending call's; 0 (and counted) when it was not.
 * fo_follow asks fo_graph_call_pending first: a {Tag, Value} that answers
 * no call of the trace ({Ref, Result} of a Task) is a plain message. */
int fo_graph_reply_sent(fo_graph *g, uint64_t sender, uint64_t tag, int64_t ts);
int fo_graph_reply_received(fo_graph *g, uint64_t caller, uint64_t tag, int64_t ts);
/* Any other message of the trace (tokened), sent from -> to. to may be 0
 * when the send went to an alias. */
/* 1 when tag is a call of the trace not yet forgotten. */
int fo_graph_call_pending(const fo_graph *g, uint64_t tag);
void fo_graph_message_sent(fo_graph *g, uint64_t from, uint64_t to, int64_t ts);
void fo_graph_message_received(fo_graph *g, uint64_t to, uint64_t from, int64_t ts);
/* from sent to a message that brings to in when it takes it: a spawn
 * request (message_sent does the same for other messages). Kept in a small
 * ring, so that to joins even if from's span is over by then (it exited,
 * or answered). */
void fo_graph_invite(fo_graph *g, uint64_t from, uint64_t to, int64_t ts);

/* --- A follower's own events. */
void fo_graph_spawned(fo_graph *g, uint64_t parent, uint64_t child, int64_t ts);
/* Scheduled out; 1 when this starts a new off-CPU interval (not the
 * continuation of one after a wake-up without a message: then the run
 * between counts as on-CPU, and the held-back scheduled-in is noted
 * first, FO_NOTE_APPLY_IN, unless the wait may still turn out not to be
 * the trace's). */
int fo_graph_out(fo_graph *g, uint64_t pid, int64_t ts);
/* Scheduled in: 1 when the wake-up waits for its receive event (or the
 * next event) to say who ended the wait (then FO_NOTE_APPLY_IN comes
 * later); 0 when it ends no wait the graph knows of. */
int fo_graph_in(fo_graph *g, uint64_t pid, int64_t ts);
/* Its receive event: a message delivered to it, from sender (0: unknown). */
void fo_graph_received(fo_graph *g, uint64_t pid, int64_t ts, fo_waker_kind kind, uint64_t sender);
/* Any other event of pid (call, return, sample) at ts. */
void fo_graph_ran(fo_graph *g, uint64_t pid, int64_t ts);
/* A follower's garbage collection starts (start 1) or ends (0) at ts:
 * the time between goes to the gc of its spans open meanwhile. It says
 * nothing of what ended a wait (the VM may collect a process it just
 * scheduled in, before it takes the message that woke it), but the
 * process runs: a scheduled-in held back counts now (FO_NOTE_APPLY_IN),
 * unless the wait may still turn out not to be the trace's. 1 when pid's
 * stacks take the event (it holds a span, and its `in` counts); 0 when
 * neither they nor its spans do. */
int fo_graph_gc(fo_graph *g, uint64_t pid, int64_t ts, int start);
/* pid's own events reach the graph later than its correlation events (a
 * root traced by trace messages, mode :process): those do not settle its
 * waits, they are kept for them. */
void fo_graph_set_late(fo_graph *g, uint64_t pid);
/* The deferred scheduled-in of pid, for a front end that must apply it
 * before something else (a stack sample): 1 and *ts when there is one not
 * yet applied; it is then not noted again. */
int fo_graph_take_in(fo_graph *g, uint64_t pid, int64_t *ts);
void fo_graph_exit(fo_graph *g, uint64_t pid, int64_t ts, uint64_t reason_key);

/* The root finished: settle every wait, pending call and span at end_ts.
 * Later events are only counted. */
void fo_graph_close(fo_graph *g, int64_t end_ts);
int fo_graph_closed(const fo_graph *g);

/* The next note for the front end (oldest first): 1 and *out, or 0. Drain
 * them after every event; the queue holds FO_GRAPH_NOTES. */
#define FO_GRAPH_NOTES 64u
int fo_graph_next_note(fo_graph *g, fo_graph_note *out);

/* 1 while pid holds an open span of this trace: the stack timeline charges
 * a process's events to the trace only then. */
int fo_graph_active(const fo_graph *g, uint64_t pid);
/* 1 while pid follows the trace (it joined and did not leave), spans or not. */
int fo_graph_following(const fo_graph *g, uint64_t pid);

/* Calls pid has sent and not yet resumed from (0: not blocked in a call).
 * When non-zero and callee is not NULL, *callee is the callee of the latest. */
uint32_t fo_graph_waiting_call(const fo_graph *g, uint64_t pid, uint64_t *callee);

/* The span pid is working in now (its newest open span), or FO_NONE. */
uint32_t fo_graph_current_span(const fo_graph *g, uint64_t pid);

const fo_graph_stats *fo_graph_get_stats(const fo_graph *g);

/* Bytes held by the graph's tables. */
size_t fo_graph_memory(const fo_graph *g);

/* --- Reading the result -------------------------------------------------
 * Spans are numbered 0..span_count-1 in creation order; a parent's id is
 * always smaller than its children's. After close, continuations that were
 * dropped are gone and the ids are renumbered without gaps. */
uint32_t fo_graph_span_count(const fo_graph *g);
/* 0 for an id out of range (out untouched), 1 and *out filled otherwise. */
int fo_graph_span(const fo_graph *g, uint32_t id, fo_span_info *out);
/* The child count of span id (0 when out of range); up to cap child ids
 * are written to out, in creation order. */
uint32_t fo_graph_children(const fo_graph *g, uint32_t id, uint32_t *out, uint32_t cap);

/* Processes that joined the trace (the root aside) and neither left nor
 * exited: their count, and up to cap of their pids in out. */
uint32_t fo_graph_followers(const fo_graph *g, uint64_t *out, uint32_t cap);

uint32_t fo_graph_edge_count(const fo_graph *g);
int fo_graph_edge(const fo_graph *g, uint32_t id, fo_edge_info *out);

#endif
