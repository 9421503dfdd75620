/* The views of a finished tree (fo_render.h): merge by name, round, order,
 * and plan the stack texts so that each terminal's is written once. */
#include "fo_render.h"

#include <bsd/stdlib.h>
#include <stdlib.h>
#include <string.h>

#include "fo_hash.h"
#include "fo_index.h"

/* Below this many entries, insertion sort beats merging. */
#define SMALL_SORT 12u

struct fo_render {
    fo_render_node *nodes;
    uint32_t count;
    uint32_t process_count;
    const fo_render_name *names; /* the caller's: valid until fo_render_free */
    uint32_t names_given;
    uint32_t *dense_frame; /* dense name id -> a frame with that text */
    uint8_t *dense_dropped;
    uint32_t dense_count;
    uint32_t *by_name;   /* children of each node, by name (CSR over child_start) */
    uint32_t *by_desc;   /* the same children, by name + ";" (the order of their subtrees' texts) */
    uint32_t *child_start; /* count + 1 entries */
    uint32_t *tree;      /* preorder of every process, process after process */
    uint32_t *tree_start; /* process_count + 1 entries */
    uint32_t *stacks;    /* stack order of every process, likewise */
    uint32_t *stack_start;
    uint32_t *terminals;
    uint32_t terminal_count;
    uint32_t max_text_len;
    uint64_t text_bytes;
    uint64_t without_text;
};

/* --- texts ------------------------------------------------------------- */

static const char *dense_text(const fo_render *r, uint32_t dense, uint32_t *len)
{
    uint32_t frame = r->dense_frame[dense];
    if (r->dense_dropped[dense] || frame >= r->names_given || r->names[frame].text == NULL) {
        *len = 0;
        return "";
    }
    *len = r->names[frame].len;
    return r->names[frame].text;
}

static const char *node_text(const fo_render *r, uint32_t id, uint32_t *len)
{
    return dense_text(r, r->nodes[id].name, len);
}

/* Byte order of a + (semi_a ? ";" : "") against b + (semi_b ? ";" : ""). */
static int compare_keys(const char *a, uint32_t la, int semi_a, const char *b, uint32_t lb, int semi_b)
{
    int c = memcmp(a, b, la < lb ? la : lb);
    if (c != 0)
        return c;
    /* one is a prefix of the other: the next byte decides, an end first */
    int next_a = semi_a ? ';' : -1, next_b = semi_b ? ';' : -1;
    if (la < lb)
        next_b = (unsigned char)b[la];
    else if (lb < la)
        next_a = (unsigned char)a[lb];
    if (next_a != next_b)
        return next_a < next_b ? -1 : 1;
    /* the same text, or both go on with a ';' here (only when one key's
     * own ';' meets a ';' in the other's text): the longer key is greater */
    uint64_t total_a = (uint64_t)la + (semi_a ? 1 : 0), total_b = (uint64_t)lb + (semi_b ? 1 : 0);
    return total_a == total_b ? 0 : (total_a < total_b ? -1 : 1);
}

typedef struct {
    const fo_render *r;
    int semi; /* compare name + ";" */
} order_ctx;

static int compare_children(const order_ctx *ctx, uint32_t a, uint32_t b)
{
    uint32_t la, lb;
    const char *ta = node_text(ctx->r, a, &la);
    const char *tb = node_text(ctx->r, b, &lb);
    return compare_keys(ta, la, ctx->semi, tb, lb, ctx->semi);
}

