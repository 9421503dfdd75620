/* libFuzzer target for the whole C core: arbitrary bytes become a stream
 * of timeline events (fo_session), span-graph events (fo_graph) and
 * followed-trace events that drive both (fo_follow), under small random
 * bounds, and the finished tree is rendered (fo_render). The core must
 * never crash, leak or break its tree and graph invariants, whatever the
 * stream, and the rendered stacks must come out in text order. Build and
 * run: `make fuzz-run`. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fo_follow.h"
#include "fo_graph.h"
#include "fo_render.h"
#include "fo_session.h"

typedef struct {
    const uint8_t *data;
    size_t size;
    size_t pos;
} reader;

static uint8_t byte(reader *r)
{
    return r->pos < r->size ? r->data[r->pos++] : 0;
}

static uint64_t small_key(reader *r)
{
    return (uint64_t)(byte(r) % 8u) + 1u;
}

static int64_t timestamp(reader *r, int64_t *clock)
{
    /* mostly forward, sometimes backwards or far: skew and overflow paths */
    uint8_t step = byte(r);
    if (step == 0xff)
        *clock = (int64_t)((uint64_t)byte(r) << 56);
    else if (step >= 0xf0)
        *clock = (int64_t)((uint64_t)*clock - step); /* wraps on purpose, no UB */
    else
        *clock = (int64_t)((uint64_t)*clock + step);
    return *clock;
}

static fo_mfa mfa(reader *r)
{
    fo_mfa m = {small_key(r), small_key(r) + 100u, byte(r) % 4u};
    return m;
}

static void check_tree(const fo_session *s)
{
    uint32_t nodes = fo_session_node_count(s);
    uint64_t samples = 0, alloc_words = 0, alloc_samples = 0;
    for (uint32_t id = 0; id < nodes; id++) {
        fo_node_info n;
        fo_session_node(s, id, &n);
        if (n.parent != FO_NONE && n.parent >= id)
            abort();
        if (n.proc >= fo_session_process_count(s))
            abort();
        samples += n.samples;
        alloc_words += n.alloc_words;
        alloc_samples += n.alloc_samples;
    }
    /* every applied sample is counted on exactly one node */
    if (samples != fo_session_stats(s)->samples)
        abort();
    /* so is every collection's allocation, the words a process held where
     * its stack was unknown included once the session is closed (the
     * heap levels here are too small to saturate) */
    if (alloc_words != fo_session_stats(s)->alloc_words || alloc_samples != fo_session_stats(s)->alloc_samples)
        abort();
}

/* A stack sample of up to 8 frames; the weight is sometimes huge, so the
 * saturating sum is exercised. */
static void sample(fo_session *s, reader *r, uint64_t pid, int64_t ts)
{
    fo_mfa frames[8];
    uint32_t count = byte(r) % 10u;
    for (uint32_t i = 0; i < count && i < 8u; i++)
        frames[i] = mfa(r);
    uint8_t w = byte(r);
    uint64_t weight = w >= 0xf0 ? UINT64_MAX - w : w;
    /* 9: a sample that repeats the stack the process has; an odd weight:
     * a sample of a process seen waiting */
    if (count == 9u)
        fo_session_sample_same(s, pid, ts, weight, w % 4u);
    else
        fo_session_sample_as(s, pid, ts, frames, count, weight, w & 3u);
}

static void check_graph(const fo_graph *g)
{
    uint32_t spans = fo_graph_span_count(g);
    for (uint32_t id = 0; id < spans; id++) {
        fo_span_info span;
        if (!fo_graph_span(g, id, &span))
            abort();
        if (span.parent_span_id != FO_NONE && span.parent_span_id >= id)
            abort();
        if (span.attributed_wait_ns > span.wait_ns)
            abort();
        /* the span arithmetic: its four classes of time */
        uint64_t duration = (uint64_t)span.ended_ns - (uint64_t)span.started_ns;
        if (span.ended_ns < span.started_ns ||
            span.self_ns + span.gc_ns + span.runnable_ns + span.wait_ns != duration)
            abort();
        uint64_t causes = 0;
        for (uint32_t c = 0; c < FO_CAUSE_COUNT; c++)
            causes += span.unattributed_by[c];
        if (causes != span.unattributed_wait_ns)
            abort();
    }
    for (uint32_t e = 0; e < fo_graph_edge_count(g); e++) {
        fo_edge_info edge;
        if (!fo_graph_edge(g, e, &edge) || edge.waiter_span_id >= spans || edge.waker_span_id >= spans ||
            edge.ended_ns < edge.started_ns)
            abort();
    }
}

