#include "fo_render_nif.h"

#include <string.h>

#include "fo_atoms.h"
#include "fo_export.h"
#include "fo_render.h"

static void get_node(const unsigned char *at, fo_node_info *n)
{
    memcpy(&n->parent, at, 4);
    memcpy(&n->frame, at + 4, 4);
    memcpy(&n->proc, at + 8, 4);
    memcpy(&n->self_ns, at + 12, 8);
    memcpy(&n->samples, at + 20, 8);
    memcpy(&n->weight, at + 28, 8);
    n->depth = 0; /* fo_render computes depths */
    n->alloc_words = 0;
    n->alloc_samples = 0;
}

static uint64_t add_saturating(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The fifth element of a tree (fo_export.h): allocation per node. 0 when
 * it does not decode or names a node out of range. */
static int get_alloc(ErlNifEnv *env, ERL_NIF_TERM term, fo_node_info *nodes, uint32_t node_count)
{
    ErlNifBinary bin;
    if (!enif_inspect_binary(env, term, &bin) || bin.size % FO_EXPORT_ALLOC_BYTES != 0)
        return 0;
    for (size_t at = 0; at < bin.size; at += FO_EXPORT_ALLOC_BYTES) {
        uint32_t node;
        uint64_t words, samples;
        memcpy(&node, bin.data + at, 4);
        memcpy(&words, bin.data + at + 4, 8);
        memcpy(&samples, bin.data + at + 12, 8);
        if (node >= node_count)
            return 0;
        nodes[node].alloc_words = add_saturating(nodes[node].alloc_words, words);
        nodes[node].alloc_samples = add_saturating(nodes[node].alloc_samples, samples);
    }
    return 1;
}

static void put_be32(unsigned char *at, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        at[i] = (unsigned char)v;
}

static void put_be64(unsigned char *at, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        at[i] = (unsigned char)v;
}

/* The parts of argv: the nodes decoded and checked (parents first, every
 * frame and process in range), the names. 0: a bad argument. */
typedef struct {
    const ERL_NIF_TERM *frames, *pids;
    int frame_count, pid_count;
    fo_node_info *nodes;
    uint32_t node_count;
    uint64_t max_text_bytes;
    fo_render_name *names;
    const ERL_NIF_TERM *name_terms;
} input;

static int decode(ErlNifEnv *env, const ERL_NIF_TERM argv[], input *in)
{
    const ERL_NIF_TERM *tree;
    int arity, name_arity;
    ErlNifBinary bin;
    ErlNifUInt64 budget;
    if (!enif_get_tuple(env, argv[0], &arity, &tree) || (arity != 4 && arity != 5) ||
        !enif_get_tuple(env, tree[0], &in->frame_count, &in->frames) ||
        !enif_get_tuple(env, tree[1], &in->pid_count, &in->pids) || !enif_inspect_binary(env, tree[2], &bin) ||
        !enif_get_uint64(env, tree[3], &budget) || bin.size % FO_EXPORT_NODE_BYTES != 0 ||
        bin.size / FO_EXPORT_NODE_BYTES >= UINT32_MAX ||
        !enif_get_tuple(env, argv[1], &name_arity, &in->name_terms) || name_arity != in->frame_count)
        return 0;
    for (int p = 0; p < in->pid_count; p++) {
        if (!enif_is_pid(env, in->pids[p]))
            return 0;
    }
    in->max_text_bytes = budget;
    in->node_count = (uint32_t)(bin.size / FO_EXPORT_NODE_BYTES);
    in->nodes = enif_alloc(sizeof(fo_node_info) * ((size_t)in->node_count + 1));
    in->names = enif_alloc(sizeof(fo_render_name) * ((size_t)in->frame_count + 1));
    if (in->nodes == NULL || in->names == NULL)
        return 0;
    for (int f = 0; f < in->frame_count; f++) {
        ErlNifBinary text;
        if (in->name_terms[f] == fo_atom_nil) {
            in->names[f] = (fo_render_name){NULL, 0};
        } else if (enif_inspect_binary(env, in->name_terms[f], &text) && text.size < UINT32_MAX) {
            in->names[f] = (fo_render_name){(const char *)text.data, (uint32_t)text.size};
        } else {
            return 0;
        }
    }
    for (uint32_t id = 0; id < in->node_count; id++) {
        fo_node_info *n = &in->nodes[id];
        get_node(bin.data + (size_t)id * FO_EXPORT_NODE_BYTES, n);
        int parent_ok = n->parent == FO_NONE || (n->parent < id && in->nodes[n->parent].proc == n->proc);
        if (!parent_ok || n->proc >= (uint32_t)in->pid_count || n->frame >= (uint32_t)in->frame_count)
            return 0;
    }
    return arity == 4 || get_alloc(env, tree[4], in->nodes, in->node_count);
}

/* Every terminal's text goes into one binary, one after the other: a
 * stack's text is then a slice of it (one allocation, not one per
 * terminal). */
typedef struct {
    ERL_NIF_TERM all;    /* the binary */
    unsigned char *at;   /* where the next text goes */
    unsigned char *base;
    size_t *offsets;     /* by node id: where a terminal's text starts */
} text_ctx;

static int put_text(void *ctx, uint32_t terminal, const char *text, uint32_t len)
{
    text_ctx *c = ctx;
    c->offsets[terminal] = (size_t)(c->at - c->base);
    if (len > 0)
        memcpy(c->at, text, len);
    c->at += len;
    return 1;
}

static int has_alloc(const fo_render_node *n)
{
    return n->alloc_below > 0 || n->alloc_samples_below > 0;
}

/* The nodes of proc's tree that have time or samples at or below them,
 * or with alloc set those with allocation: the preorder of a subset that
 * holds every ancestor of its members is the subset's preorder. */
static uint32_t tree_count(const fo_render *r, uint32_t proc, int alloc)
{
    uint32_t count, kept = 0;
    const uint32_t *ids = fo_render_tree(r, proc, &count);
    for (uint32_t i = 0; i < count; i++) {
        const fo_render_node *n = fo_render_node_at(r, ids[i]);
        kept += (uint32_t)(alloc ? has_alloc(n) : fo_render_timed(n));
    }
    return kept;
}

/* The time tree, or with alloc the allocation tree in the same records:
 * self and total are words, samples the collections counted there,
 * weight its words again. */
static ERL_NIF_TERM tree_binary(ErlNifEnv *env, const fo_render *r, uint32_t proc, int alloc)
{
    uint32_t count;
    const uint32_t *ids = fo_render_tree(r, proc, &count);
    ERL_NIF_TERM term;
    unsigned char *at =
        enif_make_new_binary(env, (size_t)tree_count(r, proc, alloc) * FO_TREE_NODE_BYTES, &term);
    if (at == NULL)
        return 0;
    for (uint32_t i = 0; i < count; i++) {
        const fo_render_node *n = fo_render_node_at(r, ids[i]);
        if (alloc ? !has_alloc(n) : !fo_render_timed(n))
            continue;
        put_be32(at, n->depth);
        put_be32(at + 4, n->name);
        put_be64(at + 8, alloc ? n->alloc_words : n->self_us);
        put_be64(at + 16, alloc ? n->alloc_below : n->total_us);
        put_be64(at + 24, alloc ? n->alloc_samples : n->samples);
        put_be64(at + 32, alloc ? n->alloc_words : n->weight);
        at += FO_TREE_NODE_BYTES;
    }
    return term;
}

static ERL_NIF_TERM stack_text(ErlNifEnv *env, const text_ctx *texts, const fo_render_node *n)
{
    return enif_make_sub_binary(env, texts->all, texts->offsets[n->owner], n->text_len);
}

/* The maps (stacks, samples, trees, alloc, alloc trees), over the
 * processes that have something in each. */
#define MAPS 5
static int build_maps(ErlNifEnv *env, const input *in, const fo_render *r, const text_ctx *texts,
                      ERL_NIF_TERM out[MAPS])
{
    size_t procs = (size_t)in->pid_count + 1;
    ERL_NIF_TERM *keys[MAPS], *values[MAPS];
    size_t used[MAPS] = {0, 0, 0, 0, 0};
    int ok = 1;
    for (int m = 0; m < MAPS; m++) {
        keys[m] = enif_alloc(sizeof(ERL_NIF_TERM) * procs);
        values[m] = enif_alloc(sizeof(ERL_NIF_TERM) * procs);
        ok = ok && keys[m] != NULL && values[m] != NULL;
    }
    for (int p = 0; ok && p < in->pid_count; p++) {
        uint32_t count;
        const uint32_t *ids = fo_render_stacks(r, (uint32_t)p, &count);
        ERL_NIF_TERM timed = enif_make_list(env, 0), sampled = enif_make_list(env, 0);
        ERL_NIF_TERM allocated = enif_make_list(env, 0);
        int any_timed = 0, any_sampled = 0, any_alloc = 0;
        for (uint32_t i = count; i-- > 0;) {
            const fo_render_node *n = fo_render_node_at(r, ids[i]);
            ERL_NIF_TERM text = stack_text(env, texts, n);
            if (n->self_us > 0) {
                timed = enif_make_list_cell(env, enif_make_tuple2(env, text, enif_make_uint64(env, n->self_us)),
                                            timed);
                any_timed = 1;
            }
            if (n->samples > 0) {
                ERL_NIF_TERM entry = enif_make_tuple3(env, text, enif_make_uint64(env, n->samples),
                                                      enif_make_uint64(env, n->weight));
                sampled = enif_make_list_cell(env, entry, sampled);
                any_sampled = 1;
            }
            if (n->alloc_words > 0) {
                ERL_NIF_TERM entry = enif_make_tuple2(env, text, enif_make_uint64(env, n->alloc_words));
                allocated = enif_make_list_cell(env, entry, allocated);
                any_alloc = 1;
            }
        }
        ERL_NIF_TERM lists[MAPS] = {timed, sampled, 0, allocated, 0};
        int any[MAPS] = {any_timed, any_sampled, tree_count(r, (uint32_t)p, 0) > 0, any_alloc,
                         tree_count(r, (uint32_t)p, 1) > 0};
        if (any[2] && (lists[2] = tree_binary(env, r, (uint32_t)p, 0)) == 0)
            ok = 0;
        if (ok && any[4] && (lists[4] = tree_binary(env, r, (uint32_t)p, 1)) == 0)
            ok = 0;
        for (int m = 0; ok && m < MAPS; m++) {
            if (any[m]) {
                keys[m][used[m]] = in->pids[p];
                values[m][used[m]++] = lists[m];
            }
        }
    }
    for (int m = 0; m < MAPS; m++) {
        if (ok && !enif_make_map_from_arrays(env, keys[m], values[m], used[m], &out[m]))
            ok = 0;
        enif_free(keys[m]);
        enif_free(values[m]);
    }
    return ok;
}

static ERL_NIF_TERM tree_names(ErlNifEnv *env, const input *in, const fo_render *r)
{
    uint32_t count = fo_render_name_count(r);
    ERL_NIF_TERM *items = enif_alloc(sizeof(ERL_NIF_TERM) * ((size_t)count + 1));
    if (items == NULL)
        return 0;
    ERL_NIF_TERM empty;
    enif_make_new_binary(env, 0, &empty);
    for (uint32_t d = 0; d < count; d++) {
        uint32_t frame = fo_render_name_frame(r, d);
        items[d] = fo_render_name_dropped(r, d) || frame >= (uint32_t)in->frame_count ? empty : in->name_terms[frame];
    }
    ERL_NIF_TERM tuple = enif_make_tuple_from_array(env, items, count);
    enif_free(items);
    return tuple;
}

/* A tree this small, with this few bytes of texts, renders on the calling
 * scheduler (well under a millisecond); a bigger one on a dirty scheduler
 * (the hop costs tens of microseconds on a quiet machine, milliseconds on
 * a loaded one: most profiles are small). */
#define RENDER_INLINE_NODES 5000u
#define RENDER_INLINE_TEXT_BYTES (512u << 10)

static ERL_NIF_TERM render(ErlNifEnv *env, const ERL_NIF_TERM argv[], int dirty)
{
    input in;
    memset(&in, 0, sizeof(in));
    if (!decode(env, argv, &in)) {
        enif_free(in.nodes);
        enif_free(in.names);
        return enif_make_badarg(env);
    }
    fo_render *r = fo_render_new(in.nodes, in.node_count, (uint32_t)in.pid_count, in.names,
                                 (uint32_t)in.frame_count, in.max_text_bytes);
    if (!dirty && r != NULL &&
        (in.node_count > RENDER_INLINE_NODES || fo_render_text_bytes(r) > RENDER_INLINE_TEXT_BYTES)) {
        fo_render_free(r);
        enif_free(in.nodes);
        enif_free(in.names);
        return enif_schedule_nif(env, "render", ERL_NIF_DIRTY_JOB_CPU_BOUND, fo_render_dirty_nif, 2, argv);
    }
    size_t *offsets = enif_alloc(sizeof(size_t) * ((size_t)in.node_count + 1));
    ERL_NIF_TERM maps[MAPS], names = 0;
    text_ctx ctx = {0, NULL, NULL, offsets};
    int ok = r != NULL && offsets != NULL;
    if (ok) {
        size_t bytes = (size_t)fo_render_text_bytes(r);
        ctx.base = ctx.at = enif_make_new_binary(env, bytes, &ctx.all);
        ok = (ctx.base != NULL || bytes == 0) && fo_render_texts(r, put_text, &ctx) &&
             build_maps(env, &in, r, &ctx, maps) && (names = tree_names(env, &in, r)) != 0;
    }
    ERL_NIF_TERM result = ok ? enif_make_tuple7(env, maps[0], maps[1], maps[2], names,
                                                enif_make_uint64(env, fo_render_stacks_without_text(r)), maps[3],
                                                maps[4])
                             : enif_raise_exception(env, enif_make_atom(env, "enomem"));
    fo_render_free(r);
    enif_free(offsets);
    enif_free(in.nodes);
    enif_free(in.names);
    if (!dirty)
        enif_consume_timeslice(env, 10);
    return result;
}

ERL_NIF_TERM fo_render_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return render(env, argv, 0);
}

ERL_NIF_TERM fo_render_dirty_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return render(env, argv, 1);
}
