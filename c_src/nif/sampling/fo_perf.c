#include "fo_perf.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#if FO_PERF_IDENTITY
#include <asm/perf_regs.h>
#endif

#include "fo_identity.h"

/* The kernel's ring per thread: 1 + 2^4 pages (64 KiB of samples, about
 * 0.2 s at 1 kHz: the drainer copies it out every few ms). */
#define RING_DATA_PAGES 16u
/* Our buffer per thread: words of samples and the samples' index. 1 MiB
 * and 8192 samples: seconds of samples at the frequencies we use, so a
 * trace that folds late still finds its slices' samples. */
#define BUFFER_WORDS (1u << 17)
#define BUFFER_SAMPLES (1u << 13)

/* Callchain values at or above this are PERF_CONTEXT_* markers. */
#define CONTEXT_MARKER ((uint64_t)-4095)

typedef struct {
    int64_t ts;
    uint64_t pos; /* absolute word index of its first ip */
    uint64_t caller; /* fo_perf.h: the JIT address found on the C stack, 0: none */
    uint64_t proc;   /* fo_identity.h: the known process it names, 0: none */
    int64_t cpu_ns;  /* the thread's CPU time then (its task clock) */
    uint32_t n;
} sample_ref;

typedef struct {
    uint64_t tid; /* 0: free slot */
    int fd;
    void *ring;
    size_t ring_bytes;
    uint64_t *words;
    uint64_t words_head, words_oldest; /* absolute indices */
    sample_ref *refs;
    uint64_t refs_head, refs_oldest;
    int64_t dropped_until; /* newest time a sample left the buffer untaken */
} perf_thread;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t users;     /* under lock */
static uint32_t frequency; /* under lock */
static perf_thread threads[FO_PERF_MAX_THREADS];
static uint32_t open_count; /* under lock */
static long page_bytes;
/* 0 while nobody samples; a new value each time sampling starts, so the
 * threads' "noted" marks of an earlier period do not count. */
static _Atomic uint64_t generation;
static uint64_t last_generation; /* under lock */
static _Atomic uint64_t pending[FO_PERF_MAX_THREADS];
/* Set once a thread is put in pending: a pump (a kept tail request runs
 * one) looks through pending only then. */
static _Atomic int pending_any;
/* threads[] at and past this index are free (under lock): the pump runs
 * on every kept tail request, so it walks the threads in use only. */
static uint32_t threads_end;
static fo_perf_counters counters; /* under lock */
/* fo_perf_frequencies: since when each frequency ran (under lock) */
static int64_t freq_since[FO_PERF_FREQ_HISTORY];
static uint32_t freq_value[FO_PERF_FREQ_HISTORY];
static uint32_t freq_count;
static fo_perf_caller_fn caller_fn;
static fo_perf_known_fn known_fn;
/* the known processes, sorted, while a drain runs (under lock) */
static uint64_t known[FO_PERF_MAX_KNOWN];
static uint32_t known_count;
static fo_perf_frame_fn frame_fn;

static _Thread_local uint64_t cached_tid;
static _Thread_local uint64_t noted_generation;

uint64_t fo_perf_thread_id(void)
{
    if (cached_tid == 0) {
        cached_tid = (uint64_t)syscall(SYS_gettid);
    }
    return cached_tid;
}

int fo_perf_active(void)
{
    return atomic_load_explicit(&generation, memory_order_relaxed) != 0;
}

void fo_perf_note_thread(void)
{
    uint64_t gen = atomic_load_explicit(&generation, memory_order_relaxed);
    if (gen == 0 || noted_generation == gen)
        return;
    noted_generation = gen;
    uint64_t tid = fo_perf_thread_id();
    for (uint32_t i = 0; i < FO_PERF_MAX_THREADS; i++) {
        uint64_t free_slot = 0;
        if (atomic_compare_exchange_strong(&pending[i], &free_slot, tid)) {
            atomic_store(&pending_any, 1);
            return;
        }
    }
}

