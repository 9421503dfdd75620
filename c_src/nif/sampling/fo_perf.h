/* CPU samples of the VM's scheduler threads, from Linux perf events, for
 * CPU-sampled (native mode) traces. Node-wide: while any native trace runs
 * (fo_perf_acquire .. fo_perf_release), every scheduler thread has one
 * software task-clock event sampling it at a fixed frequency, with its
 * user-space call chain (the kernel unwinds through the frame pointers the
 * JIT keeps with +JPperf), its thread id and a CLOCK_MONOTONIC time. A
 * thread is found two ways: by name when sampling starts, and by the
 * tracer callbacks of native traces, which note the thread each `in` runs
 * on (names differ between releases; the callbacks do not).
 *
 * The kernel's rings are copied out (fo_perf_pump, by the drainer thread
 * every few milliseconds and by whoever folds a native trace) into a
 * bounded buffer per thread, from which each trace takes the samples of
 * its processes' time slices (fo_perf_take). Samples are attributed later,
 * by thread and time, never in the sampled process: sampling costs the
 * sampled thread only the kernel's interrupt.
 *
 * Everything (file descriptors, rings, buffers) is closed and freed when
 * the last user releases it. One mutex guards it all; the callbacks take
 * none (fo_perf_note_thread is lock-free). */
#ifndef FO_PERF_H
#define FO_PERF_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of the sampled thread's C stack each sample copies: while the
 * runtime's C code runs a light BIF, the JIT's call site in the BIF's
 * Erlang caller sits in a callee-saved register, which that C code saves
 * on its stack; the copy lets fo_cpu name the caller (the call chain
 * stops at the C code, which keeps no frame pointers). */
#define FO_PERF_STACK_BYTES 2048u

/* Threads sampled at most, node-wide. */
#define FO_PERF_MAX_THREADS 256u
/* Frames a sample keeps, leaf first (the kernel's cap is 127). */
#define FO_PERF_MAX_FRAMES 127u

/* Why sampling cannot start, for the error a user reads. */
typedef enum {
    FO_PERF_OK = 0,
    FO_PERF_DENIED,     /* perf_event_open refused (paranoid level, seccomp, capabilities) */
    FO_PERF_NO_SUPPORT, /* the kernel has no such event (ENOENT, ENODEV, ENOSYS) */
    FO_PERF_NO_MEMORY,  /* mmap of a ring failed, or memory is short */
    FO_PERF_FAILED      /* anything else (errno in *err) */
} fo_perf_status;

/* Whether this process may sample its own threads: opens (and closes) one
 * event on the calling thread. *err gets errno on failure. */
fo_perf_status fo_perf_probe(int *err);

/* One more user; the first opens the events (sampling at freq Hz) on the
 * scheduler threads found by name. Later users share the frequency the
 * first one chose. */
fo_perf_status fo_perf_acquire(uint32_t freq, int *err);

/* One user fewer; the last closes every event and frees every buffer. */
void fo_perf_release(void);

/* Whether anyone samples now (one relaxed load). */
int fo_perf_active(void);

/* The calling thread's OS thread id (read once per thread). */
uint64_t fo_perf_thread_id(void);

/* The tracer callback of a native trace's `in` event: the calling thread
 * runs traced processes, so it must be sampled. Lock-free; a thread is
 * noted once per sampling period. */
void fo_perf_note_thread(void);

/* Copies what the kernel wrote into the per-thread buffers, and opens the
 * events of threads noted since. Takes the mutex. */
void fo_perf_pump(void);

/* Calls fn for each sample of thread `thread` taken at from_ns <= t <
 * to_ns, oldest first: ips[0] is where the thread was, the rest return
 * addresses, n at most FO_PERF_MAX_FRAMES; caller is what the caller
 * finder found on its C stack (0: nothing). Samples the buffer no longer
 * holds are counted (fo_perf_counters.overwritten). Returns how many fn
 * got. Takes the mutex: call fo_perf_pump first for the samples up to now. */
typedef void (*fo_perf_each)(void *ctx, int64_t ts_ns, const uint64_t *ips, uint32_t n, uint64_t caller);

/* Finds the caller in a sample's C stack copy (words, lowest address
 * first; first_ip: where the sample was): a JIT address in an Erlang
 * function, 0 when none. Set by
 * whoever names addresses (fo_cpu), called as samples are copied out. */
