/* A kept tail request, copied out of its entry and the sampler's buffers
 * as it ends (fo_tail_kept.c): its records, where it was read waiting,
 * and the samples taken in its slices, named. The entry goes back to its
 * process (or the table) at once; the profile is built from the copy
 * when someone reads it (tail_replay/2), which may be never: the trace
 * store keeps it until then. A resource: freed with the last reference. */
#ifndef FO_TAIL_KEPT_H
#define FO_TAIL_KEPT_H

#include <erl_nif.h>
#include <stdint.h>

#include "fo_cpu.h"
#include "fo_tail_entry.h"

/* A frame of the copy's stacks: its function under its parent frame
 * (KEPT_ROOT: none). The samples' stacks share their common outer
 * frames, so a request that repeats its calls (or recurses deep) keeps
 * each path once. */
#define KEPT_ROOT UINT32_MAX
typedef struct {
    fo_mfa mfa;
    uint32_t parent;
} kept_frame;

/* A sample of the copy: when, on which thread, and its named chain
 * (fo_cpu_chain) as the frame it ends at: its C leaf (has_c_leaf), under
 * the Erlang function that called into C (has_caller) or under its
 * Erlang frames, leafmost first. */
typedef struct {
    int64_t ts_ns;
    uint64_t thread;
    uint32_t frame;
    uint8_t long_chain, has_c_leaf, has_caller;
} kept_sample;

typedef struct {
    uint64_t pid;
    int64_t end_ns;
    uint32_t count, dropped; /* records held, and dropped (as the entry's) */
    tail_slice *slices;
    uint32_t ctx_count;
    tail_context *ctx;  /* where the helper read it stopped ... */
    fo_mfa *ctx_frames; /* ... and those stacks' frames */
    uint32_t ctx_frame_count;
    uint32_t sample_count, frame_count;
    kept_sample *samples; /* in time order */
    kept_frame *frames;
    uint32_t samples_dropped; /* past max_samples or max_frames */
    uint64_t bytes;           /* what the copy holds, all of it */
    int slices_owned;         /* slices: an array of its own, else inline_slices */
    tail_slice inline_slices[];
} fo_tail_kept;

int fo_tail_kept_open(ErlNifEnv *env);

/* Entry e's request (ended; without flags, its slices already cut from
 * its samples) copied, with the samples of its slices, at most
 * max_samples of them and max_frames frames (past them counted in
 * samples_dropped). owned: the entry's slices, taken over (the copy
 * frees them; the entry has them no more), or NULL: copied. NULL when
 * memory is short (owned freed). The caller owns one reference
 * (enif_release_resource). */
fo_tail_kept *fo_tail_kept_make(tail_entry *e, tail_slice *owned, uint32_t max_samples, uint32_t max_frames);

/* Sample sm of copy k as the chain it was taken as. */
void fo_tail_kept_chain(const fo_tail_kept *k, const kept_sample *sm, fo_cpu_chain *chain);

/* The copy a term names, or NULL. */
const fo_tail_kept *fo_tail_kept_get(ErlNifEnv *env, ERL_NIF_TERM term);

#endif
