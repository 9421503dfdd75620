/* The span graph of one trace. The rules are written out in GRAPH.md
 * beside this file; c_src/test/test_graph.c holds the code to them. */
#include "fo_graph.h"

#include <bsd/stdlib.h>
#include <stdlib.h>
#include <string.h>

#include "fo_hash.h"

#define INITIAL_SLOTS 16u
#define INITIAL_ENTRIES 16u

/* ------------------------------------------------------------------------
 * key -> entry index. Linear probing with backward-shift deletion: tags of
 * finished calls come and go all the time, and tombstones would slowly
 * fill the table. */

typedef struct {
    uint64_t key;
    uint32_t val; /* entry index + 1; 0 = empty */
} gslot;

typedef struct {
    gslot *slots;
    uint32_t mask;
    uint32_t count;
} gindex;

static int index_init(gindex *x)
{
    x->slots = calloc(INITIAL_SLOTS, sizeof(gslot));
    x->mask = INITIAL_SLOTS - 1;
    x->count = 0;
    return x->slots != NULL;
}

static uint32_t home(uint64_t key, uint32_t mask)
{
    return (uint32_t)fo_hash_mix(key) & mask;
}

static uint32_t index_slot(const gindex *x, uint64_t key)
{
    uint32_t i = home(key, x->mask);
    while (x->slots[i].val != 0 && x->slots[i].key != key)
        i = (i + 1) & x->mask;
    return i;
}

static uint32_t index_find(const gindex *x, uint64_t key)
{
    const gslot *s = &x->slots[index_slot(x, key)];
    return s->val == 0 ? FO_NONE : s->val - 1;
}

static int index_grow(gindex *x)
{
    uint32_t size = (x->mask + 1) * 2;
    gslot *slots = calloc(size, sizeof(gslot));
    if (slots == NULL)
        return 0;
    for (uint32_t i = 0; i <= x->mask; i++) {
        if (x->slots[i].val == 0)
            continue;
        uint32_t j = home(x->slots[i].key, size - 1);
        while (slots[j].val != 0)
            j = (j + 1) & (size - 1);
        slots[j] = x->slots[i];
    }
    free(x->slots);
    x->slots = slots;
    x->mask = size - 1;
    return 1;
}

/* key must be absent. Half full at most, so probes stay short; the entry
 * arrays are bounded, so the table is too. */
static int index_put(gindex *x, uint64_t key, uint32_t val)
{
    if ((x->count + 1) * 2 > x->mask + 1 && !index_grow(x))
        return 0;
    gslot *s = &x->slots[index_slot(x, key)];
    s->key = key;
    s->val = val + 1;
    x->count++;
    return 1;
}

/* Is k cyclically within (i, j]? Then an entry at j whose home is k may
 * not move back to i. */
static int between(uint32_t i, uint32_t k, uint32_t j)
{
    return i <= j ? (i < k && k <= j) : (i < k || k <= j);
}

static void index_remove(gindex *x, uint64_t key)
{
    uint32_t i = index_slot(x, key);
    if (x->slots[i].val == 0)
        return;
    x->count--;
    for (;;) {
        x->slots[i].val = 0;
        uint32_t j = i;
        for (;;) {
            j = (j + 1) & x->mask;
            if (x->slots[j].val == 0)
                return;
            if (!between(i, home(x->slots[j].key, x->mask), j))
                break;
        }
        x->slots[i] = x->slots[j];
        i = j;
    }
}

/* One more entry for an array that never outgrows limit: the new pointer,
 * or NULL (the old array stays valid). *cap changes only on success. */
static void *grow_array(void *items, uint32_t *cap, uint32_t limit, size_t size)
{
    uint32_t n = *cap == 0 ? INITIAL_ENTRIES : (*cap > limit / 2 ? limit : *cap * 2);
    if (n > limit)
        n = limit;
    if (n <= *cap)
        return NULL;
    void *p = reallocarray(items, n, size);
    if (p != NULL)
        *cap = n;
    return p;
}

/* ------------------------------------------------------------------------
 * The graph */

#define LOG_SIZE 4u

/* EXITED: gone, but still the trace's for the waits its messages ended. */
enum { FOLLOW_NONE = 0, FOLLOW_ON = 1, FOLLOW_LEFT = 2, FOLLOW_EXITED = 3 };
/* Where a follower is between its scheduling events. WOKEN: scheduled in
 * after an off-CPU interval that is not settled yet (its receive event, or
 * the next event, says who ended it). */
enum { RUN_UNKNOWN = 0, RUN_ON = 1, RUN_OFF = 2, RUN_WOKEN = 3 };

typedef struct {
    uint64_t pid;
    uint64_t opener;
    uint64_t reason;
    uint64_t waiting_on;
    uint64_t longest_wait;
    uint64_t wait;
    uint64_t attributed;
    uint64_t unattributed[FO_CAUSE_COUNT];
    uint64_t gc;       /* collecting, inside the span */
    uint64_t runnable; /* off-CPU with no message to wait for: preempted */
    int64_t started;
    int64_t ended;
    int64_t request_sent;
    int64_t resumed;
    uint32_t parent;
    uint32_t first_child;
    uint32_t last_child;
    uint32_t next_sibling;
    uint32_t child_count;
    /* Neighbours on its process's stack of open spans. A doubly linked
     * stack, because a deferred reply may end a span below the top. */
    uint32_t below;
    uint32_t above;
    uint32_t proc;
    uint32_t open_calls; /* pending calls made from this span */
    uint32_t calls;
    uint32_t wakes;
    uint32_t last_edge; /* newest edge with this span as the waiter */
    uint32_t wire;      /* a call across nodes: its tag's hash on both nodes */
    uint8_t status;
    uint8_t kind;
    uint8_t has_resumed;
    uint8_t has_wait;
    /* A continuation not yet shown: it becomes a span when the process
     * sends the trace a message, and is dropped if it never does. */
    uint8_t provisional;
    uint8_t dropped;
    uint8_t sent; /* its process sent the trace a message inside it */
    uint8_t by_message; /* REMOTE: opened by a message or spawn (an answer ends it), not a call */
} gspan;

typedef struct {
    int64_t ts;
    uint64_t from;
} glog;

typedef struct {
    uint64_t pid;
    uint64_t last_callee;
    /* the off-CPU interval in progress (run OFF or WOKEN) */
    int64_t episode_start;
    int64_t piece_start;
    int64_t woken_at;
    int64_t awake_since; /* dormant: when it last began to run uncharged */
    int64_t sent_at;     /* its last message of the trace, from sent_span */
    int64_t gc_start;    /* collecting: since when */
    uint64_t off_ns;
    uint32_t top;       /* newest open span, FO_NONE when none */
    uint32_t last_span; /* newest span shown (not a dropped continuation) */
    uint32_t last_ended; /* newest span that ended */
    uint32_t sent_span;  /* the span its last message of the trace came from */
    uint32_t calls_out; /* pending calls made by this pid */
    uint8_t follow;
    uint8_t run;
    uint8_t is_root;
    uint8_t in_taken;  /* the deferred scheduled-in was handed out already */
    uint8_t pending;   /* WOKEN: what its receive event said so far (fo_waker_kind) */
    uint8_t has_pending;
    uint8_t late; /* its own events arrive after its correlation events */
    uint8_t collecting; /* a garbage collection started in a span of it */
    uint8_t runnable;   /* the interval being settled ended with no message */
    /* Tokened messages it took, for wakes settled later than seen (the
     * root's events in mode :process arrive after its seq_trace events). */
    uint8_t log_head;
    uint8_t log_count;
    glog log[LOG_SIZE];
} gproc;

typedef struct {
    uint64_t tag;
    uint64_t callee;
    int64_t sent;
    uint32_t caller_span; /* FO_NONE once that span ended */
    uint32_t callee_span; /* FO_NONE until received, or when not followed */
    uint32_t next_free;
    uint8_t live;
    uint8_t received;
    uint8_t replied;
    uint8_t settled; /* the caller stopped waiting for it (resumed or its span ended) */
} gcall;

/* A message of the trace on its way: from's span brings to in. A spawn
 * on another node (to 0, wire its request's) waits here for its child's
 * pid, with the time it was sent. */
typedef struct {
    uint64_t from;
    uint64_t to;
    uint32_t span;
    uint32_t wire;
    int64_t ts;
} ginvite;

#define INVITES 64u

