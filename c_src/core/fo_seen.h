/* Where each process was last seen in each function: (process, frame) ->
 * the node of the newest stack it was seen in with that frame (at any
 * depth). CPU-sampled sessions look a process up here when it stops in a
 * function its stack of the moment does not hold (fo_session_cpu.c). One
 * entry per (process, frame): at most as many as the tree has nodes. */
#ifndef FO_SEEN_H
#define FO_SEEN_H

#include <stddef.h>
#include <stdint.h>

#include "fo_index.h"

typedef struct {
    uint32_t proc, frame, node;
} fo_seen_entry;

typedef struct {
    fo_seen_entry *entries;
    uint32_t count, cap;
    fo_index index;
} fo_seen;

int fo_seen_init(fo_seen *t);
void fo_seen_destroy(fo_seen *t);

/* proc was seen at node, whose frame is frame (the newest wins). Memory
 * short: nothing changes. */
void fo_seen_put(fo_seen *t, uint32_t proc, uint32_t frame, uint32_t node);

/* The node proc was last seen at with frame, or UINT32_MAX. */
uint32_t fo_seen_get(const fo_seen *t, uint32_t proc, uint32_t frame);

size_t fo_seen_memory(const fo_seen *t);

#endif
