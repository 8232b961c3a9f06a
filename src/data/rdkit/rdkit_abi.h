#pragma once
// The C interface between the data layer and the RDKit plugin (libmegafold_rdkit.so): plain
// structs, so the plugin can be built and loaded apart from the rest.
#include <stddef.h>
#include <stdint.h>

extern "C" {

struct MfRdkitAtom {
  char name[4];  // NUL-padded
  uint8_t element;
  int8_t charge;
  uint8_t pad[2];
  float pos[3];
};

// Writes up to atom_capacity heavy atoms and bond_capacity bonds (pairs of atom indices) of an
// ETKDGv3 conformer of `smiles`; returns the number of atoms and sets *n_bonds, or returns -1
// with a NUL-terminated reason in `error` (error_size bytes).
typedef int (*MfRdkitConformerFn)(const char* smiles, uint64_t seed, MfRdkitAtom* atoms, int atom_capacity,
                                  int32_t* bonds, int bond_capacity, int* n_bonds, char* error, size_t error_size);

int megafold_rdkit_conformer(const char* smiles, uint64_t seed, MfRdkitAtom* atoms, int atom_capacity, int32_t* bonds,
                             int bond_capacity, int* n_bonds, char* error, size_t error_size);
}