typedef struct {
    uint32_t waiter;
    uint32_t waker;
    int64_t started;
    int64_t ended;
    uint64_t ns;
    uint32_t wakes;
} gedge;

struct fo_graph {
    fo_graph_limits limits;
    uint64_t trace_id;
    gspan *spans;
    uint32_t span_count;
    uint32_t span_cap;
    gproc *procs;
    uint32_t proc_count;
    uint32_t proc_cap;
    gindex proc_index;
    gcall *calls;
    uint32_t call_cap;
    uint32_t call_used; /* entries ever handed out: live or on the free list */
    uint32_t call_live;
    uint32_t free_call;
    gindex call_index;
    gedge *edges;
    uint32_t edge_count;
    uint32_t edge_cap;
    ginvite invites[INVITES];
    uint32_t invite_next;
    fo_graph_note notes[FO_GRAPH_NOTES];
    uint32_t note_head;
    uint32_t note_count;
    uint8_t has_root;
    uint8_t closed;
    uint8_t follow_messages;
    uint8_t outsider_count;
    uint64_t outsiders[FO_GRAPH_OUTSIDERS];
    fo_graph_stats stats;
};

static int within(uint32_t value, uint32_t ceiling)
{
    return value >= 1 && value <= ceiling;
}

int fo_graph_limits_valid(const fo_graph_limits *limits)
{
    return limits != NULL && within(limits->max_spans, FO_GRAPH_CEIL_MAX_SPANS) &&
           within(limits->max_pending_calls, FO_GRAPH_CEIL_MAX_PENDING_CALLS) &&
           within(limits->max_processes, FO_GRAPH_CEIL_MAX_PROCESSES) &&
           within(limits->max_fanout, FO_GRAPH_CEIL_MAX_FANOUT);
}

fo_graph *fo_graph_new(const fo_graph_limits *limits, uint64_t trace_id)
{
    if (!fo_graph_limits_valid(limits))
        return NULL;
    fo_graph *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    g->limits = *limits;
    g->trace_id = trace_id;
    g->free_call = FO_NONE;
    g->follow_messages = 1;
    int ok = index_init(&g->proc_index);
    ok = index_init(&g->call_index) && ok;
    if (!ok) {
        fo_graph_free(g);
        return NULL;
    }
    return g;
}

void fo_graph_free(fo_graph *g)
{
    if (g == NULL)
        return;
    free(g->spans);
    free(g->procs);
    free(g->calls);
    free(g->edges);
    free(g->proc_index.slots);
    free(g->call_index.slots);
    free(g);
}

uint64_t fo_graph_trace_id(const fo_graph *g)
{
    return g->trace_id;
}

void fo_graph_follow_messages(fo_graph *g, int on)
{
    g->follow_messages = on != 0;
}

int fo_graph_outsider(fo_graph *g, uint64_t pid)
{
    if (g->outsider_count >= FO_GRAPH_OUTSIDERS)
        return 0;
    g->outsiders[g->outsider_count++] = pid;
    return 1;
}

static int outsider(const fo_graph *g, uint64_t pid)
{
    for (uint8_t i = 0; i < g->outsider_count; i++)
        if (g->outsiders[i] == pid)
            return 1;
    return 0;
}

/* b - a for b >= a, as unsigned: far-apart timestamps must not overflow
 * int64. An end before its start is a skew and lasts 0. */
static uint64_t elapsed(fo_graph *g, int64_t a, int64_t b)
{
    if (b < a) {
        g->stats.clock_skews++;
        return 0;
    }
    return (uint64_t)b - (uint64_t)a;
}

/* Waits add up over many wakes; with clocks at the ends of int64 the sum
 * could wrap, and then attributed could exceed wait. */
static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1)
{
    int64_t lo = a0 > b0 ? a0 : b0;
    int64_t hi = a1 < b1 ? a1 : b1;
    return hi > lo ? (uint64_t)hi - (uint64_t)lo : 0;
}

/* --- notes for the front end ------------------------------------------- */

static int remote(uint64_t pid)
{
    return (pid & FO_GRAPH_REMOTE_BIT) != 0;
}

static void note(fo_graph *g, uint32_t kind, uint64_t pid, int64_t ts, uint64_t ns)
{
    if (remote(pid))
        return; /* nothing of it runs here */
    if (g->note_count == FO_GRAPH_NOTES) {
        g->stats.note_overflows++;
        return;
    }
    fo_graph_note *n = &g->notes[(g->note_head + g->note_count) % FO_GRAPH_NOTES];
    n->kind = kind;
    n->pid = pid;
    n->ts = ts;
    n->ns = ns;
    g->note_count++;
}

int fo_graph_next_note(fo_graph *g, fo_graph_note *out)
{
    if (g->note_count == 0)
        return 0;
    *out = g->notes[g->note_head];
    g->note_head = (g->note_head + 1) % FO_GRAPH_NOTES;
    g->note_count--;
    return 1;
}

/* --- processes ---------------------------------------------------------- */

static gproc *find_proc(const fo_graph *g, uint64_t pid)
{
    uint32_t p = index_find(&g->proc_index, pid);
    return p == FO_NONE ? NULL : &g->procs[p];
}

static gproc *follower(const fo_graph *g, uint64_t pid)
{
    gproc *p = pid == 0 ? NULL : find_proc(g, pid);
    return p != NULL && p->follow == FOLLOW_ON ? p : NULL;
}

/* A follower, or one that exited: its spans explain waits its last
 * messages ended. */
static gproc *member(const fo_graph *g, uint64_t pid)
{
    gproc *p = pid == 0 ? NULL : find_proc(g, pid);
    return p != NULL && (p->follow == FOLLOW_ON || p->follow == FOLLOW_EXITED) ? p : NULL;
}

/* The process of pid, made on first need; FO_NONE past max_processes. */
static uint32_t proc_for(fo_graph *g, uint64_t pid)
{
    uint32_t p = index_find(&g->proc_index, pid);
    if (p != FO_NONE)
        return p;
    if (g->proc_count >= g->limits.max_processes) {
        g->stats.process_limit_hits++;
        return FO_NONE;
    }
    if (g->proc_count == g->proc_cap) {
        gproc *procs = grow_array(g->procs, &g->proc_cap, g->limits.max_processes, sizeof(gproc));
        if (procs == NULL) {
            g->stats.alloc_failures++;
            return FO_NONE;
        }
        g->procs = procs;
    }
    if (!index_put(&g->proc_index, pid, g->proc_count)) {
        g->stats.alloc_failures++;
        return FO_NONE;
    }
    p = g->proc_count++;
    memset(&g->procs[p], 0, sizeof(gproc));
    g->procs[p].pid = pid;
    g->procs[p].top = FO_NONE;
    g->procs[p].last_span = FO_NONE;
    g->procs[p].last_ended = FO_NONE;
    g->procs[p].sent_span = FO_NONE;
    g->stats.processes++;
    return p;
}

static uint32_t top_span(const fo_graph *g, uint64_t pid)
{
    const gproc *p = find_proc(g, pid);
    return p == NULL ? FO_NONE : p->top;
}

/* Its newest open span is real work of the trace (not a continuation that
 * has not shown itself yet): what it sends or spawns joins the trace. */
static int can_pass_on(const fo_graph *g, const gproc *p)
{
    return p != NULL && p->follow == FOLLOW_ON && p->top != FO_NONE && !g->spans[p->top].provisional;
}

static int serving_request(const fo_graph *g, const gproc *p)
{
    for (uint32_t s = p->top; s != FO_NONE; s = g->spans[s].below) {
        if (g->spans[s].kind == FO_SPAN_REQUEST || g->spans[s].kind == FO_SPAN_ROOT)
            return 1;
    }
    return 0;
}

/* Whether a process outside the trace waking p would make it leave (see
 * settle): it is dormant, or its open spans are work that already sent
 * the trace something. */
static int may_leave(const fo_graph *g, const gproc *p)
{
    return !p->is_root && (p->top == FO_NONE || (!serving_request(g, p) && g->spans[p->top].sent));
}

/* p, scheduled in and its wake not settled, runs at once (it collects, or
 * goes out again with no message): the stacks take its held-back `in` now
 * (the run is its own, whatever ends the wait), unless the wait may still
 * turn out not to be the trace's (a leave stops its stacks where the wait
 * began). 1 when the `in` counts by now. */