/* Stable merge sort of ids (tmp: as many entries). */
static void sort_ids(uint32_t *ids, uint32_t n, uint32_t *tmp, const order_ctx *ctx)
{
    for (uint32_t start = 0; start < n; start += SMALL_SORT) {
        uint32_t end = start + SMALL_SORT < n ? start + SMALL_SORT : n;
        for (uint32_t i = start + 1; i < end; i++) {
            uint32_t id = ids[i], j = i;
            while (j > start && compare_children(ctx, ids[j - 1], id) > 0) {
                ids[j] = ids[j - 1];
                j--;
            }
            ids[j] = id;
        }
    }
    for (uint32_t width = SMALL_SORT; width < n; width *= 2) {
        for (uint32_t lo = 0; lo < n; lo += 2 * width) {
            uint32_t mid = lo + width < n ? lo + width : n;
            uint32_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            uint32_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = compare_children(ctx, ids[j], ids[i]) < 0 ? ids[j++] : ids[i++];
            while (i < mid)
                tmp[k++] = ids[i++];
            while (j < hi)
                tmp[k++] = ids[j++];
            memcpy(ids + lo, tmp + lo, sizeof(uint32_t) * (hi - lo));
        }
        if (width > UINT32_MAX / 2)
            break;
    }
}

/* --- names: equal texts are one name ------------------------------------ */

typedef struct {
    fo_index index; /* text -> dense id (dropped frames are not in it) */
    uint32_t *frame_dense; /* frame -> dense id, FO_NONE until seen */
    uint32_t frame_slots;
    uint32_t dropped_dense; /* FO_NONE until a dropped frame is seen */
} name_table;

static uint64_t text_hash(const char *text, uint32_t len)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ len;
    for (uint32_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)text[i]) * 0x100000001b3ULL;
    return fo_hash_mix(h);
}

static uint64_t rehash_dense(const void *table, uint32_t dense)
{
    const fo_render *r = table;
    uint32_t len;
    const char *text = dense_text(r, dense, &len);
    return text_hash(text, len);
}

static int grow_dense(fo_render *r, uint32_t *cap)
{
    if (r->dense_count < *cap)
        return 1;
    uint32_t fresh = *cap == 0 ? 64u : *cap * 2;
    uint32_t *frames = reallocarray(r->dense_frame, fresh, sizeof(uint32_t));
    if (frames == NULL)
        return 0;
    r->dense_frame = frames;
    uint8_t *dropped = reallocarray(r->dense_dropped, fresh, 1);
    if (dropped == NULL)
        return 0;
    r->dense_dropped = dropped;
    *cap = fresh;
    return 1;
}

/* The dense id of frame's text; FO_NONE when memory is short. */
static uint32_t dense_of(fo_render *r, name_table *t, uint32_t frame, uint32_t *cap)
{
    if (frame < t->frame_slots && t->frame_dense[frame] != FO_NONE)
        return t->frame_dense[frame];
    int dropped = frame < r->names_given && r->names[frame].text == NULL;
    uint32_t found = FO_NONE;
    if (dropped) {
        found = t->dropped_dense;
    } else {
        uint32_t len = frame < r->names_given ? r->names[frame].len : 0;
        const char *text = len > 0 ? r->names[frame].text : "";
        uint64_t hash = text_hash(text, len);
        for (uint32_t i = fo_index_start(&t->index, hash); t->index.slots[i] != 0 && found == FO_NONE;
             i = fo_index_next(&t->index, i)) {
            uint32_t other_len;
            const char *other = dense_text(r, t->index.slots[i] - 1, &other_len);
            if (other_len == len && (len == 0 || memcmp(other, text, len) == 0))
                found = t->index.slots[i] - 1;
        }
    }
    if (found == FO_NONE) {
        if (!grow_dense(r, cap))
            return FO_NONE;
        found = r->dense_count++;
        r->dense_frame[found] = frame;
        r->dense_dropped[found] = (uint8_t)dropped;
        if (dropped)
            t->dropped_dense = found;
        else if (!fo_index_put(&t->index, rehash_dense(r, found), found, rehash_dense, r))
            return FO_NONE;
    }
    if (frame < t->frame_slots)
        t->frame_dense[frame] = found;
    return found;
}

/* --- merging nodes that read the same ----------------------------------- */

