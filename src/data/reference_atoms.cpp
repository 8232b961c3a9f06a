#include "data/reference_atoms.h"

#include <charconv>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/elements.h"

namespace megafold::data {
namespace {

int residue_type_of_name(std::string_view name) {
  for (int t = 0; t < kNumResidueTypes; ++t)
    if (residue_name(t) == name) return t;
  return -1;
}

std::vector<std::string_view> split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= line.size(); ++i)
    if (i == line.size() || line[i] == sep) {
      out.push_back(line.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

template <typename T>
bool parse_number(std::string_view s, T& out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

}  // namespace

ReferenceTable parse_reference_atoms(std::string_view text, std::string_view source) {
  ReferenceTable table{};
  std::array<std::array<bool, kMaxAtomsPerToken>, kNumResidueTypes> seen{};
  int line_no = 0;
  bool header = false;
  auto fail = [&](const std::string& why) {
    throw Error(std::string(source) + (line_no > 0 ? ":" + std::to_string(line_no) : "") + ": " + why);
  };
  for (std::string_view line : split(text, '\n')) {
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    const std::vector<std::string_view> f = split(line, '\t');
    if (!header) {  // column names
      if (f.size() != 7 || f[0] != "residue") fail("expected the header 'residue atom element charge x y z'");
      header = true;
      continue;
    }
    if (f.size() != 7) fail("expected 7 tab-separated fields, got " + std::to_string(f.size()));
    const int t = residue_type_of_name(f[0]);
    if (t < 0) fail("unknown residue '" + std::string(f[0]) + "'");
    const int slot = atom_slot(t, f[1]);
    if (slot < 0) continue;  // not part of the token's slot layout
    if (seen[t][slot]) fail("atom " + std::string(f[1]) + " of " + std::string(f[0]) + " given twice");
    seen[t][slot] = true;
    ReferenceAtom& a = table[t][slot];
    a.element = atomic_number(f[2]);
    if (a.element == 0) fail("unknown element '" + std::string(f[2]) + "'");
    if (!parse_number(f[3], a.charge)) fail("charge '" + std::string(f[3]) + "' is not an integer");
    for (int k = 0; k < 3; ++k)
      if (!parse_number(f[4 + k], a.pos[k])) fail("coordinate '" + std::string(f[4 + k]) + "' is not a number");
  }
  line_no = 0;  // what follows concerns the whole table
  if (!header) fail("no header line");
  for (int t = 0; t < kNumResidueTypes; ++t)
    for (int s = 0; s < kMaxAtomsPerToken; ++s)
      if (!atom_names(t)[s].empty() && !seen[t][s])
        fail("no reference atom " + std::string(atom_names(t)[s]) + " for " + std::string(residue_name(t)));
  return table;
}

const ReferenceTable& reference_atoms() {
  static const ReferenceTable table = parse_reference_atoms(reference_atoms_tsv(), "data/reference/polymer_residues.tsv");
  return table;
}

}  // namespace megafold::data