static int in_counts_now(fo_graph *g, gproc *p)
{
    if (p->run != RUN_WOKEN || p->in_taken || p->late)
        return 1;
    if (may_leave(g, p))
        return 0;
    p->in_taken = 1;
    note(g, FO_NOTE_APPLY_IN, p->pid, p->woken_at, 0);
    return 1;
}

static void log_message(gproc *p, uint64_t from, int64_t ts)
{
    uint32_t at = (p->log_head + p->log_count) % LOG_SIZE;
    if (p->log_count == LOG_SIZE)
        p->log_head = (uint8_t)((p->log_head + 1) % LOG_SIZE);
    else
        p->log_count++;
    p->log[at].ts = ts;
    p->log[at].from = from;
}

/* The sender of the first tokened message p took within [from, to];
 * older entries are gone for good (their wakes were settled). 0: none. */
static uint64_t log_take(gproc *p, int64_t from, int64_t to)
{
    while (p->log_count > 0) {
        glog *e = &p->log[p->log_head];
        if (e->ts > to)
            return 0;
        p->log_head = (uint8_t)((p->log_head + 1) % LOG_SIZE);
        p->log_count--;
        if (e->ts >= from)
            return e->from;
    }
    return 0;
}

/* --- spans -------------------------------------------------------------- */

static void push_open(fo_graph *g, uint32_t s)
{
    gproc *p = &g->procs[g->spans[s].proc];
    g->spans[s].below = p->top;
    g->spans[s].above = FO_NONE;
    if (p->top != FO_NONE)
        g->spans[p->top].above = s;
    p->top = s;
}

static void unlink_open(fo_graph *g, uint32_t s)
{
    gspan *sp = &g->spans[s];
    if (sp->above != FO_NONE)
        g->spans[sp->above].below = sp->below;
    else
        g->procs[sp->proc].top = sp->below;
    if (sp->below != FO_NONE)
        g->spans[sp->below].above = sp->above;
    sp->below = sp->above = FO_NONE;
}

static void add_child(fo_graph *g, uint32_t parent, uint32_t child)
{
    gspan *ps = &g->spans[parent];
    if (ps->last_child == FO_NONE)
        ps->first_child = child;
    else
        g->spans[ps->last_child].next_sibling = child;
    ps->last_child = child;
    ps->child_count++;
}

/* A dropped continuation leaves its parent's children (it never has any
 * of its own: nothing joins through a provisional span). */
static void remove_child(fo_graph *g, uint32_t parent, uint32_t child)
{
    gspan *ps = &g->spans[parent];
    uint32_t prev = FO_NONE;
    for (uint32_t c = ps->first_child; c != FO_NONE; prev = c, c = g->spans[c].next_sibling) {
        if (c != child)
            continue;
        if (prev == FO_NONE)
            ps->first_child = g->spans[c].next_sibling;
        else
            g->spans[prev].next_sibling = g->spans[c].next_sibling;
        if (ps->last_child == c)
            ps->last_child = prev;
        ps->child_count--;
        g->spans[c].next_sibling = FO_NONE;
        return;
    }
}

/* A new open span of pid; FO_NONE when a bound or memory says no. The
 * bounds are checked cheapest first and only the first one hit counts. */
static uint32_t open_span(fo_graph *g, uint32_t parent, uint64_t pid, int64_t ts, int64_t sent, uint8_t kind,
                          uint64_t opener)
{
    uint32_t p = FO_NONE;
    if (parent != FO_NONE && g->spans[parent].child_count >= g->limits.max_fanout)
        g->stats.fanout_hits++;
    else if (g->span_count >= g->limits.max_spans)
        g->stats.span_limit_hits++;
    else
        p = proc_for(g, pid);
    if (p != FO_NONE && g->span_count == g->span_cap) {
        gspan *spans = grow_array(g->spans, &g->span_cap, g->limits.max_spans, sizeof(gspan));
        if (spans == NULL) {
            g->stats.alloc_failures++;
            p = FO_NONE;
        } else {
            g->spans = spans;
        }
    }
    if (p == FO_NONE) {
        g->stats.dropped_spans++;
        return FO_NONE;
    }
    uint32_t s = g->span_count++;
    gspan *sp = &g->spans[s];
    memset(sp, 0, sizeof(*sp));
    sp->pid = pid;
    sp->opener = opener;
    sp->started = ts;
    sp->ended = ts;
    sp->request_sent = sent;
    sp->parent = parent;
    sp->first_child = sp->last_child = sp->next_sibling = FO_NONE;
    sp->last_edge = FO_NONE;
    sp->proc = p;
    sp->status = FO_SPAN_OPEN;
    sp->kind = kind;
    sp->provisional = kind == FO_SPAN_CONTINUATION;
    push_open(g, s);
    if (parent != FO_NONE)
        add_child(g, parent, s);
    gproc *pr = &g->procs[p];
    pr->follow = FOLLOW_ON;
    if (!sp->provisional)
        pr->last_span = s;
    g->stats.spans++;
    if (kind != FO_SPAN_ROOT)
        note(g, FO_NOTE_JOINED, pid, ts, 0);
    return s;
}

/* p sent a message of the trace: its current span did (some of) its part. */
static void mark_sent(fo_graph *g, gproc *p, int64_t ts)
{
    if (p == NULL || p->top == FO_NONE)
        return;
    g->spans[p->top].sent = 1;
    p->sent_span = p->top;
    p->sent_at = ts;
}

/* p sent a follower a message: a continuation is real. */
static void show(fo_graph *g, gproc *p, int64_t ts)
{
    uint32_t s = p->top;
    if (s == FO_NONE)
        return;
    mark_sent(g, p, ts);
    if (!g->spans[s].provisional)
        return;
    g->spans[s].provisional = 0;
    p->last_span = s;
    g->stats.continuations++;
}

static void settle_calls_of(fo_graph *g, uint32_t s);
static void end_span(fo_graph *g, uint32_t s, int64_t ts, uint8_t status, uint64_t reason);

/* p takes a new job of the trace: a continuation that told the trace
 * nothing was not the trace's work after all. */
static void drop_provisional(fo_graph *g, gproc *p, int64_t ts)
{
    if (p != NULL && p->top != FO_NONE && g->spans[p->top].provisional)
        end_span(g, p->top, ts, FO_SPAN_OK, 0);
}

static void end_span(fo_graph *g, uint32_t s, int64_t ts, uint8_t status, uint64_t reason)
{
    gspan *sp = &g->spans[s];
    if (sp->status != FO_SPAN_OPEN)
        return;
    if (ts < sp->started) {
        g->stats.clock_skews++;
        ts = sp->started;
    }
    if (sp->open_calls > 0)
        settle_calls_of(g, s);
    gproc *p = &g->procs[sp->proc];
    if (p->collecting)
        sp->gc = add_sat(sp->gc, overlap(p->gc_start, ts, sp->started, ts));
    sp->ended = ts;
    sp->status = status;
    sp->reason = reason;
    unlink_open(g, s);
    if (p->top == FO_NONE)
        p->collecting = 0; /* the rest of it is not the trace's (nor in its stacks) */
    if (sp->provisional) {
        sp->dropped = 1;
        g->stats.dropped_continuations++;
        if (sp->parent != FO_NONE)
            remove_child(g, sp->parent, s);
    } else {
        p->last_ended = s;
    }
    /* Its other work is not the trace's: the stacks stop here. An exit
     * closes them itself. */
    if (p->top == FO_NONE && !p->is_root && status != FO_SPAN_EXIT && !g->closed) {
        p->awake_since = ts;
        note(g, FO_NOTE_PAUSE, sp->pid, ts, 0);
    }
}

/* The work spans of p end at ts (its last idle began then): it has done
 * what it was asked. Spans serving a request stay. */
static void end_work(fo_graph *g, gproc *p, int64_t ts, uint8_t status)
{
    for (uint32_t s = p->top; s != FO_NONE;) {
        uint32_t below = g->spans[s].below;
        if (g->spans[s].kind == FO_SPAN_WORK || g->spans[s].kind == FO_SPAN_CONTINUATION)
            end_span(g, s, ts, status, 0);
        s = below;
    }
}

/* --- edges -------------------------------------------------------------- */

