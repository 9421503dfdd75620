/* Every atom the NIF uses, written once (X-macro): declared here, made in
 * load. Adding an atom is one line. */
#ifndef FO_ATOMS_H
#define FO_ATOMS_H

#include <erl_nif.h>

#define FO_ATOMS(A)                                                                            \
    A(ok)                                                                                      \
    A(error)                                                                                   \
    A(undefined)                                                                               \
    A(nil)                                                                                     \
    A(trace_ts)                                                                                \
    A(trace)                                                                                   \
    A(call)                                                                                    \
    A(return_to)                                                                               \
    A(in)                                                                                      \
    A(out)                                                                                     \
    A(in_exiting)                                                                              \
    A(out_exiting)                                                                             \
    A(out_exited)                                                                              \
    A(exit)                                                                                    \
    A(gc_minor_start)                                                                          \
    A(gc_minor_end)                                                                            \
    A(gc_major_start)                                                                          \
    A(gc_major_end)                                                                            \
    A(gc_start)                                                                                \
    A(gc_end)                                                                                  \
    A(garbage_collection)                                                                      \
    A(sleep)                                                                                   \
    A(depth_cap)                                                                               \
    A(node_cap)                                                                                \
    A(waiting)                                                                                 \
    A(same)                                                                                    \
    A(plain)                                                                                   \
    A(waited)                                                                                  \
    A(leading)                                                                                 \
    A(busy)                                                                                    \
    A(gc_minor)                                                                                \
    A(gc_major)                                                                                \
    A(process)                                                                                 \
    A(max_nodes)                                                                               \
    A(max_depth)                                                                               \
    A(max_processes)                                                                           \
    A(max_frames)                                                                              \
    A(max_stack_frames)                                                                        \
    A(native_per_second)                                                                       \
    A(events)                                                                                  \
    A(dropped_events)                                                                          \
    A(malformed_events)                                                                        \
    A(ignored_events)                                                                          \
    A(truncated_stacks)                                                                        \
    A(depth_truncations)                                                                       \
    A(node_limit_hits)                                                                         \
    A(frame_limit_hits)                                                                        \
    A(process_limit_hits)                                                                      \
    A(stack_overflows)                                                                         \
    A(clock_skews)                                                                             \
    A(resyncs)                                                                                 \
    A(samples)                                                                                 \
    A(memory_bytes)                                                                            \
    A(nodes)                                                                                   \
    A(processes)                                                                               \
    A(frames)                                                                                  \
    A(remove)                                                                                  \
    A(discard)                                                                                 \
    A(trace_status)                                                                            \
    A(match_spec_result)                                                                       \
    A(extra)                                                                                   \
    A(timestamp)                                                                               \
    A(replay)                                                                                  \
    A(cpu_sampled)                                                                             \
    A(flame_on_context)                                                                        \
    A(stale)                                                                                   \
    A(moved)                                                                                   \
    A(slot)                                                                                    \
    A(cpu_root)                                                                                \
    A(cpu_cut)                                                                                 \
    A(denied)                                                                                  \
    A(no_support)                                                                              \
    A(no_memory)                                                                               \
    A(failed)                                                                                  \
    A(true)                                                                                    \
    A(false)                                                                                   \
    A(stop)                                                                                    \
    A(stopped)                                                                                 \
    A(graph)                                                                                   \
    A(flame_on_callee)                                                                         \
    A(idle)                                                                                    \
    A(seq_trace)                                                                               \
    A(send)                                                                                    \
    A(receive)                                                                                 \
    A(alias)                                                                                   \
    A(label)                                                                                   \
    A(max_spans)                                                                               \
    A(max_pending_calls)                                                                       \
    A(max_fanout)                                                                             \
    A(span_id)                                                                                \
    A(parent_span_id)                                                                         \
    A(pid)                                                                                    \
    A(started_ns)                                                                             \
    A(ended_ns)                                                                               \
    A(self_ns)                                                                                \
    A(wait_ns)                                                                                \
    A(attributed_wait_ns)                                                                     \
    A(unattributed_wait_ns)                                                                   \
    A(waiting_on_pid)                                                                         \
    A(children)                                                                               \
    A(status)                                                                                 \
    A(open)                                                                                   \
    A(open_at_close)                                                                          \
    A(spans)                                                                                  \
    A(clock_offset_ns)                                                                        \
    A(orphan_requests)                                                                        \
    A(unmatched_replies)                                                                      \
    A(late_replies)                                                                           \
    A(dropped_spans)                                                                          \
    A(delegated_replies)                                                                       \
    A(stats)                                                                                   \
    A(buffer_events)                                                                           \
    A(producer_folds)                                                                          \
    A(buffer_bytes)                                                                            \
    A(max_stack_bytes)                                                                         \
    A(attributed)                                                                              \
    A(spawned)                                                                                 \
    A(flame_on_left)                                                                           \
    A(timeout)                                                                                 \
    A(kind)                                                                                    \
    A(opener_pid)                                                                              \
    A(unattributed_by)                                                                         \
    A(port)                                                                                    \
    A(timer)                                                                                   \
    A(other)                                                                                   \
    A(edges)                                                                                   \
    A(waiter_span_id)                                                                          \
    A(waker_span_id)                                                                           \
    A(attributed_ns)                                                                           \
    A(wakes)                                                                                   \
    A(root)                                                                                    \
    A(request)                                                                                 \
    A(work)                                                                                    \
    A(continuation)                                                                            \
    A(joins)                                                                                   \
    A(leaves)                                                                                  \
    A(continuations)                                                                           \
    A(dropped_continuations)                                                                   \
    A(edge_limit_hits)                                                                         \
    A(attributed_wakes)                                                                        \
    A(followers)                                                                               \
    A(spawn_request)                                                                           \
    A(spawn_reply)                                                                             \
    A(follower)                                                                                \
    A(note_overflows)                                                                          \
    A(next)                                                                                    \
    A(flame_on_next)                                                                           \
    A(flame_on_in)                                                                             \
    A(full)                                                                                    \
    A(slept)                                                                                   \
    A(armed)                                                                                   \
    A(fired)                                                                                   \
    A(done)                                                                                    \
    A(cancelled)                                                                               \
    A(returned)                                                                                \
    A(raised)                                                                                  \
    A(return_from)                                                                             \
    A(exception_from)                                                                              \
    A(remote)                                                                                      \
    A(remote_calls)                                                                                \
    A(remote_requests)                                                                             \
    A(remote_limit_hits)                                                                           \
    A(remote_sends)                                                                                \
    A(DOWN)                                                                                        \
    A(EXIT)                                                                                        \
    A(remote_joins)                                                                                \
    A(wire)

#define FO_ATOM_DECLARE(name) extern ERL_NIF_TERM fo_atom_##name;
FO_ATOMS(FO_ATOM_DECLARE)
#undef FO_ATOM_DECLARE

/* 'Elixir.FlameOn.Client.Core.Native': the profiler's own calls are not profiled. */
extern ERL_NIF_TERM fo_atom_native_module;
/* '$gen_call', the tag of a GenServer request. */
extern ERL_NIF_TERM fo_atom_gen_call;

void fo_atoms_init(ErlNifEnv *env);

#endif
