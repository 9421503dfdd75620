/* Tail-based native traces (trace/3 with threshold_ms in mode :native):
 * trace every request, keep the slow ones, and pay for the kept ones only.
 *
 * While tail tracing is on, the node's CPU sampler (fo_perf) runs for
 * good. A traced request takes an entry of a node-wide table that is
 * allocated once (max processes, configuration) and
 * gives its process the `running`, `garbage_collection` and `receive`
 * flags with the tracer state {tail, Index, Gen}: the callbacks only note
 * the time slices the process runs in (thread, from, to, whether a
 * message came) and its collections in its entry, never build anything. At the end
 * the process frees its entry (a fast request: nothing else happens), or
 * replays its slices into a new CPU-sampled session (a slow one), which
 * takes the samples of each slice from fo_perf's per-thread buffers: the
 * same profile a native trace builds, out of the same samples.
 *
 * Bounds: an entry's slices grow (doubling) up to max slices, and all
 * entries' slices together up to max bytes; a request that runs in more
 * is truncated at the last slice held (its profile ends there, counted).
 * When every entry is taken, tail_begin answers `full` (the caller
 * falls back to an ordinary trace). An entry whose process died is taken
 * back by the next tail_begin that finds the table full.
 *
 * Lingering (tail_linger/2): a request that ends may leave its process
 * its flags and its entry, idle (the callbacks return at once), so that
 * the process's next request takes the same state again without an
 * erlang:trace/3 call (which takes the node's code modification
 * permission). The hold process sweeps idle ones (tail_idle/1: claimed,
 * their flags removed, freed); an owner whose entry is claimed waits for
 * that before it traces itself again, so the flags removed are never
 * those of its next request.
 *
 * The callbacks take no lock: an entry is written by its own process
 * only (its callbacks and its NIF calls are serial; a sweep writes only
 * a claimed entry, whose owner waits), and the generation in the tracer
 * state keeps a late callback off a reused entry. */
#ifndef FO_TAIL_H
#define FO_TAIL_H

#include <erl_nif.h>

/* Bounds of tail_enable/2's arguments. */
#define FO_TAIL_MAX_PROCESSES 65536u
#define FO_TAIL_MAX_SLICES (1u << 24)
/* The largest byte budget for the slices of all entries. */
#define FO_TAIL_MAX_BYTES (4ull << 30)
/* The longest a process may keep its flags between requests (an hour). */
#define FO_TAIL_MAX_LINGER_MS 3600000u

/* Whether a tracer state is a tail state ({tail, Index, Gen}). */
int fo_tail_is_state(ErlNifEnv *env, ERL_NIF_TERM state);

