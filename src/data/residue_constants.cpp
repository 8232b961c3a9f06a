#include "data/residue_constants.h"

namespace megafold::data {
namespace {

struct Residue {
  std::string_view name;
  char letter;
  std::array<std::string_view, kMaxAtomsPerToken> atoms;
};

// Sugar-phosphate backbone atoms in CCD order (the leaving OP3 dropped, as in a polymer).
#define MF_RNA_BACKBONE "P", "OP1", "OP2", "O5'", "C5'", "C4'", "O4'", "C3'", "O3'", "C2'", "O2'", "C1'"
#define MF_DNA_BACKBONE "P", "OP1", "OP2", "O5'", "C5'", "C4'", "O4'", "C3'", "O3'", "C2'", "C1'"
#define MF_ADENINE "N9", "C8", "N7", "C5", "C6", "N6", "N1", "C2", "N3", "C4"
#define MF_GUANINE "N9", "C8", "N7", "C5", "C6", "O6", "N1", "C2", "N2", "N3", "C4"
#define MF_CYTOSINE "N1", "C2", "O2", "N3", "C4", "N4", "C5", "C6"

// Indexed by token type. Amino acids alphabetical by three-letter code (as AF2/AF3 order them),
// then UNK, RNA, DNA (AF3 SI Table 13); heavy atoms in CCD order without leaving atoms.
const std::array<Residue, kNumResidueTypes> kResidues = {{
    {"ALA", 'A', {"N", "CA", "C", "O", "CB"}},
    {"ARG", 'R', {"N", "CA", "C", "O", "CB", "CG", "CD", "NE", "CZ", "NH1", "NH2"}},
    {"ASN", 'N', {"N", "CA", "C", "O", "CB", "CG", "OD1", "ND2"}},
    {"ASP", 'D', {"N", "CA", "C", "O", "CB", "CG", "OD1", "OD2"}},
    {"CYS", 'C', {"N", "CA", "C", "O", "CB", "SG"}},
    {"GLN", 'Q', {"N", "CA", "C", "O", "CB", "CG", "CD", "OE1", "NE2"}},
    {"GLU", 'E', {"N", "CA", "C", "O", "CB", "CG", "CD", "OE1", "OE2"}},
    {"GLY", 'G', {"N", "CA", "C", "O"}},
    {"HIS", 'H', {"N", "CA", "C", "O", "CB", "CG", "ND1", "CD2", "CE1", "NE2"}},
    {"ILE", 'I', {"N", "CA", "C", "O", "CB", "CG1", "CG2", "CD1"}},
    {"LEU", 'L', {"N", "CA", "C", "O", "CB", "CG", "CD1", "CD2"}},
    {"LYS", 'K', {"N", "CA", "C", "O", "CB", "CG", "CD", "CE", "NZ"}},
    {"MET", 'M', {"N", "CA", "C", "O", "CB", "CG", "SD", "CE"}},
    {"PHE", 'F', {"N", "CA", "C", "O", "CB", "CG", "CD1", "CD2", "CE1", "CE2", "CZ"}},
    {"PRO", 'P', {"N", "CA", "C", "O", "CB", "CG", "CD"}},
    {"SER", 'S', {"N", "CA", "C", "O", "CB", "OG"}},
    {"THR", 'T', {"N", "CA", "C", "O", "CB", "OG1", "CG2"}},
    {"TRP", 'W', {"N", "CA", "C", "O", "CB", "CG", "CD1", "CD2", "NE1", "CE2", "CE3", "CZ2", "CZ3", "CH2"}},
    {"TYR", 'Y', {"N", "CA", "C", "O", "CB", "CG", "CD1", "CD2", "CE1", "CE2", "CZ", "OH"}},
    {"VAL", 'V', {"N", "CA", "C", "O", "CB", "CG1", "CG2"}},
    {"UNK", 'X', {"N", "CA", "C", "O", "CB"}},
    {"A", 'A', {MF_RNA_BACKBONE, MF_ADENINE}},
    {"G", 'G', {MF_RNA_BACKBONE, MF_GUANINE}},
    {"C", 'C', {MF_RNA_BACKBONE, MF_CYTOSINE}},
    {"U", 'U', {MF_RNA_BACKBONE, "N1", "C2", "O2", "N3", "C4", "O4", "C5", "C6"}},
    {"N", 'N', {MF_RNA_BACKBONE}},
    {"DA", 'A', {MF_DNA_BACKBONE, MF_ADENINE}},
    {"DG", 'G', {MF_DNA_BACKBONE, MF_GUANINE}},
    {"DC", 'C', {MF_DNA_BACKBONE, MF_CYTOSINE}},
    {"DT", 'T', {MF_DNA_BACKBONE, "N1", "C2", "O2", "N3", "C4", "O4", "C5", "C7", "C6"}},
    {"DN", 'N', {MF_DNA_BACKBONE}},
}};

#undef MF_RNA_BACKBONE
#undef MF_DNA_BACKBONE
#undef MF_ADENINE
#undef MF_GUANINE
#undef MF_CYTOSINE

constexpr int kMet = 12, kGly = 7;
const std::array<std::string_view, kMaxAtomsPerToken> kNoAtoms{};

// First and last token type of each molecule type's residues.
std::pair<int, int> type_range(MolType m) {
  switch (m) {
    case MolType::kProtein: return {0, kUnknownAminoAcid};
    case MolType::kRna: return {kRnaA, kUnknownRna};
    case MolType::kDna: return {kDnaA, kUnknownDna};
    case MolType::kLigand: break;
  }
  return {1, 0};
}

}  // namespace

std::string_view mol_type_name(MolType m) {
  switch (m) {
    case MolType::kProtein: return "protein";
    case MolType::kRna: return "rna";
    case MolType::kDna: return "dna";
    case MolType::kLigand: return "ligand";
  }
  return "?";
}

MolType mol_type_of(int t) {
  if (t >= kRnaA && t <= kUnknownRna) return MolType::kRna;
  if (t >= kDnaA && t <= kUnknownDna) return MolType::kDna;
  return MolType::kProtein;
}

int unknown_type(MolType m) {
  switch (m) {
    case MolType::kRna: return kUnknownRna;
    case MolType::kDna: return kUnknownDna;
    default: return kUnknownAminoAcid;
  }
}

int residue_type(MolType m, std::string_view code) {
  if (m == MolType::kProtein && code == "MSE") return kMet;  // selenomethionine, common in crystal structures
  const auto [lo, hi] = type_range(m);
  for (int t = lo; t <= hi; ++t)
    if (kResidues[t].name == code) return t;
  return -1;
}

int amino_acid_index(std::string_view three_letter) { return residue_type(MolType::kProtein, three_letter); }

std::string_view residue_name(int t) {
  return t >= 0 && t < kNumResidueTypes ? kResidues[t].name : std::string_view("???");
}

char residue_letter(int t) { return t >= 0 && t < kNumResidueTypes ? kResidues[t].letter : '-'; }

int amino_acid_of_letter(char c) {
  static const std::array<int8_t, 26> table = [] {
    std::array<int8_t, 26> t;
    t.fill(-1);
    for (int r = 0; r < kNumAminoAcids; ++r) t[kResidues[r].letter - 'A'] = static_cast<int8_t>(r);
    for (char x : {'X', 'B', 'Z', 'J', 'U', 'O'}) t[x - 'A'] = kUnknownAminoAcid;
    return t;
  }();
  if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return c >= 'A' && c <= 'Z' ? table[c - 'A'] : -1;
}

int nucleotide_of_letter(MolType m, char c) {
  if (m != MolType::kRna && m != MolType::kDna) return -1;
  if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  if (c == 'X') c = 'N';
  const auto [lo, hi] = type_range(m);
  for (int t = lo; t <= hi; ++t)
    if (kResidues[t].letter == c) return t;
  return -1;
}

int atom_slot(int t, std::string_view atom_name) {
  if (t < 0 || t >= kNumResidueTypes) return -1;
  if (t == kMet && atom_name == "SE") atom_name = "SD";
  const auto& atoms = kResidues[t].atoms;
  for (int i = 0; i < kMaxAtomsPerToken; ++i)
    if (!atoms[i].empty() && atoms[i] == atom_name) return i;
  return -1;
}

const std::array<std::string_view, kMaxAtomsPerToken>& atom_names(int t) {
  return t >= 0 && t < kNumResidueTypes ? kResidues[t].atoms : kNoAtoms;
}

int atom_count(int t) {
  int n = 0;
  for (const std::string_view a : atom_names(t)) n += a.empty() ? 0 : 1;
  return n;
}

int representative_atom_slot(int t) {
  if (t == kGly) return kAtomCA;
  if (t <= kUnknownAminoAcid) return kAtomCB;
  if (t == kUnknownRna || t == kUnknownDna) return atom_slot(t, "C1'");
  const bool purine = t == kRnaA || t == kRnaG || t == kDnaA || t == kDnaG;
  return atom_slot(t, purine ? "C4" : "C2");
}

int centre_atom_slot(int t) {
  if (t <= kUnknownAminoAcid || t >= kNumResidueTypes) return kAtomCA;
  return atom_slot(t, "C1'");
}

std::array<int, 3> frame_atom_slots(int t) {
  if (t < 0 || t >= kNumResidueTypes) return {-1, -1, -1};
  if (t <= kUnknownAminoAcid) return {kAtomN, kAtomCA, kAtomC};
  return {atom_slot(t, "C1'"), atom_slot(t, "C3'"), atom_slot(t, "C4'")};
}

}  // namespace megafold::data
