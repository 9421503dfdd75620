/* Frame interning: {module, function, arity} -> a small dense id. */
#ifndef FO_FRAMES_H
#define FO_FRAMES_H

#include <stddef.h>
#include <stdint.h>

#include "fo_event.h"
#include "fo_index.h"

typedef struct {
    fo_mfa *mfas;     /* index: id - first_id */
    uint32_t count;   /* interned so far */
    uint32_t cap;     /* allocated entries in mfas */
    uint32_t limit;   /* max_frames */
    uint32_t first_id;
    fo_index index;   /* mfa -> position in mfas */
} fo_frames;

int fo_frames_init(fo_frames *t, uint32_t limit, uint32_t first_id);
void fo_frames_destroy(fo_frames *t);

/* The id of mfa, interned on first sight; FO_NONE (UINT32_MAX) when the
 * table is at its limit or memory is short. */
uint32_t fo_frames_intern(fo_frames *t, const fo_mfa *mfa);

/* 1 and *out when id is an interned frame. */
int fo_frames_get(const fo_frames *t, uint32_t id, fo_mfa *out);

size_t fo_frames_memory(const fo_frames *t);

#endif
