#pragma once
// Per-atom reference features of the standard polymer residues (AF3 SI Sec. 2.8: ref_pos,
// ref_element, ref_charge; ref_mask by the slot layout): element, formal charge and ideal
// coordinates from the wwPDB Chemical Component Dictionary, in the dense slot layout of
// residue_constants.h. The table is data/reference/polymer_residues.tsv (its first line names
// the source), embedded at build time, so proteins and nucleic acids need nothing from disk at
// run time. Ligands and non-standard residues take theirs from the whole CCD (data/ccd.h).
#include <array>
#include <cstdint>
#include <string_view>

#include "data/residue_constants.h"

namespace megafold::data {

struct ReferenceAtom {
  int element = 0;              // atomic number; 0 = the token type has no atom in this slot
  int charge = 0;               // formal charge
  std::array<float, 3> pos{};   // CCD ideal coordinates, Angstrom, in the component's frame
};

// Indexed [token type][slot] for every residue type (all but the gap).
using ReferenceTable = std::array<std::array<ReferenceAtom, kMaxAtomsPerToken>, kNumResidueTypes>;

// The embedded table, parsed once.
const ReferenceTable& reference_atoms();

// Parses text in the format of polymer_residues.tsv ('#' comment lines, a header, then residue,
// atom, element, charge, x, y, z per line). Atoms without a slot in the layout (the CG of the
// CCD's UNK) are skipped; every slot of the layout must be given exactly once. Throws
// megafold::Error naming `source`, the line and the problem.
ReferenceTable parse_reference_atoms(std::string_view text, std::string_view source);

// Text of data/reference/polymer_residues.tsv (generated into the build by cmake/EmbedText.cmake).
std::string_view reference_atoms_tsv();

}  // namespace megafold::data
