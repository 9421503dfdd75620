#include "fo_decode.h"

#include "fo_atoms.h"

#define MAX_ARITY 255u

/* Out of range is rejected, not saturated: a clamped time would be charged
 * as if real (every live process running to the end of time), a rejected
 * one is a malformed message or an ArgumentError, as other bad times are.
 * Nothing real comes near: int64 nanoseconds last 292 years. */
int fo_native_to_ns(int64_t value, int64_t native_per_second, int64_t offset_ns, int64_t *ns)
{
    int64_t abs_ns;
    if (native_per_second <= 0)
        return 0;
    if (native_per_second == 1000000000) {
        abs_ns = value;
    } else if (1000000000 % native_per_second == 0) {
        if (__builtin_mul_overflow(value, 1000000000 / native_per_second, &abs_ns))
            return 0;
    } else {
        /* Exact in 128 bits (|value| * 1e9 < 2^93) and truncated toward
         * zero; the long double this replaces rounded, and converted
         * out-of-range results to int64 (undefined too). */
        __int128 wide = (__int128)value * 1000000000 / native_per_second;
        if (wide < INT64_MIN || wide > INT64_MAX)
            return 0;
        abs_ns = (int64_t)wide;
    }
    return fo_shift_ns(abs_ns, offset_ns, ns);
}

int fo_shift_ns(int64_t abs_ns, int64_t offset_ns, int64_t *ns)
{
    int64_t out;
    if (__builtin_sub_overflow(abs_ns, offset_ns, &out))
        return 0;
    *ns = out;
    return 1;
}

int64_t fo_ns_to_native(int64_t ns, int64_t native_per_second)
{
    if (native_per_second == 1000000000)
        return ns;
    if (native_per_second > 0 && 1000000000 % native_per_second == 0)
        return ns / (1000000000 / native_per_second);
    /* A unit that does not divide 1e9: finer than a nanosecond (new/1
     * takes up to 1000 a nanosecond), the result can exceed int64, and the
     * long double this replaces was then converted out of range (undefined,
     * and not caught by UBSan's default checks). Saturated, not rejected:
     * stop/1, the one user, has stopped the session by then and must
     * return. Exact in 128 bits: |ns| * native_per_second < 2^127. */
    __int128 wide = (__int128)ns * native_per_second / 1000000000;
    if (wide > INT64_MAX)
        return INT64_MAX;
    if (wide < INT64_MIN)
        return INT64_MIN;
    return (int64_t)wide;
}

/* check_atoms = 0 leaves module and function unchecked (they may be any
 * term): the caller checks them before a core sees them. */
static int decode_mfa(ErlNifEnv *env, ERL_NIF_TERM term, fo_mfa *out, int check_atoms)
{
    int arity;
    const ERL_NIF_TERM *items;
    if (!enif_get_tuple(env, term, &arity, &items) || arity != 3)
        return 0;
    if (check_atoms && (!enif_is_atom(env, items[0]) || !enif_is_atom(env, items[1])))
        return 0;
    unsigned int n;
    if (!enif_get_uint(env, items[2], &n)) {
        if (!enif_get_list_length(env, items[2], &n))
            return 0;
    }
    if (n > MAX_ARITY)
        return 0;
    /* Atoms are immediates that are never collected: the term itself is a
     * stable key, turned back into text only at export. */
    out->module = (uint64_t)items[0];
    out->function = (uint64_t)items[1];
    out->arity = n;
    return 1;
}

int fo_decode_mfa(ErlNifEnv *env, ERL_NIF_TERM term, fo_mfa *out)
{
    return decode_mfa(env, term, out, 1);
}

/* Integer native time, or an erlang:now()-style {Mega, Sec, Micro}, to
 * nanoseconds less offset_ns; 0 (malformed) when out of range. */
static int decode_ts(ErlNifEnv *env, ERL_NIF_TERM term, int64_t native_per_second, int64_t offset_ns,
                     int64_t *ns)
{
    ErlNifSInt64 value;
    if (enif_get_int64(env, term, &value))
        return fo_native_to_ns(value, native_per_second, offset_ns, ns);
    int arity;
    const ERL_NIF_TERM *items;
    ErlNifSInt64 mega, sec, micro;
    if (!enif_get_tuple(env, term, &arity, &items) || arity != 3 || !enif_get_int64(env, items[0], &mega) ||
        !enif_get_int64(env, items[1], &sec) || !enif_get_int64(env, items[2], &micro) || mega < 0 ||
        mega >= 1000000000 || sec < 0 || sec >= 1000000 || micro < 0 || micro >= 1000000)
        return 0;
    /* The seconds fit easily (< 1e15), their nanoseconds do not: from
     * {9223, 372036, 854776} on (the year 2262) they overflow int64.
     * Rejected like the out-of-range fields above, not saturated: a
     * clamped timestamp would be charged as if real. */
    int64_t abs_ns;
    if (__builtin_mul_overflow(mega * 1000000 + sec, 1000000000, &abs_ns) ||
        __builtin_add_overflow(abs_ns, micro * 1000, &abs_ns))
        return 0;
    return fo_shift_ns(abs_ns, offset_ns, ns);
}