static void add_edge(fo_graph *g, uint32_t waiter, uint32_t waker, int64_t from, int64_t to, uint64_t ns)
{
    gspan *w = &g->spans[waiter];
    if (w->last_edge != FO_NONE && g->edges[w->last_edge].waker == waker) {
        gedge *e = &g->edges[w->last_edge];
        if (to > e->ended)
            e->ended = to;
        e->ns = add_sat(e->ns, ns);
        e->wakes++;
        return;
    }
    if (g->edge_count >= g->limits.max_spans) {
        g->stats.edge_limit_hits++;
        return;
    }
    if (g->edge_count == g->edge_cap) {
        gedge *edges = grow_array(g->edges, &g->edge_cap, g->limits.max_spans, sizeof(gedge));
        if (edges == NULL) {
            g->stats.alloc_failures++;
            return;
        }
        g->edges = edges;
    }
    uint32_t e = g->edge_count++;
    g->edges[e].waiter = waiter;
    g->edges[e].waker = waker;
    g->edges[e].started = from;
    g->edges[e].ended = to;
    g->edges[e].ns = ns;
    g->edges[e].wakes = 1;
    w->last_edge = e;
    g->stats.edges++;
}

/* --- wake-ups ----------------------------------------------------------- */

/* The span of q whose work ended p's wait [from, to]: the one q just
 * finished (a reply sent inside the wait), else the one q is working in,
 * else its last one (which then explains nothing, being over). */
static uint32_t waker_span(const fo_graph *g, const gproc *q, int64_t from, int64_t to)
{
    /* the span its last message of the trace came from, if before the wake */
    if (q->sent_span != FO_NONE && q->sent_at <= to && !g->spans[q->sent_span].provisional)
        return q->sent_span;
    if (q->last_ended != FO_NONE) {
        const gspan *e = &g->spans[q->last_ended];
        if (e->ended >= from && e->ended <= to)
            return q->last_ended;
    }
    if (q->top != FO_NONE && !g->spans[q->top].provisional)
        return q->top;
    return q->last_ended;
}

static uint32_t cause_of(fo_waker_kind kind)
{
    switch (kind) {
    case FO_WAKER_PROCESS:
        return FO_CAUSE_PROCESS;
    case FO_WAKER_PORT:
        return FO_CAUSE_PORT;
    case FO_WAKER_TIMER:
        return FO_CAUSE_TIMER;
    default:
        return FO_CAUSE_OTHER;
    }
}

/* p's off-CPU interval [episode_start, end] is over: kind/sender ended it.
 * woke: it ended by a scheduled-in (at end) the stacks have not seen yet. */
static void settle(fo_graph *g, gproc *p, int64_t end, fo_waker_kind kind, uint64_t sender, int woke)
{
    int64_t start = p->episode_start;
    uint64_t off = p->off_ns;
    /* runnable: off-CPU, but it had no message to wait for */
    uint64_t runnable = p->runnable ? off : 0;
    if (p->runnable)
        off = 0;
    p->runnable = 0;
    p->run = RUN_ON;
    p->has_pending = 0;
    g->stats.wakes++;
    gproc *q = kind == FO_WAKER_PROCESS ? member(g, sender) : NULL;
    if (q == p)
        q = NULL;
    int foreign = kind == FO_WAKER_PROCESS && sender != 0 && sender != p->pid && q == NULL;
    if (foreign && !p->is_root) {
        if (may_leave(g, p)) {
            /* A process outside the trace woke it, its part done: the
             * part is over, and the idle before is not the trace's. */
            end_work(g, p, start, FO_SPAN_OK);
            p->follow = FOLLOW_LEFT;
            g->stats.leaves++;
            note(g, FO_NOTE_LEFT, p->pid, end, 0);
            return;
        }
        /* Still busy with the trace's work: a follower waits for the
         * trace's processes, ports and timers, so it was runnable
         * (preempted) and the message came meanwhile. */
        runnable = off;
        off = 0;
    }
    if (p->top == FO_NONE) {
        /* Dormant after a reply: a port or timer message means the
         * process goes on with I/O or a timer it started for the trace. */
        if (p->is_root || (kind != FO_WAKER_PORT && kind != FO_WAKER_TIMER)) {
            p->awake_since = end;
            return;
        }
        uint32_t s = open_span(g, p->last_span, p->pid, start, start, FO_SPAN_CONTINUATION, 0);
        if (s == FO_NONE)
            return;
        note(g, FO_NOTE_RESUME, p->pid, start, 0);
    }
    if (woke && !p->in_taken && !p->late)
        note(g, FO_NOTE_APPLY_IN, p->pid, end, 0);
    if (runnable > 0) {
        for (uint32_t s = p->top; s != FO_NONE; s = g->spans[s].below)
            g->spans[s].runnable = add_sat(g->spans[s].runnable, runnable);
        g->stats.runnable_wakes++;
        /* after the scheduled-in: the stacks hold the whole wait by then */
        note(g, FO_NOTE_RUNNABLE, p->pid, end, runnable);
    }
    uint32_t r = q != NULL ? waker_span(g, q, start, end) : FO_NONE;
    uint64_t a = 0;
    int64_t r_end = end;
    if (r != FO_NONE) {
        r_end = g->spans[r].status == FO_SPAN_OPEN ? end : g->spans[r].ended;
        a = overlap(start, end, g->spans[r].started, r_end);
        if (a > off)
            a = off;
    }
    uint32_t cause = cause_of(kind);
    for (uint32_t s = off == 0 ? FO_NONE : p->top; s != FO_NONE; s = g->spans[s].below) {
        gspan *sp = &g->spans[s];
        sp->wait = add_sat(sp->wait, off);
        sp->attributed = add_sat(sp->attributed, a);
        sp->unattributed[cause] = add_sat(sp->unattributed[cause], off - a);
        sp->wakes++;
        if (!sp->has_wait || off > sp->longest_wait) {
            sp->has_wait = 1;
            sp->longest_wait = off;
            sp->waiting_on = kind == FO_WAKER_PROCESS ? sender : 0;
        }
        if (a > 0) {
            int64_t from = start > g->spans[r].started ? start : g->spans[r].started;
            add_edge(g, s, r, from, end < r_end ? end : r_end, a);
        }
    }
    if (a > 0) {
        g->stats.attributed_wakes++;
        /* A late process's stacks keep their waits whole: its timeline is
         * the trace messages', settled after the fact. */
        if (!p->late)
            note(g, FO_NOTE_ATTRIBUTE, p->pid, end, a);
    }
}

/* A woken process whose receive event said nothing usable settles at now:
 * the tokened message it took in the meantime names the sender, if any.
 * One that ran on with no message at all was runnable (preempted), not
 * waiting: that is its own time, when receive events would have said
 * otherwise. */
static void settle_pending(fo_graph *g, gproc *p, int64_t now, int woke)
{
    fo_waker_kind kind = p->has_pending ? (fo_waker_kind)p->pending : FO_WAKER_NONE;
    uint64_t sender = 0;
    if (kind == FO_WAKER_PROCESS || (kind == FO_WAKER_NONE && !g->follow_messages)) {
        sender = log_take(p, p->woken_at, now);
        if (sender != 0)
            kind = FO_WAKER_PROCESS;
    }
    if (woke && kind == FO_WAKER_NONE && !p->has_pending && g->follow_messages)
        p->runnable = 1;
    settle(g, p, woke ? p->woken_at : now, kind, sender, woke);
}

/* p runs at ts (it sent or took a message): a wake still open is over.
 * Mode :sample has no call events, so a preempted process's in/out pairs
 * look like a wait going on; what it does for the trace says otherwise. */
static void touch(fo_graph *g, gproc *p, int64_t ts)
{
    if (p == NULL || p->follow != FOLLOW_ON || p->late)
        return;
    if (p->run == RUN_WOKEN) {
        settle_pending(g, p, ts, 1);
    } else if (p->run == RUN_OFF) {
        p->off_ns = add_sat(p->off_ns, elapsed(g, p->piece_start, ts));
        settle_pending(g, p, ts, 0);
    }
}

/* A dormant follower sends a message of the trace (it still holds the
 * trace's token): it goes on working for the trace, since it last began to
 * run. Its stacks restart with its next event. */
static void resume_for_send(fo_graph *g, gproc *q)
{
    if (q == NULL || q->follow != FOLLOW_ON || q->top != FO_NONE || q->is_root || q->late)
        return;
    uint32_t s = open_span(g, q->last_span, q->pid, q->awake_since, q->awake_since, FO_SPAN_CONTINUATION, 0);
    if (s != FO_NONE)
        show(g, q, q->awake_since);
}

/* q (a follower) sent p (a follower) a message at ts: the trace goes on
 * through q, and a work span made by p's message ends with q's answer. */
