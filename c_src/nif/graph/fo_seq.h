/* seq_trace events of a graph trace, decoded for the span graph. */
#ifndef FO_SEQ_H
#define FO_SEQ_H

#include <erl_nif.h>

#include "fo_follow.h"
#include "fo_remote.h"

/* Info is {send | 'receive', Serial, From, To, Msg}: 1 and *out (a
 * request {'$gen_call', {Pid, Tag}, _}, something that looks like a reply
 * {Tag, _} with Tag a reference or [alias | Ref], or any other message),
 * 0 when Info is not that shape or From is no process. With remote, pids
 * of other nodes (and {Name, Node} destinations) get remote keys and a
 * request to or from one its wire key; without, they are no process. */
int fo_seq_decode(ErlNifEnv *env, ERL_NIF_TERM info, fo_corr *out, fo_remote *remote);

/* The key that joins the two halves of something seen on two nodes (a
 * call's tag, a spawn request's reference, a message's serial and
 * sender): phash2, the same on every node. Never 0. */
uint32_t fo_seq_wire(ErlNifEnv *env, ERL_NIF_TERM term);

#endif
