/* The NIFs of native sampling: whether this VM can sample its own
 * scheduler threads, and the node-wide sampler's users (fo_perf.h). */
#ifndef FO_PERF_NIF_H
#define FO_PERF_NIF_H

#include <erl_nif.h>

int fo_perf_nif_open(ErlNifEnv *env);

/* The library goes away: every user left is released. */
void fo_perf_nif_unload(void);

// perf_probe() -> ok | {error, Reason, Errno}
//   Reason: denied | no_support | no_memory | failed
ERL_NIF_TERM fo_perf_probe_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// perf_map() -> boolean(): the VM writes a perf map (+JPperf true or map)
ERL_NIF_TERM fo_perf_map_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// perf_acquire(Frequency) -> {ok, User} | {error, Reason, Errno}
//   Frequency in 1..10000 Hz (the first user's stands while any runs).
//   User is released by perf_release/1 or when it is garbage collected
//   (its owner died). Runs on a dirty I/O scheduler (it opens an event per
//   scheduler thread and reads the perf map).
ERL_NIF_TERM fo_perf_acquire_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// perf_release(User) -> ok (again: ok)
ERL_NIF_TERM fo_perf_release_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// perf_stats() -> #{users, threads, frequency, skipped_frames, samples, lost, overwritten,
//   open_failures, symbols, symbol_lines, unnamed_symbols, dropped_symbols}
ERL_NIF_TERM fo_perf_stats_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