static void message_to_trace(fo_graph *g, gproc *q, gproc *p, int64_t ts)
{
    if (q == p || q->top == FO_NONE)
        return;
    show(g, q, ts);
    gspan *sp = &g->spans[q->top];
    if (sp->kind == FO_SPAN_WORK && sp->opener == p->pid)
        end_span(g, q->top, ts, FO_SPAN_OK, 0);
}

/* --- pending calls ------------------------------------------------------ */

static uint32_t call_alloc(fo_graph *g)
{
    if (g->free_call != FO_NONE) {
        uint32_t c = g->free_call;
        g->free_call = g->calls[c].next_free;
        return c;
    }
    if (g->call_used == g->call_cap) {
        gcall *calls =
            grow_array(g->calls, &g->call_cap, g->limits.max_pending_calls, sizeof(gcall));
        if (calls == NULL)
            return FO_NONE;
        g->calls = calls;
    }
    return g->call_used++;
}

/* A live call of tag (no caller span, no callee span yet); FO_NONE, and
 * counted, when a bound or memory says no. */
static uint32_t new_call(fo_graph *g, uint64_t tag)
{
    if (g->call_live >= g->limits.max_pending_calls) {
        g->stats.pending_limit_hits++;
        return FO_NONE;
    }
    uint32_t c = call_alloc(g);
    if (c == FO_NONE || !index_put(&g->call_index, tag, c)) {
        if (c != FO_NONE) {
            g->calls[c].live = 0; /* a fresh entry is uninitialized */
            g->calls[c].next_free = g->free_call;
            g->free_call = c;
        }
        g->stats.alloc_failures++;
        return FO_NONE;
    }
    gcall *call = &g->calls[c];
    memset(call, 0, sizeof(*call));
    call->tag = tag;
    call->caller_span = FO_NONE;
    call->callee_span = FO_NONE;
    call->live = 1;
    g->call_live++;
    return c;
}

static void call_release(fo_graph *g, uint32_t c)
{
    index_remove(&g->call_index, g->calls[c].tag);
    g->calls[c].live = 0;
    g->calls[c].next_free = g->free_call;
    g->free_call = c;
    g->call_live--;
}

/* The caller stops waiting for call c (it resumed, or its span ended). */
static void settle_call(fo_graph *g, uint32_t c)
{
    gcall *call = &g->calls[c];
    gspan *cs = &g->spans[call->caller_span];
    cs->open_calls--;
    g->procs[cs->proc].calls_out--;
    call->settled = 1;
}

/* A span's calls still pending end with it. Rare (a delegated reply or an
 * exit while blocked), hence the scan. A call already replied to has
 * nothing left to say and goes; the others stay so that their reply still
 * ends the callee span. */
static void settle_calls_of(fo_graph *g, uint32_t s)
{
    for (uint32_t c = 0; c < g->call_used && g->spans[s].open_calls > 0; c++) {
        gcall *call = &g->calls[c];
        if (!call->live || call->settled || call->caller_span != s)
            continue;
        settle_call(g, c);
        if (call->replied)
            call_release(g, c);
    }
}

/* --- events ------------------------------------------------------------- */

/* Only reply_received has its own counter after close (late_replies). */
static int refuse_after_close(fo_graph *g)
{
    if (g->closed)
        g->stats.events_after_close++;
    return g->closed;
}

uint32_t fo_graph_root(fo_graph *g, uint64_t pid, int64_t ts)
{
    if (refuse_after_close(g))
        return FO_NONE;
    if (g->has_root) {
        g->stats.duplicate_events++;
        return FO_NONE;
    }
    uint32_t s = open_span(g, FO_NONE, pid, ts, ts, FO_SPAN_ROOT, 0);
    g->has_root = s != FO_NONE;
    if (s != FO_NONE) {
        gproc *p = &g->procs[g->spans[s].proc];
        p->is_root = 1;
        p->run = RUN_ON; /* it is starting the trace */
    }
    return s;
}

static void request_sent(fo_graph *g, uint64_t caller, uint64_t callee, uint64_t tag, uint32_t wire, int64_t ts)
{
    if (refuse_after_close(g))
        return;
    gproc *q = follower(g, caller);
    touch(g, q, ts);
    if (g->follow_messages)
        resume_for_send(g, q);
    uint32_t s = top_span(g, caller);
    if (s == FO_NONE) {
        /* a stale label, or a process whose span was not created */
        g->stats.orphan_requests++;
        return;
    }
    if (index_find(&g->call_index, tag) != FO_NONE) {
        g->stats.duplicate_events++;
        return;
    }
    uint32_t c = new_call(g, tag);
    if (c == FO_NONE)
        return;
    gspan *sp = &g->spans[s];
    show(g, &g->procs[sp->proc], ts);
    if (ts < sp->started) {
        g->stats.clock_skews++;
        ts = sp->started;
    }
    gcall *call = &g->calls[c];
    call->callee = callee;
    call->sent = ts;
    call->caller_span = s;
    sp->open_calls++;
    sp->calls++;
    gproc *p = &g->procs[sp->proc];
    p->calls_out++;
    p->last_callee = callee;
    g->stats.calls++;
    if (remote(callee)) {
        /* its work is on the other node: here it is the wait for it */
        call->received = 1;
        call->callee_span = open_span(g, s, callee, ts, ts, FO_SPAN_REMOTE, caller);
        if (call->callee_span != FO_NONE)
            g->spans[call->callee_span].wire = wire;
        g->stats.remote_calls++;
    }
}

void fo_graph_request_sent(fo_graph *g, uint64_t caller, uint64_t callee, uint64_t tag, int64_t ts)
{
    request_sent(g, caller, callee, tag, 0, ts);
}

void fo_graph_remote_request_sent(fo_graph *g, uint64_t caller, uint64_t callee, uint64_t tag, uint32_t wire,
                                  int64_t ts)
{
    request_sent(g, caller, callee, tag, wire, ts);
}

/* A request from a process on another node: a call of its own here
 * (settled from the start: its caller resumes over there), whose span has
 * no parent on this node. */
static void remote_request_received(fo_graph *g, uint64_t callee, uint64_t caller, uint64_t tag, uint32_t wire,
                                    int64_t ts)
{
    uint32_t c = new_call(g, tag);
    if (c == FO_NONE)
        return;
    gcall *call = &g->calls[c];
    call->callee = callee;
    call->sent = ts;
    call->received = 1;
    call->settled = 1;
    g->stats.remote_requests++;
    drop_provisional(g, find_proc(g, callee), ts);
    uint32_t s = open_span(g, FO_NONE, callee, ts, ts, FO_SPAN_REQUEST, caller);
    call->callee_span = s;
    if (s != FO_NONE)
        g->spans[s].wire = wire;
}

/* A follower that took a tokened message: a wake nothing else settled
 * (no receive events) is settled by it; a mode :process root's wake
 * (settled later, from its trace messages) finds it in the log. */
static void took(fo_graph *g, uint64_t to, uint64_t from, int64_t ts)
{
    gproc *p = follower(g, to);
    if (p == NULL)
        return;
    if (p->run == RUN_WOKEN && !g->follow_messages) {
        settle(g, p, p->woken_at, FO_WAKER_PROCESS, from, 1);
        return;
    }
    log_message(p, from, ts);
    /* it runs: what the graph thought it was doing may be stale (its
     * events went to another trace meanwhile) */
    touch(g, p, ts);
}

static void request_received(fo_graph *g, uint64_t callee, uint64_t caller, uint64_t tag, uint32_t wire,
                             int64_t ts)
{
    /* The tag alone identifies the call; the caller in the request is
     * the one request_sent recorded. */
    if (refuse_after_close(g))
        return;
    uint32_t c = index_find(&g->call_index, tag);
    if (c == FO_NONE && remote(caller)) {
        remote_request_received(g, callee, caller, tag, wire, ts);
        return;
    }
    if (c == FO_NONE) {
        g->stats.unmatched_requests++;
        return;
    }
    if (g->calls[c].received || g->calls[c].replied) {
        g->stats.duplicate_events++;
        return;
    }
    g->calls[c].received = 1;
    uint32_t parent = g->calls[c].caller_span;
    uint64_t caller_pid = g->spans[parent].pid;
    took(g, callee, caller_pid, ts);
    drop_provisional(g, find_proc(g, callee), ts);
    /* the receiver, not the send's destination: that may have been a name */
    g->calls[c].callee = callee;
    uint32_t s = open_span(g, parent, callee, ts, g->calls[c].sent, FO_SPAN_REQUEST, caller_pid);
    g->calls[c].callee_span = s;
}

