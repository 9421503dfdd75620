/* The root process of a graph trace: registered with the router under the
 * trace's label (graph_start/2), moved when capture_next registered a
 * stand-in (the trace's owner) until a process makes the captured call,
 * and its span begun when tracing really starts (graph_begin/1). */
#ifndef FO_ROOT_H
#define FO_ROOT_H

#include <stdint.h>

#include "fo_resource.h"

/* root is the trace's root process, registered with the router. 0 when
 * res is no graph trace, is finished, already has a root, or the router
 * refuses. */
int fo_root_register(fo_session_res *res, uint64_t root);

/* root becomes the root process (it made the captured call) and is routed
 * to res. 0 once finished or unregistered. */
int fo_root_move(fo_session_res *res, uint64_t root);

/* The root span starts at ts. 0 without a root or once finished. */
int fo_root_begin(fo_session_res *res, int64_t ts);

#endif
