/* The tracer paths' half of sleeping samplers (fo_wake.h). Every tracer
 * path that takes a session's process events (the slot-key tracer and the
 * graph tracer's followers) passes each one here: an `in` of a process
 * whose sampler sleeps has that sampler sent {flame_on_in, Pid}, by the
 * drainer's thread (fo_drainer_send_in says why not from here). */
#ifndef FO_WAKE_NOTE_H
#define FO_WAKE_NOTE_H

#include <stdint.h>

#include "fo_drainer.h"
#include "fo_event.h"
#include "fo_wake.h"

static inline void fo_wake_note(fo_wakes *w, unsigned kind, uint64_t pid)
{
    ErlNifPid to;
    /* without a drainer nothing is sent: the sampler's own timeout wakes it */
    if (kind == FO_EV_IN && fo_wakes_any(w) && fo_wakes_take(w, pid, &to))
        fo_drainer_send_in(&to, pid);
}

#endif
