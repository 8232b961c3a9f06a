#pragma once
// Ligands given as SMILES (AF3 SI Sec. 2.8: reference conformers from RDKit's ETKDG). RDKit
// lives in a plugin, libmegafold_rdkit.so (src/data/rdkit/), built when the RDKit headers and
// libraries are found and loaded on first use, so the trainer and its other inputs run on
// hosts without RDKit; there a SMILES ligand is an error that says so.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "data/structure.h"

namespace megafold::data {

struct SmilesLigand {
  std::vector<TokenAtom> atoms;              // heavy atoms; names element + ordinal (C1, C2, O1)
  std::vector<std::array<int32_t, 2>> bonds;  // between heavy atoms, indices into atoms
};

// Heavy atoms, formal charges, bonds and an ETKDGv3 conformer (seeded: the same SMILES and
// seed give the same coordinates; random starting coordinates when the first embedding fails)
// of `smiles`. Throws megafold::Error with RDKit's reason when the SMILES does not parse, has
// no heavy atom or cannot be embedded, or when the plugin is not available (naming where it
// was looked for).
SmilesLigand smiles_ligand(const std::string& smiles, uint64_t seed);

// Where the plugin is looked for: $MEGAFOLD_RDKIT_PLUGIN, else the path it was built at.
std::string rdkit_plugin_path();

}  // namespace megafold::data
