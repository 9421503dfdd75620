#define _GNU_SOURCE /* dladdr1 */
#include "fo_symbols.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fo_clock.h"

typedef struct {
    uint64_t start, end;
    uint64_t seq; /* line number: a later line wins where two overlap */
    fo_mfa mfa;
    uint8_t kind;
} entry;

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static entry *entries; /* sorted by start, no two overlapping */
static uint32_t entry_count;
static long map_offset; /* bytes of the map read (whole lines) */
static uint64_t next_seq;
static fo_symbols_counters counters;
static _Atomic int64_t checked_ns; /* when the map's size was last looked at (fo_symbols_refresh) */
static ErlNifEnv *atom_env; /* for atom lookups: atoms need no process */
static ERL_NIF_TERM native_module, unnamed_function;

/* Named C code, by address (dladdr1 scans a symbol table: too slow per
 * sample). Direct-mapped; a miss costs one lookup. */
#define NATIVE_CACHE 4096u
typedef struct {
    uint64_t ip;
    ERL_NIF_TERM name;
} native_slot;
static pthread_mutex_t native_lock = PTHREAD_MUTEX_INITIALIZER;
static native_slot native_cache[NATIVE_CACHE];

int fo_symbols_init(void)
{
    if (atom_env != NULL)
        return 1;
    atom_env = enif_alloc_env();
    if (atom_env == NULL)
        return 0;
    native_module = enif_make_atom(atom_env, "$native");
    unnamed_function = enif_make_atom(atom_env, "");
    return 1;
}

void fo_symbols_destroy(void)
{
    pthread_rwlock_wrlock(&lock);
    free(entries);
    entries = NULL;
    entry_count = 0;
    map_offset = 0;
    next_seq = 0;
    memset(&counters, 0, sizeof counters);
    atomic_store(&checked_ns, 0);
    pthread_rwlock_unlock(&lock);
    pthread_mutex_lock(&native_lock);
    memset(native_cache, 0, sizeof native_cache);
    pthread_mutex_unlock(&native_lock);
    if (atom_env != NULL)
        enif_free_env(atom_env);
    atom_env = NULL;
}

static void map_path(char *buf, size_t size)
{
    snprintf(buf, size, "/tmp/perf-%ld.map", (long)getpid());
}

