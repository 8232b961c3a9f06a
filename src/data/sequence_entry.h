#pragma once
// Entries built from sequences and ligand codes instead of coordinates (FASTA and AlphaFold 3
// JSON input): tokens appended chain by chain, nothing resolved.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "data/ccd.h"
#include "data/structure.h"

namespace megafold::data {

// One standard residue token of type t: residue `index` of chain `asym`.
void push_residue(Entry& e, int t, int asym, int32_t index);

// CCD component `code` (any case) as residue `index` of chain `asym`: one token per
// non-leaving heavy atom, reference positions and bonds from the CCD. mol: kLigand, or the
// polymer's type for a modified residue (its tokens then take the polymer's unknown residue
// type). Adds nothing and returns the reason when the CCD (or a table at all) lacks the
// component or it has no heavy atoms.
std::optional<std::string> push_component(Entry& e, std::string code, int asym, int32_t index, MolType mol,
                                          const Ccd* ccd);

// A SMILES ligand as residue 1 of chain `asym`, named LIG, LIG2, ... with an RDKit ETKDGv3
// conformer as its reference (seeded by the SMILES text, so a prediction is repeatable).
// Throws megafold::Error saying why RDKit could not use it (or that RDKit is absent).
void push_smiles(Entry& e, const std::string& smiles, int asym);

// Token and slot of atom `name` of residue `index` in chain `asym` (a standard residue's slot,
// or the per-atom token so named); nullopt if there is none.
std::optional<std::pair<int, int>> find_atom(const Entry& e, int asym, int32_t index, std::string_view name);

// The covalent links of chain `asym`'s per-atom (modified) residues to their neighbours: C-N
// for proteins, O3'-P for nucleic acids, where both atoms exist.
void link_modified_residues(Entry& e, int asym);

// Completes an entry built with the functions above: bonds sorted, coordinates zero, no atom
// resolved, entities and symmetry copies assigned. Throws megafold::Error (naming `origin`)
// when no token was built.
void finish_sequence_entry(Entry& e, const std::string& origin);

}  // namespace megafold::data
