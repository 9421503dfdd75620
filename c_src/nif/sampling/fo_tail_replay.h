/* A kept tail request's copy replayed into a core session
 * (fo_tail_replay.c). */
#ifndef FO_TAIL_REPLAY_H
#define FO_TAIL_REPLAY_H

#include <erl_nif.h>

#include "fo_resource.h"
#include "fo_tail_kept.h"

/* A kept request's copy into res's core, which then stops at the
 * request's end (or its last record held, when some were dropped) and
 * takes no more samples. Nonzero when memory is short. */
int fo_tail_replay_into(fo_session_res *res, ErlNifEnv *env, const fo_tail_kept *k);

// tail_replay(Session, Kept) -> ok
//   Applies a kept request's copy (tail_keep/3) to the CPU-sampled
//   Session (new/1 with cpu_sampled) and stops it at the end of the work
//   (or of the last slice held, when some were dropped). finish(Session,
//   stop) then gives the profile. A copy may be replayed any number of
//   times, each into a new session.
ERL_NIF_TERM fo_tail_replay_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
