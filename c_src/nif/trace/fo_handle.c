#include "fo_handle.h"

#include "fo_router.h"
#include "fo_tracer_slots.h"

static ErlNifResourceType *handle_type;

typedef struct {
    fo_session_res *res;
} handle;

/* The owner's last reference is gone: no callback may reach the session
 * through its slot from now on (the slot lock makes sure none is inside),
 * then the handle's own reference goes. */
static void handle_dtor(ErlNifEnv *env, void *obj)
{
    (void)env;
    handle *h = obj;
    if (h->res != NULL) {
        fo_resource_close(h->res); /* nothing can stop or finish it any more */
        fo_tracer_slots_unregister(h->res);
        enif_release_resource(h->res);
        h->res = NULL;
    }
}

int fo_handle_open(ErlNifEnv *env)
{
    ErlNifResourceFlags tried;
    handle_type = enif_open_resource_type(env, NULL, "flame_on_session_handle", handle_dtor,
                                          ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER, &tried);
    return handle_type != NULL;
}

ERL_NIF_TERM fo_handle_make(ErlNifEnv *env, fo_session_res *res)
{
    handle *h = enif_alloc_resource(handle_type, sizeof(handle));
    if (h == NULL)
        return enif_raise_exception(env, enif_make_atom(env, "enomem"));
    enif_keep_resource(res);
    h->res = res;
    ERL_NIF_TERM term = enif_make_resource(env, h);
    enif_release_resource(h);
    return term;
}

int fo_handle_get(ErlNifEnv *env, ERL_NIF_TERM term, fo_session_res **out)
{
    void *obj;
    if (!enif_get_resource(env, term, handle_type, &obj) || ((handle *)obj)->res == NULL)
        return 0;
    *out = ((handle *)obj)->res;
    return 1;
}

void fo_handle_stop(fo_session_res *res)
{
    fo_resource_mark_stopped(res);
    /* the callbacks drop every event from here on */
    fo_tracer_slots_unregister(res);
    if (res->xproc != NULL)
        fo_router_unregister(res);
}