/* The tracer callbacks for a tail state (argv as the tracer's). */
ERL_NIF_TERM fo_tail_enabled(ErlNifEnv *env, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM fo_tail_trace(ErlNifEnv *env, const ERL_NIF_TERM argv[]);

// tail_enable(MaxProcesses, MaxSlices, MaxBytes) -> {ok, Processes, Slices} | {error, memory}
//   Allocates the table on first use; later calls keep its size (and say
//   it), and set the slices' bounds.
ERL_NIF_TERM fo_tail_enable_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

/* After fo_tracer_init: whether a NIF's environment can name its process
 * (by the runtime's version), and gives fo_perf the processes traced
 * without flags. */
void fo_tail_init(void);

// tail_flagless() -> boolean(): whether the calling process could be
// traced without flags (its samples name it: fo_identity.h)
ERL_NIF_TERM fo_tail_flagless_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// tail_begin(AskAfterNs, Hint, Flagless) -> {tail, Index, Gen} | full | disabled | busy | active | unavailable
//   The calling process is traced from now: it runs on this thread. Hint:
//   nil, or the state its flags have now (a lingering entry's, see
//   tail_linger/2): that entry, still its own and lingering, is taken
//   again and the same state returned (its flags are on: no
//   erlang:trace/3 call); busy: another process is removing those flags
//   (ask again once it is done); active: the process traces a request
//   already. Once
//   it ran AskAfterNs (0: never), it may be slow: each function it stops
//   in (the first TAIL_ASKS) is asked about, as a native trace asks
//   (fo_cpu_ask.h): the thread's helper reads its stack there
//   (cpu_context/5 with the tail state, fo_tail_context), and a replay
//   hangs its waits where they were, not under the stack last sampled.
//   Flagless true: the process gets no flags (the caller sets none) and
//   its samples name it (fo_identity.h); a kept request's slices are cut
//   from them (fo_perf_runs), its waits are the time between, and nothing
//   is asked. unavailable: its samples cannot name it (tail_flagless/0).
ERL_NIF_TERM fo_tail_begin_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// tail_end(State, Keep) -> ok | linger | untrace | {slow, TookNs}
//   The calling process's traced work is over. Keep false frees the
//   entry. linger: the process keeps its flags (for its next request,
//   with the same state), and its entry lingering from now; ok: its flags
//   are to go now; untrace: a request without flags that got them (its
//   promotion) takes them off. Keep a threshold in nanoseconds: a request
//   that ran less ends as with false; one that ran that long ends there
//   ({slow, TookNs}, its time since tail_begin/2: its running slice
//   closes, its callbacks note nothing more) and waits for tail_keep/3,
//   or a second call with false.
ERL_NIF_TERM fo_tail_end_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// tail_keep(State, MaxSamples, MaxFrames) -> {Ended, Kept, Slices, Dropped, SamplesDropped, Bytes}
//   The calling process's request that ended (tail_end/2 said slow): its
//   records and the samples of its slices (at
//   most MaxSamples, with MaxFrames frames; past them counted in
//   SamplesDropped) copied into Kept, a resource of Bytes bytes, whose
//   profile tail_replay/2 makes when it is wanted. The entry lingers or
//   goes from here; Ended says what its flags do, as tail_end/2 says
//   (ok | linger | untrace).
ERL_NIF_TERM fo_tail_keep_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// tail_promoter(Pid | nil) -> ok
//   Who sets the flags of a request without flags once it may be slow (its
//   half threshold): it gets {flame_on_promote, State, Pid} (once a
//   request) and calls tail_promote(State, begin) before it sets them.
ERL_NIF_TERM fo_tail_promoter_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// tail_promote(State, begin | check) -> ok | gone
//   begin: the request still runs and was asked about: its flags' callbacks
//   make its slices from now (before, its samples did); the caller sets
//   the flags then. check: whether it still runs with them (else the
//   caller takes off the flags it set: the request ended meanwhile; its
//   owner took them off too, if they were on by then: tail_end/2 answers
//   untrace).
ERL_NIF_TERM fo_tail_promote_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// tail_linger(LingerMs, MaxLingering) -> ok
//   Lingering: a request that ends (tail_end/2) leaves its process its
//   flags and entry (callbacks return at once) while fewer than
//   MaxLingering do; LingerMs 0: none does. The sweep (tail_idle/1) takes
//   them back after LingerMs. Past MaxLingering the flags go at once
//   (counted: linger_full).
ERL_NIF_TERM fo_tail_linger_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// tail_state(State) -> active | lingering | claimed | gone
ERL_NIF_TERM fo_tail_state_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// tail_claim(State) -> ok | busy | active | gone
//   A lingering entry becomes the caller's to take back (any process): it
//   removes the flags (erlang:trace/3), then tail_release/1. Its owner's
//   tail_begin answers busy meanwhile, so its next request's flags are
//   never the ones removed.
ERL_NIF_TERM fo_tail_claim_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// tail_release(State) -> ok | gone
//   Frees a claimed entry (its flags are off).
ERL_NIF_TERM fo_tail_release_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// tail_idle(IdleNs) -> [{Pid, State}]
//   Claims the entries of live processes lingering for at least IdleNs
//   (0: all) and returns them (the caller removes their flags, then
//   tail_release/1); frees those of processes that died, however short
//   they lingered.
ERL_NIF_TERM fo_tail_idle_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// tail_owners() -> [{Pid, State}]
//   The live processes holding an entry, with their tracer states; the
//   entries of processes that died are freed.
ERL_NIF_TERM fo_tail_owners_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// tail_stats() -> #{processes, slices, max_bytes, bytes, in_use, begun, kept, full, truncated, reclaimed,
//                   asks, answers, missed_outs, lingering, linger_ms, max_lingering, lingered, resumed,
//                   linger_full, swept, flagless, wait_reads, promotions, near}
//   near: requests ended under their threshold past half of it.
//   in_use: entries tracing a request; lingering: between two.
ERL_NIF_TERM fo_tail_stats_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

/* cpu_context(State, Pid, Asked, Current, Stack) for a tail state: keeps
 * the stack the helper read. ok | stale | stopped | full */
ERL_NIF_TERM fo_tail_context(ErlNifEnv *env, const ERL_NIF_TERM argv[]);

/* For the drainer thread, as it pumps: asks the promoter (once) to set
 * the flags of each request without flags that ran half its threshold,
 * and a helper to read its stack every TAIL_READ_EVERY_NS until its
 * first callback (the helper reads it only where it waits, and answers
 * with cpu_context/5: fo_tail_context). Returns when the next
 * read is due (fo_tracer_clock_ns time; 0: none is), so the drainer
 * pumps no more often than reads need. */
int64_t fo_tail_poll_waits(void);

/* Frees the table (the library is unloaded). */
void fo_tail_unload(void);

#endif