void fo_graph_request_received(fo_graph *g, uint64_t callee, uint64_t caller, uint64_t tag, int64_t ts)
{
    request_received(g, callee, caller, tag, 0, ts);
}

void fo_graph_remote_request_received(fo_graph *g, uint64_t callee, uint64_t caller, uint64_t tag,
                                      uint32_t wire, int64_t ts)
{
    request_received(g, callee, caller, tag, wire, ts);
}

int fo_graph_reply_sent(fo_graph *g, uint64_t sender, uint64_t tag, int64_t ts)
{
    if (refuse_after_close(g))
        return 1;
    uint32_t c = index_find(&g->call_index, tag);
    if (c == FO_NONE) {
        g->stats.unmatched_reply_sends++;
        return 0;
    }
    gcall *call = &g->calls[c];
    if (call->replied) {
        g->stats.duplicate_events++;
        return 1;
    }
    call->replied = 1;
    if (call->received && sender != call->callee)
        g->stats.delegated_replies++;
    gproc *q = follower(g, sender);
    touch(g, q, ts);
    if (q != NULL)
        show(g, q, ts);
    if (q != NULL && call->callee_span != FO_NONE && g->spans[call->callee_span].proc == (uint32_t)(q - g->procs)) {
        q->sent_span = call->callee_span; /* the reply comes from the span it ends */
        q->sent_at = ts;
    }
    if (call->callee_span != FO_NONE)
        end_span(g, call->callee_span, ts, FO_SPAN_OK, 0);
    if (call->settled)
        call_release(g, c);
    return 1;
}


int fo_graph_call_pending(const fo_graph *g, uint64_t tag)
{
    return index_find(&g->call_index, tag) != FO_NONE;
}

int fo_graph_reply_received(fo_graph *g, uint64_t caller, uint64_t tag, int64_t ts)
{
    if (g->closed) {
        g->stats.late_replies++;
        return 1;
    }
    uint32_t c = index_find(&g->call_index, tag);
    if (c == FO_NONE) {
        g->stats.unmatched_replies++;
        return 0;
    }
    gcall *call = &g->calls[c];
    took(g, caller, call->callee, ts);
    uint32_t callee = call->callee_span;
    if (callee != FO_NONE && g->spans[callee].status == FO_SPAN_OPEN) {
        /* The reply was sent without a token we saw (or on another node,
         * the end of a REMOTE span); it was sent by now. */
        if (g->spans[callee].kind != FO_SPAN_REMOTE)
            g->stats.unseen_replies++;
        end_span(g, callee, ts, FO_SPAN_OK, 0);
    }
    if (callee != FO_NONE) {
        g->spans[callee].resumed = ts;
        g->spans[callee].has_resumed = 1;
    }
    if (call->settled)
        g->stats.late_replies++; /* its caller span ended before it */
    else
        settle_call(g, c);
    call_release(g, c);
    return 1;
}

static void invite(fo_graph *g, const gproc *q, uint64_t to)
{
    if (to == 0 || !can_pass_on(g, q) || top_span(g, to) != FO_NONE || outsider(g, to))
        return;
    ginvite *i = &g->invites[g->invite_next];
    g->invite_next = (g->invite_next + 1) % INVITES;
    i->from = q->pid;
    i->to = to;
    i->span = q->top;
    i->wire = 0;
    i->ts = 0;
}

void fo_graph_invite(fo_graph *g, uint64_t from, uint64_t to, int64_t ts)
{
    (void)ts;
    if (!refuse_after_close(g) && g->follow_messages)
        invite(g, follower(g, from), to);
}

/* The span that brings to in with from's message: from's current one if
 * it can, else the one that sent it on its way (newest first). */
static uint32_t inviter(fo_graph *g, const gproc *q, uint64_t from, uint64_t to)
{
    if (can_pass_on(g, q))
        return q->top;
    for (uint32_t k = 1; k <= INVITES; k++) {
        ginvite *i = &g->invites[(g->invite_next + INVITES - k) % INVITES];
        if (i->to == to && i->from == from && i->span < g->span_count && !g->spans[i->span].dropped) {
            i->to = 0; /* used */
            return i->span;
        }
    }
    return FO_NONE;
}

void fo_graph_message_sent(fo_graph *g, uint64_t from, uint64_t to, int64_t ts)
{
    if (refuse_after_close(g))
        return;
    gproc *q = follower(g, from);
    gproc *p = follower(g, to);
    touch(g, q, ts);
    if (g->follow_messages)
        resume_for_send(g, q);
    mark_sent(g, q, ts);
    if (q != NULL && p != NULL)
        message_to_trace(g, q, p, ts);
    else if (q != NULL && g->follow_messages)
        invite(g, q, to);
}

/* to works for the trace from ts, brought in by from's span parent (a
 * continuation that told the trace nothing gives way); FO_NONE parent:
 * from is on another node. The new span, or FO_NONE. */
static uint32_t join(fo_graph *g, uint32_t parent, uint64_t from, uint64_t to, int64_t ts)
{
    if (outsider(g, to))
        return FO_NONE;
    gproc *p = find_proc(g, to);
    drop_provisional(g, p, ts);
    if (p != NULL && p->top != FO_NONE)
        return FO_NONE;
    if (p != NULL && p->follow != FOLLOW_ON)
        p->run = RUN_UNKNOWN; /* its run state went stale while it was away */
    uint32_t s = open_span(g, parent, to, ts, ts, FO_SPAN_WORK, from);
    if (s != FO_NONE)
        g->stats.joins++;
    return s;
}

void fo_graph_message_received(fo_graph *g, uint64_t to, uint64_t from, int64_t ts)
{
    if (refuse_after_close(g))
        return;
    gproc *q = follower(g, from);
    took(g, to, from, ts);
    gproc *p = follower(g, to);
    if (q != NULL && p != NULL && !g->follow_messages)
        message_to_trace(g, q, p, ts);
    /* the message makes the receiver work for the trace, unless it is
     * already working for it (following calls only: never) */
    uint32_t parent = g->follow_messages ? inviter(g, member(g, from), from, to) : FO_NONE;
    if (parent == FO_NONE)
        return;
    join(g, parent, from, to, ts);
}

void fo_graph_spawned(fo_graph *g, uint64_t parent, uint64_t child, int64_t ts)
{
    if (refuse_after_close(g) || !g->follow_messages)
        return;
    uint32_t span = inviter(g, member(g, parent), parent, child);
    if (span != FO_NONE)
        join(g, span, parent, child, ts);
}

/* --- messages and spawns across nodes ---------------------------------- */

/* pid (remote) answered opener: the REMOTE span opener's message or spawn
 * opened for it ends at ts (the remote side of the work is over). 1 when
 * there was one. */
static int remote_answered(fo_graph *g, uint64_t pid, uint64_t opener, int64_t ts)
{
    const gproc *r = find_proc(g, pid);
    if (r == NULL || r->top == FO_NONE || g->spans[r->top].kind != FO_SPAN_REMOTE || !g->spans[r->top].by_message ||
        g->spans[r->top].opener != opener)
        return 0;
    end_span(g, r->top, ts, FO_SPAN_OK, 0);
    return 1;
}

int fo_graph_remote_name_answered(fo_graph *g, uint64_t waiter, uint64_t name, int64_t ts)
{
    return !refuse_after_close(g) && remote(name) && remote_answered(g, name, waiter, ts);
}

void fo_graph_remote_message_sent(fo_graph *g, uint64_t from, uint64_t to, uint32_t wire, int64_t ts)
{
    if (!remote(to)) {
        fo_graph_message_sent(g, from, to, ts);
        return;
    }
    if (refuse_after_close(g))
        return;
    gproc *q = follower(g, from);
    touch(g, q, ts);
    if (g->follow_messages)
        resume_for_send(g, q);
    mark_sent(g, q, ts);
    if (q == NULL || q->top == FO_NONE)
        return;
    gspan *sp = &g->spans[q->top];
    if (sp->kind == FO_SPAN_WORK && sp->opener == to) {
        /* the answer to the remote process that brought it in */
        show(g, q, ts);
        end_span(g, q->top, ts, FO_SPAN_OK, 0);
        return;
    }
    if (!g->follow_messages || !can_pass_on(g, q) || top_span(g, to) != FO_NONE)
        return;
    /* its work is on the other node: here it is the wait for it */
    uint32_t s = open_span(g, q->top, to, ts, ts, FO_SPAN_REMOTE, from);
    if (s == FO_NONE)
        return;
    g->spans[s].wire = wire;
    g->spans[s].by_message = 1;
    g->stats.remote_sends++;
}