static void correlation(const fo_follow *f, reader *r, int64_t ts)
{
    fo_corr c;
    c.kind = (fo_corr_kind)(byte(r) % 7u); /* 0: not a kind */
    c.is_send = byte(r) & 1u;
    c.from = small_key(r);
    c.to = byte(r) & 7u ? small_key(r) : 0;
    c.tag = small_key(r);
    /* now and then a process on another node, on either end */
    uint8_t remote = byte(r);
    if ((remote & 7u) == 1u)
        c.from |= FO_GRAPH_REMOTE_BIT;
    else if ((remote & 7u) == 2u && c.to != 0)
        c.to |= FO_GRAPH_REMOTE_BIT;
    c.wire = remote >> 4;
    fo_follow_correlation(f, &c, ts);
}

/* Through fo_follow: the graph decides, the session follows. */
static void follow_op(const fo_follow *f, reader *r, fo_event *ev)
{
    static const fo_event_kind kinds[] = {FO_EV_CALL, FO_EV_RETURN_TO, FO_EV_IN,
                                          FO_EV_OUT,  FO_EV_GC_START,  FO_EV_GC_END};
    switch (byte(r) % 7u) {
    case 0:
    case 1: {
        uint8_t k = byte(r);
        ev->kind = kinds[k % 6u];
        ev->flags = FO_EVF_HAS_MFA | (byte(r) & 1u ? FO_EVF_HAS_CALLER : 0u);
        ev->mfa = mfa(r);
        ev->caller = mfa(r);
        if ((ev->kind == FO_EV_GC_START || ev->kind == FO_EV_GC_END) && (k & 0x80u)) {
            /* with a heap size: inside the trace's spans or between them */
            ev->flags = FO_EVF_HAS_HEAP;
            ev->heap_words = (uint64_t)(k & 0x70u) << 8;
        }
        fo_follow_event(f, ev);
        /* a level read as a follower joins (the owner's, at any time),
         * or as the trace ends (alloc_tail: any time too) */
        if (k == 0x7fu)
            fo_session_heap_level_unless_known(f->session, ev->pid, byte(r) * 64u);
        else if (k == 0x7eu)
            fo_session_alloc_tail(f->session, ev->pid, byte(r) * 64u);
        break;
    }
    case 2:
        fo_follow_received(f, ev->pid, ev->ts_ns, (fo_waker_kind)(byte(r) % 4u),
                           byte(r) & 3u ? small_key(r) : 0);
        break;
    case 3:
        correlation(f, r, ev->ts_ns);
        break;
    case 4:
        fo_follow_spawned(f, small_key(r), ev->pid, ev->ts_ns);
        break;
    case 5:
        fo_follow_exit(f, ev->pid, ev->ts_ns, byte(r));
        break;
    default:
        if (fo_follow_before_sample(f, ev->pid))
            sample(f->session, r, ev->pid, ev->ts_ns);
        if (byte(r) == 0xee)
            fo_graph_set_late(f->graph, ev->pid);
        break;
    }
}

/* fo_render over the finished tree: names from a pool where some read the
 * same, some are prefixes of others ("f/1", "f/10") and some are dropped;
 * a budget from the input. Every stack's text must come out, in strictly
 * increasing byte order, as a prefix of its terminal's text. */
typedef struct {
    char **texts; /* by render node id: terminal texts */
    uint32_t count;
} texts;

