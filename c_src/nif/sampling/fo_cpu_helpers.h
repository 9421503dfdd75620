/* The helpers of native traces: one Erlang process per scheduler, bound to
 * it, high priority, which reads a traced process's stack with
 * process_info when it stops in a function the core knows no stack for
 * (fo_cpu_ask.h). Asked by the scheduler thread the process stopped on,
 * the helper of that thread runs before the process is scheduled again (a
 * high-priority process on the same run queue), so it reads the stack the
 * process stopped in. The table: OS thread -> helper pid, node-wide. */
#ifndef FO_CPU_HELPERS_H
#define FO_CPU_HELPERS_H

#include <erl_nif.h>
#include <stdint.h>

#define FO_CPU_HELPERS_MAX 256u

/* pid helps on thread from now (it runs bound to that thread's scheduler). */
void fo_cpu_helpers_register(uint64_t thread, const ErlNifPid *pid);

/* pid helps no more. */
void fo_cpu_helpers_unregister(const ErlNifPid *pid);

/* The helper of thread, else any helper (a dirty scheduler's process asks
 * a normal scheduler's helper). 0 when there is none. */
int fo_cpu_helpers_for(uint64_t thread, ErlNifPid *pid);

#endif
