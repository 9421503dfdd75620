/* seq_trace events of GenServer request/reply traffic, decoded for the
 * span graph. */
#ifndef FO_SEQ_H
#define FO_SEQ_H

#include <erl_nif.h>
#include <stdint.h>

typedef enum { FO_SEQ_REQUEST = 1, FO_SEQ_REPLY } fo_seq_kind;

typedef struct {
    int is_send;     /* send event (else receive) */
    fo_seq_kind kind;
    uint64_t from;   /* sender pid key */
    uint64_t to;     /* receiver pid key; 0 when it is an alias (a reply's send) */
    uint64_t tag;    /* the call tag's key: the request and its reply share it */
} fo_seq_event;

/* Info is {send | 'receive', Serial, From, To, Msg}. 1 when Msg is a
 * request {'$gen_call', {Pid, Tag}, _} or looks like a reply {Tag, _}
 * (Tag a reference or [alias | Ref]); 0 for anything else. */
int fo_seq_decode(ErlNifEnv *env, ERL_NIF_TERM info, fo_seq_event *out);

#endif
