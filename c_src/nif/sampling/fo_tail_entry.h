/* The tail path's table entry (fo_tail.c), what tail traces without
 * flags do with it (fo_tail_flagless.c) and a kept one's replay
 * (fo_tail_replay.c). Private to those files. */
#ifndef FO_TAIL_ENTRY_H
#define FO_TAIL_ENTRY_H

#include <erl_nif.h>
#include <stdatomic.h>
#include <stdint.h>

#include "fo_frames.h"
#include "fo_spinlock.h"

/* An entry's first array, and the most it keeps when freed (a short
 * request's array is reused by the next one). */
#define TAIL_FIRST_SLICES 16u
#define TAIL_KEPT_SLICES 64u
/* Stops asked about per request, and the frames their answers keep. */
#define TAIL_ASKS 16u
#define TAIL_CONTEXT_FRAMES 256u

/* A slice's flag: a message (or a receive's timeout) ended the wait
 * before it, or came in it */
#define TAIL_AFTER_MESSAGE 1u
/* A slice of no time on no thread (not a collection): where a request
 * without flags was read waiting in another function than before */
#define TAIL_MOVE 2u
/* A slice cut from the samples of a request without flags: no receive
 * event says whether the time before it was a wait */
#define TAIL_SAMPLED 4u

/* A time slice: the thread, when, and the function the process stopped
 * in (its `out` event's MFA; module 0: none). A garbage collection is a
 * record with thread 0 (stop.arity 1: a major one). */
typedef struct {
    uint32_t thread; /* an OS thread id; 0: a collection */
    uint32_t flags;  /* TAIL_AFTER_MESSAGE, TAIL_MOVE, TAIL_SAMPLED */
    int64_t from_ns, to_ns;
    fo_mfa stop;
} tail_slice;

/* A stack the thread's helper read (process_info) where the process
 * stopped in `key`, after `after` slices: frames root first, in the
 * entry's frame store from `first`. */
typedef struct {
    fo_mfa key;
    uint32_t after, first, count;
} tail_context;

/* Stack reads of a request without flags: at most this many (when, and
 * the function it waited in), from its half threshold on, one every
 * TAIL_READ_EVERY_NS while it lasts (fo_tail_poll_waits). */
#define TAIL_WAIT_READS 256u
#define TAIL_READ_EVERY_NS 2000000

/* The answers of one request, allocated at its first. */
typedef struct {
    tail_context ctx[TAIL_ASKS];
    fo_mfa frames[TAIL_CONTEXT_FRAMES];
    int64_t read_ts[TAIL_WAIT_READS];
    fo_mfa read_key[TAIL_WAIT_READS];
} tail_answers;

/* An entry's states (in_use). A lingering entry is a process that keeps
 * its flags between requests (its callbacks return at once); a claimed
 * one is having them removed by another process (the sweep), and its
 * owner waits for that before it traces itself again. */
enum { TAIL_FREE = 0, TAIL_ACTIVE = 1, TAIL_RECLAIM = 2, TAIL_LINGERING = 3, TAIL_CLAIMED = 4 };

