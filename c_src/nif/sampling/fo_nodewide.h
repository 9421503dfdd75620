/* Node-wide CPU samples for continuous profiling (FlameOn.Client.Continuous,
 * mode :native): every sample of every sampled scheduler thread, whatever
 * process ran, with no trace flag on any process. fo_perf keeps them in its
 * per-thread buffers (seconds of them); a reader takes those of a time range
 * now and then, names their frames as native traces do (fo_cpu_frames:
 * Erlang frames from the perf map, a C leaf as a $native frame) and gets
 * them as terms. Nothing is kept here between calls: the memory is
 * fo_perf's buffers, and a call's terms (bounded by its MaxSamples). */
#ifndef FO_NODEWIDE_H
#define FO_NODEWIDE_H

#include <erl_nif.h>

/* The most samples one call gives. */
#define FO_NODEWIDE_MAX_SAMPLES 1000000u

// nodewide_take(FromNs, KeepHz, MaxSamples) ->
//     {ToNs, Frequency, [{Cut, Frames}], Thinned, Dropped}
//   The samples of every sampled thread taken at FromNs =< T < ToNs (ToNs:
//   now, CLOCK_MONOTONIC ns; pass it as the next call's FromNs). The
//   sampler runs at Frequency Hz now (0: it does not run); a sample taken
//   while it ran above KeepHz (fo_perf_frequencies) is kept with
//   probability KeepHz / that frequency (the others are counted in
//   Thinned), so a kept sample is worth 1/KeepHz s of CPU time whoever
//   raised the frequency. Frames innermost first, as
//   {M, F, A} ({'$native', Symbol, 0} for the runtime's C code; a C leaf
//   whose Erlang caller was found on its C stack comes with that caller);
//   Cut: the kernel cut the chain (it lost its outer frames). Samples past
//   MaxSamples (1..FO_NODEWIDE_MAX_SAMPLES) are counted in Dropped.
ERL_NIF_TERM fo_nodewide_take_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

// perf_frequency(Hz) -> ok: the sampler's frequency from now on
//   (fo_perf_set_frequency; Hz in 1..10000).
ERL_NIF_TERM fo_perf_frequency_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
