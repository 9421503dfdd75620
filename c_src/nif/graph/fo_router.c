#include "fo_router.h"

#include <string.h>

#include "fo_hash.h"
#include "fo_xproc.h"

typedef struct {
    uint64_t label;
    fo_session_res *res; /* NULL: free */
} route_label;

typedef struct {
    uint64_t pid;        /* 0: free */
    fo_session_res *res;
} route_pid;

/* The pid table starts small and doubles, kept at most half full, never
 * past FO_ROUTER_MAX_PIDS entries; entries are deleted in place (backward
 * shift), so a finished trace costs only its own processes. */
#define PID_SLOTS_INITIAL 1024u

static ErlNifRWLock *lock;
static route_label labels[FO_ROUTER_MAX_SESSIONS];
static route_pid *pids;
static uint32_t pid_mask;
static uint32_t pid_count;
static uint32_t session_count;

int fo_router_init(void)
{
    if (lock != NULL)
        return 1;
    pids = enif_alloc(sizeof(route_pid) * PID_SLOTS_INITIAL);
    lock = enif_rwlock_create("flame_on_router");
    if (pids == NULL || lock == NULL)
        return 0;
    memset(pids, 0, sizeof(route_pid) * PID_SLOTS_INITIAL);
    pid_mask = PID_SLOTS_INITIAL - 1;
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

static uint32_t home(uint64_t pid)
{
    return (uint32_t)fo_hash_mix(pid) & pid_mask;
}

static uint32_t pid_slot(uint64_t pid)
{
    uint32_t i = home(pid);
    while (pids[i].pid != 0 && pids[i].pid != pid)
        i = (i + 1) & pid_mask;
    return i;
}

static int grow_pids(void)
{
    uint32_t old_size = pid_mask + 1;
    if (old_size >= FO_ROUTER_MAX_PIDS * 2u)
        return 0;
    route_pid *old = pids;
    route_pid *fresh = enif_alloc(sizeof(route_pid) * old_size * 2);
    if (fresh == NULL)
        return 0;
    memset(fresh, 0, sizeof(route_pid) * old_size * 2);
    pids = fresh;
    pid_mask = old_size * 2 - 1;
    for (uint32_t i = 0; i < old_size; i++) {
        if (old[i].pid != 0)
            pids[pid_slot(old[i].pid)] = old[i];
    }
    enif_free(old);
    return 1;
}

/* pid works for res now: a server takes the session of each request it
 * receives, so its events follow the trace it is working for. */
static int insert_pid(uint64_t pid, fo_session_res *res)
{
    uint32_t i = pid_slot(pid);
    if (pids[i].pid == pid) {
        pids[i].res = res;
        return 1;
    }
    if (pid_count >= FO_ROUTER_MAX_PIDS)
        return 0;
    if ((pid_count + 1) * 2 > pid_mask + 1) {
        if (!grow_pids())
            return 0;
        i = pid_slot(pid);
    }
    pids[i].pid = pid;
    pids[i].res = res;
    pid_count++;
    return 1;
}

/* Linear-probing delete: shift later entries of the cluster back so every
 * lookup still finds them. */
static void delete_slot(uint32_t i)
{
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & pid_mask;
        if (pids[j].pid == 0)
            break;
        uint32_t k = home(pids[j].pid);
        /* move j into the hole at i unless its home lies in (i, j] */
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            pids[i] = pids[j];
            i = j;
        }
    }
    pids[i].pid = 0;
    pids[i].res = NULL;
    pid_count--;
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
        res->xproc->routed = 1;
        session_count++;
        enif_keep_resource(res);
        ok = 1;
    }
    enif_rwlock_rwunlock(lock);
    return ok;
}

/* The registered session whose root pid is, if any: a root that served
 * another trace's request goes back to its own trace afterwards. The
 * roots are read without their sessions' locks (a session's lock comes
 * before the router's, never after: fo_router_role), hence atomically.
 * A root being moved may read old or new: either way the session found
 * is registered (this lock), so an entry made for it is covered. */
