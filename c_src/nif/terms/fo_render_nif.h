/* The profile's views of a finished tree (fo_render.h) as terms. */
#ifndef FO_RENDER_NIF_H
#define FO_RENDER_NIF_H

#include <erl_nif.h>

/* Bytes of one node in a process's tree binary (see fo_render_nif.c). */
#define FO_TREE_NODE_BYTES 40u

// render(Tree, Names) -> {Stacks, Samples, Trees, TreeNames, WithoutText,
//                         Alloc, AllocTrees}
// Tree: what finish/2 returned ({Frames, Pids, Nodes, MaxTextBytes}, or
// with allocation counted {..., Alloc}: fo_export.h).
// Names: a tuple as long as Frames, each frame's text (a binary) or nil
// (drop the time and samples of the stacks ending in it). Frames that read
// the same are one frame.
//   Stacks: #{Pid => [{Text, Us}]}: the stacks with time, in text order,
//     each Text "a;b;c" a slice of the text of a stack below it.
//   Samples: #{Pid => [{Text, Samples, Weight}]}: the stacks with samples.
//   Trees: #{Pid => binary()}: the tree in preorder, children by name, one
//     FO_TREE_NODE_BYTES record per node with time or samples at or below
//     it: <<Depth:32, Name:32, SelfUs:64, TotalUs:64, Samples:64,
//     Weight:64>> (big endian; Name indexes TreeNames, 16#FFFFFFFF for the
//     process root at depth 0).
//   TreeNames: a tuple of the distinct texts ("" for dropped frames).
//   WithoutText: stacks left out of Stacks and Samples because their texts
//     passed MaxTextBytes (the trees keep them).
//   Alloc: #{Pid => [{Text, Words}]}: the stacks words were allocated in
//     (charged at garbage collections, fo_session_gc.c), in text order.
//   AllocTrees: #{Pid => binary()}: the tree of the nodes with allocation
//     at or below them, in Trees' records and order: SelfUs and TotalUs
//     are words, Samples the collections charged there, Weight the words.
// Small trees render on the calling scheduler, big ones are rescheduled
// onto a dirty scheduler (fo_render_dirty_nif).
ERL_NIF_TERM fo_render_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM fo_render_dirty_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
