#include "fo_atoms.h"

#define FO_ATOM_DEFINE(name) ERL_NIF_TERM fo_atom_##name;
FO_ATOMS(FO_ATOM_DEFINE)
#undef FO_ATOM_DEFINE
ERL_NIF_TERM fo_atom_native_module;
ERL_NIF_TERM fo_atom_gen_call;

void fo_atoms_init(ErlNifEnv *env)
{
#define FO_ATOM_MAKE(name) fo_atom_##name = enif_make_atom(env, #name);
    FO_ATOMS(FO_ATOM_MAKE)
#undef FO_ATOM_MAKE
    fo_atom_native_module = enif_make_atom(env, "Elixir.FlameOn.Client.Core.Native");
    fo_atom_gen_call = enif_make_atom(env, "$gen_call");
}