static fo_session_res *session_rooted_at(uint64_t pid, const fo_session_res *except)
{
    for (uint32_t i = 0; i < FO_ROUTER_MAX_SESSIONS; i++) {
        if (labels[i].res != NULL && labels[i].res != except && fo_xproc_root(labels[i].res->xproc) == pid)
            return labels[i].res;
    }
    return NULL;
}

static void drop_pids_of(const fo_session_res *res)
{
    for (uint32_t i = 0; i <= pid_mask;) {
        if (pids[i].pid != 0 && pids[i].res == res) {
            fo_session_res *home_session = session_rooted_at(pids[i].pid, res);
            if (home_session != NULL) {
                pids[i].res = home_session;
                i++;
            } else {
                delete_slot(i); /* an entry may have shifted into i: look again */
            }
        } else {
            i++;
        }
    }
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
    if (found) {
        res->xproc->routed = 0;
        drop_pids_of(res);
    }
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

/* Only for a session the router holds. The callers see the session live
 * under its lock, but that does not order them after stop/1's unregister:
 * fo_root_move (capture_next's root) lets the lock go before it comes
 * here, and stop/1 clears `active` after its own critical section, so
 * even a follower joining (fo_graph_tracer.c, the session's lock held)
 * may come here once unregister has dropped the session's pids. Checked
 * in the critical section unregister's cleanup also runs in: either the
 * entry comes first and drop_pids_of removes it, or it is refused. */
int fo_router_map_pid(uint64_t pid, fo_session_res *res)
{
    enif_rwlock_rwlock(lock);
    int ok = res->xproc->routed && insert_pid(pid, res);
    enif_rwlock_rwunlock(lock);
    return ok;
}

void fo_router_restore_root(uint64_t pid)
{
    /* Servers that are no trace's root, the common case, only read. */
    enif_rwlock_rlock(lock);
    int away = session_rooted_at(pid, NULL) != NULL && pids[pid_slot(pid)].res != session_rooted_at(pid, NULL);
    enif_rwlock_runlock(lock);
    if (!away)
        return;
    enif_rwlock_rwlock(lock);
    fo_session_res *home_session = session_rooted_at(pid, NULL);
    if (home_session != NULL)
        insert_pid(pid, home_session);
    enif_rwlock_rwunlock(lock);
}

void fo_router_unmap_pid(uint64_t pid, const fo_session_res *res)
{
    enif_rwlock_rwlock(lock);
    if (pid_count > 0) {
        uint32_t i = pid_slot(pid);
        if (pids[i].pid == pid && pids[i].res == res) {
            fo_session_res *home_session = session_rooted_at(pid, res);
            if (home_session != NULL)
                pids[i].res = home_session;
            else
                delete_slot(i);
        }
    }
    enif_rwlock_rwunlock(lock);
}

uint32_t fo_router_sessions(void)
{
    enif_rwlock_rlock(lock);
    uint32_t n = session_count;
    enif_rwlock_runlock(lock);
    return n;
}

int fo_router_role(uint64_t pid)
{
    /* The sessions are kept and looked at after the router's lock is
     * released: tracer callbacks take a session's lock, then the router's. */
    fo_session_res *sessions[FO_ROUTER_MAX_SESSIONS];
    uint32_t n = 0;
    enif_rwlock_rlock(lock);
    int role = session_rooted_at(pid, NULL) != NULL ? 2 : (pid_count > 0 && pids[pid_slot(pid)].pid == pid);
    for (uint32_t i = 0; i < FO_ROUTER_MAX_SESSIONS && role == 0; i++) {
        if (labels[i].res != NULL)
            sessions[n++] = kept(labels[i].res);
    }
    enif_rwlock_runlock(lock);
    for (uint32_t i = 0; i < n; i++) {
        fo_session_res *res = sessions[i];
        fo_spin_lock(&res->lock);
        if (res->xproc != NULL && res->core != NULL && fo_graph_following(res->xproc->graph, pid))
            role = 1;
        fo_spin_unlock(&res->lock);
        enif_release_resource(res);
    }
    return role;
}