/* The part shared by trace messages and tracer-module callbacks: a tag,
 * its payload (the 4th element of a trace tuple) and, for calls, the
 * match-spec result carrying the caller (NULL when absent). */
static fo_decode_result decode_event(ErlNifEnv *env, ERL_NIF_TERM tag, ERL_NIF_TERM payload,
                                     const ERL_NIF_TERM *caller, fo_event *out, int check_atoms)
{
    out->flags = 0;
    if (tag == fo_atom_call) {
        if (!decode_mfa(env, payload, &out->mfa, check_atoms))
            return FO_DECODE_MALFORMED;
        out->kind = FO_EV_CALL;
        out->flags = FO_EVF_HAS_MFA;
        /* the {message, {caller}} result: an MFA or `undefined`; any other
         * message leaves the caller unknown */
        if (caller != NULL && decode_mfa(env, *caller, &out->caller, check_atoms))
            out->flags |= FO_EVF_HAS_CALLER;
    } else if (tag == fo_atom_return_to) {
        out->kind = FO_EV_RETURN_TO;
        if (decode_mfa(env, payload, &out->mfa, check_atoms))
            out->flags = FO_EVF_HAS_MFA;
        else if (payload != fo_atom_undefined)
            return FO_DECODE_MALFORMED;
    } else if (tag == fo_atom_in || tag == fo_atom_in_exiting) {
        out->kind = FO_EV_IN;
    } else if (tag == fo_atom_out || tag == fo_atom_out_exiting) {
        out->kind = FO_EV_OUT;
        /* where it stopped (0 when the VM does not know): native mode's
         * stacks for its wait */
        if (decode_mfa(env, payload, &out->mfa, check_atoms))
            out->flags = FO_EVF_HAS_MFA;
    } else if (tag == fo_atom_exit) {
        out->kind = FO_EV_EXIT;
    } else if (tag == fo_atom_receive) {
        out->kind = FO_EV_RECEIVE; /* the message itself is not kept */
    } else if (tag == fo_atom_gc_minor_start || tag == fo_atom_gc_major_start || tag == fo_atom_gc_start) {
        out->kind = FO_EV_GC_START;
        if (tag == fo_atom_gc_major_start)
            out->flags = FO_EVF_MAJOR_GC;
    } else if (tag == fo_atom_gc_minor_end || tag == fo_atom_gc_major_end || tag == fo_atom_gc_end) {
        out->kind = FO_EV_GC_END;
        if (tag == fo_atom_gc_major_end)
            out->flags = FO_EVF_MAJOR_GC;
    } else {
        return FO_DECODE_IGNORED;
    }
    return FO_DECODED;
}

int fo_decode_is_collection_tag(ERL_NIF_TERM tag)
{
    return tag == fo_atom_gc_minor_start || tag == fo_atom_gc_minor_end || tag == fo_atom_gc_major_start ||
           tag == fo_atom_gc_major_end;
}

int fo_decode_tag_only(ERL_NIF_TERM tag, fo_event *out)
{
    if (tag != fo_atom_in && !fo_decode_is_collection_tag(tag))
        return 0;
    /* their payloads are not read: any term */
    return decode_event(NULL, tag, 0, NULL, out, 0) == FO_DECODED;
}

fo_decode_result fo_decode_event(ErlNifEnv *env, ERL_NIF_TERM tag, ERL_NIF_TERM payload,
                                 const ERL_NIF_TERM *caller, fo_event *out)
{
    return decode_event(env, tag, payload, caller, out, 1);
}

fo_decode_result fo_decode_event_deferred(ErlNifEnv *env, ERL_NIF_TERM tag, ERL_NIF_TERM payload,
                                          const ERL_NIF_TERM *caller, fo_event *out)
{
    return decode_event(env, tag, payload, caller, out, 0);
}

