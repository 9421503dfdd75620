/* seq_trace events of a graph trace, decoded for the span graph. */
#ifndef FO_SEQ_H
#define FO_SEQ_H

#include <erl_nif.h>

#include "fo_follow.h"

/* Info is {send | 'receive', Serial, From, To, Msg}: 1 and *out (a
 * request {'$gen_call', {Pid, Tag}, _}, something that looks like a reply
 * {Tag, _} with Tag a reference or [alias | Ref], or any other message),
 * 0 when Info is not that shape or From is not a local pid. */
int fo_seq_decode(ErlNifEnv *env, ERL_NIF_TERM info, fo_corr *out);

#endif