typedef struct {
    atomic_int in_use; /* the states above */
    atomic_uint gen;
    /* The owner; 0 once released. The drainer, the sweep and the hold
     * read it while its owner may release it: read once, and a 0 never
     * goes into a term (a pid term 0 in a message crashed the VM:
     * bench/RESULTS.md) */
    _Atomic uint64_t pid;
    /* A request traced without flags: its process's pointer, which CPU
     * samples name (fo_identity.h); its slices are cut from them when it
     * is kept. 0: a request with flags. */
    _Atomic uint64_t proc;
    /* without flags: the threads tail_begin and tail_end ran on (the
     * request's first and last moments, on CPU there) */
    uint64_t begin_thread, end_thread;
    uint64_t thread;  /* the running slice's thread; 0: scheduled out */
    int64_t from_ns;  /* the running slice's start */
    int64_t begun_ns; /* the request's start (tail_begin) */
    int64_t end_ns;   /* tail_end's time; 0 before */
    int64_t idle_ns;  /* lingering since */
    int linger_after; /* an ended request: lingers once let go (fo_tail.c) */
    int placed;       /* holds a place among the lingering (lingering_now) */
    /* Counters of this entry's requests (tail_stats/0 sums them): written
     * by whoever holds the entry, so no two processes' requests share a
     * cache line for them. */
    atomic_ullong n_begun, n_resumed, n_lingered, n_flagless;
    /* requests that ended under their threshold but past half of it (a
     * request without flags is promoted there): where flags from the
     * start are the cheaper way (FlameOn.Client.Node.TailHold) */
    atomic_ullong n_near;
    /* a receive event since the last `in` or `out` (any thread sets it:
     * the sender's may trace it), and the running slice's flags */
    atomic_uint message;
    uint32_t slice_flags;
    uint32_t count;
    uint32_t cap;     /* slices allocated */
    uint32_t dropped; /* slices past max_slices or the byte budget */
    tail_slice *slices;
    /* Stops asked about: only once the request ran ask_after_ns (it may be
     * slow), once per function, TAIL_ASKS at most; the answers (contexts,
     * under ctx_lock: the helper writes them) say where its waits were. */
    int64_t ask_after_ns; /* 0: never */
    int64_t gc_from_ns;   /* a collection running since; 0: none */
    uint32_t gc_major;
    uint32_t asked;
    fo_mfa asked_keys[TAIL_ASKS];
    fo_spinlock ctx_lock;
    uint32_t ctx_count, frame_count;
    uint32_t reads;        /* without flags: read_ts/read_key filled */
    tail_answers *answers; /* NULL until the first */
    /* without flags: when its stack is to be read next (fo_tail_poll_waits;
     * 0: never) */
    _Atomic int64_t next_read_ns;
    atomic_uint polls; /* reads asked for this request (the drainer's) */
    /* Without flags until it may be slow (its half threshold), then with
     * them: TAIL_PROMOTE_* below, and since when (fo_tail_promote). */
    atomic_int promotion;
    int64_t promoted_ns;
    /* promoted, and no `in` or `out` since: an `out` first ends a slice
     * that began then, on the thread it comes from */
    int promoted_open;
} tail_entry;

/* A request without flags: not promoted, its promoter asked to set its
 * flags, its flags being set (from promoted_ns on its slices are theirs). */
enum { TAIL_PROMOTE_NONE = 0, TAIL_PROMOTE_ASKED = 1, TAIL_PROMOTE_ON = 2 };

/* One more record of a request (a slice, a collection), within the
 * entry's and the node's bounds; past them counted as dropped
 * (fo_tail.c). */
void fo_tail_add_record(tail_entry *e, const tail_slice *record);

/* The calling process's pointer, as CPU samples name it (fo_identity.h),
 * or 0 where it cannot be read safely (fo_tail_flagless_init says where). */
uint64_t fo_tail_own_proc(ErlNifEnv *env, const ErlNifPid *self);

/* Whether a NIF's environment holds its process where fo_tail_own_proc
 * reads it, by the runtime's version (after fo_tracer_init). */
void fo_tail_flagless_init(void);

/* A read of where a request without flags waits, at `now`, in `key`,
 * its stack `frames` (count of them): caller holds ctx_lock, answers
 * allocated. Returns 0 when its reads are full, 1 when noted, 2 when its
 * stack is kept too (the first read of that function). */
int fo_tail_note_wait(tail_entry *e, int64_t now, const fo_mfa *key, const fo_mfa *frames, uint32_t count);

/* A request without flags ends: its samples are named no more, its
 * stack read no more. */
void fo_tail_forget_proc(tail_entry *e);

/* A kept request without flags (its samples then named no more): its
 * slices from its samples, then those its flags' callbacks made once
 * promoted; where it waited from its reads. Sets *overwritten when the
 * sampler's buffers no longer held all of its time. Nonzero when memory
 * is short. */
int fo_tail_flagless_slices(tail_entry *e, uint64_t proc, int *overwritten);

#endif