fo_decode_result fo_decode_check_atoms(ErlNifEnv *env, fo_event *ev)
{
    if ((ev->flags & FO_EVF_HAS_MFA) &&
        (!enif_is_atom(env, (ERL_NIF_TERM)ev->mfa.module) || !enif_is_atom(env, (ERL_NIF_TERM)ev->mfa.function))) {
        /* a return_to into something that is not an MFA is malformed too */
        return FO_DECODE_MALFORMED;
    }
    if ((ev->flags & FO_EVF_HAS_CALLER) && (!enif_is_atom(env, (ERL_NIF_TERM)ev->caller.module) ||
                                             !enif_is_atom(env, (ERL_NIF_TERM)ev->caller.function)))
        ev->flags &= ~FO_EVF_HAS_CALLER; /* as a caller that does not decode: unknown */
    return FO_DECODED;
}

fo_decode_result fo_decode_trace_msg(ErlNifEnv *env, ERL_NIF_TERM msg, int64_t native_per_second,
                                     int64_t offset_ns, fo_event *out)
{
    int arity;
    const ERL_NIF_TERM *items;
    if (!enif_get_tuple(env, msg, &arity, &items) || arity < 5 || arity > 6)
        return FO_DECODE_MALFORMED;
    if (items[0] != fo_atom_trace_ts || !enif_is_atom(env, items[2]))
        return FO_DECODE_MALFORMED;
    ErlNifPid pid;
    if (!enif_get_local_pid(env, items[1], &pid))
        return enif_is_port(env, items[1]) ? FO_DECODE_IGNORED : FO_DECODE_MALFORMED;
    if (!decode_ts(env, items[arity - 1], native_per_second, offset_ns, &out->ts_ns))
        return FO_DECODE_MALFORMED;
    out->pid = (uint64_t)pid.pid;
    /* only calls carry a sixth element we use; a receive has one with the
     * receive pattern (its sender); other 6-tuples (return_from, send...)
     * are not ours */
    if (arity == 6 && items[2] != fo_atom_call && items[2] != fo_atom_receive)
        return FO_DECODE_IGNORED;
    return fo_decode_event(env, items[2], items[3], arity == 6 && items[2] == fo_atom_call ? &items[4] : NULL, out);
}

void fo_decode_gc_heap(ErlNifEnv *env, ERL_NIF_TERM info, fo_event *ev, fo_alloc_kind kind)
{
    if (kind == FO_ALLOC_OFF || (ev->kind != FO_EV_GC_START && ev->kind != FO_EV_GC_END))
        return;
    ERL_NIF_TERM head;
    ErlNifUInt64 heap = 0, mbuf = 0;
    int has_heap = 0, seen = 0;
    /* a dozen pairs; bounded all the same (a list made by hand) */
    for (int n = 0; n < 64 && seen < 2 && enif_get_list_cell(env, info, &head, &info); n++) {
        int arity;
        const ERL_NIF_TERM *pair;
        if (!enif_get_tuple(env, head, &arity, &pair) || arity != 2)
            continue;
        if (pair[0] == fo_atom_heap_size && enif_get_uint64(env, pair[1], &heap)) {
            has_heap = 1;
            seen++;
        } else if (pair[0] == fo_atom_mbuf_size && enif_get_uint64(env, pair[1], &mbuf)) {
            seen++;
        }
    }
    if (!has_heap)
        return;
    if (kind == FO_ALLOC_HEAP_ONLY)
        mbuf = 0;
    ev->heap_words = heap > UINT64_MAX - mbuf ? UINT64_MAX : heap + mbuf;
    ev->flags |= FO_EVF_HAS_HEAP;
}

void fo_decode_trace_msg_heap(ErlNifEnv *env, ERL_NIF_TERM msg, fo_event *ev, fo_alloc_kind kind)
{
    int arity;
    const ERL_NIF_TERM *items;
    if (enif_get_tuple(env, msg, &arity, &items) && arity == 5)
        fo_decode_gc_heap(env, items[3], ev, kind);
}

void fo_decode_apply(fo_session *s, fo_decode_result result, const fo_event *ev)
{
    if (result == FO_DECODED)
        fo_session_apply(s, ev);
    else if (result == FO_DECODE_IGNORED)
        fo_session_count_ignored(s, 1);
    else
        fo_session_count_malformed(s, 1);
}

int fo_decode_frame(ErlNifEnv *env, ERL_NIF_TERM term, fo_mfa *out)
{
    int arity;
    const ERL_NIF_TERM *items;
    if (!enif_get_tuple(env, term, &arity, &items) || (arity != 3 && arity != 4))
        return 0;
    ERL_NIF_TERM mfa = arity == 3 ? term : enif_make_tuple3(env, items[0], items[1], items[2]);
    return fo_decode_mfa(env, mfa, out);
}
