/* Helpers shared by the cmocka tests of the C core, implemented in
 * support.c (not test_support.c: the Makefile builds every test_*.c as a
 * test program and links the other .c files of c_src/test into each).
 *
 * Names: module and function keys of fo_mfa are opaque uint64 values. The
 * tests spell frames as "m:f/1"; ts_mfa() interns "m" and "f" in a small
 * static name table and gives them 64-bit keys (large, so a core that
 * truncates keys to 32 bits is caught), and the renderer maps them back.
 *
 * Scripts: one event per line, so a test reads like a trace:
 *     "PID TS call M:F/A"               call without caller
 *     "PID TS call M:F/A from M:F/A"    call with caller
 *     "PID TS ret M:F/A"                return_to
 *     "PID TS ret undefined"            return_to undefined
 *     "PID TS out" / "in" / "exit" / "gc_start" / "gc_end"
 *     "PID TS sample M:F/A;M:F/A"       a stack sample, root frame first ("-": empty)
 *     "PID TS sample M:F/A w=N"         the same with weight N (default 0)
 *     "close TS"                        fo_session_close(s, TS)
 *     "collapse_recursion"              fo_session_set_collapse_recursion(s, 1)
 *     "cpu_sampled"                     fo_session_set_cpu_sampled, with a source that
 *                                       hands over the "at" samples below
 *     "at THREAD TS M:F/A;M:F/A"        a CPU sample the source gives by thread and time
 *                                       ("!M:F/A": one naming only its leaf, an orphan;
 *                                       "^STACK": one the kernel cut, its innermost frames;
 *                                       "@M:F/A!LEAF": one in C code LEAF that M:F/A called)
 *     "PID TS in@THREAD"                an `in` on that OS thread (FO_EVF_HAS_THREAD)
 *     "PID TS out@M:F/A"                an `out` that stopped in M:F/A (FO_EVF_HAS_MFA)
 *     "PID TS out_call@M:F/A"           the same inside a call (FO_EVF_IN_CALL too)
 *     "context PID M:F/A STACK"         fo_session_cpu_context: seen in STACK, stopped in M:F/A
 *     "PID cpu M:F/A;M:F/A"             fo_session_cpu_sample (root frame first)
 *     "settle" / "settle TS"            fo_session_cpu_settle(s, 0 / TS)
 *     "malformed N"                     fo_session_count_malformed(s, N)
 *     "ignored N"                       fo_session_count_ignored(s, N)
 *
 * Folded output: one line per node with self_ns > 0 (or every node with
 * TS_RENDER_ZERO), "PID PATH NS" (session) or "PATH NS" (one pid), root
 * frame first, frames joined by ';', sorted. The process root itself is
 * "(root)"; reserved frames are SLEEP, "…", [node_cap], WAITING, GC.
 * A node that stack samples landed on also has a line
 * "PID PATH samples=N weight=W" (sessions without samples render as before).
 *
 * Stats: "events=7 resyncs=1" lists the counters expected to be non-zero;
 * every counter not listed must be 0; "name=?" means "not checked". */
#ifndef TEST_SUPPORT_H
#define TEST_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

#include "fo_session.h"

#define TS_DEPTH_CAP_NAME "\xe2\x80\xa6" /* "…" */
#define TS_RENDER_ZERO 0x1u              /* also list nodes with self_ns == 0 */

/* --- names and events -------------------------------------------------- */
uint64_t ts_name_key(const char *name);
const char *ts_key_name(uint64_t key); /* NULL for a key never handed out */
fo_mfa ts_mfa(const char *spec);       /* "m:f/1" */
int ts_mfa_equal(fo_mfa a, fo_mfa b);
void ts_mfa_format(fo_mfa mfa, char *buf, size_t size);

/* caller / target NULL: no caller / return_to undefined */
fo_event ev_call(uint64_t pid, int64_t ts, const char *mfa, const char *caller);
fo_event ev_ret(uint64_t pid, int64_t ts, const char *mfa);
fo_event ev_call_mfa(uint64_t pid, int64_t ts, fo_mfa mfa, const fo_mfa *caller);
fo_event ev_ret_mfa(uint64_t pid, int64_t ts, const fo_mfa *mfa);
fo_event ev_kind(fo_event_kind kind, uint64_t pid, int64_t ts);

/* --- sessions and scripts ---------------------------------------------- */
fo_session *ts_new_session(const fo_limits *limits); /* NULL: defaults; asserts */
fo_limits ts_limits(uint32_t max_nodes, uint32_t max_depth, uint32_t max_processes,
                    uint32_t max_frames, uint32_t max_stack_frames); /* 0: default */
void ts_run_line(fo_session *s, const char *line);
void ts_run_script(fo_session *s, const char *const *lines); /* NULL-terminated */

/* --- reading the result ------------------------------------------------- */
/* malloc'd; sorted lines, each ending in '\n' */
char *ts_render_session(const fo_session *s, unsigned flags);
char *ts_render_pid(const fo_session *s, uint64_t pid, unsigned flags);
/* Sorts a NULL-terminated line list into the same form as the renderers. */
char *ts_join_sorted(const char *const *lines);

/* Exact comparisons; print both sides (or the first difference) on failure. */
void ts_assert_text(const char *actual, const char *expected, const char *what);
void ts_assert_session(const fo_session *s, const char *const *expected);
void ts_assert_pid(const fo_session *s, uint64_t pid, const char *const *expected);
void ts_assert_stats(const fo_session *s, const char *spec);
char *ts_render_stats(const fo_stats *st); /* malloc'd "events=1 ..." */

/* Tree invariants: parent id < child id, depth = parent depth + 1, same
 * process as the parent, one root per process, no two siblings with the
 * same frame, SLEEP nodes are leaves, the "…" node only has SLEEP
 * children, at most one [node_cap] per process and it hangs off the root,
 * every real frame has an MFA. */
void ts_check_tree(const fo_session *s);

/* Sum of self_ns over every node of every process index with this pid. */
uint64_t ts_pid_total(const fo_session *s, uint64_t pid);
/* Deepest node depth of a pid, and nodes of a pid (optionally not counting
 * [node_cap] nodes, which may be made eagerly). */
uint32_t ts_pid_max_depth(const fo_session *s, uint64_t pid);
uint32_t ts_pid_node_count(const fo_session *s, uint64_t pid, int count_node_cap);

/* --- table-driven cases -------------------------------------------------- */
typedef struct {
    const char *name;
    fo_limits limits; /* all zero: defaults; a zero field: that default */
    const char *const *script;
    const char *const *expect; /* "PID PATH NS" lines, any order */
    const char *stats;
} ts_case;

/* One cmocka test per case, named after the case. */
int ts_run_cases(const char *group, const ts_case *cases, size_t n);

/* --- deterministic pseudo-random numbers (splitmix64) -------------------- */
typedef struct {
    uint64_t state;
} ts_rng;
uint64_t ts_rng_next(ts_rng *r);
uint32_t ts_rng_below(ts_rng *r, uint32_t n); /* 0..n-1, n > 0 */

#endif
