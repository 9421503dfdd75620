/* One trace event as the core sees it: plain integers, no VM types.
 * Front ends (the ingest NIF decoding trace messages, the tracer-module
 * callbacks, fuzzers, tests) fill these in. */
#ifndef FO_EVENT_H
#define FO_EVENT_H

#include <stdint.h>

typedef enum {
    FO_EV_CALL = 1,   /* mfa called; caller optional */
    FO_EV_RETURN_TO,  /* the top function returned into mfa (or undefined) */
    FO_EV_IN,         /* scheduled in */
    FO_EV_OUT,        /* scheduled out */
    FO_EV_EXIT,       /* process exited */
    FO_EV_GC_START,   /* garbage collection started (optional) */
    FO_EV_GC_END,     /* garbage collection ended (optional) */
    FO_EV_RECEIVE     /* a message delivered to it (optional: fo_session_track_receives) */
} fo_event_kind;

/* A function identity. module and function are opaque keys chosen by the
 * front end (the NIF uses atom terms, which never move or die); two MFAs
 * are the same frame when all three fields are equal. */
typedef struct {
    uint64_t module;
    uint64_t function;
    uint32_t arity;
} fo_mfa;

static inline int fo_mfa_equal(const fo_mfa *a, const fo_mfa *b)
{
    return a->module == b->module && a->function == b->function && a->arity == b->arity;
}

#define FO_EVF_HAS_MFA 0x1u    /* mfa is set (return_to: not `undefined`; out: where it stopped) */
#define FO_EVF_HAS_CALLER 0x2u /* call: caller is set (not `undefined`) */
#define FO_EVF_IN_CALL 0x4u    /* out: blocked in a call to another process */
#define FO_EVF_HAS_THREAD 0x8u /* in/out/exit: thread is the OS thread it ran on
                                  (CPU-sampled sessions) */
#define FO_EVF_MAJOR_GC 0x10u  /* gc start/end: a major (fullsweep) collection */
#define FO_EVF_HAS_HEAP 0x20u  /* gc start/end: heap_words is set (allocation profiles) */
#define FO_EVF_PAUSED 0x40u    /* exit: the process only leaves a followed trace for now (a
                                  server between two requests): its heap level stays known */
#define FO_EVF_LEFT_WAIT 0x80u /* in: a message (or a receive's timeout) ended its wait, or came
                                  in this slice (CPU-sampled sessions without receive events) */

typedef struct {
    fo_event_kind kind;
    uint32_t flags;   /* FO_EVF_* */
    uint64_t pid;     /* opaque process key */
    int64_t ts_ns;    /* one monotonic clock per session, nanoseconds */
    fo_mfa mfa;       /* call target / return_to target */
    fo_mfa caller;    /* call only */
    uint64_t thread;  /* FO_EVF_HAS_THREAD only */
    /* FO_EVF_HAS_HEAP only: the process's young heap in use, in words,
     * heap fragments included (the info list's heap_size + mbuf_size): at
     * a gc start, before the collection; at a gc end, what survived it in
     * the young heap. The words allocated between two collections are the
     * start's level less the previous end's (fo_session_gc.c). */
    uint64_t heap_words;
} fo_event;

#endif
