#pragma once
// Token vocabulary, molecule types and the dense per-token heavy-atom layout.
//
// Token types follow AF3's 32-class restype (SI Table 13): 20 amino acids and UNK, RNA A G C U
// and N (unknown), DNA DA DG DC DT and DN (unknown), gap. Ligand and ion atoms, and the atoms of
// non-standard polymer residues, are tokens of their own (SI Sec. 2.6); their restype is the
// unknown type of their molecule (UNK for ligands).
//
// Atoms: each token owns kMaxAtomsPerToken slots. A standard residue's slots follow the CCD's
// heavy-atom order without leaving atoms (amino acids: N, CA, C, O, side chain; nucleotides: P,
// OP1, OP2, sugar, base); a per-atom token uses slot 0. A mask marks atoms that exist and were
// resolved.
#include <array>
#include <cstdint>
#include <string_view>

namespace megafold::data {

inline constexpr int kNumTokenTypes = 32;
inline constexpr int kNumAminoAcids = 20;
inline constexpr int kUnknownAminoAcid = 20;  // "UNK"
inline constexpr int kRnaA = 21, kRnaG = 22, kRnaC = 23, kRnaU = 24, kUnknownRna = 25;  // A G C U N
inline constexpr int kDnaA = 26, kDnaG = 27, kDnaC = 28, kDnaT = 29, kUnknownDna = 30;  // DA DG DC DT DN
inline constexpr int kGapToken = 31;
inline constexpr int kNumResidueTypes = 31;   // every type but the gap has a residue layout
inline constexpr int kMaxAtomsPerToken = 24;  // RNA G has 23 heavy atoms; AF3 pads to 24
inline constexpr int kAtomN = 0, kAtomCA = 1, kAtomC = 2, kAtomO = 3, kAtomCB = 4;

// Molecule type of a chain and its tokens (AF3 is_protein / is_rna / is_dna / is_ligand).
enum class MolType : int8_t { kProtein = 0, kRna = 1, kDna = 2, kLigand = 3 };
inline constexpr int kNumMolTypes = 4;
std::string_view mol_type_name(MolType m);  // "protein", "rna", "dna", "ligand"

// Molecule type of token type t (a standard residue type; the gap counts as protein).
MolType mol_type_of(int t);
// The unknown residue type of a polymer type (UNK, N, DN); UNK for ligands.
int unknown_type(MolType m);

// Index in [0, kNumResidueTypes) of a residue by its CCD code within molecule type m: the 20
// amino acids and UNK (MSE -> MET) for proteins, A G C U N for RNA, DA DG DC DT DN for DNA;
// -1 for anything else (and for every code when m is kLigand).
int residue_type(MolType m, std::string_view code);

// Index in [0, 20] of a residue by its PDB three-letter code; standard amino acids map to
// 0..19, MSE to MET, everything else -1.
int amino_acid_index(std::string_view three_letter);

// CCD code of token type t ("ALA", "A", "DA", ...; "???" for the gap).
std::string_view residue_name(int t);
// Kept for the protein-only callers: residue_name for amino acids.
inline std::string_view amino_acid_name(int t) { return residue_name(t); }

// One-letter code of token type t: amino acids as usual ('X' for UNK), nucleotides A G C U/T
// and N; '-' for the gap.
char residue_letter(int t);
inline char amino_acid_letter(int t) { return residue_letter(t); }

// Token type of a one-letter amino-acid code, either case: the 20 standard letters, and X, B,
// Z, J, U, O as UNK; -1 for anything else.
int amino_acid_of_letter(char c);

// Token type of a one-letter nucleotide code of molecule type m (kRna: A G C U, kDna: A G C
// T), either case; N and X as the unknown nucleotide; -1 for anything else.
int nucleotide_of_letter(MolType m, char c);

// Slot of atom `atom_name` in the dense layout of token type t, or -1 if t has no such atom.
// Selenium of MSE is accepted as SD of MET.
int atom_slot(int t, std::string_view atom_name);

// Heavy-atom names of token type t in slot order ("" past the residue's last atom; all "" for
// the gap).
const std::array<std::string_view, kMaxAtomsPerToken>& atom_names(int t);

// Heavy atoms of token type t.
int atom_count(int t);

// Representative atom of a residue token for the distogram (AF3 SI Sec. 4.4): CB (CA for
// glycine) for amino acids, C4 for purines, C2 for pyrimidines, C1' for N and DN. A per-atom
// token's atom is its slot 0 (Entry::representative_slot).
int representative_atom_slot(int t);

// Centre atom of a residue token (AF3 SI Sec. 2.6, spatial crops): CA for amino acids, C1'
// for nucleotides.
int centre_atom_slot(int t);

// Slots (a, b, c) of the atoms that define a residue token's frame for the aligned error (AF3
// SI Sec. 4.3.2; b is the origin): N, CA, C for amino acids, C1', C3', C4' for nucleotides;
// -1s for the gap.
std::array<int, 3> frame_atom_slots(int t);

}  // namespace megafold::data
