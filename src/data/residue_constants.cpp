#include "data/residue_constants.h"

namespace megafold::data {
namespace {

struct AminoAcid {
  std::string_view name;
  char letter;
  std::array<std::string_view, kMaxAtomsPerToken> atoms;
};

// Alphabetical by three-letter code, as AF2/AF3 order the 20 amino acids; UNK last.
constexpr std::array<AminoAcid, kNumAminoAcids + 1> kAminoAcids = {{
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
}};

constexpr int kMet = 12;

}  // namespace

int amino_acid_index(std::string_view three_letter) {
  for (int t = 0; t <= kNumAminoAcids; ++t)
    if (kAminoAcids[t].name == three_letter) return t;
  if (three_letter == "MSE") return kMet;  // selenomethionine, common in crystal structures
  return -1;
}

std::string_view amino_acid_name(int t) {
  return t >= 0 && t <= kNumAminoAcids ? kAminoAcids[t].name : std::string_view("???");
}

char amino_acid_letter(int t) { return t >= 0 && t <= kNumAminoAcids ? kAminoAcids[t].letter : 'X'; }

int amino_acid_of_letter(char c) {
  static const std::array<int8_t, 26> table = [] {
    std::array<int8_t, 26> t;
    t.fill(-1);
    for (int r = 0; r < kNumAminoAcids; ++r) t[kAminoAcids[r].letter - 'A'] = static_cast<int8_t>(r);
    for (char x : {'X', 'B', 'Z', 'J', 'U', 'O'}) t[x - 'A'] = kUnknownAminoAcid;
    return t;
  }();
  if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return c >= 'A' && c <= 'Z' ? table[c - 'A'] : -1;
}

int atom_slot(int t, std::string_view atom_name) {
  if (t < 0 || t > kNumAminoAcids) return -1;
  if (t == kMet && atom_name == "SE") atom_name = "SD";
  const auto& atoms = kAminoAcids[t].atoms;
  for (int i = 0; i < kMaxAtomsPerToken; ++i)
    if (!atoms[i].empty() && atoms[i] == atom_name) return i;
  return -1;
}

const std::array<std::string_view, kMaxAtomsPerToken>& atom_names(int t) {
  return kAminoAcids[t >= 0 && t <= kNumAminoAcids ? t : kUnknownAminoAcid].atoms;
}

int representative_atom_slot(int t) { return t == 7 /* GLY */ ? kAtomCA : kAtomCB; }

}  // namespace megafold::data
