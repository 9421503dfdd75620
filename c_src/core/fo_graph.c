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

typedef struct {
    uint64_t pid;
    uint64_t reason;
    uint64_t waiting_on;
    uint64_t longest_wait;
    uint64_t wait;
    uint64_t attributed; /* unattributed is wait - attributed */
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
    uint8_t status;
    uint8_t has_resumed;
    uint8_t has_wait;
} gspan;

typedef struct {
    uint64_t pid;
    uint64_t last_callee;
    uint32_t top;       /* newest open span, FO_NONE when none */
    uint32_t calls_out; /* pending calls made by this pid */
} gproc;

typedef struct {
    uint64_t tag;
    uint64_t callee;
    int64_t sent;
    uint32_t caller_span; /* open until the call is settled */
    uint32_t callee_span; /* FO_NONE until received, or when not followed */
    uint32_t next_free;
    uint8_t live;
    uint8_t received;
    uint8_t replied;
    /* The wait is accounted (the caller span ended first); the entry is
     * kept only so the callee's reply can still end the callee span. */
    uint8_t settled;
} gcall;

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
    uint8_t has_root;
    uint8_t closed;
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
    free(g->proc_index.slots);
    free(g->call_index.slots);
    free(g);
}

uint64_t fo_graph_trace_id(const fo_graph *g)
{
    return g->trace_id;
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

/* Waits add up over many calls; with clocks at the ends of int64 the sum
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

/* --- processes ---------------------------------------------------------- */

static uint32_t find_proc(const fo_graph *g, uint64_t pid)
{
    return index_find(&g->proc_index, pid);
}

/* The process of pid, made on first need; FO_NONE past max_processes. */
static uint32_t proc_for(fo_graph *g, uint64_t pid)
{
    uint32_t p = find_proc(g, pid);
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
    g->stats.processes++;
    return p;
}

static uint32_t top_span(const fo_graph *g, uint64_t pid)
{
    uint32_t p = find_proc(g, pid);
    return p == FO_NONE ? FO_NONE : g->procs[p].top;
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

/* A new open span of pid; FO_NONE when a bound or memory says no. The
 * bounds are checked cheapest first and only the first one hit counts. */
static uint32_t open_span(fo_graph *g, uint32_t parent, uint64_t pid, int64_t ts, int64_t sent)
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
    sp->started = ts;
    sp->ended = ts;
    sp->request_sent = sent;
    sp->parent = parent;
    sp->first_child = sp->last_child = sp->next_sibling = FO_NONE;
    sp->proc = p;
    sp->status = FO_SPAN_OPEN;
    push_open(g, s);
    if (parent != FO_NONE)
        add_child(g, parent, s);
    g->stats.spans++;
    return s;
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

static void call_release(fo_graph *g, uint32_t c)
{
    index_remove(&g->call_index, g->calls[c].tag);
    g->calls[c].live = 0;
    g->calls[c].next_free = g->free_call;
    g->free_call = c;
    g->call_live--;
}

/* The caller's wait for call c ends at t: account it on the caller span.
 * Only a callee span that has ended explains wait, and only the part of
 * it inside [sent, t]. */
static void settle_call(fo_graph *g, uint32_t c, int64_t t, int resumed)
{
    gcall *call = &g->calls[c];
    gspan *cs = &g->spans[call->caller_span];
    uint64_t wait = elapsed(g, call->sent, t);
    uint64_t attributed = 0;
    if (call->callee_span != FO_NONE) {
        gspan *ce = &g->spans[call->callee_span];
        if (ce->status != FO_SPAN_OPEN)
            attributed = overlap(call->sent, t, ce->started, ce->ended);
        if (resumed) {
            ce->resumed = t;
            ce->has_resumed = 1;
        }
    }
    cs->wait = add_sat(cs->wait, wait);
    cs->attributed = add_sat(cs->attributed, attributed);
    cs->calls++;
    if (!cs->has_wait || wait > cs->longest_wait) {
        cs->has_wait = 1;
        cs->longest_wait = wait;
        cs->waiting_on = call->callee;
    }
    cs->open_calls--;
    g->procs[cs->proc].calls_out--;
    call->settled = 1;
}

/* A span's wait never outlives the span: its calls still pending end with
 * it. Rare (a delegated reply or an exit while blocked), hence the scan.
 * A call already replied to has nothing left to say and goes. */
static void settle_calls_of(fo_graph *g, uint32_t s, int64_t t)
{
    for (uint32_t c = 0; c < g->call_used && g->spans[s].open_calls > 0; c++) {
        gcall *call = &g->calls[c];
        if (!call->live || call->settled || call->caller_span != s)
            continue;
        settle_call(g, c, t, 0);
        if (call->replied)
            call_release(g, c);
    }
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
        settle_calls_of(g, s, ts);
    sp->ended = ts;
    sp->status = status;
    sp->reason = reason;
    unlink_open(g, s);
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
    uint32_t s = open_span(g, FO_NONE, pid, ts, ts);
    g->has_root = s != FO_NONE;
    return s;
}

void fo_graph_request_sent(fo_graph *g, uint64_t caller, uint64_t callee, uint64_t tag, int64_t ts)
{
    if (refuse_after_close(g))
        return;
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
    if (g->call_live >= g->limits.max_pending_calls) {
        g->stats.pending_limit_hits++;
        return;
    }
    uint32_t c = call_alloc(g);
    if (c == FO_NONE || !index_put(&g->call_index, tag, c)) {
        if (c != FO_NONE) {
            g->calls[c].live = 0; /* a fresh entry is uninitialized */
            g->calls[c].next_free = g->free_call;
            g->free_call = c;
        }
        g->stats.alloc_failures++;
        return;
    }
    gspan *sp = &g->spans[s];
    if (ts < sp->started) {
        g->stats.clock_skews++;
        ts = sp->started; /* keeps the wait inside the span */
    }
    gcall *call = &g->calls[c];
    memset(call, 0, sizeof(*call));
    call->tag = tag;
    call->callee = callee;
    call->sent = ts;
    call->caller_span = s;
    call->callee_span = FO_NONE;
    call->live = 1;
    g->call_live++;
    sp->open_calls++;
    gproc *p = &g->procs[sp->proc];
    p->calls_out++;
    p->last_callee = callee;
    g->stats.calls++;
}

void fo_graph_request_received(fo_graph *g, uint64_t callee, uint64_t caller, uint64_t tag,
                               int64_t ts)
{
    /* The tag alone identifies the call; the caller in the request is
     * the one request_sent recorded. */
    (void)caller;
    if (refuse_after_close(g))
        return;
    uint32_t c = index_find(&g->call_index, tag);
    if (c == FO_NONE) {
        g->stats.unmatched_requests++;
        return;
    }
    if (g->calls[c].received || g->calls[c].replied) {
        g->stats.duplicate_events++;
        return;
    }
    g->calls[c].received = 1;
    /* the receiver, not the send's destination: that may have been a name */
    g->calls[c].callee = callee;
    uint32_t s = open_span(g, g->calls[c].caller_span, callee, ts, g->calls[c].sent);
    g->calls[c].callee_span = s;
}

void fo_graph_reply_sent(fo_graph *g, uint64_t sender, uint64_t tag, int64_t ts)
{
    if (refuse_after_close(g))
        return;
    uint32_t c = index_find(&g->call_index, tag);
    if (c == FO_NONE) {
        g->stats.unmatched_reply_sends++;
        return;
    }
    gcall *call = &g->calls[c];
    if (call->replied) {
        g->stats.duplicate_events++;
        return;
    }
    call->replied = 1;
    if (call->received && sender != call->callee)
        g->stats.delegated_replies++;
    if (call->callee_span != FO_NONE)
        end_span(g, call->callee_span, ts, FO_SPAN_OK, 0);
    if (call->settled)
        call_release(g, c);
}

void fo_graph_reply_received(fo_graph *g, uint64_t caller, uint64_t tag, int64_t ts)
{
    /* Replies go to an alias: only the tag says whose call this was. */
    (void)caller;
    if (g->closed) {
        g->stats.late_replies++;
        return;
    }
    uint32_t c = index_find(&g->call_index, tag);
    if (c == FO_NONE) {
        g->stats.unmatched_replies++;
        return;
    }
    uint32_t callee = g->calls[c].callee_span;
    if (callee != FO_NONE && g->spans[callee].status == FO_SPAN_OPEN) {
        /* The reply was sent without a token we saw; it was sent by now. */
        g->stats.unseen_replies++;
        end_span(g, callee, ts, FO_SPAN_OK, 0);
    }
    if (g->calls[c].settled)
        g->stats.late_replies++; /* its caller span ended before it */
    else
        settle_call(g, c, ts, 1);
    call_release(g, c);
}

void fo_graph_exit(fo_graph *g, uint64_t pid, int64_t ts, uint64_t reason_key)
{
    if (refuse_after_close(g))
        return;
    uint32_t p = find_proc(g, pid);
    if (p == FO_NONE)
        return;
    while (g->procs[p].top != FO_NONE)
        end_span(g, g->procs[p].top, ts, FO_SPAN_EXIT, reason_key);
}

void fo_graph_close(fo_graph *g, int64_t end_ts)
{
    if (g->closed) {
        g->stats.duplicate_events++;
        return;
    }
    /* Calls first, while the callees still open count as not ended: a
     * callee that never replied does not explain its caller's wait. */
    for (uint32_t c = 0; c < g->call_used; c++) {
        if (!g->calls[c].live)
            continue;
        if (!g->calls[c].settled)
            settle_call(g, c, end_ts, 0);
        call_release(g, c);
    }
    for (uint32_t s = 0; s < g->span_count; s++) {
        /* the root finishing is the trace's normal end */
        uint8_t status = g->spans[s].parent == FO_NONE ? FO_SPAN_OK : FO_SPAN_OPEN_AT_CLOSE;
        end_span(g, s, end_ts, status, 0);
    }
    g->closed = 1;
}

int fo_graph_closed(const fo_graph *g)
{
    return g->closed;
}

int fo_graph_active(const fo_graph *g, uint64_t pid)
{
    return !g->closed && top_span(g, pid) != FO_NONE;
}

uint32_t fo_graph_waiting_call(const fo_graph *g, uint64_t pid, uint64_t *callee)
{
    uint32_t p = find_proc(g, pid);
    if (p == FO_NONE || g->procs[p].calls_out == 0)
        return 0;
    if (callee != NULL)
        *callee = g->procs[p].last_callee;
    return g->procs[p].calls_out;
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
           (size_t)g->call_cap * sizeof(gcall) +
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
    out->started_ns = sp->started;
    out->ended_ns = sp->ended;
    out->request_sent_ns = sp->request_sent;
    out->resumed_ns = sp->resumed;
    out->has_resumed = sp->has_resumed;
    uint64_t duration = sp->ended > sp->started ? (uint64_t)sp->ended - (uint64_t)sp->started : 0;
    out->self_ns = duration > sp->wait ? duration - sp->wait : 0;
    out->wait_ns = sp->wait;
    out->attributed_wait_ns = sp->attributed;
    out->unattributed_wait_ns = sp->wait - sp->attributed;
    out->waiting_on_pid = sp->waiting_on;
    out->reason_key = sp->reason;
    out->status = sp->status;
    out->calls = sp->calls;
    out->child_count = sp->child_count;
    out->first_child = sp->first_child;
    out->next_sibling = sp->next_sibling;
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
