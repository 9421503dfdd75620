/* The source of a CPU-sampled (native) session's samples: the core asks it
 * for each time slice a traced process ran (fo_session_set_cpu_sampled);
 * it takes the slice's samples of that thread from fo_perf, names their
 * frames (fo_symbols) and hands them to the core.
 *
 * A sample's call chain, leaf first, runs through JIT code (Erlang
 * functions, and the runtime's shared fragments between them) or starts
 * in the runtime's C code. C code has no frame pointers, so a chain that
 * starts there mostly ends at the fragment that called into C: such a
 * sample names no Erlang frame (an orphan): the core places it
 * (fo_session_cpu_orphan). */
#ifndef FO_CPU_H
#define FO_CPU_H

#include <stdint.h>

#include "fo_perf.h"
#include "fo_session.h"

typedef struct {
    fo_mfa root; /* has_root: frames outside its innermost call are dropped */
    int has_root;
    fo_mfa cut;  /* has_cut: the root of a chain the kernel cut, seen nowhere */
    int has_cut;
} fo_cpu_scope;

/* The fo_cpu_source for fo_session_set_cpu_sampled; ctx is an
 * fo_cpu_scope (alive as long as the session). */
void fo_cpu_slice(void *ctx, fo_session *s, uint64_t pid, uint64_t thread, int64_t from_ns, int64_t to_ns);

/* The Erlang caller a sample in C code names on its C stack copy
 * (fo_perf_caller_fn): the address the calling fragment keeps just above
 * its own return address. 0 for a sample in JIT code, or none found. */
uint64_t fo_cpu_find_caller(uint64_t first_ip, const uint64_t *words, uint64_t n);

/* The return address a sample in an Erlang function's code skipped
 * (fo_perf_frame_fn): the JIT's functions push their frame pointer as
 * they begin and pop it before they return or tail-call, and a sample
 * between the two finds the frame pointer still at its caller's frame,
 * so the kernel's walk goes from the function straight to its caller's
 * caller. Then the top of the stack is the function's own return
 * address (with its frame made, it holds the saved frame pointer or a Y
 * register, never a JIT address). 0 otherwise. */
uint64_t fo_cpu_skipped_frame(uint64_t first_ip, uint64_t next_ip, const uint64_t *words, uint64_t n);

/* Where the scope's stacks start in frames (root first): the innermost
 * call of its root function, 0 without one or when it is not there. */
uint32_t fo_cpu_scope_start(const fo_cpu_scope *scope, const fo_mfa *frames, uint32_t count);

/* A sample's call chain, named: its Erlang frames leaf first (glue and
 * fragments skipped), the C function it was caught in (has_c_leaf: it
 * was, before any Erlang frame), whether the kernel's walk was as long as
 * it goes (long_chain: it may have lost its outer frames), and, for a
 * chain with no Erlang frame, the Erlang function that called into C
 * (has_caller; fo_cpu_find_caller). What a kept tail request copies
 * (fo_tail_kept.h): names read while its code is still loaded. */
typedef struct {
    fo_mfa leafward[FO_PERF_MAX_FRAMES];
    uint32_t count;
    int long_chain, has_c_leaf, has_caller;
    fo_mfa c_leaf, caller;
} fo_cpu_chain;

/* Names a chain (leaf first, as fo_perf gives it; caller: the address
 * fo_perf found for it, 0: none). */
void fo_cpu_resolve(const uint64_t *ips, uint32_t n, uint64_t caller, fo_cpu_chain *out);

/* A named chain as one sample of process pid in session s, within scope
 * (a sample, a cut one, one in C code called from Erlang, or an orphan). */
void fo_cpu_place(const fo_cpu_chain *c, const fo_cpu_scope *scope, fo_session *s, uint64_t pid);

/* A chain (leaf first, as fo_perf gives it) as frames, root first, into
 * frames (room for n + 1). Returns the count; *erlang gets how many are
 * Erlang frames (they come first; a C leaf may follow); *cut whether the
 * kernel cut the chain (it lost its outer frames). */
uint32_t fo_cpu_frames(const uint64_t *ips, uint32_t n, const fo_cpu_scope *scope, fo_mfa *frames,
                       uint32_t *erlang, int *cut);

#endif