/* from (remote) brings to in: a WORK span without a parent here. */
static void remote_join(fo_graph *g, uint64_t to, uint64_t from, uint32_t wire, int64_t ts)
{
    uint32_t s = join(g, FO_NONE, from, to, ts);
    if (s == FO_NONE)
        return;
    g->spans[s].wire = wire;
    g->stats.remote_joins++;
}

void fo_graph_remote_message_received(fo_graph *g, uint64_t to, uint64_t from, uint32_t wire, int64_t ts)
{
    if (!remote(from)) {
        fo_graph_message_received(g, to, from, ts);
        return;
    }
    if (refuse_after_close(g))
        return;
    remote_answered(g, from, to, ts);
    took(g, to, from, ts);
    if (g->follow_messages)
        remote_join(g, to, from, wire, ts);
}

void fo_graph_remote_spawn_sent(fo_graph *g, uint64_t from, uint32_t wire, int64_t ts)
{
    if (refuse_after_close(g) || !g->follow_messages || wire == 0)
        return;
    gproc *q = follower(g, from);
    touch(g, q, ts);
    resume_for_send(g, q);
    mark_sent(g, q, ts);
    if (!can_pass_on(g, q))
        return;
    ginvite *i = &g->invites[g->invite_next];
    g->invite_next = (g->invite_next + 1) % INVITES;
    i->from = q->pid;
    i->to = 0;
    i->span = q->top;
    i->wire = wire;
    i->ts = ts;
}

/* The REMOTE span of spawner's spawn (wire) on another node, now that its
 * child is known: it began at the request's send. FO_NONE when the spawn
 * was not the trace's (or is gone from the ring). */
static uint32_t remote_spawn_span(fo_graph *g, uint64_t spawner, uint64_t child, uint32_t wire)
{
    if (wire == 0 || !remote(child) || top_span(g, child) != FO_NONE)
        return FO_NONE;
    for (uint32_t k = 1; k <= INVITES; k++) {
        ginvite *i = &g->invites[(g->invite_next + INVITES - k) % INVITES];
        if (i->wire != wire || i->from != spawner || i->span >= g->span_count || g->spans[i->span].dropped)
            continue;
        i->wire = 0; /* used */
        uint32_t s = open_span(g, i->span, child, i->ts, i->ts, FO_SPAN_REMOTE, spawner);
        if (s == FO_NONE)
            return FO_NONE;
        g->spans[s].wire = wire;
        g->spans[s].by_message = 1;
        g->stats.remote_sends++;
        return s;
    }
    return FO_NONE;
}

void fo_graph_remote_spawn_replied(fo_graph *g, uint64_t spawner, uint64_t child, uint32_t wire, int64_t ts)
{
    if (refuse_after_close(g))
        return;
    /* The wait for the reply was the wait for the other node to start the
     * child (the REMOTE span begins at the request): it settles on it. On
     * one node a spawn_reply is the spawn's own protocol and ignored. */
    if (remote_spawn_span(g, spawner, child, wire) == FO_NONE)
        return;
    /* the reply is what woke it, receive event or not (a reply signal
     * turned message may have none) */
    gproc *p = follower(g, spawner);
    if (p != NULL && p->run == RUN_WOKEN && !p->late)
        settle(g, p, p->woken_at, FO_WAKER_PROCESS, child, 1);
    else
        took(g, spawner, child, ts);
}

int fo_graph_remote_down(fo_graph *g, uint64_t waiter, uint64_t child, uint32_t wire, int64_t ts)
{
    if (refuse_after_close(g) || !remote(child))
        return 0;
    if (top_span(g, child) == FO_NONE)
        remote_spawn_span(g, waiter, child, wire);
    return remote_answered(g, child, waiter, ts);
}

void fo_graph_remote_spawned(fo_graph *g, uint64_t parent, uint64_t child, uint32_t wire, int64_t ts)
{
    if (!remote(parent)) {
        fo_graph_spawned(g, parent, child, ts);
        return;
    }
    if (!refuse_after_close(g) && g->follow_messages)
        remote_join(g, child, parent, wire, ts);
}

int fo_graph_out(fo_graph *g, uint64_t pid, int64_t ts)
{
    gproc *p = g->closed ? NULL : follower(g, pid);
    if (p == NULL)
        return 0;
    switch (p->run) {
    case RUN_OFF:
        return 0; /* already out */
    case RUN_WOKEN:
        if (!p->has_pending) {
            /* in and out again with no message (a signal, a sample, a
             * BIF that yields, a dirty collection): the same wait goes
             * on, and the run between was on a CPU */
            in_counts_now(g, p);
            p->run = RUN_OFF;
            p->piece_start = ts;
            return 0;
        }
        settle_pending(g, p, ts, 1);
        break;
    default:
        break;
    }
    p->run = RUN_OFF;
    p->episode_start = p->piece_start = ts;
    p->off_ns = 0;
    p->has_pending = 0;
    return 1;
}

int fo_graph_in(fo_graph *g, uint64_t pid, int64_t ts)
{
    gproc *p = g->closed ? NULL : follower(g, pid);
    if (p == NULL || p->run != RUN_OFF)
        return 0;
    p->off_ns = add_sat(p->off_ns, elapsed(g, p->piece_start, ts));
    p->woken_at = ts < p->piece_start ? p->piece_start : ts;
    p->run = RUN_WOKEN;
    p->in_taken = 0;
    p->has_pending = 0;
    return 1;
}

void fo_graph_received(fo_graph *g, uint64_t pid, int64_t ts, fo_waker_kind kind, uint64_t sender)
{
    gproc *p = g->closed ? NULL : follower(g, pid);
    if (p == NULL)
        return;
    gproc *q = kind == FO_WAKER_PROCESS ? follower(g, sender) : NULL;
    if (q != NULL)
        message_to_trace(g, q, p, ts);
    if (p->run != RUN_WOKEN || p->has_pending)
        return; /* not the message that woke it */
    if (kind == FO_WAKER_PROCESS && sender == 0) {
        p->has_pending = 1; /* a process, but which: settled by the next event */
        p->pending = FO_WAKER_PROCESS;
        return;
    }
    settle(g, p, p->woken_at, kind, sender, 1);
}

void fo_graph_ran(fo_graph *g, uint64_t pid, int64_t ts)
{
    gproc *p = g->closed ? NULL : follower(g, pid);
    if (p != NULL && p->run == RUN_WOKEN)
        settle_pending(g, p, ts, 1);
}

int fo_graph_gc(fo_graph *g, uint64_t pid, int64_t ts, int start)
{
    gproc *p = g->closed ? NULL : follower(g, pid);
    if (p == NULL || p->top == FO_NONE)
        return 0;
    if (!in_counts_now(g, p))
        return 0; /* not known yet to be the trace's: as if not seen */
    if (start) {
        /* one at a time (a nested start is the same collection), and only
         * one that starts in a span is the trace's, as in its stacks */
        if (!p->collecting && p->top != FO_NONE) {
            p->collecting = 1;
            p->gc_start = ts;
            g->stats.collections++;
        }
        return 1;
    }
    if (p->collecting) {
        p->collecting = 0;
        for (uint32_t s = p->top; s != FO_NONE; s = g->spans[s].below)
            g->spans[s].gc = add_sat(g->spans[s].gc, overlap(p->gc_start, ts, g->spans[s].started, ts));
    }
    return 1;
}

void fo_graph_set_late(fo_graph *g, uint64_t pid)
{
    gproc *p = find_proc(g, pid);
    if (p != NULL)
        p->late = 1;
}

int fo_graph_take_in(fo_graph *g, uint64_t pid, int64_t *ts)
{
    gproc *p = g->closed ? NULL : follower(g, pid);
    if (p == NULL || p->run != RUN_WOKEN || p->in_taken)
        return 0;
    p->in_taken = 1;
    *ts = p->woken_at;
    return 1;
}

/* An interval still open at ts (exit, close) ends there. */
static void cut(fo_graph *g, gproc *p, int64_t ts)
{
    if (p->run == RUN_OFF) {
        p->off_ns = add_sat(p->off_ns, elapsed(g, p->piece_start, ts));
        p->woken_at = ts;
        settle_pending(g, p, ts, 0);
    } else if (p->run == RUN_WOKEN) {
        settle_pending(g, p, ts, 1);
    }
}