static fo_perf_status status_of(int err)
{
    switch (err) {
    case EACCES:
    case EPERM:
        return FO_PERF_DENIED;
    case ENOENT:
    case ENODEV:
    case ENOSYS:
    case EOPNOTSUPP:
        return FO_PERF_NO_SUPPORT;
    case ENOMEM:
        return FO_PERF_NO_MEMORY;
    default:
        return FO_PERF_FAILED;
    }
}

static int open_event(uint64_t tid, uint32_t freq)
{
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    /* A fixed period of the thread's own CPU time (the task clock counts
     * nanoseconds), not a frequency the kernel adapts: a frequency follows
     * the thread's recent rate and undersamples a burst after idle time,
     * where a period gives every nanosecond on CPU the same chance. */
    attr.sample_period = 1000000000ull / freq;
    /* READ: the thread's CPU time at each sample (the task clock's count):
     * samples in the kernel are not taken, so gaps between samples are
     * told from time the thread slept by it (fo_identity_runs) */
    attr.sample_type =
        PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_READ | PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_STACK_USER;
    attr.sample_stack_user = FO_PERF_STACK_BYTES;
#if FO_PERF_IDENTITY
    /* r13: the running process (fo_identity.h) */
    attr.sample_type |= PERF_SAMPLE_REGS_USER;
    attr.sample_regs_user = 1ull << PERF_REG_X86_R13;
#endif
    attr.disabled = 1;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    attr.exclude_callchain_kernel = 1;
    attr.use_clockid = 1;
    attr.clockid = CLOCK_MONOTONIC;
    attr.sample_max_stack = FO_PERF_MAX_FRAMES;
    return (int)syscall(SYS_perf_event_open, &attr, (pid_t)tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

fo_perf_status fo_perf_probe(int *err)
{
    *err = 0;
    int fd = open_event(fo_perf_thread_id(), 99);
    if (fd < 0) {
        *err = errno;
        return status_of(*err);
    }
    close(fd);
    return FO_PERF_OK;
}

static void free_buffers(perf_thread *t)
{
    free(t->words);
    free(t->refs);
    t->words = NULL;
    t->refs = NULL;
}

/* Caller holds lock. */
static fo_perf_status open_thread(uint64_t tid, int *err)
{
    *err = 0;
    uint32_t free_at = FO_PERF_MAX_THREADS;
    for (uint32_t i = 0; i < FO_PERF_MAX_THREADS; i++) {
        if (threads[i].tid == tid)
            return FO_PERF_OK;
        if (threads[i].tid == 0 && free_at == FO_PERF_MAX_THREADS)
            free_at = i;
    }
    if (free_at == FO_PERF_MAX_THREADS) {
        counters.open_failures++;
        return FO_PERF_NO_MEMORY;
    }
    perf_thread *t = &threads[free_at];
    memset(t, 0, sizeof *t);
    t->fd = open_event(tid, frequency);
    if (t->fd < 0) {
        *err = errno;
        counters.open_failures++;
        return status_of(*err);
    }
    /* The rings count against perf_event_mlock_kb (516 KiB a user by
     * default) and RLIMIT_MEMLOCK: with many threads, smaller rings. */
    t->ring = MAP_FAILED;
    for (uint32_t pages = RING_DATA_PAGES; pages >= 1 && t->ring == MAP_FAILED; pages /= 4) {
        t->ring_bytes = (size_t)page_bytes * (1 + pages);
        t->ring = mmap(NULL, t->ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd, 0);
    }
    t->words = calloc(BUFFER_WORDS, sizeof(uint64_t));
    t->refs = calloc(BUFFER_SAMPLES, sizeof(sample_ref));
    if (t->ring == MAP_FAILED || t->words == NULL || t->refs == NULL) {
        *err = errno;
        if (t->ring != MAP_FAILED)
            munmap(t->ring, t->ring_bytes);
        close(t->fd);
        free_buffers(t);
        memset(t, 0, sizeof *t);
        counters.open_failures++;
        return FO_PERF_NO_MEMORY;
    }
    t->tid = tid;
    ioctl(t->fd, PERF_EVENT_IOC_ENABLE, 0);
    open_count++;
    if (free_at + 1 > threads_end)
        threads_end = free_at + 1;
    return FO_PERF_OK;
}

static void close_thread(perf_thread *t)
{
    ioctl(t->fd, PERF_EVENT_IOC_DISABLE, 0);
    munmap(t->ring, t->ring_bytes);
    close(t->fd);
    free_buffers(t);
    memset(t, 0, sizeof *t);
    open_count--;
}

/* Scheduler threads by the names releases give them: OTP 25 "1_scheduler",
 * "1_dirty_cpu_s"; OTP 27 "erts_sched_1", "erts_dcpus_1". Dirty I/O
 * threads (ten by default) only run what file and NIF calls send there:
 * they are opened when a traced process's `in` comes from one, as any
 * thread named otherwise. */
static int scheduler_name(const char *comm)
{
    return strstr(comm, "_scheduler") != NULL || strstr(comm, "_dirty_cpu") != NULL ||
           strncmp(comm, "erts_sched_", 11) == 0 || strncmp(comm, "erts_dcpus_", 11) == 0;
}

/* Caller holds lock. */
static void open_named_threads(void)
{
    DIR *dir = opendir("/proc/self/task");
    if (dir == NULL)
        return;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        char *end = NULL;
        unsigned long long tid = strtoull(entry->d_name, &end, 10);
        if (end == entry->d_name || *end != '\0' || tid == 0)
            continue;
        char path[64], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%llu/comm", tid);
        FILE *f = fopen(path, "re");
        if (f == NULL)
            continue;
        if (fgets(comm, sizeof comm, f) != NULL && scheduler_name(comm)) {
            int err;
            open_thread((uint64_t)tid, &err);
        }
        fclose(f);
    }
    closedir(dir);
}

static int64_t monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* Caller holds lock. */
static void note_frequency(uint32_t freq)
{
    if (freq_count == FO_PERF_FREQ_HISTORY) {
        memmove(freq_since, freq_since + 1, sizeof(freq_since[0]) * (FO_PERF_FREQ_HISTORY - 1));
        memmove(freq_value, freq_value + 1, sizeof(freq_value[0]) * (FO_PERF_FREQ_HISTORY - 1));
        freq_count--;
    }
    freq_since[freq_count] = monotonic_ns();
    freq_value[freq_count] = freq;
    freq_count++;
}

fo_perf_status fo_perf_acquire(uint32_t freq, int *err)
{
    *err = 0;
    pthread_mutex_lock(&lock);
    fo_perf_status status = FO_PERF_OK;
    if (users == 0) {
        status = fo_perf_probe(err);
        if (status == FO_PERF_OK) {
            page_bytes = sysconf(_SC_PAGESIZE);
            frequency = freq;
            freq_count = 0;
            note_frequency(freq);
            memset(&counters, 0, sizeof counters);
            for (uint32_t i = 0; i < FO_PERF_MAX_THREADS; i++)
                atomic_store(&pending[i], 0);
            atomic_store(&pending_any, 0);
            open_named_threads();
            atomic_store(&generation, ++last_generation);
        }
    }
    if (status == FO_PERF_OK)
        users++;
    pthread_mutex_unlock(&lock);
    return status;
}

void fo_perf_release(void)
{
    pthread_mutex_lock(&lock);
    if (users > 0 && --users == 0) {
        atomic_store(&generation, 0);
        for (uint32_t i = 0; i < FO_PERF_MAX_THREADS; i++) {
            if (threads[i].tid != 0)
                close_thread(&threads[i]);
        }
        threads_end = 0;
        frequency = 0;
    }
    pthread_mutex_unlock(&lock);
}

/* Copies n bytes at ring offset `at` (wrapping) into out. */
static void ring_copy(const unsigned char *data, size_t size, uint64_t at, void *out, size_t n)
{
    size_t start = (size_t)(at % size);
    size_t first = size - start < n ? size - start : n;
    memcpy(out, data + start, first);
    if (first < n)
        memcpy((unsigned char *)out + first, data, n - first);
}

/* Room for n more words and one more sample: the oldest samples go. */
static void make_room(perf_thread *t, uint32_t n)
{
    while (t->refs_oldest < t->refs_head &&
           (t->words_head + n - t->words_oldest > BUFFER_WORDS || t->refs_head - t->refs_oldest >= BUFFER_SAMPLES)) {
        sample_ref *old = &t->refs[t->refs_oldest % BUFFER_SAMPLES];
        if (old->ts > t->dropped_until)
            t->dropped_until = old->ts;
        t->refs_oldest++;
        t->words_oldest = t->refs_oldest < t->refs_head ? t->refs[t->refs_oldest % BUFFER_SAMPLES].pos : t->words_head;
    }
}

static void keep_sample(perf_thread *t, int64_t ts, int64_t cpu_ns, const uint64_t *chain, uint64_t nr,
                        uint64_t caller, uint64_t proc, const uint64_t *stack, uint64_t stack_words)
{
    uint64_t ips[FO_PERF_MAX_FRAMES];
    uint32_t n = 0;
    for (uint64_t i = 0; i < nr && n < FO_PERF_MAX_FRAMES; i++) {
        if (chain[i] < CONTEXT_MARKER)
            ips[n++] = chain[i];
    }
    uint64_t skipped = n > 0 && frame_fn != NULL && stack_words > 0
                           ? frame_fn(ips[0], n > 1 ? ips[1] : 0, stack, stack_words)
                           : 0;
    if (skipped != 0) {
        n = n < FO_PERF_MAX_FRAMES ? n + 1 : n;
        memmove(&ips[2], &ips[1], sizeof(uint64_t) * (n - 2));
        ips[1] = skipped;
        counters.skipped_frames++;
    }
    if (n == 0)
        return;
    make_room(t, n);
    for (uint32_t i = 0; i < n; i++)
        t->words[(t->words_head + i) % BUFFER_WORDS] = ips[i];
    sample_ref *ref = &t->refs[t->refs_head % BUFFER_SAMPLES];
    ref->ts = ts;
    ref->pos = t->words_head;
    ref->caller = caller;
    ref->proc = proc;
    ref->cpu_ns = cpu_ns;
    ref->n = n;
    if (proc != 0)
        counters.identified++;
    t->words_head += n;
    t->refs_head++;
    counters.samples++;
}

/* The known processes, read again before the next drain that finds
 * samples once marked stale (caller holds lock): a read walks the whole
 * tail table, and most drains (a kept request's slices, one at a time)
 * find none. */
static int known_stale = 1;

static void read_known(void)
{
    known_count = known_fn != NULL ? fo_identity_sort(known, known_fn(known, FO_PERF_MAX_KNOWN)) : 0;
    known_stale = 0;
}

/* Caller holds lock. */
static void drain_ring(perf_thread *t)
{
    struct perf_event_mmap_page *meta = t->ring;
    const unsigned char *data = (const unsigned char *)t->ring + page_bytes;
    size_t size = t->ring_bytes - (size_t)page_bytes;
    uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
    uint64_t tail = meta->data_tail;
    /* a sample: header, pid/tid, time, CPU time, nr, the chain, the user registers
     * (x86-64: their ABI, r13), then the stack copy: its size, the bytes,
     * their dynamic size */
    uint64_t record[5 + FO_PERF_MAX_FRAMES + 2 + 3 + FO_PERF_STACK_BYTES / 8];
    if (tail < head && known_stale)
        read_known();
    while (tail < head) {
        struct perf_event_header header;
        ring_copy(data, size, tail, &header, sizeof header);
        if (header.size < sizeof header)
            break; /* cannot happen with a sane kernel: stop rather than spin */
        if (header.type == PERF_RECORD_SAMPLE && header.size <= sizeof record) {
            ring_copy(data, size, tail, record, header.size);
            /* record[0] header, [1] pid|tid, [2] time, [3] CPU time, [4] nr,
             * [5..] ips, then the registers and the stack copy: size,
             * words, dynamic size */
            uint64_t words = header.size / sizeof(uint64_t);
            if (words < 5) {
                tail += header.size;
                continue;
            }
            uint64_t nr = record[4] < words - 5 ? record[4] : words - 5;
            uint64_t caller = 0;
            uint64_t at = 5 + nr;
            uint64_t stack_words = 0;
            uint64_t reg = 0;
#if FO_PERF_IDENTITY
            /* the registers' ABI, then r13 unless it is 0 (none: a kernel thread) */
            if (at < words) {
                uint64_t abi = record[at++];
                if (abi != 0 && at < words)
                    reg = record[at++];
            }
#endif
            if (at < words && record[at] > 0 && at + 1 + record[at] / 8 < words) {
                uint64_t copied = record[at] / 8;
                uint64_t dyn = record[at + 1 + copied] / 8;
                stack_words = dyn < copied ? dyn : copied;
                if (caller_fn != NULL && nr > 0)
                    caller = caller_fn(record[5], &record[at + 1], stack_words);
            }
            const uint64_t *stack = stack_words > 0 ? &record[at + 1] : NULL;
            uint64_t proc = fo_identity_of(reg, stack, stack_words, known, known_count);
            keep_sample(t, (int64_t)record[2], (int64_t)record[3], &record[5], nr, caller, proc, stack, stack_words);
        } else if (header.type == PERF_RECORD_LOST && header.size >= sizeof header + 16) {
            uint64_t lost[3];
            ring_copy(data, size, tail, lost, sizeof lost);
            counters.lost += lost[2];
        }
        tail += header.size;
    }
    __atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
}

/* The first sample of t at or after ts (samples of one thread come in
 * time order). Caller holds lock. */
static uint64_t first_at(const perf_thread *t, int64_t ts)
{
    uint64_t lo = t->refs_oldest, hi = t->refs_head;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (t->refs[mid % BUFFER_SAMPLES].ts < ts)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void fo_perf_pump(void)
{
    if (!fo_perf_active())
        return;
    pthread_mutex_lock(&lock);
    if (users > 0) {
        int look = atomic_exchange(&pending_any, 0);
        for (uint32_t i = 0; look && i < FO_PERF_MAX_THREADS; i++) {
            uint64_t tid = atomic_exchange(&pending[i], 0);
            int err;
            if (tid != 0)
                open_thread(tid, &err);
        }
        known_stale = 1;
        for (uint32_t i = 0; i < threads_end; i++) {
            if (threads[i].tid != 0)
                drain_ring(&threads[i]);
        }
    }
    pthread_mutex_unlock(&lock);
}

uint32_t fo_perf_take(uint64_t thread, int64_t from_ns, int64_t to_ns, fo_perf_each fn, void *ctx)
{
    uint32_t given = 0;
    pthread_mutex_lock(&lock);
    perf_thread *t = NULL;
    for (uint32_t i = 0; i < threads_end && t == NULL; i++) {
        if (threads[i].tid == thread && thread != 0)
            t = &threads[i];
    }
    if (t != NULL && from_ns < to_ns) {
        known_stale = 1;
        drain_ring(t); /* the slice may have ended a moment ago */
        if (from_ns <= t->dropped_until)
            counters.overwritten++;
        uint64_t lo = first_at(t, from_ns);
        uint64_t ips[FO_PERF_MAX_FRAMES];
        for (uint64_t k = lo; k < t->refs_head; k++) {
            const sample_ref *ref = &t->refs[k % BUFFER_SAMPLES];
            if (ref->ts >= to_ns)
                break;
            for (uint32_t i = 0; i < ref->n; i++)
                ips[i] = t->words[(ref->pos + i) % BUFFER_WORDS];
            fn(ctx, ref->ts, ips, ref->n, ref->caller);
            given++;
        }
    }
    pthread_mutex_unlock(&lock);
    return given;
}

uint32_t fo_perf_frequencies(int64_t *ts, uint32_t *freq, uint32_t max)
{
    pthread_mutex_lock(&lock);
    uint32_t n = users > 0 ? freq_count : 0;
    uint32_t skip = n > max ? n - max : 0;
    for (uint32_t i = skip; i < n; i++) {
        ts[i - skip] = freq_since[i];
        freq[i - skip] = freq_value[i];
    }
    pthread_mutex_unlock(&lock);
    return n - skip;
}

uint32_t fo_perf_threads(uint64_t *tids, uint32_t max)
{
    uint32_t n = 0;
    pthread_mutex_lock(&lock);
    for (uint32_t i = 0; i < threads_end && n < max; i++) {
        if (threads[i].tid != 0)
            tids[n++] = threads[i].tid;
    }
    pthread_mutex_unlock(&lock);
    return n;
}

void fo_perf_set_frequency(uint32_t freq)
{
    if (freq == 0)
        return;
    pthread_mutex_lock(&lock);
    if (users > 0 && freq != frequency) {
        /* what the kernel holds was sampled at the old frequency: copied
         * out now, before the change is noted */
        known_stale = 1;
        for (uint32_t i = 0; i < FO_PERF_MAX_THREADS; i++) {
            if (threads[i].tid != 0)
                drain_ring(&threads[i]);
        }
        frequency = freq;
        note_frequency(freq);
        uint64_t period = 1000000000ull / freq;
        for (uint32_t i = 0; i < FO_PERF_MAX_THREADS; i++) {
            if (threads[i].tid != 0)
                ioctl(threads[i].fd, PERF_EVENT_IOC_PERIOD, &period);
        }
    }
    pthread_mutex_unlock(&lock);
}

void fo_perf_set_caller_finder(fo_perf_caller_fn fn)
{
    caller_fn = fn;
}

void fo_perf_set_frame_finder(fo_perf_frame_fn fn)
{
    frame_fn = fn;
}

void fo_perf_set_known_fn(fo_perf_known_fn fn)
{
    pthread_mutex_lock(&lock);
    known_fn = fn;
    pthread_mutex_unlock(&lock);
}

/* A sample period at the frequency sampling runs at, 0 when it does not
 * (caller holds lock). */
static int64_t period_locked(void)
{
    return frequency > 0 ? 1000000000ll / frequency : 0;
}

int64_t fo_perf_period_ns(void)
{
    pthread_mutex_lock(&lock);
    int64_t period_ns = period_locked();
    pthread_mutex_unlock(&lock);
    return period_ns;
}

typedef struct {
    fo_perf_slice_fn fn;
    void *ctx;
    uint64_t thread;
} runs_ctx;

static void each_run(void *ctx, int64_t from_ns, int64_t to_ns)
{
    runs_ctx *r = ctx;
    r->fn(r->ctx, r->thread, from_ns, to_ns);
}

uint32_t fo_perf_runs(uint64_t proc, int64_t from_ns, int64_t to_ns, fo_perf_slice_fn fn, void *ctx, int *overwritten)
{
    uint32_t given = 0;
    *overwritten = 0;
    if (proc == 0 || from_ns >= to_ns)
        return 0;
    static fo_identity_sample window[BUFFER_SAMPLES]; /* under lock */
    pthread_mutex_lock(&lock);
    int64_t period_ns = period_locked();
    if (period_ns == 0)
        period_ns = 1000000;
    known_stale = 1;
    for (uint32_t i = 0; i < threads_end; i++) {
        perf_thread *t = &threads[i];
        if (t->tid == 0)
            continue;
        drain_ring(t);
        if (from_ns <= t->dropped_until) {
            counters.overwritten++;
            *overwritten = 1;
        }
        uint32_t n = 0;
        for (uint64_t k = first_at(t, from_ns); k < t->refs_head && n < BUFFER_SAMPLES; k++) {
            const sample_ref *ref = &t->refs[k % BUFFER_SAMPLES];
            if (ref->ts >= to_ns)
                break;
            window[n++] = (fo_identity_sample){ref->ts, ref->cpu_ns, ref->proc};
        }
        runs_ctx r = {fn, ctx, t->tid};
        given += fo_identity_runs(window, n, proc, from_ns, to_ns, period_ns, each_run, &r);
    }
    pthread_mutex_unlock(&lock);
    return given;
}


void fo_perf_counters_read(fo_perf_counters *out)
{
    pthread_mutex_lock(&lock);
    *out = counters;
    out->users = users;
    out->threads = open_count;
    out->frequency = frequency;
    pthread_mutex_unlock(&lock);
}

uint32_t fo_perf_open_fds(void)
{
    pthread_mutex_lock(&lock);
    uint32_t n = open_count;
    pthread_mutex_unlock(&lock);
    return n;
}
