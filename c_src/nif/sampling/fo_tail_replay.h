/* A kept tail request replayed into a core session (fo_tail_replay.c):
 * private to the tail path's files. */
#ifndef FO_TAIL_REPLAY_H
#define FO_TAIL_REPLAY_H

#include <erl_nif.h>

#include "fo_resource.h"
#include "fo_tail_entry.h"

/* Entry e's records (its request ended, and, without flags, its slices
 * cut from the samples) into res's core, which then stops at the
 * request's end (or its last record held, when some were dropped).
 * Nonzero when memory is short. */
int fo_tail_replay_into(fo_session_res *res, ErlNifEnv *env, tail_entry *e);

#endif
