/* The drainer: one native thread that folds the tracer rings of busy
 * sessions into their cores, so the traced process only appends (see
 * fo_ring.h). A producer asks for it once its ring is half full. Without
 * a drainer (the thread could not start) producers fold their own rings
 * when full: slower, equally exact. While native traces run it also
 * copies the CPU samples out of the kernel's rings every few ms
 * (fo_perf_pump) and reads the perf map's new lines (fo_symbols). */
#ifndef FO_DRAINER_H
#define FO_DRAINER_H

#include "fo_resource.h"

/* Starts the thread; 1 when it runs (or already ran). */
int fo_drainer_start(void);

/* Wakes the thread to look again (sampling started: it ticks from now). */
void fo_drainer_kick(void);

/* Stops and joins the thread, giving back every queued session. */
void fo_drainer_stop(void);

/* Sends `to` {flame_on_in, Pid} (pid is a local pid's raw term) from the
 * drainer's thread. A message sent in a tracer callback comes from the
 * traced process and carries its seq_trace token, which would pull the
 * receiver (a sampler) into the process's graph trace; one sent from a
 * thread of our own comes from no process and carries none. 0 when there
 * is no drainer (or no memory): nothing is sent. */
int fo_drainer_send_in(const ErlNifPid *to, uint64_t pid);

/* Sends `to` {flame_on_context, {label, Label}, Pid, {M, F, A}} from the
 * drainer's thread (as fo_drainer_send_in): a helper is asked for the
 * stack pid stopped in (mfa) in the cross-process trace of Label
 * (fo_cpu_ask.h). 0 when nothing is sent. */
int fo_drainer_send_context(const ErlNifPid *to, uint64_t label, uint64_t pid, const fo_mfa *mfa);

/* Queues res for a fold, keeping a reference until it is done (the
 * caller makes sure res is alive: it holds res's slot lock, and the
 * handle owning res unregisters the slot before letting it go). 0 when
 * there is no drainer: nothing was queued or kept. */
int fo_drainer_request(fo_session_res *res);

#endif