int fo_symbols_map_exists(void)
{
    char path[64];
    map_path(path, sizeof path);
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* One atom of a name: 'quoted' (\\ and \' unescaped) or bare up to one of
 * stop. Returns where it ends, NULL when malformed. */
static const char *read_atom(const char *p, const char *stop, char *out, size_t size, size_t *len)
{
    size_t n = 0;
    if (*p == '\'') {
        p++;
        while (*p != '\0' && *p != '\'') {
            if (*p == '\\' && p[1] != '\0')
                p++;
            if (n + 1 >= size)
                return NULL;
            out[n++] = *p++;
        }
        if (*p != '\'')
            return NULL;
        p++;
    } else {
        while (*p != '\0' && strchr(stop, *p) == NULL) {
            if (n + 1 >= size)
                return NULL;
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
    *len = n;
    return n == 0 ? NULL : p;
}

/* "$mod:fun/2" (maybe "-CodeInfoPrologue" after it) -> the frame; other
 * names are glue. */
static uint8_t parse_name(const char *name, fo_mfa *mfa)
{
    if (strncmp(name, "$global::", 9) == 0) {
        mfa->arity = strcmp(name + 9, "process_main") == 0 ? FO_FRAGMENT_SCHEDULER : 0;
        return FO_SYM_FRAGMENT;
    }
    if (name[0] != '$' || strncmp(name, "$erts_beamasm:", 14) == 0)
        return FO_SYM_GLUE;
    char module[256], function[256];
    size_t module_len, function_len;
    const char *p = read_atom(name + 1, ":", module, sizeof module, &module_len);
    if (p == NULL || *p != ':' || p[1] == ':')
        return FO_SYM_GLUE; /* $mod::codeHeader and the like */
    p = read_atom(p + 1, "/", function, sizeof function, &function_len);
    if (p == NULL || *p != '/')
        return FO_SYM_GLUE;
    char *end = NULL;
    unsigned long arity = strtoul(p + 1, &end, 10);
    if (end == p + 1 || arity > 255 || (*end != '\0' && *end != '-'))
        return FO_SYM_GLUE;
    ERL_NIF_TERM m, f;
    if (!enif_make_existing_atom_len(atom_env, module, module_len, &m, ERL_NIF_LATIN1) ||
        !enif_make_existing_atom_len(atom_env, function, function_len, &f, ERL_NIF_LATIN1)) {
        counters.unnamed++;
        return FO_SYM_GLUE;
    }
    mfa->module = (uint64_t)m;
    mfa->function = (uint64_t)f;
    mfa->arity = (uint32_t)arity;
    return FO_SYM_ERLANG;
}

static int by_start(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* entries + fresh (caller holds the write lock): sorted, and where two
 * overlap the later line stays. 0 when memory is short (nothing changes). */
static int merge(entry *fresh, uint32_t fresh_count)
{
    entry *all = malloc(sizeof(entry) * ((size_t)entry_count + fresh_count));
    if (all == NULL)
        return 0;
    if (entry_count > 0) /* entries is NULL before the first merge */
        memcpy(all, entries, sizeof(entry) * entry_count);
    memcpy(all + entry_count, fresh, sizeof(entry) * fresh_count);
    uint32_t total = entry_count + fresh_count;
    qsort(all, total, sizeof(entry), by_start);
    uint32_t kept = 0;
    for (uint32_t i = 0; i < total; i++) {
        int wins = 1;
        while (kept > 0 && all[kept - 1].end > all[i].start) {
            if (all[kept - 1].seq > all[i].seq) {
                wins = 0;
                break;
            }
            kept--;
        }
        if (wins)
            all[kept++] = all[i];
    }
    free(entries);
    entries = all;
    entry_count = kept;
    return 1;
}

/* Lines from `text` (whole lines only) into fresh; returns the bytes
 * used. */
static size_t parse_lines(char *text, size_t len, entry *fresh, uint32_t *fresh_count, uint32_t room)
{
    size_t used = 0;
    while (used < len) {
        char *line = text + used;
        char *nl = memchr(line, '\n', len - used);
        if (nl == NULL)
            break; /* the VM is writing it: next time */
        *nl = '\0';
        used = (size_t)(nl - text) + 1;
        counters.lines++;
        char *end = NULL;
        uint64_t start = strtoull(line, &end, 16);
        if (end == line || *end != ' ')
            continue;
        char *size_at = end + 1;
        uint64_t size = strtoull(size_at, &end, 16);
        if (end == size_at || *end != ' ' || size == 0)
            continue;
        if (*fresh_count >= room) {
            counters.dropped++;
            continue;
        }
        entry *e = &fresh[(*fresh_count)++];
        e->start = start;
        e->end = start + size;
        e->seq = next_seq++;
        memset(&e->mfa, 0, sizeof e->mfa);
        e->kind = parse_name(end + 1, &e->mfa);
    }
    return used;
}

/* A trace's finish asks too (names for its last samples), and on the
 * tail path every kept request finishes: thousands a second under load,
 * each a stat of the map (2-4 us here). Asked again within this long,
 * the map is taken as read. A module loaded within it, sampled and
 * finished before the next look (the drainer's tick or a later finish)
 * has its frames unnamed: its code runs within the last millisecond. */
#define RECHECK_NS 1000000

void fo_symbols_refresh(void)
{
    int64_t now = fo_tracer_clock_ns();
    int64_t last = atomic_load_explicit(&checked_ns, memory_order_relaxed);
    if (now - last < RECHECK_NS && last != 0)
        return;
    atomic_store_explicit(&checked_ns, now, memory_order_relaxed);
    char path[64];
    map_path(path, sizeof path);
    struct stat st;
    if (atom_env == NULL || stat(path, &st) != 0)
        return;
    pthread_rwlock_rdlock(&lock);
    int grew = st.st_size > map_offset;
    pthread_rwlock_unlock(&lock);
    if (!grew)
        return;
    pthread_rwlock_wrlock(&lock);
    FILE *f = fopen(path, "re");
    if (f != NULL && fseek(f, map_offset, SEEK_SET) == 0) {
        size_t want = (size_t)(st.st_size - map_offset);
        char *text = malloc(want + 1);
        uint32_t room = FO_SYMBOLS_MAX_ENTRIES > entry_count ? FO_SYMBOLS_MAX_ENTRIES - entry_count : 0;
        /* a line is at least 8 bytes: that many entries at most */
        size_t most = want / 8 + 1 < room ? want / 8 + 1 : room;
        entry *fresh = malloc(sizeof(entry) * (most > 0 ? most : 1));
        size_t got = text != NULL ? fread(text, 1, want, f) : 0;
        if (text != NULL && fresh != NULL && got > 0) {
            text[got] = '\0';
            uint32_t fresh_count = 0;
            uint64_t lines_before = counters.lines, seq_before = next_seq;
            size_t used = parse_lines(text, got, fresh, &fresh_count, (uint32_t)most);
            if (fresh_count == 0 || merge(fresh, fresh_count)) {
                map_offset += (long)used;
                counters.refreshes++;
            } else {
                counters.lines = lines_before; /* read again next time */
                next_seq = seq_before;
            }
        }
        free(text);
        free(fresh);
    }
    if (f != NULL)
        fclose(f);
    counters.entries = entry_count;
    pthread_rwlock_unlock(&lock);
}

fo_sym_kind fo_symbols_jit(uint64_t ip, fo_mfa *mfa)
{
    fo_sym_kind kind = FO_SYM_NONE;
    pthread_rwlock_rdlock(&lock);
    uint32_t lo = 0, hi = entry_count;
    while (lo < hi) { /* the first entry starting past ip */
        uint32_t mid = lo + (hi - lo) / 2;
        if (entries[mid].start <= ip)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo > 0 && ip < entries[lo - 1].end) {
        kind = (fo_sym_kind)entries[lo - 1].kind;
        *mfa = entries[lo - 1].mfa;
    }
    pthread_rwlock_unlock(&lock);
    return kind;
}

static ERL_NIF_TERM native_name(uint64_t ip)
{
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (dladdr1((void *)(uintptr_t)ip, &info, (void **)&sym, RTLD_DL_SYMENT) == 0 || info.dli_sname == NULL ||
        sym == NULL)
        return unnamed_function;
    uint64_t from = (uint64_t)(uintptr_t)info.dli_saddr;
    /* the nearest symbol below may end before ip (static functions have
     * none in a stripped binary) */
    if (ip < from || (sym->st_size != 0 && ip >= from + sym->st_size))
        return unnamed_function;
    size_t len = strlen(info.dli_sname);
    return enif_make_atom_len(atom_env, info.dli_sname, len < 255 ? len : 255);
}

void fo_symbols_native(uint64_t ip, fo_mfa *mfa)
{
    mfa->module = (uint64_t)native_module;
    mfa->arity = 0;
    native_slot *slot = &native_cache[(ip >> 2) & (NATIVE_CACHE - 1)];
    pthread_mutex_lock(&native_lock);
    int hit = slot->ip == ip && slot->name != 0;
    ERL_NIF_TERM name = slot->name;
    pthread_mutex_unlock(&native_lock);
    if (!hit) {
        name = native_name(ip);
        pthread_mutex_lock(&native_lock);
        slot->ip = ip;
        slot->name = name;
        pthread_mutex_unlock(&native_lock);
    }
    mfa->function = (uint64_t)name;
}

void fo_symbols_counters_read(fo_symbols_counters *out)
{
    pthread_rwlock_rdlock(&lock);
    *out = counters;
    out->entries = entry_count;
    pthread_rwlock_unlock(&lock);
}