static int keep(void *ctx, uint32_t terminal, const char *text, uint32_t len)
{
    texts *t = ctx;
    if (terminal >= t->count || t->texts[terminal] != NULL)
        abort();
    t->texts[terminal] = malloc((size_t)len + 1);
    if (t->texts[terminal] == NULL)
        abort();
    memcpy(t->texts[terminal], text, len);
    t->texts[terminal][len] = '\0';
    return 1;
}

static void check_render(const fo_session *s, uint64_t budget)
{
    static const char *pool[] = {"f/1", "f/10", "f/1-x", "g", NULL, "f/1", "g.h", "\xe2\x80\xa6"};
    uint32_t nodes = fo_session_node_count(s), frames = FO_FRAME_FIRST_REAL + fo_session_frame_count(s);
    fo_node_info *in = malloc(sizeof(fo_node_info) * ((size_t)nodes + 1));
    fo_render_name *names = malloc(sizeof(fo_render_name) * ((size_t)frames + 1));
    if (in == NULL || names == NULL)
        abort();
    for (uint32_t id = 0; id < nodes; id++)
        fo_session_node(s, id, &in[id]);
    for (uint32_t f = 0; f < frames; f++) {
        const char *text = pool[f % (sizeof(pool) / sizeof(pool[0]))];
        names[f] = (fo_render_name){text, text == NULL ? 0 : (uint32_t)strlen(text)};
    }
    fo_render *r = fo_render_new(in, nodes, fo_session_process_count(s), names, frames, budget);
    if (r == NULL)
        abort();
    texts t = {calloc((size_t)fo_render_node_count(r) + 1, sizeof(char *)), fo_render_node_count(r)};
    if (t.texts == NULL || !fo_render_texts(r, keep, &t) || fo_render_text_bytes(r) > budget)
        abort();
    for (uint32_t p = 0; p < fo_session_process_count(s); p++) {
        uint32_t count;
        const uint32_t *ids = fo_render_stacks(r, p, &count);
        const char *prev = NULL;
        uint32_t prev_len = 0;
        for (uint32_t i = 0; i < count; i++) {
            const fo_render_node *n = fo_render_node_at(r, ids[i]);
            const char *text = t.texts[n->owner];
            if (n->proc != p || text == NULL || strlen(text) < n->text_len)
                abort();
            if (prev != NULL) {
                uint32_t common = prev_len < n->text_len ? prev_len : n->text_len;
                int c = memcmp(prev, text, common);
                if (c > 0 || (c == 0 && prev_len >= n->text_len))
                    abort();
            }
            prev = text;
            prev_len = n->text_len;
        }
    }
    for (uint32_t i = 0; i < t.count; i++)
        free(t.texts[i]);
    free(t.texts);
    fo_render_free(r);
    free(in);
    free(names);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size, 0};
    fo_limits limits = {byte(&r) % 64u + 1u, byte(&r) % 16u + 1u, byte(&r) % 8u + 1u,
                        byte(&r) % 32u + 1u, byte(&r) % 32u + 1u};
    fo_graph_limits glimits = {byte(&r) % 16u + 1u, byte(&r) % 16u + 1u, byte(&r) % 8u + 1u,
                               byte(&r) % 8u + 1u};
    fo_session *s = fo_session_new(&limits);
    fo_graph *g = fo_graph_new(&glimits, 7);
    if (s == NULL || g == NULL)
        abort();
    /* the high bit of the first byte (max_nodes takes its low bits) */
    fo_session_set_collapse_recursion(s, size > 0 && (data[0] & 0x80u) != 0);
    /* the two high bits of the second (max_depth takes its low bits): how
     * receive events decide runnable time (FO_RECEIVES_*) */
    fo_session_track_receives_as(s, size > 1 ? data[1] >> 6 : 0);
    int64_t clock = 0;
    fo_graph_follow_messages(g, byte(&r) & 1u);
    fo_graph_root(g, 1, 0);
    fo_follow f = {s, g, NULL, NULL};
    fo_graph_note note;
    while (r.pos < r.size) {
        uint8_t op = byte(&r) % 20u;
        fo_event ev;
        memset(&ev, 0, sizeof(ev));
        ev.pid = small_key(&r);
        ev.ts_ns = timestamp(&r, &clock);
        switch (op) {
        case 0:
        case 1:
        case 2:
            ev.kind = FO_EV_CALL;
            ev.flags = FO_EVF_HAS_MFA | (byte(&r) & 1u ? FO_EVF_HAS_CALLER : 0u);
            ev.mfa = mfa(&r);
            ev.caller = mfa(&r);
            fo_session_apply(s, &ev);
            break;
        case 3:
        case 4:
            ev.kind = FO_EV_RETURN_TO;
            ev.flags = byte(&r) & 1u ? FO_EVF_HAS_MFA : 0u;
            ev.mfa = mfa(&r);
            fo_session_apply(s, &ev);
            break;
        case 5:
            ev.kind = FO_EV_OUT;
            ev.flags = byte(&r) & 1u ? FO_EVF_IN_CALL : 0u;
            fo_session_apply(s, &ev);
            break;
        case 6:
            ev.kind = FO_EV_IN;
            fo_session_apply(s, &ev);
            break;
        case 7: {
            uint8_t k = byte(&r);
            ev.kind = (fo_event_kind)(k % 10u); /* exit, gc, and invalid kinds */
            if (k & 0x80u) {
                /* with a heap size (allocation profiles): levels that go
                 * up and down */
                ev.flags = FO_EVF_HAS_HEAP;
                ev.heap_words = (uint64_t)(k & 0x70u) << 8;
            }
            fo_session_apply(s, &ev);
            fo_graph_exit(g, ev.pid, ev.ts_ns, byte(&r));
            break;
        }
        case 8:
            fo_graph_request_sent(g, ev.pid, small_key(&r), small_key(&r), ev.ts_ns);
            fo_session_call_started(s, ev.pid);
            break;
        case 9:
            fo_graph_request_received(g, ev.pid, small_key(&r), small_key(&r), ev.ts_ns);
            break;
        case 10:
            fo_graph_reply_sent(g, ev.pid, small_key(&r), ev.ts_ns);
            break;
        case 11:
            fo_graph_reply_received(g, ev.pid, small_key(&r), ev.ts_ns);
            fo_session_attribute_wait(s, ev.pid, byte(&r) * 16u);
            break;
        case 12:
            fo_session_count_malformed(s, byte(&r));
            fo_session_count_ignored(s, byte(&r));
            fo_session_expect_signal(s, ev.pid);
            break;
        case 13:
            (void)fo_graph_active(g, ev.pid);
            (void)fo_graph_waiting_call(g, ev.pid, NULL);
            (void)fo_graph_current_span(g, ev.pid);
            break;
        case 14:
            sample(s, &r, ev.pid, ev.ts_ns);
            break;
        case 15:
        case 16:
        case 17:
        case 18:
            follow_op(&f, &r, &ev);
            break;
        case 19:
            /* the graph on its own: notes pile up until drained */
            /* wraps on purpose, no UB: skew paths */
            fo_graph_out(g, ev.pid, ev.ts_ns);
            fo_graph_in(g, ev.pid, (int64_t)((uint64_t)ev.ts_ns + byte(&r)));
            fo_graph_ran(g, ev.pid, (int64_t)((uint64_t)ev.ts_ns + 300u));
            fo_graph_message_received(g, ev.pid, small_key(&r), ev.ts_ns);
            if (byte(&r) & 1u)
                while (fo_graph_next_note(g, &note))
                    ;
            break;
        default:
            fo_session_apply(s, &ev); /* kind 0: not a valid event */
            break;
        }
    }
    if (byte(&r) & 1u) {
        fo_follow_close(&f, clock, 1);
    } else {
        fo_session_close(s, clock);
        fo_graph_close(g, clock);
    }
    check_tree(s);
    check_graph(g);
    check_render(s, size % 4 == 0 ? UINT64_MAX : (uint64_t)(size % 200));
    fo_session_free(s);
    fo_graph_free(g);
    return 0;
}
