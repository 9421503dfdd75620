#include "fo_root.h"

#include "fo_router.h"
#include "fo_xproc.h"

int fo_root_register(fo_session_res *res, uint64_t root)
{
    fo_xproc *x = res->xproc;
    if (x == NULL)
        return 0;
    fo_spin_lock(&res->lock);
    int fresh = fo_xproc_root(x) == 0 && res->core != NULL && atomic_load(&res->active);
    if (fresh)
        fo_xproc_set_root(x, root);
    fo_spin_unlock(&res->lock);
    return fresh && fo_router_register(res, x->label, root);
}

int fo_root_move(fo_session_res *res, uint64_t root)
{
    fo_xproc *x = res->xproc;
    if (x == NULL)
        return 0;
    fo_spin_lock(&res->lock);
    int live = fo_xproc_root(x) != 0 && res->core != NULL && atomic_load(&res->active);
    if (live)
        fo_xproc_set_root(x, root);
    fo_spin_unlock(&res->lock);
    return live && fo_router_map_pid(root, res);
}

int fo_root_begin(fo_session_res *res, int64_t ts)
{
    fo_xproc *x = res->xproc;
    if (x == NULL)
        return 0;
    fo_spin_lock(&res->lock);
    uint64_t pid = fo_xproc_root(x);
    uint32_t root = pid == 0 || res->core == NULL ? FO_NONE : fo_graph_root(x->graph, pid, ts);
    fo_spin_unlock(&res->lock);
    return root != FO_NONE;
}
