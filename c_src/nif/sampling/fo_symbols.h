/* Names for the addresses in CPU samples (fo_perf.h). JIT code is named by
 * the perf map the VM writes when started with +JPperf true (or map):
 * /tmp/perf-<os pid>.map, one line per function, "<start> <size> <name>"
 * in hex, names like $'Elixir.Mod':fun/2, $lists:map/2, $global::fragment.
 * Modules loaded later append lines; code memory of a purged module may be
 * reused, so a later line wins over the earlier lines it overlaps. The
 * runtime's own C code is named by its dynamic symbols, where there is one.
 *
 * Node-wide. Lookups take a read lock; fo_symbols_refresh (the drainer's
 * tick, a trace's finish) reads what the VM appended since. */
#ifndef FO_SYMBOLS_H
#define FO_SYMBOLS_H

#include <erl_nif.h>
#include <stdint.h>

#include "fo_event.h"

/* Lines of the perf map kept at most: past it, new lines are counted
 * (fo_symbols_counters.dropped), not kept. */
#define FO_SYMBOLS_MAX_ENTRIES (1u << 20)

typedef enum {
    FO_SYM_NONE = 0, /* not JIT code (the runtime's C code, a library) */
    FO_SYM_ERLANG,   /* an Erlang function: mfa is set */
    FO_SYM_GLUE,     /* JIT code that is no function of the program: module
                        headers, erts_beamasm's stubs, unnamed atoms */
    FO_SYM_FRAGMENT  /* the runtime's shared JIT fragments ($global::...),
                        which call its C code */
} fo_sym_kind;

int fo_symbols_init(void);
void fo_symbols_destroy(void);

/* Whether this VM writes a perf map (started with +JPperf true or map). */
int fo_symbols_map_exists(void);

/* Reads what the VM appended to its perf map since the last call (nothing
 * when the file did not grow). Takes the write lock only when it did. */
void fo_symbols_refresh(void);

/* A fragment's mfa names nothing but this: arity FO_FRAGMENT_SCHEDULER
 * for the scheduler loop's ($global::process_main), which calls the
 * scheduler's C code (and a tracer's in/out callbacks), not code an
 * Erlang function called. */
#define FO_FRAGMENT_SCHEDULER 1u

/* What ip is in JIT code. For a return address pass the address minus
 * one (it may be the first byte after its function). */
fo_sym_kind fo_symbols_jit(uint64_t ip, fo_mfa *mfa);

/* The C function ip is in, as a frame ($native:name/0); unnamed code gets
 * the name "" (a frame the views call "[native]"). */
void fo_symbols_native(uint64_t ip, fo_mfa *mfa);

typedef struct {
    uint32_t entries;     /* perf map lines kept */
    uint64_t lines;       /* lines read */
    uint64_t unnamed;     /* lines whose atoms do not exist (kept as glue) */
    uint64_t dropped;     /* lines past FO_SYMBOLS_MAX_ENTRIES */
    uint64_t refreshes;   /* times new lines were read */
} fo_symbols_counters;

void fo_symbols_counters_read(fo_symbols_counters *out);

#endif