typedef uint64_t (*fo_perf_caller_fn)(uint64_t first_ip, const uint64_t *words, uint64_t n);
void fo_perf_set_caller_finder(fo_perf_caller_fn fn);

/* Finds the return address a sample's call chain skipped (first_ip:
 * where it was, next_ip: the chain's next address, 0: none; words: its
 * stack copy): a function caught before it made its frame or after it
 * took it down leaves its own return address on top of the stack, where
 * frame pointers do not lead. 0 when none. Set by whoever names
 * addresses (fo_cpu). */
typedef uint64_t (*fo_perf_frame_fn)(uint64_t first_ip, uint64_t next_ip, const uint64_t *words, uint64_t n);
void fo_perf_set_frame_finder(fo_perf_frame_fn fn);
uint32_t fo_perf_take(uint64_t thread, int64_t from_ns, int64_t to_ns, fo_perf_each fn, void *ctx);

/* Samples name the process they caught (fo_identity.h) on x86-64 only:
 * elsewhere the JIT keeps it in another register, unread here. */
#if defined(__x86_64__)
#define FO_PERF_IDENTITY 1
#else
#define FO_PERF_IDENTITY 0
#endif

/* Fills out with the process pointers whose samples are to be named (at
 * most max; returns how many): called as samples are copied out, with
 * the mutex held. Set by whoever traces without flags (fo_tail). */
#define FO_PERF_MAX_KNOWN 65536u
typedef uint32_t (*fo_perf_known_fn)(uint64_t *out, uint32_t max);
void fo_perf_set_known_fn(fo_perf_known_fn fn);

/* The time between two samples of a busy thread now (ns), 0 when nobody
 * samples. Takes the mutex. */
int64_t fo_perf_period_ns(void);

/* Calls fn for each slice of the CPU time of process `proc` (a pointer
 * the known function gave while its samples were copied out) between
 * from_ns and to_ns, on every thread, cut from the samples that named it
 * (fo_identity_runs). Returns the slices given; *overwritten is set when
 * the buffers no longer hold the window's start. Takes the mutex (fn must
 * not call fo_perf). */
typedef void (*fo_perf_slice_fn)(void *ctx, uint64_t thread, int64_t from_ns, int64_t to_ns);
uint32_t fo_perf_runs(uint64_t proc, int64_t from_ns, int64_t to_ns, fo_perf_slice_fn fn, void *ctx, int *overwritten);

/* The threads sampled now (their ids, at most max, into tids): for a
 * node-wide reader (fo_nodewide.h). Takes the mutex. */
uint32_t fo_perf_threads(uint64_t *tids, uint32_t max);

/* Samples at freq Hz from now on (every open event's period changes; new
 * threads open with it). The caller (PerfSampler) keeps the highest of
 * its users' frequencies. Nothing when nobody samples. */
void fo_perf_set_frequency(uint32_t freq);

/* The frequencies sampling ran at since it started, oldest first: from
 * ts[i] (CLOCK_MONOTONIC ns, as samples are stamped) on, freq[i]; the
 * first holds from the start. At most FO_PERF_FREQ_HISTORY (the oldest
 * changes go first). Returns the count (0: nobody samples). */
#define FO_PERF_FREQ_HISTORY 64u
uint32_t fo_perf_frequencies(int64_t *ts, uint32_t *freq, uint32_t max);

typedef struct {
    uint32_t users;
    uint32_t threads;      /* threads with an open event */
    uint32_t frequency;    /* Hz, 0 when not sampling */
    uint64_t samples;      /* read from the kernel since sampling started */
    uint64_t lost;         /* the kernel's ring was full (PERF_RECORD_LOST) */
    uint64_t overwritten;  /* left the per-thread buffers before a trace took them */
    uint64_t skipped_frames; /* return addresses put back into chains (fo_perf_frame_fn) */
    uint64_t open_failures; /* threads whose event could not be opened */
    uint64_t identified;   /* samples that named a known process (fo_perf_set_known_fn) */
} fo_perf_counters;

void fo_perf_counters_read(fo_perf_counters *out);

/* Open file descriptors of ours (for leak checks). */
uint32_t fo_perf_open_fds(void);

#endif
