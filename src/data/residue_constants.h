#pragma once
// Token vocabulary and the dense per-token heavy-atom layout.
//
// Token types follow AF3's 32-class restype (SI Table 13): 20 amino acids, unknown amino
// acid, 4 RNA + unknown, 4 DNA + unknown, gap. Proteins are parsed today; nucleic acids and
// ligands take the remaining indices of this vocabulary when they are added.
//
// Atoms: each token owns kMaxAtomsPerToken slots; slot order per amino acid is fixed
// (N, CA, C, O, then side chain), and a mask marks atoms that exist and were resolved.
#include <array>
#include <cstdint>
#include <string_view>

namespace megafold::data {

inline constexpr int kNumTokenTypes = 32;
inline constexpr int kNumAminoAcids = 20;
inline constexpr int kUnknownAminoAcid = 20;  // "UNK"
inline constexpr int kGapToken = 31;
inline constexpr int kMaxAtomsPerToken = 14;  // TRP has 14 heavy atoms
inline constexpr int kAtomN = 0, kAtomCA = 1, kAtomC = 2, kAtomO = 3, kAtomCB = 4;

// Index in [0, 20] of a residue by its PDB three-letter code; standard amino acids map to
// 0..19, a few common modified residues to their parent (MSE -> MET), everything else -1.
int amino_acid_index(std::string_view three_letter);

// Three-letter code of token type t (amino acids and UNK; "???" for other types).
std::string_view amino_acid_name(int t);

// One-letter code of token type t ('X' for UNK and non-protein types).
char amino_acid_letter(int t);

// Token type of a one-letter amino-acid code, either case: the 20 standard letters, and X, B,
// Z, J, U, O as UNK; -1 for anything else.
int amino_acid_of_letter(char c);

// Slot of atom `atom_name` in the dense layout of amino acid t, or -1 if t has no such atom.
// Selenium of MSE is accepted as SD of MET.
int atom_slot(int t, std::string_view atom_name);

// Heavy-atom names of amino acid t in slot order ("" past the residue's last atom).
const std::array<std::string_view, kMaxAtomsPerToken>& atom_names(int t);

// Representative atom for the distogram (AF3: CB, CA for glycine).
int representative_atom_slot(int t);

}  // namespace megafold::data
