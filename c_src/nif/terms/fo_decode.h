/* Standard trace messages ({trace_ts, Pid, Tag, ..., Ts}) to core events. */
#ifndef FO_DECODE_H
#define FO_DECODE_H

#include <erl_nif.h>

#include "fo_event.h"
#include "fo_session.h"

typedef enum { FO_DECODED = 0, FO_DECODE_IGNORED, FO_DECODE_MALFORMED } fo_decode_result;

/* native_per_second converts integer timestamps to nanoseconds, from
 * which offset_ns is taken (graph sessions: to the tracer clock; 0
 * otherwise). A timestamp out of int64 nanoseconds is malformed. */
fo_decode_result fo_decode_trace_msg(ErlNifEnv *env, ERL_NIF_TERM msg, int64_t native_per_second,
                                     int64_t offset_ns, fo_event *out);

/* A tag and its payload, as both trace messages and tracer callbacks
 * give them; caller is the call's match-spec result or NULL. Fills all of
 * *out but pid and ts_ns. */
fo_decode_result fo_decode_event(ErlNifEnv *env, ERL_NIF_TERM tag, ERL_NIF_TERM payload,
                                 const ERL_NIF_TERM *caller, fo_event *out);

/* fo_decode_event, but module and function of the MFAs are left
 * unchecked (any term): the tracer callbacks append events as they come
 * and the fold checks them with fo_decode_check_atoms before a core sees
 * them, off the traced process. The terms are only compared and tested,
 * never followed, so they need not outlive the callback. */
fo_decode_result fo_decode_event_deferred(ErlNifEnv *env, ERL_NIF_TERM tag, ERL_NIF_TERM payload,
                                          const ERL_NIF_TERM *caller, fo_event *out);

/* A collection's start or end (minor or major): the tags of the
 * `garbage_collection` flag's events. */
int fo_decode_is_collection_tag(ERL_NIF_TERM tag);

/* The events whose tag says all a CPU-sampled session keeps of them (an
 * `in`, a collection's start or end: their time is read by the caller):
 * 1 and *out (kind and flags) for those, else 0. */
int fo_decode_tag_only(ERL_NIF_TERM tag, fo_event *out);

/* The check fo_decode_event_deferred left out: FO_DECODE_MALFORMED when
 * the event's own MFA is not one; a caller that is not one is dropped
 * (unknown caller), as fo_decode_event does. Any env will do (atoms are
 * immediates). */
fo_decode_result fo_decode_check_atoms(ErlNifEnv *env, fo_event *ev);

/* How allocation is read from gc events (new/1's alloc option). */
typedef enum {
    FO_ALLOC_OFF = 0,
    FO_ALLOC_ALL,      /* heap_size + mbuf_size */
    FO_ALLOC_HEAP_ONLY /* heap_size: call tracing builds its own terms in
                          heap fragments, 4 words and more per event */
} fo_alloc_kind;

/* A gc start or end event's info list ([{heap_size, W}, {mbuf_size, W},
 * ...]): ev->heap_words becomes heap_size (+ mbuf_size for
 * FO_ALLOC_ALL), flagged FO_EVF_HAS_HEAP. Leaves ev as it is when info
 * has no heap_size (or ev is no gc event, or kind is FO_ALLOC_OFF): the
 * collection then samples no allocation. */
void fo_decode_gc_heap(ErlNifEnv *env, ERL_NIF_TERM info, fo_event *ev, fo_alloc_kind kind);

/* fo_decode_gc_heap for a decoded trace message ({trace_ts, Pid, Tag,
 * Info, Ts}). */
void fo_decode_trace_msg_heap(ErlNifEnv *env, ERL_NIF_TERM msg, fo_event *ev, fo_alloc_kind kind);

/* {M, F, Arity} or {M, F, Args} into an fo_mfa; 0 when it is neither. */
int fo_decode_mfa(ErlNifEnv *env, ERL_NIF_TERM term, fo_mfa *out);

/* A stacktrace frame, {M, F, A} or {M, F, A, Location}: its MFA part. */
int fo_decode_frame(ErlNifEnv *env, ERL_NIF_TERM term, fo_mfa *out);

/* What a decoded event does to a session: applied, or counted as ignored
 * or malformed. The one place both front ends hand events to the core. */
void fo_decode_apply(fo_session *s, fo_decode_result result, const fo_event *ev);

/* Native monotonic units to nanoseconds less offset_ns into *ns; 0 (and
 * *ns untouched) when that does not fit in int64. */
int fo_native_to_ns(int64_t value, int64_t native_per_second, int64_t offset_ns, int64_t *ns);
/* abs_ns - offset_ns into *ns; 0 (and *ns untouched) on overflow. */
int fo_shift_ns(int64_t abs_ns, int64_t offset_ns, int64_t *ns);
/* Nanoseconds to native units, saturated at the ends of int64. */
int64_t fo_ns_to_native(int64_t ns, int64_t native_per_second);

#endif
