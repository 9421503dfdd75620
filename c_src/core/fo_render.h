/* The views of a finished calling-context tree, built in one pass each so
 * that their cost grows with what is kept, not with depth times stacks.
 *
 * In: the nodes of a finished session (fo_session_node, parents first,
 * siblings with distinct frames) and a text for every frame (the front end
 * names frames; the core does not know atoms). Frames whose texts are
 * equal are one frame: sibling nodes that read the same merge, their time
 * and samples added up (when every frame reads differently, which is the
 * common case, there is nothing to merge and no hashing is done). A frame
 * with no text (NULL) drops the time and samples of the nodes that end in
 * it.
 *
 * Out, per process:
 *   - the tree in preorder, children in the byte order of their names,
 *     with each node's time in microseconds (self and total) and samples:
 *     the form exporters walk (it also holds the nodes that have only
 *     allocation at or below them: fo_render_timed tells them apart);
 *   - its stacks: the nodes with time (or samples), in the byte order of
 *     their texts "a;b;c" (root first, ';' between frames, the process
 *     root itself being ""), which is the order sorting the texts gives
 *     (names hold no ';': the front end replaces them);
 *   - the texts themselves, written once per "terminal" stack (one with no
 *     stack below it): every other stack's text is a prefix of a terminal's
 *     text, so a front end hands it out as a slice of that one. A chain of
 *     d frames costs one text of d frames, not d of them.
 * The texts are bounded by max_text_bytes; stacks whose terminal did not
 * fit get no text and are counted (fo_render_stacks_without_text).
 *
 * Nothing here recurses: trees 100 000 deep are walked with explicit
 * stacks. */
#ifndef FO_RENDER_H
#define FO_RENDER_H

#include <stddef.h>
#include <stdint.h>

#include "fo_session.h"

typedef struct {
    const char *text; /* NULL: this frame's own time and samples are dropped */
    uint32_t len;
} fo_render_name;

typedef struct {
    uint32_t parent;  /* FO_NONE for a process root */
    uint32_t name;    /* dense name id (fo_render_name_frame); FO_NONE for a root */
    uint32_t proc;
    uint32_t depth;
    uint64_t self_ns; /* what the merged nodes add up to */
    uint64_t self_us; /* self_ns rounded to the nearest microsecond */
    uint64_t total_us; /* self_us of this node and every node below */
    uint64_t samples;
    uint64_t weight;
    uint64_t samples_below; /* samples of this node and every node below */
    uint64_t alloc_words;   /* words allocated in this stack (fo_node_info), merged */
    uint64_t alloc_samples;
    uint64_t alloc_below;   /* alloc_words of this node and every node below */
    uint64_t alloc_samples_below;
    uint32_t text_len; /* bytes of its stack text */
    uint32_t owner;    /* the terminal whose text starts with this one's;
                          FO_NONE: not a stack, or its terminal over budget */
} fo_render_node;

typedef struct fo_render fo_render;

/* NULL when memory is short or the input is inconsistent (a parent after
 * its child, a process index out of range). Frames at or past name_count
 * read as "". */
fo_render *fo_render_new(const fo_node_info *nodes, uint32_t node_count, uint32_t process_count,
                         const fo_render_name *names, uint32_t name_count, uint64_t max_text_bytes);
void fo_render_free(fo_render *r);

uint32_t fo_render_node_count(const fo_render *r);
const fo_render_node *fo_render_node_at(const fo_render *r, uint32_t id);

/* Distinct names the tree uses (root excluded); each dense id's text is
 * the one given for frame fo_render_name_frame(id) ("" for a dropped one). */
uint32_t fo_render_name_count(const fo_render *r);
uint32_t fo_render_name_frame(const fo_render *r, uint32_t dense);
/* 1 for the dense id of frames without a text. */
int fo_render_name_dropped(const fo_render *r, uint32_t dense);

/* Process proc's tree, preorder (node ids; *count of them): nodes with
 * time, samples or allocation at or below them. */
const uint32_t *fo_render_tree(const fo_render *r, uint32_t proc, uint32_t *count);

/* Whether a node of the tree has time or samples at or below it (the
 * others have only allocation there). */
int fo_render_timed(const fo_render_node *n);

/* Process proc's stacks in text order: nodes with self_us > 0, samples
 * > 0 or allocation that have a text (owner != FO_NONE). */
const uint32_t *fo_render_stacks(const fo_render *r, uint32_t proc, uint32_t *count);

/* The terminals, in the order fo_render_texts writes them. */
uint32_t fo_render_terminal_count(const fo_render *r);
uint64_t fo_render_text_bytes(const fo_render *r);
/* Stacks (self_us > 0 or samples > 0) left without a text by the budget. */
uint64_t fo_render_stacks_without_text(const fo_render *r);

/* Calls fn once per terminal with its text (valid during the call only).
 * Returns 0 when fn does, or memory is short, and stops there. */
typedef int (*fo_render_text_fn)(void *ctx, uint32_t terminal, const char *text, uint32_t len);
int fo_render_texts(const fo_render *r, fo_render_text_fn fn, void *ctx);

#endif