static uint64_t merge_hash(uint32_t parent, uint32_t name)
{
    return fo_hash_mix(((uint64_t)parent << 32) | name);
}

static uint64_t rehash_node(const void *table, uint32_t id)
{
    const fo_render_node *n = &((const fo_render *)table)->nodes[id];
    return merge_hash(n->parent, n->name);
}

static uint64_t add_saturating(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint32_t merged_child(fo_render *r, fo_index *index, uint32_t parent, uint32_t name, int *fresh)
{
    uint64_t hash = merge_hash(parent, name);
    for (uint32_t i = fo_index_start(index, hash); index->slots[i] != 0; i = fo_index_next(index, i)) {
        const fo_render_node *n = &r->nodes[index->slots[i] - 1];
        if (n->parent == parent && n->name == name) {
            *fresh = 0;
            return index->slots[i] - 1;
        }
    }
    *fresh = 1;
    uint32_t id = r->count++;
    fo_render_node *n = &r->nodes[id];
    memset(n, 0, sizeof(*n));
    n->parent = parent;
    n->name = name;
    if (!fo_index_put(index, hash, id, rehash_node, r))
        return FO_NONE;
    return id;
}

/* Builds r->nodes from the input: one node per distinct (parent, name). */
/* Names every node (dense ids into names[]) and checks the input; 1 when
 * no two frames read the same and none is dropped, so that every (parent,
 * name) is distinct already and the nodes need no merging. */
static int name_nodes(fo_render *r, name_table *t, const fo_node_info *in, uint32_t n, uint32_t *names,
                      int *ok)
{
    uint32_t dense_cap = 0, frames_used = 0;
    int distinct = 1;
    for (uint32_t id = 0; *ok && id < n; id++) {
        const fo_node_info *node = &in[id];
        names[id] = FO_NONE;
        if (node->proc >= r->process_count ||
            (node->parent != FO_NONE && (node->parent >= id || in[node->parent].proc != node->proc))) {
            *ok = 0;
            break;
        }
        if (node->parent == FO_NONE)
            continue;
        if (node->frame >= t->frame_slots)
            distinct = 0; /* not cached: counted below as often as seen */
        else if (t->frame_dense[node->frame] == FO_NONE)
            frames_used++;
        names[id] = dense_of(r, t, node->frame, &dense_cap);
        if (names[id] == FO_NONE)
            *ok = 0;
    }
    return distinct && frames_used == r->dense_count && t->dropped_dense == FO_NONE;
}

/* Builds r->nodes from the input: one node per distinct (parent, name). */
static int merge(fo_render *r, const fo_node_info *in, uint32_t n, uint32_t *roots)
{
    name_table t;
    memset(&t, 0, sizeof(t));
    t.dropped_dense = FO_NONE;
    uint32_t *map = malloc(sizeof(uint32_t) * ((size_t)n + 1));
    uint32_t *names = malloc(sizeof(uint32_t) * ((size_t)n + 1));
    t.frame_slots = r->names_given;
    t.frame_dense = malloc(sizeof(uint32_t) * ((size_t)t.frame_slots + 1));
    fo_index children;
    memset(&children, 0, sizeof(children));
    int ok = map != NULL && names != NULL && t.frame_dense != NULL && fo_index_init(&t.index, 256);
    for (uint32_t f = 0; ok && f < t.frame_slots; f++)
        t.frame_dense[f] = FO_NONE;
    int distinct = ok && name_nodes(r, &t, in, n, names, &ok);
    if (ok && !distinct) {
        /* sized for every node at once: no rehash while merging */
        uint32_t slots = 1024;
        while (slots < UINT32_MAX / 4 && slots < 2 * n)
            slots *= 2;
        ok = fo_index_init(&children, slots);
    }
    for (uint32_t id = 0; ok && id < n; id++) {
        const fo_node_info *node = &in[id];
        uint32_t merged;
        int fresh = 1;
        if (node->parent == FO_NONE) {
            if (roots[node->proc] != FO_NONE) {
                ok = 0; /* one root per process */
                break;
            }
            merged = r->count++;
            roots[node->proc] = merged;
        } else if (distinct) {
            merged = r->count++;
        } else {
            merged = merged_child(r, &children, map[node->parent], names[id], &fresh);
            if (merged == FO_NONE) {
                ok = 0;
                break;
            }
        }
        fo_render_node *m = &r->nodes[merged];
        if (fresh) {
            memset(m, 0, sizeof(*m));
            m->parent = node->parent == FO_NONE ? FO_NONE : map[node->parent];
            m->name = names[id];
            m->proc = node->proc;
            m->depth = node->parent == FO_NONE ? 0 : r->nodes[m->parent].depth + 1;
        }
        map[id] = merged;
        if (names[id] == FO_NONE || !r->dense_dropped[names[id]]) {
            m->self_ns = add_saturating(m->self_ns, node->self_ns);
            m->samples = add_saturating(m->samples, node->samples);
            m->weight = add_saturating(m->weight, node->weight);
            m->alloc_words = add_saturating(m->alloc_words, node->alloc_words);
            m->alloc_samples = add_saturating(m->alloc_samples, node->alloc_samples);
        }
    }
    free(map);
    free(names);
    free(t.frame_dense);
    fo_index_destroy(&t.index);
    fo_index_destroy(&children);
    return ok;
}

/* --- sums, children, orders --------------------------------------------- */

static uint64_t round_us(uint64_t ns)
{
    return ns / 1000 + (ns % 1000 >= 500 ? 1 : 0);
}

/* Children come after their parents: one backward pass sums subtrees. */
static void sum_up(fo_render *r)
{
    for (uint32_t id = 0; id < r->count; id++) {
        fo_render_node *n = &r->nodes[id];
        n->self_us = round_us(n->self_ns);
        n->total_us = n->self_us;
        n->samples_below = n->samples;
        n->alloc_below = n->alloc_words;
        n->alloc_samples_below = n->alloc_samples;
    }
    for (uint32_t id = r->count; id-- > 0;) {
        const fo_render_node *n = &r->nodes[id];
        if (n->parent != FO_NONE) {
            fo_render_node *p = &r->nodes[n->parent];
            p->total_us = add_saturating(p->total_us, n->total_us);
            p->samples_below = add_saturating(p->samples_below, n->samples_below);
            p->alloc_below = add_saturating(p->alloc_below, n->alloc_below);
            p->alloc_samples_below = add_saturating(p->alloc_samples_below, n->alloc_samples_below);
        }
    }
}

int fo_render_timed(const fo_render_node *n)
{
    return n->total_us > 0 || n->samples_below > 0;
}

static int live(const fo_render_node *n)
{
    return fo_render_timed(n) || n->alloc_below > 0 || n->alloc_samples_below > 0;
}

static int is_stack(const fo_render_node *n)
{
    return n->self_us > 0 || n->samples > 0 || n->alloc_words > 0 || n->alloc_samples > 0;
}

/* Each node's live children, twice: by name, and by name + ";". */
static int order_children(fo_render *r)
{
    uint32_t m = r->count;
    r->child_start = calloc((size_t)m + 1, sizeof(uint32_t));
    r->by_name = malloc(sizeof(uint32_t) * ((size_t)m + 1));
    r->by_desc = malloc(sizeof(uint32_t) * ((size_t)m + 1));
    uint32_t *tmp = malloc(sizeof(uint32_t) * ((size_t)m + 1));
    if (r->child_start == NULL || r->by_name == NULL || r->by_desc == NULL || tmp == NULL) {
        free(tmp);
        return 0;
    }
    for (uint32_t id = 0; id < m; id++) {
        const fo_render_node *n = &r->nodes[id];
        if (n->parent != FO_NONE && live(n))
            r->child_start[n->parent + 1]++;
    }
    for (uint32_t id = 0; id < m; id++)
        r->child_start[id + 1] += r->child_start[id];
    /* tmp: next free place of each node's range */
    memcpy(tmp, r->child_start, sizeof(uint32_t) * m);
    for (uint32_t id = 0; id < m; id++) {
        const fo_render_node *n = &r->nodes[id];
        if (n->parent != FO_NONE && live(n))
            r->by_name[tmp[n->parent]++] = id;
    }
    memcpy(r->by_desc, r->by_name, sizeof(uint32_t) * r->child_start[m]);
    order_ctx by_name = {r, 0}, by_desc = {r, 1};
    for (uint32_t id = 0; id < m; id++) {
        uint32_t first = r->child_start[id], k = r->child_start[id + 1] - first;
        if (k > 1) {
            sort_ids(r->by_name + first, k, tmp, &by_name);
            sort_ids(r->by_desc + first, k, tmp, &by_desc);
        }
    }
    free(tmp);
    return 1;
}

/* Preorder of each process's live nodes, children by name. */
static int build_trees(fo_render *r, const uint32_t *roots)
{
    uint32_t m = r->count;
    r->tree = malloc(sizeof(uint32_t) * ((size_t)m + 1));
    r->tree_start = calloc((size_t)r->process_count + 1, sizeof(uint32_t));
    uint32_t *todo = malloc(sizeof(uint32_t) * ((size_t)m + 1));
    if (r->tree == NULL || r->tree_start == NULL || todo == NULL) {
        free(todo);
        return 0;
    }
    uint32_t out = 0;
    for (uint32_t p = 0; p < r->process_count; p++) {
        r->tree_start[p] = out;
        if (roots[p] == FO_NONE || !live(&r->nodes[roots[p]]))
            continue;
        uint32_t depth = 0;
        todo[depth++] = roots[p];
        while (depth > 0) {
            uint32_t id = todo[--depth];
            r->tree[out++] = id;
            for (uint32_t i = r->child_start[id + 1]; i-- > r->child_start[id];)
                todo[depth++] = r->by_name[i];
        }
    }
    r->tree_start[r->process_count] = out;
    free(todo);
    return 1;
}

/* Text lengths, and which terminals get a text within the budget (in
 * preorder, the order fo_render_texts writes them). */
static int plan_texts(fo_render *r, uint64_t max_text_bytes)
{
    uint32_t m = r->count;
    uint8_t *below = calloc((size_t)m + 1, 1); /* a stack below this node */
    uint32_t *owner_below = malloc(sizeof(uint32_t) * ((size_t)m + 1));
    r->terminals = malloc(sizeof(uint32_t) * ((size_t)m + 1));
    if (below == NULL || owner_below == NULL || r->terminals == NULL) {
        free(below);
        free(owner_below);
        return 0;
    }
    for (uint32_t id = 0; id < m; id++) {
        fo_render_node *n = &r->nodes[id];
        uint64_t len = 0;
        if (n->parent != FO_NONE) {
            uint32_t name_len;
            node_text(r, id, &name_len);
            const fo_render_node *p = &r->nodes[n->parent];
            len = p->parent == FO_NONE ? name_len : (uint64_t)p->text_len + 1 + name_len;
        }
        n->text_len = len > UINT32_MAX ? UINT32_MAX : (uint32_t)len;
        owner_below[id] = FO_NONE;
        n->owner = FO_NONE;
    }
    for (uint32_t id = m; id-- > 0;) {
        const fo_render_node *n = &r->nodes[id];
        if (n->parent != FO_NONE && (below[id] || is_stack(n)))
            below[n->parent] = 1;
    }
    for (uint32_t i = 0; i < r->tree_start[r->process_count]; i++) {
        uint32_t id = r->tree[i];
        const fo_render_node *n = &r->nodes[id];
        if (!is_stack(n) || below[id])
            continue;
        if (n->text_len == UINT32_MAX || r->text_bytes + n->text_len > max_text_bytes)
            continue;
        r->text_bytes += n->text_len;
        if (n->text_len > r->max_text_len)
            r->max_text_len = n->text_len;
        r->terminals[r->terminal_count++] = id;
        owner_below[id] = id;
    }
    for (uint32_t id = m; id-- > 0;) {
        const fo_render_node *n = &r->nodes[id];
        if (n->parent != FO_NONE && owner_below[id] != FO_NONE && owner_below[n->parent] == FO_NONE)
            owner_below[n->parent] = owner_below[id];
    }
    for (uint32_t id = 0; id < m; id++) {
        fo_render_node *n = &r->nodes[id];
        if (!is_stack(n))
            continue;
        n->owner = owner_below[id];
        if (n->owner == FO_NONE)
            r->without_text++;
    }
    free(below);
    free(owner_below);
    return 1;
}

typedef struct {
    uint32_t node;
    uint32_t own;  /* next child by name: its own stack */
    uint32_t desc; /* next child by name + ";": the stacks below it */
} walk;

/* Each process's stacks in text order. Below a node, the texts are its
 * children's own texts ("…;name") and those of their subtrees
 * ("…;name;…"), interleaved by that order: one merge of the two sorted
 * child lists per node. */
static int build_stacks(fo_render *r, const uint32_t *roots)
{
    uint32_t m = r->count;
    uint32_t max_depth = 0;
    for (uint32_t id = 0; id < m; id++)
        if (r->nodes[id].depth > max_depth)
            max_depth = r->nodes[id].depth;
    r->stacks = malloc(sizeof(uint32_t) * ((size_t)m + 1));
    r->stack_start = calloc((size_t)r->process_count + 1, sizeof(uint32_t));
    walk *path = malloc(sizeof(walk) * ((size_t)max_depth + 2));
    if (r->stacks == NULL || r->stack_start == NULL || path == NULL) {
        free(path);
        return 0;
    }
    uint32_t out = 0;
    for (uint32_t p = 0; p < r->process_count; p++) {
        r->stack_start[p] = out;
        uint32_t root = roots[p];
        if (root == FO_NONE || !live(&r->nodes[root]))
            continue;
        if (is_stack(&r->nodes[root]) && r->nodes[root].owner != FO_NONE)
            r->stacks[out++] = root;
        uint32_t depth = 0;
        path[depth++] = (walk){root, r->child_start[root], r->child_start[root]};
        while (depth > 0) {
            walk *w = &path[depth - 1];
            uint32_t end = r->child_start[w->node + 1];
            if (w->own == end && w->desc == end) {
                depth--;
                continue;
            }
            int take_own = w->desc == end;
            if (!take_own && w->own < end) {
                uint32_t a = r->by_name[w->own], b = r->by_desc[w->desc], la, lb;
                const char *ta = node_text(r, a, &la);
                const char *tb = node_text(r, b, &lb);
                take_own = compare_keys(ta, la, 0, tb, lb, 1) < 0;
            }
            if (take_own) {
                uint32_t id = r->by_name[w->own++];
                if (is_stack(&r->nodes[id]) && r->nodes[id].owner != FO_NONE)
                    r->stacks[out++] = id;
            } else {
                uint32_t id = r->by_desc[w->desc++];
                if (r->child_start[id + 1] > r->child_start[id])
                    path[depth++] = (walk){id, r->child_start[id], r->child_start[id]};
            }
        }
    }
    r->stack_start[r->process_count] = out;
    free(path);
    return 1;
}

/* --- the interface ------------------------------------------------------- */

fo_render *fo_render_new(const fo_node_info *nodes, uint32_t node_count, uint32_t process_count,
                         const fo_render_name *names, uint32_t name_count, uint64_t max_text_bytes)
{
    fo_render *r = calloc(1, sizeof(*r));
    uint32_t *roots = malloc(sizeof(uint32_t) * ((size_t)process_count + 1));
    if (r == NULL || roots == NULL) {
        free(r);
        free(roots);
        return NULL;
    }
    r->process_count = process_count;
    r->names = names;
    r->names_given = name_count;
    r->nodes = malloc(sizeof(fo_render_node) * ((size_t)node_count + 1));
    for (uint32_t p = 0; p < process_count; p++)
        roots[p] = FO_NONE;
    int ok = r->nodes != NULL && merge(r, nodes, node_count, roots);
    if (ok) {
        sum_up(r);
        ok = order_children(r) && build_trees(r, roots) && plan_texts(r, max_text_bytes) &&
             build_stacks(r, roots);
    }
    free(roots);
    if (!ok) {
        fo_render_free(r);
        return NULL;
    }
    return r;
}

void fo_render_free(fo_render *r)
{
    if (r == NULL)
        return;
    free(r->nodes);
    free(r->dense_frame);
    free(r->dense_dropped);
    free(r->by_name);
    free(r->by_desc);
    free(r->child_start);
    free(r->tree);
    free(r->tree_start);
    free(r->stacks);
    free(r->stack_start);
    free(r->terminals);
    free(r);
}

uint32_t fo_render_node_count(const fo_render *r)
{
    return r->count;
}

const fo_render_node *fo_render_node_at(const fo_render *r, uint32_t id)
{
    return &r->nodes[id];
}

uint32_t fo_render_name_count(const fo_render *r)
{
    return r->dense_count;
}

uint32_t fo_render_name_frame(const fo_render *r, uint32_t dense)
{
    return r->dense_frame[dense];
}

int fo_render_name_dropped(const fo_render *r, uint32_t dense)
{
    return r->dense_dropped[dense];
}

const uint32_t *fo_render_tree(const fo_render *r, uint32_t proc, uint32_t *count)
{
    *count = r->tree_start[proc + 1] - r->tree_start[proc];
    return r->tree + r->tree_start[proc];
}

const uint32_t *fo_render_stacks(const fo_render *r, uint32_t proc, uint32_t *count)
{
    *count = r->stack_start[proc + 1] - r->stack_start[proc];
    return r->stacks + r->stack_start[proc];
}

uint32_t fo_render_terminal_count(const fo_render *r)
{
    return r->terminal_count;
}

uint64_t fo_render_text_bytes(const fo_render *r)
{
    return r->text_bytes;
}

uint64_t fo_render_stacks_without_text(const fo_render *r)
{
    return r->without_text;
}

/* Preorder keeps the path buffer right: when a node is visited, the
 * buffer holds the text of the node visited before it, which starts with
 * the text of this node's parent. */
int fo_render_texts(const fo_render *r, fo_render_text_fn fn, void *ctx)
{
    if (r->terminal_count == 0)
        return 1;
    char *buf = malloc((size_t)r->max_text_len + 1);
    if (buf == NULL)
        return 0;
    uint32_t next = 0;
    int ok = 1;
    for (uint32_t i = 0; ok && i < r->tree_start[r->process_count] && next < r->terminal_count; i++) {
        uint32_t id = r->tree[i];
        const fo_render_node *n = &r->nodes[id];
        /* a root's text is empty; longer texts than the longest terminal's
         * hold no terminal below them */
        if (n->parent != FO_NONE && n->text_len <= r->max_text_len) {
            uint32_t name_len;
            const char *name = node_text(r, id, &name_len);
            uint32_t at = n->text_len - name_len;
            if (r->nodes[n->parent].parent != FO_NONE)
                buf[at - 1] = ';';
            if (name_len > 0)
                memcpy(buf + at, name, name_len);
        }
        if (r->terminals[next] == id) {
            ok = fn(ctx, id, buf, n->text_len);
            next++;
        }
    }
    free(buf);
    return ok;
}
