#include "fo_cpu_helpers.h"

#include <pthread.h>

typedef struct {
    uint64_t thread; /* 0: free */
    ErlNifPid pid;
} helper;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static helper helpers[FO_CPU_HELPERS_MAX];

void fo_cpu_helpers_register(uint64_t thread, const ErlNifPid *pid)
{
    pthread_mutex_lock(&lock);
    helper *free_entry = NULL;
    for (uint32_t i = 0; i < FO_CPU_HELPERS_MAX; i++) {
        if (helpers[i].thread == thread) {
            helpers[i].pid = *pid;
            pthread_mutex_unlock(&lock);
            return;
        }
        if (helpers[i].thread == 0 && free_entry == NULL)
            free_entry = &helpers[i];
    }
    if (free_entry != NULL) {
        free_entry->thread = thread;
        free_entry->pid = *pid;
    }
    pthread_mutex_unlock(&lock);
}

void fo_cpu_helpers_unregister(const ErlNifPid *pid)
{
    pthread_mutex_lock(&lock);
    for (uint32_t i = 0; i < FO_CPU_HELPERS_MAX; i++) {
        if (helpers[i].thread != 0 && enif_compare_pids(&helpers[i].pid, pid) == 0)
            helpers[i].thread = 0;
    }
    pthread_mutex_unlock(&lock);
}

int fo_cpu_helpers_for(uint64_t thread, ErlNifPid *pid)
{
    int found = 0;
    pthread_mutex_lock(&lock);
    for (uint32_t i = 0; i < FO_CPU_HELPERS_MAX && found != 2; i++) {
        if (helpers[i].thread == 0)
            continue;
        if (helpers[i].thread == thread) {
            *pid = helpers[i].pid;
            found = 2;
        } else if (!found) {
            *pid = helpers[i].pid;
            found = 1;
        }
    }
    pthread_mutex_unlock(&lock);
    return found != 0;
}
