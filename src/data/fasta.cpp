// FASTA input for prediction: sequences only, no gemmi.
#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "data/structure.h"

namespace megafold::data {
namespace {

// Chain ids A..Z, then AA, AB, ... as mmCIF allows.
std::string chain_name(int i) {
  std::string s;
  for (++i; i > 0; i = (i - 1) / 26) s.insert(s.begin(), static_cast<char>('A' + (i - 1) % 26));
  return s;
}

}  // namespace

bool is_fasta_file(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".fasta" || ext == ".fa" || ext == ".faa" || ext == ".fas";
}

Entry load_fasta(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open FASTA file");
  Entry e;
  e.path = path;
  e.name = std::filesystem::path(path).stem().string();
  std::string line;
  int line_no = 0, record_line = 0;
  bool in_record = false, ended = false;
  auto close_record = [&] {
    if (!in_record) return;
    if (e.n_tokens() == 0 || e.asym_id.back() != e.n_chains() - 1)
      throw Error(path + ":" + std::to_string(record_line) + ": record '" + e.chain_ids.back() + "' has no residues");
  };
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == ';') continue;
    if (line[0] == '>') {
      close_record();
      in_record = true;
      ended = false;
      record_line = line_no;
      e.chain_ids.push_back(chain_name(e.n_chains()));
      continue;
    }
    if (!in_record) throw Error(path + ":" + std::to_string(line_no) + ": sequence before the first '>' header");
    for (size_t k = 0; k < line.size(); ++k) {
      const char c = line[k];
      if (std::isspace(static_cast<unsigned char>(c))) continue;
      if (c == '*' && !ended) {
        ended = true;
        continue;
      }
      const int t = ended ? -1 : amino_acid_of_letter(c);
      if (t < 0)
        throw Error(path + ":" + std::to_string(line_no) + ":" + std::to_string(k + 1) + ": '" + std::string(1, c) +
                    "' is not an amino-acid code" + (ended ? " (after the record's terminating '*')" : ""));
      const int asym = e.n_chains() - 1;
      const bool first = e.n_tokens() == 0 || e.asym_id.back() != asym;
      e.restype.push_back(static_cast<int8_t>(t));
      e.residue_index.push_back(first ? 1 : e.residue_index.back() + 1);
      e.author_index.push_back(e.residue_index.back());
      e.insertion_codes.push_back(' ');
      e.asym_id.push_back(asym);
    }
  }
  if (in.bad()) throw Error(path + ": read error");
  if (!in_record) throw Error(path + ": no FASTA record (no line starting with '>')");
  close_record();
  e.coords.assign(static_cast<size_t>(e.n_tokens()) * kMaxAtomsPerToken * 3, 0.f);
  e.atom_mask.assign(static_cast<size_t>(e.n_tokens()) * kMaxAtomsPerToken, 0);
  e.fill_residue_defaults();
  assign_entities(e);
  return e;
}

}  // namespace megafold::data
