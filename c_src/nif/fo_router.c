#include "fo_router.h"

#include <string.h>

#include "fo_hash.h"

typedef struct {
    uint64_t label;
    fo_session_res *res; /* NULL: free */
} route_label;

typedef struct {
    uint64_t pid;        /* 0: free */
    fo_session_res *res;
} route_pid;

/* Fixed sizes keep the router's memory bounded and its lookups lock-short;
 * the pid table is kept at most half full. */
#define PID_SLOTS (FO_ROUTER_MAX_PIDS * 2u)

static ErlNifRWLock *lock;
static route_label labels[FO_ROUTER_MAX_SESSIONS];
static route_pid *pids;
static uint32_t pid_count;
static uint32_t session_count;

int fo_router_init(void)
{
    if (lock != NULL)
        return 1;
    pids = enif_alloc(sizeof(route_pid) * PID_SLOTS);
    lock = enif_rwlock_create("flame_on_router");
    if (pids == NULL || lock == NULL)
        return 0;
    memset(pids, 0, sizeof(route_pid) * PID_SLOTS);
    memset(labels, 0, sizeof(labels));
    return 1;
}

void fo_router_destroy(void)
{
    if (lock != NULL)
        enif_rwlock_destroy(lock);
    enif_free(pids);
    lock = NULL;
    pids = NULL;
}

static uint32_t pid_slot(uint64_t pid)
{
    uint32_t i = (uint32_t)fo_hash_mix(pid) & (PID_SLOTS - 1);
    while (pids[i].pid != 0 && pids[i].pid != pid)
        i = (i + 1) & (PID_SLOTS - 1);
    return i;
}

static int insert_pid(uint64_t pid, fo_session_res *res)
{
    uint32_t i = pid_slot(pid);
    if (pids[i].pid == pid) {
        if (pids[i].res == NULL) /* left by an unmap without memory to rebuild */
            pids[i].res = res;
        return pids[i].res == res;
    }
    if (pid_count >= FO_ROUTER_MAX_PIDS)
        return 0;
    pids[i].pid = pid;
    pids[i].res = res;
    pid_count++;
    return 1;
}

int fo_router_register(fo_session_res *res, uint64_t label, uint64_t root)
{
    int ok = 0;
    enif_rwlock_rwlock(lock);
    uint32_t free_slot = FO_ROUTER_MAX_SESSIONS;
    int taken = 0;
    for (uint32_t i = 0; i < FO_ROUTER_MAX_SESSIONS; i++) {
        if (labels[i].res == NULL) {
            if (free_slot == FO_ROUTER_MAX_SESSIONS)
                free_slot = i;
        } else if (labels[i].label == label || labels[i].res == res) {
            taken = 1;
        }
    }
    if (!taken && free_slot < FO_ROUTER_MAX_SESSIONS && insert_pid(root, res)) {
        labels[free_slot].label = label;
        labels[free_slot].res = res;
        session_count++;
        enif_keep_resource(res);
        ok = 1;
    }
    enif_rwlock_rwunlock(lock);
    return ok;
}

/* Rebuilds the pid table without res's processes (open addressing has
 * no cheap delete; this runs once per finished trace). */
static void drop_pids_of(const fo_session_res *res)
{
    route_pid *old = pids;
    route_pid *fresh = enif_alloc(sizeof(route_pid) * PID_SLOTS);
    if (fresh == NULL) {
        /* no memory for a copy: unmap in place, leaving the chains intact
         * by pointing them at nothing */
        for (uint32_t i = 0; i < PID_SLOTS; i++) {
            if (old[i].pid != 0 && old[i].res == res)
                old[i].res = NULL;
        }
        return;
    }
    memset(fresh, 0, sizeof(route_pid) * PID_SLOTS);
    pids = fresh;
    pid_count = 0;
    for (uint32_t i = 0; i < PID_SLOTS; i++) {
        if (old[i].pid != 0 && old[i].res != NULL && old[i].res != res)
            insert_pid(old[i].pid, old[i].res);
    }
    enif_free(old);
}

void fo_router_unregister(fo_session_res *res)
{
    int found = 0;
    enif_rwlock_rwlock(lock);
    for (uint32_t i = 0; i < FO_ROUTER_MAX_SESSIONS; i++) {
        if (labels[i].res == res) {
            labels[i].res = NULL;
            session_count--;
            found = 1;
        }
    }
    if (found)
        drop_pids_of(res);
    enif_rwlock_rwunlock(lock);
    if (found)
        enif_release_resource(res);
}

static fo_session_res *kept(fo_session_res *res)
{
    if (res != NULL)
        enif_keep_resource(res);
    return res;
}

fo_session_res *fo_router_by_label(uint64_t label)
{
    fo_session_res *res = NULL;
    enif_rwlock_rlock(lock);
    for (uint32_t i = 0; i < FO_ROUTER_MAX_SESSIONS && res == NULL; i++) {
        if (labels[i].res != NULL && labels[i].label == label)
            res = kept(labels[i].res);
    }
    enif_rwlock_runlock(lock);
    return res;
}

fo_session_res *fo_router_by_pid(uint64_t pid)
{
    fo_session_res *res = NULL;
    enif_rwlock_rlock(lock);
    if (pid_count > 0) {
        uint32_t i = pid_slot(pid);
        if (pids[i].pid == pid)
            res = kept(pids[i].res);
    }
    enif_rwlock_runlock(lock);
    return res;
}

int fo_router_map_pid(uint64_t pid, fo_session_res *res)
{
    enif_rwlock_rwlock(lock);
    int ok = insert_pid(pid, res);
    enif_rwlock_rwunlock(lock);
    return ok;
}

uint32_t fo_router_sessions(void)
{
    enif_rwlock_rlock(lock);
    uint32_t n = session_count;
    enif_rwlock_runlock(lock);
    return n;
}