void fo_graph_exit(fo_graph *g, uint64_t pid, int64_t ts, uint64_t reason_key)
{
    if (refuse_after_close(g))
        return;
    gproc *p = find_proc(g, pid);
    if (p == NULL)
        return;
    if (p->follow == FOLLOW_ON)
        cut(g, p, ts);
    while (p->top != FO_NONE)
        end_span(g, p->top, ts, FO_SPAN_EXIT, reason_key);
    p->collecting = 0;
    if (!p->is_root && p->follow == FOLLOW_ON)
        p->follow = FOLLOW_EXITED;
    p->run = RUN_UNKNOWN;
}

/* Spans numbered without the dropped continuations, and edges that point
 * at existing spans only (a dropped span's own waits go with it). */
static void compact(fo_graph *g)
{
    uint32_t *map = g->span_count > 0 ? malloc(sizeof(uint32_t) * g->span_count) : NULL;
    if (map == NULL)
        return; /* nothing to number, or no memory: dropped spans stay, marked */
    uint32_t n = 0;
    for (uint32_t s = 0; s < g->span_count; s++)
        map[s] = g->spans[s].dropped ? FO_NONE : n++;
#define MAPPED(id) ((id) == FO_NONE ? FO_NONE : map[id])
    for (uint32_t s = 0; s < g->span_count; s++) {
        if (map[s] == FO_NONE)
            continue;
        gspan sp = g->spans[s];
        sp.parent = MAPPED(sp.parent);
        sp.first_child = MAPPED(sp.first_child);
        sp.last_child = MAPPED(sp.last_child);
        sp.next_sibling = MAPPED(sp.next_sibling);
        g->spans[map[s]] = sp;
    }
    uint32_t m = 0;
    for (uint32_t e = 0; e < g->edge_count; e++) {
        gedge edge = g->edges[e];
        if (map[edge.waiter] == FO_NONE || map[edge.waker] == FO_NONE)
            continue;
        edge.waiter = map[edge.waiter];
        edge.waker = map[edge.waker];
        g->edges[m++] = edge;
    }
#undef MAPPED
    g->span_count = n;
    g->edge_count = m;
    free(map);
}

void fo_graph_close(fo_graph *g, int64_t end_ts)
{
    if (g->closed) {
        g->stats.duplicate_events++;
        return;
    }
    for (uint32_t c = 0; c < g->call_used; c++) {
        if (!g->calls[c].live)
            continue;
        if (!g->calls[c].settled)
            settle_call(g, c);
        call_release(g, c);
    }
    for (uint32_t i = 0; i < g->proc_count; i++) {
        gproc *p = &g->procs[i];
        if (p->follow != FOLLOW_ON || p->top == FO_NONE)
            continue;
        if (p->run == RUN_OFF && !serving_request(g, p)) {
            /* idle since its last work: the spans end where the idle began */
            end_work(g, p, p->episode_start, FO_SPAN_OK);
            continue;
        }
        cut(g, p, end_ts);
    }
    for (uint32_t s = 0; s < g->span_count; s++) {
        /* the root finishing is the trace's normal end */
        uint8_t status = g->spans[s].kind == FO_SPAN_ROOT ? FO_SPAN_OK : FO_SPAN_OPEN_AT_CLOSE;
        end_span(g, s, end_ts, status, 0);
    }
    g->closed = 1;
    compact(g);
}

int fo_graph_closed(const fo_graph *g)
{
    return g->closed;
}

int fo_graph_active(const fo_graph *g, uint64_t pid)
{
    return !g->closed && top_span(g, pid) != FO_NONE;
}

int fo_graph_following(const fo_graph *g, uint64_t pid)
{
    return !g->closed && follower(g, pid) != NULL;
}

uint32_t fo_graph_waiting_call(const fo_graph *g, uint64_t pid, uint64_t *callee)
{
    const gproc *p = find_proc(g, pid);
    if (p == NULL || p->calls_out == 0)
        return 0;
    if (callee != NULL)
        *callee = p->last_callee;
    return p->calls_out;
}

uint32_t fo_graph_current_span(const fo_graph *g, uint64_t pid)
{
    return top_span(g, pid);
}

const fo_graph_stats *fo_graph_get_stats(const fo_graph *g)
{
    return &g->stats;
}

size_t fo_graph_memory(const fo_graph *g)
{
    return sizeof(*g) + (size_t)g->span_cap * sizeof(gspan) + (size_t)g->proc_cap * sizeof(gproc) +
           (size_t)g->call_cap * sizeof(gcall) + (size_t)g->edge_cap * sizeof(gedge) +
           ((size_t)g->proc_index.mask + 1 + (size_t)g->call_index.mask + 1) * sizeof(gslot);
}

/* --- reading ------------------------------------------------------------ */

uint32_t fo_graph_span_count(const fo_graph *g)
{
    return g->span_count;
}

int fo_graph_span(const fo_graph *g, uint32_t id, fo_span_info *out)
{
    if (id >= g->span_count)
        return 0;
    const gspan *sp = &g->spans[id];
    memset(out, 0, sizeof(*out));
    out->span_id = id;
    out->parent_span_id = sp->parent;
    out->pid = sp->pid;
    out->opener_pid = sp->opener;
    out->started_ns = sp->started;
    out->ended_ns = sp->ended;
    out->request_sent_ns = sp->request_sent;
    out->resumed_ns = sp->resumed;
    out->has_resumed = sp->has_resumed;
    uint64_t duration = sp->ended > sp->started ? (uint64_t)sp->ended - (uint64_t)sp->started : 0;
    /* Waits are cut to the span (a span still open has no duration yet;
     * otherwise only skewed clocks make them exceed it). */
    uint64_t wait = sp->wait < duration ? sp->wait : duration;
    uint64_t attributed = sp->attributed < wait ? sp->attributed : wait;
    uint64_t runnable = sp->runnable < duration - wait ? sp->runnable : duration - wait;
    uint64_t gc = sp->gc < duration - wait - runnable ? sp->gc : duration - wait - runnable;
    out->self_ns = duration - wait - runnable - gc;
    out->wait_ns = wait;
    out->runnable_ns = runnable;
    out->gc_ns = gc;
    out->attributed_wait_ns = attributed;
    out->unattributed_wait_ns = wait - attributed;
    /* the causes, cut (in order) to what is left unattributed */
    uint64_t left = wait - attributed;
    for (uint32_t c = 0; c < FO_CAUSE_COUNT; c++) {
        out->unattributed_by[c] = sp->unattributed[c] < left ? sp->unattributed[c] : left;
        left -= out->unattributed_by[c];
    }
    out->unattributed_by[FO_CAUSE_OTHER] += left;
    out->waiting_on_pid = sp->waiting_on;
    out->reason_key = sp->reason;
    out->status = sp->status;
    out->kind = sp->kind;
    out->calls = sp->calls;
    out->wakes = sp->wakes;
    out->child_count = sp->child_count;
    out->first_child = sp->first_child;
    out->next_sibling = sp->next_sibling;
    out->wire = sp->wire;
    return 1;
}

uint32_t fo_graph_children(const fo_graph *g, uint32_t id, uint32_t *out, uint32_t cap)
{
    if (id >= g->span_count)
        return 0;
    uint32_t n = 0;
    uint32_t c = g->spans[id].first_child;
    for (; c != FO_NONE && n < cap; c = g->spans[c].next_sibling)
        out[n++] = c;
    return g->spans[id].child_count;
}

uint32_t fo_graph_followers(const fo_graph *g, uint64_t *out, uint32_t cap)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < g->proc_count; i++) {
        const gproc *p = &g->procs[i];
        if (p->is_root || p->follow != FOLLOW_ON || remote(p->pid))
            continue;
        if (n < cap)
            out[n] = p->pid;
        n++;
    }
    return n;
}

uint32_t fo_graph_edge_count(const fo_graph *g)
{
    return g->edge_count;
}

int fo_graph_edge(const fo_graph *g, uint32_t id, fo_edge_info *out)
{
    if (id >= g->edge_count)
        return 0;
    const gedge *e = &g->edges[id];
    out->waiter_span_id = e->waiter;
    out->waker_span_id = e->waker;
    out->started_ns = e->started;
    out->ended_ns = e->ended;
    out->attributed_ns = e->ns;
    out->wakes = e->wakes;
    return 1;
}
